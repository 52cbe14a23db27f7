/**
 * The recorder's hand-over of a turn's calls to the turn's own write: a
 * turn's calls wait for it (never written beside the reply), `takeFor` gives
 * one session's calls, encoded, and nobody else's; a write that failed gives
 * them back to be written on their own, rebuilt whole. On a real SQLite file.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { OfflineModel } from '../../src/llm/offline-model.js';
import type { ModelRequest } from '../../src/llm/model-client.js';
import { CallRecorder } from '../../src/records/call-recorder.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

let dir: string;
let store: SqliteStore;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-recorder-'));
  store = new SqliteStore(path.join(dir, 'cairn.db'));
});

afterEach(async () => {
  await store.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const newSession = () =>
  store.createSession({
    agentName: 'assistant',
    mode: 'chat',
    systemPrompt: 'System prompt.',
    compactCount: 50,
  });

const chat = (text: string): ModelRequest => ({
  messages: [
    { role: 'system', content: 'System prompt.' },
    { role: 'user', content: text },
  ],
  purpose: 'chat',
});

const callsOf = async (sessionId: string) =>
  (await store.listModelCalls(sessionId, { limit: 10 })).items;

describe('CallRecorder.takeFor', () => {
  it("hands a turn's calls of one session to the turn's write, and leaves the rest to flush", async () => {
    const recorder = new CallRecorder({ store, enabled: true, warn: () => undefined });
    const model = recorder.instrument(new OfflineModel(), { provider: 'offline' });
    const [a, b] = [await newSession(), await newSession()];
    await model.complete(chat('for a'), { scope: { sessionId: a.id, turnSeq: 2 } });
    await model.complete(chat('for b'), { scope: { sessionId: b.id, turnSeq: 2 } });
    // A turn's calls wait for the turn: nothing is written on its own meanwhile.
    await new Promise((resolve) => setImmediate(resolve));
    expect(await callsOf(a.id)).toEqual([]);

    const taken = recorder.takeFor(a.id)!;
    expect(taken.calls.map((call) => call.session_id)).toEqual([a.id]);
    expect(recorder.takeFor(a.id)).toBeUndefined();
    await store.appendMessagesWithEvents(
      a.id,
      [{ role: 'assistant', content: 'reply' }],
      'message.created',
      { modelCalls: taken.calls },
    );
    taken.settle(true);
    await recorder.flush();
    expect(await callsOf(a.id)).toHaveLength(1);
    expect(await callsOf(b.id)).toHaveLength(1);
    const [recorded] = await callsOf(a.id);
    const found = await store.findModelCall(recorded!.id);
    expect(found?.request).toMatchObject({ messages: chat('for a').messages });
  });

  it('gives the calls back when the write failed: flush writes them, rebuilt whole', async () => {
    const recorder = new CallRecorder({ store, enabled: true, warn: () => undefined });
    const model = recorder.instrument(new OfflineModel(), { provider: 'offline' });
    const session = await newSession();
    await model.complete(chat('first'), { scope: { sessionId: session.id, turnSeq: 2 } });
    recorder.takeFor(session.id)!.settle(true); // taken and (as far as it knows) written
    await model.complete(chat('second'), { scope: { sessionId: session.id, turnSeq: 4 } });
    const failed = recorder.takeFor(session.id)!;
    expect(failed.calls).toHaveLength(1);
    failed.settle(false);
    await recorder.flush();
    // The first was never written, so the second must not be built on it.
    const [only] = await callsOf(session.id);
    expect(only).toBeDefined();
    const found = await store.findModelCall(only!.id);
    expect(found?.request).toMatchObject({ messages: chat('second').messages });
  });

  it('takes nothing with records off (the cost is kept at flush)', async () => {
    const recorder = new CallRecorder({ store, enabled: false, warn: () => undefined });
    const model = recorder.instrument(new OfflineModel(), { provider: 'offline' });
    const session = await newSession();
    await model.complete(chat('hello'), { scope: { sessionId: session.id, turnSeq: 2 } });
    expect(recorder.takeFor(session.id)).toBeUndefined();
    await recorder.flush();
    expect(await callsOf(session.id)).toEqual([]);
  });

  it('writes a call outside a turn on its own, without waiting for a flush', async () => {
    const recorder = new CallRecorder({ store, enabled: true, warn: () => undefined });
    const model = recorder.instrument(new OfflineModel(), { provider: 'offline' });
    const session = await newSession();
    await model.complete(chat('a title, say'), { scope: { sessionId: session.id } });
    await expect.poll(async () => (await callsOf(session.id)).length).toBe(1);
  });
});

/**
 * ContextBuilder keeps a session's loaded messages between turns: a turn's own
 * appends extend them, and anything else (a message stored elsewhere, a reset,
 * a compaction) makes the next build load from the store again. Every build is
 * compared with a fresh builder's over the same real SQLite file.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import { ContextBuilder, SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { SessionRow } from '../../src/store/store.js';

// Without a systemContext the builder never reads the agent.
const agent = { name: 'assistant' } as AgentConfig;

describe('ContextBuilder', () => {
  let dir: string;
  let store: SqliteStore;
  let loads: number;
  let builder: ContextBuilder;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-context-'));
    store = new SqliteStore(path.join(dir, 'cairn.db'));
    loads = 0;
    builder = new ContextBuilder({
      store: {
        loadContext: (sessionId, afterSeq) => {
          loads += 1;
          return store.loadContext(sessionId, afterSeq);
        },
      },
    });
  });

  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function newSession(): Promise<SessionRow> {
    return store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      title: null,
      parentSessionId: null,
      compactCount: 50,
      systemPrompt: 'System prompt.',
    });
  }

  async function reread(id: string): Promise<SessionRow> {
    return (await store.findSession(id))!;
  }

  async function fresh(session: SessionRow) {
    return (await new ContextBuilder({ store }).build(session, agent)).messages;
  }

  it("extends the loaded messages with the turn's own appends instead of reloading", async () => {
    const session = await newSession();
    await store.appendMessages(session.id, [{ role: 'user', content: 'one' }]);
    await builder.build(await reread(session.id), agent);
    expect(loads).toBe(1);

    const written = await store.appendMessages(session.id, [
      { role: 'assistant', content: 'two' },
      { role: 'user', content: 'three' },
    ]);
    builder.appended(session.id, written);
    const now = await reread(session.id);
    const built = await builder.build(now, agent);
    expect(loads).toBe(1);
    expect(built.messages).toEqual(await fresh(now));
    expect(built.messages.map((m) => m.content)).toEqual(['System prompt.', 'one', 'two', 'three']);
  });

  it('reloads when a message was stored without it being told', async () => {
    const session = await newSession();
    await builder.build(await reread(session.id), agent);
    await store.appendMessages(session.id, [{ role: 'user', content: 'elsewhere' }]);
    const now = await reread(session.id);
    const built = await builder.build(now, agent);
    expect(loads).toBe(2);
    expect(built.messages).toEqual(await fresh(now));
  });

  it('drops what it holds when an append does not follow it directly', async () => {
    const session = await newSession();
    await builder.build(await reread(session.id), agent);
    await store.appendMessages(session.id, [{ role: 'user', content: 'untold' }]);
    const written = await store.appendMessages(session.id, [
      { role: 'assistant', content: 'told' },
    ]);
    builder.appended(session.id, written);
    const now = await reread(session.id);
    expect((await builder.build(now, agent)).messages).toEqual(await fresh(now));
    expect(loads).toBe(2);
  });

  it('reloads after a reset, which keeps last_seq but moves the epoch', async () => {
    const session = await newSession();
    await store.appendMessages(session.id, [{ role: 'user', content: 'before reset' }]);
    await builder.build(await reread(session.id), agent);
    await store.resetSession(session.id);
    const now = await reread(session.id);
    const built = await builder.build(now, agent);
    expect(loads).toBe(2);
    expect(built.messages).toEqual(await fresh(now));
    expect(built.messages.some((m) => m.content === 'before reset')).toBe(false);
  });

  it('reloads after a compaction moved the pointer, and injects the summary', async () => {
    const session = await newSession();
    await store.appendMessages(session.id, [
      { role: 'user', content: 'old question' },
      { role: 'assistant', content: 'old answer' },
      { role: 'user', content: 'new question' },
    ]);
    await builder.build(await reread(session.id), agent);
    await store.commitCompaction({
      sessionId: session.id,
      expectedSize: 0,
      toSize: 2,
      toSeq: 3,
      summary: 'S',
      trigger: 'manual',
      model: 'm',
      inputChars: 10,
    });
    const now = await reread(session.id);
    const built = await builder.build(now, agent);
    expect(loads).toBe(2);
    expect(built.messages).toEqual(await fresh(now));
    expect(built.messages[1]).toEqual({ role: 'user', content: `${SUMMARY_PREFIX}S` });
    expect(built.tail.map((m) => m.content)).toEqual(['new question']);
  });

  it('serves the messages after a seq from memory only at the state they were loaded at', async () => {
    const session = await newSession();
    const stored = await store.appendMessages(session.id, [
      { role: 'user', content: 'a' },
      { role: 'assistant', content: 'b' },
    ]);
    const now = await reread(session.id);
    await builder.build(now, agent);
    const state = { epoch: now.epoch, compactSeq: now.compact_seq };
    expect(builder.loadedAfter(session.id, state, stored[0]!.seq)?.map((m) => m.content)).toEqual([
      'b',
    ]);
    expect(builder.loadedAfter(session.id, { ...state, epoch: now.epoch + 1 }, 0)).toBeUndefined();
    expect(
      builder.loadedAfter(session.id, { ...state, compactSeq: now.compact_seq + 1 }, 0),
    ).toBeUndefined();
    expect(builder.loadedAfter('no-such-session', state, 0)).toBeUndefined();
  });

  it('keeps at most maxCachedSessions sessions, dropping the least recently used', async () => {
    const small = new ContextBuilder({
      store: {
        loadContext: (sessionId, afterSeq) => {
          loads += 1;
          return store.loadContext(sessionId, afterSeq);
        },
      },
      maxCachedSessions: 1,
    });
    const first = await newSession();
    const second = await newSession();
    await small.build(await reread(first.id), agent);
    await small.build(await reread(second.id), agent);
    await small.build(await reread(second.id), agent);
    expect(loads).toBe(2);
    await small.build(await reread(first.id), agent);
    expect(loads).toBe(3);
  });
});

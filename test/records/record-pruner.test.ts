/**
 * The background pruning of model-call records older than records.keepDays:
 * in small batches over a real SQLite store, whole chains only.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CallRecorder } from '../../src/records/call-recorder.js';
import { PRUNE_BATCH_CHAINS, RecordPruner } from '../../src/records/record-pruner.js';
import { OfflineModel } from '../../src/llm/offline-model.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

describe('RecordPruner', () => {
  let dir: string;
  let store: SqliteStore;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'cairn-prune-'));
    store = new SqliteStore(join(dir, 'cairn.db'));
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('deletes what is older than keepDays in batches, keeps the rest, and counts what it deleted', async () => {
    const recorder = new CallRecorder({ store, enabled: true, warn: () => undefined });
    const model = recorder.instrument(new OfflineModel(8_000), { provider: 'offline' });
    const sessions = [];
    // More sessions (one chain each) than one batch takes.
    for (let i = 0; i < PRUNE_BATCH_CHAINS + 5; i++) {
      const session = await store.createSession({
        agentName: 'a',
        mode: 'chat',
        compactCount: 50,
        systemPrompt: 'S',
      });
      sessions.push(session.id);
      await model.complete(
        { messages: [{ role: 'user', content: `hello ${i}` }], purpose: 'chat' },
        { scope: { sessionId: session.id } },
      );
    }
    await recorder.flush();
    const page = async (id: string) => (await store.listModelCalls(id, { limit: 10 })).items;
    expect(await page(sessions[0]!)).toHaveLength(1);

    const today = new RecordPruner({ store, keepDays: 30, warn: () => undefined });
    expect(await today.runOnce()).toBe(0);
    const later = new RecordPruner({
      store,
      keepDays: 30,
      warn: () => undefined,
      now: () => Date.now() + 31 * 86_400_000,
    });
    expect(await later.runOnce()).toBe(PRUNE_BATCH_CHAINS + 5);
    for (const id of sessions) expect(await page(id)).toEqual([]);
    await later.stop();
    await today.stop();
  });
});

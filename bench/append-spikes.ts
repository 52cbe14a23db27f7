/**
 * `node --expose-gc dist-bench/bench/append-spikes.js`: where the slow appends
 * come from (the p95 of the growing conversation). Appends TURNS turns
 * (a question, a reply and their events, as a chat turn commits them) to one
 * session through the real SqliteStore and times each in CPU time of this
 * thread (so other processes on a busy machine show less), then prints the
 * percentiles and how many of the appends at or above p95 had a GC.
 *
 * Variants, to attribute the slow ones by difference:
 * - CHECKPOINT=background (what the store runs: a worker thread checkpoints
 *   a moment after commits), inline (SQLite's default: the commit that crosses
 *   1 000 WAL pages checkpoints itself) or off (never: the WAL grows).
 * - FTS=queued (migration 008, what the store runs) or trigger (001: each
 *   insert indexes its message inside the commit).
 * CPU time leaves out the fsync waits of a checkpoint, so `inline` costs more
 * wall time than this shows.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import type * as StoreModule from '../src/store/sqlite/sqlite-store.js';
import { useInsertTriggerIndex } from './compacted-tail.js';

const DIST = new URL('../../dist/', import.meta.url);
const TURNS = Number(process.env.TURNS ?? 4_000);

const { SqliteStore } = (await import(
  new URL('store/sqlite/sqlite-store.js', DIST).href
)) as typeof StoreModule;

let gcMs = 0;
const observer = new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) gcMs += entry.duration;
});
observer.observe({ entryTypes: ['gc'] });

const dir = mkdtempSync(join(tmpdir(), 'cairn-append-spikes-'));
try {
  const file = join(dir, 'cairn.db');
  const checkpoint = process.env.CHECKPOINT ?? 'background';
  const store = new SqliteStore(file, {
    checkpoints: checkpoint === 'background' ? 'background' : 'inline',
  });
  if (checkpoint === 'off') store.db.pragma('wal_autocheckpoint = 0');
  // Migration 001's index: every insert indexes its message in the commit.
  if (process.env.FTS === 'trigger') useInsertTriggerIndex(store);
  const session = await store.createSession({
    agentName: 'assistant',
    mode: 'chat',
    compactCount: 50,
    systemPrompt: 'You are a helpful assistant.',
  });
  const cpu: number[] = [];
  const hadGc: boolean[] = [];
  for (let t = 0; t < TURNS; t++) {
    const gcBefore = gcMs;
    const before = process.cpuUsage();
    await store.appendMessagesWithEvents(
      session.id,
      [
        { role: 'user', content: `question ${t}: what is the weather like in Paris today?` },
        { role: 'assistant', content: `answer ${t}: it is sunny and 21 degrees in Paris.` },
      ],
      'message.appended',
    );
    const spent = process.cpuUsage(before);
    cpu.push((spent.user + spent.system) / 1000);
    hadGc.push(gcMs > gcBefore);
    // The batch timer of the store runs between turns, as it would while a turn waits for the model.
    if (t % 50 === 49) await new Promise((resolve) => setImmediate(resolve));
  }
  await store.close();
  const sorted = [...cpu].sort((a, b) => a - b);
  const p = (q: number) =>
    sorted[Math.min(sorted.length - 1, Math.floor((q / 100) * sorted.length))]!;
  const threshold = p(95);
  const slow = cpu.map((ms, i) => ({ ms, gc: hadGc[i]! })).filter((x) => x.ms >= threshold);
  console.log(
    `CHECKPOINT=${process.env.CHECKPOINT ?? 'store default'} FTS=${process.env.FTS ?? 'queued'}: ${TURNS} appends, CPU ms per append: median ${p(50).toFixed(3)} / p95 ${p(95).toFixed(3)} / p99 ${p(99).toFixed(3)} / max ${p(100).toFixed(3)}; ` +
      `of the ${slow.length} at or above p95, ${slow.filter((x) => x.gc).length} had a GC`,
  );
} finally {
  observer.disconnect();
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Helpers the latency rows share: keeping a seeded session's raw tail short
 * between measured batches (what compaction does in steady state), and
 * reading percentiles.
 */
import type { SqliteStore } from '../src/store/sqlite/sqlite-store.js';

/**
 * Moves the compaction pointer so only the last `tail` raw messages stay
 * uncompacted. It writes on the store's connection around its writer, which
 * would retry a busy database: so it waits for the lock itself (the
 * checkpoint worker's truncating checkpoint holds it for a moment).
 */
export function trimTail(store: SqliteStore, sessionId: string, tail: number): void {
  const maxSeq = store.db
    .prepare('SELECT MAX(seq) FROM messages WHERE session_id = ?')
    .pluck()
    .get(sessionId) as number;
  const compactSeq = maxSeq - tail;
  const busyTimeout = store.db.pragma('busy_timeout', { simple: true }) as number;
  store.db.pragma('busy_timeout = 5000');
  try {
    // seq 1 is the system prompt, so compact_seq - 1 conversation messages are covered.
    store.db
      .prepare('UPDATE sessions SET compact_seq = ?, compact_size = ? WHERE id = ?')
      .run(compactSeq, compactSeq - 1, sessionId);
  } finally {
    store.db.pragma(`busy_timeout = ${busyTimeout}`);
  }
}

/** The p-th percentile (0–100) of an ascending array; NaN when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const index = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(0, index)]!;
}

/**
 * Puts back migration 001's history index on `store` (each insert indexes its
 * message inside the commit) in place of 008's queue: the A/B variant of
 * bench/growing-only.ts and bench/append-spikes.ts.
 */
export function useInsertTriggerIndex(store: SqliteStore): void {
  store.db.exec(`DROP TRIGGER messages_fts_queue;
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.content IS NOT NULL BEGIN
      INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
    END;`);
}

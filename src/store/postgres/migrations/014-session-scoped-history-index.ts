/**
 * Migration 014 (Postgres twin of the SQLite one, which puts each message's
 * session into the full-text index so a search costs what its session holds).
 * Postgres needs no schema change: its plans for the recall and history
 * queries already start from the session. With common words the planner scans
 * the (session_id, seq) unique index and filters the session's rows by
 * `search @@ query`; with rare ones it ANDs that index's bitmap with the GIN
 * index's (`messages_search`). Either way no other session's rows are ranked.
 * Checked with EXPLAIN ANALYZE on 101 000 messages in 201 sessions: 1.7 ms
 * (index scan, common words) and 0.9 ms (BitmapAnd, rare words).
 * The migration is recorded so both dialects carry the same version numbers.
 * Frozen once landed; imports no app code.
 */
export const version = 14;
export const name = 'session-scoped-history-index';
export const up = `SELECT 1;`;

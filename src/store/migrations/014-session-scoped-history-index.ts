/**
 * Migration 014: the full-text index (`messages_fts`, what `history_search`
 * and automatic recall read) also indexes each message's session id, so a
 * search names its session inside the MATCH
 * (`session_id : "sess_…" AND content : (…)`) and FTS5 intersects the
 * session's posting list with the words' instead of matching and ranking
 * every message of every session before a join drops the other sessions.
 * A session id tokenizes to "sess" and its random hex, a posting list as
 * long as the session, so a search costs what its session holds, not what
 * the database holds.
 *
 * The store runs that MATCH first and fetches each hit's row by id (its
 * queries use CROSS JOIN for that). Measured with bench/recall.ts (one
 * session's 1 000 compacted messages, a busy 2-core machine): recall per
 * model call went from a median of 1 988 ms to 13.7 ms among 21 000
 * messages, and from 10 610 ms to 31.8 ms among 101 000; the bench's header
 * has the rest and what still grows with the database (bm25's word counts).
 *
 * The session column must not move the ranking: the index's default rank is
 * bm25 with weight 0 on it, so only the words score. The table is rebuilt
 * from `messages` in place: every message with content is indexed and the
 * deferred queue of migration 008 is emptied (its rows are indexed here), so
 * the delete trigger's "in the index unless queued" still holds. The delete
 * trigger passes every indexed column's old value, as an external-content
 * index needs.
 *
 * Postgres needs no schema change: its plans for the recall and history
 * queries already start from the session. With common words the planner scans
 * the (session_id, seq) unique index and filters the session's rows by
 * `search @@ query`; with rare ones it ANDs that index's bitmap with the GIN
 * index's (`messages_search`). Either way no other session's rows are ranked.
 * Checked with EXPLAIN ANALYZE on 101 000 messages in 201 sessions: 1.7 ms
 * (index scan, common words) and 0.9 ms (BitmapAnd, rare words). The
 * migration is recorded there so both dialects carry the same versions.
 * Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 14;
export const name = 'session-scoped-history-index';
export const up = (d: SchemaDialect): string =>
  d.pick({
    sqlite: `
DROP TRIGGER messages_fts_delete;
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5 (content, session_id, content='messages', content_rowid='id');
INSERT INTO messages_fts (messages_fts, rank) VALUES ('rank', 'bm25(1.0, 0.0)');
INSERT INTO messages_fts (rowid, content, session_id)
  SELECT id, content, session_id FROM messages WHERE content IS NOT NULL ORDER BY id;
DELETE FROM messages_fts_pending;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.content IS NOT NULL BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, content, session_id)
    SELECT 'delete', old.id, old.content, old.session_id
    WHERE NOT EXISTS (SELECT 1 FROM messages_fts_pending WHERE id = old.id);
  DELETE FROM messages_fts_pending WHERE id = old.id;
END;
`,
    postgres: 'SELECT 1;',
  });

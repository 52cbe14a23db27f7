/**
 * Migration 018: the full-text index (`messages_fts`) stores each word's
 * Porter stem (FTS5's `porter` tokenizer over `unicode61`), so a search for
 * "servers" finds "server" and "deploying" finds "deployed" with one exact
 * term each. Until now recall matched a long word as a prefix ("deploy"*),
 * and FTS5 reads a prefix's rows in every session of the index however the
 * query is limited: that read grew with the database and with how common
 * the word is, and no LIMIT could bound it. An exact term is read from the
 * end of its list and stops at a LIMIT, which is what bounds recall's cost
 * per call (store/sqlite/recall-rank.ts).
 *
 * On a large database the rebuild must not hold the write lock for minutes,
 * so the migration itself only swaps the empty table in and queues every
 * message with content in `messages_fts_pending` (migration 008's queue);
 * the store indexes the queue in batches of HISTORY_INDEX_BATCH rows, each
 * its own short transaction, a moment after start-up writes and always before
 * a search that needs them. The queue is on disk, so a stopped server
 * resumes where it stopped; until the queue is empty a search indexes what it
 * needs first. Measured here: queueing 100 000 messages takes some 0.1 s,
 * indexing them in batches some 4 s. The delete trigger is the same as 014's
 * ("in the index unless queued" holds: nothing is in the new index yet).
 *
 * Postgres needs no schema change: its 'simple' tsvector keeps whole words,
 * and recall searches the stem as a prefix (`'deploy':*`), which the GIN
 * index answers per word; its candidate reads are bounded by LIMITs in the
 * query instead. The migration is recorded there so both dialects carry the
 * same versions. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 18;
export const name = 'stemmed-history-index';
export const up = (d: SchemaDialect): string =>
  d.pick({
    sqlite: `
DROP TRIGGER messages_fts_delete;
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5 (content, session_id, content='messages', content_rowid='id', tokenize='porter unicode61');
INSERT INTO messages_fts (messages_fts, rank) VALUES ('rank', 'bm25(1.0, 0.0)');
INSERT OR IGNORE INTO messages_fts_pending (id) SELECT id FROM messages WHERE content IS NOT NULL;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.content IS NOT NULL BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, content, session_id)
    SELECT 'delete', old.id, old.content, old.session_id
    WHERE NOT EXISTS (SELECT 1 FROM messages_fts_pending WHERE id = old.id);
  DELETE FROM messages_fts_pending WHERE id = old.id;
END;
`,
    postgres: 'SELECT 1;',
  });

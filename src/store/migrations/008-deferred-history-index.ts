/**
 * Migration 008: messages reach the full-text index (`messages_fts`, what
 * `history_search` reads) in batches off the turn. The insert trigger no
 * longer indexes the message inside every append; it only queues its id in
 * `messages_fts_pending` (a one-column B-tree insert), and the store indexes
 * the queue in one transaction a moment after appends and always before a
 * search, so `history_search` sees every committed message, compacted ones
 * included.
 *
 * Measured with bench/fts-insert.ts (20 000 messages prefilled, 2 000
 * two-message write transactions, WAL, synchronous=NORMAL; a busy 2-core
 * machine, so compare rows within one run):
 *
 *   option                                     inserts/s      p99 of a turn
 *   no index (floor)                         31 100 / 18 500   0.3 / 1.8 ms
 *   insert trigger, detail=full (001)         6 700 /  4 500   8.2 / 12.8 ms
 *   insert trigger, detail=column             6 200 /  7 100   6.7 / 6.0 ms  search fails*
 *   insert trigger, detail=none               7 200 /  8 300   6.8 / 6.9 ms  search fails*
 *   insert trigger, ascii tokenizer           5 200 /  5 500   6.1 / 8.4 ms  not Unicode-aware
 *   insert trigger, automerge=2               4 300 /  3 900  11.6 / 11.3 ms
 *   insert trigger, automerge=16              8 200 /  4 300   5.4 / 12.3 ms
 *   queued, indexed in a batch (this)             — / 11 900      — / 5.6 ms  (4 000 rows: 25 ms)
 *   * each search word is a quoted phrase, which needs detail=full
 *
 * The index itself is unchanged (external content, detail=full, unicode61)
 * and every existing row was indexed by 001's trigger, so nothing is rebuilt
 * and the queue starts empty. A queue, not a high-water mark: ids of deleted
 * rows can be reused, and a reused id below a mark would never be indexed.
 * A deleted row leaves the index only if it is in it (deleting a row the
 * index never held corrupts an external-content index); otherwise it leaves
 * the queue.
 *
 * Postgres needs no schema change for it: a GIN index's `fastupdate` pending
 * list (on by default) already defers the inverted-index work of each insert.
 * The migration is recorded there so both dialects carry the same versions.
 * Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 8;
export const name = 'deferred-history-index';
export const up = (d: SchemaDialect): string =>
  d.pick({
    sqlite: `
CREATE TABLE messages_fts_pending (id INTEGER PRIMARY KEY);
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
CREATE TRIGGER messages_fts_queue AFTER INSERT ON messages WHEN new.content IS NOT NULL BEGIN
  INSERT INTO messages_fts_pending (id) VALUES (new.id);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.content IS NOT NULL BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, content)
    SELECT 'delete', old.id, old.content
    WHERE NOT EXISTS (SELECT 1 FROM messages_fts_pending WHERE id = old.id);
  DELETE FROM messages_fts_pending WHERE id = old.id;
END;
`,
    postgres: 'SELECT 1;',
  });

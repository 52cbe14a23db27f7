/**
 * Migration 023: the history's vocabulary, for typo tolerance in recall
 * (store/vocabulary.ts). `history_words` holds each distinct word once, with
 * its stem and how many messages held it; `history_word_keys` finds a word by
 * itself and by each of its one-letter deletions; `history_vocabulary` is how
 * far (by message id) the vocabulary has read the messages.
 *
 * On a large database the vocabulary must not be built inside the migration
 * (minutes under the write lock), so the migration only creates the empty
 * tables with the mark at 0: the store reads the messages above the mark in
 * batches of VOCABULARY_BATCH, each its own short transaction that moves the
 * mark, from start-up on and before a recall that needs them. The mark is on
 * disk, so a stopped server resumes where it stopped. Deleted messages leave
 * their words counted: a correction to a word nobody holds any more finds no
 * row, which is the answer without it.
 *
 * Postgres also indexes the words by trigram (`pg_trgm`) when the extension
 * can be created; that index is made at start-up, outside the migration,
 * because a database without the extension must still migrate.
 *
 * On Postgres the migration also bounds the full-text index's pending list
 * (`gin_pending_list_limit`, 64 kB instead of the server's 4 MB): new rows
 * wait in that list, unsorted, until a vacuum or a full list moves them into
 * the index, and every search reads the whole list. Measured with EXPLAIN
 * ANALYZE on a session of 100 000 messages, a rare word's lookup read 369
 * pages of it (3.4 ms); with the list emptied, 3 (1.4 ms). A smaller list is
 * moved more often by the appends that fill it, in smaller steps. Frozen once
 * landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 23;
export const name = 'history-vocabulary';
export const up = (d: SchemaDialect): string => `
CREATE TABLE history_words (
  word     ${d.orderedText} PRIMARY KEY,
  stem     ${d.orderedText} NOT NULL,
  messages INTEGER NOT NULL
);
CREATE INDEX history_words_by_stem ON history_words (stem);
CREATE TABLE history_word_keys (
  key  ${d.orderedText} NOT NULL,
  word ${d.orderedText} NOT NULL,
  PRIMARY KEY (key, word)
)${d.pick({ sqlite: ' WITHOUT ROWID', postgres: '' })};
CREATE TABLE history_vocabulary (
  id              INTEGER PRIMARY KEY CHECK (id = 1),
  last_message_id ${d.bigInteger} NOT NULL
);
INSERT INTO history_vocabulary (id, last_message_id) VALUES (1, 0);
${d.pick({ sqlite: '', postgres: 'ALTER INDEX messages_search SET (gin_pending_list_limit = 64);' })}
`;

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
 * because a database without the extension must still migrate. Frozen once
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
`;

/**
 * Migration 026: how many of each session's messages hold each word stem, on
 * Postgres, so recall tells a session's common words from its rare ones by
 * an indexed read of the query's stems instead of testing the newest
 * messages' tsvectors one by one (a cost that grew with the session up to
 * that window). The row with the empty stem counts the session's messages.
 * Only non-system messages are counted, as recall searches only those.
 *
 * The counts are filled by the vocabulary's batches (migration 023), which
 * read every message once by id: the migration empties the vocabulary and
 * moves its mark back to 0, so an existing database rebuilds both in the
 * store's resumable batches from start-up, never inside the migration.
 * A session's delete and reset delete its counts. No foreign key: a batch
 * that counts a session deleted meanwhile must not fail for it (it skips
 * sessions gone, and a row left by a delete between the two is never read:
 * session ids are not reused).
 * SQLite needs no such table: its full-text index reads a word's newest rows
 * in order, a bounded read. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 26;
export const name = 'session-stems';
export const up = (d: SchemaDialect): string =>
  d.pick({
    sqlite: '',
    postgres: `
CREATE TABLE history_session_stems (
  session_id ${d.orderedText} NOT NULL,
  stem       ${d.orderedText} NOT NULL,
  messages   INTEGER NOT NULL,
  PRIMARY KEY (session_id, stem)
);
DELETE FROM history_word_keys;
DELETE FROM history_words;
UPDATE history_vocabulary SET last_message_id = 0;
`,
  });

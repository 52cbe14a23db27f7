/**
 * Migration 027: on Postgres, the words of a path, a URL, an e-mail address
 * or a dotted version are searchable one by one, as they are on SQLite. The
 * 'simple' parser of `to_tsvector` keeps such a token whole
 * (`/srv/backups/ledger-nightly` is one lexeme, of type `file`), so recall
 * and the history search found "ledger" or "backups" in it on SQLite and not
 * on Postgres. `cairn_search_words` replaces the characters that make those
 * tokens (. / \ @ : ? = & # ~ + %) with spaces before parsing: what is left
 * are the words, numbers and hyphenated words the parser splits as before.
 *
 * `messages.search` is a generated column, and a generated column's
 * expression cannot change without rewriting the table under its lock, so
 * the new words go in a new column, `words`: a trigger fills it for every
 * row inserted or whose content changes, and the store fills the rows that
 * were there before in batches (`history_words_backfill` holds its mark and
 * the last id it must reach), each its own short transaction, from
 * start-up; a stopped server resumes at its mark. Until the backfill is
 * complete, searches read `words` where it is set and `search` where it is
 * not. SQLite needs nothing: its tokenizer splits at every character that is
 * not a letter, digit or underscore. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

/** The characters the parser keeps inside a path, URL, address or version token. */
const SPLIT_AT = './\\@:?=&#~+%';

export const version = 27;
export const name = 'split-search-words';
export const up = (d: SchemaDialect): string =>
  d.pick({
    sqlite: '',
    postgres: `
CREATE FUNCTION cairn_search_words(content TEXT) RETURNS TSVECTOR
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT to_tsvector('simple'::regconfig, translate(COALESCE(content, ''), '${SPLIT_AT}', '${' '.repeat(SPLIT_AT.length)}')) $$;
CREATE FUNCTION cairn_messages_words() RETURNS trigger LANGUAGE plpgsql
  AS $$ BEGIN NEW.words := cairn_search_words(NEW.content); RETURN NEW; END $$;
ALTER TABLE messages ADD COLUMN words TSVECTOR;
CREATE TRIGGER messages_words BEFORE INSERT OR UPDATE OF content ON messages
  FOR EACH ROW EXECUTE FUNCTION cairn_messages_words();
CREATE INDEX messages_words ON messages USING GIN (words) WITH (gin_pending_list_limit = 64);
CREATE TABLE history_words_backfill (
  id              INTEGER PRIMARY KEY CHECK (id = 1),
  last_message_id BIGINT NOT NULL,
  until_id        BIGINT NOT NULL
);
INSERT INTO history_words_backfill (id, last_message_id, until_id)
  SELECT 1, 0, COALESCE(MAX(id), 0) FROM messages;
`,
  });

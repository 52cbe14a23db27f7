/**
 * Postgres migration 009: principals (see SQLite's 009): client keys, their
 * daily token usage, and the owner key and end user of sessions and tasks.
 * Frozen once landed; imports no app code.
 */
export const version = 9;
export const name = 'principals';
export const up = `
CREATE TABLE keys (
  id           TEXT COLLATE "C" PRIMARY KEY,
  name         TEXT NOT NULL,
  agents       TEXT NOT NULL,
  limits       TEXT NOT NULL,
  secret_hash  TEXT NOT NULL UNIQUE,
  created_at   TEXT COLLATE "C" NOT NULL,
  last_used_at TEXT COLLATE "C",
  revoked_at   TEXT COLLATE "C"
);
CREATE TABLE key_usage (
  key_id TEXT COLLATE "C" NOT NULL,
  day    TEXT COLLATE "C" NOT NULL,
  tokens BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (key_id, day)
);
ALTER TABLE sessions ADD COLUMN owner_key TEXT COLLATE "C";
ALTER TABLE sessions ADD COLUMN end_user TEXT;
ALTER TABLE tasks ADD COLUMN owner_key TEXT COLLATE "C";
ALTER TABLE tasks ADD COLUMN end_user TEXT;
ALTER TABLE tasks ADD COLUMN decided_by TEXT;
CREATE INDEX sessions_by_owner_key ON sessions (owner_key, created_at DESC, id DESC) WHERE owner_key IS NOT NULL;
CREATE INDEX tasks_by_owner_key ON tasks (owner_key, created_at DESC, id DESC) WHERE owner_key IS NOT NULL;
`;

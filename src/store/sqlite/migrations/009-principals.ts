/**
 * Migration 009: principals. `keys` holds the client keys (the secret only as
 * a SHA-256 hash, unique, so a request's key is one indexed lookup);
 * `key_usage` the tokens each key spent per UTC day, so a daily limit holds
 * across restarts and instances. Sessions and tasks record the key that
 * created them (`owner_key`, NULL for the admin: every existing row) and the
 * end user it named; a task records who approved or denied its call
 * (`decided_by`, JSON `{key, user}`).
 * Frozen once landed; imports no app code.
 */
export const version = 9;
export const name = 'principals';
export const up = `
CREATE TABLE keys (
  id           TEXT PRIMARY KEY,
  name         TEXT NOT NULL,
  agents       TEXT NOT NULL,
  limits       TEXT NOT NULL,
  secret_hash  TEXT NOT NULL UNIQUE,
  created_at   TEXT NOT NULL,
  last_used_at TEXT,
  revoked_at   TEXT
);
CREATE TABLE key_usage (
  key_id TEXT NOT NULL,
  day    TEXT NOT NULL,
  tokens INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (key_id, day)
);
ALTER TABLE sessions ADD COLUMN owner_key TEXT;
ALTER TABLE sessions ADD COLUMN end_user TEXT;
ALTER TABLE tasks ADD COLUMN owner_key TEXT;
ALTER TABLE tasks ADD COLUMN end_user TEXT;
ALTER TABLE tasks ADD COLUMN decided_by TEXT;
CREATE INDEX sessions_by_owner_key ON sessions (owner_key, created_at DESC, id DESC) WHERE owner_key IS NOT NULL;
CREATE INDEX tasks_by_owner_key ON tasks (owner_key, created_at DESC, id DESC) WHERE owner_key IS NOT NULL;
`;

/**
 * Migration 009: principals. `keys` holds the client keys (the secret only as
 * a SHA-256 hash, unique, so a request's key is one indexed lookup);
 * `key_usage` the tokens each key spent per UTC day, so a daily limit holds
 * across restarts and instances. Sessions and tasks record the key that
 * created them (`owner_key`, NULL for the admin: every existing row) and the
 * end user it named; a task records who approved or denied its call
 * (`decided_by`, JSON `{key, user}`).
 * Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 9;
export const name = 'principals';
export const up = (d: SchemaDialect): string => `
CREATE TABLE keys (
  id           ${d.orderedText} PRIMARY KEY,
  name         TEXT NOT NULL,
  agents       TEXT NOT NULL,
  limits       TEXT NOT NULL,
  secret_hash  TEXT NOT NULL UNIQUE,
  created_at   ${d.orderedText} NOT NULL,
  last_used_at ${d.orderedText},
  revoked_at   ${d.orderedText}
);
CREATE TABLE key_usage (
  key_id ${d.orderedText} NOT NULL,
  day    ${d.orderedText} NOT NULL,
  tokens ${d.bigInteger} NOT NULL DEFAULT 0,
  PRIMARY KEY (key_id, day)
);
ALTER TABLE sessions ADD COLUMN owner_key ${d.orderedText};
ALTER TABLE sessions ADD COLUMN end_user TEXT;
ALTER TABLE tasks ADD COLUMN owner_key ${d.orderedText};
ALTER TABLE tasks ADD COLUMN end_user TEXT;
ALTER TABLE tasks ADD COLUMN decided_by TEXT;
CREATE INDEX sessions_by_owner_key ON sessions (owner_key, created_at DESC, id DESC) WHERE owner_key IS NOT NULL;
CREATE INDEX tasks_by_owner_key ON tasks (owner_key, created_at DESC, id DESC) WHERE owner_key IS NOT NULL;
`;

/**
 * Migration 006: instances and task ownership. Each server
 * process records itself in `instances` and heartbeats; a `running` task
 * names the instance running it, so recovery interrupts only the tasks of
 * an instance that is gone. (On SQLite one process serves a file, so its
 * row is the only live one.) Frozen once landed; imports no app code.
 */
export const version = 6;
export const name = 'instances';
export const up = `
CREATE TABLE instances (
  id           TEXT PRIMARY KEY,
  started_at   TEXT NOT NULL,
  heartbeat_at TEXT NOT NULL
);
ALTER TABLE tasks ADD COLUMN owner_instance TEXT;
`;

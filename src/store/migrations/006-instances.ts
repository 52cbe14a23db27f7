/**
 * Migration 006: instances, task ownership and, on Postgres, the event
 * wake-up. Each server process records itself in `instances` and heartbeats
 * (on Postgres the database's clock, so machines with skewed clocks agree); a
 * `running` task names the instance running it, so recovery interrupts only
 * the tasks of an instance whose heartbeat went stale. (On SQLite one process
 * serves a file, so its row is the only live one.) On Postgres every insert
 * into `events` notifies `cairn_events` when its transaction commits, which
 * wakes every instance's event feed. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 6;
export const name = 'instances';
export const up = (d: SchemaDialect): string =>
  d.pick({
    sqlite: `
CREATE TABLE instances (
  id           TEXT PRIMARY KEY,
  started_at   TEXT NOT NULL,
  heartbeat_at TEXT NOT NULL
);
ALTER TABLE tasks ADD COLUMN owner_instance TEXT;
`,
    postgres: `
CREATE TABLE IF NOT EXISTS instances (
  id           TEXT PRIMARY KEY,
  started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS owner_instance TEXT;
CREATE INDEX IF NOT EXISTS tasks_by_owner ON tasks (owner_instance) WHERE status = 'running';

CREATE OR REPLACE FUNCTION cairn_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('cairn_events', '');
  RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS events_notify ON events;
CREATE TRIGGER events_notify AFTER INSERT ON events
  FOR EACH STATEMENT EXECUTE FUNCTION cairn_events_notify();
`,
  });

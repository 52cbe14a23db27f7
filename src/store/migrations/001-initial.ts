/**
 * Migration 001: the whole first schema (sessions, messages, tasks, events,
 * compactions, memory, daemon runs and the full-text indexes). Times are
 * ISO-8601 text in both stores, so rows read the same from either; on
 * Postgres ids and times sort bytewise (COLLATE "C") whatever the database's
 * locale, so keyset paging orders rows as SQLite does. Full-text search is
 * FTS5 on SQLite (external-content tables kept by triggers) and a generated
 * tsvector column with a GIN index on Postgres (the 'simple' configuration:
 * no stemming, no stop words, like FTS5's unicode61).
 * Frozen: never edit after it has landed; add a new numbered migration instead.
 * (The line breaks around the picked parts look odd on purpose: each dialect
 * gets, byte for byte, the text it ran when the dialects had a file each.)
 */
import type { SchemaDialect } from './dialect.js';

export const version = 1;
export const name = 'initial';
export const up = (d: SchemaDialect): string => `
CREATE TABLE sessions (
  id                   ${d.orderedText} PRIMARY KEY,
  agent_name           TEXT NOT NULL,
  mode                 TEXT NOT NULL CHECK (mode IN ('chat', 'task', 'subagent', 'daemon')),
  status               TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
  title                TEXT,
  parent_session_id    ${d.orderedText} REFERENCES sessions(id) ON DELETE SET NULL,
  created_at           ${d.orderedText} NOT NULL,
  updated_at           ${d.orderedText} NOT NULL,
  message_count        INTEGER NOT NULL DEFAULT 0,
  input_tokens         ${d.bigInteger} NOT NULL DEFAULT 0,
  output_tokens        ${d.bigInteger} NOT NULL DEFAULT 0,
  compact_summary      TEXT,
  compact_size         INTEGER NOT NULL DEFAULT 0,
  compact_count        ${d.float} NOT NULL DEFAULT 50,
  compaction_count     INTEGER NOT NULL DEFAULT 0,
  compact_seq          INTEGER NOT NULL DEFAULT 0,
  last_prompt_tokens   ${d.bigInteger},
  last_prompt_seq      INTEGER,
  compaction_suspended INTEGER NOT NULL DEFAULT 0,
  epoch                INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_created ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_by_agent ON sessions (agent_name, created_at DESC, id DESC);
CREATE INDEX sessions_by_parent ON sessions (parent_session_id) WHERE parent_session_id IS NOT NULL;

CREATE TABLE messages (
  id           ${d.rowId},
  session_id   ${d.orderedText} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq          INTEGER NOT NULL,
  role         TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
  content      TEXT,
  tool_calls   TEXT,
  tool_call_id TEXT,
  name         TEXT,
  chars        INTEGER,
  created_at   ${d.orderedText} NOT NULL,${d.pick({
    sqlite: '',
    postgres: `
  search       TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, COALESCE(content, ''))) STORED,`,
  })}
  UNIQUE (session_id, seq)
);
CREATE INDEX messages_system ON messages (session_id, seq) WHERE role = 'system';
${d.pick({
  sqlite: `
CREATE VIRTUAL TABLE messages_fts USING fts5 (content, content='messages', content_rowid='id');
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.content IS NOT NULL BEGIN
  INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.content IS NOT NULL BEGIN
  INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
`,
  postgres: `CREATE INDEX messages_search ON messages USING GIN (search);
`,
})}
CREATE TABLE tasks (
  id              ${d.orderedText} PRIMARY KEY,
  session_id      ${d.orderedText} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  agent_name      TEXT NOT NULL,
  status          TEXT NOT NULL CHECK (status IN ('running', 'waiting', 'completed', 'failed', 'cancelled', 'interrupted')),
  input           TEXT NOT NULL,
  result          TEXT,
  question        TEXT,
  error           TEXT,
  pending_call_id TEXT,
  created_at      ${d.orderedText} NOT NULL,
  updated_at      ${d.orderedText} NOT NULL
);
CREATE INDEX tasks_by_created ON tasks (created_at DESC, id DESC);
CREATE INDEX tasks_by_session ON tasks (session_id, status);
CREATE INDEX tasks_by_status ON tasks (status);

CREATE TABLE events (
  id         ${d.neverReusedRowId},
  type       TEXT NOT NULL,
  session_id ${d.orderedText},
  data       TEXT NOT NULL,
  created_at ${d.orderedText} NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, id) WHERE session_id IS NOT NULL;

CREATE TABLE compactions (
  id               ${d.rowId},
  session_id       ${d.orderedText} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  from_size        INTEGER NOT NULL,
  to_size          INTEGER NOT NULL,
  from_seq         INTEGER NOT NULL,
  to_seq           INTEGER NOT NULL,
  previous_summary TEXT,
  summary          TEXT NOT NULL,
  trigger          TEXT NOT NULL CHECK (trigger IN ('manual', 'auto')),
  model            TEXT NOT NULL,
  input_chars      INTEGER NOT NULL,
  summary_chars    INTEGER NOT NULL,
  created_at       ${d.orderedText} NOT NULL,
  undone_at        ${d.orderedText}
);
CREATE INDEX compactions_by_session ON compactions (session_id, id);

CREATE TABLE memory (
  id         ${d.rowId},
  agent_name TEXT NOT NULL,
  key        TEXT NOT NULL,
  content    TEXT NOT NULL,
  created_at ${d.orderedText} NOT NULL,
  updated_at ${d.orderedText} NOT NULL,${d.pick({
    sqlite: '',
    postgres: `
  search     TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, key || ' ' || content)) STORED,`,
  })}
  UNIQUE (agent_name, key)
);
CREATE INDEX memory_by_updated ON memory (agent_name, updated_at DESC);
${d.pick({
  sqlite: `CREATE VIRTUAL TABLE memory_fts USING fts5 (key, content, content='memory', content_rowid='id');
CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory BEGIN
  INSERT INTO memory_fts (rowid, key, content) VALUES (new.id, new.key, new.content);
END;
CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory BEGIN
  INSERT INTO memory_fts (memory_fts, rowid, key, content) VALUES ('delete', old.id, old.key, old.content);
END;
CREATE TRIGGER memory_fts_update AFTER UPDATE ON memory BEGIN
  INSERT INTO memory_fts (memory_fts, rowid, key, content) VALUES ('delete', old.id, old.key, old.content);
  INSERT INTO memory_fts (rowid, key, content) VALUES (new.id, new.key, new.content);
END;
`,
  postgres: `CREATE INDEX memory_search ON memory USING GIN (search);
`,
})}
CREATE TABLE daemon_runs (
  agent_name    TEXT PRIMARY KEY,
  last_run_at   ${d.orderedText},
  next_run_at   ${d.orderedText},
  lease_owner   TEXT,
  lease_expires ${d.orderedText}
);
`;

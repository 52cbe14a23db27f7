/**
 * Postgres migration 001: the schema of SQLite's 001 in Postgres
 * terms. Times stay ISO-8601 text, as in SQLite, so rows read the same from
 * both stores; ids and times sort bytewise (COLLATE "C") whatever the
 * database's locale, so keyset paging orders rows as SQLite does. Full-text
 * search is a generated tsvector column with a GIN index (the 'simple'
 * configuration: no stemming, no stop words, like FTS5's unicode61).
 * Frozen: never edit after it has landed; add a new numbered migration instead.
 */
export const version = 1;
export const name = 'initial';
export const up = `
CREATE TABLE sessions (
  id                   TEXT COLLATE "C" PRIMARY KEY,
  agent_name           TEXT NOT NULL,
  mode                 TEXT NOT NULL CHECK (mode IN ('chat', 'task', 'subagent', 'daemon')),
  status               TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
  title                TEXT,
  parent_session_id    TEXT COLLATE "C" REFERENCES sessions(id) ON DELETE SET NULL,
  created_at           TEXT COLLATE "C" NOT NULL,
  updated_at           TEXT COLLATE "C" NOT NULL,
  message_count        INTEGER NOT NULL DEFAULT 0,
  input_tokens         BIGINT NOT NULL DEFAULT 0,
  output_tokens        BIGINT NOT NULL DEFAULT 0,
  compact_summary      TEXT,
  compact_size         INTEGER NOT NULL DEFAULT 0,
  compact_count        DOUBLE PRECISION NOT NULL DEFAULT 50,
  compaction_count     INTEGER NOT NULL DEFAULT 0,
  compact_seq          INTEGER NOT NULL DEFAULT 0,
  last_prompt_tokens   BIGINT,
  last_prompt_seq      INTEGER,
  compaction_suspended INTEGER NOT NULL DEFAULT 0,
  epoch                INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_created ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_by_agent ON sessions (agent_name, created_at DESC, id DESC);
CREATE INDEX sessions_by_parent ON sessions (parent_session_id) WHERE parent_session_id IS NOT NULL;

CREATE TABLE messages (
  id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  session_id   TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq          INTEGER NOT NULL,
  role         TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
  content      TEXT,
  tool_calls   TEXT,
  tool_call_id TEXT,
  name         TEXT,
  chars        INTEGER,
  created_at   TEXT COLLATE "C" NOT NULL,
  search       TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, COALESCE(content, ''))) STORED,
  UNIQUE (session_id, seq)
);
CREATE INDEX messages_system ON messages (session_id, seq) WHERE role = 'system';
CREATE INDEX messages_search ON messages USING GIN (search);

CREATE TABLE tasks (
  id              TEXT COLLATE "C" PRIMARY KEY,
  session_id      TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  agent_name      TEXT NOT NULL,
  status          TEXT NOT NULL CHECK (status IN ('running', 'waiting', 'completed', 'failed', 'cancelled', 'interrupted')),
  input           TEXT NOT NULL,
  result          TEXT,
  question        TEXT,
  error           TEXT,
  pending_call_id TEXT,
  created_at      TEXT COLLATE "C" NOT NULL,
  updated_at      TEXT COLLATE "C" NOT NULL
);
CREATE INDEX tasks_by_created ON tasks (created_at DESC, id DESC);
CREATE INDEX tasks_by_session ON tasks (session_id, status);
CREATE INDEX tasks_by_status ON tasks (status);

CREATE TABLE events (
  id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  type       TEXT NOT NULL,
  session_id TEXT COLLATE "C",
  data       TEXT NOT NULL,
  created_at TEXT COLLATE "C" NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, id) WHERE session_id IS NOT NULL;

CREATE TABLE compactions (
  id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  session_id       TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
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
  created_at       TEXT COLLATE "C" NOT NULL,
  undone_at        TEXT COLLATE "C"
);
CREATE INDEX compactions_by_session ON compactions (session_id, id);

CREATE TABLE memory (
  id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  agent_name TEXT NOT NULL,
  key        TEXT NOT NULL,
  content    TEXT NOT NULL,
  created_at TEXT COLLATE "C" NOT NULL,
  updated_at TEXT COLLATE "C" NOT NULL,
  search     TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, key || ' ' || content)) STORED,
  UNIQUE (agent_name, key)
);
CREATE INDEX memory_by_updated ON memory (agent_name, updated_at DESC);
CREATE INDEX memory_search ON memory USING GIN (search);

CREATE TABLE daemon_runs (
  agent_name    TEXT PRIMARY KEY,
  last_run_at   TEXT COLLATE "C",
  next_run_at   TEXT COLLATE "C",
  lease_owner   TEXT,
  lease_expires TEXT COLLATE "C"
);
`;

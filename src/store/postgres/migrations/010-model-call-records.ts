/**
 * Postgres migration 010: every model call on the record (see SQLite's 010:
 * one row per call, its request as refs into per-session content-addressed
 * message blobs, delta-encoded against an earlier call of its chain).
 * Frozen once landed; imports no app code.
 */
export const version = 10;
export const name = 'model-call-records';
export const up = `
CREATE TABLE model_calls (
  id             TEXT COLLATE "C" PRIMARY KEY,
  session_id     TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  turn_seq       BIGINT,
  role           TEXT NOT NULL,
  provider       TEXT NOT NULL,
  model          TEXT NOT NULL,
  response_model TEXT,
  created_at     TEXT COLLATE "C" NOT NULL,
  latency_ms     DOUBLE PRECISION NOT NULL,
  input_tokens   BIGINT,
  output_tokens  BIGINT,
  cached_tokens  BIGINT,
  cost           DOUBLE PRECISION,
  finish_reason  TEXT,
  response       TEXT,
  error_code     TEXT,
  error          TEXT,
  fallback_hops  TEXT,
  recalled_seqs  TEXT,
  wire           INTEGER NOT NULL,
  params_ref     TEXT NOT NULL,
  chain_id       TEXT COLLATE "C" NOT NULL,
  base_call_id   TEXT COLLATE "C",
  base_keep      INTEGER NOT NULL DEFAULT 0,
  message_refs   TEXT NOT NULL
);
CREATE INDEX model_calls_by_session ON model_calls (session_id, created_at DESC, id DESC);
CREATE INDEX model_calls_by_session_role ON model_calls (session_id, role, created_at DESC, id DESC);
CREATE INDEX model_calls_by_chain ON model_calls (chain_id);
CREATE INDEX model_calls_checkpoints ON model_calls (created_at) WHERE base_call_id IS NULL;
CREATE TABLE model_call_blobs (
  session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  hash       TEXT COLLATE "C" NOT NULL,
  body       TEXT NOT NULL,
  PRIMARY KEY (session_id, hash)
);
ALTER TABLE sessions ADD COLUMN cost DOUBLE PRECISION NOT NULL DEFAULT 0;
`;

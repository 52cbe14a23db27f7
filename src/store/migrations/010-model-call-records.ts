/**
 * Migration 010: every model call on the record. `model_calls` holds one row
 * per call (who, what it cost, what came back); the request it sent is kept
 * small in a growing conversation: each distinct message (and each distinct
 * set of request parameters) is one content-addressed row of
 * `model_call_blobs`, per session, and a call lists only the refs of what
 * changed — the first `base_keep` messages are those of `base_call_id`'s
 * request, then its own `message_refs`. A call with no base (a checkpoint)
 * lists every ref; `chain_id` names the checkpoint a call's chain starts at,
 * so a chain is pruned whole. The session row sums what its calls cost.
 * Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 10;
export const name = 'model-call-records';
export const up = (d: SchemaDialect): string => `
CREATE TABLE model_calls (
  id             ${d.orderedText} PRIMARY KEY,
  session_id     ${d.orderedText} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  turn_seq       ${d.bigInteger},
  role           TEXT NOT NULL,
  provider       TEXT NOT NULL,
  model          TEXT NOT NULL,
  response_model TEXT,
  created_at     ${d.orderedText} NOT NULL,
  latency_ms     ${d.float} NOT NULL,
  input_tokens   ${d.bigInteger},
  output_tokens  ${d.bigInteger},
  cached_tokens  ${d.bigInteger},
  cost           ${d.float},
  finish_reason  TEXT,
  response       TEXT,
  error_code     TEXT,
  error          TEXT,
  fallback_hops  TEXT,
  recalled_seqs  TEXT,
  wire           INTEGER NOT NULL,
  params_ref     TEXT NOT NULL,
  chain_id       ${d.orderedText} NOT NULL,
  base_call_id   ${d.orderedText},
  base_keep      INTEGER NOT NULL DEFAULT 0,
  message_refs   TEXT NOT NULL
);
CREATE INDEX model_calls_by_session ON model_calls (session_id, created_at DESC, id DESC);
CREATE INDEX model_calls_by_session_role ON model_calls (session_id, role, created_at DESC, id DESC);
CREATE INDEX model_calls_by_chain ON model_calls (chain_id);
CREATE INDEX model_calls_checkpoints ON model_calls (created_at) WHERE base_call_id IS NULL;
CREATE TABLE model_call_blobs (
  session_id ${d.orderedText} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  hash       ${d.orderedText} NOT NULL,
  body       TEXT NOT NULL,
  PRIMARY KEY (session_id, hash)
);
ALTER TABLE sessions ADD COLUMN cost ${d.float} NOT NULL DEFAULT 0;
`;

/**
 * Migration 019: summaries prepared in the background. A session's next
 * summary may be computed off the turn, once its prompt passes the agent's
 * `prepareAt`; `prepared_compactions` holds at most one such preparation per
 * session: the claim first (which instance computes it, for which pointer:
 * `expected_size` and `expected_epoch`), then the prepared summary itself,
 * which the session's next turn lands with the usual compare-and-set. A claim
 * whose holder stopped heartbeating (the `instances` table) may be taken
 * over by another instance. Compaction records gain the trigger
 * `background`: SQLite cannot change a CHECK constraint in place, so its
 * `compactions` table is rebuilt with the same columns (a small table: one
 * row per compaction); Postgres swaps the constraint. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 19;
export const name = 'prepared-compactions';

const TRIGGERS = `('manual', 'auto', 'background')`;

export const up = (d: SchemaDialect): string => `
CREATE TABLE prepared_compactions (
  session_id     ${d.orderedText} PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
  holder         TEXT NOT NULL,
  expected_size  INTEGER NOT NULL,
  expected_epoch INTEGER NOT NULL,
  claimed_at     ${d.orderedText} NOT NULL,
  messages       INTEGER,
  to_size        INTEGER,
  to_seq         INTEGER,
  summary        TEXT,
  model          TEXT,
  input_chars    INTEGER,
  input_tokens   ${d.bigInteger},
  output_tokens  ${d.bigInteger},
  dropped        TEXT,
  ready_at       ${d.orderedText}
);
${d.pick({
  sqlite: `
CREATE TABLE compactions_019 (
  id               INTEGER PRIMARY KEY,
  session_id       TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  from_size        INTEGER NOT NULL,
  to_size          INTEGER NOT NULL,
  from_seq         INTEGER NOT NULL,
  to_seq           INTEGER NOT NULL,
  previous_summary TEXT,
  summary          TEXT NOT NULL,
  trigger          TEXT NOT NULL CHECK (trigger IN ${TRIGGERS}),
  model            TEXT NOT NULL,
  input_chars      INTEGER NOT NULL,
  summary_chars    INTEGER NOT NULL,
  created_at       TEXT NOT NULL,
  undone_at        TEXT,
  input_tokens     INTEGER NOT NULL DEFAULT 0,
  output_tokens    INTEGER NOT NULL DEFAULT 0,
  dropped          TEXT
);
INSERT INTO compactions_019 (id, session_id, from_size, to_size, from_seq, to_seq, previous_summary,
  summary, trigger, model, input_chars, summary_chars, created_at, undone_at, input_tokens,
  output_tokens, dropped)
SELECT id, session_id, from_size, to_size, from_seq, to_seq, previous_summary,
  summary, trigger, model, input_chars, summary_chars, created_at, undone_at, input_tokens,
  output_tokens, dropped FROM compactions;
DROP TABLE compactions;
ALTER TABLE compactions_019 RENAME TO compactions;
CREATE INDEX compactions_by_session ON compactions (session_id, id);
`,
  postgres: `
ALTER TABLE compactions DROP CONSTRAINT IF EXISTS compactions_trigger_check;
ALTER TABLE compactions ADD CONSTRAINT compactions_trigger_check CHECK (trigger IN ${TRIGGERS});
`,
})}`;

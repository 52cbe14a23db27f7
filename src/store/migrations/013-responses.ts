/**
 * Migration 013: stored Responses API answers, so `GET /v1/responses/:id`
 * returns a response whole (tools, function calls, usage) and a later
 * `previous_response_id` knows where in its session the response ended
 * (`end_seq`): naming an older one forks the session there. A response goes
 * with its session. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 13;
export const name = 'responses';
export const up = (d: SchemaDialect): string => `
CREATE TABLE responses (
  id         ${d.orderedText} PRIMARY KEY,
  session_id ${d.orderedText} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  end_seq    INTEGER NOT NULL,
  body       TEXT NOT NULL,
  created_at ${d.orderedText} NOT NULL
);
CREATE INDEX responses_by_session ON responses (session_id);
`;

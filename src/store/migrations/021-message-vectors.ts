/**
 * Migration 021: message embeddings for hybrid recall. One row per message
 * (`message_id` is unique and goes with its message), the model and the
 * dimensions that made it beside the vector, so a change of either is found
 * and re-embedded in the background. The vector is a plain column of
 * little-endian float32s (SQLite BLOB, Postgres bytea): no extension is
 * needed on either database. `id` grows with every vector written (a
 * re-embedded message gets a new one), so recall's in-memory copy of a
 * session loads only what is newer than what it holds.
 * Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 21;
export const name = 'message-vectors';
export const up = (d: SchemaDialect): string => `
CREATE TABLE message_vectors (
  id          ${d.neverReusedRowId},
  message_id  ${d.bigInteger} NOT NULL UNIQUE REFERENCES messages(id) ON DELETE CASCADE,
  session_id  ${d.orderedText} NOT NULL,
  seq         INTEGER NOT NULL,
  model       TEXT NOT NULL,
  dimensions  INTEGER NOT NULL,
  vector      ${d.pick({ sqlite: 'BLOB', postgres: 'BYTEA' })} NOT NULL
);
CREATE INDEX message_vectors_by_session ON message_vectors (session_id, id);
CREATE INDEX message_vectors_by_seq ON message_vectors (session_id, seq);
`;

/**
 * Migration 005: what compaction costs. Each compaction row records the token
 * usage of its summary call; the session row keeps the running sums, so an
 * operator sees the cost of keeping a long session inside the window.
 * Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 5;
export const name = 'compaction-cost';
export const up = (d: SchemaDialect): string => `
ALTER TABLE compactions ADD COLUMN input_tokens ${d.bigInteger} NOT NULL DEFAULT 0;
ALTER TABLE compactions ADD COLUMN output_tokens ${d.bigInteger} NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN compaction_input_tokens ${d.bigInteger} NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN compaction_output_tokens ${d.bigInteger} NOT NULL DEFAULT 0;
`;

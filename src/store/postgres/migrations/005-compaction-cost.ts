/**
 * Postgres migration 005: what compaction costs (see SQLite's 005).
 * Frozen once landed; imports no app code.
 */
export const version = 5;
export const name = 'compaction-cost';
export const up = `
ALTER TABLE compactions ADD COLUMN input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE compactions ADD COLUMN output_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN compaction_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN compaction_output_tokens BIGINT NOT NULL DEFAULT 0;
`;

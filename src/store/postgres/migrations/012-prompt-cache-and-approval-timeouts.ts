/**
 * Postgres migration 012: what the provider's prompt cache served (see SQLite's 012).
 * Frozen once landed; imports no app code.
 */
export const version = 12;
export const name = 'prompt-cache-and-approval-timeouts';
export const up = `
ALTER TABLE sessions ADD COLUMN cache_read_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN approval_expires_at TEXT;
`;

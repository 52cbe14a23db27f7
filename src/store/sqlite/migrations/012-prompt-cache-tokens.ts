/**
 * Migration 012: what the provider's prompt cache served. The session row
 * keeps the running sums of the input tokens read from the cache and written
 * to it (both are part of input_tokens), so the share served from cache shows.
 * Frozen once landed; imports no app code.
 */
export const version = 12;
export const name = 'prompt-cache-tokens';
export const up = `
ALTER TABLE sessions ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
`;

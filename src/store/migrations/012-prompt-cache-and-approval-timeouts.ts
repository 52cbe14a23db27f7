/**
 * Migration 012: what the provider's prompt cache served. The session row
 * keeps the running sums of the input tokens read from the cache and written
 * to it (both are part of input_tokens), so the share served from cache shows.
 * A task waiting for approval of a tool with an approvalTimeout keeps when
 * the wait runs out, so the denial survives a restart.
 * Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 12;
export const name = 'prompt-cache-and-approval-timeouts';
export const up = (d: SchemaDialect): string => `
ALTER TABLE sessions ADD COLUMN cache_read_tokens ${d.bigInteger} NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cache_write_tokens ${d.bigInteger} NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN approval_expires_at TEXT;
`;

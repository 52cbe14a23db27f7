/**
 * Migration 007 (Postgres twin of the SQLite one): each message's token
 * estimate, computed once when it is written (src/llm/tokens.ts); rows written
 * before it keep NULL and readers estimate those.
 * Frozen once landed; imports no app code.
 */
export const version = 7;
export const name = 'message-tokens';
export const up = `
ALTER TABLE messages ADD COLUMN tokens INTEGER;
`;

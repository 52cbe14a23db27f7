/**
 * Migration 007: each message's token estimate, computed once when it is
 * written (src/llm/tokens.ts), so building a context never re-encodes the
 * tail. Rows written before this migration keep NULL; readers estimate those.
 * Frozen once landed; the same SQL in both dialects.
 */
export const version = 7;
export const name = 'message-tokens';
export const up = (): string => `
ALTER TABLE messages ADD COLUMN tokens INTEGER;
`;

/**
 * Migration 002: `sessions.last_seq`, the highest seq the session ever used.
 * Reset deletes messages; without it the next message would reuse their seq
 * numbers and a client paging with an old `afterSeq` would miss new messages.
 * Frozen once landed; the same SQL in both dialects.
 */
export const version = 2;
export const name = 'session-last-seq';
export const up = (): string => `
ALTER TABLE sessions ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET last_seq = (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE messages.session_id = sessions.id);
`;

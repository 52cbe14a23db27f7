/**
 * Migration 002: `sessions.last_seq`, the highest seq the session ever used.
 * Reset deletes messages; without it the next message would reuse their seq
 * numbers and a client paging with an old `afterSeq` would miss new messages.
 * Frozen once landed; imports no app code.
 */
export const version = 2;
export const name = 'session-last-seq';
export const up = `
ALTER TABLE sessions ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET last_seq = (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE messages.session_id = sessions.id);
`;

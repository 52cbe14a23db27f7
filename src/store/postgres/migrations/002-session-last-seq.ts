/**
 * Postgres migration 002: `sessions.last_seq` (see SQLite's 002).
 * Frozen once landed; imports no app code.
 */
export const version = 2;
export const name = 'session-last-seq';
export const up = `
ALTER TABLE sessions ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET last_seq = (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE messages.session_id = sessions.id);
`;

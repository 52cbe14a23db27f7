/**
 * Postgres migration 003: a waiting task can wait for approval of a tool call
 * (see SQLite's 003, including the breaker re-arm, read from the session's
 * latest \`context.compactionSuspended\` event).
 * Frozen once landed; imports no app code.
 */
export const version = 3;
export const name = 'task-pending-approval';
export const up = `
ALTER TABLE tasks ADD COLUMN pending_tool TEXT;
ALTER TABLE tasks ADD COLUMN pending_arguments TEXT;
UPDATE sessions SET compaction_suspended = 0
WHERE compaction_suspended = 1
  AND (SELECT e.data::jsonb ->> 'reason' FROM events e
       WHERE e.session_id = sessions.id AND e.type = 'context.compactionSuspended'
       ORDER BY e.id DESC LIMIT 1) = 'nothing before the running turn can be compacted';
`;

/**
 * Migration 003: a waiting task can wait for a person's approval of a tool
 * call as well as for an answer to `ask_user`.
 * `pending_tool` / `pending_arguments` hold the name and raw arguments of the
 * call awaiting approval (its id is `pending_call_id`); both are NULL when the
 * task waits for an answer, or does not wait.
 *
 * Also re-arms automatic compaction for sessions whose breaker was tripped
 * only because nothing before the running turn could be compacted (a reason
 * that no longer trips it); the reason is read from the
 * session's latest `context.compactionSuspended` event.
 *
 * Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 3;
export const name = 'task-pending-approval';
export const up = (d: SchemaDialect): string => `
ALTER TABLE tasks ADD COLUMN pending_tool TEXT;
ALTER TABLE tasks ADD COLUMN pending_arguments TEXT;
UPDATE sessions SET compaction_suspended = 0
WHERE compaction_suspended = 1
  AND (SELECT ${d.pick({ sqlite: "json_extract(e.data, '$.reason')", postgres: "e.data::jsonb ->> 'reason'" })} FROM events e
       WHERE e.session_id = sessions.id AND e.type = 'context.compactionSuspended'
       ORDER BY e.id DESC LIMIT 1) = 'nothing before the running turn can be compacted';
`;

/**
 * Migration 003: a waiting task can wait for a person's approval of a tool
 * call (RELIABILITY 43) as well as for an answer to `ask_user`.
 * `pending_tool` / `pending_arguments` hold the name and raw arguments of the
 * call awaiting approval (its id is `pending_call_id`); both are NULL when the
 * task waits for an answer, or does not wait. Frozen once landed; imports no
 * app code.
 */
export const version = 3;
export const name = 'task-pending-approval';
export const up = `
ALTER TABLE tasks ADD COLUMN pending_tool TEXT;
ALTER TABLE tasks ADD COLUMN pending_arguments TEXT;
`;

/**
 * Migration 015: at most one result per tool call of an assistant message.
 * A tool message records the seq of the assistant message whose call it
 * answers (`answers_seq`: the newest assistant message before it, which is
 * where its call is for every history a provider accepts), and a unique
 * index over (session, that seq, call id) refuses a second result for the
 * same call. Call ids alone are not unique in a session: some servers number
 * calls afresh every turn (`call_0`), so the index names the message too.
 *
 * Rows written before this migration keep NULL, which the partial index
 * leaves out: a database that already holds a duplicate result migrates
 * without failing and keeps it, and no table is rewritten (a call answered
 * before the upgrade is not tied to its message; every call made after it
 * is). Imports and forks copy histories as they were written (see
 * `ResultBinding`). Frozen once landed; the same SQL in both dialects.
 */
export const version = 15;
export const name = 'one-result-per-call';
export const up = (): string => `
ALTER TABLE messages ADD COLUMN answers_seq INTEGER;
CREATE UNIQUE INDEX messages_one_result ON messages (session_id, answers_seq, tool_call_id)
  WHERE answers_seq IS NOT NULL;
`;

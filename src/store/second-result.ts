/**
 * The store's refusal of a second result for one tool call of an assistant
 * message (migration 015's unique index), in Cairn's words: both dialects
 * report the index's violation their own way.
 */
import { CairnError } from '../errors.js';

/** The unique index that holds one result per call (migration 015). */
const ONE_RESULT_INDEX = 'messages_one_result';

/** `err` as TOOL_RESULT_EXISTS when it is that index's violation; undefined otherwise. */
export function secondResultError(err: unknown): CairnError | undefined {
  const { code, constraint, message } = err as {
    code?: unknown;
    constraint?: unknown;
    message?: unknown;
  };
  const sqlite =
    code === 'SQLITE_CONSTRAINT_UNIQUE' &&
    typeof message === 'string' &&
    message.includes('messages.answers_seq');
  const postgres = code === '23505' && constraint === ONE_RESULT_INDEX;
  if (!sqlite && !postgres) return undefined;
  return new CairnError(
    'TOOL_RESULT_EXISTS',
    'That tool call already has its result in this session; a call is answered once. Read the session’s messages to see it.',
    { cause: err },
  );
}

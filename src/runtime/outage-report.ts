/**
 * What a client is told when the database goes away in the middle of a turn.
 * The store's error speaks for the one write that failed; by then the turn
 * may have stored its user message, tool calls and their results, and the
 * client must know that before it sends the turn again (it would be stored
 * twice). Pure: the error and what the turn stored in, the error to throw out.
 */
import { CairnError } from '../errors.js';
import type { StoredMessage } from '../llm/messages.js';

function count(n: number, one: string, many: string): string {
  return n === 1 ? `1 ${one}` : `${n} ${many}`;
}

/** "1 user message, 1 tool call and 1 tool result" — the kinds of messages in `stored`. */
export function describeStored(stored: readonly StoredMessage[]): string {
  let users = 0;
  let calls = 0;
  let results = 0;
  let replies = 0;
  for (const message of stored) {
    if (message.role === 'user') users += 1;
    else if (message.role === 'tool') results += 1;
    else if (message.role === 'assistant') {
      if (message.tool_calls?.length) calls += message.tool_calls.length;
      else replies += 1;
    }
  }
  const parts = [
    users > 0 ? count(users, 'user message', 'user messages') : '',
    calls > 0 ? count(calls, 'tool call', 'tool calls') : '',
    results > 0 ? count(results, 'tool result', 'tool results') : '',
    replies > 0 ? count(replies, 'assistant reply', 'assistant replies') : '',
  ].filter(Boolean);
  if (parts.length <= 1) return parts[0] ?? '';
  return `${parts.slice(0, -1).join(', ')} and ${parts.at(-1)}`;
}

/** Errors that mean the database (or the session lock's connection to it) went away, not the turn. */
export function isOutage(err: unknown): err is CairnError {
  return (
    err instanceof CairnError &&
    (err.code === 'DATABASE_UNAVAILABLE' || err.code === 'SESSION_LOCK_LOST')
  );
}

/**
 * `err` as the turn's caller should read it: a database outage (or a session
 * lock lost with its connection) says what of the turn was stored, or that
 * nothing was; any other error is unchanged.
 */
export function reportOutage(err: unknown, stored: readonly StoredMessage[]): unknown {
  if (!isOutage(err)) return err;
  const saved =
    stored.length === 0
      ? ''
      : `Already saved of this turn in session ${stored[0]!.session_id}: ${describeStored(stored)}; nothing after that. Read the session's messages before retrying, so the same input is not sent twice.`;
  if (err.code === 'SESSION_LOCK_LOST')
    return saved === '' ? err : new CairnError(err.code, `${err.message} ${saved}`, { cause: err });
  return new CairnError(
    'DATABASE_UNAVAILABLE',
    saved === ''
      ? 'The database cannot be reached; nothing of this turn was saved. Retry when the database is back.'
      : `The database became unreachable during this turn. ${saved}`,
    { cause: err },
  );
}

/**
 * The one place `SESSION_NOT_FOUND` is raised: every lookup of a missing
 * session (runtime, compaction, routes) ends here, so the code and the advice
 * in the message are the same wherever a client meets them.
 */
import { CairnError } from '../errors.js';

export function sessionNotFound(id: string): CairnError {
  return new CairnError(
    'SESSION_NOT_FOUND',
    `Session "${id}" not found. List sessions with GET /sessions.`,
  );
}

/** True when an error's code (from the API, or a CairnError) says the session does not exist. */
export function isSessionNotFound(code: string | undefined): boolean {
  return code === 'SESSION_NOT_FOUND';
}

/** `session`, or the `SESSION_NOT_FOUND` error for `id` when there is none. */
export function requireSession<T>(session: T | undefined, id: string): T {
  if (session === undefined) throw sessionNotFound(id);
  return session;
}

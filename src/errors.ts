/**
 * The one error hierarchy of Cairn. Every failure that reaches a client carries
 * a stable `code`; the code decides the HTTP status here and nowhere else.
 */

/** Every stable error code with the HTTP status it maps to. */
export const ERROR_STATUS = {
  VALIDATION_ERROR: 400,
  SESSION_CLOSED: 400,
  SESSION_AGENT_MISMATCH: 400,
  CONTEXT_OVERFLOW: 400,
  UNAUTHORIZED: 401,
  /** A client key asked for what only the admin key may do (keys, metrics, memory, reload). */
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  AGENT_NOT_FOUND: 404,
  SESSION_NOT_FOUND: 404,
  TASK_NOT_FOUND: 404,
  KEY_NOT_FOUND: 404,
  COMPACTION_CONFLICT: 409,
  TASK_NOT_WAITING: 409,
  TASK_WAITING: 409,
  PAYLOAD_TOO_LARGE: 413,
  MAX_ITERATIONS: 422,
  UNSUPPORTED_MEDIA_TYPE: 415,
  RATE_LIMITED: 429,
  /** The client key spent its tokensPerDay; the message says when the day resets. */
  BUDGET_EXCEEDED: 429,
  COMPACTION_EMPTY_SUMMARY: 500,
  INTERNAL: 500,
  LLM_ERROR: 502,
  SERVICE_UNAVAILABLE: 503,
  /** Another server process holds this SQLite file (raised at start, never over HTTP). */
  DATABASE_IN_USE: 503,
  /** The Postgres server cannot be reached or dropped the connection; nothing of the request was saved. */
  DATABASE_UNAVAILABLE: 503,
  /** The session lock's connection dropped during a turn: another instance may run the session now. */
  SESSION_LOCK_LOST: 503,
  /** The database records a migration this build does not have (raised at start, never over HTTP). */
  DATABASE_TOO_NEW: 503,
  LLM_TIMEOUT: 504,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export class CairnError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Sent as `Retry-After` (seconds) with the error response. */
  readonly retryAfterSeconds: number | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options?: { cause?: unknown; retryAfterSeconds?: number },
  ) {
    super(message, options);
    this.name = 'CairnError';
    this.code = code;
    this.status = ERROR_STATUS[code];
    this.retryAfterSeconds = options?.retryAfterSeconds;
  }
}

/** The message of any thrown value (never its stack), for logs and tool results. */
export function describeError(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

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
  /** A request body nests deeper than MAX_JSON_DEPTH (64) levels of objects and arrays. */
  JSON_TOO_DEEP: 400,
  UNAUTHORIZED: 401,
  /** The `Host` header names no host this server answers to (DNS rebinding is refused here). */
  HOST_NOT_ALLOWED: 403,
  /** The request comes from a web page whose origin is neither the server's nor in server.corsOrigins. */
  ORIGIN_NOT_ALLOWED: 403,
  /** A client key asked for what only the admin key may do (keys, metrics, memory, reload). */
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  AGENT_NOT_FOUND: 404,
  SESSION_NOT_FOUND: 404,
  TASK_NOT_FOUND: 404,
  /** A fork point (`atSeq`) that is not a message of the session. */
  MESSAGE_NOT_FOUND: 404,
  CALL_NOT_FOUND: 404,
  KEY_NOT_FOUND: 404,
  COMPACTION_CONFLICT: 409,
  TASK_NOT_WAITING: 409,
  TASK_WAITING: 409,
  /** A tool call of that assistant message already has its result; the store keeps one per call. */
  TOOL_RESULT_EXISTS: 409,
  PAYLOAD_TOO_LARGE: 413,
  /** One line of a session import is longer than the import line limit (16 MiB); nothing was imported. */
  IMPORT_LINE_TOO_LONG: 413,
  MAX_ITERATIONS: 422,
  UNSUPPORTED_MEDIA_TYPE: 415,
  RATE_LIMITED: 429,
  /** A client key holds its share of this instance's streams, imports or turns (limits.maxStreams, maxImports, maxTurns). */
  KEY_LIMIT: 429,
  /** A token or tool-call budget is used up: an agent's limits, or a client key's tokensPerDay (the message names the limit, how to raise it, or when it resets). */
  BUDGET_EXCEEDED: 429,
  COMPACTION_EMPTY_SUMMARY: 500,
  INTERNAL: 500,
  LLM_ERROR: 502,
  SERVICE_UNAVAILABLE: 503,
  /** Another server process holds this SQLite file (raised at start, never over HTTP). */
  DATABASE_IN_USE: 503,
  /** The Postgres server cannot be reached or dropped the connection; the message says what of a turn was saved. */
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
  /** Sent as `Retry-After` (seconds) with the error response, when set. */
  readonly retryAfterSeconds: number | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options?: { cause?: unknown; retryAfterSeconds?: number },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
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

/**
 * Turns anything thrown in a request into the API's error envelope:
 * `{ error: { code, message } }`. CairnError codes keep their status; fastify's
 * own errors are mapped to our codes; anything else is a bare 500 `INTERNAL`
 * with no stack trace or upstream detail in the body.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { CairnError, type ErrorCode } from '../errors.js';
import { describeValidation } from './validation-message.js';
import { CLIENT_DISCONNECTED } from '../runtime/turn-observer.js';

export interface ErrorBody {
  error: { code: ErrorCode; message: string };
}

export function errorBody(code: ErrorCode, message: string): ErrorBody {
  return { error: { code, message } };
}

/** Maps an error to `[status, body]`; the one place HTTP statuses are chosen for errors. */
export function toHttpError(err: unknown, requestId: string): [number, ErrorBody] {
  if (err instanceof CairnError) return [err.status, errorBody(err.code, err.message)];
  const fastifyError = err as Partial<FastifyError>;
  if (fastifyError.validation) {
    const where = fastifyError.validationContext ?? 'request';
    const details = describeValidation(where, fastifyError.validation);
    return [400, errorBody('VALIDATION_ERROR', details)];
  }
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return [
        413,
        errorBody(
          'PAYLOAD_TOO_LARGE',
          'The request body is larger than the server accepts (server.bodyLimitBytes).',
        ),
      ];
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return [415, errorBody('UNSUPPORTED_MEDIA_TYPE', 'Send the body as application/json.')];
    case 'FST_ERR_BAD_URL':
      return [400, errorBody('VALIDATION_ERROR', 'The URL is not valid: check its %-encoding.')];
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return [
        400,
        errorBody('VALIDATION_ERROR', 'A path parameter is too long to be a name or an id.'),
      ];
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return [400, errorBody('VALIDATION_ERROR', 'The request body is not valid JSON.')];
    default:
      break;
  }
  if (err instanceof SyntaxError || fastifyError.statusCode === 400) {
    return [400, errorBody('VALIDATION_ERROR', 'The request body is not valid JSON.')];
  }
  return [
    500,
    errorBody(
      'INTERNAL',
      `Internal error. The server log has the details (request id ${requestId}).`,
    ),
  ];
}

/** Errors whose cause was logged where it arose (e.g. once per burst of refusals). */
const reported = new WeakSet<object>();

/** Marks `err` as logged already: answering it logs nothing more. */
export function markReported<T extends object>(err: T): T {
  reported.add(err);
  return err;
}

/** True when the client closed the connection before its answer was complete. */
export function clientWentAway(request: FastifyRequest): boolean {
  const raw = request.raw;
  return raw.destroyed || raw.socket?.destroyed === true;
}

/**
 * Logs a failed request or turn once, at the right level: a 5xx at error (code
 * and message only, never a body or stack); a failure because the client
 * went away at info (it is not the server's fault); nothing for a 4xx or an
 * error already reported where it arose.
 */
export function logFailure(
  request: FastifyRequest,
  err: unknown,
  status: number,
  message: string,
): void {
  if (typeof err === 'object' && err !== null && reported.has(err)) return;
  if (clientWentAway(request)) {
    request.log.info({ code: CLIENT_DISCONNECTED }, `${message}: the client disconnected`);
    return;
  }
  if (status < 500) return;
  request.log.error(
    { err: { code: (err as { code?: unknown }).code, message: (err as Error).message } },
    message,
  );
}

/**
 * Sends `err` as an error response: logs it (logFailure), adds the auth
 * challenge to a 401 and `Retry-After` when the error names one. `shape` maps
 * the error to `[status, body]` (Cairn's envelope by default; `/v1` passes
 * OpenAI's).
 */
export function sendError(
  err: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
  shape: (err: unknown, requestId: string) => [number, unknown] = toHttpError,
): void {
  const [status, body] = shape(err, request.id);
  logFailure(request, err, status, 'request failed');
  if (status === 401) void reply.header('www-authenticate', 'Bearer realm="cairn"');
  // Every refusal a client may retry says when: the error's own time, else a second.
  if (err instanceof CairnError && err.retryAfterSeconds !== undefined)
    void reply.header('retry-after', String(Math.max(1, Math.ceil(err.retryAfterSeconds))));
  else if ((status === 429 || status === 503) && !reply.hasHeader('retry-after'))
    void reply.header('retry-after', '1');
  void reply.code(status).send(body);
}

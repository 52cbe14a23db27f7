/**
 * Errors on `/v1/*` in OpenAI's shape, `{error:{message, type, param, code}}`,
 * so OpenAI clients raise their own error classes. Cairn's codes keep their
 * HTTP status (chosen once, in src/errors.ts and src/http/errors.ts); this
 * module only reshapes the body.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { sendError, toHttpError } from '../http/errors.js';

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** A 4xx about one request parameter, raised by the request parsers of this folder. */
export class InvalidRequestError extends Error {
  readonly status: number;
  readonly param: string | null;
  readonly code: string | null;

  constructor(
    message: string,
    options: { param?: string | null; code?: string | null; status?: number } = {},
  ) {
    super(message);
    this.name = 'InvalidRequestError';
    this.param = options.param ?? null;
    this.code = options.code ?? null;
    this.status = options.status ?? 400;
  }
}

/** OpenAI's names for Cairn's codes where OpenAI has one of its own. */
const OPENAI_CODES: Partial<Record<string, { code: string; param?: string }>> = {
  UNAUTHORIZED: { code: 'invalid_api_key' },
  AGENT_NOT_FOUND: { code: 'model_not_found', param: 'model' },
  CONTEXT_OVERFLOW: { code: 'context_length_exceeded', param: 'messages' },
  RATE_LIMITED: { code: 'rate_limit_exceeded' },
};

function typeForStatus(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/** Maps anything thrown while serving `/v1/*` to `[status, body]`. */
export function toOpenAIError(err: unknown, requestId: string): [number, OpenAIErrorBody] {
  if (err instanceof InvalidRequestError) {
    return [
      err.status,
      {
        error: {
          message: err.message,
          type: typeForStatus(err.status),
          param: err.param,
          code: err.code,
        },
      },
    ];
  }
  const [status, body] = toHttpError(err, requestId);
  const known = OPENAI_CODES[body.error.code];
  return [
    status,
    {
      error: {
        message: body.error.message,
        type: typeForStatus(status),
        param: known?.param ?? null,
        code: known?.code ?? body.error.code.toLowerCase(),
      },
    },
  ];
}

/** Sends `err` as an OpenAI error response (logging 5xx without details in the body). */
export function sendOpenAIError(err: unknown, request: FastifyRequest, reply: FastifyReply): void {
  sendError(err, request, reply, toOpenAIError);
}

/**
 * The one retry layer every provider adapter shares (the SDKs' own retries
 * are off): retry only what the adapter classifies as retryable, honour a
 * short `Retry-After`, fail fast on a long one, back off with capped jitter,
 * and never retry an attempt that already handed text to the caller.
 */
import { CairnError } from '../errors.js';
import type { FallbackHop } from './model-client.js';

/** A `Retry-After` longer than this fails the call instead of holding the turn. */
export const MAX_RETRY_AFTER_MS = 30_000;
const BASE_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 8_000;

export interface ModelLogger {
  warn(details: Record<string, unknown>, message: string): void;
}

/** What an adapter makes of one failed attempt. */
export interface ClassifiedFailure {
  error: CairnError;
  retryable: boolean;
  /** The provider's `Retry-After`, when it sent one. */
  delayMs?: number;
}

/**
 * A stream that broke after its headers: a reset socket, a clean end before
 * the reply was complete. Retryable, but only while nothing was emitted.
 */
export class StreamInterruptedError extends Error {}

/** Set when a streamed attempt already handed text to the caller: it must not be retried. */
export class EmittedError extends Error {
  constructor(readonly inner: unknown) {
    super('stream failed after emitting');
  }
}

/** The wordings providers use for "the prompt does not fit". */
const CONTEXT_OVERFLOW_PATTERNS = [
  /context[_ ]length[_ ]exceeded/i,
  /maximum context length/i,
  /prompt is too long/i,
  /context window/i,
  /too many tokens/i,
  /exceeds? (the )?(model'?s? )?(maximum )?context/i,
  /reduce the length of the messages/i,
  /input is too long/i,
];

export function isContextOverflowText(text: string): boolean {
  return CONTEXT_OVERFLOW_PATTERNS.some((p) => p.test(text));
}

type ErrorClass<E extends Error = Error> = new (...args: never[]) => E;

/** What one adapter knows about its SDK's errors, for `classifyFailure`. */
export interface ProviderFailures<E extends Error> {
  /** The SDK's classes, most specific first: a timeout is a connection error is an API error. */
  timeout: ErrorClass;
  connection: ErrorClass;
  api: ErrorClass<E>;
  timeoutMessage: string;
  connectionMessage: string;
  /** The provider's own rules for an HTTP error or a stream error event. */
  classifyApiError: (err: E) => ClassifiedFailure;
}

/** Classifies one failed attempt: the rules every adapter shares around its own API-error rules. */
export function classifyFailure<E extends Error>(
  err: unknown,
  provider: ProviderFailures<E>,
): ClassifiedFailure {
  if (err instanceof StreamInterruptedError) return failure('LLM_ERROR', err.message, err, true);
  if (err instanceof provider.timeout)
    return failure('LLM_TIMEOUT', provider.timeoutMessage, err, true);
  if (err instanceof provider.connection)
    return failure('LLM_ERROR', provider.connectionMessage, err, true);
  if (err instanceof provider.api) return provider.classifyApiError(err);
  if (err instanceof CairnError) return { error: err, retryable: false };
  return failure('LLM_ERROR', 'The model call failed unexpectedly.', err, false);
}

export function failure(
  code: CairnError['code'],
  message: string,
  cause: unknown,
  retryable: boolean,
): ClassifiedFailure {
  return { error: new CairnError(code, message, { cause }), retryable };
}

export function contextOverflowFailure(cause: unknown): ClassifiedFailure {
  return failure(
    'CONTEXT_OVERFLOW',
    "The conversation no longer fits in the model's context window. Compact the session (POST /sessions/:id/compact) or reset it.",
    cause,
    false,
  );
}

/** An HTTP error's failure, with the provider's `Retry-After` when it sent one. */
export function httpFailure(
  cause: unknown,
  message: string,
  retryable: boolean,
  headers: Headers | undefined,
): ClassifiedFailure {
  const delayMs = retryAfterMs(headers);
  return {
    ...failure('LLM_ERROR', message, cause, retryable),
    ...(delayMs !== undefined ? { delayMs } : {}),
  };
}

/** The advice an HTTP status deserves, in the provider's words. */
export function statusHint(
  status: number | undefined,
  hints: { auth: string; notFound: string; rateLimited: string; otherwise?: string },
): string {
  if (status === 401 || status === 403) return hints.auth;
  if (status === 404) return hints.notFound;
  if (status === 429) return hints.rateLimited;
  return hints.otherwise ?? '';
}

/**
 * Everything an upstream error may say (its labels, message and body), for
 * pattern checks; never sent to clients.
 */
export function upstreamText(
  err: { message: string; error?: unknown },
  ...labels: (string | null | undefined)[]
): string {
  let body = '';
  try {
    body = JSON.stringify(err.error ?? '');
  } catch {
    body = '';
  }
  return `${labels.map((label) => label ?? '').join(' ')} ${err.message} ${body}`;
}

export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Parses `retry-after-ms` / `Retry-After` (seconds or an HTTP date). */
export function retryAfterMs(headers: Headers | undefined | null): number | undefined {
  if (!headers) return undefined;
  const ms = Number(headers.get('retry-after-ms'));
  if (headers.get('retry-after-ms') !== null && Number.isFinite(ms)) return ms;
  const value = headers.get('retry-after');
  if (value === null) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

export interface RetryOptions<T> {
  /** Total attempts (the role's maxRetries + 1). */
  attempts: number;
  attempt: () => Promise<T>;
  classify: (err: unknown) => ClassifiedFailure;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  signal?: AbortSignal | undefined;
  logger?: ModelLogger | undefined;
}

/** Runs `attempt` until it succeeds, fails for good, or the attempts are used up. */
export async function callWithRetries<T>(options: RetryOptions<T>): Promise<T> {
  const { attempts, signal } = options;
  for (let attempt = 1; ; attempt++) {
    try {
      return await options.attempt();
    } catch (raw) {
      if (signal?.aborted) throw signal.reason;
      const emitted = raw instanceof EmittedError;
      const { error, retryable, delayMs } = options.classify(emitted ? raw.inner : raw);
      const requestId =
        (raw as { requestID?: unknown }).requestID ??
        (emitted ? (raw.inner as { requestID?: unknown }).requestID : undefined);
      options.logger?.warn(
        { attempt, attempts, code: error.code, requestId, retryable: retryable && !emitted },
        `model call failed: ${error.message}`,
      );
      if (!retryable || emitted || attempt >= attempts) throw gaveUp(error, retryable && !emitted);
      if (delayMs !== undefined && delayMs > MAX_RETRY_AFTER_MS) {
        throw new ModelCallError(
          'LLM_ERROR',
          `The model provider asked to wait ${Math.round(delayMs / 1000)} s before retrying; giving up now rather than holding the turn.`,
          { cause: error, retryableCause: true },
        );
      }
      const backoff = Math.min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** (attempt - 1));
      await options.sleep(delayMs ?? backoff * (1 - Math.random() * 0.25), signal);
    }
  }
}

/**
 * A model call the retry layer gave up on. `retryableCause` says whether the
 * cause was one worth trying another model for (rate limit, overload, 5xx,
 * timeout, connection), as opposed to a request the next model would refuse
 * too (400, 401, an overflow) or a stream that already emitted text.
 */
export class ModelCallError extends CairnError {
  readonly retryableCause: boolean;
  /** Set by a fallback chain: the models that failed or were skipped before this error. */
  fallbackHops?: FallbackHop[];

  constructor(
    code: CairnError['code'],
    message: string,
    options: { cause?: unknown; retryableCause: boolean },
  ) {
    super(code, message, { cause: options.cause });
    this.retryableCause = options.retryableCause;
  }
}

function gaveUp(error: CairnError, retryableCause: boolean): ModelCallError {
  return new ModelCallError(error.code, error.message, { cause: error.cause, retryableCause });
}

/** Whether another model may succeed where this failure's model did not. */
export function isRetryableFailure(error: unknown): boolean {
  return error instanceof ModelCallError && error.retryableCause;
}

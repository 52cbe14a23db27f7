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

/**
 * The timers around one attempt of a provider call. An SDK's own timeout ends
 * at the response headers, and a body that stalls after them would hold the
 * turn (and the session's lock) forever: `withDeadline` bounds a whole call,
 * body included, and `streamWithIdleTimer` bounds every gap in a stream, so
 * partial text is never stored as a reply.
 */
import { CairnError } from '../errors.js';
import { linkAbort } from './abort-link.js';
import { EmittedError, StreamInterruptedError } from './retry-policy.js';

/** Runs `call` with a signal that also aborts, with `timeout()`, after `ms`. */
export async function withDeadline<T>(
  signal: AbortSignal | undefined,
  ms: number,
  timeout: () => Error,
  call: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const link = linkAbort(signal);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    link.abort(timeout());
  }, ms);
  try {
    return await call(link.signal);
  } catch (err) {
    if (timedOut && !signal?.aborted) throw link.signal.reason;
    throw err;
  } finally {
    clearTimeout(timer);
    link.dispose();
  }
}

/** What a stream reader reports to the plumbing around it. */
export interface StreamProgress {
  /** Text already reached the caller: no failure of this attempt may be retried. */
  readonly emitted: boolean;
  /** The stream reached its proper end (a finish reason, `message_stop`). */
  readonly complete: boolean;
}

export interface IdleStreamOptions {
  signal: AbortSignal | undefined;
  idleMs: number;
  idleTimeout: () => Error;
  /** The SDK's own error (an HTTP error, a stream error event), passed on as it is. */
  apiError: new (...args: never[]) => Error;
  /** What a stream that ended early lacked, for the message: `no message_stop`. */
  missing: string;
  progress: StreamProgress;
}

/**
 * Runs `read` (which calls `arm` on every chunk) under an idle timer, and
 * turns every way a stream can fail into the error the retry layer expects:
 * wrapped in `EmittedError` once text was emitted, a broken body or an
 * early end as `StreamInterruptedError`.
 */
export async function streamWithIdleTimer(
  options: IdleStreamOptions,
  read: (signal: AbortSignal, arm: () => void) => Promise<void>,
): Promise<void> {
  const { signal, progress } = options;
  const link = linkAbort(signal);
  let idleTimeout: Error | undefined;
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      idleTimeout = options.idleTimeout();
      link.abort(idleTimeout);
    }, options.idleMs);
  };
  const failed = (err: Error): Error => (progress.emitted ? new EmittedError(err) : err);
  try {
    arm();
    await read(link.signal, arm);
  } catch (err) {
    if (idleTimeout && !signal?.aborted) throw failed(idleTimeout);
    // Anything but the SDK's own errors broke the body mid-stream (undici's
    // "terminated" on a reset socket).
    throw failed(
      err instanceof options.apiError || err instanceof CairnError
        ? err
        : new StreamInterruptedError(
            'The connection to the model broke in the middle of the reply. Try again.',
            { cause: err },
          ),
    );
  } finally {
    clearTimeout(timer);
    link.dispose();
  }
  // An SDK may end an aborted stream quietly, as if it had finished: a stall
  // (the idle timer) must still fail as a timeout.
  if (signal?.aborted) throw signal.reason;
  if (idleTimeout) throw failed(idleTimeout);
  if (!progress.complete) {
    // A clean end of stream before its proper end is a cut connection, not an answer.
    throw failed(
      new StreamInterruptedError(
        `The model stream ended before the reply was complete (${options.missing}). Try again.`,
      ),
    );
  }
}

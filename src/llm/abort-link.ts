/**
 * A signal that aborts when any of its sources does, for one call, undone
 * when the call ends. Not `AbortSignal.any`: a signal it returns that has an
 * abort listener is kept alive by Node until it aborts, and the openai client
 * adds such a listener to every signal it is given and never removes it, so
 * each call that ended normally stayed in memory with its sources for good.
 * Here the sources hold a listener only until `dispose()`, and the linked
 * signal is an ordinary controller's, collected with the call.
 */
export interface AbortLink {
  readonly signal: AbortSignal;
  /** Aborts the linked signal only (a deadline of this call, say), not the sources. */
  abort(reason: unknown): void;
  /** Detaches from the sources; call when the call has ended, in a finally. */
  dispose(): void;
}

/**
 * A signal that never aborts, shared: for a holder that cannot lose what it
 * holds (one process's own queue). Links skip it, so a turn holding it adds
 * no listener.
 */
export const NEVER_ABORTED: AbortSignal = new AbortController().signal;

export function linkAbort(...sources: (AbortSignal | undefined)[]): AbortLink {
  const controller = new AbortController();
  const attached: AbortSignal[] = [];
  const onAbort = (event: Event): void =>
    controller.abort((event.target as AbortSignal | null)?.reason);
  for (const source of sources) {
    if (!source || source === NEVER_ABORTED) continue;
    if (source.aborted) {
      controller.abort(source.reason);
      break;
    }
    source.addEventListener('abort', onAbort, { once: true });
    attached.push(source);
  }
  return {
    signal: controller.signal,
    abort: (reason) => controller.abort(reason),
    dispose: () => {
      for (const source of attached) source.removeEventListener('abort', onAbort);
      attached.length = 0;
    },
  };
}

/** A signal for a holder that only listens: `dispose()` when done with it. */
export interface JoinedSignal {
  readonly signal: AbortSignal;
  dispose(): void;
}

const NOTHING_TO_UNDO = (): void => undefined;

/**
 * linkAbort without the power to abort: when at most one of `sources` can
 * abort, that signal itself (or NEVER_ABORTED), with no controller and no
 * listener made for it — most turns have one caller and a lock that cannot
 * be lost — else a link.
 */
export function joinSignals(...sources: (AbortSignal | undefined)[]): JoinedSignal {
  const live = sources.filter(
    (source): source is AbortSignal => source !== undefined && source !== NEVER_ABORTED,
  );
  if (live.length > 1) return linkAbort(...live);
  return { signal: live[0] ?? NEVER_ABORTED, dispose: NOTHING_TO_UNDO };
}

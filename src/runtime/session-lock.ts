/**
 * The turn slot of a session: turns, resets and closes on one
 * session run one after another, never interleaved. One process uses a
 * `KeyedQueue`; several instances on one database wrap it with a lock the
 * instances share, so the order stays arrival order per instance and no two
 * instances run work on one session at once.
 */
export interface SessionLock {
  /**
   * Runs `work` holding `sessionId`'s slot, after everything queued before it
   * here. `signal` aborts (with a `SESSION_LOCK_LOST` error) when the slot is
   * lost while `work` runs, so another instance may run on the session now:
   * `work` must stop and write nothing more. A lock within one process is
   * never lost.
   */
  run<T>(sessionId: string, work: (signal: AbortSignal) => Promise<T>): Promise<T>;
  /** True while something runs or waits on `sessionId` in this process. */
  isBusy(sessionId: string): boolean;
  /** Pieces of work running or waiting in this process (the metrics' queue depth). */
  readonly size: number;
  /** Resolves when every piece of work queued in this process has settled. */
  drain(): Promise<void>;
}

/**
 * The turn slot of a session: turns, resets and closes on one
 * session run one after another, never interleaved. One process uses a
 * `KeyedQueue`; several instances on one database wrap it with a lock the
 * instances share, so the order stays arrival order per instance and no two
 * instances run work on one session at once.
 */
import { CairnError } from '../errors.js';

export interface SessionLock {
  /**
   * Runs `work` holding `sessionId`'s slot, after everything queued before it
   * here. `signal` aborts (with a `SESSION_LOCK_LOST` error) when the slot is
   * lost while `work` runs, so another instance may run on the session now:
   * `work` must stop and write nothing more. A lock within one process is
   * never lost. `tenure` is given by a lock shared between instances (see
   * `SlotTenure`).
   */
  run<T>(
    sessionId: string,
    work: (signal: AbortSignal, tenure?: SlotTenure) => Promise<T>,
  ): Promise<T>;
  /**
   * Asks the lock itself whether this process still holds `sessionId`'s
   * slot (a lock shared between instances; one within a process is never
   * lost and has no need of it). Called only when a write found the session
   * row changed under it, so it costs nothing on the normal path.
   */
  confirm?(sessionId: string): Promise<boolean>;
  /** True while something runs or waits on `sessionId` in this process. */
  isBusy(sessionId: string): boolean;
  /** Pieces of work running or waiting in this process (the metrics' queue depth). */
  readonly size: number;
  /** Resolves when every piece of work queued in this process has settled. */
  drain(): Promise<void>;
}

/**
 * One unbroken hold of a session's lock by this process: the same object for
 * every piece of work run while the lock is kept between them, a new one
 * once it was given back or lost. No other instance ran slot work on the
 * session during one tenure, so what this process's own slot work left on
 * the session row is still there — except for what writers that take no
 * lock changed (a title, a manual compaction), which a row's version shows.
 */
export interface SlotTenure {
  readonly sessionId: string;
}

/** The error of work whose session slot was lost: another instance may run the session now. */
export function sessionLockLost(): CairnError {
  return new CairnError(
    'SESSION_LOCK_LOST',
    'The session lock was lost (the database connection dropped), so another instance may now run this session. The turn stopped; retry it.',
  );
}

/**
 * The turn slot of a session across instances on one Postgres database
 * (turns on one session never interleave, whichever instance runs them).
 * Work on a session first queues in this process (arrival order per
 * instance, a `KeyedQueue`), then takes a session-level advisory lock on the
 * instance's one dedicated connection. No transaction is open
 * while the work runs — the lock belongs to the connection — and when the
 * instance dies Postgres drops the connection and frees its locks at once.
 *
 * The lock is kept for a moment after the work (`keepMs`): a session's turns
 * come back to back (a client sending tool results, an agent loop, the next
 * queued request), and the next one here then starts without a round trip
 * to take the lock, nor one to give it back before. Another instance never
 * waits out that moment: when it finds the lock taken it asks for it (a
 * NOTIFY on `cairn_session_wanted`, in the same statement as its attempt),
 * and a holder that is only keeping the lock gives it back at once; one
 * whose work is running gives it back when the work ends.
 *
 * A waiter polls with backoff and is woken early by the NOTIFY a holder
 * sends on release. If the lock connection breaks while this instance lives,
 * its locks are gone at once and a peer may take them: the work holding them
 * is aborted (its signal, `SESSION_LOCK_LOST`), the locks it was keeping are
 * forgotten, and none is re-taken on reconnect, since a peer may be running
 * on the session by then.
 */
import { CairnError } from '../errors.js';
import { KeyedQueue } from '../runtime/keyed-queue.js';
import { sessionLockLost, type SessionLock, type SlotTenure } from '../runtime/session-lock.js';
import { DedicatedConnection, type InstanceConnectionOptions } from './dedicated-connection.js';

/** Channel a holder notifies on release, with the session id as payload. */
export const SESSION_FREE_CHANNEL = 'cairn_session_free';
/** Channel an instance that found a session's lock taken notifies, with the session id as payload. */
export const SESSION_WANTED_CHANNEL = 'cairn_session_wanted';
/** How long a session's lock stays with this instance after its work, by default. */
export const SESSION_LOCK_KEEP_MS = 1_000;
/** Advisory lock key of a session: a 64-bit hash of its id, computed by Postgres. */
const LOCK_KEY = 'hashtextextended($1, 12)';
/** How long work waits for a session lock that another instance holds, by default. */
export const SESSION_LOCK_WAIT_MS = 120_000;

export interface AdvisorySessionLockOptions extends InstanceConnectionOptions {
  log?: (details: Record<string, unknown>, message: string) => void;
  /** Poll backoff while a peer holds the lock (ms). */
  pollMs?: { first: number; max: number };
  /** How long to wait for an unreachable database before failing the turn (ms). */
  connectTimeoutMs?: number;
  /** How long to wait for a lock another instance holds before failing the turn with a 503 (ms). */
  lockWaitMs?: number;
  /** How long to keep a session's lock after its work, for the session's next work here (ms). */
  keepMs?: number;
}

export class AdvisorySessionLock implements SessionLock {
  private readonly local = new KeyedQueue();
  /** Sessions whose lock this instance holds, each with the abort of the work holding it. */
  private readonly held = new Map<string, AbortController>();
  /** Sessions whose lock this instance keeps after their work, each with the timer that gives it back. */
  private readonly kept = new Map<string, NodeJS.Timeout>();
  /** The unbroken hold of each session whose lock this instance holds or keeps. */
  private readonly tenures = new Map<string, SlotTenure>();
  /** Held sessions another instance asked for: given back when their work ends. */
  private readonly wanted = new Set<string>();
  private readonly wakers = new Map<string, () => void>();
  private readonly connection: DedicatedConnection;

  constructor(private readonly options: AdvisorySessionLockOptions) {
    this.connection = new DedicatedConnection(options, {
      purpose: 'locks',
      listen: [SESSION_FREE_CHANNEL, SESSION_WANTED_CHANNEL],
      onNotification: ({ channel, payload }) => {
        if (!payload) return;
        if (channel === SESSION_FREE_CHANNEL) this.wakers.get(payload)?.();
        else if (channel === SESSION_WANTED_CHANNEL) this.giveUp(payload);
      },
      onLost: (error) => {
        // The locks went with the connection; a peer may hold them already.
        const lost = [...this.held.keys()];
        const reason = sessionLockLost();
        for (const controller of this.held.values()) controller.abort(reason);
        this.held.clear();
        this.tenures.clear();
        this.wanted.clear();
        this.forgetKept();
        this.options.log?.(
          { error: error.message, lost, instanceId: options.instanceId },
          'session lock connection lost; work holding a session lock was stopped',
        );
      },
    });
  }

  run<T>(
    sessionId: string,
    work: (signal: AbortSignal, tenure: SlotTenure) => Promise<T>,
  ): Promise<T> {
    return this.local.run(sessionId, async () => {
      const holding = await this.acquire(sessionId);
      try {
        return await work(holding.signal, this.tenures.get(sessionId)!);
      } finally {
        this.release(sessionId, holding);
      }
    });
  }

  isBusy(sessionId: string): boolean {
    return this.local.isBusy(sessionId);
  }

  /**
   * Whether this instance still holds `sessionId`'s lock, asked of Postgres
   * on the lock's own connection. A write fenced by the session row's version
   * that found the row changed asks before it retries: the change may be a
   * peer's that took the lock while this instance had not yet noticed its
   * connection drop. A reconnected connection holds no lock, so it says no.
   */
  async confirm(sessionId: string): Promise<boolean> {
    const holding = this.held.get(sessionId);
    if (!holding || holding.signal.aborted) return false;
    try {
      const { rows } = await this.connection.query<{ held: boolean }>(
        `SELECT EXISTS (
           SELECT 1 FROM pg_locks
           WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
             AND ((classid::bigint << 32) | objid::bigint) = ${LOCK_KEY}
         ) AS held`,
        [sessionId],
      );
      return rows[0]?.held === true && !holding.signal.aborted;
    } catch {
      return false;
    }
  }

  get size(): number {
    return this.local.size;
  }

  drain(): Promise<void> {
    return this.local.drain();
  }

  /** Waits for running work, then closes the lock connection (its locks go with it). */
  async close(): Promise<void> {
    await this.local.drain();
    this.forgetKept();
    await this.connection.close();
  }

  private async acquire(sessionId: string): Promise<AbortController> {
    if (this.stopKeeping(sessionId)) return this.hold(sessionId);
    const poll = this.options.pollMs ?? { first: 20, max: 250 };
    const waitMs = this.options.lockWaitMs ?? SESSION_LOCK_WAIT_MS;
    const deadline = Date.now() + waitMs;
    let wait = poll.first;
    for (;;) {
      if (await this.tryLock(sessionId)) return this.hold(sessionId, true);
      // A holder that never lets go (paused, or stuck) must not hold this
      // instance's work on the session for good.
      if (Date.now() >= deadline) {
        throw new CairnError(
          'SERVICE_UNAVAILABLE',
          `Another instance has been running work on this session for over ${Math.round(waitMs / 1000)} s. Retry later.`,
        );
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, wait);
        function done(): void {
          clearTimeout(timer);
          resolve();
        }
        this.wakers.set(sessionId, done);
      });
      this.wakers.delete(sessionId);
      wait = Math.min(wait * 2, poll.max);
    }
  }

  /** Notes the lock as held by this work; `taken` when it was just taken, not kept from work before. */
  private hold(sessionId: string, taken = false): AbortController {
    if (taken || !this.tenures.has(sessionId)) this.tenures.set(sessionId, { sessionId });
    const holding = new AbortController();
    this.held.set(sessionId, holding);
    return holding;
  }

  /**
   * One attempt at the lock; a failed one asks the holder for it. While the
   * database is unreachable, the query waits for the lock connection to come
   * back; past `connectTimeoutMs` the work fails — and the attempt is
   * abandoned for good: it is not sent once the connection is back, and if
   * it was sent already and still takes the lock, the lock is given back at
   * once, so no lock is held that nothing records (every turn on the session
   * elsewhere would wait on it).
   */
  private async tryLock(sessionId: string): Promise<boolean> {
    const timeoutMs = this.options.connectTimeoutMs ?? 10_000;
    const abandoned = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const unreachable = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        abandoned.abort();
        reject(
          new CairnError(
            'DATABASE_UNAVAILABLE',
            'The database is unreachable, so the session cannot be locked. Try again when Postgres is back.',
          ),
        );
      }, timeoutMs);
    });
    try {
      for (;;) {
        const attempt = this.connection.query<{ ok: boolean }>(
          `SELECT ok, CASE WHEN NOT ok THEN pg_notify('${SESSION_WANTED_CHANNEL}', $1) END
           FROM (SELECT pg_try_advisory_lock(${LOCK_KEY}) AS ok) attempt`,
          [sessionId],
          abandoned.signal,
        );
        try {
          const { rows } = await Promise.race([attempt, unreachable]);
          return rows[0]?.ok === true;
        } catch (error) {
          if (error instanceof CairnError) {
            this.giveBackIfTaken(sessionId, attempt);
            throw error;
          }
          // The connection broke under the query: the next query reconnects.
          await Promise.race([new Promise((resolve) => setTimeout(resolve, 50)), unreachable]);
        }
      }
    } finally {
      clearTimeout(timer);
      unreachable.catch(() => undefined);
    }
  }

  /** An abandoned attempt that still succeeds later: unlock at once, on the connection that took it. */
  private giveBackIfTaken(sessionId: string, attempt: Promise<{ rows: { ok: boolean }[] }>): void {
    attempt.then(
      ({ rows }) => {
        if (rows[0]?.ok !== true) return;
        this.options.log?.(
          { sessionId, instanceId: this.options.instanceId },
          'a session lock taken after its turn had given up was released',
        );
        void this.unlock(sessionId);
      },
      () => undefined,
    );
  }

  /**
   * The work is done: the lock is kept for the session's next work here, or
   * given back at once when another instance has asked for it. A lock lost
   * with its connection is gone already: nothing to keep or give back.
   */
  private release(sessionId: string, holding: AbortController): void {
    if (holding.signal.aborted) return;
    this.held.delete(sessionId);
    const keepMs = this.options.keepMs ?? SESSION_LOCK_KEEP_MS;
    if (this.wanted.delete(sessionId) || keepMs <= 0) {
      this.tenures.delete(sessionId);
      void this.unlock(sessionId);
      return;
    }
    const timer = setTimeout(() => this.giveUp(sessionId), keepMs);
    timer.unref();
    this.kept.set(sessionId, timer);
  }

  /**
   * Gives back a lock this instance only keeps; one whose work is running is
   * marked to be given back when the work ends. A session this instance does
   * not hold is none of its business.
   */
  private giveUp(sessionId: string): void {
    if (this.stopKeeping(sessionId)) {
      this.tenures.delete(sessionId);
      void this.unlock(sessionId);
    } else if (this.held.has(sessionId)) this.wanted.add(sessionId);
  }

  /** Whether this instance was keeping the session's lock; it no longer times it out. */
  private stopKeeping(sessionId: string): boolean {
    const timer = this.kept.get(sessionId);
    if (timer === undefined) return false;
    clearTimeout(timer);
    this.kept.delete(sessionId);
    return true;
  }

  /** Drops every kept lock from the books (the connection that held them is gone or going). */
  private forgetKept(): void {
    for (const [sessionId, timer] of this.kept) {
      clearTimeout(timer);
      this.tenures.delete(sessionId);
    }
    this.kept.clear();
  }

  /**
   * Gives the lock back without waiting for Postgres to confirm it: the
   * work's writes are committed already, and this connection runs its
   * queries in the order they were sent, so this instance's next attempt on
   * the session comes after the unlock. (A failed unlock means the
   * connection went, and the lock with it.)
   */
  private async unlock(sessionId: string): Promise<void> {
    await this.connection
      .query(`SELECT pg_advisory_unlock(${LOCK_KEY}), pg_notify('${SESSION_FREE_CHANNEL}', $1)`, [
        sessionId,
      ])
      .catch(() => undefined);
  }
}

/**
 * How the SQLite store writes: group commit. Every write is a synchronous
 * unit of work; the writes asked for while the event loop was busy with
 * other requests run together, each in a savepoint of one `BEGIN IMMEDIATE`
 * transaction, and each caller's promise settles once that transaction has
 * committed. A commit is most of a small write's cost (the WAL frames of
 * every page it touched, written again for the next turn), so thirty
 * conversations answering at once pay for a few commits instead of ninety.
 * The first write of a turn of the event loop, with nothing waiting before
 * it, runs at once in a transaction of its own: an idle server adds no delay
 * to a write, and only the writes that come after it in the same busy moment
 * wait (until the loop's I/O callbacks are done) to share a commit.
 *
 * What a caller sees is what a transaction of its own would give it: its
 * promise resolves only after its writes are committed, a work that throws
 * is rolled back to its savepoint and rejects alone (the others commit), and
 * writes run in the order they were asked for.
 */
import type { SqliteDatabase } from './open-database.js';
import { BUSY_RETRY_BASE_MS } from './open-database.js';
import { CairnError } from '../../errors.js';

/** Another connection holds the write lock (or our snapshot is stale): try again later. */
export function isBusy(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED' || code === 'SQLITE_BUSY_SNAPSHOT';
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs one synchronous unit of work, retrying it while another connection
 * holds the write lock. SQLite's own `busy_timeout` waits synchronously and
 * would freeze the event loop for every client (`/health` included), so it is
 * kept tiny and the waiting happens here, between attempts, with backoff, up
 * to `budgetMs`; then a retryable 503.
 */
export async function retryWhileBusy<T>(work: () => T, budgetMs: number): Promise<T> {
  const deadline = Date.now() + budgetMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return work();
    } catch (err) {
      if (!isBusy(err)) throw err;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new CairnError(
          'SERVICE_UNAVAILABLE',
          'The database is busy. Retry the request shortly.',
          {
            cause: err,
          },
        );
      }
      await sleep(Math.min(left, BUSY_RETRY_BASE_MS * 2 ** Math.min(attempt, 5)));
    }
  }
}

interface QueuedWrite {
  work: () => unknown;
  resolve: (value: unknown) => void;
  reject: (reason: unknown) => void;
}

/** What a store's work throws is an Error: SQLite's, or Cairn's own. */
type Settled = { ok: true; value: unknown } | { ok: false; error: Error };

export class GroupCommit {
  private queued: QueuedWrite[] = [];
  private flushScheduled = false;
  /** The batch being committed (retries included): the next waits for it, so writes keep their order. */
  private committing: Promise<void> = Promise.resolve();
  /** Batches handed to `committing` and not yet settled. */
  private unsettled = 0;
  /** A write ran at once in this turn of the event loop: the ones after it wait for the group. */
  private ranThisTurn = false;
  /**
   * `work()` in a transaction: `.immediate(work)` opens one; called inside an
   * open one, a savepoint. Made once: better-sqlite3 builds five functions
   * for every `db.transaction` call.
   */
  private readonly inTransaction: ReturnType<SqliteDatabase['transaction']>;

  constructor(
    private readonly db: SqliteDatabase,
    private readonly busyBudgetMs: number,
    /** Told after each commit (the WAL grew: a checkpoint is due). */
    private readonly onCommit: () => void = () => undefined,
  ) {
    this.inTransaction = db.transaction((work: () => unknown) => work());
  }

  /**
   * Runs `work` (synchronous SQL, no `await`) inside a transaction, its own
   * or a savepoint of the group's, so `work` never opens one: at once when it
   * is the first write of this turn of the event loop and nothing waits
   * before it (an idle server pays no delay), else in the next group's
   * transaction.
   */
  write<T>(work: () => T): Promise<T> {
    if (!this.ranThisTurn && this.queued.length === 0 && this.unsettled === 0) {
      this.ranThisTurn = true;
      setImmediate(() => (this.ranThisTurn = false));
      try {
        const outcome = this.runAlone(work);
        if (outcome.ok) this.onCommit();
        return outcome.ok ? Promise.resolve(outcome.value as T) : Promise.reject(outcome.error);
      } catch {
        // Busy: it waits its turn in a group, which retries.
      }
    }
    return new Promise<T>((resolve, reject) => {
      this.queued.push({ work, resolve: resolve as (value: unknown) => void, reject });
      if (this.flushScheduled) return;
      this.flushScheduled = true;
      // After the I/O callbacks of this turn of the event loop: every request
      // that reached its write meanwhile joins the same transaction.
      setImmediate(() => this.flush());
    });
  }

  /** Settles every write asked for so far (before the connection closes). */
  async drain(): Promise<void> {
    if (this.queued.length > 0) this.flush();
    await this.committing;
  }

  private flush(): void {
    this.flushScheduled = false;
    const batch = this.queued;
    if (batch.length === 0) return;
    this.queued = [];
    this.unsettled += 1;
    this.committing = this.committing
      .then(() => this.commit(batch))
      .finally(() => (this.unsettled -= 1));
  }

  private async commit(batch: readonly QueuedWrite[]): Promise<void> {
    let settled: Settled[];
    try {
      settled = await retryWhileBusy(() => this.runTogether(batch), this.busyBudgetMs);
      this.onCommit();
    } catch (err) {
      // Nothing of the batch was committed (busy past the budget, the
      // connection closed, the disk full): every write fails with it.
      for (const write of batch) write.reject(err);
      return;
    }
    batch.forEach((write, i) => {
      const outcome = settled[i]!;
      if (outcome.ok) write.resolve(outcome.value);
      else write.reject(outcome.error);
    });
  }

  /** One transaction, a savepoint per write; throws (rolling all back) only for what must retry or abort all. */
  private runTogether(batch: readonly QueuedWrite[]): Settled[] {
    if (batch.length === 1) return [this.runAlone(batch[0]!.work)];
    return this.inTransaction.immediate(() =>
      batch.map((write): Settled => {
        try {
          // Nested in the open transaction, better-sqlite3 runs it in a savepoint.
          return { ok: true, value: this.inTransaction(write.work) };
        } catch (error) {
          // Busy, or an error that ended the transaction itself: the whole batch goes again or fails.
          if (isBusy(error) || !this.db.inTransaction) throw error;
          return { ok: false, error: error as Error };
        }
      }),
    ) as Settled[];
  }

  /** A write with no company needs no savepoint: its own transaction, as a write had before. */
  private runAlone(work: () => unknown): Settled {
    try {
      return { ok: true, value: this.inTransaction.immediate(work) };
    } catch (error) {
      if (isBusy(error)) throw error;
      return { ok: false, error: error as Error };
    }
  }
}

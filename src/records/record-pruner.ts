/**
 * Deletes model-call records older than `records.keepDays`, in the
 * background: a few chains per transaction, a pause between transactions, so
 * pruning never holds the database for long and never delays a turn.
 */

/** How often the pruner looks for old records. */
export const PRUNE_INTERVAL_MS = 10 * 60 * 1000;
/** The first look, a moment after start (not inside start-up). */
export const FIRST_PRUNE_DELAY_MS = 30 * 1000;
/** Chains (at most 32 calls each) one transaction deletes. */
export const PRUNE_BATCH_CHAINS = 20;
/** Transactions one look runs at most; the rest waits for the next look. */
export const PRUNE_BATCHES_PER_RUN = 50;
const DAY_MS = 24 * 60 * 60 * 1000;

export interface RecordPrunerOptions {
  store: { pruneModelCalls(before: string, maxChains: number): Promise<number> };
  keepDays: number;
  warn: (details: Record<string, unknown>, message: string) => void;
  now?: () => number;
}

export class RecordPruner {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<number> | undefined;
  private stopped = false;

  constructor(private readonly options: RecordPrunerOptions) {}

  start(): void {
    this.schedule(FIRST_PRUNE_DELAY_MS);
  }

  /** One look: prunes in small batches until nothing old is left or the run's cap; returns calls deleted. */
  async runOnce(): Promise<number> {
    this.running ??= this.prune().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running?.catch(() => undefined);
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.runOnce().then(
        () => this.schedule(PRUNE_INTERVAL_MS),
        (err: unknown) => {
          this.options.warn(
            { error: err instanceof Error ? err.message : String(err) },
            'pruning old model-call records failed; trying again later',
          );
          this.schedule(PRUNE_INTERVAL_MS);
        },
      );
    }, delayMs);
    this.timer.unref();
  }

  private async prune(): Promise<number> {
    const now = this.options.now?.() ?? Date.now();
    const before = new Date(now - this.options.keepDays * DAY_MS).toISOString();
    let deleted = 0;
    for (let batch = 0; batch < PRUNE_BATCHES_PER_RUN && !this.stopped; batch++) {
      const removed = await this.options.store.pruneModelCalls(before, PRUNE_BATCH_CHAINS);
      deleted += removed;
      if (removed === 0) break;
      // Let turns in between batches.
      await new Promise((resolve) => setImmediate(resolve));
    }
    return deleted;
  }
}

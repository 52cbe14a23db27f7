import { NEVER_ABORTED } from '../llm/abort-link.js';
import type { SessionLock } from './session-lock.js';

/**
 * FIFO per key: work queued on one key runs one after another, never
 * interleaved; different keys run in parallel. The runtime keys it by session
 * id (turns, resets and closes on one session), the task runner by task id.
 */
export class KeyedQueue implements SessionLock {
  private readonly tails = new Map<string, Promise<unknown>>();
  private readonly depth = new Map<string, number>();

  /** Runs `work` after everything queued before it on `key`; its signal never aborts. */
  run<T>(key: string, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const start = (): Promise<T> => work(NEVER_ABORTED);
    const result = previous.then(start, start);
    const settled = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, settled);
    this.depth.set(key, (this.depth.get(key) ?? 0) + 1);
    void settled.then(() => {
      const left = (this.depth.get(key) ?? 1) - 1;
      if (left === 0) {
        this.depth.delete(key);
        this.tails.delete(key);
      } else {
        this.depth.set(key, left);
      }
    });
    return result;
  }

  /** True while something runs or waits on `key`. */
  isBusy(key: string): boolean {
    return this.depth.has(key);
  }

  /** Pieces of work running or waiting, over all keys (the metrics' queue depth). */
  get size(): number {
    let total = 0;
    for (const n of this.depth.values()) total += n;
    return total;
  }

  /** Resolves when every queued piece of work has settled. */
  async drain(): Promise<void> {
    while (this.tails.size > 0) await Promise.all(this.tails.values());
  }
}

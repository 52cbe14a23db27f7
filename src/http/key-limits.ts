/**
 * Per-key limits: requests per minute (a fixed window per key, where one
 * request may cost more than one: an MCP JSON-RPC batch costs its calls) and
 * tokens per UTC day (read from the store, which every instance charges, so
 * the limit holds across instances and restarts).
 */
import { CairnError } from '../errors.js';
import type { KeyRow, KeyStore } from '../store/store.js';
import { usageDay } from '../store/records.js';
import { dayBudgetExceeded, nextUtcMidnight } from '../runtime/budget.js';

const MINUTE_MS = 60_000;
/** Windows tracked at most; expired ones are swept first. */
const MAX_WINDOWS = 10_000;

interface Window {
  count: number;
  resetAt: number;
}

/**
 * Drops the windows that have ended; while the map still holds `max` or more, the
 * oldest entries go too, so it never grows without bound.
 */
export function sweepWindows(
  windows: Map<string, { resetAt: number }>,
  now: number,
  max: number,
): void {
  for (const [key, window] of windows) if (window.resetAt <= now) windows.delete(key);
  for (const key of windows.keys()) {
    if (windows.size < max) break;
    windows.delete(key);
  }
}

/** Counts cost per identity in fixed windows. */
export class WindowCounter {
  private readonly windows = new Map<string, Window>();

  constructor(
    private readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Adds `cost` to `identity`'s window if it fits under `max`; returns the
   * milliseconds until the window resets when it does not (nothing is added then).
   */
  take(identity: string, cost: number, max: number): number | undefined {
    const now = this.now();
    let window = this.windows.get(identity);
    if (!window || window.resetAt <= now) {
      if (this.windows.size >= MAX_WINDOWS) sweepWindows(this.windows, now, MAX_WINDOWS);
      window = { count: 0, resetAt: now + this.windowMs };
      this.windows.set(identity, window);
    }
    if (window.count + cost > max) return window.resetAt - now;
    window.count += cost;
    return undefined;
  }
}

export { nextUtcMidnight };

export class KeyLimits {
  private readonly perMinute: WindowCounter;

  constructor(
    private readonly store: Pick<KeyStore, 'keyTokensOn'>,
    private readonly now: () => number = Date.now,
  ) {
    this.perMinute = new WindowCounter(MINUTE_MS, now);
  }

  /** 429 RATE_LIMITED (with Retry-After) when `cost` more requests exceed the key's requestsPerMinute. */
  takeRequests(key: KeyRow, cost: number): void {
    const max = key.limits.requestsPerMinute;
    if (max === undefined) return;
    const waitMs = this.perMinute.take(key.id, cost, max);
    if (waitMs === undefined) return;
    const seconds = Math.max(1, Math.ceil(waitMs / 1000));
    throw new CairnError(
      'RATE_LIMITED',
      cost > 1
        ? `This request makes ${cost} calls; key "${key.name}" may make ${max} per minute (requestsPerMinute). Retry after ${seconds} s, or send fewer calls at once.`
        : `Key "${key.name}" may make ${max} requests per minute (requestsPerMinute). Retry after ${seconds} s.`,
      { retryAfterSeconds: seconds },
    );
  }

  /**
   * 429 BUDGET_EXCEEDED when the key already spent its tokensPerDay today
   * (UTC): refused before anything is stored. Each model call then reserves
   * its own tokens (`runtime/budget.ts`), which is what holds the limit
   * under concurrent calls.
   */
  async checkTokens(key: KeyRow): Promise<void> {
    const max = key.limits.tokensPerDay;
    if (max === undefined) return;
    const now = new Date(this.now());
    const spent = await this.store.keyTokensOn(key.id, usageDay(now.toISOString()));
    if (spent < max) return;
    throw dayBudgetExceeded({ keyName: key.name, max, spent, held: 0, needed: 0 }, now);
  }
}

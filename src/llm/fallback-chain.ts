/**
 * A role's fallback chain: the primary model, then each fallback in order,
 * tried only after the one before failed for good (its own retries spent) on
 * a cause another model may not share — rate limit, overload, 5xx, timeout,
 * connection. A request the next model would refuse too (400, 401, an
 * overflow) or a stream that already emitted text ends the call there.
 *
 * A circuit breaker keeps a model that just failed that way out of the chain
 * for `openMs` (default a minute), so a dead primary does not cost every call
 * its timeouts and retries; after that one call tries it again. When every
 * model of the chain is out, the chain is tried whole rather than not at all.
 *
 * Every model that was tried and failed, or skipped, is a hop; the hops go
 * out with the response (and with the error when the whole chain failed).
 */
import type { ModelRoleSettings } from '../config/settings.js';
import type {
  FallbackHop,
  ModelCallOptions,
  ModelClient,
  ModelRequest,
  ModelResponse,
} from './model-client.js';
import { isRetryableFailure, ModelCallError, type ModelLogger } from './retry-policy.js';

/** How long a model that failed for good stays out of its chains. */
export const BREAKER_OPEN_MS = 60_000;

/** Which endpoint a model is, for the breaker: the same model in two roles shares one state. */
export function endpointKey(
  role: Pick<ModelRoleSettings, 'provider' | 'baseURL' | 'model'>,
): string {
  return `${role.provider} ${role.baseURL ?? ''} ${role.model}`;
}

/** Open circuits by endpoint; one per server, shared by every role's chain. */
export class CircuitBreaker {
  private readonly openUntil = new Map<string, number>();

  constructor(private readonly options: { openMs?: number; now?: () => number } = {}) {}

  private now(): number {
    return this.options.now?.() ?? Date.now();
  }

  isOpen(key: string): boolean {
    const until = this.openUntil.get(key);
    if (until === undefined) return false;
    if (this.now() < until) return true;
    this.openUntil.delete(key); // half-open: the next call tries it
    return false;
  }

  /** Until when the circuit is open (ms since the epoch), if it is. */
  openUntilMs(key: string): number | undefined {
    return this.isOpen(key) ? this.openUntil.get(key) : undefined;
  }

  trip(key: string): void {
    this.openUntil.set(key, this.now() + (this.options.openMs ?? BREAKER_OPEN_MS));
  }

  close(key: string): void {
    this.openUntil.delete(key);
  }
}

export interface ChainLink {
  settings: ModelRoleSettings;
  client: ModelClient;
}

export interface FallbackChainOptions {
  /** The primary first, then the fallbacks in order. */
  links: readonly ChainLink[];
  breaker: CircuitBreaker;
  logger?: ModelLogger;
}

export class FallbackChain implements ModelClient {
  readonly model: string;
  readonly contextWindow: number;
  private readonly links: readonly ChainLink[];

  constructor(private readonly options: FallbackChainOptions) {
    const primary = options.links[0];
    if (!primary) throw new Error('a fallback chain needs a primary model');
    this.links = options.links;
    this.model = primary.client.model;
    this.contextWindow = primary.client.contextWindow;
  }

  async complete(request: ModelRequest, options: ModelCallOptions = {}): Promise<ModelResponse> {
    const { breaker } = this.options;
    const keyed = this.links.map((link) => ({ ...link, key: endpointKey(link.settings) }));
    const hops: FallbackHop[] = [];
    const closed = keyed.filter((link) => !breaker.isOpen(link.key));
    for (const link of keyed)
      if (closed.length > 0 && !closed.includes(link))
        hops.push({ ...describe(link.settings), skipped: true, reason: 'circuit open' });
    const tried = closed.length > 0 ? closed : keyed;
    for (const [index, link] of tried.entries()) {
      const isPrimary = link === keyed[0];
      // An agent's model name belongs to the primary's provider; a fallback answers with its own.
      const { model: _override, ...rest } = request;
      const attempt: ModelRequest = isPrimary ? request : rest;
      try {
        const response = await link.client.complete(attempt, options);
        breaker.close(link.key);
        return hops.length > 0 ? { ...response, fallbackHops: hops } : response;
      } catch (err) {
        if (options.signal?.aborted) throw err;
        const last = index === tried.length - 1;
        if (!isRetryableFailure(err)) throw withHops(err, hops);
        breaker.trip(link.key);
        hops.push({
          ...describe(link.settings),
          skipped: false,
          reason: err instanceof Error ? err.message : String(err),
        });
        if (last) throw withHops(err, hops);
        const next = tried[index + 1]!.settings;
        this.options.logger?.warn(
          { from: link.settings.model, to: next.model, provider: next.provider },
          `model ${link.settings.model} failed for good; falling back to ${next.model}`,
        );
      }
    }
    throw new Error('unreachable: a fallback chain always has a model to try');
  }
}

function describe(
  settings: ModelRoleSettings,
): Pick<FallbackHop, 'provider' | 'model' | 'baseURL'> {
  return { provider: settings.provider, model: settings.model, baseURL: settings.baseURL };
}

function withHops(err: unknown, hops: FallbackHop[]): unknown {
  if (hops.length > 0 && err instanceof ModelCallError) err.fallbackHops = [...hops];
  return err;
}

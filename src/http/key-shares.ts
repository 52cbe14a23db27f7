/**
 * Fair shares of this instance's slots between client keys: how many open
 * streams (`limits.maxStreams`, by default ¾ of `server.maxStreams`, so one
 * key never takes the last quarter while others want one), session imports
 * (`limits.maxImports`, by default one of the server's import slots) and
 * model-running requests (`limits.maxTurns`, no share by default) one key may
 * hold at once. Past its share a key gets 429 KEY_LIMIT with Retry-After;
 * the server-wide caps (503) still apply after it. The admin is exempt.
 * Counted per instance, in memory: a slot is a connection of this process.
 */
import { CairnError } from '../errors.js';
import type { KeyLimits } from '../store/store.js';
import type { Principal } from './principal.js';

/** What a refused key is told to wait before it tries again. */
export const KEY_SHARE_RETRY_AFTER_S = 5;

export type ShareKind = 'maxStreams' | 'maxImports' | 'maxTurns';

const WHAT: Record<ShareKind, string> = {
  maxStreams: 'open event streams',
  maxImports: 'session imports at once',
  maxTurns: 'model-running requests at once',
};

/** The shares a key has when its limits name none. */
export type ShareDefaults = { readonly [K in ShareKind]?: number };

/** The default share of streams: ¾ of the server's cap, at least one. */
export function defaultStreamShare(serverMaxStreams: number): number {
  return Math.max(1, Math.floor((serverMaxStreams * 3) / 4));
}

const NOTHING_HELD = (): void => undefined;

export class KeyShares {
  private readonly held = new Map<string, number>();

  constructor(private readonly defaults: ShareDefaults) {}

  /** The share of `kind` a key with `limits` has; undefined when it has none. */
  shareOf(limits: KeyLimits, kind: ShareKind): number | undefined {
    return limits[kind] ?? this.defaults[kind];
  }

  /** How many slots of `kind` the key holds on this instance now. */
  heldBy(keyId: string, kind: ShareKind): number {
    return this.held.get(`${kind}:${keyId}`) ?? 0;
  }

  /**
   * Takes one slot of `kind` for the principal's key, or throws 429 KEY_LIMIT
   * when the key holds its share already. Returns the release function (safe
   * to call more than once); the admin takes nothing.
   */
  take(principal: Principal, kind: ShareKind): () => void {
    if (principal.kind !== 'client') return NOTHING_HELD;
    const { key } = principal;
    const max = this.shareOf(key.limits, kind);
    if (max === undefined) return NOTHING_HELD;
    const slot = `${kind}:${key.id}`;
    const count = this.held.get(slot) ?? 0;
    if (count >= max) {
      throw new CairnError(
        'KEY_LIMIT',
        `Key "${key.name}" holds ${count} ${WHAT[kind]}, its share on this server (limits.${kind} = ${max}). Finish or close one and retry in ${KEY_SHARE_RETRY_AFTER_S} s, or ask the admin to raise limits.${kind} (PATCH /keys/${key.id}).`,
        { retryAfterSeconds: KEY_SHARE_RETRY_AFTER_S },
      );
    }
    this.held.set(slot, count + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.held.get(slot) ?? 1) - 1;
      if (left <= 0) this.held.delete(slot);
      else this.held.set(slot, left);
    };
  }
}

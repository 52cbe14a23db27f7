/**
 * Client keys: issuing a secret (shown once, stored only as its SHA-256),
 * finding the key a bearer token names, and keeping `last_used_at` without a
 * write per request. Every request looks its key up in the database (one
 * indexed read, no cache), so a revoke on any instance holds on every
 * instance from the next request on.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { KeyAgents, KeyLimits, KeyRow, KeyStore } from '../store/store.js';

export const SECRET_PREFIX = 'cairn_sk_';
/** Random bytes in a secret: 256 bits, so its plain SHA-256 is a safe thing to store. */
const SECRET_BYTES = 32;
/** `last_used_at` is written at most this often per key and instance. */
export const LAST_USED_RESOLUTION_MS = 60_000;

export function secretHash(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** True for a token shaped like a client key's secret (anything else may be the admin key). */
export function looksLikeClientSecret(token: string): boolean {
  return token.startsWith(SECRET_PREFIX);
}

export class ClientKeys {
  private readonly lastTouched = new Map<string, number>();

  constructor(
    private readonly store: KeyStore,
    private readonly options: {
      now?: () => number;
      warn?: (details: Record<string, unknown>, message: string) => void;
    } = {},
  ) {}

  private now(): number {
    return this.options.now?.() ?? Date.now();
  }

  /** A new key and its secret; the secret is not kept anywhere. */
  async create(input: {
    name: string;
    agents: KeyAgents;
    limits: KeyLimits;
  }): Promise<{ key: KeyRow; secret: string }> {
    const secret = `${SECRET_PREFIX}${randomBytes(SECRET_BYTES).toString('base64url')}`;
    const key = await this.store.createKey({ ...input, secretHash: secretHash(secret) });
    return { key, secret };
  }

  /** The unrevoked key whose secret `token` is, or undefined. */
  async authenticate(token: string): Promise<KeyRow | undefined> {
    const hash = secretHash(token);
    const found = await this.store.findKeyBySecretHash(hash);
    // The lookup is by an index on the hash; the comparison of what it found is constant-time.
    if (!found || !timingSafeEqual(Buffer.from(found.secret_hash), Buffer.from(hash)))
      return undefined;
    const { secret_hash: _hash, ...key } = found;
    this.noteUse(key.id);
    return key;
  }

  /** Records the use, at most once per LAST_USED_RESOLUTION_MS per key, off the request. */
  private noteUse(id: string): void {
    const now = this.now();
    const last = this.lastTouched.get(id);
    if (last !== undefined && now - last < LAST_USED_RESOLUTION_MS) return;
    this.lastTouched.set(id, now);
    this.store.touchKey(id, new Date(now).toISOString()).catch((err: unknown) => {
      this.options.warn?.(
        { key: id, error: (err as Error).message },
        'could not record when a key was last used',
      );
    });
  }
}

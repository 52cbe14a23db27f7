/**
 * Bearer authentication and the client identity rate limits key on. A
 * request is the holder of the admin key, one client key, or an
 * unauthenticated client known only by its address: how it spells the
 * `Authorization` header never makes it a different client. Failed
 * authentication is limited whatever `server.rateLimit` says, so a key cannot
 * be guessed at line speed — and only a wrong credential is a failure (a
 * request with none, an `<img>` on any web page, is not), counted per address
 * and presented key: wrong admin keys lock the admin key out of that address,
 * a wrong client secret locks out that secret alone. A client key's secret
 * (256 random bits) is checked even from a locked address: telling a guesser
 * one of those is right tells it nothing it could have guessed, and a right
 * client key is never refused for someone else's failures.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { CairnError } from '../errors.js';
import { looksLikeClientSecret, type ClientKeys } from './client-keys.js';
import { sweepWindows } from './key-limits.js';
import { endUserHeader, setPrincipal } from './principal.js';

/** Failed authentications allowed per address per window before 429. */
export const AUTH_FAILURE_LIMIT = 20;
export const AUTH_FAILURE_WINDOW_MS = 60_000;
/** Addresses tracked at most; expired windows are swept before this is reached. */
const MAX_TRACKED_ADDRESSES = 10_000;

/** The identity every request that proved the API key shares. */
const KEY_HOLDER = 'key';

const identities = new WeakMap<FastifyRequest, string>();

/**
 * Who a request is, for rate limiting: the admin key holder, or one client
 * key, once authenticated; else its address (whatever its Authorization
 * header says).
 */
export function clientIdentity(request: FastifyRequest): string {
  return identities.get(request) ?? `ip:${request.ip}`;
}

/**
 * The token of an `Authorization: Bearer <token>` header. The scheme is
 * case-insensitive (RFC 9110 §11.1) and surrounding blanks are ignored.
 */
export function bearerToken(header: string | undefined): string | undefined {
  const match = /^\s*bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return match?.[1];
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

interface FailureWindow {
  count: number;
  resetAt: number;
}

/** Counts failed authentications per counter (an address and the key presented) in fixed windows. */
export class AuthFailureLimiter {
  private readonly windows = new Map<string, FailureWindow>();

  constructor(
    private readonly options: {
      max: number;
      windowMs: number;
      now?: () => number;
    } = { max: AUTH_FAILURE_LIMIT, windowMs: AUTH_FAILURE_WINDOW_MS },
  ) {}

  private now(): number {
    return this.options.now?.() ?? Date.now();
  }

  /** Milliseconds until `address` may try again, or undefined if it may now. */
  blockedForMs(address: string): number | undefined {
    const window = this.windows.get(address);
    if (!window) return undefined;
    const left = window.resetAt - this.now();
    if (left <= 0) {
      this.windows.delete(address);
      return undefined;
    }
    return window.count >= this.options.max ? left : undefined;
  }

  recordFailure(address: string): void {
    const now = this.now();
    const window = this.windows.get(address);
    if (window && window.resetAt > now) {
      window.count += 1;
      return;
    }
    if (this.windows.size >= MAX_TRACKED_ADDRESSES)
      sweepWindows(this.windows, now, MAX_TRACKED_ADDRESSES);
    this.windows.set(address, { count: 1, resetAt: now + this.options.windowMs });
  }
}

export interface AuthOptions {
  /** The admin key; null: a request with no client key is the admin (one operator, as before keys). */
  apiKey: string | null;
  /** Finds the client key a `cairn_sk_…` token names. */
  clientKeys?: Pick<ClientKeys, 'authenticate'>;
  /** True for paths anyone may call (no key needed). */
  isOpenPath: (path: string) => boolean;
  limiter?: AuthFailureLimiter;
}

const WRONG_KEY =
  'Missing or wrong API key. Send "Authorization: Bearer <key>": the admin key (CAIRN_API_KEY) or a client key (cairn_sk_…) that is not revoked.';

/**
 * Adds the bearer check to every route but the open paths and sets each
 * request's principal: a client key's secret makes it that key, the admin
 * key (or, with none set, no key at all) the admin; anything else is 401.
 */
export function registerAuth(app: FastifyInstance, options: AuthOptions): void {
  const expected = options.apiKey === null ? undefined : digest(options.apiKey);
  const limiter = options.limiter ?? new AuthFailureLimiter();
  app.addHook('onRequest', async (request, reply) => {
    if (options.isOpenPath(request.url.split('?')[0] ?? '')) return;
    const user = endUserHeader(request);
    const token = bearerToken(request.headers.authorization);
    const clientSecret = token !== undefined && looksLikeClientSecret(token);
    // Failures count per address and the key presented: any other token is a
    // try at the admin key, a `cairn_sk_…` one at that one secret.
    const counter = clientSecret
      ? `${request.ip} ${digest(token).toString('base64url')}`
      : `${request.ip} admin`;
    // A locked-out counter is refused before its key is checked: otherwise a
    // guesser would still learn which guess was right.
    const blockedMs = token === undefined ? undefined : limiter.blockedForMs(counter);
    if (blockedMs !== undefined) {
      const seconds = Math.ceil(blockedMs / 1000);
      void reply.header('retry-after', String(seconds));
      throw new CairnError(
        'RATE_LIMITED',
        `Too many failed authentication attempts from this address with this key. Retry after ${seconds} s with the right key.`,
      );
    }
    const fail = (): never => {
      // No credential at all is no guess: it is refused, never counted.
      if (token !== undefined) limiter.recordFailure(counter);
      throw new CairnError('UNAUTHORIZED', WRONG_KEY);
    };
    if (clientSecret) {
      const key = (await options.clientKeys?.authenticate(token)) ?? fail();
      identities.set(request, `client:${key.id}`);
      setPrincipal(request, { kind: 'client', key, user });
      return;
    }
    if (expected !== undefined) {
      // Compare digests so the comparison is constant-time whatever the length.
      if (!timingSafeEqual(digest(token ?? ''), expected)) fail();
      identities.set(request, KEY_HOLDER);
    }
    setPrincipal(request, { kind: 'admin', user });
  });
}

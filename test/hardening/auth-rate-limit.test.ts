/**
 * Rate limits key on the client's identity, not on how it
 * spells its Authorization header; failed authentication is limited per
 * address even with no `server.rateLimit`. Over real HTTP on 127.0.0.1.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AUTH_FAILURE_LIMIT, AuthFailureLimiter, bearerToken } from '../../src/http/auth.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const API_KEY = 'sentinel-key-52';

describe('bearerToken', () => {
  it('reads the token whatever the scheme spelling and blanks around it', () => {
    for (const header of [
      `Bearer ${API_KEY}`,
      `bearer ${API_KEY}`,
      `BEARER ${API_KEY}`,
      `Bearer    ${API_KEY}  `,
      ` Bearer\t${API_KEY}`,
    ])
      expect(bearerToken(header)).toBe(API_KEY);
    for (const header of [
      undefined,
      '',
      'Bearer',
      'Bearer ',
      API_KEY,
      `Basic ${API_KEY}`,
      'Bearer a b',
    ])
      expect(bearerToken(header)).toBeUndefined();
  });
});

describe('AuthFailureLimiter', () => {
  it('blocks a counter after max failures until its window ends, others unaffected', () => {
    let now = 1_000;
    const limiter = new AuthFailureLimiter({ max: 2, windowMs: 10_000, now: () => now });
    limiter.recordFailure('a');
    expect(limiter.blockedForMs('a')).toBeUndefined();
    limiter.recordFailure('a');
    expect(limiter.blockedForMs('a')).toBe(10_000);
    expect(limiter.blockedForMs('b')).toBeUndefined();
    now += 9_999;
    expect(limiter.blockedForMs('a')).toBe(1);
    now += 1;
    expect(limiter.blockedForMs('a')).toBeUndefined();
    limiter.recordFailure('a');
    expect(limiter.blockedForMs('a')).toBeUndefined();
  });
});

describe('rate limits over real HTTP', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  async function listen(options: Parameters<typeof startTestApp>[0]): Promise<string> {
    t = await startTestApp({ fake: null, ...options });
    return t.app.server.listen({ host: '127.0.0.1', port: 0 });
  }

  const get = (url: string, authorization?: string): Promise<Response> =>
    fetch(url, { headers: authorization === undefined ? {} : { authorization } });

  it('a new bogus header each time does not buy a new budget (no API key configured)', async () => {
    const base = await listen({ server: { rateLimit: { max: 3, windowMs: 60_000 } } });
    const statuses: number[] = [];
    for (const header of ['Bearer bogus-1', 'bearer bogus-2', undefined, 'BEARER   bogus-3'])
      statuses.push((await get(`${base}/agents`, header)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
  });

  it('every spelling of the right key is one client with one budget', async () => {
    const base = await listen({
      env: { CAIRN_API_KEY: API_KEY },
      server: { rateLimit: { max: 3, windowMs: 60_000 } },
    });
    const statuses: number[] = [];
    for (const header of [
      `Bearer ${API_KEY}`,
      `bearer ${API_KEY}`,
      `BEARER   ${API_KEY} `,
      `Bearer ${API_KEY}`,
    ])
      statuses.push((await get(`${base}/agents`, header)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
  });

  it('limits failed authentication per address with no server.rateLimit: 429 with Retry-After', async () => {
    const base = await listen({ env: { CAIRN_API_KEY: API_KEY } });
    for (let i = 0; i < AUTH_FAILURE_LIMIT; i++) {
      const guess = await get(`${base}/agents`, `Bearer guess-${i}`);
      expect(guess.status).toBe(401);
    }
    const limited = await get(`${base}/agents`, 'Bearer one-more-guess');
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    const body = (await limited.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('RATE_LIMITED');
    expect(body.error.message).not.toContain(API_KEY);
    // Even the right key is refused from this address until the window ends,
    // so a guesser cannot tell which guess was right.
    expect((await get(`${base}/agents`, `Bearer ${API_KEY}`)).status).toBe(429);
    // Health checks stay open; another address has its own count.
    expect((await get(`${base}/health`)).status).toBe(200);
    const other = await t!.app.server.inject({
      url: '/agents',
      remoteAddress: '10.0.0.9',
      headers: { authorization: `Bearer ${API_KEY}` },
    });
    expect(other.statusCode).toBe(200);
  });

  it('requests with no credentials (an <img> on any page) never lock out the right key', async () => {
    const base = await listen({ env: { CAIRN_API_KEY: API_KEY } });
    for (let i = 0; i < AUTH_FAILURE_LIMIT + 5; i++)
      expect((await get(`${base}/agents`)).status).toBe(401);
    expect((await get(`${base}/agents`, `Bearer ${API_KEY}`)).status).toBe(200);
  });

  it("a client key is never refused for another's wrong secrets from the same address", async () => {
    const base = await listen({ env: { CAIRN_API_KEY: API_KEY } });
    const created = await fetch(`${base}/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'tenant', agents: '*' }),
    });
    const { secret } = (await created.json()) as { secret: string };
    // A revoked or mistyped secret, sent over and over: that secret is locked out...
    const stale = `cairn_sk_${'x'.repeat(43)}`;
    for (let i = 0; i < AUTH_FAILURE_LIMIT; i++)
      expect((await get(`${base}/agents`, `Bearer ${stale}`)).status).toBe(401);
    expect((await get(`${base}/agents`, `Bearer ${stale}`)).status).toBe(429);
    // ...and nobody else: the right client key and the admin key still work from here.
    expect((await get(`${base}/agents`, `Bearer ${secret}`)).status).toBe(200);
    expect((await get(`${base}/agents`, `Bearer ${API_KEY}`)).status).toBe(200);
    // Guesses at the admin key lock out the admin key from this address, never a client key.
    for (let i = 0; i < AUTH_FAILURE_LIMIT; i++) await get(`${base}/agents`, `Bearer guess-${i}`);
    expect((await get(`${base}/agents`, `Bearer ${API_KEY}`)).status).toBe(429);
    expect((await get(`${base}/agents`, `Bearer ${secret}`)).status).toBe(200);
  });

  it('server.trustProxy: behind a proxy, failures count by the forwarded address', async () => {
    const base = await listen({ env: { CAIRN_API_KEY: API_KEY }, server: { trustProxy: true } });
    const from = (address: string, authorization: string) =>
      fetch(`${base}/agents`, { headers: { authorization, 'x-forwarded-for': address } });
    for (let i = 0; i < AUTH_FAILURE_LIMIT; i++)
      expect((await from('203.0.113.7', `Bearer guess-${i}`)).status).toBe(401);
    expect((await from('203.0.113.7', `Bearer ${API_KEY}`)).status).toBe(429);
    // Another client behind the same proxy is another address.
    expect((await from('198.51.100.4', `Bearer ${API_KEY}`)).status).toBe(200);
  });

  it('without server.trustProxy, X-Forwarded-For is ignored', async () => {
    const base = await listen({ env: { CAIRN_API_KEY: API_KEY } });
    for (let i = 0; i < AUTH_FAILURE_LIMIT; i++) {
      const guess = await fetch(`${base}/agents`, {
        headers: { authorization: `Bearer guess-${i}`, 'x-forwarded-for': `192.0.2.${i}` },
      });
      expect(guess.status).toBe(401);
    }
    expect((await get(`${base}/agents`, `Bearer ${API_KEY}`)).status).toBe(429);
  });

  it('successful requests never count as failures', async () => {
    const base = await listen({ env: { CAIRN_API_KEY: API_KEY } });
    for (let i = 0; i < AUTH_FAILURE_LIMIT + 5; i++)
      expect((await get(`${base}/agents`, `Bearer ${API_KEY}`)).status).toBe(200);
  });
});

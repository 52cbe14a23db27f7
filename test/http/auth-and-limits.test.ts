/**
 * Bearer auth (401 + WWW-Authenticate, /health open,
 * no wildcard CORS, the loopback rule `cairn serve` applies before it binds)
 * and the body limit, for bodies with a Content-Length and for chunked
 * bodies without one over a real socket.
 */
import { request as httpRequest } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isLoopbackHost, loadSettings } from '../../src/config/settings.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const API_KEY = 'sentinel-key-123';

describe('bearer auth', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { CAIRN_API_KEY: API_KEY } });
  });
  afterAll(async () => t.close());

  function expectUnauthorized(res: {
    statusCode: number;
    headers: Record<string, unknown>;
    json: () => unknown;
    body: string;
  }): void {
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toBe('Bearer realm="cairn"');
    expect(res.json()).toEqual({ error: { code: 'UNAUTHORIZED', message: expect.any(String) } });
    expect(res.body).not.toContain(API_KEY);
  }

  it.each([
    ['no Authorization header', {}],
    ['a wrong token', { authorization: 'Bearer wrong-key' }],
    ['the key with a suffix', { authorization: `Bearer ${API_KEY}x` }],
    ['a prefix of the key', { authorization: `Bearer ${API_KEY.slice(0, -1)}` }],
    ['the key without the Bearer scheme', { authorization: API_KEY }],
    ['the key as Basic credentials', { authorization: `Basic ${API_KEY}` }],
    ['an empty bearer token', { authorization: 'Bearer ' }],
  ])('answers %s with 401 and WWW-Authenticate', async (_label, headers) => {
    expectUnauthorized(await t.app.server.inject({ url: '/agents', headers }));
  });

  it('guards every route, unknown ones included, and runs nothing for a rejected request', async () => {
    const before = (await t.app.store.listSessions({ limit: 500 })).items.length;
    for (const [method, url] of [
      ['GET', '/sessions'],
      ['POST', '/sessions'],
      ['POST', '/agents/assistant/chat'],
      ['GET', '/events'],
      ['GET', '/sessions/sess_000000000000000000000000'],
      ['DELETE', '/sessions/sess_000000000000000000000000'],
      ['GET', '/no-such-route'],
    ] as const) {
      const res = await t.app.server.inject({
        method,
        url,
        ...(method === 'POST' ? { payload: { agentName: 'assistant', message: 'hi' } } : {}),
      });
      expect(res.statusCode, `${method} ${url}`).toBe(401);
      expect(res.headers['www-authenticate']).toBe('Bearer realm="cairn"');
    }
    expect((await t.app.store.listSessions({ limit: 500 })).items.length).toBe(before);
    expect(t.fake!.requests).toHaveLength(0);
  });

  it('lets the right token through', async () => {
    const headers = { authorization: `Bearer ${API_KEY}` };
    const agents = await t.app.server.inject({ url: '/agents', headers });
    expect(agents.statusCode).toBe(200);
    expect(agents.json().agents[0].name).toBe('assistant');
    const created = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      headers,
      payload: { agentName: 'assistant' },
    });
    expect(created.statusCode).toBe(201);
    t.fake!.script({ content: 'authorized' });
    const chat = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      headers,
      payload: { message: 'hi', sessionId: created.json().session.id },
    });
    expect(chat.statusCode).toBe(200);
    expect(chat.json().reply).toBe('authorized');
  });

  it('leaves /health open, with or without a query string', async () => {
    for (const url of ['/health', '/health?probe=1']) {
      const res = await t.app.server.inject({ url });
      expect(res.statusCode, url).toBe(200);
      expect(res.json().status).toBe('ok');
    }
    // Only /health: a path that merely starts with it is guarded.
    const res = await t.app.server.inject({ url: '/healthz' });
    expect(res.statusCode).toBe(401);
  });

  it('sends no wildcard CORS header, even to a cross-origin request', async () => {
    const headers = { origin: 'https://evil.example', authorization: `Bearer ${API_KEY}` };
    const get = await t.app.server.inject({ url: '/agents', headers });
    expect(get.headers['access-control-allow-origin']).toBeUndefined();
    const preflight = await t.app.server.inject({
      method: 'OPTIONS',
      url: '/agents',
      headers: { ...headers, 'access-control-request-method': 'GET' },
    });
    expect(preflight.headers['access-control-allow-origin']).toBeUndefined();
    const unauthorized = await t.app.server.inject({
      url: '/agents',
      headers: { origin: 'https://evil.example' },
    });
    expect(unauthorized.headers['access-control-allow-origin']).toBeUndefined();
  });
});

describe('no API key configured', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t.close());

  it('serves every route without a token', async () => {
    const res = await t.app.server.inject({ url: '/agents' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['www-authenticate']).toBeUndefined();
  });
});

describe('the loopback rule of `cairn serve`', () => {
  it.each(['127.0.0.1', '127.0.0.53', '127.255.255.254', 'localhost', '::1', '[::1]'])(
    '%s is loopback',
    (host) => {
      expect(isLoopbackHost(host)).toBe(true);
    },
  );

  it.each([
    '0.0.0.0',
    '::',
    '[::]',
    '192.168.1.10',
    '10.0.0.1',
    '128.0.0.1',
    '1.127.0.0',
    'example.com',
    'localhost.example.com',
    '',
  ])('%s is not loopback', (host) => {
    expect(isLoopbackHost(host)).toBe(false);
  });

  it('loadSettings gives serve what it needs to refuse a public bind without a key', () => {
    const home = mkdtempSync(join(tmpdir(), 'cairn-auth-'));
    try {
      const open = loadSettings({ home, env: { CAIRN_HOST: '0.0.0.0' } });
      expect(open.server.host).toBe('0.0.0.0');
      expect(open.server.apiKey).toBeNull();
      // serve refuses exactly this combination.
      expect(!isLoopbackHost(open.server.host) && open.server.apiKey === null).toBe(true);

      const keyed = loadSettings({
        home,
        env: { CAIRN_HOST: '0.0.0.0', CAIRN_API_KEY: API_KEY },
      });
      expect(keyed.server.apiKey).toBe(API_KEY);

      const local = loadSettings({ home, env: {} });
      expect(local.server.host).toBe('127.0.0.1');
      expect(isLoopbackHost(local.server.host)).toBe(true);

      // A blank key is no key: it must not turn the guard off.
      const blank = loadSettings({ home, env: { CAIRN_HOST: '0.0.0.0', CAIRN_API_KEY: '  ' } });
      expect(blank.server.apiKey).toBeNull();
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('body limit', () => {
  const LIMIT = 2048;
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    t = await startTestApp({ server: { bodyLimitBytes: LIMIT } });
    await t.app.server.listen({ port: 0, host: '127.0.0.1' });
    port = (t.app.server.server.address() as { port: number }).port;
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  it('accepts a chat body just under the limit', async () => {
    const message = 'm'.repeat(LIMIT - 100);
    t.fake!.script({ content: 'fits' });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message },
    });
    expect(res.statusCode).toBe(200);
  });

  it('answers an oversized JSON body with 413 PAYLOAD_TOO_LARGE and runs nothing', async () => {
    const before = (await t.app.store.listSessions({ limit: 500 })).items.length;
    const chat = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'm'.repeat(LIMIT + 1) },
    });
    expect(chat.statusCode).toBe(413);
    expect(chat.json()).toEqual({
      error: { code: 'PAYLOAD_TOO_LARGE', message: expect.any(String) },
    });
    const session = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'assistant', title: 't'.repeat(LIMIT * 4) },
    });
    expect(session.statusCode).toBe(413);
    expect(session.json().error.code).toBe('PAYLOAD_TOO_LARGE');
    expect(t.fake!.requests).toHaveLength(0);
    expect((await t.app.store.listSessions({ limit: 500 })).items.length).toBe(before);
  });

  /** Sends a chunked body (no Content-Length) over a real socket. */
  function sendChunked(
    path: string,
    chunks: string[],
  ): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port,
          method: 'POST',
          path,
          headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
        },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (body += d));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
          res.on('error', reject);
        },
      );
      // The server may answer and close before the whole body is written.
      req.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code !== 'EPIPE' && err.code !== 'ECONNRESET') reject(err);
      });
      const writeNext = (i: number): void => {
        if (i >= chunks.length) {
          req.end();
          return;
        }
        if (req.destroyed) return;
        req.write(chunks[i], () => setImmediate(() => writeNext(i + 1)));
      };
      writeNext(0);
    });
  }

  it('answers an oversized chunked body with no Content-Length with 413', async () => {
    const text = JSON.stringify({ message: 'c'.repeat(LIMIT * 3) });
    const chunks: string[] = [];
    for (let i = 0; i < text.length; i += 256) chunks.push(text.slice(i, i + 256));
    const res = await sendChunked('/agents/assistant/chat', chunks);
    expect(res.status).toBe(413);
    expect(JSON.parse(res.body)).toEqual({
      error: { code: 'PAYLOAD_TOO_LARGE', message: expect.any(String) },
    });
    expect(t.fake!.requests).toHaveLength(0);
  });

  it('accepts a small chunked body', async () => {
    t.fake!.script({ content: 'chunked ok' });
    const text = JSON.stringify({ message: 'hello in pieces' });
    const res = await sendChunked('/agents/assistant/chat', [text.slice(0, 5), text.slice(5)]);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).reply).toBe('chunked ok');
  });
});

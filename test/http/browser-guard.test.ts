/**
 * A web page the user visits cannot drive a local Cairn: a foreign `Host`
 * (DNS rebinding) or a foreign `Origin` is refused before any route runs, on
 * /mcp and every other route, with and without an API key. Listed origins get
 * CORS without a wildcard; every response carries the browser headers.
 * The rebinding probes send raw headers over a real port and check that the
 * fake model was never asked and no session was created.
 */
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultAllowedHosts, hostName, isHostAllowed } from '../../src/http/browser-guard.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const API_KEY = 'browser-guard-key';
const LISTED_ORIGIN = 'https://chat.example.com';

interface RawReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One request over a real socket with exactly the headers given (Host included). */
function rawRequest(
  port: number,
  options: { method: string; path: string; headers: Record<string, string>; body?: string },
): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        method: options.method,
        path: options.path,
        headers: options.headers,
        setHost: false,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

function errorCode(body: string): string | undefined {
  const parsed = JSON.parse(body) as { error?: { code?: string } };
  return parsed.error?.code;
}

const MCP_CALL = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'tools/call',
  params: { name: 'chat_with_assistant', arguments: { message: 'book the flight' } },
});

describe.each([
  { label: 'without an API key', env: {} as Record<string, string>, auth: {} },
  {
    label: 'with an API key',
    env: { CAIRN_API_KEY: API_KEY },
    auth: { authorization: `Bearer ${API_KEY}` } as Record<string, string>,
  },
])('DNS rebinding against a server $label', ({ env, auth }) => {
  let t: TestApp;
  let port: number;

  beforeAll(async () => {
    t = await startTestApp({ env });
    t.fake!.setDefault(() => ({ content: 'the model ran' }));
    await t.app.server.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.server.address() as { port: number }).port;
  });
  afterAll(async () => t.close());

  const probes: { method: string; path: string; body?: string; headers: Record<string, string> }[] =
    [
      {
        method: 'POST',
        path: '/mcp',
        body: MCP_CALL,
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
      },
      { method: 'GET', path: '/agents', headers: {} },
      { method: 'GET', path: '/health', headers: {} },
      {
        method: 'POST',
        path: '/v1/chat/completions',
        body: JSON.stringify({ model: 'assistant', messages: [{ role: 'user', content: 'hi' }] }),
        headers: { 'content-type': 'application/json' },
      },
      { method: 'GET', path: '/no/such/route', headers: {} },
    ];

  it.each(probes)('refuses $method $path with a foreign Host, before it runs', async (probe) => {
    const res = await rawRequest(port, {
      ...probe,
      headers: {
        ...probe.headers,
        ...auth,
        host: `attacker.example:${port}`,
        origin: `http://attacker.example:${port}`,
      },
    });
    expect(res.status).toBe(403);
    expect(errorCode(res.body)?.toUpperCase()).toBe('HOST_NOT_ALLOWED');
    expect(res.body).not.toContain('You are a test assistant');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
  });

  it.each(probes)(
    'refuses $method $path from a foreign Origin on an allowed Host',
    async (probe) => {
      const res = await rawRequest(port, {
        ...probe,
        headers: {
          ...probe.headers,
          ...auth,
          host: `127.0.0.1:${port}`,
          origin: 'http://attacker.example',
        },
      });
      expect(res.status).toBe(403);
      expect(errorCode(res.body)?.toUpperCase()).toBe('ORIGIN_NOT_ALLOWED');
      expect(res.body).not.toContain('You are a test assistant');
    },
  );

  it('ran nothing for the refused probes: no model call, no session', async () => {
    const sessions = await t.app.store.listSessions({ limit: 10 });
    expect(sessions.items).toEqual([]);
    expect(t.fake!.requests).toHaveLength(0);
  });

  it('names the refusal with a stable code in each API shape', async () => {
    const native = await rawRequest(port, {
      method: 'GET',
      path: '/agents',
      headers: { ...auth, host: 'attacker.example' },
    });
    expect(errorCode(native.body)).toBe('HOST_NOT_ALLOWED');
    const origin = await rawRequest(port, {
      method: 'GET',
      path: '/agents',
      headers: { ...auth, host: `localhost:${port}`, origin: 'null' },
    });
    expect(errorCode(origin.body)).toBe('ORIGIN_NOT_ALLOWED');
    const v1 = await rawRequest(port, {
      method: 'GET',
      path: '/v1/models',
      headers: { ...auth, host: 'attacker.example' },
    });
    expect(v1.status).toBe(403);
    expect(errorCode(v1.body)).toBe('host_not_allowed');
  });

  it('serves its own names and its own origin (the console calling home)', async () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'localhost']) {
      const res = await rawRequest(port, {
        method: 'GET',
        path: '/agents',
        headers: { ...auth, host, origin: `http://${host}` },
      });
      expect(res.status, host).toBe(200);
    }
    const otherPort = await rawRequest(port, {
      method: 'GET',
      path: '/agents',
      headers: { ...auth, host: `127.0.0.1:${port}`, origin: `http://127.0.0.1:${port + 1}` },
    });
    expect(otherPort.status).toBe(403);
  });
});

describe('allowed hosts and CORS origins from the settings', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp({
      fake: null,
      env: { CAIRN_API_KEY: API_KEY },
      server: {
        allowedHosts: ['cairn.internal', '.corp.example'],
        corsOrigins: [LISTED_ORIGIN],
        publicUrl: 'https://cairn.example.com/',
      },
    });
  });
  afterAll(async () => t.close());

  const get = (headers: Record<string, string>) =>
    t.app.server.inject({
      method: 'GET',
      url: '/agents',
      headers: { authorization: `Bearer ${API_KEY}`, ...headers },
    });

  it('answers to listed names on any port, subdomains of a dotted entry, and the public URL', async () => {
    for (const host of [
      'cairn.internal',
      'cairn.internal:8443',
      'a.corp.example',
      'corp.example',
      'cairn.example.com',
      '[::1]:5050',
    ]) {
      expect((await get({ host })).statusCode, host).toBe(200);
    }
    for (const host of ['cairn.internal.attacker.example', 'corpexample', 'example.com']) {
      const res = await get({ host });
      expect(res.statusCode, host).toBe(403);
      expect(res.json<{ error: { code: string } }>().error.code).toBe('HOST_NOT_ALLOWED');
    }
  });

  it('accepts the public URL as the console origin behind a proxy', async () => {
    const res = await get({ host: '127.0.0.1:5050', origin: 'https://cairn.example.com' });
    expect(res.statusCode).toBe(200);
  });

  it('answers a preflight from a listed origin without the key, naming that origin only', async () => {
    const res = await t.app.server.inject({
      method: 'OPTIONS',
      url: '/v1/chat/completions',
      headers: {
        origin: LISTED_ORIGIN,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type',
      },
    });
    expect(res.statusCode).toBe(204);
    expect(res.headers['access-control-allow-origin']).toBe(LISTED_ORIGIN);
    expect(String(res.headers['access-control-allow-headers'])).toContain('authorization');
    expect(String(res.headers['access-control-allow-methods'])).toContain('POST');
    expect(res.headers['vary']).toContain('Origin');
    expect(JSON.stringify(res.headers)).not.toContain('"*"');
  });

  it('gives a listed origin CORS headers on the answer; an unlisted one is refused', async () => {
    const listed = await get({ origin: LISTED_ORIGIN });
    expect(listed.statusCode).toBe(200);
    expect(listed.headers['access-control-allow-origin']).toBe(LISTED_ORIGIN);
    expect(listed.headers['vary']).toContain('Origin');

    const preflight = await t.app.server.inject({
      method: 'OPTIONS',
      url: '/agents',
      headers: { origin: 'https://evil.example.com', 'access-control-request-method': 'GET' },
    });
    expect(preflight.statusCode).toBe(403);
    expect(preflight.headers['access-control-allow-origin']).toBeUndefined();
    expect(preflight.json<{ error: { code: string } }>().error.code).toBe('ORIGIN_NOT_ALLOWED');
  });

  it('puts the browser headers on every response, errors included', async () => {
    for (const res of [
      await t.app.server.inject({ method: 'GET', url: '/health' }),
      await get({}),
      await t.app.server.inject({ method: 'GET', url: '/agents' }),
      await get({ host: 'attacker.example' }),
      await t.app.server.inject({ method: 'GET', url: '/nothing/here' }),
    ]) {
      expect(res.headers['x-content-type-options']).toBe('nosniff');
      expect(res.headers['referrer-policy']).toBe('no-referrer');
      expect(res.headers['x-frame-options']).toBe('DENY');
      expect(String(res.headers['content-security-policy'])).toContain("frame-ancestors 'none'");
    }
  });
});

describe('host names', () => {
  it('reads Host headers: case, ports, IPv6 brackets and a trailing dot', () => {
    expect(hostName('LocalHost:5050')).toBe('localhost');
    expect(hostName('[::1]:80')).toBe('[::1]');
    expect(hostName('::1')).toBe('[::1]');
    expect(hostName('localhost.')).toBe('localhost');
    expect(hostName('')).toBeUndefined();
  });

  it('allows loopback, the bind address and the public URL host by default; nothing else', () => {
    const allowed = defaultAllowedHosts({
      host: '10.1.2.3',
      publicUrl: 'https://cairn.example.com:8443/base',
      allowedHosts: [],
    });
    for (const host of ['localhost', '127.0.0.1:1', '[::1]', '10.1.2.3:5050', 'cairn.example.com'])
      expect(isHostAllowed(host, allowed), host).toBe(true);
    for (const host of [
      undefined,
      '',
      'attacker.example',
      '10.1.2.4',
      'localhost.attacker.example',
    ])
      expect(isHostAllowed(host, allowed), String(host)).toBe(false);
  });
});

describe('browser headers on responses written past the framework', () => {
  let t: TestApp;
  let port: number;

  beforeAll(async () => {
    t = await startTestApp({ server: { corsOrigins: [LISTED_ORIGIN] } });
    await t.app.server.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.server.address() as { port: number }).port;
  });
  afterAll(async () => t.close());

  it('an event stream and an MCP answer carry them, and CORS for a listed origin', async () => {
    const events = await new Promise<RawReply>((resolve, reject) => {
      const req = httpRequest(
        { host: '127.0.0.1', port, path: '/events', headers: { origin: LISTED_ORIGIN } },
        (res) => {
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: '' });
          res.destroy();
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(events.status).toBe(200);
    expect(events.headers['x-content-type-options']).toBe('nosniff');
    expect(events.headers['x-frame-options']).toBe('DENY');
    expect(events.headers['access-control-allow-origin']).toBe(LISTED_ORIGIN);

    const mcp = await rawRequest(port, {
      method: 'POST',
      path: '/mcp',
      headers: {
        host: `127.0.0.1:${port}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
    });
    expect(mcp.status).toBe(200);
    expect(mcp.headers['x-content-type-options']).toBe('nosniff');
    expect(mcp.headers['referrer-policy']).toBe('no-referrer');
  });
});

/**
 * The ownership guard on a small fastify app that registers every route of
 * the table with a handler that only answers 200, so each answer is the
 * guard's: which paths the table covers, which routes spend tokens, where a
 * route finds the session, task or agent it names, and how an MCP batch is
 * counted against the per-key and the server-wide request limits.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CairnError } from '../../src/errors.js';
import { Access } from '../../src/http/access.js';
import { KeyLimits, WindowCounter } from '../../src/http/key-limits.js';
import {
  registeredRoutes,
  registerOwnership,
  ROUTE_RULES,
  ruleFor,
  type OwnershipDeps,
} from '../../src/http/ownership.js';
import { setPrincipal } from '../../src/http/principal.js';
import type { KeyRow } from '../../src/store/store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

/** Tokens every key has spent today, as the guard's budget check reads them. */
const SPENT_TODAY = 500;

let dir: string;
let store: SqliteStore;
/** Keys by name: `a` and `b` may use every agent, `narrow` only `other`. */
const keys: Record<string, KeyRow> = {};
let aSession: string;
let aTask: string;
/** A session and a task of each budgeted key. */
const owned: Record<string, { session: string; task: string }> = {};

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-ownership-'));
  store = new SqliteStore(path.join(dir, 'cairn.db'));
  const make = (name: string, agents: KeyRow['agents'], limits: KeyRow['limits']) =>
    store.createKey({ name, agents, limits, secretHash: name.padEnd(64, '0') });
  keys['a'] = await make('a', '*', {});
  keys['b'] = await make('b', '*', {});
  keys['narrow'] = await make('narrow', ['other'], {});
  keys['spent'] = await make('spent', '*', { tokensPerDay: SPENT_TODAY });
  keys['fresh'] = await make('fresh', '*', { tokensPerDay: SPENT_TODAY + 1 });
  keys['four'] = await make('four', '*', { requestsPerMinute: 4 });
  keys['two'] = await make('two', '*', { requestsPerMinute: 2 });
  const session = await store.createSession({
    agentName: 'assistant',
    mode: 'chat',
    compactCount: 50,
    systemPrompt: 'System.',
    owner: { key: keys['a'].id, user: null },
  });
  aSession = session.id;
  aTask = (await store.createTask({ sessionId: aSession, agentName: 'assistant', input: 'x' })).id;
  for (const name of ['spent', 'fresh']) {
    const own = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'System.',
      owner: { key: keys[name]!.id, user: null },
    });
    const task = await store.createTask({ sessionId: own.id, agentName: 'assistant', input: 'x' });
    owned[name] = { session: own.id, task: task.id };
  }
});

afterAll(async () => {
  await store.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/**
 * An app with the guard and every route of the table (plus the console and
 * docs paths); `x-test-key` names the client key of a request (none: the admin).
 */
async function guardedApp(
  serverLimit: { max: number; windowMs: number } | null,
): Promise<FastifyInstance> {
  // The bucket the server's own limiter (not on this app) would take each request's first call from.
  const rateLimit: OwnershipDeps['rateLimit'] = serverLimit && {
    ...serverLimit,
    bucket: new WindowCounter(serverLimit.windowMs),
  };
  const app = Fastify();
  app.addHook('onRequest', async (request) => {
    const name = request.headers['x-test-key'];
    if (typeof name === 'string')
      setPrincipal(request, { kind: 'client', key: keys[name]!, user: null });
  });
  registerOwnership(app, {
    access: new Access(store),
    // Every key has spent SPENT_TODAY tokens today.
    limits: new KeyLimits({ keyTokensOn: async () => SPENT_TODAY }),
    rateLimit,
  });
  app.setErrorHandler((error, _request, reply) => {
    if (!(error instanceof CairnError)) return reply.status(500).send({ code: 'INTERNAL' });
    return reply.status(error.status).send({
      code: error.code,
      message: error.message,
      retryAfterSeconds: error.retryAfterSeconds,
    });
  });
  for (const route of Object.keys(ROUTE_RULES)) {
    const [method, url] = route.split(' ') as ['GET', string];
    app.route({ method, url, handler: async () => ({ ok: true }) });
  }
  for (const url of ['/', '/console', '/console/*', '/docs', '/docs/*']) {
    app.get(url, async () => ({ ok: true }));
  }
  await app.ready();
  return app;
}

function call(
  app: FastifyInstance,
  key: string | undefined,
  method: string,
  url: string,
  payload?: unknown,
) {
  return app.inject({
    method: method as 'GET',
    url,
    headers: key === undefined ? {} : { 'x-test-key': key },
    ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}),
  });
}

/** A JSON-RPC batch of `n` messages. */
function batch(n: number) {
  return Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: i + 1, method: 'ping' }));
}

describe('the rule of a path', () => {
  it('opens the console, gives the docs pages their own rule, and maps HEAD to GET', () => {
    expect(ruleFor('GET', '/')).toEqual({ access: 'open' });
    expect(ruleFor('GET', '/console')).toEqual({ access: 'open' });
    expect(ruleFor('GET', '/console/*')).toEqual({ access: 'open' });
    const docs = { access: 'key', filters: 'the API docs page: no objects' };
    expect(ruleFor('GET', '/docs')).toEqual(docs);
    expect(ruleFor('GET', '/docs/*')).toEqual(docs);
    expect(ruleFor('GET', '/docsearch')).toBeUndefined();
    expect(ruleFor('HEAD', '/sessions/:id')).toBe(ROUTE_RULES['GET /sessions/:id']);
    expect(ruleFor('HEAD', '/health')).toEqual({ access: 'open' });
    expect(ruleFor('POST', '/health')).toBeUndefined();
    expect(ruleFor('GET', '/keys')).toEqual({ access: 'admin' });
  });

  it('says of every route who may call it', () => {
    for (const [route, rule] of Object.entries(ROUTE_RULES)) {
      expect(['open', 'admin', 'key'], route).toContain(rule.access);
    }
  });

  it('says in words how every handler-level rule keeps a key to its own world', () => {
    for (const [route, rule] of Object.entries(ROUTE_RULES)) {
      if (rule.access !== 'key') continue;
      const names = rule.session ?? rule.task ?? rule.agent;
      // A key route that names no object is scoped by its handler, and says how.
      if (names === undefined) expect(rule.filters, route).toBeDefined();
      if (rule.filters !== undefined) expect(rule.filters.length, route).toBeGreaterThan(10);
    }
  });
});

describe('the routes an app registers', () => {
  it('are listed with every method, HEAD included; an app without the guard lists none', async () => {
    expect(registeredRoutes(Fastify())).toEqual([]);
    const app = Fastify();
    registerOwnership(app, {
      access: new Access(store),
      limits: new KeyLimits(store),
      rateLimit: null,
    });
    app.route({ method: ['GET', 'DELETE'], url: '/keys/:id', handler: async () => ({}) });
    app.get('/health', async () => ({}));
    await app.ready();
    expect([...registeredRoutes(app)].sort()).toEqual(
      ['DELETE /keys/:id', 'GET /keys/:id', 'GET /health', 'HEAD /keys/:id', 'HEAD /health'].sort(),
    );
    await app.close();
  });

  it('refuse to start, naming every route and method with no rule', async () => {
    const app = Fastify();
    registerOwnership(app, {
      access: new Access(store),
      limits: new KeyLimits(store),
      rateLimit: null,
    });
    app.route({ method: ['PUT', 'PATCH'], url: '/secrets', handler: async () => ({}) });
    app.get('/health', async () => ({}));
    await expect(app.ready()).rejects.toThrow(
      'Route(s) without an ownership rule: PUT /secrets, PATCH /secrets. Add each to ROUTE_RULES in src/http/ownership.ts.',
    );
    await app.close().catch(() => undefined);
  });
});

describe('the guard', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await guardedApp(null);
  });
  afterAll(async () => app.close());

  it('leaves open paths and unknown paths alone, and does not count them against a key', async () => {
    for (const url of ['/health', '/', '/console', '/console/app.js']) {
      expect((await call(app, 'two', 'GET', url)).statusCode, url).toBe(200);
    }
    // The docs page is not open, but holds no objects: a key reads it.
    expect((await call(app, 'narrow', 'GET', '/docs/index.html')).statusCode).toBe(200);
    const unknown = await call(app, 'narrow', 'GET', '/no/such/path');
    expect(unknown.statusCode).toBe(404);
    // Two requests per minute, none spent above.
    expect((await call(app, 'two', 'GET', '/sessions')).statusCode).toBe(200);
    expect((await call(app, 'two', 'GET', '/sessions')).statusCode).toBe(200);
    const third = await call(app, 'two', 'GET', '/sessions');
    expect(third.json().code).toBe('RATE_LIMITED');
  });

  it('answers admin routes 403 to a key, naming the route, and lets the admin through', async () => {
    const refused = await call(app, 'a', 'DELETE', `/keys/${keys['b']!.id}`);
    expect(refused.statusCode).toBe(403);
    expect(refused.json()).toMatchObject({
      code: 'FORBIDDEN',
      message: 'DELETE /keys/:id needs the admin key (server.apiKey); client keys cannot use it.',
    });
    expect((await call(app, undefined, 'DELETE', `/keys/${keys['b']!.id}`)).statusCode).toBe(200);
    expect((await call(app, undefined, 'GET', '/metrics')).statusCode).toBe(200);
    // The admin has no key to limit or budget.
    expect((await call(app, undefined, 'POST', `/sessions/${aSession}/compact`)).statusCode).toBe(
      200,
    );
  });

  it("finds the session a route names in its path, body or query, and hides another key's", async () => {
    const other = (method: string, url: string, payload?: unknown) =>
      call(app, 'b', method, url, payload).then((r) => r.json().code as string | undefined);
    expect(await other('GET', `/sessions/${aSession}`)).toBe('SESSION_NOT_FOUND');
    expect(await other('POST', '/agents/assistant/chat', { sessionId: aSession })).toBe(
      'SESSION_NOT_FOUND',
    );
    expect(await other('GET', `/events?sessionId=${aSession}`)).toBe('SESSION_NOT_FOUND');
    expect(await other('GET', `/tasks/${aTask}`)).toBe('TASK_NOT_FOUND');
    expect(await other('POST', `/tasks/${aTask}/cancel`)).toBe('TASK_NOT_FOUND');
    // The owner passes each of them.
    for (const [method, url, payload] of [
      ['GET', `/sessions/${aSession}`],
      ['POST', '/agents/assistant/chat', { sessionId: aSession }],
      ['GET', `/events?sessionId=${aSession}`],
      ['GET', `/tasks/${aTask}`],
    ] as const) {
      expect((await call(app, 'a', method, url, payload)).statusCode, url).toBe(200);
    }
  });

  it('ignores a locator that is absent or not a string, and a request with no body', async () => {
    expect(
      (await call(app, 'b', 'POST', '/agents/assistant/chat', { sessionId: 7 })).statusCode,
    ).toBe(200);
    expect((await call(app, 'b', 'POST', '/agents/assistant/chat')).statusCode).toBe(200);
    expect((await call(app, 'b', 'GET', '/events')).statusCode).toBe(200);
  });

  it('refuses an agent the key may not use, from the path or the body, before the session', async () => {
    const notFound =
      'Agent "assistant" not found. Add agents/assistant/agent.json or check GET /agents.';
    for (const [method, url, payload] of [
      ['POST', '/agents/assistant/chat', { sessionId: aSession }],
      ['POST', '/agents/assistant/tasks', { sessionId: aSession }],
      ['GET', '/agents/assistant'],
      ['POST', '/sessions', { agentName: 'assistant' }],
      ['GET', '/a2a/assistant/.well-known/agent-card.json'],
      ['POST', '/a2a/assistant'],
    ] as const) {
      const refused = await call(app, 'narrow', method, url, payload);
      expect(refused.json(), url).toMatchObject({ code: 'AGENT_NOT_FOUND', message: notFound });
    }
    expect((await call(app, 'narrow', 'GET', '/agents/other')).statusCode).toBe(200);
    expect((await call(app, 'narrow', 'POST', '/agents/other/tasks')).statusCode).toBe(200);
  });

  it('refuses a spent key only on the routes that run a model', async () => {
    const refused: string[] = [];
    for (const [route, rule] of Object.entries(ROUTE_RULES)) {
      if (rule.access !== 'key') continue;
      const [method, url] = route.split(' ') as [string, string];
      const answers: Record<string, number> = {};
      for (const name of ['spent', 'fresh']) {
        const own = owned[name]!;
        const filled = url
          .replace(':id', url.startsWith('/tasks') ? own.task : own.session)
          .replace(':name', 'assistant')
          .replace(':key', 'note');
        const body = rule.session?.startsWith('body.') ? { sessionId: own.session } : undefined;
        const res = await call(app, name, method, filled, body);
        answers[name] = res.statusCode;
        if (res.statusCode !== 200) expect(res.json().code, route).toBe('BUDGET_EXCEEDED');
      }
      expect(answers['fresh'], route).toBe(200);
      if (answers['spent'] !== 200) refused.push(route);
    }
    expect(refused.sort()).toEqual(
      [
        'POST /agents/:name/chat',
        'POST /agents/:name/tasks',
        'POST /tasks/:id/resume',
        'POST /tasks/:id/approve',
        'POST /tasks/:id/deny',
        'POST /sessions/:id/compact',
        'POST /mcp',
        'POST /v1/chat/completions',
        'POST /v1/responses',
        'POST /a2a/:name',
        'POST /ai-sdk/:name',
        'POST /ag-ui/:name',
      ].sort(),
    );
  });

  it('names the spent budget and when it resets', async () => {
    const refused = await call(app, 'spent', 'POST', '/mcp', { jsonrpc: '2.0', id: 1 });
    expect(refused.statusCode).toBe(429);
    expect(refused.json().message).toMatch(
      /^Key "spent" spent 500 of its 500 tokens for today \(tokensPerDay\)/,
    );
  });
});

describe('an MCP batch', () => {
  it("counts one call per message against the key's requests per minute", async () => {
    const app = await guardedApp(null);
    // Four per minute: a batch of three and one more request, then no more.
    expect((await call(app, 'four', 'POST', '/mcp', batch(3))).statusCode).toBe(200);
    expect((await call(app, 'four', 'GET', '/sessions')).statusCode).toBe(200);
    const refused = await call(app, 'four', 'POST', '/mcp', []);
    expect(refused.json().code).toBe('RATE_LIMITED');
    await app.close();
  });

  it('counts an empty batch, and an array sent to another route, as one call', async () => {
    const app = await guardedApp(null);
    expect((await call(app, 'two', 'POST', '/mcp', [])).statusCode).toBe(200);
    expect((await call(app, 'two', 'POST', '/v1/chat/completions', batch(5))).statusCode).toBe(200);
    expect((await call(app, 'two', 'GET', '/sessions')).json().code).toBe('RATE_LIMITED');
    await app.close();
  });

  it('counts its extra calls against server.rateLimit, for keys and the admin alike', async () => {
    const app = await guardedApp({ max: 3, windowMs: 30_000 });
    // The server-wide limiter (not on this app) counts each request once; the guard the rest.
    expect((await call(app, undefined, 'POST', '/mcp', batch(3))).statusCode).toBe(200);
    expect((await call(app, 'a', 'POST', '/mcp', { jsonrpc: '2.0', id: 1 })).statusCode).toBe(200);
    expect((await call(app, 'a', 'POST', '/mcp', [])).statusCode).toBe(200);
    // Two extra calls counted so far: one more fits, two do not.
    const refused = await call(app, 'a', 'POST', '/mcp', batch(3));
    expect(refused.statusCode).toBe(429);
    expect(refused.json().code).toBe('RATE_LIMITED');
    expect(refused.json().message).toBe(
      'This batch makes 3 calls; at most 3 are allowed every 30 s (server.rateLimit). Send fewer calls at once.',
    );
    expect(refused.json().retryAfterSeconds).toBeGreaterThan(29);
    expect(refused.json().retryAfterSeconds).toBeLessThanOrEqual(30);
    expect((await call(app, 'a', 'POST', '/mcp', batch(2))).statusCode).toBe(200);
    await app.close();
  });

  it('opens the server-wide window for extra calls at the first batch, not at a single call before it', async () => {
    // Only the clock is faked: the window's start is what this test checks.
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      const app = await guardedApp({ max: 3, windowMs: 30_000 });
      expect(
        (await call(app, undefined, 'POST', '/mcp', { jsonrpc: '2.0', id: 1 })).statusCode,
      ).toBe(200);
      vi.advanceTimersByTime(20_000);
      // Three extra calls: the window, opened now, is full until 50 s.
      expect((await call(app, undefined, 'POST', '/mcp', batch(4))).statusCode).toBe(200);
      vi.advanceTimersByTime(15_000);
      const refused = await call(app, undefined, 'POST', '/mcp', batch(2));
      expect(refused.json().code).toBe('RATE_LIMITED');
      expect(refused.json().retryAfterSeconds).toBe(15);
      await app.close();
    } finally {
      vi.useRealTimers();
    }
  });

  it('is not limited server-wide when no server.rateLimit is set', async () => {
    const app = await guardedApp(null);
    expect((await call(app, 'a', 'POST', '/mcp', batch(100))).statusCode).toBe(200);
    await app.close();
  });
});

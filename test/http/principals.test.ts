/**
 * Principals end to end on a real app: client keys issued and revoked over
 * the API, and a walk over every registered route with two client keys and
 * the admin key. A key reaches only its own sessions and tasks (another's are
 * 404, as if they did not exist) and only its agents; admin routes are 403
 * to it. The walk fails when a route has no ownership rule, or has a
 * handler-level rule this test does not check.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LightMyRequestResponse } from 'fastify';
import Fastify from 'fastify';
import { Access } from '../../src/http/access.js';
import { KeyLimits } from '../../src/http/key-limits.js';
import {
  registeredRoutes,
  registerOwnership,
  ROUTE_RULES,
  ruleFor,
} from '../../src/http/ownership.js';
import { PATIENT_MS, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'admin-secret-for-tests';

interface Issued {
  id: string;
  secret: string;
}

let harness: TestApp;
let a: Issued;
let b: Issued;
/** Objects of key A that B must never reach. */
let aSession: string;
let aTask: string;
let aResponseId: string;

type Who = 'admin' | 'a' | 'b';

function auth(who: Who): Record<string, string> {
  const token = who === 'admin' ? ADMIN_KEY : who === 'a' ? a.secret : b.secret;
  return { authorization: `Bearer ${token}` };
}

function call(
  who: Who,
  method: string,
  url: string,
  payload?: unknown,
  headers: Record<string, string> = {},
): Promise<LightMyRequestResponse> {
  return harness.app.server.inject({
    method: method as 'GET',
    url,
    headers: { ...auth(who), ...headers },
    ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}),
  });
}

async function issue(body: Record<string, unknown>): Promise<Issued> {
  const res = await call('admin', 'POST', '/keys', body);
  expect(res.statusCode, res.body).toBe(201);
  const { key, secret } = res.json<{ key: { id: string }; secret: string }>();
  return { id: key.id, secret };
}

beforeAll(async () => {
  harness = await startTestApp({
    agents: {
      assistant: TEST_AGENT,
      other: { ...TEST_AGENT, name: 'other', description: 'Another agent' },
    },
    server: { apiKey: ADMIN_KEY },
    mainModel: { timeoutMs: PATIENT_MS },
  });
  harness.fake!.setDefault(() => ({ content: 'ok' }));
  a = await issue({ name: 'chat ui', agents: '*' });
  b = await issue({ name: 'other app', agents: ['other'] });
  const created = await call('a', 'POST', '/sessions', { agentName: 'assistant' });
  aSession = created.json<{ session: { id: string } }>().session.id;
  await call('a', 'POST', '/agents/assistant/chat', { message: 'hello', sessionId: aSession });
  const task = await call('a', 'POST', '/agents/assistant/tasks?wait=true', { input: 'do it' });
  aTask = task.json<{ task: { id: string } }>().task.id;
  const response = await call('a', 'POST', '/v1/responses', { model: 'assistant', input: 'hi' });
  aResponseId = response.json<{ id: string }>().id;
});

afterAll(async () => {
  await harness.close();
});

describe('client keys over the API', () => {
  it('issues a cairn_sk_ secret once and stores only its hash', async () => {
    const res = await call('admin', 'POST', '/keys', {
      name: 'ci',
      agents: ['assistant'],
      limits: { requestsPerMinute: 10, tokensPerDay: 1000 },
    });
    expect(res.statusCode).toBe(201);
    const body = res.json<{ key: Record<string, unknown>; secret: string }>();
    expect(Object.keys(body.key).sort()).toEqual(
      ['agents', 'created_at', 'id', 'last_used_at', 'limits', 'name', 'revoked_at'].sort(),
    );
    expect(body.key).toMatchObject({
      name: 'ci',
      agents: ['assistant'],
      limits: { requestsPerMinute: 10, tokensPerDay: 1000 },
    });
    // 32 random bytes in base64url after the prefix.
    expect(body.secret).toMatch(/^cairn_sk_[A-Za-z0-9_-]{43,}$/);
    const listed = await call('admin', 'GET', '/keys');
    expect(listed.body).not.toContain(body.secret);
    const one = await call('admin', 'GET', `/keys/${String(body.key['id'])}`);
    expect(one.json()).toEqual({ key: { ...body.key, cost: 0, tokens_today: 0 } });
    const stored = JSON.stringify(await harness.app.store.listKeys());
    expect(stored).not.toContain(body.secret.slice('cairn_sk_'.length));
  });

  it('refuses bad key bodies with 400 and leaves no key behind', async () => {
    const before = (await harness.app.store.listKeys()).length;
    for (const body of [
      {},
      { name: '' },
      { name: 'x', agents: 'assistant' },
      { name: 'x', agents: ['Not A Name'] },
      { name: 'x', limits: { requestsPerMinute: 0 } },
      { name: 'x', limits: { perHour: 3 } },
      { name: 'x', secret: 'mine' },
    ]) {
      const res = await call('admin', 'POST', '/keys', body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
    expect(await harness.app.store.listKeys()).toHaveLength(before);
  });

  it('answers 404 KEY_NOT_FOUND for an unknown key and 400 for a malformed id', async () => {
    expect((await call('admin', 'GET', '/keys/key_unknown')).json().error.code).toBe(
      'KEY_NOT_FOUND',
    );
    expect((await call('admin', 'DELETE', '/keys/key_unknown')).statusCode).toBe(404);
    expect((await call('admin', 'GET', '/keys/nope')).statusCode).toBe(400);
  });

  it('revokes at once: the next request with the secret is 401, and an audit event names who', async () => {
    const key = await issue({ name: 'short-lived' });
    expect((await call('admin', 'GET', '/sessions')).statusCode).toBe(200);
    const ok = await harness.app.server.inject({
      method: 'GET',
      url: '/agents',
      headers: { authorization: `Bearer ${key.secret}` },
    });
    expect(ok.statusCode).toBe(200);
    const revoked = await call('admin', 'DELETE', `/keys/${key.id}`);
    expect(revoked.statusCode).toBe(200);
    expect(revoked.json().key.revoked_at).not.toBeNull();
    const refused = await harness.app.server.inject({
      method: 'GET',
      url: '/agents',
      headers: { authorization: `Bearer ${key.secret}` },
    });
    expect(refused.statusCode).toBe(401);
    expect(refused.json().error.code).toBe('UNAUTHORIZED');
    const events = await harness.app.store.listEvents({ afterId: 0, limit: 1000 });
    const audit = events.filter(
      (e) => (e.type === 'key.created' || e.type === 'key.revoked') && e.data['keyId'] === key.id,
    );
    expect(audit.map((e) => [e.type, e.data['by']])).toEqual([
      ['key.created', { key: null, user: null }],
      ['key.revoked', { key: null, user: null }],
    ]);
  });

  it('refuses a made-up cairn_sk_ secret with 401', async () => {
    const res = await harness.app.server.inject({
      method: 'GET',
      url: '/agents',
      headers: { authorization: 'Bearer cairn_sk_not-a-real-secret' },
    });
    expect(res.statusCode).toBe(401);
  });

  it('records last_used_at once, not on every request', async () => {
    const key = await issue({ name: 'touch' });
    const use = () =>
      harness.app.server.inject({
        method: 'GET',
        url: '/agents',
        headers: { authorization: `Bearer ${key.secret}` },
      });
    await use();
    // The write is off the request: wait until it lands.
    await expect
      .poll(async () => (await harness.app.store.findKey(key.id))?.last_used_at)
      .not.toBeNull();
    const first = (await harness.app.store.findKey(key.id))?.last_used_at;
    await use();
    await use();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await harness.app.store.findKey(key.id))?.last_used_at).toBe(first);
  });
});

/** What one request of the walk sends (the path with its parameters filled in). */
interface Probe {
  url: string;
  body?: unknown;
  headers?: Record<string, string>;
}

/** Fills a route's parameters with key A's objects (`:id` is a session, task or key id by route). */
function probeFor(route: string): Probe {
  const [, path] = route.split(' ') as [string, string];
  const id = path.startsWith('/tasks')
    ? aTask
    : path.startsWith('/keys')
      ? a.id
      : path.startsWith('/v1/responses')
        ? aResponseId
        : aSession;
  const url = path
    .replace(':id', id)
    .replace(':name', 'assistant')
    .replace(':key', 'note')
    .replace('/*', '/index.html');
  // A session named in the query string (GET /events?sessionId=) is A's too.
  const [method] = route.split(' ') as [string];
  const query = ruleFor(method, path);
  const inQuery =
    query?.access === 'key' && query.session?.startsWith('query.')
      ? `?${query.session.slice('query.'.length)}=${aSession}`
      : '';
  return {
    url: `${url}${inQuery}`,
    ...(SAMPLE_BODIES[route] !== undefined ? { body: SAMPLE_BODIES[route] } : {}),
  };
}

/** A valid body for each route that needs one, so the ownership check, not validation, answers. */
const SAMPLE_BODIES: Record<string, unknown> = {
  'POST /agents/:name/chat': { message: 'hi', sessionId: 'SESSION' },
  'POST /agents/:name/tasks': { input: 'hi', sessionId: 'SESSION' },
  'POST /tasks/:id/resume': { answer: 'yes' },
  'POST /tasks/:id/approve': {},
  'POST /tasks/:id/deny': { reason: 'no' },
  'PATCH /sessions/:id': { title: 'taken over' },
  'PUT /agents/:name/memory/:key': { content: 'planted' },
  'POST /sessions/:id/compact': { dryRun: true },
  'POST /keys': { name: 'mine' },
  'PATCH /keys/:id': { limits: { maxStreams: 1000 } },
  'POST /sessions': { agentName: 'assistant' },
  'POST /ai-sdk/:name': {
    id: 'probe-chat',
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
  },
  'POST /ag-ui/:name': {
    threadId: 'probe-thread',
    runId: 'probe-run',
    messages: [{ id: 'u1', role: 'user', content: 'hi' }],
  },
};

/** A's AI SDK chat on an agent both keys may use is unknown to B: no history, no stream, no stop. */
async function aiSdkChatIsAs(): Promise<void> {
  const chat = 'walk-chat';
  const posted = await call('a', 'POST', '/ai-sdk/other', {
    id: chat,
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'mine' }] }],
  });
  expect(posted.statusCode).toBe(200);
  const history = (who: Who) => call(who, 'GET', `/ai-sdk/other/${chat}/messages`);
  expect((await history('a')).json<unknown[]>().length).toBeGreaterThanOrEqual(2);
  expect((await history('b')).json()).toEqual([]);
  expect((await call('b', 'GET', `/ai-sdk/other/${chat}/stream`)).statusCode).toBe(204);
  expect((await call('b', 'POST', `/ai-sdk/other/${chat}/stop`)).json()).toEqual({
    stopped: false,
  });
}

/**
 * The handler-level rules (`filters`): what B must not see of A's world, and
 * what A still sees. Every route with `filters` needs an entry here.
 */
/** An A2A JSON-RPC call to `agent` as `who`. */
function a2a(who: Who, agent: string, method: string, params: Record<string, unknown>) {
  return call(
    who,
    'POST',
    `/a2a/${agent}`,
    { jsonrpc: '2.0', id: 1, method, params },
    { 'a2a-version': '1.0' },
  );
}

/** A's AG-UI thread is unknown to B: B's run on the same thread id starts a session of its own. */
async function agUiThreadIsAs(): Promise<void> {
  const body = (text: string) => ({
    threadId: 'walk-thread',
    runId: `run-${text}`,
    messages: [{ id: text, role: 'user', content: text }],
  });
  expect((await call('a', 'POST', '/ag-ui/other', body('mine'))).statusCode).toBe(200);
  const theirs = await call('b', 'POST', '/ag-ui/other', body('theirs'));
  expect(theirs.statusCode).toBe(200);
  expect(theirs.body).not.toContain('mine');
  const again = await call('a', 'POST', '/ag-ui/other', body('again'));
  expect(again.statusCode).toBe(200);
}

const FILTER_CHECKS: Record<string, () => Promise<void>> = {
  'POST /ag-ui/:name': agUiThreadIsAs,
  'POST /ai-sdk/:name': aiSdkChatIsAs,
  'GET /ai-sdk/:name/:chatId/stream': aiSdkChatIsAs,
  'POST /ai-sdk/:name/:chatId/stop': aiSdkChatIsAs,
  'GET /ai-sdk/:name/:chatId/messages': aiSdkChatIsAs,
  'GET /calls/:id': async () => {
    const listed = await call('a', 'GET', `/sessions/${aSession}/calls`);
    const id = listed.json<{ calls: { id: string }[] }>().calls[0]!.id;
    expect((await call('a', 'GET', `/calls/${id}`)).statusCode).toBe(200);
    const refused = await call('b', 'GET', `/calls/${id}`);
    expect(refused.statusCode).toBe(404);
    expect(refused.json().error.code).toBe('CALL_NOT_FOUND');
  },
  'GET /.well-known/agent-card.json': async () => {
    const skills = (who: Who) =>
      call(who, 'GET', '/.well-known/agent-card.json').then((r) =>
        JSON.stringify(r.json<{ skills: unknown[] }>().skills),
      );
    expect(await skills('b')).toContain('other');
    expect(await skills('b')).not.toContain('"assistant"');
    expect(await skills('a')).toContain('assistant');
  },
  'POST /a2a/:name': async () => {
    // A's task of an agent both keys may use is not found for B.
    const started = await call('a', 'POST', '/agents/other/tasks?wait=true', { input: 'mine' });
    const task = started.json<{ task: { id: string } }>().task.id;
    const seen = await a2a('a', 'other', 'GetTask', { id: task });
    expect(seen.json().result?.id).toBe(task);
    const hidden = await a2a('b', 'other', 'GetTask', { id: task });
    expect(hidden.json().error?.code).toBe(-32001);
    const listed = await a2a('b', 'other', 'ListTasks', {});
    expect(JSON.stringify(listed.json().result?.tasks ?? [])).not.toContain(task);
    const own = await a2a('a', 'other', 'ListTasks', {});
    expect(JSON.stringify(own.json().result?.tasks ?? [])).toContain(task);
  },
  'GET /openapi.json': async () => {
    expect((await call('b', 'GET', '/openapi.json')).statusCode).toBe(200);
  },
  'GET /agents': async () => {
    const names = (who: Who) =>
      call(who, 'GET', '/agents').then((r) =>
        r.json<{ agents: { name: string }[] }>().agents.map((x) => x.name),
      );
    expect(await names('b')).toEqual(['other']);
    expect((await names('a')).sort()).toEqual(['assistant', 'other']);
  },
  'POST /agents/:name/chat': async () => {
    // B may not use A's agent, nor continue A's session with its own agent.
    expect((await call('b', 'POST', '/agents/assistant/chat', { message: 'x' })).statusCode).toBe(
      404,
    );
    const own = await call('b', 'POST', '/agents/other/chat', { message: 'mine' });
    const sessionId = own.json<{ sessionId: string }>().sessionId;
    expect((await harness.app.store.findSession(sessionId))?.owner_key).toBe(b.id);
  },
  'POST /agents/:name/tasks': async () => {
    const own = await call('b', 'POST', '/agents/other/tasks?wait=true', { input: 'mine' });
    expect(own.statusCode).toBe(201);
    expect(own.json().task.owner_key).toBe(b.id);
  },
  'GET /tasks': async () => {
    const ids = (who: Who) =>
      call(who, 'GET', '/tasks').then((r) => r.json<{ tasks: { id: string }[] }>().tasks);
    expect((await ids('b')).map((t) => t.id)).not.toContain(aTask);
    expect((await ids('a')).map((t) => t.id)).toContain(aTask);
    expect((await ids('admin')).map((t) => t.id)).toContain(aTask);
  },
  'POST /sessions': async () => {
    expect((await call('b', 'POST', '/sessions', { agentName: 'assistant' })).statusCode).toBe(404);
    const own = await call('b', 'POST', '/sessions', { agentName: 'other' });
    expect(own.json().session.owner_key).toBe(b.id);
  },
  'GET /sessions': async () => {
    const ids = (who: Who, query = '') =>
      call(who, 'GET', `/sessions${query}`).then((r) =>
        r.json<{ sessions: { id: string }[] }>().sessions.map((s) => s.id),
      );
    expect(await ids('b')).not.toContain(aSession);
    expect(await ids('a')).toContain(aSession);
    expect(await ids('admin')).toContain(aSession);
    // One end user's sessions, within the key's own.
    const named = await call(
      'a',
      'POST',
      '/sessions',
      { agentName: 'other' },
      { 'x-cairn-user': 'zed' },
    );
    const zed = named.json<{ session: { id: string; end_user: string } }>().session;
    expect(zed.end_user).toBe('zed');
    expect(await ids('a', '?user=zed')).toEqual([zed.id]);
    expect(await ids('admin', '?user=zed')).toEqual([zed.id]);
    expect(await ids('b', '?user=zed')).toEqual([]);
  },
  'POST /sessions/import': async () => {
    const exported = await call('a', 'GET', `/sessions/${aSession}/export`);
    const post = (who: Who, payload: string) =>
      harness.app.server.inject({
        method: 'POST',
        url: '/sessions/import',
        headers: { ...auth(who), 'content-type': 'application/x-ndjson' },
        payload,
      });
    // A's session is of an agent B may not use.
    const refused = await post('b', exported.body);
    expect(refused.statusCode).toBe(404);
    expect(refused.json().error.code).toBe('AGENT_NOT_FOUND');
    const imported = await post('a', exported.body);
    expect(imported.statusCode).toBe(201);
    expect(imported.json().session.owner_key).toBe(a.id);
  },
  'GET /events': async () => {
    // Streams are checked on a port below; here the session filter.
    expect((await call('b', 'GET', `/events?sessionId=${aSession}`)).statusCode).toBe(404);
  },
  'POST /mcp': async () => {
    const mcp = (who: Who, body: unknown) =>
      call(who, 'POST', '/mcp', body, { accept: 'application/json, text/event-stream' });
    const listed = await mcp('b', { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
    const tools = listed.json<{ result: { tools: { name: string }[] } }>().result.tools;
    expect(tools.map((t) => t.name)).toEqual(['chat_with_other']);
    const hijack = await mcp('b', {
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/call',
      params: { name: 'chat_with_assistant', arguments: { message: 'x', sessionId: aSession } },
    });
    expect(hijack.json().result.isError).toBe(true);
    const cross = await mcp('b', {
      jsonrpc: '2.0',
      id: 3,
      method: 'tools/call',
      params: { name: 'chat_with_other', arguments: { message: 'x', sessionId: aSession } },
    });
    expect(cross.json().result.content[0].text).toMatch(/^SESSION_NOT_FOUND/);
  },
  'GET /mcp': async () => {
    expect((await call('b', 'GET', '/mcp')).statusCode).toBe(405);
  },
  'DELETE /mcp': async () => {
    expect((await call('b', 'DELETE', '/mcp')).statusCode).toBe(405);
  },
  'GET /v1/models': async () => {
    const ids = (who: Who) =>
      call(who, 'GET', '/v1/models').then((r) =>
        r.json<{ data: { id: string }[] }>().data.map((m) => m.id),
      );
    expect(await ids('b')).toEqual(['other']);
    expect((await ids('a')).sort()).toEqual(['assistant', 'other']);
  },
  'GET /v1/models/:id': async () => {
    expect((await call('b', 'GET', '/v1/models/assistant')).statusCode).toBe(404);
    expect((await call('b', 'GET', '/v1/models/other')).statusCode).toBe(200);
  },
  'POST /v1/chat/completions': async () => {
    const res = await call(
      'b',
      'POST',
      '/v1/chat/completions',
      { model: 'other', messages: [{ role: 'user', content: 'x' }] },
      { 'x-cairn-session-id': aSession },
    );
    expect(res.statusCode).toBe(404);
    const model = await call('b', 'POST', '/v1/chat/completions', {
      model: 'assistant',
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(model.statusCode).toBe(404);
    expect(model.json().error.code).toBe('model_not_found');
  },
  'POST /v1/responses': async () => {
    const res = await call('b', 'POST', '/v1/responses', {
      model: 'other',
      input: 'x',
      previous_response_id: aResponseId,
    });
    expect(res.statusCode).toBe(404);
  },
  'GET /v1/responses/:id': async () => {
    expect((await call('b', 'GET', `/v1/responses/${aResponseId}`)).statusCode).toBe(404);
    expect((await call('a', 'GET', `/v1/responses/${aResponseId}`)).statusCode).toBe(200);
  },
};

describe('every route has an ownership rule, and a client key reaches only its own', () => {
  it('lists every registered route in the ownership table', () => {
    const routes = registeredRoutes(harness.app.server);
    expect(routes.length).toBeGreaterThan(40);
    for (const route of routes) {
      const [method, url] = route.split(' ') as [string, string];
      expect(ruleFor(method, url), route).toBeDefined();
    }
  });

  it("walks every route with key B against key A's objects", async () => {
    const routes = [...new Set(registeredRoutes(harness.app.server))].filter(
      (route) => !route.startsWith('HEAD '),
    );
    for (const route of routes) {
      const [method, path] = route.split(' ') as [string, string];
      const rule = ruleFor(method, path)!;
      if (rule.access === 'open') continue;
      const probe = probeFor(route);
      const body =
        probe.body && typeof probe.body === 'object'
          ? JSON.parse(JSON.stringify(probe.body).replace('SESSION', aSession))
          : probe.body;
      if (rule.access === 'admin') {
        const res = await call('b', method, probe.url, body);
        expect(res.statusCode, `${route} as a client key`).toBe(403);
        expect(res.json().error.code).toBe('FORBIDDEN');
        continue;
      }
      const named = rule.session ?? rule.task ?? rule.agent;
      if (named !== undefined) {
        // A's session, task, or an agent B may not use: as if it did not exist.
        const res = await call('b', method, probe.url, body);
        expect(res.statusCode, `${route} as key B: ${res.body}`).toBe(404);
      }
      // The API description and its docs page hold no one's objects.
      if (rule.filters?.endsWith(': no objects') && FILTER_CHECKS[route] === undefined) continue;
      if (rule.filters !== undefined) {
        const check = FILTER_CHECKS[route];
        expect(
          check,
          `${route} has a handler-level rule with no check in FILTER_CHECKS`,
        ).toBeDefined();
        await check!();
      }
    }
  });

  it("the admin and key A still reach A's session", async () => {
    for (const who of ['admin', 'a'] as const) {
      expect((await call(who, 'GET', `/sessions/${aSession}`)).statusCode).toBe(200);
      expect((await call(who, 'GET', `/sessions/${aSession}/messages`)).statusCode).toBe(200);
      expect((await call(who, 'GET', `/tasks/${aTask}`)).statusCode).toBe(200);
    }
    const session = (await call('a', 'GET', `/sessions/${aSession}`)).json().session;
    expect(session.owner_key).toBe(a.id);
    // Nothing B tried changed it.
    expect(session.title).toBeNull();
    expect(session.status).toBe('active');
  });

  it('refuses to start a server with a route that has no ownership rule', async () => {
    const app = Fastify();
    registerOwnership(app, {
      access: new Access(harness.app.store),
      limits: new KeyLimits(harness.app.store),
      rateLimit: null,
    });
    app.get('/sessions/:id/secrets', async () => ({}));
    await expect(app.ready()).rejects.toThrow(/GET \/sessions\/:id\/secrets/);
    await app.close().catch(() => undefined);
  });

  it('keeps the table free of rules for routes that no longer exist', () => {
    const routes = new Set(registeredRoutes(harness.app.server));
    for (const route of Object.keys(ROUTE_RULES)) expect(routes.has(route), route).toBe(true);
  });
});

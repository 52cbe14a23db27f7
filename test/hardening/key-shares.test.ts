/**
 * Fair shares per key on a real port: one key cannot hold every
 * stream slot (its default share is ¾ of server.maxStreams), every import
 * slot (one by default) or, with limits.maxTurns, more model-running requests
 * than its share; past its share it gets 429 KEY_LIMIT with Retry-After while
 * other keys go on, past the server's cap 503 as before; the admin has no
 * share. `PATCH /keys/:id {limits}` changes a key's limits, secret kept.
 */
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { KEY_SHARE_RETRY_AFTER_S } from '../../src/http/key-shares.js';
import { NDJSON } from '../../src/http/routes/session-transfer.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'shares-admin';
let t: TestApp | undefined;
let port = 0;
const opened: ClientRequest[] = [];

afterEach(async () => {
  for (const req of opened.splice(0)) req.destroy();
  await t?.close();
  t = undefined;
});

async function start(server: Record<string, unknown> = {}, slowModelMs = 0): Promise<TestApp> {
  t = await startTestApp({ server: { apiKey: ADMIN_KEY, ...server } });
  if (slowModelMs > 0) t.fake!.setDefault(() => ({ content: 'slow', delayMs: slowModelMs }));
  await t.app.server.listen({ host: '127.0.0.1', port: 0 });
  port = (t.app.server.server.address() as { port: number }).port;
  return t;
}

async function issue(limits: Record<string, number> = {}): Promise<{ id: string; secret: string }> {
  const res = await fetch(`http://127.0.0.1:${port}/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'tenant', limits }),
  });
  expect(res.status).toBe(201);
  const body = (await res.json()) as { key: { id: string }; secret: string };
  return { id: body.key.id, secret: body.secret };
}

/** Opens GET /events as `token` and resolves with its answer's head (a 200 holds its slot). */
function openEvents(token: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: '127.0.0.1', port, path: '/events', headers: { authorization: `Bearer ${token}` } },
      resolve,
    );
    opened.push(req);
    req.on('error', reject);
    req.end();
  });
}

async function errorOf(res: IncomingMessage): Promise<{ code: string; message: string }> {
  let text = '';
  for await (const chunk of res) text += String(chunk);
  return (JSON.parse(text) as { error: { code: string; message: string } }).error;
}

function patchLimits(id: string, limits: unknown, token = ADMIN_KEY) {
  return fetch(`http://127.0.0.1:${port}/keys/${id}`, {
    method: 'PATCH',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ limits }),
  });
}

describe('stream shares', () => {
  it('stops a key at ¾ of server.maxStreams with 429 KEY_LIMIT; other keys still get streams', async () => {
    await start({ maxStreams: 4 });
    const greedy = await issue();
    const other = await issue();
    for (let i = 0; i < 3; i++) expect((await openEvents(greedy.secret)).statusCode).toBe(200);
    const refused = await openEvents(greedy.secret);
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe(String(KEY_SHARE_RETRY_AFTER_S));
    const error = await errorOf(refused);
    expect(error.code).toBe('KEY_LIMIT');
    expect(error.message).toContain('limits.maxStreams = 3');
    // The last quarter is left for the others.
    expect((await openEvents(other.secret)).statusCode).toBe(200);
    // The server's own cap is still 503.
    const full = await openEvents(other.secret);
    expect(full.statusCode).toBe(503);
    expect((await errorOf(full)).code).toBe('SERVICE_UNAVAILABLE');
  });

  it('gives the admin no share: it may take every slot', async () => {
    await start({ maxStreams: 2 });
    for (let i = 0; i < 2; i++) expect((await openEvents(ADMIN_KEY)).statusCode).toBe(200);
    expect((await openEvents(ADMIN_KEY)).statusCode).toBe(503);
  });

  it("frees the key's share when its stream closes", async () => {
    await start({ maxStreams: 10 });
    const key = await issue({ maxStreams: 1 });
    const first = await openEvents(key.secret);
    expect(first.statusCode).toBe(200);
    expect((await openEvents(key.secret)).statusCode).toBe(429);
    opened[0]!.destroy();
    first.destroy();
    await expect
      .poll(async () => {
        const next = await openEvents(key.secret);
        return next.statusCode;
      })
      .toBe(200);
  });
});

describe('PATCH /keys/:id', () => {
  it("changes a key's limits without a new secret; null goes back to the default", async () => {
    await start({ maxStreams: 10 });
    const key = await issue({ maxStreams: 1, tokensPerDay: 500 });
    expect((await openEvents(key.secret)).statusCode).toBe(200);
    expect((await openEvents(key.secret)).statusCode).toBe(429);

    const res = await patchLimits(key.id, { maxStreams: 2, tokensPerDay: null });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { key: { limits: Record<string, number> } };
    expect(body.key.limits).toEqual({ maxStreams: 2 });
    // The same secret, the new share, at once.
    expect((await openEvents(key.secret)).statusCode).toBe(200);
    expect((await openEvents(key.secret)).statusCode).toBe(429);
  });

  it('refuses bad limits with VALIDATION_ERROR, a client key with FORBIDDEN, an unknown key with KEY_NOT_FOUND', async () => {
    await start();
    const key = await issue();
    for (const limits of [{ maxStreams: 0 }, { maxTurns: 1.5 }, { concurrency: 3 }, 'many']) {
      const res = await patchLimits(key.id, limits);
      expect(res.status, JSON.stringify(limits)).toBe(400);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
        'VALIDATION_ERROR',
      );
    }
    const self = await patchLimits(key.id, { maxStreams: 100 }, key.secret);
    expect(self.status).toBe(403);
    expect(((await self.json()) as { error: { code: string } }).error.code).toBe('FORBIDDEN');
    const missing = await patchLimits('key_nothere', { maxStreams: 1 });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe(
      'KEY_NOT_FOUND',
    );
  });
});

describe('import shares', () => {
  /** An export of a fresh session, as NDJSON lines. */
  async function anExport(): Promise<string[]> {
    const admin = { authorization: `Bearer ${ADMIN_KEY}` };
    const created = await fetch(`http://127.0.0.1:${port}/sessions`, {
      method: 'POST',
      headers: { ...admin, 'content-type': 'application/json' },
      body: JSON.stringify({ agentName: 'assistant' }),
    });
    const { session } = (await created.json()) as { session: { id: string } };
    const exported = await fetch(`http://127.0.0.1:${port}/sessions/${session.id}/export`, {
      headers: admin,
    });
    return (await exported.text()).split('\n').filter(Boolean);
  }

  let answered = false;

  /** Starts an import whose body never ends: it holds an import slot. */
  function slowImport(token: string, firstLine: string): ClientRequest {
    const req = httpRequest({
      host: '127.0.0.1',
      port,
      path: '/sessions/import',
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': NDJSON },
    });
    req.on('error', () => undefined);
    req.on('response', () => {
      answered = true;
    });
    opened.push(req);
    req.write(`${firstLine}\n`);
    return req;
  }

  function importNow(token: string, lines: string[]) {
    return fetch(`http://127.0.0.1:${port}/sessions/import`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': NDJSON },
      body: lines.join('\n'),
    });
  }

  it("holds one key to one import at a time; another key's import is not kept waiting", async () => {
    await start();
    const lines = await anExport();
    const slow = await issue();
    const other = await issue();
    slowImport(slow.secret, lines[0]!);
    // Time for the slow import to reach its handler; it is still reading.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(answered).toBe(false);
    // Its second import, while the first still reads, is refused at once.
    const refused = await importNow(slow.secret, lines);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe(String(KEY_SHARE_RETRY_AFTER_S));
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('KEY_LIMIT');
    // Another key imports, even with a second slow import of the first key's share raised.
    const started = Date.now();
    const res = await importNow(other.secret, lines);
    expect(res.status, await res.clone().text()).toBe(201);
    expect(Date.now() - started).toBeLessThan(4_000);
  });
});

describe('turn shares', () => {
  function chat(token: string) {
    return fetch(`http://127.0.0.1:${port}/agents/assistant/chat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'hello' }),
    });
  }

  it('refuses a turn past limits.maxTurns with 429 KEY_LIMIT; other keys and the admin go on', async () => {
    await start({}, 1_500);
    const limited = await issue({ maxTurns: 1 });
    const other = await issue();
    const first = chat(limited.secret);
    await expect.poll(() => t!.fake!.requests.length).toBe(1);
    const second = await chat(limited.secret);
    expect(second.status).toBe(429);
    expect(second.headers.get('retry-after')).toBe(String(KEY_SHARE_RETRY_AFTER_S));
    const error = ((await second.json()) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe('KEY_LIMIT');
    expect(error.message).toContain('limits.maxTurns = 1');
    const [a, b, c] = await Promise.all([first, chat(other.secret), chat(ADMIN_KEY)]);
    expect([a.status, b.status, c.status]).toEqual([200, 200, 200]);
    // The finished turn gave its slot back.
    expect((await chat(limited.secret)).status).toBe(200);
  });

  it('counts a task answered at once (no ?wait) until its turn stops, then gives the slot back', async () => {
    await start({}, 1_500);
    const limited = await issue({ maxTurns: 1 });
    const startTask = () =>
      fetch(`http://127.0.0.1:${port}/agents/assistant/tasks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${limited.secret}`, 'content-type': 'application/json' },
        body: JSON.stringify({ input: 'work on this' }),
      });
    const started = await startTask();
    expect(started.status).toBe(201);
    const { task } = (await started.json()) as { task: { id: string; status: string } };
    expect(task.status).toBe('running');
    // The task's turn still runs in the background: it holds the key's one turn.
    const refused = await chat(limited.secret);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('KEY_LIMIT');
    await expect
      .poll(
        async () => {
          const res = await fetch(`http://127.0.0.1:${port}/tasks/${task.id}`, {
            headers: { authorization: `Bearer ${limited.secret}` },
          });
          return ((await res.json()) as { task: { status: string } }).task.status;
        },
        { timeout: 10_000 },
      )
      .toBe('completed');
    await expect.poll(async () => (await chat(limited.secret)).status).toBe(200);
  });
});

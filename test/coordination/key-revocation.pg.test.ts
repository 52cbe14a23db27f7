/**
 * Client keys across instances on one Postgres database: a key issued on one
 * instance works on the other, a revoke on one is refused by the other on
 * its very next request (keys are read per request, never cached), and a
 * key's daily token usage is one count for both.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'two-instance-admin';
let a: TestApp;
let b: CairnApp;

beforeAll(async () => {
  a = await startTestApp({ database: 'postgres', server: { apiKey: ADMIN_KEY } });
  b = await startApp(loadSettings({ home: a.home, env: {} }), { logger: false, daemons: false });
  a.fake!.setDefault(() => ({
    content: 'ok',
    usage: { prompt_tokens: 300, completion_tokens: 100 },
  }));
});
afterAll(async () => {
  await b?.close();
  await a?.close();
});

function asKey(app: CairnApp, secret: string, url = '/sessions') {
  return app.server.inject({ method: 'GET', url, headers: { authorization: `Bearer ${secret}` } });
}

async function issue(limits: Record<string, number> = {}): Promise<{ id: string; secret: string }> {
  const res = await a.app.server.inject({
    method: 'POST',
    url: '/keys',
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
    payload: { name: 'shared', limits },
  });
  const body = res.json<{ key: { id: string }; secret: string }>();
  return { id: body.key.id, secret: body.secret };
}

describe('client keys on two instances sharing Postgres', () => {
  it('revokes on one instance and is refused on the other at its next request', async () => {
    const key = await issue();
    expect((await asKey(b, key.secret)).statusCode).toBe(200);
    const revoked = await a.app.server.inject({
      method: 'DELETE',
      url: `/keys/${key.id}`,
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    expect(revoked.statusCode).toBe(200);
    const refused = await asKey(b, key.secret);
    expect(refused.statusCode).toBe(401);
    expect((await asKey(a.app, key.secret)).statusCode).toBe(401);
  });

  it("counts a key's tokens once for both instances", async () => {
    // Room for the second call's claim (its prompt estimate) after the first's 400.
    const key = await issue({ tokensPerDay: 700 });
    const chat = (app: CairnApp, message: string) =>
      app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        headers: { authorization: `Bearer ${key.secret}` },
        payload: { message },
      });
    expect((await chat(a.app, 'on a')).statusCode).toBe(200);
    expect((await chat(b, 'on b')).statusCode).toBe(200);
    // 800 tokens spent across the two: both refuse now.
    for (const app of [a.app, b]) {
      const refused = await chat(app, 'again');
      expect(refused.statusCode).toBe(429);
      expect(refused.json().error.code).toBe('BUDGET_EXCEEDED');
    }
  });

  it("shows one key's sessions to it on either instance, and none of another key's", async () => {
    const mine = await issue();
    const theirs = await issue();
    const created = await b.server.inject({
      method: 'POST',
      url: '/sessions',
      headers: { authorization: `Bearer ${mine.secret}` },
      payload: { agentName: 'assistant' },
    });
    const id = created.json<{ session: { id: string } }>().session.id;
    expect((await asKey(a.app, mine.secret, `/sessions/${id}`)).statusCode).toBe(200);
    expect((await asKey(a.app, theirs.secret, `/sessions/${id}`)).statusCode).toBe(404);
  });
});

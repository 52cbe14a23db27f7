/**
 * What each client key spent, end to end on the real app over both
 * dialects, with a priced model and the fake OpenAI server: GET /keys and
 * GET /keys/:id say `cost`, the sum of the costs of the sessions the key
 * owns (every call of them: turns and titles), and `tokens_today`. Another
 * key's chats and the admin's own sessions count to no key.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LightMyRequestResponse } from 'fastify';
import { TITLE_PROMPT } from '../../src/runtime/session-titler.js';
import { DATABASES, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'admin-secret-for-tests';
const PRICING = { inputPerMTok: 3, outputPerMTok: 15 };
const priced = (input: number, output: number) => (input * 3 + output * 15) / 1_000_000;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const isTitleRequest = (body: any): boolean => body?.messages?.[0]?.content === TITLE_PROMPT;

interface KeyView {
  id: string;
  name: string;
  cost: number;
  tokens_today: number;
}

describe.each(DATABASES)('cost per key (%s)', (database) => {
  let t: TestApp;
  const secrets = new Map<string, string>();

  const call = (
    token: string,
    method: string,
    url: string,
    payload?: Record<string, unknown>,
  ): Promise<LightMyRequestResponse> =>
    t.app.server.inject({
      method: method as 'GET',
      url,
      headers: { authorization: `Bearer ${token}` },
      ...(payload ? { payload } : {}),
    });

  const issue = async (name: string): Promise<string> => {
    const res = await call(ADMIN_KEY, 'POST', '/keys', { name });
    expect(res.statusCode, res.body).toBe(201);
    const { key, secret } = res.json<{ key: { id: string }; secret: string }>();
    secrets.set(key.id, secret);
    return key.id;
  };

  /** One chat turn as `keyId` (or the admin) whose model call reports these tokens. */
  const chat = async (
    /** A key id, or "admin" for the admin key. */
    keyId: string,
    tokens: { prompt: number; completion: number },
    payload: Record<string, unknown> = {},
    agent = 'assistant',
  ): Promise<string> => {
    t.fake!.script({
      content: 'Sure.',
      usage: { prompt_tokens: tokens.prompt, completion_tokens: tokens.completion },
    });
    const token = keyId === 'admin' ? ADMIN_KEY : secrets.get(keyId)!;
    const res = await call(token, 'POST', `/agents/${agent}/chat`, {
      message: 'hello',
      ...payload,
    });
    expect(res.statusCode, res.body).toBe(200);
    return res.json<{ sessionId: string }>().sessionId;
  };

  const sessionCost = async (id: string): Promise<number> =>
    (await call(ADMIN_KEY, 'GET', `/sessions/${id}`)).json<{ session: { cost: number } }>().session
      .cost;

  const readKey = async (id: string): Promise<KeyView> => {
    const res = await call(ADMIN_KEY, 'GET', `/keys/${id}`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json<{ key: KeyView }>().key;
  };

  const listKeys = async (): Promise<Map<string, KeyView>> => {
    const res = await call(ADMIN_KEY, 'GET', '/keys');
    expect(res.statusCode, res.body).toBe(200);
    return new Map(res.json<{ keys: KeyView[] }>().keys.map((k) => [k.id, k]));
  };

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: {
        assistant: TEST_AGENT,
        titled: { ...TEST_AGENT, name: 'titled', autoTitle: true },
      },
      mainModel: { pricing: PRICING },
      server: { apiKey: ADMIN_KEY },
    });
    t.fake!.setDefault((body) =>
      isTitleRequest(body)
        ? { content: 'A title', usage: { prompt_tokens: 50, completion_tokens: 4 } }
        : { content: 'Sure.' },
    );
  });
  afterAll(() => t.close());

  it("sums each key's sessions, never another key's or the admin's", async () => {
    const a = await issue('chat ui');
    const b = await issue('batch job');
    const idle = await issue('unused');

    // Key A: two turns on one session, and a second session.
    const a1 = await chat(a, { prompt: 1_000, completion: 100 });
    await chat(a, { prompt: 1_200, completion: 50 }, { sessionId: a1 });
    const a2 = await chat(a, { prompt: 400, completion: 40 });
    // Key B: one session; the admin: a large one of its own.
    const b1 = await chat(b, { prompt: 2_000, completion: 300 });
    const admins = await chat('admin', { prompt: 90_000, completion: 9_000 });

    const aCost = priced(1_000, 100) + priced(1_200, 50) + priced(400, 40);
    const bCost = priced(2_000, 300);
    expect((await sessionCost(a1)) + (await sessionCost(a2))).toBeCloseTo(aCost, 12);
    expect(await sessionCost(b1)).toBeCloseTo(bCost, 12);
    expect(await sessionCost(admins)).toBeCloseTo(priced(90_000, 9_000), 12);

    const readA = await readKey(a);
    const readB = await readKey(b);
    expect(readA.cost).toBeCloseTo(aCost, 12);
    expect(readB.cost).toBeCloseTo(bCost, 12);
    expect(readA.tokens_today).toBe(1_100 + 1_250 + 440);
    expect(readB.tokens_today).toBe(2_300);
    expect(await readKey(idle)).toMatchObject({ cost: 0, tokens_today: 0 });

    // The list says the same for every key, in one answer.
    const listed = await listKeys();
    expect(listed.get(a)).toEqual(readA);
    expect(listed.get(b)).toEqual(readB);
    expect(listed.get(idle)).toMatchObject({ cost: 0, tokens_today: 0 });
    // The admin's spend is in no key.
    const total = [...listed.values()].reduce((sum, k) => sum + k.cost, 0);
    expect(total).toBeCloseTo(aCost + bCost, 12);
  });

  it("counts every call of the key's sessions, the title call included", async () => {
    const key = await issue('titled app');
    const session = await chat(key, { prompt: 500, completion: 20 }, {}, 'titled');
    // The title is written after the reply; its call adds to the session's cost.
    const withTitle = priced(500, 20) + priced(50, 4);
    await expect.poll(() => sessionCost(session)).toBeCloseTo(withTitle, 12);
    expect((await readKey(key)).cost).toBeCloseTo(withTitle, 12);
    expect((await listKeys()).get(key)!.cost).toBeCloseTo(withTitle, 12);
  });

  it('keeps a revoked key spend readable; a deleted session leaves the sum', async () => {
    const key = await issue('short-lived');
    const kept = await chat(key, { prompt: 100, completion: 10 });
    const dropped = await chat(key, { prompt: 700, completion: 70 });
    expect((await readKey(key)).cost).toBeCloseTo(priced(100, 10) + priced(700, 70), 12);
    expect((await call(ADMIN_KEY, 'DELETE', `/sessions/${dropped}`)).statusCode).toBe(204);
    expect((await call(ADMIN_KEY, 'DELETE', `/keys/${key}`)).statusCode).toBe(200);
    const after = await readKey(key);
    expect(after.cost).toBeCloseTo(await sessionCost(kept), 12);
    expect(after.cost).toBeCloseTo(priced(100, 10), 12);
    // The tokens of the day stay charged: they were spent.
    expect(after.tokens_today).toBe(110 + 770);
  });

  it('does not show a client key what any key spent', async () => {
    const key = await issue('curious');
    const token = secrets.get(key)!;
    expect((await call(token, 'GET', '/keys')).statusCode).toBe(403);
    const own = await call(token, 'GET', `/keys/${key}`);
    expect(own.statusCode).toBe(403);
    expect(own.body).not.toContain('tokens_today');
  });
});

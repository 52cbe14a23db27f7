/**
 * A key's tokensPerDay held under concurrent calls, run against each store
 * (budget-reservations.test.ts on SQLite, budget-reservations.pg.test.ts on
 * Postgres): twenty parallel chats, and an MCP batch of twenty calls, spend
 * no more than the day; a reservation of a holder that stopped heartbeating
 * no longer counts, one of a live holder does; a call that used more than it
 * claimed holds what it used until it is charged.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { KeyReservations } from '../../src/coordination/key-reservations.js';
import { callReserved } from '../../src/runtime/budget.js';
import { usageDay } from '../../src/store/records.js';
import { startTestApp, type DatabaseKind, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'budget-admin';
const DAY_TOKENS = 2_000;
/** Each call reports this usage: 20 of them spend 3 000, well past the day. */
const PROMPT_TOKENS = 10;
const COMPLETION_TOKENS = 140;
const CALL_TOKENS = PROMPT_TOKENS + COMPLETION_TOKENS;

export function budgetReservationSuite(database: DatabaseKind): void {
  let harness: TestApp | undefined;

  afterEach(async () => {
    await harness?.close();
    harness = undefined;
  });

  /** An app whose model answers slowly enough that parallel calls overlap, each reporting CALL_TOKENS. */
  async function start(): Promise<TestApp> {
    const t = await startTestApp({
      database,
      server: { apiKey: ADMIN_KEY },
      // The claim covers the reply: the output a call may ask for.
      mainModel: { maxOutputTokens: COMPLETION_TOKENS },
    });
    t.fake!.setDefault(() => ({
      content: 'an answer',
      delayMs: 200,
      usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS },
    }));
    return t;
  }

  async function issue(t: TestApp, limits: Record<string, number>) {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/keys',
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      payload: { name: 'tenant', limits },
    });
    expect(res.statusCode, res.body).toBe(201);
    const { secret, key } = res.json<{ secret: string; key: { id: string } }>();
    return { secret, id: key.id };
  }

  function chat(t: TestApp, secret: string, message: string) {
    return t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      headers: { authorization: `Bearer ${secret}` },
      payload: { message },
    });
  }

  const today = () => usageDay(new Date().toISOString());

  describe(`reserved token budgets (${database})`, () => {
    it('20 parallel chats under a 2 000-token day spend no more than the day', async () => {
      harness = await start();
      const key = await issue(harness, { tokensPerDay: DAY_TOKENS });
      const t = harness;
      const replies = await Promise.all(
        Array.from({ length: 20 }, (_, i) => chat(t, key.secret, `question ${i}`)),
      );
      const ok = replies.filter((r) => r.statusCode === 200);
      const refused = replies.filter((r) => r.statusCode === 429);
      expect(ok.length + refused.length).toBe(20);
      expect(ok.length).toBeGreaterThan(0);
      expect(refused.length).toBeGreaterThan(0);
      for (const r of refused) {
        expect(r.json().error.code).toBe('BUDGET_EXCEEDED');
        expect(r.json().error.message).toContain('tokensPerDay');
      }
      const spent = await t.app.store.keyTokensOn(key.id, today());
      expect(spent).toBe(ok.length * CALL_TOKENS);
      expect(spent).toBeLessThanOrEqual(DAY_TOKENS);
      // Every reservation ended with its call.
      const after = await t.app.store.reserveKeyTokens({
        id: 'rsv_probe',
        keyId: key.id,
        day: today(),
        tokens: 0,
        holder: { self: t.app.instanceId, staleAfterMs: 10_000 },
      });
      expect(after.held).toBe(0);
    });

    it('an MCP batch of 20 calls spends no more than the day', async () => {
      harness = await start();
      const key = await issue(harness, { tokensPerDay: DAY_TOKENS });
      const res = await harness.app.server.inject({
        method: 'POST',
        url: '/mcp',
        headers: {
          authorization: `Bearer ${key.secret}`,
          accept: 'application/json, text/event-stream',
        },
        payload: Array.from({ length: 20 }, (_, i) => ({
          jsonrpc: '2.0',
          id: i + 1,
          method: 'tools/call',
          params: { name: 'chat_with_assistant', arguments: { message: `call ${i}` } },
        })),
      });
      expect(res.statusCode, res.body).toBe(200);
      const answers = res.json<{ result?: { isError?: boolean } }[]>();
      expect(answers).toHaveLength(20);
      const failed = answers.filter((a) => a.result?.isError === true || !a.result);
      expect(failed.length).toBeGreaterThan(0);
      const spent = await harness.app.store.keyTokensOn(key.id, today());
      expect(spent).toBeLessThanOrEqual(DAY_TOKENS);
      expect(spent).toBe((20 - failed.length) * CALL_TOKENS);
    });

    it("a dead holder's reservation expires; a live holder's counts", async () => {
      harness = await start();
      const key = await issue(harness, { tokensPerDay: DAY_TOKENS });
      const { store, instanceId } = harness.app;
      // A holder that never heartbeats (killed mid-call) reserved the whole day.
      const dead = await store.reserveKeyTokens({
        id: 'rsv_dead',
        keyId: key.id,
        day: today(),
        tokens: DAY_TOKENS,
        holder: { self: 'inst_gone', staleAfterMs: 10_000 },
      });
      expect(dead.reserved).toBe(true);
      const served = await chat(harness, key.secret, 'after a crash');
      expect(served.statusCode, served.body).toBe(200);

      // This instance's own reservation of the rest of the day holds the next call back.
      const live = await store.reserveKeyTokens({
        id: 'rsv_live',
        keyId: key.id,
        day: today(),
        tokens: DAY_TOKENS - CALL_TOKENS,
        holder: { self: instanceId, staleAfterMs: 10_000 },
      });
      expect(live.reserved).toBe(true);
      expect(live.held).toBe(0); // the dead holder's claim is gone
      const refused = await chat(harness, key.secret, 'over the day');
      expect(refused.statusCode).toBe(429);
      const { code, message } = refused.json().error;
      expect(code).toBe('BUDGET_EXCEEDED');
      expect(message).toContain('tokensPerDay');
      expect(message).toContain(`${DAY_TOKENS - CALL_TOKENS} reserved by calls running now`);
      await store.releaseReservation('rsv_live');
      expect((await chat(harness, key.secret, 'released')).statusCode).toBe(200);
    });

    it('settles a call to its real usage, and charges it once', async () => {
      harness = await start();
      const key = await issue(harness, { tokensPerDay: DAY_TOKENS });
      const { store, instanceId } = harness.app;
      const budget = new KeyReservations({ store, instanceId });
      const probe = () =>
        store.reserveKeyTokens({
          id: `rsv_probe_${Math.random()}`,
          keyId: key.id,
          day: today(),
          tokens: 0,
          holder: { self: instanceId, staleAfterMs: 10_000 },
        });

      // A call that used more than it claimed holds what it used, not its estimate.
      const over = (await budget.reserve(key.id, 100))!;
      expect((await probe()).held).toBe(100);
      await callReserved(over, () =>
        Promise.resolve({
          message: { role: 'assistant', content: 'long' },
          finishReason: 'stop',
          usage: { prompt_tokens: 90, completion_tokens: 60 },
          model: 'm',
        }),
      );
      expect((await probe()).held).toBe(150);
      await over.charge(150);
      const after = await probe();
      expect(after).toMatchObject({ spent: 150, held: 0 });

      // A call that fails holds nothing.
      const failing = (await budget.reserve(key.id, 100))!;
      await expect(callReserved(failing, () => Promise.reject(new Error('down')))).rejects.toThrow(
        'down',
      );
      expect(await probe()).toMatchObject({ spent: 150, held: 0 });

      // A chat settles to the usage the provider reported, however much it claimed.
      expect((await chat(harness, key.secret, 'one more')).statusCode).toBe(200);
      expect(await probe()).toMatchObject({ spent: 150 + CALL_TOKENS, held: 0 });

      // A key with no tokensPerDay reserves nothing; nor the admin.
      const free = await issue(harness, {});
      expect(await budget.reserve(free.id, 10_000_000)).toBeUndefined();
      expect(await budget.reserve(null, 10_000_000)).toBeUndefined();
    });

    it('refuses a claim larger than what is left, naming the limit', async () => {
      harness = await start();
      const key = await issue(harness, { tokensPerDay: 100 });
      const budget = new KeyReservations({
        store: harness.app.store,
        instanceId: harness.app.instanceId,
      });
      const err = await budget.reserve(key.id, 101).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'BUDGET_EXCEEDED', status: 429 });
      expect((err as Error).message).toContain(
        'Key "tenant" has 100 of its 100 tokens for today left (tokensPerDay',
      );
      expect(await budget.reserve(key.id, 100)).toBeDefined();
    });
  });
}

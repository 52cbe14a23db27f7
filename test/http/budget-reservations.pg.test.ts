/**
 * Reserved token budgets on Postgres (the suite says what is checked), and
 * two app instances on one database sharing one key's day: their calls see
 * each other's reservations, so together they spend no more than the day.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { usageDay } from '../../src/store/records.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';
import { budgetReservationSuite } from './budget-reservations.suite.js';

budgetReservationSuite('postgres');

const ADMIN_KEY = 'budget-admin';

describe('two instances on one database', () => {
  let harness: TestApp | undefined;
  afterEach(async () => {
    await harness?.close();
    harness = undefined;
  });

  it("share one key's day: a chat on one, then 10 parallel chats on each, spend no more than it", async () => {
    harness = await startTestApp({
      database: 'postgres',
      server: { apiKey: ADMIN_KEY },
      mainModel: { maxOutputTokens: 140 },
    });
    harness.fake!.setDefault(() => ({
      content: 'an answer',
      delayMs: 200,
      usage: { prompt_tokens: 10, completion_tokens: 140 },
    }));
    const created = await harness.app.server.inject({
      method: 'POST',
      url: '/keys',
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      payload: { name: 'shared', limits: { tokensPerDay: 2_000 } },
    });
    const { secret, key } = created.json<{ secret: string; key: { id: string } }>();
    const second = await startApp(loadSettings({ home: harness.home, env: {} }), {
      logger: false,
      daemons: false,
    });
    try {
      const chat = (app: typeof second, i: number) =>
        app.server.inject({
          method: 'POST',
          url: '/agents/assistant/chat',
          headers: { authorization: `Bearer ${secret}` },
          payload: { message: `question ${i}` },
        });
      // The second instance spends part of the day first, so that the day is
      // shared whichever instance wins the parallel race below (which one
      // reserves first under load is not the point).
      const first = await chat(second, 0);
      expect(first.statusCode).toBe(200);
      const replies = await Promise.all(
        Array.from({ length: 20 }, (_, i) => chat(i % 2 === 0 ? harness!.app : second, i + 1)),
      );
      const ok = replies.filter((r) => r.statusCode === 200).length;
      expect(replies.filter((r) => r.statusCode === 429).length).toBe(20 - ok);
      expect(ok).toBeGreaterThan(0);
      const spent = await harness.app.store.keyTokensOn(key.id, usageDay());
      expect(spent).toBe((ok + 1) * 150);
      expect(spent).toBeLessThanOrEqual(2_000);
    } finally {
      await second.close();
    }
  });
});

/**
 * A Postgres outage: the database server goes away and comes back
 * while chats run. A turn that meets the outage fails with a 503 and a stable
 * code (never a 500, never a hang), what was acknowledged stays stored and
 * consistent, and the pool recovers on its own when the server is back. Runs
 * against a private throwaway cluster (test/helpers/private-postgres.ts), never
 * the shared server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.js';
import { chatOn, startTestApp, type TestApp } from '../helpers/test-app.js';

// A turn that holds its session lock when the server goes away loses the lock
// with its connection: SESSION_LOCK_LOST.
const OUTAGE_CODES = ['DATABASE_UNAVAILABLE', 'SERVICE_UNAVAILABLE', 'SESSION_LOCK_LOST'];

describe('Postgres restarting under a running Cairn', () => {
  let server: PrivatePostgres;
  let t: TestApp;
  beforeAll(async () => {
    server = await startPrivatePostgres();
    t = await startTestApp({ databaseSettings: { url: server.url, poolSize: 4 } });
  }, 120_000);
  afterAll(async () => {
    await t?.close();
    await server?.destroy();
  });

  async function newSession(): Promise<string> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'assistant' },
    });
    expect(res.statusCode).toBe(201);
    return res.json<{ session: { id: string } }>().session.id;
  }

  /** message_count matches the stored messages, whose seqs increase from 1. */
  async function expectConsistent(id: string): Promise<{ role: string; content: string }[]> {
    const session = (await t.app.server.inject({ url: `/sessions/${id}` })).json<{
      session: { message_count: number };
    }>().session;
    const { messages } = (
      await t.app.server.inject({ url: `/sessions/${id}/messages?limit=1000` })
    ).json<{ messages: { seq: number; role: string; content: string }[] }>();
    expect(messages).toHaveLength(session.message_count);
    expect(messages.map((m) => m.seq)).toEqual(messages.map((_, i) => i + 1));
    return messages;
  }

  it('chats during the outage get a 503 with a stable code; the pool recovers when the server is back', async () => {
    const ids = await Promise.all([newSession(), newSession(), newSession()]);
    const acknowledged = new Map<string, string[]>(ids.map((id) => [id, []]));
    let n = 0;
    const statuses: number[] = [];
    const codes: string[] = [];
    let stopLoops = false;
    // Chats keep running on every session while the server stops and starts.
    const loops = ids.map(async (id) => {
      while (!stopLoops) {
        const message = `m${++n}`;
        const res = await chatOn(t.app, id, message);
        statuses.push(res.statusCode);
        if (res.statusCode === 200) acknowledged.get(id)!.push(message);
        else codes.push(res.json<{ error: { code: string } }>().error.code);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    });

    await new Promise((resolve) => setTimeout(resolve, 300));
    await server.stop();
    // While it is down, a chat fails fast with a 503.
    const down = await chatOn(t.app, ids[0], 'while down');
    expect(down.statusCode).toBe(503);
    expect(OUTAGE_CODES).toContain(down.json<{ error: { code: string } }>().error.code);
    await server.start();
    // Back: the pool replaces its dead connections without a restart of Cairn.
    let recovered = false;
    for (let i = 0; i < 50 && !recovered; i++) {
      recovered = (await chatOn(t.app, ids[1], `after ${i}`)).statusCode === 200;
      if (!recovered) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(recovered).toBe(true);
    stopLoops = true;
    await Promise.all(loops);

    expect(statuses.every((s) => s === 200 || s === 503)).toBe(true);
    for (const code of codes) expect(OUTAGE_CODES).toContain(code);
    for (const id of ids) {
      const stored = await expectConsistent(id);
      const users = stored.filter((m) => m.role === 'user').map((m) => m.content);
      // Every acknowledged turn is stored, in order.
      expect(users.filter((u) => acknowledged.get(id)!.includes(u))).toEqual(acknowledged.get(id));
    }
  });

  it('a turn whose database connection is lost during the model call fails with a 503; the session stays consistent', async () => {
    const id = await newSession();
    expect((await chatOn(t.app, id, 'before')).statusCode).toBe(200);
    t.fake!.script({ content: 'too late', delayMs: 1_500 });
    const pending = chatOn(t.app, id, 'during');
    await new Promise((resolve) => setTimeout(resolve, 300));
    await server.stop();
    const res = await pending;
    expect(res.statusCode).toBe(503);
    expect(OUTAGE_CODES).toContain(res.json<{ error: { code: string } }>().error.code);
    expect(res.body).not.toMatch(/\bat .+:\d+:\d+/);
    await server.start();
    const messages = await expectConsistent(id);
    expect(messages.map((m) => m.content)).not.toContain('too late');
    expect((await chatOn(t.app, id, 'after')).statusCode).toBe(200);
  });
});

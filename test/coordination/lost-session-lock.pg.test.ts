/**
 * A turn never outlives its session lock: two Cairn apps on one Postgres
 * database, and instance A's lock connection is killed while A's turn waits
 * for the model. A's turn stops with 503 `SESSION_LOCK_LOST` (another
 * instance may run the session now), B can run a turn on the session at
 * once, and A runs later turns normally on its new connection. A streamed
 * turn ends with an `error` event carrying the same code.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

let a: TestApp;
let b: CairnApp;
let admin: pg.Client;

beforeAll(async () => {
  a = await startTestApp({ database: 'postgres' });
  const settings = loadSettings({ home: a.home, env: {} });
  b = await startApp(settings, { logger: false, daemons: false });
  admin = new pg.Client({ connectionString: settings.database.url! });
  await admin.connect();
});
afterAll(async () => {
  await admin?.end();
  await b?.close();
  await a?.close();
});

function chat(app: CairnApp, message: string, sessionId?: string) {
  return app.server.inject({
    method: 'POST',
    url: '/agents/assistant/chat',
    payload: { message, ...(sessionId ? { sessionId } : {}) },
  });
}

/** Once the model call after `calls` arrived at the fake, kills A's lock connection. */
async function cutLockConnectionDuringModelCall(calls: number): Promise<void> {
  const fake = a.fake!;
  for (let i = 0; i < 3000 && fake.requests.length === calls; i++)
    await new Promise((r) => setTimeout(r, 10));
  expect(fake.requests.length).toBe(calls + 1);
  const { rowCount } = await admin.query(
    `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
    [`cairn ${a.app.instanceId} locks`],
  );
  expect(rowCount).toBe(1);
}

describe('a turn whose session lock is lost', () => {
  it('fails with SESSION_LOCK_LOST; the session is free for B, and A works again', async () => {
    const fake = a.fake!;
    const started = await chat(a.app, 'start');
    expect(started.statusCode, started.body).toBe(200);
    const { sessionId } = started.json<{ sessionId: string }>();

    // A's next model call never answers: the turn holds the lock, waiting.
    fake.script({ hang: true });
    const calls = fake.requests.length;
    const stuck = chat(a.app, 'this one is cut off', sessionId);
    await cutLockConnectionDuringModelCall(calls);

    const failed = await stuck;
    expect(failed.statusCode, failed.body).toBe(503);
    expect(failed.json()).toMatchObject({ error: { code: 'SESSION_LOCK_LOST' } });
    expect(failed.json<{ error: { message: string } }>().error.message).toContain('retry');

    // The lock is not re-taken for the stopped turn: B gets the session now.
    const onB = await chat(b, 'B carries on', sessionId);
    expect(onB.statusCode, onB.body).toBe(200);
    expect(onB.json<{ reply: string }>().reply).toContain('B carries on');

    const again = await chat(a.app, 'A again', sessionId);
    expect(again.statusCode, again.body).toBe(200);

    // Only committed messages stayed: the cut-off turn stored its user
    // message and nothing after it.
    const res = await b.server.inject({ url: `/sessions/${sessionId}/messages?limit=100` });
    const messages = res
      .json<{ messages: { role: string; content: string | null }[] }>()
      .messages.filter((m) => m.role !== 'system')
      .map((m) => `${m.role}: ${m.content ?? ''}`);
    const cut = messages.indexOf('user: this one is cut off');
    expect(cut).toBeGreaterThan(0);
    expect(messages[cut + 1]).toBe('user: B carries on');
    expect(messages.filter((m) => m.startsWith('assistant'))).toHaveLength(3);
  });

  it('a streamed turn ends with an error event carrying SESSION_LOCK_LOST', async () => {
    const fake = a.fake!;
    const started = await chat(a.app, 'start streamed');
    const { sessionId } = started.json<{ sessionId: string }>();
    fake.script({ hang: true });
    const calls = fake.requests.length;
    const stuck = a.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'streamed and cut off', sessionId, stream: true },
    });
    await cutLockConnectionDuringModelCall(calls);
    const res = await stuck;
    expect(res.statusCode).toBe(200);
    const error = res.body.split('\n\n').find((frame) => frame.includes('event: error'));
    expect(error, res.body).toContain('"code":"SESSION_LOCK_LOST"');
    expect(error).toContain('"status":503');
    expect((await chat(b, 'B again', sessionId)).statusCode).toBe(200);
  });
});

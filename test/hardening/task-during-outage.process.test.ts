/**
 * Postgres stops while a task runs, after the task has stored its user
 * message, a tool call and its result. The final write fails: the task must
 * not stay `running` for ever (its owner is alive, so no sweep would touch
 * it) — its status is written once the database is back, as `interrupted`,
 * and it can then be resumed. What it reports says what was stored, never
 * "nothing was saved". Meanwhile `/health` answers 503 with the database
 * unreachable, so a load balancer stops sending requests to this instance.
 * Runs against a private throwaway cluster, never the shared server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskRow } from '../../src/store/store.js';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

describe('a task that meets a database outage', () => {
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

  async function task(id: string): Promise<TaskRow> {
    const res = await t.app.server.inject({ url: `/tasks/${id}` });
    expect(res.statusCode).toBe(200);
    return res.json<{ task: TaskRow }>().task;
  }

  it('is settled once the database is back, says what was stored, and resumes; /health says 503 meanwhile', async () => {
    const healthy = await t.app.server.inject({ url: '/health' });
    expect(healthy.statusCode).toBe(200);
    expect(healthy.json()).toMatchObject({
      status: 'ok',
      database: 'postgres',
      databaseReachable: true,
    });

    t.fake!.script(
      { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'never stored', delayMs: 1_500 },
      { content: 'finished after the outage' },
    );
    const started = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/tasks',
      payload: { input: 'What time is it?' },
    });
    expect(started.statusCode).toBe(201);
    const { id, session_id: sessionId } = started.json<{ task: TaskRow }>().task;
    // The tool call and its result are stored; the model is answering.
    await expect
      .poll(
        async () => (await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 20 })).length,
        {
          timeout: 10_000,
        },
      )
      .toBe(4);

    await server.stop();
    const down = await t.app.server.inject({ url: '/health' });
    expect(down.statusCode).toBe(503);
    expect(down.json()).toMatchObject({
      status: 'unavailable',
      database: 'postgres',
      databaseReachable: false,
      instance: t.app.instanceId,
      error: { code: 'DATABASE_UNAVAILABLE' },
    });
    // The model's answer arrives and cannot be stored; the status write fails too.
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    await server.start();

    await expect.poll(async () => (await task(id)).status, { timeout: 20_000 }).toBe('interrupted');
    const settled = await task(id);
    // The outage reached the turn through its store writes or its session lock.
    expect(settled.error).toMatch(/^(DATABASE_UNAVAILABLE|SESSION_LOCK_LOST): /);
    expect(settled.error).toContain('1 user message, 1 tool call and 1 tool result');
    expect(settled.error).not.toMatch(/nothing of this/i);
    expect((await t.app.server.inject({ url: '/health' })).statusCode).toBe(200);

    const resumed = await t.app.server.inject({
      method: 'POST',
      url: `/tasks/${id}/resume?wait=true`,
      payload: {},
    });
    expect(resumed.statusCode).toBe(200);
    expect(resumed.json<{ task: TaskRow }>().task).toMatchObject({
      status: 'completed',
      result: 'finished after the outage',
    });
    const contents = (await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 20 })).map(
      (m) => m.content,
    );
    expect(contents).not.toContain('never stored');
  }, 90_000);
});

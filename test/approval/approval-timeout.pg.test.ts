/**
 * Approval timeouts: a call to a tool with an `approvalTimeout` that nobody
 * decides in time is denied with a result the model sees, the task records
 * it (a task.denied event marked timedOut, the deadline on the row while it
 * waits) and goes on; a deadline that passed while the server was down is
 * applied at start-up; with two instances on one Postgres database exactly
 * one denial lands.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { APPROVAL_TIMED_OUT_RESULT } from '../../src/runtime/approval-timeouts.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';

const agentWith = (approvalTimeout: string) => ({
  assistant: {
    ...TEST_AGENT,
    tools: [{ tool: 'current_time', approval: 'required', approvalTimeout }],
  },
});

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function start(home: string): Promise<CairnApp> {
  const app = await startApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
  return app;
}

async function startWaitingTask(app: CairnApp, fake: FakeLlmServer): Promise<string> {
  fake.script({ tool_calls: [{ name: 'current_time', arguments: '{}' }] });
  const res = await app.server.inject({
    method: 'POST',
    url: '/agents/assistant/tasks?wait=true',
    payload: { input: 'what time is it?' },
  });
  expect(res.statusCode, res.body).toBe(201);
  const task = res.json().task as { id: string; status: string };
  expect(task.status).toBe('waiting');
  return task.id;
}

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The requests in which the model saw the timed-out result. */
const timedOutRequests = (fake: FakeLlmServer) =>
  fake.requests.filter((r) =>
    (r.body?.messages ?? []).some(
      (m: { role: string; content: unknown }) =>
        m.role === 'tool' && m.content === APPROVAL_TIMED_OUT_RESULT,
    ),
  );

describe('approvalTimeout', () => {
  it('denies a call nobody decided in time, and the model sees why', async () => {
    const fake = await startFakeLlmServer();
    const home = makeHome({ agents: agentWith('1s') }, fake.baseURL);
    const app = await start(home);
    cleanups.push(async () => {
      await app.close();
      await fake.close();
      rmSync(home, { recursive: true, force: true });
    });
    const taskId = await startWaitingTask(app, fake);
    const waiting = (await app.store.findTask(taskId))!;
    expect(Date.parse(waiting.approval_expires_at!)).toBeGreaterThan(
      Date.parse(waiting.created_at),
    );

    fake.script({ content: 'I could not check the time.' });
    const done = await until(
      () => app.store.findTask(taskId),
      (t) => t?.status === 'completed',
    );
    expect(done!.result).toBe('I could not check the time.');
    expect(done!.approval_expires_at).toBeNull();
    expect(timedOutRequests(fake)).toHaveLength(1);
    const events = await app.store.listEvents({ afterId: 0, limit: 1_000 });
    const denied = events.filter((e) => e.type === 'task.denied');
    expect(denied).toHaveLength(1);
    expect(denied[0]!.data).toMatchObject({ taskId, tool: 'current_time', timedOut: true });
  });

  it('a call decided in time is not denied later', async () => {
    const fake = await startFakeLlmServer();
    const home = makeHome({ agents: agentWith('1s') }, fake.baseURL);
    const app = await start(home);
    cleanups.push(async () => {
      await app.close();
      await fake.close();
      rmSync(home, { recursive: true, force: true });
    });
    const taskId = await startWaitingTask(app, fake);
    fake.setDefault(() => ({ content: 'It is noon.' }));
    const approved = await app.server.inject({
      method: 'POST',
      url: `/tasks/${taskId}/approve?wait=true`,
    });
    expect(approved.statusCode, approved.body).toBe(200);
    // Past the deadline: nothing more happens to the task.
    await new Promise((resolve) => setTimeout(resolve, 1_300));
    expect((await app.store.findTask(taskId))!.status).toBe('completed');
    expect(timedOutRequests(fake)).toHaveLength(0);
  });

  it('applies at start-up a deadline that passed while the server was down', async () => {
    const fake = await startFakeLlmServer();
    const home = makeHome({ agents: agentWith('1h') }, fake.baseURL);
    cleanups.push(async () => {
      await fake.close();
      rmSync(home, { recursive: true, force: true });
    });
    const first = await start(home);
    const taskId = await startWaitingTask(first, fake);
    await first.close();
    // The hour went by while no server ran.
    const db = new Database(join(home, 'data', 'cairn.db'));
    db.prepare('UPDATE tasks SET approval_expires_at = ? WHERE id = ?').run(
      new Date(Date.now() - 60_000).toISOString(),
      taskId,
    );
    db.close();

    fake.setDefault(() => ({ content: 'Denied while I was away.' }));
    const second = await start(home);
    cleanups.push(() => second.close());
    const done = await until(
      () => second.store.findTask(taskId),
      (t) => t?.status === 'completed',
    );
    expect(done!.result).toBe('Denied while I was away.');
    expect(timedOutRequests(fake)).toHaveLength(1);
  });
});

describe('approvalTimeout on Postgres with two instances', () => {
  it('is applied once', async () => {
    const fake = await startFakeLlmServer();
    const database: TestDatabase = await createTestDatabase();
    const home = makeHome({ agents: agentWith('1h') }, fake.baseURL, database.url);
    cleanups.push(async () => {
      await fake.close();
      await database.drop();
      rmSync(home, { recursive: true, force: true });
    });
    const first = await start(home);
    const taskId = await startWaitingTask(first, fake);
    await first.close();
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    await client.query('UPDATE tasks SET approval_expires_at = $1 WHERE id = $2', [
      new Date(Date.now() - 60_000).toISOString(),
      taskId,
    ]);
    await client.end();

    fake.setDefault(() => ({ content: 'Denied once.' }));
    // Both instances find the passed deadline at start-up.
    const [a, b] = await Promise.all([start(home), start(home)]);
    cleanups.push(async () => {
      await a.close();
      await b.close();
    });
    await until(
      () => a.store.findTask(taskId),
      (t) => t?.status === 'completed',
    );
    const events = await a.store.listEvents({ afterId: 0, limit: 1_000 });
    expect(events.filter((e) => e.type === 'task.denied')).toHaveLength(1);
    expect(timedOutRequests(fake)).toHaveLength(1);
  });
});

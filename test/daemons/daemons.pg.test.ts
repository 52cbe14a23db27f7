/**
 * Daemon agents through the real app:
 * a tick runs the prompt as a task in a fresh `daemon` session that ends
 * closed; ticks of one agent never overlap, in this process or across
 * processes (the lease); missed slots after a restart give exactly one
 * catch-up tick; and a fast schedule keeps ticking, one tick at a time.
 */
import { rmSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import type { SessionRow, TaskRow } from '../../src/store/store.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import {
  DATABASES,
  makeHome,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';

const HOUR_MS = 3_600_000;
const PROMPT = 'Check the queue and report.';

function daemonAgent(name: string, every: string): Record<string, unknown> {
  return {
    name,
    description: `Daemon ${name}`,
    system: `You are the ${name} daemon.`,
    tools: [],
    maxIterations: 3,
    daemon: { every, prompt: PROMPT },
  };
}

async function listSessions(app: CairnApp, query: string): Promise<SessionRow[]> {
  const res = await app.server.inject({ url: `/sessions?${query}` });
  expect(res.statusCode).toBe(200);
  return res.json().sessions as SessionRow[];
}

describe.each(DATABASES)('runDaemonTick (%s)', (database) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: {
        assistant: TEST_AGENT,
        ticker: daemonAgent('ticker', '1h'),
        asker: { ...daemonAgent('asker', '1h'), tools: ['ask_user'] },
      },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  it('a tick whose agent asks the user ends cancelled, its question answered, its session closed', async () => {
    t.fake!.script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Anyone there?' }) }],
    });
    const task = await t.app.daemons.runDaemonTick({ agentName: 'asker' });
    expect(task).toMatchObject({ status: 'cancelled', pending_call_id: null });
    const session = (await t.app.store.findSession(task!.session_id))!;
    expect(session.status).toBe('closed');
    // The open call got a result, so the history is valid for anyone reading it.
    const messages = await t.app.store.listMessages(session.id, { afterSeq: 0, limit: 50 });
    expect(messages.at(-1)).toMatchObject({ role: 'tool', name: 'ask_user' });
    expect((await t.app.store.findDaemonState('asker'))!.lease_owner).toBeNull();
  });

  it('runs the prompt as a task in a fresh daemon session that ends closed', async () => {
    t.fake!.script({ content: 'Queue is empty.' });
    const before = Date.now();
    const task = await t.app.daemons.runDaemonTick({ agentName: 'ticker' });
    expect(task).toMatchObject({
      agent_name: 'ticker',
      status: 'completed',
      input: PROMPT,
      result: 'Queue is empty.',
    });
    const sent = t.fake!.requests[0]!.body.messages as { role: string; content: string }[];
    expect(sent).toEqual([
      { role: 'system', content: 'You are the ticker daemon.' },
      { role: 'user', content: PROMPT },
    ]);

    const sessions = await listSessions(t.app, 'agentName=ticker');
    expect(sessions).toHaveLength(1);
    expect(sessions[0]).toMatchObject({
      id: task!.session_id,
      mode: 'daemon',
      status: 'closed',
      parent_session_id: null,
    });

    const events = await t.app.store.listEvents({
      afterId: 0,
      sessionId: task!.session_id,
      limit: 100,
    });
    const types = events.map((e) => e.type);
    expect(types).toEqual(
      expect.arrayContaining(['task.started', 'task.completed', 'daemon.tick']),
    );
    expect(types.indexOf('daemon.tick')).toBeGreaterThan(types.indexOf('task.completed'));
    const tick = events.find((e) => e.type === 'daemon.tick')!;
    expect(tick.data).toMatchObject({ agentName: 'ticker', taskId: task!.id, status: 'completed' });

    // The run is recorded, the lease released, and the next run an hour on.
    const state = (await t.app.store.findDaemonState('ticker'))!;
    expect(state.lease_owner).toBeNull();
    expect(Date.parse(state.last_run_at!)).toBeGreaterThanOrEqual(before - 1_000);
    const next = Date.parse(state.next_run_at!);
    expect(next).toBeGreaterThanOrEqual(before + HOUR_MS);
    expect(next).toBeLessThanOrEqual(Date.now() + HOUR_MS);
    expect((tick.data as { nextRunAt: string }).nextRunAt).toBe(state.next_run_at);
  });

  it('a tick consumes its slot before it runs, so a crash mid-tick never runs it twice', async () => {
    await t.app.store.setDaemonNextRun('ticker', new Date(Date.now() - 60_000));
    t.fake!.script({ content: 'Slow tick.', delayMs: 600 });
    const started = Date.now();
    const tick = t.app.daemons.runDaemonTick({ agentName: 'ticker' });
    // While the tick still runs (its lease held), the stored next run is already an hour on:
    // a restart now would find nothing due.
    await expect
      .poll(async () => {
        const state = (await t.app.store.findDaemonState('ticker'))!;
        return state.lease_owner !== null && Date.parse(state.next_run_at!) >= started + HOUR_MS;
      })
      .toBe(true);
    expect((await tick)!.status).toBe('completed');
  });

  it('a slow tick times the next run from its start, not its end', async () => {
    t.fake!.script({ content: 'Slow tick.', delayMs: 400 });
    const task = (await t.app.daemons.runDaemonTick({ agentName: 'ticker' }))!;
    expect(task.status).toBe('completed');
    const state = (await t.app.store.findDaemonState('ticker'))!;
    // The tick began before its task was created and ended after the task
    // finished, 400 ms later: an hour after the start is before an hour after the task.
    expect(Date.parse(state.next_run_at!)).toBeLessThanOrEqual(
      Date.parse(task.created_at) + HOUR_MS,
    );
    expect(Date.parse(state.next_run_at!)).toBeLessThan(Date.parse(task.updated_at) + HOUR_MS);
  });

  it('two ticks at once: one runs, the other is skipped', async () => {
    t.fake!.script({ content: 'Only once.', delayMs: 300 });
    const before = (await listSessions(t.app, 'agentName=ticker')).length;
    const results = await Promise.all([
      t.app.daemons.runDaemonTick({ agentName: 'ticker' }),
      t.app.daemons.runDaemonTick({ agentName: 'ticker' }),
    ]);
    const ran = results.filter((r): r is TaskRow => r !== undefined);
    expect(ran).toHaveLength(1);
    expect(results.filter((r) => r === undefined)).toHaveLength(1);
    expect(ran[0]!.result).toBe('Only once.');
    expect(t.fake!.requests).toHaveLength(1);
    expect(await listSessions(t.app, 'agentName=ticker')).toHaveLength(before + 1);
  });

  it('a lease held by another process skips the tick; an expired one is taken over', async () => {
    const before = (await listSessions(t.app, 'agentName=ticker')).length;
    const held = await t.app.store.claimDaemonLease('ticker', 'other-process', new Date(), 60_000);
    expect(held).toBe(true);
    expect(await t.app.daemons.runDaemonTick({ agentName: 'ticker' })).toBeUndefined();
    expect(t.fake!.requests).toHaveLength(0);
    expect(await listSessions(t.app, 'agentName=ticker')).toHaveLength(before);
    expect((await t.app.store.findDaemonState('ticker'))!.lease_owner).toBe('other-process');

    // The other process crashed long ago: its lease has expired.
    const stale = await t.app.store.claimDaemonLease(
      'ticker',
      'crashed-process',
      new Date(Date.now() - 2 * HOUR_MS),
      60_000,
    );
    expect(stale).toBe(false); // other-process still holds an unexpired lease
    await t.app.store.finishDaemonRun('ticker', 'other-process', new Date(), null);
    expect(
      await t.app.store.claimDaemonLease(
        'ticker',
        'crashed-process',
        new Date(Date.now() - 2 * HOUR_MS),
        60_000,
      ),
    ).toBe(true);
    t.fake!.script({ content: 'Took over.' });
    const task = await t.app.daemons.runDaemonTick({ agentName: 'ticker' });
    expect(task).toMatchObject({ status: 'completed', result: 'Took over.' });
    // The stale holder's late write is refused: the lease is no longer its own.
    expect(
      await t.app.store.finishDaemonRun('ticker', 'crashed-process', new Date(), new Date(0)),
    ).toBe(false);
    const state = (await t.app.store.findDaemonState('ticker'))!;
    expect(Date.parse(state.next_run_at!)).toBeGreaterThan(Date.now());
    expect(state.lease_owner).toBeNull();
  });

  it('a tick while a user chats with the same agent: both run, in separate sessions', async () => {
    t.fake!.setDefault((body: { messages: { role: string; content: string }[] }) =>
      body.messages.at(-1)!.content === PROMPT
        ? { content: 'Tick report.' }
        : { content: 'Chat answer.', delayMs: 300 },
    );
    const [chat, task] = await Promise.all([
      t.app.server.inject({
        method: 'POST',
        url: '/agents/ticker/chat',
        payload: { message: 'Hello daemon.' },
      }),
      t.app.daemons.runDaemonTick({ agentName: 'ticker' }),
    ]);
    expect(chat.statusCode).toBe(200);
    expect(chat.json().reply).toBe('Chat answer.');
    expect(task).toMatchObject({ status: 'completed', result: 'Tick report.' });
    expect(task!.session_id).not.toBe(chat.json().sessionId);
    const chatSession = (
      await t.app.server.inject({ url: `/sessions/${chat.json().sessionId as string}` })
    ).json().session as SessionRow;
    expect(chatSession).toMatchObject({ mode: 'chat', status: 'active' });
  });

  it('an agent without a schedule cannot tick', async () => {
    await expect(t.app.daemons.runDaemonTick({ agentName: 'assistant' })).rejects.toMatchObject({
      code: 'VALIDATION_ERROR',
    });
    expect(t.app.daemons.daemonAgents().map((a) => a.name)).toEqual(['asker', 'ticker']);
  });
});

describe.each(DATABASES)('daemon scheduling (%s)', (kind) => {
  let fake: FakeLlmServer;
  const homes: string[] = [];
  const apps: CairnApp[] = [];
  const databases: TestDatabase[] = [];

  beforeAll(async () => {
    fake = await startFakeLlmServer();
  });
  afterEach(async () => {
    while (apps.length > 0) await apps.pop()!.close();
    fake.reset();
  });
  afterAll(async () => {
    await fake.close();
    for (const home of homes) rmSync(home, { recursive: true, force: true });
    for (const database of databases) await database.drop();
  });

  /** A home with its own empty database (a SQLite file inside it, or a fresh Postgres database). */
  async function newHome(agents: Record<string, Record<string, unknown>>): Promise<string> {
    const database = kind === 'postgres' ? await createTestDatabase() : undefined;
    if (database) databases.push(database);
    const home = makeHome({ agents }, fake.baseURL, database?.url ?? null);
    homes.push(home);
    return home;
  }

  async function openApp(home: string, daemons: boolean): Promise<CairnApp> {
    const app = await startApp(loadSettings({ home, env: {} }), { logger: false, daemons });
    apps.push(app);
    return app;
  }

  it('missed slots after a restart give exactly one catch-up tick, then the schedule resumes', async () => {
    const home = await newHome({ hourly: daemonAgent('hourly', '1h') });
    const first = await openApp(home, false);
    // The server was down for five hours: five slots were missed.
    await first.store.setDaemonNextRun('hourly', new Date(Date.now() - 5 * HOUR_MS));
    await apps.pop()!.close();

    fake.setDefault(() => ({ content: 'Caught up.' }));
    const before = Date.now();
    const app = await openApp(home, true);
    // The catch-up tick runs in the background; its last step is the daemon.tick event.
    await expect
      .poll(
        async () =>
          (await app.store.listEvents({ afterId: 0, limit: 1_000 })).filter(
            (e) => e.type === 'daemon.tick',
          ).length,
        { timeout: 10_000 },
      )
      .toBe(1);
    expect(await listSessions(app, 'agentName=hourly&status=closed')).toHaveLength(1);

    // start() awaited its own write of the catch-up slot, so the tick's next run is what stays.
    const state = (await app.store.findDaemonState('hourly'))!;
    expect(Date.parse(state.next_run_at!)).toBeGreaterThanOrEqual(before + HOUR_MS);
    expect(Date.parse(state.next_run_at!)).toBeLessThanOrEqual(Date.now() + HOUR_MS);
    expect(Date.parse(state.last_run_at!)).toBeGreaterThanOrEqual(before);
    const tasks = (await app.server.inject({ url: '/tasks?agentName=hourly' })).json()
      .tasks as TaskRow[];
    expect(tasks.map((x) => x.status)).toEqual(['completed']);
    // And no second catch-up follows.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await listSessions(app, 'agentName=hourly')).toHaveLength(1);
    expect(fake.requests).toHaveLength(1);
  });

  it('a schedule not yet due runs nothing at start', async () => {
    const home = await newHome({ hourly: daemonAgent('hourly', '1h') });
    const before = Date.now();
    const app = await openApp(home, true);
    // The app starts only once start() has stored every daemon's next run.
    const state = (await app.store.findDaemonState('hourly'))!;
    expect(Date.parse(state.next_run_at!)).toBeGreaterThanOrEqual(before + HOUR_MS);
    expect(Date.parse(state.next_run_at!)).toBeGreaterThan(Date.now() + HOUR_MS / 2);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await listSessions(app, 'agentName=hourly')).toEqual([]);
    expect(fake.requests).toHaveLength(0);
  });

  it('daemons: false schedules nothing, even when a run is overdue', async () => {
    const home = await newHome({ hourly: daemonAgent('hourly', '1h') });
    const app = await openApp(home, false);
    await app.store.setDaemonNextRun('hourly', new Date(Date.now() - HOUR_MS));
    await apps.pop()!.close();
    const again = await openApp(home, false);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await listSessions(again, 'agentName=hourly')).toEqual([]);
    expect(fake.requests).toHaveLength(0);
  });

  it('every: 1s ticks repeatedly, one tick at a time, each in its own closed session', async () => {
    const home = await newHome({
      fast: daemonAgent('fast', '1s'),
      badcron: {
        name: 'badcron',
        system: 'Never scheduled.',
        daemon: { cron: 'every tuesday', prompt: PROMPT },
      },
    });
    fake.setDefault(() => ({ content: 'tick', delayMs: 300 }));
    const app = await openApp(home, true);
    // A schedule that cannot be parsed is skipped; the server still runs.
    expect(app.daemons.daemonAgents().map((a) => a.name)).toEqual(['fast']);
    await expect
      .poll(async () => (await listSessions(app, 'agentName=fast&status=closed')).length, {
        timeout: 15_000,
        interval: 200,
      })
      .toBeGreaterThanOrEqual(2);

    const tasks = (
      (await app.server.inject({ url: '/tasks?agentName=fast' })).json().tasks as TaskRow[]
    ).reverse();
    expect(tasks.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < tasks.length; i++) {
      const previous = tasks[i - 1]!;
      expect(previous.status).toBe('completed');
      // The next tick started only after the previous one had finished.
      expect(tasks[i]!.created_at >= previous.updated_at).toBe(true);
      expect(tasks[i]!.session_id).not.toBe(previous.session_id);
    }
    const sessions = await listSessions(app, 'agentName=fast');
    expect(sessions.every((s) => s.mode === 'daemon')).toBe(true);
    expect(sessions.filter((s) => s.status === 'active').length).toBeLessThanOrEqual(1);
    expect(await listSessions(app, 'agentName=badcron')).toEqual([]);
    expect(fake.requests.every((r) => r.problems.length === 0)).toBe(true);
  });
});

/**
 * Tasks over HTTP: start one in the background or wait
 * for it, read and list them, the failures that end a task (maxIterations, a
 * model error), a task on an existing session, and the task.* events.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { TaskRow } from '../../src/store/store.js';
import { DATABASES, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const LOOPER = {
  name: 'looper',
  description: 'Gives up after two model calls',
  system: 'You call tools forever.',
  tools: ['current_time'],
  maxIterations: 2,
};
const PAGER = {
  name: 'pager',
  description: 'Only used to count tasks',
  system: 'You are the pager.',
  tools: [],
  maxIterations: 2,
};

const UNKNOWN_TASK = 'task_000000000000000000000000';

describe.each(DATABASES)('tasks (%s)', (database) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: { assistant: TEST_AGENT, looper: LOOPER, pager: PAGER },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  function startTask(payload: unknown, options: { agent?: string; wait?: boolean } = {}) {
    return t.app.server.inject({
      method: 'POST',
      url: `/agents/${options.agent ?? 'assistant'}/tasks${options.wait ? '?wait=true' : ''}`,
      payload: payload as Record<string, unknown>,
    });
  }

  async function eventTypes(sessionId: string): Promise<string[]> {
    const events = await t.app.store.listEvents({ afterId: 0, sessionId, limit: 1000 });
    return events.map((e) => e.type);
  }

  it('POST /agents/:name/tasks answers 201 with a running task, which then completes', async () => {
    t.fake!.script({ content: 'The goal is done.', delayMs: 200 });
    const res = await startTask({ input: 'Do the thing.' });
    expect(res.statusCode).toBe(201);
    const task = res.json().task as TaskRow;
    expect(task.id).toMatch(/^task_[A-Za-z0-9]+$/);
    expect(task.status).toBe('running');
    expect(task.agent_name).toBe('assistant');
    expect(task.input).toBe('Do the thing.');
    expect(task.session_id).toMatch(/^sess_/);

    const done = await t.app.tasks.wait(task.id);
    expect(done.status).toBe('completed');
    expect(done.result).toBe('The goal is done.');

    const got = await t.app.server.inject({ url: `/tasks/${task.id}` });
    expect(got.statusCode).toBe(200);
    expect(got.json().task).toMatchObject({
      id: task.id,
      status: 'completed',
      result: 'The goal is done.',
    });

    const session = (await t.app.server.inject({ url: `/sessions/${task.session_id}` })).json()
      .session;
    expect(session.mode).toBe('task');
    expect(await eventTypes(task.session_id)).toEqual(
      expect.arrayContaining(['session.created', 'task.started', 'task.completed']),
    );
    const sent = t.fake!.requests.at(-1)!.body;
    expect(sent.messages.at(-1)).toEqual({ role: 'user', content: 'Do the thing.' });
  });

  it('?wait=true answers once the task has finished, with its result', async () => {
    t.fake!.script(
      { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'It is late.' },
    );
    const res = await startTask({ input: 'What time is it?' }, { wait: true });
    expect(res.statusCode).toBe(201);
    const task = res.json().task as TaskRow;
    expect(task.status).toBe('completed');
    expect(task.result).toBe('It is late.');
    expect(task.error).toBeNull();
    const messages = (
      await t.app.server.inject({ url: `/sessions/${task.session_id}/messages` })
    ).json().messages as { role: string }[];
    expect(messages.map((m) => m.role)).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'assistant',
    ]);
    expect(t.fake!.requests.every((r) => r.problems.length === 0)).toBe(true);
  });

  it('a task that reaches maxIterations fails with MAX_ITERATIONS', async () => {
    t.fake!.setDefault(() => ({ tool_calls: [{ name: 'current_time', arguments: '{}' }] }));
    const res = await startTask({ input: 'Loop.' }, { agent: 'looper', wait: true });
    expect(res.statusCode).toBe(201);
    const task = res.json().task as TaskRow;
    expect(task.status).toBe('failed');
    expect(task.error).toContain('MAX_ITERATIONS');
    expect(task.result).toBeNull();
    expect(t.fake!.requests).toHaveLength(2);
    const types = await eventTypes(task.session_id);
    expect(types).toContain('task.failed');
    expect(types).not.toContain('task.completed');
  });

  it('a task whose model call fails ends failed with LLM_ERROR', async () => {
    t.fake!.script({ status: 400 });
    const res = await startTask({ input: 'Break.' }, { wait: true });
    expect(res.statusCode).toBe(201);
    const task = res.json().task as TaskRow;
    expect(task.status).toBe('failed');
    expect(task.error).toMatch(/^LLM_ERROR: /);
    const events = await t.app.store.listEvents({
      afterId: 0,
      sessionId: task.session_id,
      limit: 100,
    });
    const failed = events.find((e) => e.type === 'task.failed');
    expect(failed?.data).toMatchObject({ taskId: task.id, error: task.error });
  });

  it('runs a task on an existing session, with the earlier conversation in its request', async () => {
    t.fake!.script({ content: 'Noted: blue.' });
    const chat = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'My favourite colour is blue.' },
    });
    expect(chat.statusCode).toBe(200);
    const sessionId = chat.json().sessionId as string;

    t.fake!.script({ content: 'Your favourite colour is blue.' });
    const res = await startTask({ input: 'Recall my colour.', sessionId }, { wait: true });
    expect(res.statusCode).toBe(201);
    const task = res.json().task as TaskRow;
    expect(task.session_id).toBe(sessionId);
    expect(task.status).toBe('completed');
    const sent = t.fake!.requests.at(-1)!.body;
    expect(sent.messages.map((m: { content: string }) => m.content)).toEqual([
      TEST_AGENT.system,
      'My favourite colour is blue.',
      'Noted: blue.',
      'Recall my colour.',
    ]);
  });

  it('a task on a session of another agent, a closed or an unknown session is refused', async () => {
    const other = (
      await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        payload: { agentName: 'pager' },
      })
    ).json().session.id as string;
    const mismatch = await startTask({ input: 'x', sessionId: other });
    expect(mismatch.statusCode).toBe(400);
    expect(mismatch.json().error.code).toBe('SESSION_AGENT_MISMATCH');

    await t.app.server.inject({ method: 'POST', url: `/sessions/${other}/close` });
    const closed = await startTask({ input: 'x', sessionId: other }, { agent: 'pager' });
    expect(closed.statusCode).toBe(400);
    expect(closed.json().error.code).toBe('SESSION_CLOSED');

    const unknown = await startTask({ input: 'x', sessionId: 'sess_000000000000000000000000' });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error.code).toBe('SESSION_NOT_FOUND');

    const agent = await startTask({ input: 'x' }, { agent: 'nobody' });
    expect(agent.statusCode).toBe(404);
    expect(agent.json().error.code).toBe('AGENT_NOT_FOUND');
    expect(t.fake!.requests).toHaveLength(0);
  });

  it('an unknown task is 404 TASK_NOT_FOUND on every route', async () => {
    for (const [method, url] of [
      ['GET', `/tasks/${UNKNOWN_TASK}`],
      ['POST', `/tasks/${UNKNOWN_TASK}/resume`],
      ['POST', `/tasks/${UNKNOWN_TASK}/cancel`],
    ] as const) {
      const res = await t.app.server.inject({
        method,
        url,
        ...(url.endsWith('resume') ? { payload: { answer: 'x' } } : {}),
      });
      expect(res.statusCode, url).toBe(404);
      expect(res.json().error.code, url).toBe('TASK_NOT_FOUND');
    }
  });

  it('bad ids, bodies and queries are 400 before anything runs', async () => {
    const bad = [
      { method: 'GET', url: '/tasks/nope' },
      { method: 'GET', url: '/tasks/sess_abc' },
      { method: 'GET', url: '/tasks/task_a%2F..%2Fb' },
      { method: 'POST', url: '/tasks/task_!!/resume', payload: { answer: 'x' } },
      { method: 'POST', url: '/tasks/nope/cancel' },
      { method: 'GET', url: '/tasks?status=done' },
      { method: 'GET', url: '/tasks?agentName=..%2Fetc' },
      { method: 'GET', url: '/tasks?limit=0' },
      { method: 'POST', url: '/agents/assistant/tasks', payload: {} },
      { method: 'POST', url: '/agents/assistant/tasks', payload: { input: '   ' } },
      { method: 'POST', url: '/agents/assistant/tasks', payload: { input: 'x', extra: 1 } },
      { method: 'POST', url: '/agents/assistant/tasks', payload: { input: 'x', sessionId: 'abc' } },
      { method: 'POST', url: '/agents/assistant/tasks?wait=maybe', payload: { input: 'x' } },
      { method: 'POST', url: '/agents/Bad.Name/tasks', payload: { input: 'x' } },
    ] as const;
    for (const request of bad) {
      const res = await t.app.server.inject(request);
      expect(res.statusCode, `${request.method} ${request.url}`).toBe(400);
      expect(res.json().error.code, request.url).toBe('VALIDATION_ERROR');
    }
    expect(t.fake!.requests).toHaveLength(0);
  });

  it('GET /tasks filters by status and agentName and pages with a cursor', async () => {
    t.fake!.setDefault(() => ({ content: 'done' }));
    const completed: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await startTask({ input: `job ${i}` }, { agent: 'pager', wait: true });
      completed.push((res.json().task as TaskRow).id);
    }
    t.fake!.setDefault(() => ({ status: 400 }));
    const failed = (
      await startTask({ input: 'job that fails' }, { agent: 'pager', wait: true })
    ).json().task as TaskRow;
    expect(failed.status).toBe('failed');

    const all = await t.app.server.inject({ url: '/tasks?agentName=pager' });
    expect(all.statusCode).toBe(200);
    const allTasks = all.json().tasks as TaskRow[];
    expect(allTasks.map((task) => task.id).sort()).toEqual([...completed, failed.id].sort());
    expect(all.json().nextCursor).toBeNull();

    const onlyFailed = (
      await t.app.server.inject({ url: '/tasks?agentName=pager&status=failed' })
    ).json().tasks as TaskRow[];
    expect(onlyFailed.map((task) => task.id)).toEqual([failed.id]);

    const anyFailed = (await t.app.server.inject({ url: '/tasks?status=failed' })).json()
      .tasks as TaskRow[];
    expect(anyFailed.every((task) => task.status === 'failed')).toBe(true);
    expect(anyFailed.map((task) => task.id)).toContain(failed.id);

    // Pages of 3 then 1, newest first, with no task missing or repeated.
    const first = (await t.app.server.inject({ url: '/tasks?agentName=pager&limit=3' })).json();
    expect(first.tasks).toHaveLength(3);
    expect(typeof first.nextCursor).toBe('string');
    const second = (
      await t.app.server.inject({
        url: `/tasks?agentName=pager&limit=3&cursor=${encodeURIComponent(first.nextCursor as string)}`,
      })
    ).json();
    expect(second.tasks).toHaveLength(1);
    expect(second.nextCursor).toBeNull();
    const paged = [...first.tasks, ...second.tasks] as TaskRow[];
    expect(paged.map((task) => task.id)).toEqual(allTasks.map((task) => task.id));
    const created = paged.map((task) => task.created_at);
    expect([...created].sort().reverse()).toEqual(created);
  });

  it('cancelling a finished task returns it unchanged', async () => {
    t.fake!.script({ content: 'finished' });
    const task = (await startTask({ input: 'quick' }, { wait: true })).json().task as TaskRow;
    const res = await t.app.server.inject({ method: 'POST', url: `/tasks/${task.id}/cancel` });
    expect(res.statusCode).toBe(200);
    expect(res.json().task).toMatchObject({ id: task.id, status: 'completed', result: 'finished' });
  });
});

/**
 * ask_user: a task stops `waiting` with a question, the session refuses other
 * turns with 409 TASK_WAITING, the answer arrives through POST
 * /tasks/:id/resume as the call's tool result, one of two concurrent resumes
 * wins, cancelling keeps the history valid, compaction while waiting never cuts
 * the open call, and in a chat the question is the reply.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ASK_USER_IN_CHAT_RESULT } from '../../src/runtime/chat-hold.js';
import { CANCELLED_TOOL_RESULT } from '../../src/runtime/loop.js';
import type { TaskRow } from '../../src/store/store.js';
import { DATABASES, startTestApp, type TestApp } from '../helpers/test-app.js';

const ASKER = {
  name: 'asker',
  description: 'Asks before it acts',
  system: 'You ask the user when you lack information.',
  tools: ['ask_user', 'current_time'],
  maxIterations: 6,
};

const ASK_CITY = {
  tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
};

interface WireMessage {
  role: string;
  content: string | null;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

describe.each(DATABASES)('ask_user and waiting tasks (%s)', (database) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ database, agents: { asker: ASKER } });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  function post(url: string, payload?: unknown) {
    return t.app.server.inject({
      method: 'POST',
      url,
      ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}),
    });
  }

  /** Starts a task that asks "Which city?" and returns it once it waits. */
  async function waitingTask(
    input = 'Tell me the weather.',
    sessionId?: string,
    question = 'Which city?',
  ): Promise<TaskRow> {
    t.fake!.script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question }) }],
    });
    const res = await post('/agents/asker/tasks?wait=true', {
      input,
      ...(sessionId ? { sessionId } : {}),
    });
    expect(res.statusCode).toBe(201);
    const task = res.json().task as TaskRow;
    expect(task.status).toBe('waiting');
    return task;
  }

  function allRequestsValid(): void {
    for (const request of t.fake!.requests) expect(request.problems).toEqual([]);
  }

  it('resetting the session cancels its waiting task, and chats work again', async () => {
    const task = await waitingTask();
    const reset = await post(`/sessions/${task.session_id}/reset`);
    expect(reset.statusCode).toBe(200);
    const after = (await t.app.server.inject({ url: `/tasks/${task.id}` })).json().task as TaskRow;
    expect(after).toMatchObject({ status: 'cancelled', pending_call_id: null });
    expect((await post(`/tasks/${task.id}/resume`, { answer: 'Oslo' })).statusCode).toBe(409);
    t.fake!.script({ content: 'Fresh start.' });
    const chat = await post('/agents/asker/chat', { message: 'hello', sessionId: task.session_id });
    expect(chat.statusCode).toBe(200);
    allRequestsValid();
  });

  it('a task that calls ask_user stops waiting with the question', async () => {
    const task = await waitingTask();
    expect(task.question).toBe('Which city?');
    expect(task.pending_call_id).toMatch(/^call_/);
    expect(task.result).toBeNull();
    const got = (await t.app.server.inject({ url: `/tasks/${task.id}` })).json().task as TaskRow;
    expect(got).toMatchObject({ status: 'waiting', question: 'Which city?' });
    const events = await t.app.store.listEvents({
      afterId: 0,
      sessionId: task.session_id,
      limit: 100,
    });
    expect(events.find((e) => e.type === 'task.waiting')?.data).toMatchObject({
      taskId: task.id,
      question: 'Which city?',
    });
    // The open call is stored as it is: no result yet, none invented.
    const messages = (
      await t.app.server.inject({ url: `/sessions/${task.session_id}/messages` })
    ).json().messages as WireMessage[];
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant']);
    await post(`/tasks/${task.id}/cancel`);
  });

  it('a chat or a new task on the waiting session is 409 TASK_WAITING', async () => {
    const task = await waitingTask();
    const chat = await post('/agents/asker/chat', {
      message: 'Hello?',
      sessionId: task.session_id,
    });
    expect(chat.statusCode).toBe(409);
    expect(chat.json().error.code).toBe('TASK_WAITING');
    expect(chat.json().error.message).toContain(task.id);

    const second = await post('/agents/asker/tasks', {
      input: 'Another goal',
      sessionId: task.session_id,
    });
    expect(second.statusCode).toBe(409);
    expect(second.json().error.code).toBe('TASK_WAITING');
    const tasks = (await t.app.server.inject({ url: '/tasks?agentName=asker' })).json()
      .tasks as TaskRow[];
    expect(tasks.filter((x) => x.session_id === task.session_id)).toHaveLength(1);
    // Neither reached the model, and nothing was stored for them.
    expect(t.fake!.requests).toHaveLength(1);
    const messages = (
      await t.app.server.inject({ url: `/sessions/${task.session_id}/messages` })
    ).json().messages as WireMessage[];
    expect(messages).toHaveLength(3);
    await post(`/tasks/${task.id}/cancel`);
  });

  it('resume with an answer completes the task; the answer is the ask_user result', async () => {
    const task = await waitingTask();
    t.fake!.script({ content: 'Sunny in Paris.' });
    const res = await post(`/tasks/${task.id}/resume?wait=true`, { answer: 'Paris' });
    expect(res.statusCode).toBe(200);
    expect(res.json().task).toMatchObject({
      id: task.id,
      status: 'completed',
      result: 'Sunny in Paris.',
      question: null,
      pending_call_id: null,
    });

    const sent = t.fake!.requests.at(-1)!.body.messages as WireMessage[];
    const callAt = sent.findIndex((m) => m.tool_calls?.some((c) => c.id === task.pending_call_id));
    expect(callAt).toBeGreaterThan(0);
    expect(sent[callAt]!.tool_calls![0]!.function.name).toBe('ask_user');
    expect(sent[callAt + 1]).toMatchObject({
      role: 'tool',
      tool_call_id: task.pending_call_id,
      content: 'Paris',
    });
    expect(sent).toHaveLength(callAt + 2);
    allRequestsValid();

    const events = await t.app.store.listEvents({
      afterId: 0,
      sessionId: task.session_id,
      limit: 100,
    });
    expect(events.map((e) => e.type).filter((type) => type.startsWith('task.'))).toEqual([
      'task.started',
      'task.waiting',
      'task.resumed',
      'task.completed',
    ]);

    // The session is free again.
    t.fake!.script({ content: 'You are welcome.' });
    const chat = await post('/agents/asker/chat', {
      message: 'Thanks',
      sessionId: task.session_id,
    });
    expect(chat.statusCode).toBe(200);
    allRequestsValid();
  });

  it('a task that asks twice waits twice and completes after the second answer', async () => {
    const task = await waitingTask();
    t.fake!.script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which day?' }) }],
    });
    const again = (await post(`/tasks/${task.id}/resume?wait=true`, { answer: 'Oslo' })).json()
      .task as TaskRow;
    expect(again).toMatchObject({ status: 'waiting', question: 'Which day?' });
    expect(again.pending_call_id).not.toBe(task.pending_call_id);
    t.fake!.script({ content: 'Rain in Oslo on Monday.' });
    const done = (await post(`/tasks/${task.id}/resume?wait=true`, { answer: 'Monday' })).json()
      .task as TaskRow;
    expect(done).toMatchObject({ status: 'completed', result: 'Rain in Oslo on Monday.' });
    const contents = (t.fake!.requests.at(-1)!.body.messages as WireMessage[])
      .filter((m) => m.role === 'tool')
      .map((m) => m.content);
    expect(contents).toEqual(['Oslo', 'Monday']);
    allRequestsValid();
  });

  it('resuming a task that is not waiting is 409 TASK_NOT_WAITING', async () => {
    t.fake!.script({ content: 'All done.' });
    const task = (await post('/agents/asker/tasks?wait=true', { input: 'Easy one.' })).json()
      .task as TaskRow;
    expect(task.status).toBe('completed');
    const res = await post(`/tasks/${task.id}/resume`, { answer: 'late answer' });
    expect(res.statusCode).toBe(409);
    expect(res.json().error.code).toBe('TASK_NOT_WAITING');
    expect((await t.app.tasks.getTask(task.id)).status).toBe('completed');
  });

  it('resume of a waiting task without an answer is 400', async () => {
    const task = await waitingTask();
    for (const payload of [undefined, {}, { answer: '' }, { answer: '   ' }, { reply: 'x' }]) {
      const res = await post(`/tasks/${task.id}/resume`, payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
    expect((await t.app.tasks.getTask(task.id)).status).toBe('waiting');
    expect(t.fake!.requests).toHaveLength(1);
    await post(`/tasks/${task.id}/cancel`);
  });

  it('two concurrent resumes: exactly one 200, the other 409, one continuation', async () => {
    const task = await waitingTask();
    t.fake!.script({ content: 'Answered once.', delayMs: 100 }, { content: 'Answered twice!' });
    const responses = await Promise.all([
      post(`/tasks/${task.id}/resume?wait=true`, { answer: 'Rome' }),
      post(`/tasks/${task.id}/resume?wait=true`, { answer: 'Lima' }),
    ]);
    expect(responses.map((r) => r.statusCode).sort()).toEqual([200, 409]);
    const loser = responses.find((r) => r.statusCode === 409)!;
    expect(loser.json().error.code).toBe('TASK_NOT_WAITING');
    const winner = responses.find((r) => r.statusCode === 200)!;
    expect(winner.json().task).toMatchObject({ status: 'completed', result: 'Answered once.' });

    expect(t.fake!.requests).toHaveLength(2);
    const messages = (
      await t.app.server.inject({ url: `/sessions/${task.session_id}/messages` })
    ).json().messages as WireMessage[];
    const results = messages.filter((m) => m.role === 'tool');
    expect(results).toHaveLength(1);
    expect(['Rome', 'Lima']).toContain(results[0]!.content);
    allRequestsValid();
  });

  it('a cancel racing a resume always wins or loses cleanly, never lost', async () => {
    // Step the cancel through every point of the resume (microtask by
    // microtask): whichever lands first, the cancel must leave the task
    // cancelled; a cancel that sees `running` must stop the resumed run.
    for (let steps = 0; steps < 12; steps++) {
      const task = await waitingTask();
      t.fake!.script({ content: 'should not complete', delayMs: 200 });
      const resumed = t.app.tasks.resumeTask({ taskId: task.id, answer: 'Quito' }).then(
        (row) => row.status as string,
        (err: { code?: string }) => err.code,
      );
      for (let i = 0; i < steps; i++) await Promise.resolve();
      const cancelled = await t.app.tasks.cancelTask(task.id);
      expect(['running', 'TASK_NOT_WAITING']).toContain(await resumed);
      expect(cancelled.status, `cancel after ${steps} microtasks`).toBe('cancelled');
      expect((await t.app.tasks.wait(task.id)).status).toBe('cancelled');
      t.fake!.reset();
    }
  });

  it('a task cancelled while queued behind a chat stores nothing and never runs', async () => {
    t.fake!.script({ content: 'first' });
    const first = await post('/agents/asker/chat', { message: 'Hello.' });
    const sessionId = first.json().sessionId as string;
    t.fake!.reset();
    t.fake!.script({ content: 'slow chat answer', delayMs: 300 });
    const chat = post('/agents/asker/chat', { message: 'Slow one.', sessionId });
    await expect.poll(() => t.fake!.requests.length).toBe(1);
    const queued = await post('/agents/asker/tasks', { input: 'Queued goal.', sessionId });
    expect(queued.json().task.status).toBe('running');
    const cancel = await post(`/tasks/${queued.json().task.id as string}/cancel`);
    expect(cancel.json().task.status).toBe('cancelled');
    expect((await chat).statusCode).toBe(200);
    expect(t.fake!.requests).toHaveLength(1);
    const contents = (
      (await t.app.server.inject({ url: `/sessions/${sessionId}/messages` })).json()
        .messages as WireMessage[]
    ).map((m) => m.content);
    expect(contents).not.toContain('Queued goal.');
  });

  it('cancelling a waiting task answers the open call, and the session chats again', async () => {
    const task = await waitingTask();
    const res = await post(`/tasks/${task.id}/cancel`);
    expect(res.statusCode).toBe(200);
    expect(res.json().task).toMatchObject({
      id: task.id,
      status: 'cancelled',
      pending_call_id: null,
    });
    const resume = await post(`/tasks/${task.id}/resume`, { answer: 'too late' });
    expect(resume.statusCode).toBe(409);
    expect(resume.json().error.code).toBe('TASK_NOT_WAITING');

    t.fake!.script({ content: 'Back to chatting.' });
    const chat = await post('/agents/asker/chat', {
      message: 'Never mind.',
      sessionId: task.session_id,
    });
    expect(chat.statusCode).toBe(200);
    expect(chat.json().reply).toBe('Back to chatting.');
    const sent = t.fake!.requests.at(-1)!.body.messages as WireMessage[];
    expect(sent.find((m) => m.role === 'tool')).toMatchObject({
      tool_call_id: task.pending_call_id,
      content: CANCELLED_TOOL_RESULT,
    });
    allRequestsValid();
    const events = await t.app.store.listEvents({
      afterId: 0,
      sessionId: task.session_id,
      limit: 100,
    });
    expect(events.map((e) => e.type)).toContain('task.cancelled');
    // The answer is announced like every stored message (written through the slot's port).
    expect(
      events.filter((e) => e.type === 'message.created' && e.data.role === 'tool'),
    ).toHaveLength(1);
  });

  it('cancelling a running task stops it as cancelled', async () => {
    t.fake!.script({ hang: true });
    const started = await post('/agents/asker/tasks', { input: 'Take forever.' });
    expect(started.statusCode).toBe(201);
    const task = started.json().task as TaskRow;
    expect(task.status).toBe('running');
    // Cancel once the model call is in flight.
    await expect.poll(() => t.fake!.requests.length).toBe(1);
    const res = await post(`/tasks/${task.id}/cancel`);
    expect(res.statusCode).toBe(200);
    expect(res.json().task).toMatchObject({ id: task.id, status: 'cancelled' });
    expect((await t.app.tasks.wait(task.id)).status).toBe('cancelled');

    // The session is usable afterwards, with a valid request.
    t.fake!.script({ content: 'Fresh start.' });
    const chat = await post('/agents/asker/chat', {
      message: 'Try again.',
      sessionId: task.session_id,
    });
    expect(chat.statusCode).toBe(200);
    allRequestsValid();
  });

  it('cancelling a running task during a slow model reply also ends cancelled', async () => {
    t.fake!.script({ content: 'too slow', delayMs: 5_000 });
    const task = (await post('/agents/asker/tasks', { input: 'Slow.' })).json().task as TaskRow;
    await expect.poll(() => t.fake!.requests.length).toBe(1);
    const res = await post(`/tasks/${task.id}/cancel`);
    expect(res.json().task.status).toBe('cancelled');
    const stored = (
      await t.app.server.inject({ url: `/sessions/${task.session_id}/messages` })
    ).json().messages as WireMessage[];
    expect(stored.map((m) => m.role)).toEqual(['system', 'user']);
  });

  it('compaction while a task waits never cuts the open call; resume then completes', async () => {
    // Some history first, so there is something to compact.
    t.fake!.script({ content: `Earlier answer one. ${'a'.repeat(400)}` });
    const first = await post('/agents/asker/chat', { message: `First. ${'q'.repeat(400)}` });
    const sessionId = first.json().sessionId as string;
    t.fake!.script({ content: `Earlier answer two. ${'b'.repeat(400)}` });
    await post('/agents/asker/chat', { message: `Second. ${'r'.repeat(400)}`, sessionId });

    // A long question makes the open call the bulk of the history, so the
    // greedy cut lands past it and must move back before it:
    // a cut never separates a tool call from its result.
    const question = `Which city? ${'z'.repeat(3000)}`;
    const task = await waitingTask('Weather please.', sessionId, question);
    t.fake!.script({ content: 'Summary: the user chatted twice and asked for the weather.' });
    const compacted = await post(`/sessions/${sessionId}/compact`);
    expect(compacted.statusCode).toBe(200);
    expect(compacted.json().compactedCount).toBeGreaterThan(0);
    expect(compacted.json().alreadyUpToDate).toBe(false);

    const messages = (await t.app.server.inject({ url: `/sessions/${sessionId}/messages` })).json()
      .messages as (WireMessage & { seq: number; compacted: boolean })[];
    const call = messages.find((m) => m.tool_calls?.some((c) => c.id === task.pending_call_id))!;
    expect(call.compacted).toBe(false);
    const session = compacted.json().session as { compact_seq: number };
    expect(session.compact_seq).toBe(call.seq - 1);

    // The task is still waiting and other turns are still refused.
    expect((await t.app.tasks.getTask(task.id)).status).toBe('waiting');
    const chat = await post('/agents/asker/chat', { message: 'hi', sessionId });
    expect(chat.statusCode).toBe(409);

    t.fake!.script({ content: 'Cloudy in Bergen.' });
    const res = await post(`/tasks/${task.id}/resume?wait=true`, { answer: 'Bergen' });
    expect(res.json().task).toMatchObject({ status: 'completed', result: 'Cloudy in Bergen.' });
    const sent = t.fake!.requests.at(-1)!.body.messages as WireMessage[];
    expect(sent.some((m) => m.content?.includes('Summary: the user chatted twice'))).toBe(true);
    const callAt = sent.findIndex((m) => m.tool_calls?.some((c) => c.id === task.pending_call_id));
    expect(sent[callAt + 1]).toMatchObject({ role: 'tool', content: 'Bergen' });
    allRequestsValid();
  });

  it('ask_user in a chat: the question is the reply and the history stays valid', async () => {
    t.fake!.script(ASK_CITY);
    const res = await post('/agents/asker/chat', { message: 'What is the weather?' });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.reply).toBe('Which city?');
    expect(body.messages.map((m: WireMessage) => m.role)).toEqual(['user', 'assistant', 'tool']);
    expect(body.messages.at(-1).content).toBe(ASK_USER_IN_CHAT_RESULT);
    // A chat does not create a waiting task.
    expect(await t.app.store.findWaitingTaskForSession(body.sessionId as string)).toBeUndefined();

    t.fake!.script({ content: 'Warm in Lisbon.' });
    const next = await post('/agents/asker/chat', {
      message: 'Lisbon',
      sessionId: body.sessionId,
    });
    expect(next.statusCode).toBe(200);
    expect(next.json().reply).toBe('Warm in Lisbon.');
    const sent = t.fake!.requests.at(-1)!.body.messages as WireMessage[];
    expect(sent.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'user']);
    expect(sent.at(-1)!.content).toBe('Lisbon');
    allRequestsValid();
  });

  it('ask_user next to another call: the other call gets its result before the task waits', async () => {
    t.fake!.script({
      tool_calls: [
        { name: 'ask_user', arguments: JSON.stringify({ question: 'Which zone?' }) },
        { name: 'current_time', arguments: '{}' },
      ],
    });
    const task = (await post('/agents/asker/tasks?wait=true', { input: 'Time?' })).json()
      .task as TaskRow;
    expect(task).toMatchObject({ status: 'waiting', question: 'Which zone?' });
    t.fake!.script({ content: 'Noon in UTC.' });
    const done = (await post(`/tasks/${task.id}/resume?wait=true`, { answer: 'UTC' })).json()
      .task as TaskRow;
    expect(done.status).toBe('completed');
    const sent = t.fake!.requests.at(-1)!.body.messages as WireMessage[];
    const call = sent.find((m) => m.tool_calls)!;
    const results = sent.filter((m) => m.role === 'tool');
    expect(results.map((r) => r.tool_call_id).sort()).toEqual(
      call.tool_calls!.map((c) => c.id).sort(),
    );
    expect(results.find((r) => r.tool_call_id === task.pending_call_id)!.content).toBe('UTC');
    allRequestsValid();
  });
});

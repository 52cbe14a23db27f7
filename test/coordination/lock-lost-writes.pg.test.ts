/**
 * Every write a turn makes checks that the session's lock is still held. On
 * Postgres the lock lives on a connection of its own; when that connection
 * drops, another instance may run the session at once, so the turn must
 * write nothing more. Each path that writes is cut at its own point — the
 * lock connection is really terminated, and the write waits until the lock
 * has noticed — and the session is checked to hold nothing written after it:
 *
 * - a chat's `ask_user` held as the reply (the call's answer),
 * - a chat's call awaiting approval (its waiting task),
 * - a new `/v1` conversation's posted history,
 * - a `/v1` turn's `ask_user` (the answer and the question as the reply),
 * - a `/v1` turn's call awaiting approval,
 * - a reset, and a cancelled task's answer to its open call,
 * - a task's own turn, a resumed task's answer, an approved call,
 * - a close and a delete,
 * - the memory tool's save,
 * - a `/v1` continuation of a conversation,
 * - an automatic compaction the turn runs (its summary computed, its landing refused),
 * - a write after a loss this instance has not noticed yet, which only the
 *   version fence on the session row can refuse.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { ChatMessage } from '../../src/llm/messages.js';
import { loadSettings } from '../../src/config/settings.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';

const APPROVED_TOOL = `export default {
  name: 'launch',
  description: 'Launches',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
  async run() {
    globalThis.cairnTestLaunches = (globalThis.cairnTestLaunches ?? 0) + 1;
    return 'launched';
  },
};
`;

const AGENT = {
  ...TEST_AGENT,
  tools: ['ask_user', 'memory', { tool: './tools/launch.js', approval: 'required' }],
};

/** Compacts before a model call once the prompt reaches 1 % of the window (~1 300 tokens by default). */
const COMPACTING_AGENT = {
  ...TEST_AGENT,
  name: 'compactor',
  defaultCompaction: { autoThreshold: 1 },
};

/** How many times the approved tool has run in this process. */
const launches = (): number =>
  (globalThis as { cairnTestLaunches?: number }).cairnTestLaunches ?? 0;

let t: TestApp;
let admin: pg.Client;
/** The slot signal of the lock work that runs now (the lock hands one to each). */
let currentSlot: AbortSignal | undefined;
/** Set to cut the lock right before the next lock work starts. */
let cutBeforeNextSlot = false;
/** Set to cut the lock right after the next append whose messages match it. */
let cutAfterAppend: ((messages: readonly ChatMessage[]) => boolean) | undefined;
/** Set to cut the lock as the next compaction plans its cut (its summary is computed after). */
let cutAtCompaction = false;
/**
 * Set to hand the next lock work a signal that never aborts: the instance
 * has not noticed its lock connection drop yet (the check before each write
 * passes), so only the version fence can stop the write.
 */
let hideLoss = false;
/** Set to have a writer change the session row right after the next append whose messages match it. */
let rowChangedAfterAppend: ((messages: readonly ChatMessage[]) => boolean) | undefined;

beforeAll(async () => {
  t = await startTestApp({
    database: 'postgres',
    agents: { assistant: AGENT, compactor: COMPACTING_AGENT },
    files: { 'agents/assistant/tools/launch.js': APPROVED_TOOL },
  });
  admin = new pg.Client({
    connectionString: loadSettings({ home: t.home, env: {} }).database.url!,
  });
  await admin.connect();

  // The real lock and the real store, watched: the lock's signal is noted,
  // and an append can be followed by the cut before the turn goes on (as if
  // the database answered just after the lock's connection died).
  const lock = t.app.sessionLock;
  const run = lock.run.bind(lock);
  lock.run = (sessionId, work) =>
    run(sessionId, async (signal) => {
      currentSlot = signal;
      if (cutBeforeNextSlot) {
        cutBeforeNextSlot = false;
        await cutLock(signal);
      }
      if (hideLoss) {
        hideLoss = false;
        return work(new AbortController().signal);
      }
      return work(signal);
    });
  const store = t.app.store;
  const append = store.appendMessagesWithEvents.bind(store);
  store.appendMessagesWithEvents = async (sessionId, messages, ...rest) => {
    const written = await append(sessionId, messages, ...rest);
    if (cutAfterAppend?.(messages)) {
      cutAfterAppend = undefined;
      await cutLock(currentSlot!);
    }
    if (rowChangedAfterAppend?.(messages)) {
      rowChangedAfterAppend = undefined;
      // A peer that took the lock (or a writer that takes none) changes the row.
      await admin.query(`UPDATE sessions SET title = 'changed elsewhere' WHERE id = $1`, [
        sessionId,
      ]);
    }
    return written;
  };
  const plan = store.listMessageMeta.bind(store);
  store.listMessageMeta = async (...args) => {
    if (cutAtCompaction) {
      cutAtCompaction = false;
      await cutLock(currentSlot!);
    }
    return plan(...args);
  };
});
afterAll(async () => {
  await admin?.end();
  await t?.close();
});
beforeEach(() => {
  t.fake!.reset();
  cutBeforeNextSlot = false;
  cutAfterAppend = undefined;
  cutAtCompaction = false;
  hideLoss = false;
  rowChangedAfterAppend = undefined;
});

/** Terminates the instance's lock connection and waits until the slot's signal says so. */
async function cutLock(slot: AbortSignal): Promise<void> {
  const { rowCount } = await admin.query(
    `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
    [`cairn ${t.app.instanceId} locks`],
  );
  expect(rowCount).toBe(1);
  for (let i = 0; i < 1000 && !slot.aborted; i++) await new Promise((r) => setTimeout(r, 10));
  expect(slot.aborted).toBe(true);
}

/** After the stored assistant message that calls `tool`. */
const afterCallTo =
  (tool: string) =>
  (messages: readonly ChatMessage[]): boolean =>
    messages.some(
      (m) => m.role === 'assistant' && m.tool_calls?.some((c) => c.function.name === tool),
    );

async function roles(sessionId: string): Promise<string[]> {
  const messages = await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 100 });
  return messages.map((m) =>
    m.role === 'assistant' && m.tool_calls?.length
      ? `assistant→${m.tool_calls.map((c) => c.function.name).join(',')}`
      : m.role,
  );
}

/** After the stored message that answers a call (a tool result). */
const afterToolResult = (messages: readonly ChatMessage[]): boolean =>
  messages.some((m) => m.role === 'tool');

type TaskView = { id: string; status: string; session_id: string };

/** A task through the API that stops waiting (ask_user's question or the launch approval). */
async function waitingTask(tool: 'ask_user' | 'launch'): Promise<TaskView> {
  t.fake!.script({
    tool_calls: [{ name: tool, arguments: tool === 'ask_user' ? '{"question":"Which?"}' : '{}' }],
  });
  const created = await t.app.server.inject({
    method: 'POST',
    url: '/agents/assistant/tasks?wait=true',
    payload: { input: 'go' },
  });
  expect(created.statusCode, created.body).toBe(201);
  const task = created.json<{ task: TaskView }>().task;
  expect(task.status).toBe('waiting');
  return task;
}

/** The task's status once it is no longer running (a lost slot settles it late). */
async function settledStatus(taskId: string): Promise<string> {
  let status = 'running';
  for (let i = 0; i < 1000 && status === 'running'; i++) {
    status = (await t.app.tasks.getTask(taskId)).status;
    if (status === 'running') await new Promise((r) => setTimeout(r, 10));
  }
  return status;
}

async function tasksOf(sessionId: string) {
  return (await t.app.store.listTasks({ sessionId, limit: 10 })).items;
}

function expectLockLost(res: { statusCode: number; body: string }): void {
  expect(res.statusCode, res.body).toBe(503);
  expect(res.body.toUpperCase()).toContain('SESSION_LOCK_LOST');
}

async function newSession(): Promise<string> {
  const res = await t.app.server.inject({
    method: 'POST',
    url: '/sessions',
    payload: { agentName: 'assistant' },
  });
  return res.json<{ session: { id: string } }>().session.id;
}

const chat = (sessionId: string, message: string) =>
  t.app.server.inject({
    method: 'POST',
    url: '/agents/assistant/chat',
    payload: { message, sessionId },
  });

const completion = (messages: object[], sessionId?: string) =>
  t.app.server.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: sessionId ? { 'x-cairn-session-id': sessionId } : {},
    payload: { model: 'assistant', messages },
  });

describe('a lost session lock stops every write of the turn', () => {
  it('chat: the ask_user question is not answered in the history', async () => {
    const sessionId = await newSession();
    t.fake!.script({ tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which?"}' }] });
    cutAfterAppend = afterCallTo('ask_user');
    expectLockLost(await chat(sessionId, 'do it'));
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant→ask_user']);
  });

  it('chat: a call awaiting approval creates no waiting task', async () => {
    const sessionId = await newSession();
    t.fake!.script({ tool_calls: [{ name: 'launch', arguments: '{}' }] });
    cutAfterAppend = afterCallTo('launch');
    expectLockLost(await chat(sessionId, 'launch it'));
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant→launch']);
    expect(await tasksOf(sessionId)).toEqual([]);
  });

  it('/v1: a new conversation stores none of its posted history', async () => {
    const before = await t.app.store.listSessions({ limit: 100 });
    cutBeforeNextSlot = true;
    const res = await completion([
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'an answer' },
      { role: 'user', content: 'second' },
    ]);
    expectLockLost(res);
    const after = await t.app.store.listSessions({ limit: 100 });
    const known = new Set(before.items.map((s) => s.id));
    const seeded = after.items.filter((s) => !known.has(s.id));
    expect(seeded).toHaveLength(1);
    expect(await roles(seeded[0]!.id)).toEqual(['system']);
    expect(t.fake!.requests).toHaveLength(0);
  });

  it('/v1: ask_user is neither answered nor stored as the reply', async () => {
    const sessionId = await newSession();
    t.fake!.script({ tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which?"}' }] });
    cutAfterAppend = afterCallTo('ask_user');
    expectLockLost(await completion([{ role: 'user', content: 'do it' }], sessionId));
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant→ask_user']);
  });

  it('/v1: a call awaiting approval creates no waiting task', async () => {
    const sessionId = await newSession();
    t.fake!.script({ tool_calls: [{ name: 'launch', arguments: '{}' }] });
    cutAfterAppend = afterCallTo('launch');
    expectLockLost(await completion([{ role: 'user', content: 'launch it' }], sessionId));
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant→launch']);
    expect(await tasksOf(sessionId)).toEqual([]);
  });

  it('a reset whose lock is lost before it runs clears nothing', async () => {
    const sessionId = await newSession();
    t.fake!.script({ content: 'hello' });
    expect((await chat(sessionId, 'hi')).statusCode).toBe(200);
    cutBeforeNextSlot = true;
    const res = await t.app.server.inject({ method: 'POST', url: `/sessions/${sessionId}/reset` });
    expectLockLost(res);
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant']);
  });

  it('task: its turn stores nothing after the cut, and the task is not left running', async () => {
    t.fake!.script({ tool_calls: [{ name: 'memory_search', arguments: '{"query":"x"}' }] });
    t.fake!.script({ content: 'never stored' });
    cutAfterAppend = afterCallTo('memory_search');
    const created = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/tasks',
      payload: { input: 'look it up' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const task = created.json<{ task: TaskView }>().task;
    expect(await settledStatus(task.id)).toBe('interrupted');
    expect(await roles(task.session_id)).toEqual(['system', 'user', 'assistant→memory_search']);
  });

  it('resume: the answer is stored, and nothing after it', async () => {
    const task = await waitingTask('ask_user');
    t.fake!.script({ content: 'never stored' });
    cutAfterAppend = afterToolResult;
    const res = await t.app.server.inject({
      method: 'POST',
      url: `/tasks/${task.id}/resume`,
      payload: { answer: 'this one' },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
    expect(await settledStatus(task.id)).toBe('interrupted');
    expect(await roles(task.session_id)).toEqual(['system', 'user', 'assistant→ask_user', 'tool']);
  });

  it('approve: a call whose slot is lost before it runs is never run', async () => {
    const task = await waitingTask('launch');
    const before = launches();
    cutBeforeNextSlot = true;
    const res = await t.app.server.inject({ method: 'POST', url: `/tasks/${task.id}/approve` });
    expect(res.statusCode, res.body).toBeLessThan(300);
    expect(await settledStatus(task.id)).not.toBe('completed');
    expect(launches()).toBe(before);
    expect(await roles(task.session_id)).toEqual(['system', 'user', 'assistant→launch']);
  });

  it('approve: the call runs, its result is stored, and no reply after the cut', async () => {
    const task = await waitingTask('launch');
    const before = launches();
    t.fake!.script({ content: 'never stored' });
    cutAfterAppend = afterToolResult;
    const res = await t.app.server.inject({ method: 'POST', url: `/tasks/${task.id}/approve` });
    expect(res.statusCode, res.body).toBeLessThan(300);
    expect(await settledStatus(task.id)).toBe('interrupted');
    expect(launches()).toBe(before + 1);
    expect(await roles(task.session_id)).toEqual(['system', 'user', 'assistant→launch', 'tool']);
  });

  it('a close whose lock is lost leaves the session open', async () => {
    const sessionId = await newSession();
    cutBeforeNextSlot = true;
    expectLockLost(
      await t.app.server.inject({ method: 'POST', url: `/sessions/${sessionId}/close` }),
    );
    expect((await t.app.store.findSession(sessionId))?.status).toBe('active');
  });

  it('a delete whose lock is lost deletes nothing', async () => {
    const sessionId = await newSession();
    t.fake!.script({ content: 'hello' });
    expect((await chat(sessionId, 'hi')).statusCode).toBe(200);
    cutBeforeNextSlot = true;
    expectLockLost(await t.app.server.inject({ method: 'DELETE', url: `/sessions/${sessionId}` }));
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant']);
  });

  it('memory tool: a save after the cut is refused and saves no note', async () => {
    const sessionId = await newSession();
    t.fake!.script({
      tool_calls: [{ name: 'memory_save', arguments: '{"key":"lost.note","content":"kept?"}' }],
    });
    cutAfterAppend = afterCallTo('memory_save');
    expectLockLost(await chat(sessionId, 'remember this'));
    expect(await t.app.store.listMemory('assistant', 'kept', 10)).toEqual([]);
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant→memory_save']);
  });

  it('/v1: a continuation stores its new message, and no reply after the cut', async () => {
    t.fake!.script({ content: 'one' });
    const first = await completion([{ role: 'user', content: 'first' }]);
    expect(first.statusCode, first.body).toBe(200);
    const sessionId = String(first.headers['x-cairn-session-id']);
    t.fake!.script({ content: 'never stored' });
    cutAfterAppend = (messages) => messages.some((m) => m.content === 'second');
    expectLockLost(
      await completion([
        { role: 'user', content: 'first' },
        { role: 'assistant', content: 'one' },
        { role: 'user', content: 'second' },
      ]),
    );
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant', 'user']);
  });

  it('a cancel whose lock is lost leaves the task waiting and its call open', async () => {
    t.fake!.script({ tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which?"}' }] });
    const created = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/tasks?wait=true',
      payload: { input: 'ask me' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const task = created.json<{ task: { id: string; status: string; session_id: string } }>().task;
    expect(task.status).toBe('waiting');
    cutBeforeNextSlot = true;
    const res = await t.app.server.inject({ method: 'POST', url: `/tasks/${task.id}/cancel` });
    expectLockLost(res);
    expect((await t.app.tasks.getTask(task.id)).status).toBe('waiting');
    expect(await roles(task.session_id)).toEqual(['system', 'user', 'assistant→ask_user']);
  });

  it('automatic compaction: the summary is computed but does not land, and the turn stores no reply', async () => {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'compactor' },
    });
    const sessionId = res.json<{ session: { id: string } }>().session.id;
    const long = (i: number) => `message ${i} ${'about the harbour and its boats '.repeat(40)}`;
    await t.app.store.appendMessages(
      sessionId,
      Array.from({ length: 10 }, (_, i) => ({
        role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
        content: long(i),
      })),
    );
    cutAtCompaction = true;
    expectLockLost(
      await t.app.server.inject({
        method: 'POST',
        url: '/agents/compactor/chat',
        payload: { message: 'and now?', sessionId },
      }),
    );
    // The summariser was asked (the summary is computed without the lock) ...
    expect(t.fake!.requests.some((r) => isSummaryRequest(r.body))).toBe(true);
    // ... but nothing landed: no pointer moved, no record, no reply.
    const session = await t.app.store.findSession(sessionId);
    expect(session?.compact_size).toBe(0);
    expect(session?.compact_summary).toBeNull();
    expect(await t.app.store.listCompactions(sessionId)).toEqual([]);
    const stored = await roles(sessionId);
    expect(stored.at(-1)).toBe('user');
    expect(stored).toHaveLength(12);
  });

  it('a loss not yet noticed: the next write is refused by the row version, not stored', async () => {
    const sessionId = await newSession();
    t.fake!.script({ tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which?"}' }] });
    hideLoss = true;
    cutAfterAppend = afterCallTo('ask_user');
    rowChangedAfterAppend = afterCallTo('ask_user');
    expectLockLost(await chat(sessionId, 'do it'));
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant→ask_user']);
  });

  it('the row changed by a writer that takes no lock: the turn confirms its lock and goes on', async () => {
    const sessionId = await newSession();
    t.fake!.script({ tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which?"}' }] });
    rowChangedAfterAppend = afterCallTo('ask_user');
    const res = await chat(sessionId, 'do it');
    expect(res.statusCode, res.body).toBe(200);
    expect(await roles(sessionId)).toEqual(['system', 'user', 'assistant→ask_user', 'tool']);
    expect((await t.app.store.findSession(sessionId))?.title).toBe('changed elsewhere');
  });
});

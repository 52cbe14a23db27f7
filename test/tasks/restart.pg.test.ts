/**
 * Tasks across a restart (`kill -9` or SIGTERM): the task row is the
 * source of truth, so a waiting task can be answered by the next process, and
 * a task left `running` by a dead one comes back `interrupted` and resumable,
 * with the tool call it was in the middle of repaired.
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { INTERRUPTED_TOOL_RESULT } from '../../src/llm/normalize-request.js';
import type { TaskRow } from '../../src/store/store.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { DATABASES, makeHome } from '../helpers/test-app.js';

const ASKER = {
  name: 'asker',
  description: 'Asks before it acts',
  system: 'You ask the user when you lack information.',
  tools: ['ask_user', 'current_time'],
  maxIterations: 6,
};

interface WireMessage {
  role: string;
  content: string | null;
  tool_calls?: { id: string }[];
  tool_call_id?: string;
}

/** A Cairn app on an existing home: what a restarted server builds. */
async function openApp(home: string): Promise<CairnApp> {
  return startApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
}

describe.each(DATABASES)('tasks across a restart (%s)', (kind) => {
  let fake: FakeLlmServer;
  let home: string;
  let app: CairnApp | undefined;
  let database: TestDatabase | undefined;

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    // On Postgres the restarted process finds the tasks in the same database.
    database = kind === 'postgres' ? await createTestDatabase() : undefined;
    home = makeHome({ agents: { asker: ASKER } }, fake.baseURL, database?.url ?? null);
  });
  afterAll(async () => {
    await app?.close();
    await fake.close();
    await database?.drop();
    rmSync(home, { recursive: true, force: true });
  });
  beforeEach(() => fake.reset());

  async function restart(): Promise<CairnApp> {
    await app?.close();
    app = await openApp(home);
    return app;
  }

  it('a waiting task survives a restart and is resumed by the new process', async () => {
    let current = await restart();
    fake.script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
    });
    const started = await current.server.inject({
      method: 'POST',
      url: '/agents/asker/tasks?wait=true',
      payload: { input: 'Weather?' },
    });
    const task = started.json().task as TaskRow;
    expect(task.status).toBe('waiting');

    current = await restart();
    const after = (await current.server.inject({ url: `/tasks/${task.id}` })).json()
      .task as TaskRow;
    expect(after).toMatchObject({
      status: 'waiting',
      question: 'Which city?',
      pending_call_id: task.pending_call_id,
    });
    // Still guarded in the new process.
    const chat = await current.server.inject({
      method: 'POST',
      url: '/agents/asker/chat',
      payload: { message: 'hello', sessionId: task.session_id },
    });
    expect(chat.statusCode).toBe(409);
    expect(chat.json().error.code).toBe('TASK_WAITING');

    fake.script({ content: 'Dry in Madrid.' });
    const res = await current.server.inject({
      method: 'POST',
      url: `/tasks/${task.id}/resume?wait=true`,
      payload: { answer: 'Madrid' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().task).toMatchObject({ status: 'completed', result: 'Dry in Madrid.' });
    const sent = fake.requests.at(-1)!.body.messages as WireMessage[];
    const callAt = sent.findIndex((m) => m.tool_calls?.some((c) => c.id === task.pending_call_id));
    expect(sent[callAt + 1]).toMatchObject({
      role: 'tool',
      tool_call_id: task.pending_call_id,
      content: 'Madrid',
    });
    // Not repaired as "interrupted": the waiting call was waiting, not lost.
    expect(sent.some((m) => m.content === INTERRUPTED_TOOL_RESULT)).toBe(false);
    expect(fake.requests.every((r) => r.problems.length === 0)).toBe(true);
  });

  it('a task left running is interrupted after a restart; resume runs it to completion', async () => {
    let current = await restart();
    // What a process killed in the middle of a tool leaves behind: the task
    // row `running`, its input and an assistant tool call with no result.
    const session = await current.sessions.create({ agentName: 'asker', mode: 'task' });
    await current.store.appendMessages(session.id, [
      { role: 'user', content: 'What time is it?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_lost1',
            type: 'function',
            function: { name: 'current_time', arguments: '{}' },
          },
        ],
      },
    ]);
    const row = await current.store.createTask({
      sessionId: session.id,
      agentName: 'asker',
      input: 'What time is it?',
    });
    expect(row.status).toBe('running');

    current = await restart();
    const after = (await current.server.inject({ url: `/tasks/${row.id}` })).json().task as TaskRow;
    expect(after.status).toBe('interrupted');
    expect(after.error).toMatch(/resume/i);
    const listed = (
      await current.server.inject({ url: '/tasks?status=interrupted&agentName=asker' })
    ).json().tasks as TaskRow[];
    expect(listed.map((x) => x.id)).toContain(row.id);

    fake.script({ content: 'It is noon.' });
    const res = await current.server.inject({
      method: 'POST',
      url: `/tasks/${row.id}/resume?wait=true`,
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().task).toMatchObject({
      status: 'completed',
      result: 'It is noon.',
      error: null,
    });

    const sent = fake.requests.at(-1)!.body.messages as WireMessage[];
    expect(sent.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'user']);
    expect(sent[3]).toMatchObject({ tool_call_id: 'call_lost1', content: INTERRUPTED_TOOL_RESULT });
    // Alone on SQLite the server itself stopped; on Postgres the new instance swept a gone one's task.
    expect(sent[4]!.content).toMatch(
      /^Continue the task where you left off\. \(It was interrupted: the (server|Cairn instance) running it /,
    );
    expect(sent[4]!.content).not.toMatch(/restart/);
    expect(fake.requests.every((r) => r.problems.length === 0)).toBe(true);
    // The repair is persisted: the stored history is whole again.
    const stored = (await current.server.inject({ url: `/sessions/${session.id}/messages` })).json()
      .messages as WireMessage[];
    expect(stored.filter((m) => m.tool_call_id === 'call_lost1')).toHaveLength(1);

    const again = await current.server.inject({
      method: 'POST',
      url: `/tasks/${row.id}/resume`,
    });
    expect(again.statusCode).toBe(409);
    expect(again.json().error.code).toBe('TASK_NOT_WAITING');
  });

  it('an interrupted task resumed with a message gets that message as its next input', async () => {
    let current = await restart();
    const session = await current.sessions.create({ agentName: 'asker', mode: 'task' });
    await current.store.appendMessages(session.id, [{ role: 'user', content: 'Plan a trip.' }]);
    const row = await current.store.createTask({
      sessionId: session.id,
      agentName: 'asker',
      input: 'Plan a trip.',
    });
    current = await restart();
    expect((await current.tasks.getTask(row.id)).status).toBe('interrupted');

    fake.script({ content: 'A trip to Porto.' });
    const res = await current.server.inject({
      method: 'POST',
      url: `/tasks/${row.id}/resume?wait=true`,
      payload: { answer: 'Somewhere by the sea.' },
    });
    expect(res.json().task).toMatchObject({ status: 'completed', result: 'A trip to Porto.' });
    const sent = fake.requests.at(-1)!.body.messages as WireMessage[];
    expect(sent.at(-1)).toEqual({ role: 'user', content: 'Somewhere by the sea.' });
    expect(fake.requests.every((r) => r.problems.length === 0)).toBe(true);
  });

  it('an interrupted task can be cancelled, and its session then takes chats', async () => {
    let current = await restart();
    const session = await current.sessions.create({ agentName: 'asker', mode: 'task' });
    await current.store.appendMessages(session.id, [{ role: 'user', content: 'Start.' }]);
    const row = await current.store.createTask({
      sessionId: session.id,
      agentName: 'asker',
      input: 'Start.',
    });
    current = await restart();
    const res = await current.server.inject({ method: 'POST', url: `/tasks/${row.id}/cancel` });
    expect(res.json().task).toMatchObject({ id: row.id, status: 'cancelled' });
    fake.script({ content: 'Hello again.' });
    const chat = await current.server.inject({
      method: 'POST',
      url: '/agents/asker/chat',
      payload: { message: 'Hi', sessionId: session.id },
    });
    expect(chat.statusCode).toBe(200);
    expect(fake.requests.every((r) => r.problems.length === 0)).toBe(true);
  });
});

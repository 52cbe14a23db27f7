/**
 * What a resume tells the model about why its task stopped, and what an A2A
 * peer reads, say what really happened: a task a peer swept because its
 * instance stopped heartbeating (a crash, or a pause: SIGSTOP, a long GC) was
 * not "interrupted by a server restart". Through the real app on a SQLite
 * file, with the store's own sweeps, against the fake model.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { taskStatus } from '../../src/a2a/task-view.js';
import type { TaskRow } from '../../src/store/store.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

describe('the words a resumed interrupted task is given', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ agents: { assistant: TEST_AGENT } });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  /** A task left `running` (as a dead or paused instance leaves it), then `interrupt`ed by a sweep. */
  async function interruptedTask(interrupt: () => Promise<number>): Promise<TaskRow> {
    const session = await t.app.sessions.create({ agentName: 'assistant', mode: 'task' });
    await t.app.store.appendMessages(session.id, [{ role: 'user', content: 'Count the files.' }]);
    const row = await t.app.store.createTask({
      sessionId: session.id,
      agentName: 'assistant',
      input: 'Count the files.',
    });
    expect(await interrupt()).toBe(1);
    const task = (await t.app.store.findTask(row.id))!;
    expect(task.status).toBe('interrupted');
    return task;
  }

  /** Resumes `task` without a message of its own; the text the model was sent for it. */
  async function resumePrompt(task: TaskRow): Promise<string> {
    t.fake!.script({ content: 'There are 3 files.' });
    const res = await t.app.server.inject({
      method: 'POST',
      url: `/tasks/${task.id}/resume?wait=true`,
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().task).toMatchObject({ status: 'completed' });
    const sent = t.fake!.requests.at(-1)!.body.messages as { role: string; content: string }[];
    return sent.at(-1)!.content;
  }

  it('a task swept from an instance that stopped heartbeating (a pause) says so, not a restart', async () => {
    const task = await interruptedTask(() =>
      t.app.store.interruptOrphanedTasks({ self: 'inst_peer', staleAfterMs: 60_000 }),
    );
    expect(task.error).toMatch(/stopped answering \(shut down, crashed or paused\)/);
    expect(task.error).not.toMatch(/server stopped|restart/);
    const said = JSON.stringify(taskStatus(task).message?.parts);
    expect(said).toMatch(/instance running it went away or stopped answering/);
    expect(said).not.toMatch(/restart/);

    const prompt = await resumePrompt(task);
    expect(prompt).toMatch(/^Continue the task where you left off\./);
    expect(prompt).toMatch(/instance running it went away or stopped answering/);
    expect(prompt).not.toMatch(/restart/);
  });

  it('a task its own server stopped on says the server stopped', async () => {
    const task = await interruptedTask(() => t.app.store.interruptRunningTasks());
    const prompt = await resumePrompt(task);
    expect(prompt).toMatch(/interrupted: the server running it stopped;/);
  });

  it('a task a database outage cut short names the error it stopped on', async () => {
    const task = await interruptedTask(async () => {
      const running = (await t.app.store.listTasks({ status: 'running', limit: 10 })).items;
      for (const row of running)
        await t.app.store.transitionTask(row.id, ['running'], {
          status: 'interrupted',
          error: 'DATABASE_UNAVAILABLE: The database is unreachable.',
        });
      return running.length;
    });
    const prompt = await resumePrompt(task);
    expect(prompt).toMatch(/cut short \(DATABASE_UNAVAILABLE: The database is unreachable\.\)/);
    expect(prompt).not.toMatch(/restart/);
  });
});

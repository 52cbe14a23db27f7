/**
 * A task that stops for approval is recorded as waiting before its session's
 * slot is released. A chat sent to the same session meanwhile queues behind
 * the task and then gets 409 TASK_WAITING: it never slips in between, stores
 * an "interrupted" result for the call the task waits on, and leaves the task
 * waiting on a call that already has a result (approving it would then store
 * a second one).
 *
 * The first test holds the slot's release with a wrapped lock (a seam, not a
 * timing) and looks at the task's row at that moment; the second races a task
 * and a chat over HTTP many times and checks what each round left.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { SessionLock } from '../../src/runtime/session-lock.js';
import type { StoredMessage } from '../../src/llm/messages.js';
import type { TaskRow, TaskStatus } from '../../src/store/store.js';
import { DATABASES, startTestApp, type TestApp } from '../helpers/test-app.js';

/** A side-effecting tool: appends one line per run to calls.log next to it. */
const DELETE_TOOL = `import { appendFileSync } from 'node:fs';
export default {
  name: 'delete_file',
  description: 'Deletes a file.',
  parameters: {
    type: 'object',
    properties: { path: { type: 'string' } },
    required: ['path'],
    additionalProperties: false,
  },
  async run(args) {
    appendFileSync(new URL('./calls.log', import.meta.url), args.path + '\\n');
    return 'deleted ' + args.path;
  },
};
`;

const GUARDED = {
  name: 'guarded',
  description: 'Acts only with approval',
  system: 'You delete files when asked.',
  tools: [{ tool: './tools/delete.js', approval: 'required' }],
  maxIterations: 6,
};

/** Called as a piece of slot work on a session has finished, before the slot is released. */
type BeforeRelease = (sessionId: string) => Promise<void>;

/** The sessions' lock, with a hook between the end of each piece of work and its release. */
function holdingRelease(lock: SessionLock, hook: () => BeforeRelease | undefined): SessionLock {
  return {
    run: (sessionId, work) =>
      lock.run(sessionId, async (signal, tenure) => {
        const result = await work(signal, tenure);
        await hook()?.(sessionId);
        return result;
      }),
    isBusy: (sessionId) => lock.isBusy(sessionId),
    get size() {
      return lock.size;
    },
    drain: () => lock.drain(),
  };
}

describe.each(DATABASES)('a task waiting for approval, against a chat (%s)', (database) => {
  let t: TestApp;
  let beforeRelease: BeforeRelease | undefined;

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: { guarded: GUARDED },
      files: { 'agents/guarded/tools/delete.js': DELETE_TOOL },
      app: { decorateSessionLock: (lock) => holdingRelease(lock, () => beforeRelease) },
    });
  });
  afterAll(async () => t?.close());
  beforeEach(() => {
    beforeRelease = undefined;
    t.fake!.reset();
    // A request whose last message asks to delete calls the guarded tool; anything else is answered.
    t.fake!.setDefault((body: { messages: { role: string; content: string | null }[] }) => {
      const last = body.messages.at(-1)!;
      return last.role === 'user' && (last.content ?? '').startsWith('Delete ')
        ? {
            tool_calls: [
              { name: 'delete_file', arguments: JSON.stringify({ path: last.content!.slice(7) }) },
            ],
          }
        : { content: `Answered: ${last.content ?? ''}` };
    });
  });

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });

  async function newSession(): Promise<string> {
    const res = await inject('POST', '/sessions', { agentName: 'guarded' });
    expect(res.statusCode, res.body).toBe(201);
    return res.json<{ session: { id: string } }>().session.id;
  }

  async function messages(sessionId: string): Promise<StoredMessage[]> {
    return t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 200 });
  }

  /** How many results the session holds for each tool call id. */
  function resultsPerCall(stored: readonly StoredMessage[]): Map<string, number> {
    const counts = new Map<string, number>();
    for (const m of stored) {
      if (m.role === 'tool' && m.tool_call_id)
        counts.set(m.tool_call_id, (counts.get(m.tool_call_id) ?? 0) + 1);
    }
    return counts;
  }

  function runs(): string[] {
    try {
      return readFileSync(join(t.home, 'agents/guarded/tools/calls.log'), 'utf8')
        .split('\n')
        .filter(Boolean);
    } catch {
      return [];
    }
  }

  it('is waiting before the slot is released, so a chat queued behind it gets 409 TASK_WAITING', async () => {
    const sessionId = await newSession();
    let statusAtRelease: TaskStatus | undefined;
    let chat: ReturnType<typeof inject> | undefined;
    beforeRelease = async (id) => {
      if (id !== sessionId || chat) return;
      const tasks = await t.app.store.listTasks({ sessionId, limit: 10 });
      statusAtRelease = tasks.items[0]?.status;
      // Sent while the task still holds the slot: it queues behind it.
      chat = inject('POST', '/agents/guarded/chat', { sessionId, message: 'Hello?' });
      await expect.poll(() => t.app.engine.isBusy(sessionId)).toBe(true);
    };
    const started = await inject('POST', '/agents/guarded/tasks', {
      sessionId,
      input: 'Delete /tmp/slot.txt',
    });
    expect(started.statusCode, started.body).toBe(201);
    const { id: taskId } = started.json<{ task: TaskRow }>().task;
    await t.app.tasks.wait(taskId);
    expect(statusAtRelease).toBe('waiting');

    const answered = await chat!;
    expect(answered.statusCode, answered.body).toBe(409);
    expect(answered.json()).toMatchObject({ error: { code: 'TASK_WAITING' } });

    const waiting = await t.app.tasks.getTask(taskId);
    expect(waiting).toMatchObject({ status: 'waiting', pending_tool: 'delete_file' });
    // Nothing answered the call the task waits on.
    expect(resultsPerCall(await messages(sessionId)).get(waiting.pending_call_id!)).toBeUndefined();

    const before = runs().length;
    const approved = await inject('POST', `/tasks/${taskId}/approve?wait=true`);
    expect(approved.statusCode, approved.body).toBe(200);
    expect(approved.json<{ task: TaskRow }>().task.status).toBe('completed');
    expect(runs()).toHaveLength(before + 1);
    expect(resultsPerCall(await messages(sessionId)).get(waiting.pending_call_id!)).toBe(1);
  });

  it('raced against a chat over HTTP, never leaves a call answered twice or a wait on an answered call', async () => {
    for (let round = 0; round < 12; round++) {
      const sessionId = await newSession();
      const [started, chat] = await Promise.all([
        inject('POST', '/agents/guarded/tasks', { sessionId, input: `Delete /tmp/race-${round}` }),
        inject('POST', '/agents/guarded/chat', { sessionId, message: `Hello ${round}` }),
      ]);
      expect(started.statusCode, started.body).toBe(201);
      const { id: taskId } = started.json<{ task: TaskRow }>().task;
      const task = await t.app.tasks.wait(taskId);
      // The chat ran before the task took the slot, or found it waiting.
      if (chat.statusCode !== 200) {
        expect(chat.statusCode, chat.body).toBe(409);
        expect(chat.json()).toMatchObject({ error: { code: 'TASK_WAITING' } });
      }
      expect(task.status).toBe('waiting');
      const counts = resultsPerCall(await messages(sessionId));
      expect(counts.get(task.pending_call_id!), `round ${round}`).toBeUndefined();
      for (const [callId, count] of counts) expect(count, `${callId}, round ${round}`).toBe(1);

      const approved = await inject('POST', `/tasks/${taskId}/approve?wait=true`);
      expect(approved.statusCode, approved.body).toBe(200);
      expect(resultsPerCall(await messages(sessionId)).get(task.pending_call_id!)).toBe(1);
    }
  });
});

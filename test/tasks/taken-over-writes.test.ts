/**
 * A task run that a peer took over (it marked the task `interrupted` while
 * this instance was paused or cut off) writes nothing more: not the
 * automatic compaction it was computing, not the memory note its tool was
 * about to save. Each case runs once untouched first, so the test is known to
 * reach the write it then watches being refused — through the real app, on
 * a SQLite file, against the fake model.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import type { TaskRow } from '../../src/store/store.js';
import {
  PATIENT_MS,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { isSummaryRequest, summaryRequestsOf } from '../compaction/summary-requests.js';

const CONTEXT_WINDOW = 4_096;

/** About 3 000 tokens of earlier conversation: over half the window before the task's turn. */
function history(): ChatMessage[] {
  return Array.from({ length: 6 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `${i % 2 === 0 ? 'question' : 'answer'} ${i} ${'word '.repeat(500)}`.trim(),
  }));
}

const SAVE_NOTE = {
  tool_calls: [
    {
      name: 'memory_save',
      arguments: JSON.stringify({ key: 'city', content: 'The user lives in Oslo.' }),
    },
  ],
};

describe('writes of a task run that was taken over', () => {
  let t: TestApp;
  /** Runs once when the run reaches the point a peer takes it over at. */
  let takeOver: (() => void) | undefined;

  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        assistant: {
          ...TEST_AGENT,
          tools: [...TEST_AGENT.tools, 'memory'],
          defaultCompaction: { autoThreshold: 50 },
        },
      },
      mainModel: { contextWindow: CONTEXT_WINDOW, timeoutMs: PATIENT_MS },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    takeOver = undefined;
  });

  /** What a peer's sweep does to a run it believes dead. */
  const peerInterrupts = (): void => {
    void t.app.store.interruptRunningTasks();
  };

  async function runTask(sessionId: string | undefined, input: string): Promise<TaskRow> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/tasks?wait=true',
      payload: { input, ...(sessionId ? { sessionId } : {}) },
    });
    expect(res.statusCode, res.body).toBe(201);
    return (await t.app.store.findTask(res.json().task.id as string))!;
  }

  function answerWith(reply: (body: { messages: ChatMessage[] }) => object): void {
    t.fake!.setDefault((body: { messages: ChatMessage[] }) => {
      if (isSummaryRequest(body)) {
        takeOver?.();
        takeOver = undefined;
        return { content: 'SUMMARY: the user asked six long questions.' };
      }
      return reply(body);
    });
  }

  it('an automatic compaction computed for a run taken over is not committed, and the run stops', async () => {
    answerWith(() => ({ content: 'done' }));
    const untouched = await seedSession(t.app, history());
    const first = await runTask(untouched, 'carry on');
    expect(first.error).toBeNull();
    expect(first.status).toBe('completed');
    expect((await t.app.store.findSession(untouched))!.compaction_count).toBe(1);

    t.fake!.reset();
    answerWith(() => ({ content: 'done' }));
    const id = await seedSession(t.app, history());
    takeOver = peerInterrupts;
    const task = await runTask(id, 'carry on');

    expect(task.status).toBe('interrupted');
    expect(summaryRequestsOf(t.fake!)).toHaveLength(1);
    // No model call after the summary: the run stopped there.
    expect(isSummaryRequest(t.fake!.requests.at(-1)!.body as never)).toBe(true);
    const session = (await t.app.store.findSession(id))!;
    expect(session).toMatchObject({
      compaction_count: 0,
      compact_size: 0,
      compaction_suspended: 0,
    });
    expect(await t.app.store.listCompactions(id)).toEqual([]);
    const stored = await t.app.store.listMessages(id, { afterSeq: 0, limit: 100 });
    expect(stored.map((m) => m.content)).not.toContain('done');
  });

  it('a memory note a run taken over was about to save is not saved', async () => {
    let step = 0;
    answerWith(() => (++step % 2 === 1 ? SAVE_NOTE : { content: 'noted' }));
    const first = await runTask(undefined, 'remember my city');
    expect(first.error).toBeNull();
    expect(first.status).toBe('completed');
    expect((await t.app.store.listMemory('assistant')).map((n) => n.key)).toEqual(['city']);
    await t.app.store.deleteMemory('assistant', 'city');

    // The peer takes over between the stored tool call and the tool's own write.
    // The first assistant message of the run is its call to memory_save.
    const subscription = t.app.events.subscribe((event) => {
      if (event.type === 'message.created' && event.data.role === 'assistant') peerInterrupts();
    });
    await subscription.live;
    try {
      step = 0;
      const task = await runTask(undefined, 'remember my city');
      expect(task.status).toBe('interrupted');
    } finally {
      subscription.close();
    }
    expect(await t.app.store.listMemory('assistant')).toEqual([]);
  });
});

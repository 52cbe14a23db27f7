/**
 * The headline promise, end to end: whatever a session goes through — chats
 * with text, parallel tool calls and ask_user, manual compactions (real and
 * dry runs), undos, resets, tasks that wait and are answered or cancelled,
 * and automatic compaction on a small window — Cairn never sends a request a
 * provider would reject. fast-check drives random sequences of API calls
 * through the real app; the fake model rejects any request that breaks the
 * OpenAPI schema or the providers' sequence rules.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FakeReply } from '../fakes/llm-server.js';
import { validateChatRequest } from '../fakes/openai-request-validator.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { isSummaryRequest } from './summary-requests.js';

const AGENT = {
  ...TEST_AGENT,
  tools: ['current_time', 'history_search', 'ask_user'],
  maxIterations: 8,
  defaultCompaction: { autoThreshold: 40, maxSummaryChars: 600 },
};

type Reply = { type: 'text'; words: number } | { type: 'tools'; count: number } | { type: 'ask' };

type Action =
  | { kind: 'chat'; words: number; reply: Reply }
  | { kind: 'compact'; dryRun: boolean }
  | { kind: 'undo' }
  | { kind: 'reset' }
  | { kind: 'task'; answer: boolean };

const replyArb: fc.Arbitrary<Reply> = fc.oneof(
  fc.record({ type: fc.constant('text' as const), words: fc.integer({ min: 1, max: 120 }) }),
  fc.record({ type: fc.constant('tools' as const), count: fc.integer({ min: 1, max: 3 }) }),
  fc.constant({ type: 'ask' as const }),
);

const actionArb: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('chat' as const),
      words: fc.integer({ min: 1, max: 200 }),
      reply: replyArb,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('compact' as const), dryRun: fc.boolean() }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'undo' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'reset' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('task' as const), answer: fc.boolean() }) },
);

const text = (words: number, tag: string): string => `${tag} ${'lorem '.repeat(words)}`.trim();

/** The main model's replies for one reply kind (tool calls are followed by a text answer). */
function mainReplies(reply: Reply, tag: string): FakeReply[] {
  switch (reply.type) {
    case 'text':
      return [{ content: text(reply.words, tag) }];
    case 'tools':
      return [
        {
          tool_calls: Array.from({ length: reply.count }, () => ({
            name: 'current_time',
            arguments: '{}',
          })),
        },
        { content: `${tag} done` },
      ];
    case 'ask':
      return [
        { tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: `${tag}?` }) }] },
      ];
  }
}

describe('no sequence of API calls makes Cairn send an invalid request', () => {
  let t: TestApp;
  /** Replies for the agent's own calls; summary calls are answered separately. */
  const queue: FakeReply[] = [];

  beforeAll(async () => {
    t = await startTestApp({ agents: { assistant: AGENT }, mainModel: { contextWindow: 1_500 } });
    t.fake!.setDefault((body: { messages?: { role: string; content: unknown }[] }) =>
      isSummaryRequest(body)
        ? { content: 'Summary: facts so far.' }
        : (queue.shift() ?? { content: 'ok' }),
    );
  });
  afterAll(async () => t.close());

  const post = (url: string, payload?: Record<string, unknown>) =>
    t.app.server.inject({ method: 'POST', url, ...(payload ? { payload } : {}) });

  async function run(sessionId: string, action: Action, step: number): Promise<void> {
    const tag = `s${step}`;
    switch (action.kind) {
      case 'chat': {
        queue.push(...mainReplies(action.reply, tag));
        const res = await post('/agents/assistant/chat', {
          message: text(action.words, tag),
          sessionId,
        });
        expect(res.statusCode, res.body).toBe(200);
        break;
      }
      case 'compact': {
        const res = await post(
          `/sessions/${sessionId}/compact`,
          action.dryRun ? { dryRun: true } : undefined,
        );
        expect(res.statusCode, res.body).toBe(200);
        break;
      }
      case 'undo': {
        const res = await post(`/sessions/${sessionId}/compact/undo`);
        expect([200, 409], res.body).toContain(res.statusCode);
        break;
      }
      case 'reset': {
        const res = await post(`/sessions/${sessionId}/reset`);
        expect(res.statusCode, res.body).toBe(200);
        break;
      }
      case 'task': {
        queue.push(...mainReplies({ type: 'ask' }, tag));
        const started = await post('/agents/assistant/tasks?wait=true', {
          input: text(20, tag),
          sessionId,
        });
        expect(started.statusCode, started.body).toBe(201);
        const task = started.json().task as { id: string; status: string };
        expect(task.status).toBe('waiting');
        if (action.answer) {
          queue.push({ content: `${tag} answered` });
          const resumed = await post(`/tasks/${task.id}/resume?wait=true`, {
            answer: `${tag} yes`,
          });
          expect(resumed.json().task.status).toBe('completed');
        } else {
          const cancelled = await post(`/tasks/${task.id}/cancel`);
          expect(cancelled.json().task.status).toBe('cancelled');
        }
        break;
      }
    }
  }

  it('every request the model received was valid, and so is the next context', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.double({ min: 1, max: 99, noNaN: true }),
        fc.array(actionArb, { minLength: 3, maxLength: 12 }),
        async (compactCount, actions) => {
          t.fake!.requests.length = 0;
          queue.length = 0;
          const created = await post('/sessions', { agentName: 'assistant', compactCount });
          expect(created.statusCode).toBe(201);
          const sessionId = created.json().session.id as string;
          let step = 0;
          for (const action of actions) await run(sessionId, action, step++);

          for (const request of t.fake!.requests) expect(request.problems).toEqual([]);
          const context = await t.app.server.inject({ url: `/sessions/${sessionId}/context` });
          const messages = context.json().messages as { role: string }[];
          if (messages.some((m) => m.role !== 'system')) {
            expect(validateChatRequest({ model: 'test-model', messages })).toEqual([]);
          }
          const session = (await t.app.store.findSession(sessionId))!;
          const stored = await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 10_000 });
          // The cut itself never needs repair: the raw tail after the pointer reaches the
          // model whole, role for role (the normaliser had nothing to drop or invent).
          const tail = stored.filter((m) => m.role !== 'system' && m.seq > session.compact_seq);
          if (tail.length > 0) {
            expect(messages.slice(-tail.length).map((m) => m.role)).toEqual(
              tail.map((m) => m.role),
            );
          }
          expect(session.compact_size).toBeLessThanOrEqual(
            stored.filter((m) => m.role !== 'system').length,
          );
        },
      ),
      { numRuns: 60 },
    );
    // The runs did exercise what they claim to: both kinds of compaction happened.
    const events = await t.app.store.listEvents({ afterId: 0, limit: 100_000 });
    const compacted = events.filter((e) => e.type === 'context.defaultCompacted');
    expect(compacted.some((e) => e.data.trigger === 'auto')).toBe(true);
    expect(compacted.some((e) => e.data.trigger === 'manual')).toBe(true);
  }, 120_000);
});

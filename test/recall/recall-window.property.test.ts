/**
 * With automatic recall on, random conversations (facts and chatter from a
 * small vocabulary, so searches match), manual and automatic compactions
 * never make Cairn send a request the provider rejects: none is malformed,
 * and none is over the model's window, recalled block included.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { RECALL_OPEN } from '../../src/recall/recall-block.js';
import { estimatePromptTokens } from '../fakes/llm-server.js';
import { agentRequestsOf, isSummaryRequest } from '../compaction/summary-requests.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const WINDOW = 1_600;
const WORDS = `marina locker code gate alarm budget roof cedar steel caretaker invoice harbor
  bakery studio ticket deploy server release meeting friday report garden window`
  .split(/\s+/)
  .filter((w) => w !== '');

type Action = { kind: 'chat'; words: number[]; reply: number } | { kind: 'compact' };

const actionArb: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('chat' as const),
      words: fc.array(fc.integer({ min: 0, max: WORDS.length - 1 }), {
        minLength: 1,
        maxLength: 200,
      }),
      reply: fc.integer({ min: 1, max: 60 }),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'compact' as const }) },
);

describe('recall never pushes a request over the window', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        assistant: {
          ...TEST_AGENT,
          tools: [],
          defaultCompaction: {
            autoThreshold: 80,
            maxSummaryChars: 800,
            recall: { minScore: 0.25 },
          },
        },
      },
      mainModel: { contextWindow: WINDOW },
      fakeOptions: { contextWindowTokens: WINDOW },
    });
    t.fake!.setDefault((body: { messages?: { role: string; content: unknown }[] }) => {
      if (isSummaryRequest(body)) return { content: 'Summary: the marina and the budget.' };
      return { content: `${'noted '.repeat(20)}marina budget` };
    });
  });
  afterAll(async () => t.close());

  it('every request is valid and within the window, and some carried recalled messages', async () => {
    let recalled = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(actionArb, { minLength: 10, maxLength: 30 }), async (actions) => {
        t.fake!.requests.length = 0;
        const created = await t.app.server.inject({
          method: 'POST',
          url: '/sessions',
          payload: { agentName: 'assistant' },
        });
        const sessionId = created.json().session.id as string;
        for (const action of actions) {
          const res =
            action.kind === 'chat'
              ? await t.app.server.inject({
                  method: 'POST',
                  url: '/agents/assistant/chat',
                  payload: { message: action.words.map((i) => WORDS[i]).join(' '), sessionId },
                })
              : await t.app.server.inject({
                  method: 'POST',
                  url: `/sessions/${sessionId}/compact`,
                });
          expect(res.statusCode, res.body).toBe(200);
        }
        for (const request of t.fake!.requests) {
          expect(request.problems).toEqual([]);
          expect(estimatePromptTokens(request.body)).toBeLessThanOrEqual(WINDOW);
        }
        recalled += agentRequestsOf(t.fake!).filter((r) =>
          (r.body.messages as { content: string | null }[]).some((m) =>
            (m.content ?? '').startsWith(RECALL_OPEN),
          ),
        ).length;
      }),
      { numRuns: 25 },
    );
    expect(recalled).toBeGreaterThan(0);
  }, 120_000);
});

describe('near the window, the recalled block shrinks to the room left', () => {
  const TIGHT = 3_000;
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      // Automatic compaction off: this is about recall's own room near the
      // window (90 % of it with compaction off), not about compacting first.
      agents: { assistant: { ...TEST_AGENT, tools: [], defaultCompaction: { autoThreshold: 0 } } },
      mainModel: { contextWindow: TIGHT },
      fakeOptions: { contextWindowTokens: TIGHT },
    });
    t.fake!.setDefault((body) =>
      isSummaryRequest(body) ? { content: 'Summary.' } : { content: 'ok' },
    );
  });
  afterAll(async () => t.close());

  it('recalls less than maxTokens, and the request stays within the window', async () => {
    const facts = Array.from({ length: 10 }, (_, i): ChatMessage => ({
      role: i % 2 === 0 ? 'user' : 'assistant',
      content: `The marina locker ${i} holds ${'spare parts and ropes, '.repeat(30)}`,
    }));
    const created = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'assistant', compactCount: 99 },
    });
    const id = created.json().session.id as string;
    await t.app.store.appendMessages(id, facts);
    await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    // With the facts the summariser could not take, a raw tail of about 2 000 tokens:
    // room for a few hundred more.
    await t.app.store.appendMessages(
      id,
      Array.from({ length: 10 }, (_, i): ChatMessage => ({
        role: i % 2 === 0 ? 'user' : 'assistant',
        content: `Chatter ${i}: ${'about the weather and lunch, '.repeat(20)}`,
      })),
    );
    t.fake!.requests.length = 0;
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'Which marina locker holds the ropes?', sessionId: id },
    });
    expect(res.statusCode, res.body).toBe(200);
    const recall = res.json().recall as { tokens: number; seqs: number[] };
    expect(recall.seqs.length).toBeGreaterThan(0);
    expect(recall.tokens).toBeLessThan(1_200);
    expect(t.fake!.requests).toHaveLength(1);
    expect(estimatePromptTokens(t.fake!.requests[0]!.body)).toBeLessThanOrEqual(TIGHT);
  });
});

/**
 * Automatic compaction is on for an agent that sets nothing (autoThreshold 80
 * when absent), and no request Cairn sends is larger than the model's context
 * window: against a fake that refuses oversized requests with OpenAI's 400
 * `context_length_exceeded`, a long conversation never meets that 400, and a
 * turn that alone cannot fit ends with CONTEXT_OVERFLOW without a request.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { estimateMessagesTokens, estimateTextTokens } from '../../src/llm/tokens.js';
import {
  estimatePromptTokens,
  requestedOutputTokens,
  type RecordedRequest,
} from '../fakes/llm-server.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

const WINDOW = 3_000;
const TURNS = 40;

/** About 150 tokens of ordinary words, different every turn. */
function userText(turn: number): string {
  const words: string[] = [];
  for (let i = 0; words.join(' ').length < 600; i++) words.push(`word${turn}x${i} plain`);
  return `Turn ${turn}: ${words.join(' ')}`;
}

/** Cairn's estimate of a request as the fake received it (messages, tools and requested output). */
function cairnEstimate(request: RecordedRequest): number {
  const body = request.body as { messages: ChatMessage[]; tools?: unknown[] };
  let tokens = estimateMessagesTokens(body.messages);
  for (const tool of body.tools ?? []) tokens += estimateTextTokens(JSON.stringify(tool)) + 3;
  return tokens + requestedOutputTokens(body);
}

describe('compaction on by default, and never a request over the window', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  async function start(agent: Record<string, unknown>): Promise<TestApp> {
    t = await startTestApp({
      agents: { assistant: agent },
      mainModel: { contextWindow: WINDOW },
      fakeOptions: { contextWindowTokens: WINDOW },
    });
    t.fake!.setDefault((body: { messages?: { role: string; content: unknown }[] }) =>
      isSummaryRequest(body)
        ? { content: '## Goal\nKeep talking.\n## Facts and figures\n- many turns so far' }
        : { content: 'Noted.' },
    );
    return t;
  }

  async function converse(app: TestApp, turns: number): Promise<string> {
    let sessionId: string | undefined;
    for (let turn = 0; turn < turns; turn++) {
      const res = await app.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: { message: userText(turn), ...(sessionId ? { sessionId } : {}) },
      });
      expect(res.statusCode, res.body).toBe(200);
      sessionId = res.json<{ sessionId: string }>().sessionId;
    }
    return sessionId!;
  }

  it('an agent with no defaultCompaction compacts, and every request fits the window', async () => {
    const app = await start(TEST_AGENT);
    const sessionId = await converse(app, TURNS);

    const session = (
      await app.app.server.inject({ method: 'GET', url: `/sessions/${sessionId}` })
    ).json<{ session: { compaction_count: number } }>().session;
    expect(session.compaction_count).toBeGreaterThan(0);
    const compactions = (
      await app.app.server.inject({ method: 'GET', url: `/sessions/${sessionId}/compactions` })
    ).json<{ compactions: { trigger: string }[] }>().compactions;
    expect(compactions.length).toBeGreaterThan(0);
    // Prepared off the turn from 60 % by default, or on the turn at 80 %.
    expect(compactions.every((c) => c.trigger === 'auto' || c.trigger === 'background')).toBe(true);

    // The fake refused nothing, and by Cairn's own estimate nothing was over the window.
    const requests = app.fake!.requests;
    expect(agentRequestsOf(app.fake!)).toHaveLength(TURNS);
    expect(summaryRequestsOf(app.fake!).length).toBe(compactions.length);
    for (const request of requests) {
      expect(request.problems).toEqual([]);
      expect(cairnEstimate(request)).toBeLessThanOrEqual(WINDOW);
      expect(
        estimatePromptTokens(request.body) + requestedOutputTokens(request.body),
      ).toBeLessThanOrEqual(WINDOW);
    }
    // The last agent request stayed under the threshold the agent never set
    // (80 %), in the provider's count, which is what the guard reads back.
    const last = agentRequestsOf(app.fake!).at(-1)!;
    expect(estimatePromptTokens(last.body)).toBeLessThan(WINDOW * 0.8);
  });

  it('autoThreshold 0 turns automatic compaction off, and still no request is over the window', async () => {
    const app = await start({ ...TEST_AGENT, defaultCompaction: { autoThreshold: 0 } });
    const sessionId = await converse(app, TURNS);

    const agentRequests = agentRequestsOf(app.fake!);
    // Every turn got its answer with one agent request: nothing was sent and refused.
    expect(agentRequests).toHaveLength(TURNS);
    for (const request of app.fake!.requests) {
      expect(cairnEstimate(request)).toBeLessThanOrEqual(WINDOW);
    }
    // Off means no compaction until a request would not fit: then the overflow
    // recovery compacts (trigger auto) instead of sending it. Before the first
    // time the window filled, no summary was asked for.
    const firstSummary = app.fake!.requests.findIndex((r) => isSummaryRequest(r.body));
    expect(firstSummary).toBeGreaterThan(0);
    const before = app.fake!.requests[firstSummary - 1]!;
    expect(cairnEstimate(before)).toBeGreaterThan(WINDOW * 0.8);
    const compactions = (
      await app.app.server.inject({ method: 'GET', url: `/sessions/${sessionId}/compactions` })
    ).json<{ compactions: unknown[] }>().compactions;
    expect(compactions.length).toBeGreaterThan(0);
  });

  it('a turn that alone cannot fit ends with CONTEXT_OVERFLOW and sends nothing', async () => {
    const app = await start(TEST_AGENT);
    // Plain words: some 1.3 tokens each for Cairn's tokenizer, far over 3 000 in all.
    const huge = Array.from({ length: 4_000 }, (_, i) => `item${i}`).join(' ');
    const res = await app.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: huge },
    });
    expect(res.statusCode).toBe(400);
    const error = res.json<{ error: { code: string; message: string } }>().error;
    expect(error.code).toBe('CONTEXT_OVERFLOW');
    expect(error.message).toMatch(/context window/);
    expect(app.fake!.requests).toHaveLength(0);

    // The session is still usable for a turn that fits.
    const sessions = (
      await app.app.server.inject({ method: 'GET', url: '/sessions?agentName=assistant' })
    ).json<{ sessions: { id: string }[] }>().sessions;
    const next = await app.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'a short question', sessionId: sessions[0]!.id },
    });
    // The oversized message is stored before the turn: it is folded away (or
    // summarised for the call) so the short question still fits.
    expect(next.statusCode, next.body).toBe(200);
    for (const request of app.fake!.requests) {
      expect(cairnEstimate(request)).toBeLessThanOrEqual(WINDOW);
    }
  });
});

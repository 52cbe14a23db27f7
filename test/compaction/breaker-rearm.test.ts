/**
 * One oversized first message must not suspend automatic
 * compaction for good. Window 4096, threshold 80 %, a ~3.4k-token first
 * message: on that first turn nothing before the running turn can be
 * compacted, and later turns must still compact once there is something
 * before them — through the real HTTP app and the fake model.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { estimateMessagesTokens } from '../../src/llm/tokens.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

const CONTEXT_WINDOW = 4_096;
const AUTO_THRESHOLD = 80;
const LIMIT_TOKENS = (CONTEXT_WINDOW * AUTO_THRESHOLD) / 100;

describe('the auto-compaction breaker after an oversized first message', () => {
  let t: TestApp;
  let summaryNumber = 0;

  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        // Compactions on the turn only: a summary prepared after the first turn would fold it.
        assistant: {
          ...TEST_AGENT,
          defaultCompaction: { autoThreshold: AUTO_THRESHOLD, prepareAt: 0 },
        },
      },
      mainModel: { contextWindow: CONTEXT_WINDOW },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    t.fake!.setDefault((body: { messages: ChatMessage[] }) =>
      isSummaryRequest(body)
        ? { content: `SUMMARY-${++summaryNumber}` }
        : {
            content: 'ok',
            // Usage as a provider reports it: here Cairn's own estimate of the prompt.
            usage: { prompt_tokens: estimateMessagesTokens(body.messages), completion_tokens: 2 },
          },
    );
  });

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });

  it('re-arms once there is something before the running turn to compact', async () => {
    const first = `first ${'word '.repeat(3_400)}`.trim();
    const opened = await inject('POST', '/agents/assistant/chat', { message: first });
    expect(opened.statusCode, opened.body).toBe(200);
    const id = opened.json().sessionId as string;
    // Over the threshold on its own, and nothing before it: no summary, no suspension.
    const context1 = (await inject('GET', `/sessions/${id}/context`)).json();
    expect(context1.tokens.total).toBeGreaterThanOrEqual(LIMIT_TOKENS);
    expect(summaryRequestsOf(t.fake!)).toHaveLength(0);
    expect((await inject('GET', `/sessions/${id}`)).json().session.compaction_suspended).toBe(0);

    for (let turn = 2; turn <= 11; turn++) {
      const res = await inject('POST', '/agents/assistant/chat', {
        message: `turn ${turn}`,
        sessionId: id,
      });
      expect(res.statusCode, res.body).toBe(200);
    }

    const session = (await inject('GET', `/sessions/${id}`)).json().session;
    expect(session.compaction_count).toBeGreaterThanOrEqual(1);
    expect(session.compaction_suspended).toBe(0);
    // The oversized message is behind the pointer now.
    expect(session.compact_seq).toBeGreaterThanOrEqual(2);
    const context = (await inject('GET', `/sessions/${id}/context`)).json();
    expect(context.tokens.total).toBeLessThan(LIMIT_TOKENS);
    const events = await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 1_000 });
    expect(events.filter((e) => e.type === 'context.compactionSuspended')).toEqual([]);
    for (const r of t.fake!.requests) expect(r.problems).toEqual([]);
  });
});

/**
 * Compaction cost: the token usage of each summary call on its
 * compaction row, summed on the session row, in the manual compaction result
 * and in the chat envelope's `compaction`; a reset zeroes the sums.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import {
  PATIENT_MS,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { isSummaryRequest } from './summary-requests.js';

const SUMMARY_USAGE = { prompt_tokens: 321, completion_tokens: 45 };

function conversation(count: number, wordsEach: number): ChatMessage[] {
  return Array.from({ length: count }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `m${i} ${'word '.repeat(wordsEach)}`.trim(),
  }));
}

describe('compaction cost', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        assistant: TEST_AGENT,
        auto: { ...TEST_AGENT, name: 'auto', defaultCompaction: { autoThreshold: 50 } },
      },
      mainModel: { contextWindow: 2_000, timeoutMs: PATIENT_MS },
    });
  });
  afterAll(() => t.close());
  beforeEach(() => {
    t.fake!.reset();
    t.fake!.setDefault((body) =>
      isSummaryRequest(body)
        ? { content: 'Summary of the talk.', usage: SUMMARY_USAGE }
        : { content: 'ok' },
    );
  });

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });

  it('records each summary call on its row and sums them on the session; reset zeroes them', async () => {
    const id = await seedSession(t.app, conversation(8, 20));
    const first = (await inject('POST', `/sessions/${id}/compact`)).json();
    expect(first.alreadyUpToDate).toBe(false);
    // The manual report keeps its specified shape; the cost is on the session and the row.
    expect(first).not.toHaveProperty('input_tokens');
    expect(first.session).toMatchObject({
      compaction_input_tokens: 321,
      compaction_output_tokens: 45,
    });

    await t.app.store.appendMessages(id, conversation(8, 20));
    await inject('POST', `/sessions/${id}/compact`);
    const session = (await inject('GET', `/sessions/${id}`)).json().session;
    expect(session).toMatchObject({ compaction_input_tokens: 642, compaction_output_tokens: 90 });
    const rows = (await inject('GET', `/sessions/${id}/compactions`)).json().compactions;
    expect(rows).toHaveLength(2);
    for (const row of rows) expect(row).toMatchObject({ input_tokens: 321, output_tokens: 45 });

    const reset = (await inject('POST', `/sessions/${id}/reset`)).json().session;
    expect(reset).toMatchObject({ compaction_input_tokens: 0, compaction_output_tokens: 0 });
  });

  it('an up-to-date session costs nothing', async () => {
    const id = await seedSession(t.app, []);
    const res = (await inject('POST', `/sessions/${id}/compact`)).json();
    expect(res.alreadyUpToDate).toBe(true);
    expect(res.session).toMatchObject({ compaction_input_tokens: 0, compaction_output_tokens: 0 });
  });

  it('the chat envelope carries the cost of an automatic compaction', async () => {
    // ~1 250 tokens of history: over 50% of 2 000 before the next call.
    const id = await seedSession(t.app, conversation(12, 100), { agentName: 'auto' });
    const res = await inject('POST', '/agents/auto/chat', { message: 'and now?', sessionId: id });
    expect(res.statusCode, res.body).toBe(200);
    const { compaction } = res.json();
    expect(compaction).toMatchObject({ trigger: 'auto', input_tokens: 321, output_tokens: 45 });
    expect(compaction.runs).toBeGreaterThan(0);
    const session = (await inject('GET', `/sessions/${id}`)).json().session;
    expect(session.compaction_input_tokens).toBe(321 * compaction.runs);
  });

  it('a session whose chats ran no compaction has compaction null and zero sums', async () => {
    const res = await inject('POST', '/agents/assistant/chat', { message: 'hello' });
    expect(res.json().compaction).toBeNull();
    const session = (await inject('GET', `/sessions/${res.json().sessionId}`)).json().session;
    expect(session).toMatchObject({ compaction_input_tokens: 0, compaction_output_tokens: 0 });
  });
});

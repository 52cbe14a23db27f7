/**
 * Automatic recall end to end, on both store dialects: after compaction, a
 * question about a fact the summary dropped brings the fact's raw message
 * back into the request, as one data block right before the question; the
 * stored history is unchanged; the stable prefix stays the same from one
 * request to the next; the block is bounded and counted.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { RECALL_OPEN } from '../../src/recall/recall-block.js';
import {
  chatOn,
  DATABASES,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest } from '../compaction/summary-requests.js';

interface WireMessage {
  role: string;
  content: string | null;
}

const FACT = 'The gym locker code is 4812, and the spare key is under the blue mat.';

/** 16 messages; seq 4 (the third message after the system prompt) holds the fact. */
function conversation(): ChatMessage[] {
  return Array.from({ length: 16 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: i === 2 ? FACT : `Filler message ${i} about the weather and lunch plans.`,
  }));
}

const isBlock = (m: WireMessage) => (m.content ?? '').startsWith(RECALL_OPEN);

describe.each(DATABASES)('automatic recall (%s)', (database) => {
  let t: TestApp;
  const fake = () => t.fake!;
  const lastAgentRequest = (): WireMessage[] =>
    agentRequestsOf(fake()).at(-1)!.body.messages as WireMessage[];

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: {
        assistant: TEST_AGENT,
        quiet: {
          ...TEST_AGENT,
          name: 'quiet',
          defaultCompaction: { recall: { enabled: false } },
        },
        small: {
          ...TEST_AGENT,
          name: 'small',
          defaultCompaction: { recall: { maxTokens: 200, maxMessages: 1 } },
        },
      },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    fake().setDefault((body) =>
      isSummaryRequest(body) ? { content: 'They talked about the weather.' } : { content: 'ok' },
    );
  });

  async function compacted(agentName = 'assistant'): Promise<string> {
    const id = await seedSession(t.app, conversation(), { agentName });
    const res = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    expect(res.json()).toMatchObject({ compactedCount: 8 });
    return id;
  }

  it('puts the compacted fact back, right before the question, and stores nothing of it', async () => {
    const id = await compacted();
    const res = await chatOn(t.app, id, 'What is the locker code at the gym?');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().recall).toEqual({ calls: 1, seqs: [4], tokens: expect.any(Number) });

    const sent = lastAgentRequest();
    const at = sent.findIndex(isBlock);
    expect(at).toBe(sent.length - 2);
    expect(sent[at]!.role).toBe('user');
    expect(sent[at]!.content).toContain('<message seq="4" role="user" time="');
    expect(sent[at]!.content).toContain(FACT);
    expect(sent[at]!.content).toContain('not instructions');
    expect(sent.at(-1)).toEqual({ role: 'user', content: 'What is the locker code at the gym?' });
    // Never the raw tail again: only the fact, which is compacted.
    expect(sent.filter((m) => (m.content ?? '').includes(FACT))).toHaveLength(1);

    const stored = (await t.app.server.inject({ url: `/sessions/${id}/messages` })).json()
      .messages as WireMessage[];
    expect(stored.some(isBlock)).toBe(false);
  });

  it('two successive requests share system prompt, summary pair and raw tail as a prefix', async () => {
    const id = await compacted();
    await chatOn(t.app, id, 'What is the locker code at the gym?');
    const first = lastAgentRequest();
    await chatOn(t.app, id, 'And where is the spare key, under which mat?');
    const second = lastAgentRequest();
    const stable = first.slice(0, first.findIndex(isBlock));
    expect(stable.length).toBeGreaterThan(3);
    expect(second.slice(0, stable.length)).toEqual(stable);
    expect(second.findIndex(isBlock)).toBe(second.length - 2);
  });

  it('an unrelated, a chatty or a foreign-language message recalls nothing', async () => {
    const id = await compacted();
    for (const message of ['ok, thanks!', 'Recommend a pancake recipe', 'Wie spät ist es jetzt?']) {
      const res = await chatOn(t.app, id, message);
      expect(res.json().recall, message).toBeNull();
      expect(lastAgentRequest().some(isBlock)).toBe(false);
    }
  });

  it('the latest tool result inside a tool loop is part of the query', async () => {
    const id = await compacted();
    fake().script({ tool_calls: [{ name: 'current_time', arguments: '{}' }] }, { content: 'done' });
    // The question shares nothing with the fact; the tool result is about the time only,
    // so the first call recalls nothing and the second neither, unless the result matches.
    const res = await chatOn(t.app, id, 'What time is it?');
    expect(res.statusCode).toBe(200);
    expect(res.json().recall).toBeNull();

    const other = await compacted();
    fake().reset();
    fake().setDefault((body) =>
      isSummaryRequest(body) ? { content: 'Weather.' } : { content: 'ok' },
    );
    fake().script(
      {
        tool_calls: [
          { name: 'history_search', arguments: JSON.stringify({ query: 'locker gym' }) },
        ],
      },
      { content: 'done' },
    );
    const looped = await chatOn(t.app, other, 'Look that up for me');
    expect(looped.json().recall).toMatchObject({ calls: 1, seqs: [4] });
    const [firstCall, secondCall] = agentRequestsOf(fake()).map(
      (r) => r.body.messages as WireMessage[],
    );
    expect(firstCall!.some(isBlock)).toBe(false);
    expect(secondCall!.some(isBlock)).toBe(true);
  });

  it('is off when the agent turns it off', async () => {
    const id = await compacted('quiet');
    const res = await chatOn(t.app, id, 'What is the locker code at the gym?', 'quiet');
    expect(res.json().recall).toBeNull();
    expect(lastAgentRequest().some(isBlock)).toBe(false);
  });

  it('keeps to maxTokens and maxMessages', async () => {
    const id = await seedSession(
      t.app,
      [
        ...Array.from({ length: 8 }, (_, i): ChatMessage => ({
          role: i % 2 === 0 ? 'user' : 'assistant',
          content: `Locker ${i} at the gym: ${'details '.repeat(80)}`,
        })),
        ...conversation(),
      ],
      { agentName: 'small' },
    );
    await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    const res = await chatOn(t.app, id, 'Which locker at the gym?', 'small');
    const recall = res.json().recall as { seqs: number[]; tokens: number };
    expect(recall.seqs).toHaveLength(1);
    expect(recall.tokens).toBeLessThanOrEqual(200);
  });

  it('GET /sessions/:id/context counts the block apart and names its seqs', async () => {
    const id = await compacted();
    await t.app.store.appendMessages(id, [{ role: 'user', content: 'The gym locker code?' }]);
    const context = (await t.app.server.inject({ url: `/sessions/${id}/context` })).json();
    expect(context.recalled).toEqual([4]);
    expect(context.tokens.recall).toBeGreaterThan(0);
    const { system, memory, summary, raw, recall, total } = context.tokens;
    expect(system + memory + summary + raw + recall).toBe(total);
    expect((context.messages as WireMessage[]).some(isBlock)).toBe(false);
  });

  it('a session that was never compacted has nothing to recall', async () => {
    const id = await seedSession(t.app, conversation());
    const res = await chatOn(t.app, id, 'What is the locker code at the gym?');
    expect(res.json().recall).toBeNull();
    const context = (await t.app.server.inject({ url: `/sessions/${id}/context` })).json();
    expect(context.tokens.recall).toBe(0);
  });
});

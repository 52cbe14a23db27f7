/**
 * Automatic compaction and context-overflow recovery: the threshold on the
 * estimated prompt, never covering the running turn, several runs inside one
 * long turn, the breaker that suspends it after three failures (and a manual
 * compaction that lifts it), and the provider's context-length error answered
 * by one compaction and one retry, then CONTEXT_OVERFLOW with a bounded number
 * of attempts.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { estimateMessagesTokens } from '../../src/llm/tokens.js';
import { CONTEXT_OVERFLOW_REPLY, type FakeReply } from '../fakes/llm-server.js';
import {
  chatOn,
  DATABASES,
  PATIENT_MS,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

const CONTEXT_WINDOW = 2_000;
const AUTO_THRESHOLD = 50;
/** Estimated prompt tokens at or above which automatic compaction runs. */
const LIMIT_TOKENS = (CONTEXT_WINDOW * AUTO_THRESHOLD) / 100;

/** Returns `"data "` × size: a long tool output. */
const BIG_TOOL = `export default {
  name: 'big_output',
  description: 'Returns a long text.',
  parameters: {
    type: 'object',
    properties: { size: { type: 'integer', minimum: 1 } },
    required: ['size'],
    additionalProperties: false,
  },
  async run(args) {
    return 'data '.repeat(args.size);
  },
};
`;

const AUTO_AGENT = {
  ...TEST_AGENT,
  tools: [...TEST_AGENT.tools, './tools/big.js'],
  maxIterations: 10,
  defaultCompaction: { autoThreshold: AUTO_THRESHOLD },
};

/** A text of about `tokens` tokens (one per word). */
const words = (tokens: number, tag: string): string => `${tag} ${'word '.repeat(tokens)}`.trim();

function conversation(count: number, tokens: number): ChatMessage[] {
  return Array.from({ length: count }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: words(tokens, `m${i}`),
  }));
}

/** Usage as a real provider reports it: here Cairn's own token estimate of the prompt. */
function usageOf(body: { messages: ChatMessage[] }): FakeReply['usage'] {
  return { prompt_tokens: estimateMessagesTokens(body.messages), completion_tokens: 3 };
}

interface Envelope {
  sessionId: string;
  reply: string;
  messages: { seq: number; role: string; content: string | null }[];
  compaction: { trigger: string; runs: number; compactedCount: number; newSize: number } | null;
}

describe.each(DATABASES)('automatic compaction (%s)', (database) => {
  let t: TestApp;
  /** What summary calls answer: a summary, or a fault. */
  let summaryReply: () => FakeReply;
  let summaryNumber: number;
  /** What the next chat calls answer, in order ('ok' when empty); usage is added. */
  let chatReplies: FakeReply[];

  const fake = () => t.fake!;
  const summaryRequests = () => summaryRequestsOf(fake());
  const chatRequests = () => agentRequestsOf(fake());

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: { assistant: AUTO_AGENT },
      files: { 'agents/assistant/tools/big.js': BIG_TOOL },
      mainModel: { contextWindow: CONTEXT_WINDOW, timeoutMs: PATIENT_MS },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    summaryNumber = 0;
    summaryReply = () => ({ content: `SUMMARY-${++summaryNumber}` });
    chatReplies = [];
    fake().setDefault((body) =>
      isSummaryRequest(body)
        ? summaryReply()
        : { ...(chatReplies.shift() ?? { content: 'ok' }), usage: usageOf(body) },
    );
  });

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });

  async function seeded(messages: ChatMessage[]): Promise<string> {
    const res = await inject('POST', '/sessions', { agentName: 'assistant' });
    const id = res.json().session.id as string;
    await t.app.store.appendMessages(id, messages);
    return id;
  }

  async function chat(id: string | undefined, message: string): Promise<Envelope> {
    const res = await inject('POST', '/agents/assistant/chat', {
      message,
      ...(id !== undefined ? { sessionId: id } : {}),
    });
    expect(res.statusCode, res.body).toBe(200);
    return res.json<Envelope>();
  }

  async function session(id: string) {
    return (await inject('GET', `/sessions/${id}`)).json().session;
  }

  async function compactions(id: string) {
    return (await inject('GET', `/sessions/${id}/compactions`)).json().compactions as {
      trigger: string;
      to_seq: number;
      from_seq: number;
    }[];
  }

  async function events(id: string, type: string) {
    return (await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 1_000 })).filter(
      (e) => e.type === type,
    );
  }

  function expectAllAccepted(): void {
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  }

  it('runs when the estimate reaches the threshold, reports it, and never covers the running turn', async () => {
    const first = await chat(undefined, words(100, 'first'));
    expect(first.compaction).toBeNull();
    expect(summaryRequests()).toHaveLength(0);
    const id = first.sessionId;

    // Long user messages push the estimate over LIMIT_TOKENS within a few turns.
    let compacted: Envelope | undefined;
    for (let turn = 1; turn <= 10 && !compacted; turn++) {
      const before = summaryRequests().length;
      const envelope = await chat(id, words(250, `turn${turn}`));
      if (envelope.compaction) compacted = envelope;
      else expect(summaryRequests()).toHaveLength(before);
    }
    expect(compacted, 'no automatic compaction within 10 turns').toBeDefined();
    const envelope = compacted!;
    expect(envelope.compaction).toEqual({
      trigger: 'auto',
      runs: 1,
      compactedCount: expect.any(Number),
      newSize: expect.any(Number),
      // The summary call's cost.
      input_tokens: expect.any(Number),
      output_tokens: expect.any(Number),
    });
    expect(envelope.compaction!.compactedCount).toBeGreaterThan(0);

    const state = await session(id);
    expect(state.compact_size).toBe(envelope.compaction!.newSize);
    const turnUser = envelope.messages[0]!;
    expect(turnUser.role).toBe('user');
    expect(state.compact_seq).toBeLessThan(turnUser.seq);
    const rows = await compactions(id);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.trigger).toBe('auto');
    expect((await events(id, 'context.defaultCompacted'))[0]!.data).toMatchObject({
      trigger: 'auto',
      compactedCount: envelope.compaction!.compactedCount,
    });

    // The request after the compaction carries the summary and ends with the turn's message.
    const sent = chatRequests().at(-1)!.body.messages as { role: string; content: string }[];
    expect(sent[1]).toEqual({ role: 'user', content: `${SUMMARY_PREFIX}SUMMARY-1` });
    expect(sent.at(-1)).toEqual({ role: 'user', content: turnUser.content });
    expect(estimateMessagesTokens(sent as ChatMessage[])).toBeLessThan(LIMIT_TOKENS);
    expectAllAccepted();
  });

  it('joins a manual compaction already in flight instead of paying for a second summary', async () => {
    const id = await seeded(conversation(12, 100)); // ~1 250 tokens: over the threshold
    summaryReply = () => ({ content: `SUMMARY-${++summaryNumber}`, delayMs: 600 });
    const manual = inject('POST', `/sessions/${id}/compact`);
    for (let i = 0; i < 500 && summaryRequests().length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(summaryRequests()).toHaveLength(1);

    // The turn's automatic compaction joins the manual one's flight.
    const envelope = await chat(id, 'after');
    const done = await manual;
    expect(done.statusCode, done.body).toBe(200);
    expect(summaryRequests()).toHaveLength(1);
    expect(envelope.compaction).toMatchObject({ trigger: 'auto', runs: 1 });
    expect(envelope.compaction!.newSize).toBe(done.json().newSize);
    expect(await compactions(id)).toHaveLength(1);
    // The turn's request was rebuilt from the shared summary.
    const sent = chatRequests().at(-1)!.body.messages as { role: string; content: string }[];
    expect(sent[1]).toEqual({ role: 'user', content: `${SUMMARY_PREFIX}SUMMARY-1` });
    expectAllAccepted();
  });

  it('may run more than once inside one long turn with big tool outputs', async () => {
    // Just under the threshold before the turn; every tool output adds ~500 tokens.
    const id = await seeded(conversation(8, 105));
    chatReplies = [
      { tool_calls: [{ name: 'big_output', arguments: '{"size":500}' }] },
      { tool_calls: [{ name: 'big_output', arguments: '{"size":500}' }] },
      { content: 'task done' },
    ];
    const envelope = await chat(id, 'run the long task');
    expect(envelope.reply).toBe('task done');
    expect(envelope.compaction).not.toBeNull();
    expect(envelope.compaction!.runs).toBeGreaterThanOrEqual(2);

    const turnStart = envelope.messages[0]!.seq;
    const rows = await compactions(id);
    expect(rows).toHaveLength(envelope.compaction!.runs);
    for (const row of rows) {
      expect(row.trigger).toBe('auto');
      expect(row.to_seq).toBeLessThan(turnStart);
    }
    expect(envelope.compaction!.newSize).toBe((await session(id)).compact_size);
    // Every request of the turn still contains the task and ends with what must be answered.
    const turnRequests = chatRequests();
    expect(turnRequests).toHaveLength(3);
    for (const r of turnRequests) {
      const sent = r.body.messages as { role: string; content: string | null }[];
      expect(sent.some((m) => m.role === 'user' && m.content === 'run the long task')).toBe(true);
    }
    expect(turnRequests.at(-1)!.body.messages.at(-1).role).toBe('tool');
    expectAllAccepted();
  });

  it('is suspended after three failed summaries in a row; turns still succeed; a manual compaction lifts it', async () => {
    const id = await seeded(conversation(12, 100)); // ~1 250 tokens: over the threshold
    summaryReply = () => ({ status: 500 });

    for (let turn = 1; turn <= 3; turn++) {
      const envelope = await chat(id, `turn ${turn}`);
      expect(envelope.reply).toBe('ok');
      expect(envelope.compaction).toBeNull();
      expect(summaryRequests()).toHaveLength(turn);
      expect((await session(id)).compaction_suspended).toBe(turn < 3 ? 0 : 1);
    }
    const suspended = await events(id, 'context.compactionSuspended');
    expect(suspended).toHaveLength(1);
    expect(suspended[0]!.data.sessionId).toBe(id);
    expect(String(suspended[0]!.data.reason)).toMatch(/3/);

    // Suspended: no more attempts, and the turn goes on.
    expect((await chat(id, 'turn 4')).reply).toBe('ok');
    expect(summaryRequests()).toHaveLength(3);

    summaryReply = () => ({ content: 'MANUAL SUMMARY' });
    const manual = await inject('POST', `/sessions/${id}/compact`);
    expect(manual.statusCode, manual.body).toBe(200);
    expect(manual.json().session.compaction_suspended).toBe(0);

    // Over the threshold again: automatic compaction runs again.
    await t.app.store.appendMessages(id, conversation(12, 100));
    summaryReply = () => ({ content: 'AUTO AGAIN' });
    const envelope = await chat(id, 'turn 5');
    expect(envelope.compaction).toMatchObject({ trigger: 'auto', runs: 1 });
    expect((await session(id)).compact_summary).toBe('AUTO AGAIN');
    expectAllAccepted();
  });
});

describe.each(DATABASES)('context-overflow recovery (%s)', (database) => {
  /** The fake's window, in its own estimate (characters / 4). */
  const FAKE_WINDOW_TOKENS = 1_500;
  let t: TestApp;

  const fake = () => t.fake!;
  const summaryRequests = () => summaryRequestsOf(fake());
  const mainRequests = () => agentRequestsOf(fake());

  beforeAll(async () => {
    // A provider whose window is smaller than the configured one (32 768):
    // only its error triggers compaction; automatic compaction is off, since
    // by the configured window nothing is near the threshold anyway. The fake
    // counts the prompt alone, so the summary calls (max_tokens 4 000) fit it.
    t = await startTestApp({
      database,
      agents: { assistant: { ...TEST_AGENT, defaultCompaction: { autoThreshold: 0 } } },
      fakeOptions: { contextWindowTokens: FAKE_WINDOW_TOKENS, promptOnlyWindow: true },
      mainModel: { timeoutMs: PATIENT_MS },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    fake().setDefault((body) =>
      isSummaryRequest(body) ? { content: 'OVERFLOW SUMMARY' } : { content: 'ok' },
    );
  });

  const seeded = (messages: ChatMessage[]) => seedSession(t.app, messages);
  const chat = (id: string, message: string) => chatOn(t.app, id, message);

  /** Text of `chars` characters. */
  const text = (chars: number, tag: string) => `${tag} `.padEnd(chars, 'x');

  it('compacts and retries once when the first request overflows, and the chat succeeds', async () => {
    // 14 × 500 characters ≈ 1 750 of the fake's tokens: over its window.
    const id = await seeded(
      Array.from({ length: 14 }, (_, i) => ({
        role: i % 2 === 0 ? 'user' : 'assistant',
        content: text(500, `m${i}`),
      })),
    );
    const res = await chat(id, 'hello');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().reply).toBe('ok');
    expect(res.json().compaction).toEqual({
      trigger: 'auto',
      runs: 1,
      compactedCount: 8,
      newSize: 8,
      input_tokens: expect.any(Number),
      output_tokens: expect.any(Number),
    });
    expect(fake().requests.map((r) => (isSummaryRequest(r.body) ? 'summary' : 'main'))).toEqual([
      'main',
      'summary',
      'main',
    ]);
    const retry = mainRequests()[1]!.body.messages as { role: string; content: string }[];
    expect(retry[1]).toEqual({ role: 'user', content: `${SUMMARY_PREFIX}OVERFLOW SUMMARY` });
    expect(retry.at(-1)).toEqual({ role: 'user', content: 'hello' });
    const session = (await t.app.server.inject({ url: `/sessions/${id}` })).json().session;
    expect(session).toMatchObject({ compact_size: 8, compact_summary: 'OVERFLOW SUMMARY' });
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  });

  it('fails with 400 CONTEXT_OVERFLOW after compaction and compactMessages, in at most 3 main attempts', async () => {
    const id = await seeded(
      Array.from({ length: 4 }, (_, i) => ({
        role: i % 2 === 0 ? 'user' : 'assistant',
        content: text(500, `m${i}`),
      })),
    );
    // The message alone is larger than the window: nothing can make it fit.
    const res = await chat(id, text(7_000, 'huge'));
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      error: { code: 'CONTEXT_OVERFLOW', message: expect.any(String) },
    });
    // Overflow → compaction → retry overflows → compactMessages → last retry overflows → stop.
    expect(fake().requests.map((r) => (isSummaryRequest(r.body) ? 'summary' : 'main'))).toEqual([
      'main',
      'summary',
      'main',
      'summary',
      'main',
    ]);
    expect(summaryRequests()).toHaveLength(2);
    const events = await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 100 });
    expect(events.map((e) => e.type)).toContain('context.compacted');
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  });
});

describe('context-overflow recovery with agent memory', () => {
  const MEMO = {
    name: 'memo',
    description: 'Remembers things',
    system: 'You remember things.',
    tools: [],
    maxIterations: 3,
    memory: { enabled: true },
  };
  const OVERFLOW = CONTEXT_OVERFLOW_REPLY;
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ agents: { memo: MEMO }, mainModel: { timeoutMs: PATIENT_MS } });
  });
  afterAll(async () => t.close());

  it('keeps the memory block in the in-memory fallback context (the one context builder)', async () => {
    const note = await t.app.server.inject({
      method: 'PUT',
      url: '/agents/memo/memory/colour',
      payload: { content: 'The user likes teal.' },
    });
    expect(note.statusCode, note.body).toBeLessThan(300);
    let mainCalls = 0;
    t.fake!.reset();
    t.fake!.setDefault((body) => {
      if (isSummaryRequest(body)) return { content: 'FALLBACK SUMMARY' };
      mainCalls += 1;
      // The first call and the retry after compaction overflow: the fallback runs.
      return mainCalls <= 2 ? OVERFLOW : { content: 'ok' };
    });
    const id = await seedSession(
      t.app,
      Array.from({ length: 6 }, (_, i) => ({
        role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
        content: `message ${i}`,
      })),
      { agentName: 'memo' },
    );
    const res = await chatOn(t.app, id, 'hello', 'memo');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().reply).toBe('ok');
    const last = agentRequestsOf(t.fake!).at(-1)!.body.messages as {
      role: string;
      content: string;
    }[];
    const system = last.filter((m) => m.role === 'system').map((m) => m.content);
    expect(system.some((c) => c.includes('The user likes teal.'))).toBe(true);
    expect(last).toContainEqual({ role: 'user', content: `${SUMMARY_PREFIX}FALLBACK SUMMARY` });
    expect(last.at(-1)).toEqual({ role: 'user', content: 'hello' });
  });
});

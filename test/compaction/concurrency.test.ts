/**
 * defaultCompaction under concurrency: compaction holds no lock while the model
 * writes the summary, so chats go on meanwhile; concurrent compactions of one
 * session share one summary call (single flight); the compare-and-set write
 * lets a reset win over a compaction that started before it.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SUMMARY_ACK, SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { PATIENT_MS, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

/** How long the fake takes to write a summary: long enough for chats to run meanwhile. */
const SLOW_SUMMARY_MS = 800;

/**
 * A tool that waits until the test opens a gate, so the test knows the tool
 * call is stored and its result is not. The app runs in the test's process.
 */
const GATED_TOOL = `export default {
  name: 'gated',
  description: 'Waits for the test.',
  parameters: { type: 'object', properties: { note: { type: 'string' } }, additionalProperties: false },
  async run() {
    await globalThis.__compactionTestGate;
    return 'gated result';
  },
};
`;

declare global {
  var __compactionTestGate: Promise<void> | undefined;
}

interface StoredMessage {
  seq: number;
  role: string;
  content: string | null;
  tool_calls?: unknown[];
  compacted: boolean;
}

function conversation(count: number, size: number): ChatMessage[] {
  return Array.from({ length: count }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `m${i} `.padEnd(size, '.'),
  }));
}

async function until(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('compaction under concurrency', () => {
  let t: TestApp;
  let summaryNumber: number;
  let summaryDelayMs: number;

  const fake = () => t.fake!;
  const summaryRequests = () => summaryRequestsOf(fake());
  const chatRequests = () => agentRequestsOf(fake());

  beforeAll(async () => {
    t = await startTestApp({
      agents: { assistant: { ...TEST_AGENT, tools: [...TEST_AGENT.tools, './tools/gated.js'] } },
      files: { 'agents/assistant/tools/gated.js': GATED_TOOL },
      mainModel: { timeoutMs: PATIENT_MS },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    summaryNumber = 0;
    summaryDelayMs = SLOW_SUMMARY_MS;
    fake().setDefault((body) =>
      isSummaryRequest(body)
        ? { content: `SUMMARY-${++summaryNumber}`, delayMs: summaryDelayMs }
        : { content: 'ok' },
    );
  });

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });

  async function seeded(messages: ChatMessage[], compactCount?: number): Promise<string> {
    const res = await inject('POST', '/sessions', {
      agentName: 'assistant',
      ...(compactCount !== undefined ? { compactCount } : {}),
    });
    const id = res.json().session.id as string;
    await t.app.store.appendMessages(id, messages);
    return id;
  }

  async function session(id: string) {
    return (await inject('GET', `/sessions/${id}`)).json().session;
  }

  async function messages(id: string): Promise<StoredMessage[]> {
    return (await inject('GET', `/sessions/${id}/messages?limit=1000`)).json().messages;
  }

  function chat(id: string, message: string) {
    return inject('POST', '/agents/assistant/chat', { message, sessionId: id });
  }

  it('chats on the session go on while the summary is written, and the compaction still lands', async () => {
    const id = await seeded(conversation(12, 200)); // seq 2–13; the batch is seq 2–7
    const compaction = inject('POST', `/sessions/${id}/compact`);
    await until(() => summaryRequests().length === 1, 'the summary request');

    const chats = await Promise.all([0, 1, 2].map((i) => chat(id, `chat ${i}`)));
    for (const res of chats) {
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json().reply).toBe('ok');
    }
    const result = await compaction;
    expect(result.statusCode, result.body).toBe(200);
    expect(result.json()).toMatchObject({ compactedCount: 6, newSize: 6 });

    const stored = await messages(id);
    expect(stored).toHaveLength(13 + 6);
    // Every chat turn is stored whole, one after the other.
    const added = stored.slice(13);
    expect(added.map((m) => m.role)).toEqual([
      'user',
      'assistant',
      'user',
      'assistant',
      'user',
      'assistant',
    ]);
    expect(
      added
        .filter((m) => m.role === 'user')
        .map((m) => m.content)
        .sort(),
    ).toEqual(['chat 0', 'chat 1', 'chat 2']);
    // The pointer is the last message of the batch planned before the chats.
    const after = await session(id);
    expect(after.compact_seq).toBe(7);
    expect(stored.filter((m) => m.compacted).map((m) => m.seq)).toEqual([2, 3, 4, 5, 6, 7]);

    // The next request is the summary, the rest of the old messages, the chats, the new message.
    fake().requests.length = 0;
    expect((await chat(id, 'after')).statusCode).toBe(200);
    const sent = chatRequests()[0]!.body.messages as { role: string; content: string }[];
    expect(sent.slice(0, 3)).toEqual([
      { role: 'system', content: TEST_AGENT.system },
      { role: 'user', content: `${SUMMARY_PREFIX}SUMMARY-1` },
      { role: 'assistant', content: SUMMARY_ACK },
    ]);
    expect(sent.slice(3).map((m) => m.content)).toEqual([
      ...stored.slice(7).map((m) => m.content),
      'after',
    ]);
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  });

  it('five compactions at once share one summary call and report the same result, no 409s', async () => {
    const id = await seeded(conversation(12, 200));
    const first = inject('POST', `/sessions/${id}/compact`);
    await until(() => summaryRequests().length === 1, 'the first summary request');
    // Four more while the first waits for its summary (SLOW_SUMMARY_MS).
    const rest = [1, 2, 3, 4].map(() => inject('POST', `/sessions/${id}/compact`));
    const results = await Promise.all([first, ...rest]);
    expect(summaryRequests()).toHaveLength(1);
    for (const res of results) {
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toEqual(results[0].json());
    }
    const state = await session(id);
    expect(results[0].json()).toMatchObject({
      compactedCount: 6,
      newSize: 6,
      alreadyUpToDate: false,
      session: state,
    });
    expect(state).toMatchObject({ compact_size: 6, compact_seq: 7, compaction_count: 1 });
    expect(state.compact_summary).toBe('SUMMARY-1');
    const rows = (await inject('GET', `/sessions/${id}/compactions`)).json().compactions;
    expect(rows).toHaveLength(1);
    const events = await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 100 });
    expect(events.filter((e) => e.type === 'context.defaultCompacted')).toHaveLength(1);

    // The flight is over: the next compaction is a new one with its own summary.
    const next = await inject('POST', `/sessions/${id}/compact`);
    expect(next.statusCode, next.body).toBe(200);
    expect(next.json().alreadyUpToDate).toBe(false);
    expect(summaryRequests()).toHaveLength(2);
  });

  it('compactions that join a failing flight all get its error, and nothing changed', async () => {
    const id = await seeded(conversation(12, 200));
    fake().setDefault((body) =>
      isSummaryRequest(body) ? { status: 500, delayMs: SLOW_SUMMARY_MS } : { content: 'ok' },
    );
    const first = inject('POST', `/sessions/${id}/compact`);
    await until(() => summaryRequests().length === 1, 'the summary request');
    const results = await Promise.all([first, inject('POST', `/sessions/${id}/compact`)]);
    expect(summaryRequests()).toHaveLength(1);
    for (const res of results) {
      expect(res.statusCode, res.body).toBe(502);
      expect(res.json().error.code).toBe('LLM_ERROR');
    }
    expect(await session(id)).toMatchObject({ compact_size: 0, compaction_count: 0 });
  });

  it('a reset during a slow compaction wins: the compaction gets a 409 and the session stays reset', async () => {
    const id = await seeded(conversation(12, 200));
    const compaction = inject('POST', `/sessions/${id}/compact`);
    await until(() => summaryRequests().length === 1, 'the summary request');

    const reset = await inject('POST', `/sessions/${id}/reset`);
    expect(reset.statusCode).toBe(200);
    const result = await compaction;
    expect(result.statusCode).toBe(409);
    expect(result.json().error.code).toBe('COMPACTION_CONFLICT');

    expect(await session(id)).toEqual(reset.json().session);
    expect(reset.json().session).toMatchObject({
      compact_summary: null,
      compact_size: 0,
      compact_seq: 0,
      compaction_count: 0,
    });
    expect((await messages(id)).map((m) => m.role)).toEqual(['system']);
    expect((await inject('GET', `/sessions/${id}/compactions`)).json().compactions).toEqual([]);
  });

  it('a compaction while a tool call runs never cuts inside that exchange', async () => {
    summaryDelayMs = 0;
    let open!: () => void;
    globalThis.__compactionTestGate = new Promise<void>((resolve) => (open = resolve));
    // compactCount 99: the greedy cut would reach into the running tool call.
    const id = await seeded(conversation(12, 200), 99);
    // Arguments long enough that only the running call can reach the target.
    const args = JSON.stringify({ note: 'n'.repeat(200) });
    fake().script({ tool_calls: [{ name: 'gated', arguments: args }] });
    const turn = chat(id, 'go');
    let res;
    try {
      await until(
        async () => (await messages(id)).some((m) => m.tool_calls !== undefined),
        'the stored tool call',
      );
      res = await inject('POST', `/sessions/${id}/compact`);
      fake().script({ content: 'done' }); // the model's answer once the tool returns
    } finally {
      open(); // never leave the turn hanging, or closing the app would wait for it
    }
    expect(res.statusCode, res.body).toBe(200);
    // 12 old messages + 'go' (seq 14); the call (seq 15) has no result yet, so the cut stays before it.
    expect(res.json()).toMatchObject({ compactedCount: 13, newSize: 13 });
    expect(res.json().session.compact_seq).toBe(14);

    const done = await turn;
    expect(done.statusCode, done.body).toBe(200);
    expect(done.json().reply).toBe('done');

    fake().requests.length = 0;
    expect((await chat(id, 'next')).statusCode).toBe(200);
    const sent = chatRequests()[0]!.body.messages as {
      role: string;
      content: string | null;
      tool_calls?: unknown[];
    }[];
    // The tail starts with the tool-calling message: no acknowledgement, its result right after.
    expect(sent.map((m) => m.role)).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'assistant',
      'user',
    ]);
    expect(sent[2]!.tool_calls).toHaveLength(1);
    expect(sent[3]!.content).toBe('gated result');
    for (const r of fake().requests) expect(r.problems).toEqual([]);
    globalThis.__compactionTestGate = undefined;
  });
});

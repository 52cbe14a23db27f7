/**
 * Old tool results cleared from the request, through the real app: inside
 * one long tool loop the older results go out as placeholders in batches
 * while the stored messages stay whole; the call/result pairing stays valid
 * for the OpenAI and the Anthropic protocols (both fakes refuse a broken
 * one); `false` turns it off; the context view lists what is cleared;
 * automatic recall brings a cleared result back when a later message asks
 * for what only it held; automatic compaction counts the request as sent,
 * so clearing keeps a tool-heavy session under its threshold where the same
 * session without clearing compacts.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RECALL_OPEN } from '../../src/recall/recall-block.js';
import { startFakeAnthropicServer, type FakeAnthropicServer } from '../fakes/anthropic-server.js';
import type { RecordedRequest } from '../fakes/llm-server.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest } from './summary-requests.js';

/** About 400 tokens of filler (" data" is one token) and one fact of its own per report. */
const REPORT_TOOL = `const FACTS = [
  'The flamingo colour is magenta.',
  'The walrus weighs about a tonne.',
  'The heron nests by the river.',
  'The otter sleeps in a holt.',
  'The badger digs at night.',
  'The kestrel hovers over fields.',
  'The newt lives in ponds.',
  'The stoat turns white in winter.',
];
export default {
  name: 'read_report',
  description: 'Reads one field report.',
  parameters: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false },
  async run(args) {
    return 'Report ' + args.n + ':' + ' data'.repeat(400) + ' ' + FACTS[args.n % FACTS.length];
  },
};
`;

const REPORT_FILE = { 'agents/assistant/tools/report.js': REPORT_TOOL };

function agentWith(pruneToolResults: unknown, extra: Record<string, unknown> = {}) {
  return {
    ...TEST_AGENT,
    tools: ['./tools/report.js'],
    maxIterations: 10,
    defaultCompaction: { pruneToolResults, ...extra },
  };
}

const CLEARING = { keepLast: 1, minTokens: 100 };
/** A tenth of it (800 tokens) is the batch: two 400-token reports. */
const WINDOW = 8_000;

/** Replies that read reports 0..count-1 one after the other, then answer. */
function readReports(count: number) {
  return [
    ...Array.from({ length: count }, (_, n) => ({
      tool_calls: [{ name: 'read_report', arguments: JSON.stringify({ n }) }],
    })),
    { content: 'All read.' },
  ];
}

interface SentToolResult {
  id: string;
  text: string;
}

/** The tool results an OpenAI request carried, in order. */
function openAiResults(request: RecordedRequest): SentToolResult[] {
  return (request.body.messages as { role: string; tool_call_id?: string; content: string }[])
    .filter((m) => m.role === 'tool')
    .map((m) => ({ id: m.tool_call_id ?? '', text: m.content }));
}

const isCleared = (r: SentToolResult) => r.text.startsWith('[Old tool result cleared');

describe('clearing old tool results (OpenAI protocol)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: { assistant: agentWith(CLEARING), whole: { ...agentWith(false), name: 'whole' } },
      files: { ...REPORT_FILE, 'agents/whole/tools/report.js': REPORT_TOOL },
      mainModel: { contextWindow: WINDOW },
    });
  });
  afterAll(async () => t.close());
  afterEach(() => t.fake!.reset());

  const chat = (message: string, sessionId?: string, agent = 'assistant') =>
    t.app.server.inject({
      method: 'POST',
      url: `/agents/${agent}/chat`,
      payload: { message, ...(sessionId ? { sessionId } : {}) },
    });

  it('clears old results in batches inside one long turn; the stored messages stay whole', async () => {
    t.fake!.script(...readReports(5));
    const res = await chat('read the five reports');
    expect(res.statusCode, res.body).toBe(200);
    const sessionId = res.json().sessionId as string;

    const requests = agentRequestsOf(t.fake!);
    expect(requests).toHaveLength(6);
    for (const request of requests) expect(request.problems).toEqual([]);
    const cleared = requests.map((r) => openAiResults(r).map(isCleared));
    // Batches of two 400-token reports (800 = a tenth of the window); the newest stays whole.
    expect(cleared).toEqual([
      [],
      [false],
      [false, false],
      [true, true, false],
      [true, true, false, false],
      [true, true, true, true, false],
    ]);
    const placeholder = openAiResults(requests[5]!)[0]!;
    expect(placeholder.text).toContain('read_report');
    expect(placeholder.text).toContain(placeholder.id);
    expect(placeholder.text).toMatch(/\d+ tokens/);
    expect(placeholder.text).toMatch(/recall brings it back/);

    const stored = await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 100 });
    const results = stored.filter((m) => m.role === 'tool');
    expect(results).toHaveLength(5);
    for (const message of results) expect(message.content).toMatch(/^Report \d+: data data/);

    // The context view shows the next call as sent and lists what it clears.
    const view = await t.app.server.inject({
      method: 'GET',
      url: `/sessions/${sessionId}/context`,
    });
    expect(view.statusCode).toBe(200);
    const body = view.json<{
      clearedToolResults: { seq: number; toolCallId: string; tool: string; tokens: number }[];
      messages: { role: string; content: string }[];
    }>();
    expect(body.clearedToolResults.map((r) => r.seq)).toEqual(
      results.slice(0, 4).map((m) => m.seq),
    );
    for (const [i, entry] of body.clearedToolResults.entries()) {
      expect(entry.toolCallId).toBe(results[i]!.tool_call_id);
      expect(entry.tool).toBe('read_report');
      expect(entry.tokens).toBeGreaterThan(400);
    }
    const viewResults = body.messages.filter((m) => m.role === 'tool');
    expect(viewResults.slice(0, 4).every((m) => m.content.startsWith('[Old tool result'))).toBe(
      true,
    );
    expect(viewResults[4]!.content).toMatch(/^Report 4:/);
  });

  it('brings a cleared result back when a later message asks for what only it held', async () => {
    t.fake!.script(...readReports(5));
    const first = await chat('read the five reports');
    const sessionId = first.json().sessionId as string;
    t.fake!.reset();
    t.fake!.script({ content: 'Magenta.' });

    const res = await chat('What colour is the flamingo?', sessionId);
    expect(res.statusCode, res.body).toBe(200);
    const [request] = agentRequestsOf(t.fake!);
    expect(request!.problems).toEqual([]);
    // The report is cleared in the request, and recalled in its block.
    const flamingo = openAiResults(request!)[0]!;
    expect(flamingo.text).not.toContain('magenta');
    const messages = request!.body.messages as { role: string; content: string }[];
    const block = messages.find((m) => m.role === 'user' && m.content.startsWith(RECALL_OPEN));
    expect(block?.content).toContain('The flamingo colour is magenta.');
    const stored = await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 100 });
    const report0 = stored.find((m) => m.role === 'tool' && m.content?.includes('flamingo'));
    expect(res.json().recall.seqs).toContain(report0!.seq);
  });

  it('sends every result whole when pruneToolResults is false', async () => {
    t.fake!.script(...readReports(5));
    const res = await chat('read the five reports', undefined, 'whole');
    expect(res.statusCode, res.body).toBe(200);
    const last = agentRequestsOf(t.fake!).at(-1)!;
    expect(openAiResults(last).map(isCleared)).toEqual([false, false, false, false, false]);
    const view = await t.app.server.inject({
      method: 'GET',
      url: `/sessions/${res.json().sessionId as string}/context`,
    });
    expect(view.json().clearedToolResults).toEqual([]);
  });
});

describe('clearing old tool results (Anthropic protocol)', () => {
  let fake: FakeAnthropicServer;
  let t: TestApp;
  beforeAll(async () => {
    fake = await startFakeAnthropicServer();
    t = await startTestApp({
      fake: null,
      agents: { assistant: agentWith(CLEARING) },
      files: REPORT_FILE,
      mainModel: {
        provider: 'anthropic',
        baseURL: fake.baseURL,
        model: 'claude-test',
        maxRetries: 0,
        timeoutMs: 5_000,
        contextWindow: WINDOW,
      },
      env: { ANTHROPIC_API_KEY: 'sk-ant-test' },
    });
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });

  it('keeps every tool_use paired with its tool_result while the old ones are cleared', async () => {
    fake.script(...readReports(5));
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'read the five reports' },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(fake.requests).toHaveLength(6);
    for (const request of fake.requests) expect(request.problems).toEqual([]);
    const results = (fake.requests[5]!.body.messages as { content: unknown }[])
      .flatMap((m) => (Array.isArray(m.content) ? m.content : []))
      .filter((b: { type: string }) => b.type === 'tool_result') as {
      tool_use_id: string;
      content: unknown;
    }[];
    const texts = results.map((b) =>
      typeof b.content === 'string' ? b.content : JSON.stringify(b.content),
    );
    expect(texts).toHaveLength(5);
    expect(texts.slice(0, 4).every((x) => x.includes('[Old tool result cleared'))).toBe(true);
    expect(texts[4]).toContain('Report 4:');
  });
});

describe('automatic compaction counts the request as sent', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      // Both compact at 80 % of a 3 000-token window; only one clears. No
      // summary is prepared off the turn (prepareAt 0): it would take the
      // scripted tool calls meant for the turns.
      agents: {
        assistant: agentWith(CLEARING, { prepareAt: 0 }),
        whole: { ...agentWith(false, { prepareAt: 0 }), name: 'whole' },
      },
      files: { ...REPORT_FILE, 'agents/whole/tools/report.js': REPORT_TOOL },
      mainModel: { contextWindow: 3_000 },
    });
    t.fake!.setDefault((body) =>
      isSummaryRequest(body) ? { content: 'Summary: reports were read.' } : { content: 'ok' },
    );
  });
  afterAll(async () => t.close());

  async function eightReportTurns(agent: string): Promise<number> {
    let sessionId: string | undefined;
    for (let n = 0; n < 8; n++) {
      t.fake!.script({
        tool_calls: [{ name: 'read_report', arguments: JSON.stringify({ n }) }],
      });
      const res = await t.app.server.inject({
        method: 'POST',
        url: `/agents/${agent}/chat`,
        payload: { message: `read report ${n}`, ...(sessionId ? { sessionId } : {}) },
      });
      expect(res.statusCode, res.body).toBe(200);
      sessionId = res.json().sessionId as string;
    }
    for (const request of t.fake!.requests) expect(request.problems).toEqual([]);
    return (await t.app.store.findSession(sessionId!))!.compaction_count;
  }

  it('a session whose stored results exceed the threshold does not compact while the sent request fits', async () => {
    expect(await eightReportTurns('whole')).toBeGreaterThan(0);
    expect(await eightReportTurns('assistant')).toBe(0);
  });
});

/**
 * Every model call on the record, end to end: the real app, a real store on
 * both dialects and the fake OpenAI server. What GET /calls/:id returns as the
 * request is, serialised, exactly the body the fake received; the listing is
 * paged newest first and filtered by role; costs follow the roles' pricing
 * into the call, the chat envelope, the session and /metrics.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { TITLE_PROMPT } from '../../src/runtime/session-titler.js';
import { DATABASES, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const PRICING = { inputPerMTok: 2, outputPerMTok: 8, cachedInputPerMTok: 0.5 };

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const isTitleRequest = (body: any): boolean => body?.messages?.[0]?.content === TITLE_PROMPT;

interface CallSummary {
  id: string;
  session_id: string;
  turn_seq: number | null;
  role: string;
  provider: string;
  model: string;
  response_model: string | null;
  input_tokens: number | null;
  output_tokens: number | null;
  cached_tokens: number | null;
  cost: number | null;
  finish_reason: string | null;
  response: { content: string | null; tool_calls?: { id: string }[] } | null;
  error: { code: string; message: string } | null;
  latency_ms: number;
  fallback_hops: unknown;
  recalled_seqs: unknown;
}

describe.each(DATABASES)('model-call records (%s)', (database) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: {
        assistant: TEST_AGENT,
        titled: { ...TEST_AGENT, name: 'titled', autoTitle: true },
      },
      mainModel: { pricing: PRICING },
    });
  });
  afterAll(() => t.close());
  beforeEach(() => {
    t.fake!.reset();
    t.fake!.setDefault((body) =>
      isTitleRequest(body) ? { content: 'A title' } : { content: 'Sure.' },
    );
  });

  const chat = async (payload: Record<string, unknown>, agent = 'assistant') => {
    const res = await t.app.server.inject({
      method: 'POST',
      url: `/agents/${agent}/chat`,
      payload,
    });
    expect(res.statusCode).toBe(200);
    return res;
  };
  const listCalls = async (id: string, query = '') => {
    const res = await t.app.server.inject({ url: `/sessions/${id}/calls${query}` });
    expect(res.statusCode).toBe(200);
    return res.json<{ calls: CallSummary[]; nextCursor: string | null }>();
  };
  const getCall = async (id: string) => {
    const res = await t.app.server.inject({ url: `/calls/${id}` });
    expect(res.statusCode).toBe(200);
    return res.json<{ call: CallSummary & { request: unknown; wire: boolean } }>().call;
  };
  const chatRequests = () =>
    t.fake!.requests.filter((r) => r.path === '/v1/chat/completions' && !isTitleRequest(r.body));

  it('records each call of a tool loop with the request exactly as the model server received it', async () => {
    t.fake!.script(
      {
        tool_calls: [{ name: 'current_time', arguments: '{}' }],
        usage: { prompt_tokens: 100, completion_tokens: 10 },
      },
      { content: 'It is noon.', usage: { prompt_tokens: 120, completion_tokens: 5 } },
    );
    const first = (await chat({ message: 'What time is it?' })).json();
    const sessionId = first.sessionId as string;
    // A streamed turn on the same session: its calls are on the record too.
    t.fake!.script({ content: 'You are welcome.' });
    await chat({ message: 'Thanks!', sessionId, stream: true });

    const { calls } = await listCalls(sessionId);
    expect(calls.map((c) => c.role)).toEqual(['main', 'main', 'main']);
    const [streamed, answer, toolCall] = calls;
    expect(toolCall!.response!.tool_calls).toHaveLength(1);
    expect(toolCall!.finish_reason).toBe('tool_calls');
    expect(answer!.response).toEqual({ content: 'It is noon.' });
    expect(streamed!.response).toEqual({ content: 'You are welcome.' });
    // Both calls of the first turn belong to it (the seq of its user message).
    const userSeq = first.messages[0].seq as number;
    expect(toolCall!.turn_seq).toBe(userSeq);
    expect(answer!.turn_seq).toBe(userSeq);
    expect(streamed!.turn_seq).toBeGreaterThan(userSeq);
    expect(answer).toMatchObject({
      session_id: sessionId,
      provider: 'openai',
      model: 'test-model',
      response_model: 'test-model',
      input_tokens: 120,
      output_tokens: 5,
      error: null,
      fallback_hops: null,
      recalled_seqs: null,
    });
    expect(answer!.latency_ms).toBeGreaterThan(0);

    // Byte for byte, oldest first, as the fake received them.
    const received = chatRequests().map((r) => r.raw);
    expect(received).toHaveLength(3);
    const rebuilt = [];
    for (const call of [...calls].reverse()) {
      const full = await getCall(call.id);
      expect(full.wire).toBe(true);
      rebuilt.push(JSON.stringify(full.request));
    }
    expect(rebuilt).toEqual(received);
  });

  it('prices each call and sums the cost into the envelope, the session and /metrics', async () => {
    const scrape = async () => (await t.app.server.inject({ url: '/metrics' })).body;
    const costIn = (text: string) =>
      Number(/^cairn_model_cost_total\{role="main"\} (\S+)$/m.exec(text)?.[1] ?? 0);
    const before = costIn(await scrape());
    t.fake!.script({ content: 'One.', usage: { prompt_tokens: 1_000, completion_tokens: 100 } });
    const res = (await chat({ message: 'Count' })).json();
    // 1000 in at 2/M + 100 out at 8/M.
    const expected = (1_000 * 2 + 100 * 8) / 1_000_000;
    expect(res.usage.cost).toBeCloseTo(expected, 12);
    const [call] = (await listCalls(res.sessionId)).calls;
    expect(call!.cost).toBeCloseTo(expected, 12);
    const session = (await t.app.server.inject({ url: `/sessions/${res.sessionId}` })).json()
      .session;
    expect(session.cost).toBeCloseTo(expected, 12);
    expect(costIn(await scrape()) - before).toBeCloseTo(expected, 12);
  });

  it('records a failed call with its error and no cost', async () => {
    t.fake!.script({ status: 400 });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'fail please' },
    });
    expect(res.statusCode).toBe(502);
    const sessions = (await t.app.server.inject({ url: '/sessions?limit=1' })).json().sessions;
    const { calls } = await listCalls(sessions[0].id);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ response: null, cost: null, finish_reason: null });
    expect(calls[0]!.error!.code).toBe('LLM_ERROR');
    const full = await getCall(calls[0]!.id);
    expect(JSON.stringify(full.request)).toBe(chatRequests()[0]!.raw);
  });

  it('records title calls under their own role and filters by role', async () => {
    const { sessionId } = (await chat({ message: 'Plan a trip' }, 'titled')).json();
    await expect
      .poll(async () => (await listCalls(sessionId)).calls.map((c) => c.role).sort())
      .toEqual(['main', 'title']);
    const titles = await listCalls(sessionId, '?role=title');
    expect(titles.calls).toHaveLength(1);
    expect(titles.calls[0]!.response!.content).toBe('A title');
    // The compact role (titles use it) takes main's pricing when it sets none.
    expect(titles.calls[0]!.cost).toBeGreaterThan(0);
    expect((await listCalls(sessionId, '?role=compact')).calls).toEqual([]);
  });

  it('records the summary call of a compaction under the compact role', async () => {
    const { sessionId } = (await chat({ message: 'one' })).json();
    await chat({ message: 'two', sessionId });
    await chat({ message: 'three', sessionId });
    t.fake!.script({ content: 'A summary of the first messages.' });
    const compacted = await t.app.server.inject({
      method: 'POST',
      url: `/sessions/${sessionId}/compact`,
      payload: {},
    });
    expect(compacted.statusCode).toBe(200);
    const { calls } = await listCalls(sessionId, '?role=compact');
    expect(calls).toHaveLength(1);
    expect(calls[0]!.turn_seq).toBeNull();
    expect(calls[0]!.response!.content).toBe('A summary of the first messages.');
    const full = await getCall(calls[0]!.id);
    const sent = t.fake!.requests.filter((r) => r.body?.temperature === 0);
    expect(JSON.stringify(full.request)).toBe(sent[sent.length - 1]!.raw);
  });

  it('pages newest first with cursors', async () => {
    const { sessionId } = (await chat({ message: 'm0' })).json();
    for (let i = 1; i < 5; i++) await chat({ message: `m${i}`, sessionId });
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { calls: CallSummary[]; nextCursor: string | null } = await listCalls(
        sessionId,
        `?limit=2${cursor ? `&cursor=${cursor}` : ''}`,
      );
      expect(page.calls.length).toBeLessThanOrEqual(2);
      seen.push(...page.calls.map((c) => c.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toHaveLength(5);
    const all = (await listCalls(sessionId)).calls.map((c) => c.id);
    expect(seen).toEqual(all);
    // Newest first: the last call's request holds every message.
    const newest = await getCall(all[0]!);
    expect(JSON.stringify(newest.request)).toContain('m4');
    const oldest = await getCall(all[4]!);
    expect(JSON.stringify(oldest.request)).not.toContain('m1');
  });

  it('answers 404 for unknown sessions and calls and 400 for bad parameters', async () => {
    const missing = await t.app.server.inject({ url: '/sessions/sess_nope/calls' });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe('SESSION_NOT_FOUND');
    const unknownCall = await t.app.server.inject({ url: '/calls/call_nope' });
    expect(unknownCall.statusCode).toBe(404);
    expect(unknownCall.json().error.code).toBe('CALL_NOT_FOUND');
    const { sessionId } = (await chat({ message: 'hi' })).json();
    for (const query of ['?role=other', '?limit=0', '?cursor=not-a-cursor', '?extra=1']) {
      const res = await t.app.server.inject({ url: `/sessions/${sessionId}/calls${query}` });
      expect(res.statusCode, query).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
    const badId = await t.app.server.inject({ url: '/calls/not-an-id' });
    expect(badId.statusCode).toBe(400);
  });

  it('carries the session cost through an export and import, but not the records', async () => {
    t.fake!.script({ content: 'Priced.', usage: { prompt_tokens: 1_000, completion_tokens: 0 } });
    const { sessionId } = (await chat({ message: 'price me' })).json();
    const exported = await t.app.server.inject({ url: `/sessions/${sessionId}/export` });
    expect(exported.statusCode).toBe(200);
    const imported = await t.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: { 'content-type': 'application/x-ndjson' },
      payload: exported.body,
    });
    expect(imported.statusCode, imported.body).toBe(201);
    const copy = imported.json().session;
    expect(copy.cost).toBeCloseTo(0.002, 12);
    expect((await listCalls(copy.id)).calls).toEqual([]);
  });

  it('deletes the records with their session', async () => {
    const { sessionId } = (await chat({ message: 'bye' })).json();
    const [call] = (await listCalls(sessionId)).calls;
    const deleted = await t.app.server.inject({ method: 'DELETE', url: `/sessions/${sessionId}` });
    expect(deleted.statusCode).toBe(204);
    const gone = await t.app.server.inject({ url: `/calls/${call!.id}` });
    expect(gone.statusCode).toBe(404);
  });
});

describe('records turned off', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      cairnJson: { records: { enabled: false } },
      mainModel: { pricing: { inputPerMTok: 1, outputPerMTok: 1 } },
    });
  });
  afterAll(() => t.close());

  it('stores no call but still sums the session cost', async () => {
    t.fake!.script({ content: 'ok', usage: { prompt_tokens: 500, completion_tokens: 500 } });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hi' },
    });
    const { sessionId, usage } = res.json();
    expect(usage.cost).toBeCloseTo(0.001, 12);
    const calls = await t.app.server.inject({ url: `/sessions/${sessionId}/calls` });
    expect(calls.json().calls).toEqual([]);
    const session = (await t.app.server.inject({ url: `/sessions/${sessionId}` })).json().session;
    expect(session.cost).toBeCloseTo(0.001, 12);
  });

  it('reports a null cost when the role has no pricing', async () => {
    const unpriced = await startTestApp({});
    try {
      const res = await unpriced.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: { message: 'hi' },
      });
      expect(res.json().usage.cost).toBeNull();
      expect(res.json().usage.input_tokens).toBeGreaterThan(0);
    } finally {
      await unpriced.close();
    }
  });
});

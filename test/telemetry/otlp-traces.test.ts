/**
 * OpenTelemetry traces, end to end: the real app exports over OTLP/HTTP to a
 * receiver of this test's own on 127.0.0.1, which decodes what it gets —
 * protobuf (with protobufjs, from the OTLP field numbers) and JSON — so the
 * span names, the GenAI attributes and the parent-child links are checked as
 * a collector (Jaeger, Langfuse, Tempo) would read them.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import { startReceiver, type ReceivedSpan, type Receiver } from '../helpers/otlp-receiver.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN_ID = '00f067aa0ba902b7';

describe.each(['http/protobuf', 'http/json'] as const)('OTLP traces over %s', (protocol) => {
  let receiver: Receiver;
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
    await receiver.close();
  });

  async function start(
    env: Record<string, string> = {},
    options: Parameters<typeof startTestApp>[0] = {},
  ): Promise<TestApp> {
    receiver = await startReceiver();
    t = await startTestApp({
      cairnJson: { telemetry: { otlp: { endpoint: receiver.url, protocol } } },
      env,
      ...options,
    });
    return t;
  }

  /** Closes the app (which flushes its spans) and returns what the receiver decoded. */
  async function exported(): Promise<ReceivedSpan[]> {
    await t!.close();
    t = undefined;
    return receiver.spans;
  }

  it('exports a turn, its model calls and its tool call as GenAI spans in the caller trace', async () => {
    const app = await start();
    app.fake!.script(
      {
        tool_calls: [{ id: 'call_time1', name: 'current_time', arguments: '{}' }],
        usage: { prompt_tokens: 50, completion_tokens: 7 },
      },
      { content: 'It is noon.', usage: { prompt_tokens: 60, completion_tokens: 4 } },
    );
    const res = await app.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      headers: { traceparent: `00-${TRACE_ID}-${CALLER_SPAN_ID}-01` },
      payload: { message: 'What time is it?' },
    });
    expect(res.statusCode).toBe(200);
    const sessionId = res.json().sessionId as string;
    const spans = await exported();
    expect(receiver.contentTypes[0]).toContain(
      protocol === 'http/json' ? 'application/json' : 'application/x-protobuf',
    );

    const turn = spans.find((s) => s.name === 'invoke_agent assistant');
    expect(turn).toBeDefined();
    // The incoming traceparent continues: same trace, the caller's span as parent.
    expect(turn!.traceId).toBe(TRACE_ID);
    expect(turn!.parentSpanId).toBe(CALLER_SPAN_ID);
    expect(turn!.service).toBe('cairn');
    expect(turn!.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': 'assistant',
      'gen_ai.conversation.id': sessionId,
      'gen_ai.usage.input_tokens': 110,
      'gen_ai.usage.output_tokens': 11,
      'cairn.turn.outcome': 'reply',
    });

    const chats = spans.filter((s) => s.name === 'chat test-model');
    expect(chats).toHaveLength(2);
    for (const chat of chats) {
      expect(chat.parentSpanId).toBe(turn!.spanId);
      expect(chat.traceId).toBe(TRACE_ID);
      expect(chat.kind).toBe(3);
      expect(chat.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': 'openai',
        'gen_ai.request.model': 'test-model',
        'gen_ai.response.model': 'test-model',
        'gen_ai.conversation.id': sessionId,
        'gen_ai.conversation.compacted': false,
      });
      // No message content without the opt-in.
      expect(chat.attributes).not.toHaveProperty('gen_ai.input.messages');
    }
    const byReason = Object.fromEntries(
      chats.map((c) => [(c.attributes['gen_ai.response.finish_reasons'] as string[])[0], c]),
    );
    expect(byReason.tool_calls!.attributes).toMatchObject({
      'gen_ai.usage.input_tokens': 50,
      'gen_ai.usage.output_tokens': 7,
    });
    expect(byReason.stop!.attributes['gen_ai.usage.input_tokens']).toBe(60);

    const tool = spans.find((s) => s.name === 'execute_tool current_time');
    expect(tool?.parentSpanId).toBe(turn!.spanId);
    expect(tool?.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'current_time',
      'gen_ai.tool.call.id': 'call_time1',
    });
  });

  it('names the session, the end user and the client key on the turn and tool spans', async () => {
    const app = await start({}, { server: { apiKey: 'trace-admin' } });
    const issued = await app.app.server.inject({
      method: 'POST',
      url: '/keys',
      headers: { authorization: 'Bearer trace-admin' },
      payload: { name: 'front-end' },
    });
    expect(issued.statusCode, issued.body).toBe(201);
    const { key, secret } = issued.json<{ key: { id: string }; secret: string }>();
    app.fake!.script(
      { tool_calls: [{ id: 'call_t', name: 'current_time', arguments: '{}' }] },
      { content: 'Noon.' },
    );
    const res = await app.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      headers: { authorization: `Bearer ${secret}`, 'x-cairn-user': 'user-42' },
      payload: { message: 'What time is it?' },
    });
    expect(res.statusCode, res.body).toBe(200);
    const sessionId = res.json().sessionId as string;
    // The admin's own turn names no user and no key.
    const own = await app.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      headers: { authorization: 'Bearer trace-admin' },
      payload: { message: 'And now?' },
    });
    expect(own.statusCode, own.body).toBe(200);
    const spans = await exported();
    const turns = spans.filter((s) => s.name === 'invoke_agent assistant');
    const keyed = turns.find((s) => s.attributes['gen_ai.conversation.id'] === sessionId);
    const who = { 'session.id': sessionId, 'user.id': 'user-42', 'cairn.key.id': key.id };
    expect(keyed?.attributes).toMatchObject(who);
    const tool = spans.find((s) => s.name === 'execute_tool current_time');
    expect(tool?.attributes).toMatchObject(who);
    const admin = turns.find((s) => s !== keyed);
    expect(admin?.attributes['session.id']).toBe(own.json().sessionId);
    expect(admin?.attributes).not.toHaveProperty('user.id');
    expect(admin?.attributes).not.toHaveProperty('cairn.key.id');
  });

  it('continues the caller trace on the OpenAI-compatible API too', async () => {
    const app = await start();
    const res = await app.app.server.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { traceparent: `00-${TRACE_ID}-${CALLER_SPAN_ID}-01` },
      payload: { model: 'assistant', messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(res.statusCode).toBe(200);
    const spans = await exported();
    const turn = spans.find((s) => s.name === 'invoke_agent assistant');
    expect(turn?.traceId).toBe(TRACE_ID);
    expect(turn?.parentSpanId).toBe(CALLER_SPAN_ID);
    const chat = spans.find((s) => s.name === 'chat test-model');
    expect(chat?.parentSpanId).toBe(turn!.spanId);
  });

  it('puts an automatic compaction under the turn that ran it', async () => {
    const app = await start(
      {},
      {
        agents: {
          assistant: { ...TEST_AGENT, defaultCompaction: { autoThreshold: 50 } },
        },
        mainModel: { contextWindow: 2_000 },
      },
    );
    app.fake!.setDefault((body: { messages: { role: string; content: unknown }[] }) =>
      isSummaryRequest(body) ? { content: 'A short summary.' } : { content: 'ok' },
    );
    let sessionId: string | undefined;
    let compactedTurn = false;
    for (let turn = 0; turn < 10 && !compactedTurn; turn++) {
      const res = await app.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: {
          message: `turn${turn} ${'word '.repeat(250)}`,
          ...(sessionId ? { sessionId } : {}),
        },
      });
      expect(res.statusCode).toBe(200);
      sessionId = res.json().sessionId as string;
      compactedTurn = res.json().compaction !== null;
    }
    expect(compactedTurn, 'no automatic compaction within 10 turns').toBe(true);
    const spans = await exported();
    const compaction = spans.find((s) => s.name === 'cairn.compaction');
    expect(compaction?.attributes['cairn.compaction.trigger']).toBe('auto');
    const turn = spans.find((s) => s.spanId === compaction!.parentSpanId);
    expect(turn?.name).toBe('invoke_agent assistant');
    const summaryCall = spans.find((s) => s.parentSpanId === compaction!.spanId);
    expect(summaryCall?.attributes['cairn.call.purpose']).toBe('summary');
    // The turn's own call after the compaction sees a compacted history.
    const turnCalls = spans.filter(
      (s) => s.parentSpanId === turn!.spanId && s.name.startsWith('chat '),
    );
    expect(turnCalls.at(-1)?.attributes['gen_ai.conversation.compacted']).toBe(true);
  });

  it('exports a compaction span whose child is the summary call, and message content only on opt-in', async () => {
    const app = await start({ OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' });
    app.fake!.setDefault(() => ({ content: 'Fine.' }));
    let sessionId: string | undefined;
    for (const message of ['one', 'two', 'three']) {
      const res = await app.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: { message, ...(sessionId ? { sessionId } : {}) },
      });
      sessionId = res.json().sessionId as string;
    }
    app.fake!.script({ content: 'The summary.' });
    const compacted = await app.app.server.inject({
      method: 'POST',
      url: `/sessions/${sessionId}/compact`,
      payload: {},
    });
    expect(compacted.statusCode).toBe(200);
    const spans = await exported();
    const compaction = spans.find((s) => s.name === 'cairn.compaction');
    expect(compaction?.attributes).toMatchObject({
      'gen_ai.conversation.id': sessionId,
      'cairn.compaction.trigger': 'manual',
      'cairn.compaction.summary_chars': 'The summary.'.length,
    });
    expect(compaction!.attributes['cairn.compaction.messages_folded']).toBeGreaterThan(0);
    const summaryCall = spans.find(
      (s) => s.name.startsWith('chat ') && s.parentSpanId === compaction!.spanId,
    );
    expect(summaryCall?.attributes['cairn.call.purpose']).toBe('summary');
    const turnCall = spans.find(
      (s) => s.name.startsWith('chat ') && s.attributes['cairn.call.purpose'] === 'chat',
    );
    expect(String(turnCall?.attributes['gen_ai.input.messages'])).toContain('one');
    expect(String(turnCall?.attributes['gen_ai.output.messages'])).toContain('Fine.');
  });
});

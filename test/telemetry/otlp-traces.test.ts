/**
 * OpenTelemetry traces, end to end: the real app exports over OTLP/HTTP to a
 * receiver of this test's own on 127.0.0.1, which decodes what it gets —
 * protobuf (with protobufjs, from the OTLP field numbers) and JSON — so the
 * span names, the GenAI attributes and the parent-child links are checked as
 * a collector (Jaeger, Langfuse, Tempo) would read them.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import protobuf from 'protobufjs';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const OTLP_PROTO = `
syntax = "proto3";
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message Resource { repeated KeyValue attributes = 1; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }
message InstrumentationScope { string name = 1; string version = 2; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; Status status = 15;
}
message Status { string message = 2; int32 code = 3; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue {
  oneof value {
    string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
    ArrayValue array_value = 5;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
`;
const ExportRequest = protobuf
  .parse(OTLP_PROTO, { keepCase: false })
  .root.lookupType('ExportTraceServiceRequest');

interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 3 client. */
  kind: number;
  attributes: Record<string, unknown>;
  statusCode: number;
  service: unknown;
}

/* eslint-disable @typescript-eslint/no-explicit-any -- decoded OTLP payloads */
function anyValue(value: any): unknown {
  if (!value) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(anyValue);
  return undefined;
}

function attributesOf(list: any[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, anyValue(kv.value)]));
}

const hex = (id: unknown): string =>
  id instanceof Uint8Array ? Buffer.from(id).toString('hex') : typeof id === 'string' ? id : '';

/** Spans of one export request, in either encoding, as plain objects (JSON ids are hex already). */
function spansOf(request: any): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const resourceSpans of request.resourceSpans ?? []) {
    const service = attributesOf(resourceSpans.resource?.attributes)['service.name'];
    for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
      for (const span of scopeSpans.spans ?? []) {
        spans.push({
          traceId: hex(span.traceId),
          spanId: hex(span.spanId),
          parentSpanId: hex(span.parentSpanId),
          name: span.name,
          kind: span.kind,
          attributes: attributesOf(span.attributes),
          statusCode: span.status?.code ?? 0,
          service,
        });
      }
    }
  }
  return spans;
}
/* eslint-enable @typescript-eslint/no-explicit-any */

interface Receiver {
  url: string;
  spans: ReceivedSpan[];
  contentTypes: string[];
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const spans: ReceivedSpan[] = [];
  const contentTypes: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const type = req.headers['content-type'] ?? '';
      contentTypes.push(type);
      if (req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      const decoded = type.includes('json')
        ? JSON.parse(body.toString('utf8'))
        : ExportRequest.toObject(ExportRequest.decode(body), { longs: String, defaults: false });
      spans.push(...spansOf(decoded));
      res.writeHead(200, { 'content-type': type }).end(type.includes('json') ? '{}' : '');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    contentTypes,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

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

  async function start(env: Record<string, string> = {}): Promise<TestApp> {
    receiver = await startReceiver();
    t = await startTestApp({
      cairnJson: { telemetry: { otlp: { endpoint: receiver.url, protocol } } },
      env,
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

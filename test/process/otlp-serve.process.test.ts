/**
 * Traces from a real `cairn serve` process: with only the standard
 * OTEL_EXPORTER_OTLP_ENDPOINT set, the compiled server loads the SDK, exports
 * a turn's spans over OTLP/HTTP protobuf, and flushes them when it stops on
 * SIGTERM. The model is the built-in offline one, whose calls are recorded
 * with Cairn's own request.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startReceiver, type Receiver } from '../helpers/otlp-receiver.js';
import { TEST_AGENT } from '../helpers/test-app.js';
import { spawnServer } from './spawn-server.js';

describe('cairn serve with OTEL_EXPORTER_OTLP_ENDPOINT', () => {
  let home: string;
  let receiver: Receiver;
  beforeEach(async () => {
    home = mkdtempSync(join(tmpdir(), 'cairn-otlp-serve-'));
    mkdirSync(join(home, 'agents', 'assistant'), { recursive: true });
    writeFileSync(join(home, 'agents', 'assistant', 'agent.json'), JSON.stringify(TEST_AGENT));
    receiver = await startReceiver();
  });
  afterEach(async () => {
    await receiver.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('exports the turn and its model call, and records the call', async () => {
    const server = await spawnServer({
      home,
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SERVICE_NAME: 'cairn-under-test' },
    });
    const res = await fetch(`${server.url}/agents/assistant/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'hello there' }),
    });
    expect(res.status).toBe(200);
    const { sessionId } = (await res.json()) as { sessionId: string };
    const calls = (await (await fetch(`${server.url}/sessions/${sessionId}/calls`)).json()) as {
      calls: { id: string; provider: string }[];
    };
    expect(calls.calls).toHaveLength(1);
    expect(calls.calls[0]!.provider).toBe('offline');
    const record = (await (await fetch(`${server.url}/calls/${calls.calls[0]!.id}`)).json()) as {
      call: { wire: boolean; request: { messages: { content: string }[] } };
    };
    expect(record.call.wire).toBe(false);
    expect(record.call.request.messages.at(-1)?.content).toBe('hello there');

    await server.stop('SIGTERM');
    expect(receiver.contentTypes[0]).toContain('application/x-protobuf');
    const turn = receiver.spans.find((s) => s.name === 'invoke_agent assistant');
    expect(turn?.service).toBe('cairn-under-test');
    expect(turn?.attributes['gen_ai.conversation.id']).toBe(sessionId);
    const chat = receiver.spans.find((s) => s.name === 'chat offline');
    expect(chat?.parentSpanId).toBe(turn!.spanId);
    expect(chat?.attributes['gen_ai.provider.name']).toBe('offline');
  });
});

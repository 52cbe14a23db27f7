/**
 * `inSpan` and the model call's span: what a success adds, what a failure
 * puts on the span (a CairnError's own code and message; anything else
 * INTERNAL, with the caller's wording), and that the span ends either way.
 */
import { describe, expect, it } from 'vitest';
import { CairnError } from '../../src/errors.js';
import { OfflineModel } from '../../src/llm/offline-model.js';
import type { ModelClient } from '../../src/llm/model-client.js';
import { traceModel } from '../../src/telemetry/traced-model.js';
import {
  inSpan,
  type SpanAttributes,
  type TraceSpan,
  type Tracing,
} from '../../src/telemetry/tracing.js';

interface Recorded {
  name: string;
  attributes: SpanAttributes;
  failure?: { code: string; message: string };
  ended: boolean;
}

function recordingSpan(name = 'work'): { span: TraceSpan; record: Recorded } {
  const record: Recorded = { name, attributes: {}, ended: false };
  return {
    record,
    span: {
      setAttributes: (attributes) => Object.assign(record.attributes, attributes),
      fail: (code, message) => (record.failure = { code, message }),
      end: () => (record.ended = true),
    },
  };
}

class RecordingTracing implements Tracing {
  readonly enabled = true;
  readonly captureContent = false;
  readonly spans: Recorded[] = [];
  startSpan(name: string): TraceSpan {
    const { span, record } = recordingSpan(name);
    this.spans.push(record);
    return span;
  }
  async shutdown(): Promise<void> {}
}

describe('inSpan', () => {
  it('adds the attributes of the result and ends the span', async () => {
    const { span, record } = recordingSpan();
    const value = await inSpan(
      span,
      async () => 21,
      (n) => ({ doubled: n * 2 }),
      () => 'x',
    );
    expect(value).toBe(21);
    expect(record).toEqual({ name: 'work', attributes: { doubled: 42 }, ended: true });
  });

  it('fails the span with a CairnError’s code and message, and rethrows it', async () => {
    const { span, record } = recordingSpan();
    const thrown = new CairnError('LLM_TIMEOUT', 'The model did not answer in time.');
    await expect(
      inSpan(
        span,
        () => Promise.reject(thrown),
        () => ({}),
        () => 'never used',
      ),
    ).rejects.toBe(thrown);
    expect(record.failure).toEqual({
      code: 'LLM_TIMEOUT',
      message: 'The model did not answer in time.',
    });
    expect(record.ended).toBe(true);
  });

  it('fails the span as INTERNAL with the caller’s wording for any other error', async () => {
    const { span, record } = recordingSpan();
    await expect(
      inSpan(
        span,
        () => Promise.reject(new Error('disk I/O')),
        () => ({}),
        (err) => `said: ${String(err)}`,
      ),
    ).rejects.toThrow('disk I/O');
    expect(record.failure).toEqual({ code: 'INTERNAL', message: 'said: Error: disk I/O' });
    expect(record.ended).toBe(true);
  });
});

describe('traceModel', () => {
  it('keeps a provider error’s own text off the span', async () => {
    const failing: ModelClient = {
      model: 'm',
      contextWindow: 8_192,
      complete: () => Promise.reject(new Error('POST https://user:secret@example.test failed')),
    };
    const tracing = new RecordingTracing();
    await expect(
      traceModel(failing, tracing, 'openai').complete({ messages: [], purpose: 'chat' }),
    ).rejects.toThrow('secret');
    expect(tracing.spans[0]!.failure).toEqual({
      code: 'INTERNAL',
      message: 'The model call failed.',
    });
    expect(tracing.spans[0]!.ended).toBe(true);
  });

  it('puts the response model and usage on the span of a call that answered', async () => {
    const tracing = new RecordingTracing();
    const response = await traceModel(new OfflineModel(), tracing, 'offline').complete({
      messages: [{ role: 'user', content: 'hello there, offline model' }],
      purpose: 'chat',
    });
    const span = tracing.spans[0]!;
    expect(span.name).toBe('chat offline');
    expect(span.attributes['gen_ai.response.model']).toBe(response.model);
    expect(span.attributes['gen_ai.usage.output_tokens']).toBe(response.usage?.completion_tokens);
    expect(span.failure).toBeUndefined();
    expect(span.ended).toBe(true);
  });
});

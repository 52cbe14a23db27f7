/**
 * The tracing seam: spans on the OpenTelemetry GenAI conventions, seen by the
 * runtime, the model decorator and compaction only through these small
 * types. `NO_TRACING` is what runs unless an OTLP endpoint is configured; the
 * OpenTelemetry SDK sits behind `otel-tracing.ts`, which the composition root
 * imports only then, so a server without tracing never loads it.
 */
import { CairnError } from '../errors.js';

export type SpanAttributes = Record<string, string | number | boolean | string[] | undefined>;

export interface TraceSpan {
  setAttributes(attributes: SpanAttributes): void;
  /** Marks the span failed with a stable error code (`error.type`) and a message. */
  fail(code: string, message: string): void;
  end(): void;
}

export interface SpanStart {
  /** The span this one is a child of. */
  parent?: TraceSpan | undefined;
  /** An incoming W3C `traceparent` header, used when there is no parent span. */
  traceparent?: string | undefined;
  kind?: 'internal' | 'client';
  attributes?: SpanAttributes;
}

export interface Tracing {
  readonly enabled: boolean;
  /** Message content goes on spans (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true). */
  readonly captureContent: boolean;
  startSpan(name: string, start?: SpanStart): TraceSpan;
  /** Exports what is buffered and stops. */
  shutdown(): Promise<void>;
}

const NO_SPAN: TraceSpan = {
  setAttributes: () => undefined,
  fail: () => undefined,
  end: () => undefined,
};

export const NO_TRACING: Tracing = {
  enabled: false,
  captureContent: false,
  startSpan: () => NO_SPAN,
  shutdown: async () => undefined,
};

/**
 * Runs `work` inside `span`: the attributes of its result are added, a
 * throw marks the span failed (a CairnError with its code and message,
 * anything else as INTERNAL with what `internalMessage` says of it), and the
 * span ends either way.
 */
export async function inSpan<T>(
  span: TraceSpan,
  work: () => Promise<T>,
  attributesOf: (result: T) => SpanAttributes,
  internalMessage: (err: unknown) => string,
): Promise<T> {
  try {
    const result = await work();
    span.setAttributes(attributesOf(result));
    return result;
  } catch (err) {
    if (err instanceof CairnError) span.fail(err.code, err.message);
    else span.fail('INTERNAL', internalMessage(err));
    throw err;
  } finally {
    span.end();
  }
}

/** The span of a scope (`ModelCallScope.span`), when it is one. */
export function spanOf(value: unknown): TraceSpan | undefined {
  return typeof value === 'object' && value !== null && 'end' in value && 'fail' in value
    ? (value as TraceSpan)
    : undefined;
}

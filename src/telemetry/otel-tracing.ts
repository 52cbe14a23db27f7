/**
 * `Tracing` on the OpenTelemetry SDK: a tracer provider with a batch span
 * processor exporting over OTLP/HTTP, protobuf or JSON as configured, and the
 * W3C trace-context propagator for an incoming `traceparent`. Imported by the
 * composition root only when an OTLP endpoint is configured.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { OtlpSettings } from '../config/settings.js';
import { VERSION } from '../version.js';
import type { SpanAttributes, SpanStart, TraceSpan, Tracing } from './tracing.js';

/** How long spans wait in the batch before they are sent. */
export const EXPORT_DELAY_MS = 1_000;

class OtelSpan implements TraceSpan {
  constructor(readonly span: Span) {}

  setAttributes(attributes: SpanAttributes): void {
    this.span.setAttributes(defined(attributes));
  }

  fail(code: string, message: string): void {
    this.span.setAttribute('error.type', code);
    this.span.setStatus({ code: SpanStatusCode.ERROR, message });
  }

  end(): void {
    this.span.end();
  }
}

function defined(attributes: SpanAttributes): Attributes {
  const out: Attributes = {};
  for (const [key, value] of Object.entries(attributes)) if (value !== undefined) out[key] = value;
  return out;
}

const propagator = new W3CTraceContextPropagator();

function parentContext(start: SpanStart): Context {
  if (start.parent instanceof OtelSpan) return trace.setSpan(ROOT_CONTEXT, start.parent.span);
  if (start.traceparent !== undefined) {
    const carrier: Record<string, string> = { traceparent: start.traceparent };
    return propagator.extract(ROOT_CONTEXT, carrier, {
      get: (_carrier, key) => carrier[key],
      keys: () => Object.keys(carrier),
    });
  }
  return ROOT_CONTEXT;
}

export function createOtelTracing(settings: OtlpSettings): Tracing {
  const options = { url: settings.tracesUrl, headers: { ...settings.headers } };
  const exporter =
    settings.protocol === 'http/json' ? new JsonExporter(options) : new ProtobufExporter(options);
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({
      'service.name': settings.serviceName,
      'service.version': VERSION,
    }),
    spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: EXPORT_DELAY_MS })],
  });
  // The provider is used directly, never registered globally: no hidden singleton.
  const tracer = provider.getTracer('cairn', VERSION);
  return {
    enabled: true,
    captureContent: settings.captureContent,
    startSpan(name: string, start: SpanStart = {}): TraceSpan {
      const span = tracer.startSpan(
        name,
        {
          kind: start.kind === 'client' ? SpanKind.CLIENT : SpanKind.INTERNAL,
          attributes: defined(start.attributes ?? {}),
        },
        parentContext(start),
      );
      return new OtelSpan(span);
    },
    async shutdown(): Promise<void> {
      await provider.forceFlush();
      await provider.shutdown();
    },
  };
}

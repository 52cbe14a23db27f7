/**
 * A turn's trace, kept beside the turn rather than inside it: an
 * `invoke_agent` span per turn, ended with the turn's usage and outcome, and
 * an `execute_tool` span per tool call the loop announces, ended with its
 * result. The engine tells it the loop's events and the turn's end; with
 * tracing off it costs a no-op span and nothing per event.
 */
import type { TokenUsage } from '../llm/messages.js';
import { NO_TRACING, type TraceSpan, type Tracing } from '../telemetry/tracing.js';
import type { LoopEvent } from './loop.js';
import { errorCodeOf } from './turn-observer.js';
import { publicOutcome, stopError, type TurnOutcome } from './turn-outcome.js';

export interface TracedTurn {
  /** The turn's span: the parent of its tool calls' and compactions' spans. */
  readonly span: TraceSpan;
  /** Told every loop event: opens and closes the tool calls' spans. */
  onEvent(event: LoopEvent): void;
  /** Ends the spans of calls still open as the loop ends (approval, ask_user, client tools). */
  endOpenToolCalls(): void;
  /** Ends the turn's span with its usage and outcome (a limit or failure marks it failed). */
  end(result: { outcome: TurnOutcome; usage: TokenUsage } | undefined): void;
}

export interface TurnTraceScope {
  agentName: string;
  sessionId: string;
  /** The client key that owns the session (null for the admin). */
  ownerKey?: string | null;
  /** The end user the key named for the session (null when none). */
  endUser?: string | null;
  traceparent?: string | undefined;
}

/**
 * Who the turn is for, as trace backends read it: `session.id` (Langfuse's
 * sessions view, beside the GenAI `gen_ai.conversation.id`), `user.id` the
 * end user when the key named one, and `cairn.key.id` the client key.
 */
function whoseTurn(turn: TurnTraceScope): Record<string, string> {
  return {
    'session.id': turn.sessionId,
    ...(turn.endUser ? { 'user.id': turn.endUser } : {}),
    ...(turn.ownerKey ? { 'cairn.key.id': turn.ownerKey } : {}),
  };
}

export function traceTurn(tracing: Tracing = NO_TRACING, turn: TurnTraceScope): TracedTurn {
  const span = tracing.startSpan(`invoke_agent ${turn.agentName}`, {
    traceparent: turn.traceparent,
    attributes: {
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': turn.agentName,
      'gen_ai.conversation.id': turn.sessionId,
      ...whoseTurn(turn),
    },
  });
  // Tool calls the loop announced and has not finished: each has its span.
  const toolSpans = new Map<string, TraceSpan>();
  return {
    span,
    onEvent(event) {
      if (!tracing.enabled) return;
      if (event.type === 'tool_call') {
        toolSpans.set(
          event.call.id,
          tracing.startSpan(`execute_tool ${event.call.function.name}`, {
            parent: span,
            attributes: {
              'gen_ai.operation.name': 'execute_tool',
              'gen_ai.tool.name': event.call.function.name,
              'gen_ai.tool.call.id': event.call.id,
              'gen_ai.conversation.id': turn.sessionId,
              ...whoseTurn(turn),
            },
          }),
        );
      } else if (event.type === 'tool_result') {
        const toolSpan = toolSpans.get(event.callId);
        if (!toolSpan) return;
        if (event.isError) toolSpan.fail('TOOL_ERROR', 'The tool call failed.');
        toolSpan.end();
        toolSpans.delete(event.callId);
      }
    },
    endOpenToolCalls() {
      for (const toolSpan of toolSpans.values()) {
        toolSpan.setAttributes({ 'cairn.tool.outcome': 'not finished in this turn' });
        toolSpan.end();
      }
      toolSpans.clear();
    },
    end(result) {
      if (result) {
        span.setAttributes({
          'gen_ai.usage.input_tokens': result.usage.input_tokens,
          'gen_ai.usage.output_tokens': result.usage.output_tokens,
          'cairn.turn.outcome': publicOutcome(result.outcome),
        });
        const err = stopError(result.outcome);
        if (err !== undefined)
          span.fail(errorCodeOf(err), err instanceof Error ? err.message : 'The turn failed.');
      }
      span.end();
    },
  };
}

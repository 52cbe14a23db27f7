/**
 * What the next model call on a session would get, without running a turn:
 * the built context (system, summary pair, raw tail) as sent, with old tool
 * results cleared, the list of those cleared and, counted apart, what
 * automatic recall would add for the newest user message. Read by
 * `GET /sessions/:id/context` and the compaction preview; writes nothing.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { SessionRow } from '../store/store.js';
import type { BuiltContext, ContextBuilder } from './context-builder.js';
import type { ContextRecall } from './context-guard.js';
import { storedClearedResults } from './tool-result-clearing.js';
import { Turn, type TurnDeps } from './turn.js';

export interface ContextPreviewDeps {
  store: TurnDeps['store'];
  events: TurnDeps['events'];
  context: ContextBuilder;
  recall?: ContextRecall;
  /** The main model's context window (old tool results are cleared in batches sized by it). */
  contextWindow?: number;
}

export async function previewContext(
  deps: ContextPreviewDeps,
  session: SessionRow,
  agent: AgentConfig,
): Promise<BuiltContext> {
  const built = await deps.context.build(session, agent);
  // A turn that never begins: recall reads the session through it, nothing is stored.
  const turn = new Turn(session, agent, {
    store: deps.store,
    events: deps.events,
    context: deps.context,
    ...(deps.recall ? { recall: deps.recall } : {}),
    ...(deps.contextWindow !== undefined ? { contextWindow: deps.contextWindow } : {}),
  });
  const recalled = deps.recall
    ? (await deps.recall.recall(turn, built.messages, { preview: true })).done
    : null;
  const cleared = turn.clearing?.plan(built.messages) ?? [];
  return {
    ...built,
    messages: turn.clearing ? turn.clearing.apply(built.messages, cleared) : built.messages,
    cleared: storedClearedResults(cleared, built.tail).map(({ result, message }) => ({
      seq: message.seq,
      toolCallId: result.toolCallId,
      tool: result.tool,
      tokens: result.tokens,
    })),
    ...(recalled ? { recall: recalled } : {}),
  };
}

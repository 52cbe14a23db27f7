/**
 * What the next model call on a session would get, without running a turn:
 * the built context (system, summary pair, raw tail) and, counted apart,
 * what automatic recall would add for the newest user message. Read by
 * `GET /sessions/:id/context` and the compaction preview; writes nothing.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { SessionRow } from '../store/store.js';
import type { BuiltContext, ContextBuilder } from './context-builder.js';
import type { ContextRecall } from './context-guard.js';
import { Turn, type TurnDeps } from './turn.js';

export interface ContextPreviewDeps {
  store: TurnDeps['store'];
  events: TurnDeps['events'];
  context: ContextBuilder;
  recall?: ContextRecall;
}

export async function previewContext(
  deps: ContextPreviewDeps,
  session: SessionRow,
  agent: AgentConfig,
): Promise<BuiltContext> {
  const built = await deps.context.build(session, agent);
  if (!deps.recall) return built;
  // A turn that never begins: recall reads the session through it, nothing is stored.
  const turn = new Turn(session, agent, {
    store: deps.store,
    events: deps.events,
    context: deps.context,
  });
  const { done } = await deps.recall.recall(turn, built.messages, { preview: true });
  return done ? { ...built, recall: done } : built;
}

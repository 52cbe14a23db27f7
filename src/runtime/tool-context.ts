/**
 * What a tool call gets of the run it belongs to: the session and agent, a
 * read of the message log, the memory port, and the run's depth, lineage and
 * subagent budget. The ports are Cairn's own, not the store: an agent-folder
 * tool is the agent author's code, and its writes go through the slot's
 * write port, refused once the slot is lost.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { MemoryStore, SessionRow } from '../store/store.js';
import type { HistorySearch, RunBudget, ToolContext } from '../tools/tool.js';
import type { StoreReader, TurnWrites } from './turn-writes.js';

/** How many subagents one top-level run (with everything under it) may start. */
export const SUBAGENTS_PER_RUN = 10;

/** A tool call's context but for what each call adds (its id and signal). */
export type RunToolContext = Omit<ToolContext, 'callId' | 'signal'>;

/** Where in a run a tool call is made. */
export interface RunPosition {
  depth?: number;
  /** Agent names of the sessions above this one (subagents). */
  lineage?: readonly string[];
  /** The run's budget, shared with subagents; a new one for a top-level turn. */
  budget?: RunBudget;
  /** The task the run belongs to: memory writes are refused once a peer took it over. */
  runningTask?: string;
}

export function toolContextOf(
  store: Pick<StoreReader, 'searchHistory' | 'listMemory'>,
  writes: Pick<TurnWrites, 'putMemory' | 'deleteMemory'>,
  session: SessionRow,
  agent: AgentConfig,
  run: RunPosition,
): RunToolContext {
  return {
    sessionId: session.id,
    agentName: agent.name,
    history: historyPort(store),
    memory: memoryOfRun(store, writes, run.runningTask),
    depth: run.depth ?? 0,
    lineage: [...(run.lineage ?? []), agent.name],
    budget: run.budget ?? { subagentsLeft: SUBAGENTS_PER_RUN },
  };
}

/**
 * The one read of the message log a tool gets. A port of its own, not the
 * store typed narrowly: an agent-folder tool is the agent author's code.
 */
function historyPort(store: HistorySearch): HistorySearch {
  return { searchHistory: (...args) => store.searchHistory(...args) };
}

/**
 * The memory port of a run: reads from the store, writes through the slot's
 * port — refused once the session's slot is lost (`SESSION_LOCK_LOST`: a
 * peer may run the session now), and a task run's once a peer took the task
 * over.
 */
function memoryOfRun(
  store: Pick<StoreReader, 'listMemory'>,
  writes: Pick<TurnWrites, 'putMemory' | 'deleteMemory'>,
  runningTask: string | undefined,
): MemoryStore {
  const ifTask = runningTask === undefined ? {} : { runningTask };
  return {
    listMemory: (agentName, query, limit) => store.listMemory(agentName, query, limit),
    putMemory: (agentName, key, content) => writes.putMemory(agentName, key, content, ifTask),
    deleteMemory: (agentName, key) => writes.deleteMemory(agentName, key, ifTask),
  };
}

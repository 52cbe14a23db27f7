/**
 * The seam between a running turn and automatic compaction: what the turn
 * offers (`GuardedTurn`, implemented by `Turn`) and the hook a guard plugs in
 * (`ContextGuard`, implemented by compaction's `AutoCompaction`). The runtime
 * owns both types, so compaction depends on the runtime and never the reverse.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { ChatMessage, StoredMessage } from '../llm/messages.js';
import type { ModelClient, ModelRequest } from '../llm/model-client.js';
import type { SessionRow } from '../store/store.js';
import type { ToolResultClearing } from './tool-result-clearing.js';
import type { TurnWrites } from './turn-writes.js';

/** What one compaction during a turn did, as the turn's report sums it. */
export interface CompactionDone {
  /** `background`: a summary prepared off the turn, landed at its start. Default `auto`. */
  trigger?: 'auto' | 'background';
  compactedCount: number;
  newSize: number;
  input_tokens: number;
  output_tokens: number;
}

/** A running turn as a context guard sees it. */
export interface GuardedTurn {
  /** The session as last read (usage, pointer and suspension change between calls). */
  readonly session: SessionRow;
  readonly agent: AgentConfig;
  /** Seq of the message that started the running turn; compaction stays before it. */
  readonly turnStartSeq: number;
  /** The running turn's trace span, when tracing is on. */
  readonly traceSpan?: unknown;
  /** The task the turn runs: a compaction it triggers is refused once the task was taken over. */
  readonly runningTask?: string;
  /** Which old tool results go out as placeholders (null: the agent turned clearing off). */
  readonly clearing: ToolResultClearing | null;
  /** `messages` as the request sends them: old tool results cleared. */
  forRequest(messages: readonly ChatMessage[]): ChatMessage[];
  /** The stored non-system messages after `seq`, at most `limit` (from memory when the turn has them). */
  messagesAfter(seq: number, limit: number): Promise<StoredMessage[]>;
  /** Re-reads the session and builds its context afresh (system, summary, tail). */
  rebuild(): Promise<ChatMessage[]>;
  /** The stored messages before the running turn and the summary that precedes them. */
  historyBeforeTurn(): Promise<{ summary: string | null; messages: StoredMessage[] }>;
  /** The context with `summary` standing in for everything before the running turn (in memory only). */
  rebuildWithSummary(summary: string): Promise<ChatMessage[]>;
  /** Told about every compaction that ran during the turn. */
  recordCompaction(done: CompactionDone): void;
  /**
   * Throws BUDGET_EXCEEDED when a summary claiming `claim` tokens would take
   * the turn past its agent's limit; called before the summary is asked for.
   */
  holdSummary?(claim: number): void;
  /**
   * Throws BUDGET_EXCEEDED when a call re-sent after the provider refused it
   * as too long would take the turn or session past its agent's limit.
   */
  holdRetry?(request: ModelRequest): void;
  /** The turn's write port: a compaction the turn runs lands through it (refused once the slot is lost). */
  readonly writes: TurnWrites;
}

/** What automatic recall added to one model call. */
export interface RecallDone {
  /** Seqs of the compacted messages put back in the request, oldest first. */
  seqs: number[];
  /** Estimated tokens of the recalled block. */
  tokens: number;
}

/** The hook automatic recall plugs into: runs after the guard, right before each model call. */
export interface ContextRecall {
  /** The call's messages with recalled messages added (never stored), and what was added. */
  recall(
    turn: GuardedTurn,
    messages: ChatMessage[],
    options?: { preview?: boolean },
  ): Promise<{ messages: ChatMessage[]; done: (RecallDone & { block: ChatMessage }) | null }>;
}

/** The hook automatic compaction plugs into. */
export interface ContextGuard {
  /** Called before every model call; may compact and return a rebuilt context. */
  beforeModelCall(turn: GuardedTurn, messages: ChatMessage[]): Promise<ChatMessage[]>;
  /** Decorates the model with context-overflow recovery for `turn`. */
  guardModel(model: ModelClient, turn: GuardedTurn): ModelClient;
  /**
   * At the turn's start, before its context is built: lands a summary
   * prepared off an earlier turn, through the turn's door. Returns the
   * session as the landing left it, or undefined when nothing landed.
   */
  atTurnStart?(turn: GuardedTurn): Promise<(CompactionDone & { session: SessionRow }) | undefined>;
  /** Once the turn has replied: may start preparing the next summary off the turn (returns at once). */
  afterTurn?(turn: GuardedTurn): void;
}

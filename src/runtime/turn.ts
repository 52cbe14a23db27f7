/**
 * One turn over a session: the state that the loop and the context guard
 * share while it runs — the session as last read, the messages it stored, the
 * pointer its context was built at, and what automatic compaction did. The
 * loop sees it as a `LoopTurn`, the guard as a `GuardedTurn`.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { ChatMessage, StoredMessage, TokenUsage } from '../llm/messages.js';
import { missingTrailingResults } from '../llm/normalize-request.js';
import type { ModelRequest } from '../llm/model-client.js';
import type { SessionRow, VersionedSession } from '../store/store.js';
import type { ContextBuilder } from './context-builder.js';
import type {
  CompactionDone,
  ContextGuard,
  ContextRecall,
  GuardedTurn,
  RecallDone,
} from './context-guard.js';
import type { EventBus } from './event-bus.js';
import type { LoopTurn } from './loop.js';
import type { CallRecorder } from '../records/call-recorder.js';
import { sessionLockLost } from './session-lock.js';
import { SessionMovedError } from '../store/session-moved.js';
import { clearingPolicy, ToolResultClearing } from './tool-result-clearing.js';
import type { StoreReader, TurnWrites } from './turn-writes.js';
import { CairnError } from '../errors.js';

/** What automatic compaction did during one turn (the chat envelope's `compaction`). */
export interface TurnCompactionReport {
  /** `background` when the turn's only compaction was a prepared summary landed at its start. */
  trigger: 'auto' | 'background';
  runs: number;
  compactedCount: number;
  newSize: number;
  /** Token usage of the turn's summary calls, summed. */
  input_tokens: number;
  output_tokens: number;
}

/** What automatic recall put in the turn's model calls (the chat envelope's `recall`). */
export interface TurnRecallReport {
  /** Model calls of the turn that carried a recalled block. */
  calls: number;
  /** Seqs of every compacted message recalled during the turn, oldest first. */
  seqs: number[];
  /** Estimated tokens of the blocks, summed over the calls. */
  tokens: number;
}

export interface TurnDeps {
  /** Reads only: the turn writes through `writes`. */
  store: Pick<StoreReader, 'findSession' | 'loadContext' | 'listTail'>;
  events: Pick<EventBus, 'publish'>;
  context: ContextBuilder;
  guard?: ContextGuard;
  /** Puts recalled compacted messages into each model call. */
  recall?: ContextRecall;
  /** Told each time a model call gets recalled messages (the stream's `recall` event). */
  onRecall?: (done: RecallDone) => void;
  /**
   * The write port of the session's slot: refused once the slot is lost
   * (another instance may be writing to the session now) or over. A turn
   * without one (a context preview) stores nothing.
   */
  writes?: TurnWrites;
  /** The task this turn runs: each append checks it is still this instance's running task. */
  runningTask?: string;
  /** The model calls noted for the session, written with the messages they produced. */
  records?: Pick<CallRecorder, 'takeFor'>;
  /** The turn's trace span: a compaction the turn runs is its child. */
  span?: unknown;
  /**
   * The version of the session row the turn starts from, when the row was
   * remembered from the slot's work before rather than read: the turn's first
   * write is conditioned on it, and fails with `SessionMovedError`, writing
   * nothing, when the row changed since.
   */
  ifVersion?: string;
  /**
   * Asks the lock whether the slot is still held (a lock shared between
   * instances): a write that found the row changed since the turn's last
   * write asks before it retries.
   */
  confirmSlot?: () => Promise<boolean>;
  /** The main model's context window: old tool results are cleared in batches sized by it. */
  contextWindow?: number;
}

export class Turn implements LoopTurn, GuardedTurn {
  /** The messages this turn stored, in order. */
  readonly stored: StoredMessage[] = [];
  private current: SessionRow;
  private startSeq = Number.MAX_SAFE_INTEGER;
  /**
   * The pointer the loop's messages were built at: when a compaction lands
   * mid-turn (automatic, overflow recovery or manual), the next call rebuilds.
   */
  private builtAtSeq: number;
  private report: TurnCompactionReport | null = null;
  /** The recalled block of the last prepared call: taken out before the next one. */
  private recallBlock: ChatMessage | undefined;
  private lastRecalled: RecallDone | null = null;
  private recallReport: TurnRecallReport | null = null;
  /**
   * True while the session row is as read under the slot, with only this
   * turn's appends since: the first model call needs no re-read.
   */
  private sessionFresh = true;
  /** The version the next write is conditioned on: the remembered row's, until a write succeeds. */
  private unverified: string | undefined;
  /**
   * The version the turn's last append left the row at (stores that version
   * rows): the next append is fenced by it, in the append's own statement.
   */
  private fence: string | undefined;
  /** The session row as this turn's last append left it (stores that version rows). */
  private lastWritten: VersionedSession | undefined;
  readonly clearing: ToolResultClearing | null;
  /** Set when the agent has token limits: holds a summary's claim against the turn's. */
  summaryHold: ((claim: number) => void) | undefined;
  /** Holds a retried call against the agent's token limits (set by the engine when it has any). */
  retryHold: ((request: ModelRequest) => void) | undefined;

  constructor(
    session: SessionRow,
    readonly agent: AgentConfig,
    private readonly deps: TurnDeps,
  ) {
    this.current = session;
    this.builtAtSeq = session.compact_seq;
    this.unverified = deps.ifVersion;
    // Without the window (a turn built for a test of its parts) nothing is cleared.
    const compaction = deps.contextWindow === undefined ? undefined : agent.defaultCompaction;
    const policy =
      compaction === undefined
        ? null
        : clearingPolicy(
            compaction.pruneToolResults,
            deps.contextWindow!,
            deps.recall !== undefined && compaction.recall.enabled,
          );
    this.clearing = policy ? new ToolResultClearing(policy) : null;
  }

  get session(): SessionRow {
    return this.current;
  }

  get traceSpan(): unknown {
    return this.deps.span;
  }

  get runningTask(): string | undefined {
    return this.deps.runningTask;
  }

  get turnStartSeq(): number {
    return this.startSeq;
  }

  /** The session row as the turn's last append left it, with its version; undefined on SQLite. */
  get written(): VersionedSession | undefined {
    return this.lastWritten;
  }

  /**
   * Starts the turn over from `session`, as read anew: its remembered row
   * had changed, so its first write was refused and nothing was stored.
   */
  restart(session: SessionRow): void {
    if (this.stored.length > 0) throw new Error('restart: the turn has stored messages already');
    this.current = session;
    this.builtAtSeq = session.compact_seq;
    this.sessionFresh = true;
    this.unverified = undefined;
    this.fence = undefined;
  }

  /** What automatic compaction did during the turn; null if it did not run. */
  get compaction(): TurnCompactionReport | null {
    return this.report;
  }

  /** What automatic recall put in the turn's calls; null if it recalled nothing. */
  get recall(): TurnRecallReport | null {
    return this.recallReport;
  }

  recalledSeqs(): readonly number[] | undefined {
    return this.lastRecalled?.seqs;
  }

  /**
   * Builds the context, repairs interrupted tool calls and persists `input`;
   * returns the messages of the first model call.
   */
  async begin(
    input: ChatMessage[],
    pendingCallIds?: ReadonlySet<string>,
    opening: ChatMessage[] = [],
  ): Promise<ChatMessage[]> {
    // A summary prepared off an earlier turn lands first, so this turn's
    // context is built on it. The landing read the row afresh: the turn goes
    // on from that row, with no condition left from a remembered one.
    const landed = await this.deps.guard?.atTurnStart?.(this);
    if (landed) {
      this.current = landed.session;
      this.builtAtSeq = landed.session.compact_seq;
      this.unverified = undefined;
      this.fence = undefined;
      this.recordCompaction(landed);
    }
    // A new conversation's posted history is this turn's first write, under
    // the same lock check as the rest; its context is built with it.
    if (opening.length > 0) {
      await this.persist(opening);
      await this.refresh();
    }
    const built = await this.deps.context.build(this.current, this.agent);
    const repairs = missingTrailingResults(built.tail, pendingCallIds);
    // Persisted, so the history itself is whole again and the next request is
    // not rejected for a call with no result (a crash or cancel mid-tool).
    if (repairs.length > 0) await this.persist(repairs);
    const before = this.stored.length;
    await this.persist(input);
    this.startSeq = this.stored[before]?.seq ?? Number.MAX_SAFE_INTEGER;
    return [...built.messages, ...repairs, ...input];
  }

  async persist(messages: ChatMessage[], usage?: TokenUsage, promptTokens?: number): Promise<void> {
    // Messages, their message.created events and the records of the model
    // calls that produced them commit together.
    const append = async (ifVersion: string | undefined) => {
      const { writes } = this;
      const records = this.deps.records?.takeFor(this.current.id);
      try {
        const done = await writes.appendMessages(messages, {
          ...(usage ? { usage } : {}),
          ...(promptTokens !== undefined ? { promptTokens } : {}),
          ...(this.deps.runningTask !== undefined ? { runningTask: this.deps.runningTask } : {}),
          ...(records ? { modelCalls: records.calls } : {}),
          ...(ifVersion !== undefined ? { ifVersion } : {}),
        });
        records?.settle(true);
        return done;
      } catch (err) {
        records?.settle(false);
        throw err;
      }
    };
    const written = await append(this.unverified ?? this.fence).catch(async (err: unknown) => {
      // A remembered row that changed: the engine reads the session and starts over.
      if (!(err instanceof SessionMovedError) || this.unverified !== undefined) throw err;
      // The row changed since this turn's last write: a writer that takes no
      // lock (a title, a manual or this turn's own compaction) — or a peer
      // that took the slot before this instance noticed losing it. The lock
      // tells which; only then does the write go ahead.
      if (!(await (this.deps.confirmSlot?.() ?? Promise.resolve(true)))) throw sessionLockLost();
      return append(undefined);
    });
    if (written.messages.length > 0) {
      // The row was as remembered: later writes need no condition beyond the head's.
      this.unverified = undefined;
      this.lastWritten = written.session;
      this.fence = written.session?.version;
    }
    this.stored.push(...written.messages);
    this.deps.context.appended(this.current.id, written.messages);
    this.deps.events.publish(written.events);
  }

  /**
   * The one door for this turn's writes: refused with `SESSION_LOCK_LOST`
   * once the session's slot is lost, as a peer may be writing to the session.
   */
  get writes(): TurnWrites {
    const { writes } = this.deps;
    if (!writes) throw new CairnError('INTERNAL', 'A turn built without a slot stores nothing.');
    return writes;
  }

  async prepare(messages: ChatMessage[]): Promise<ChatMessage[]> {
    const { guard, recall } = this.deps;
    // The last call's recalled block is replaced, never kept.
    const block = this.recallBlock;
    const base = block ? messages.filter((m) => m !== block) : messages;
    this.recallBlock = undefined;
    this.lastRecalled = null;
    if (!guard && !recall) return base;
    // Usage, pointer and suspension change between calls (a manual compaction
    // does not wait for the slot): re-read once per call after the first.
    if (this.sessionFresh) this.sessionFresh = false;
    else await this.refresh();
    const fresh = this.current.compact_seq === this.builtAtSeq ? base : await this.build();
    const guarded = guard ? await guard.beforeModelCall(this, fresh) : fresh;
    if (!recall) return guarded;
    const { messages: out, done } = await recall.recall(this, guarded);
    if (done) {
      this.recallBlock = done.block;
      this.noteRecall({ seqs: done.seqs, tokens: done.tokens });
    }
    return out;
  }

  forRequest(messages: readonly ChatMessage[]): ChatMessage[] {
    if (!this.clearing) return [...messages];
    return this.clearing.apply(messages, this.clearing.plan(messages));
  }

  async rebuild(): Promise<ChatMessage[]> {
    await this.refresh();
    return this.build();
  }

  async messagesAfter(seq: number, limit: number): Promise<StoredMessage[]> {
    const { epoch, compact_seq: compactSeq, id } = this.current;
    const kept = this.deps.context.loadedAfter(id, { epoch, compactSeq }, seq);
    if (kept && kept.length <= limit) return kept;
    return this.deps.store.listTail(id, seq, limit);
  }

  async historyBeforeTurn(): Promise<{ summary: string | null; messages: StoredMessage[] }> {
    await this.refresh();
    const { tail } = await this.deps.store.loadContext(this.current.id, this.current.compact_seq);
    return {
      summary: this.current.compact_summary,
      messages: tail.filter((m) => m.seq < this.startSeq),
    };
  }

  async rebuildWithSummary(summary: string): Promise<ChatMessage[]> {
    const built = await this.deps.context.build(this.current, this.agent, {
      summary,
      fromSeq: this.startSeq,
    });
    return built.messages;
  }

  holdSummary(claim: number): void {
    this.summaryHold?.(claim);
  }

  holdRetry(request: ModelRequest): void {
    this.retryHold?.(request);
  }

  recordCompaction(done: CompactionDone): void {
    const soFar = this.report;
    const trigger = done.trigger ?? 'auto';
    this.report = {
      // Any automatic run makes the turn's report `auto`: the turn waited for it.
      trigger: soFar?.trigger === 'auto' || trigger === 'auto' ? 'auto' : 'background',
      runs: (soFar?.runs ?? 0) + 1,
      compactedCount: (soFar?.compactedCount ?? 0) + done.compactedCount,
      newSize: done.newSize,
      input_tokens: (soFar?.input_tokens ?? 0) + done.input_tokens,
      output_tokens: (soFar?.output_tokens ?? 0) + done.output_tokens,
    };
  }

  private noteRecall(done: RecallDone): void {
    this.lastRecalled = done;
    const soFar = this.recallReport;
    const seqs = new Set([...(soFar?.seqs ?? []), ...done.seqs]);
    this.recallReport = {
      calls: (soFar?.calls ?? 0) + 1,
      seqs: [...seqs].sort((a, b) => a - b),
      tokens: (soFar?.tokens ?? 0) + done.tokens,
    };
    this.deps.onRecall?.(done);
  }

  /** Re-reads the session: usage, pointer and suspension change between calls. */
  private async refresh(): Promise<void> {
    this.current = (await this.deps.store.findSession(this.current.id)) ?? this.current;
  }

  private async build(): Promise<ChatMessage[]> {
    this.builtAtSeq = this.current.compact_seq;
    return (await this.deps.context.build(this.current, this.agent)).messages;
  }
}

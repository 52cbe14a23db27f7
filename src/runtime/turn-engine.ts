/**
 * The turn engine: the one holder of the sessions' lock, and the one place a
 * turn runs. A caller takes a session's slot with `withTurnSlot` and gets the
 * one way to run a turn in it; anything else that must not interleave with a
 * turn (a reset, a close, a cancel's answer to an open call) runs through
 * `exclusive`. Every write a turn makes goes through the slot's `TurnWrites`,
 * opened here under the lock and closed with it, which refuses it once the
 * slot is lost (on Postgres, when the lock's connection drops, a peer may
 * already run the session). The engine itself holds only the store's reads.
 * A turn's end is resolved once into a
 * `TurnOutcome`; a turn run for a person waiting on the request holds a stop
 * chat-style here, through the same door.
 */
import type { CallRecorder } from '../records/call-recorder.js';
import type { AgentConfig } from '../agents/agent-config.js';
import { joinSignals } from '../llm/abort-link.js';
import type { ChatMessage, StoredMessage, TokenUsage, ToolCall } from '../llm/messages.js';
import type { ModelClient } from '../llm/model-client.js';
import { SessionMovedError } from '../store/session-moved.js';
import type { SessionRow, VersionedSession } from '../store/store.js';
import type { Tracing } from '../telemetry/tracing.js';
import type { RunBudget, Tool } from '../tools/tool.js';
import { assertOfferable, type ToolCatalog } from '../tools/tool-catalog.js';
import type { ToolSet } from '../tools/tool-set.js';
import type { ApprovalTimer } from './approval-timeouts.js';
import { holdInChat, type ChatHold } from './chat-hold.js';
import { ContextBuilder, type BuiltContext } from './context-builder.js';
import { previewContext } from './context-preview.js';
import type { ContextGuard, ContextRecall } from './context-guard.js';
import type { EventBus } from './event-bus.js';
import { runApprovedToolCall, runLoop, type LoopEvent, type LoopOptions } from './loop.js';
import { claimedTokens, type Budget } from './budget.js';
import { reportOutage } from './outage-report.js';
import { refuseIfTaskWaiting, requireUsable } from './session-rules.js';
import type { SessionLock, SlotTenure } from './session-lock.js';
import { sessionTokens, TurnBudget } from './turn-budget.js';
import { Turn, type TurnCompactionReport, type TurnRecallReport } from './turn.js';
import { UNKNOWN_TOOL, type TurnObserver } from './turn-observer.js';
import { toolContextOf } from './tool-context.js';
import { traceTurn, type TracedTurn } from './turn-tracing.js';
import { outcomeOf, outcomeOfError, type TurnOutcome } from './turn-outcome.js';
import type { StoreReader, TurnWriter, TurnWrites } from './turn-writes.js';

export interface TurnEngineDeps {
  /** Reads only: what a turn writes goes through the port `writer` opens in the slot. */
  store: StoreReader;
  /** Opens the write port of each slot this engine holds. */
  writer: Pick<TurnWriter, 'open'>;
  model: ModelClient;
  tools: ToolCatalog;
  /** Publishes the events a turn's appends committed. */
  events: Pick<EventBus, 'publish'>;
  /** The sessions' lock: held by this engine alone. */
  lock: SessionLock;
  contextGuard?: ContextGuard;
  /** Puts recalled compacted messages into each model call (automatic recall). */
  contextRecall?: ContextRecall;
  /** Adds memory notes or other build-time context to the system messages. */
  systemContext?: (agent: AgentConfig) => Promise<string | undefined>;
  /** Told of tool results (metrics). */
  observer?: Pick<TurnObserver, 'toolResult'>;
  /** An `invoke_agent` span per turn and an `execute_tool` span per tool call. */
  tracing?: Tracing;
  /**
   * Awaited as each turn ends (the call records' write): what a turn cost is
   * on the session once its reply is out. Never throws.
   */
  afterTurn?: () => Promise<void>;
  /** The model calls of a session, written with the messages they produced (the call records). */
  records?: Pick<CallRecorder, 'takeFor'>;
  /** Arms the deadline of a wait for approval of a tool with an approvalTimeout. */
  approvalTimer?: ApprovalTimer;
  /**
   * The session owner's token budget, reserved before each model call; with
   * the output tokens a call claims when it asks for no maximum.
   */
  budget?: { budget: Budget; defaultOutputTokens: number };
}

/** One turn's request, as a caller inside the session's slot gives it. */
export interface TurnRequest {
  /** Messages that start this turn (the user message, or a resumed call's answer). */
  input: ChatMessage[];
  /** Messages stored before the input: a new `/v1` conversation's posted history. */
  opening?: ChatMessage[];
  depth?: number;
  /** Agent names of the sessions above this one (subagents). */
  lineage?: readonly string[];
  /** The run's budget, shared with subagents; a new one for a top-level turn. */
  budget?: RunBudget;
  stream?: boolean;
  signal?: AbortSignal;
  onEvent?: (event: LoopEvent) => void;
  /** Tool-call ids waiting for an answer: not repaired as interrupted. */
  pendingCallIds?: ReadonlySet<string>;
  /** Tools offered for this turn only, beside the agent's (an API client's own tools). */
  extraTools?: readonly Tool[];
  /** Overrides the agent's temperature for this turn (an API client's `temperature`). */
  temperature?: number;
  /** The task this turn runs: it writes only while the task is still this instance's to run. */
  runningTask?: string;
  /** The caller's W3C `traceparent`. */
  traceparent?: string;
  /** Hold a question or an approval chat-style (see `ChatHold`); without it they are returned as they are. */
  holdInChat?: ChatHold;
  /**
   * Called once the turn's input is stored: an id handed to a client from
   * then on names something it can read back.
   */
  onInputStored?: () => void;
}

export interface TurnResult {
  outcome: TurnOutcome;
  /** The turn's tokens (zero when it failed before a model answered). */
  usage: TokenUsage;
  /** The messages the turn stored, in order. */
  stored: StoredMessage[];
  compaction: TurnCompactionReport | null;
  recall: TurnRecallReport | null;
}

export interface SlotOptions {
  /**
   * Refuse with 409 `TASK_WAITING` when a task on the session waits for a
   * person (new input would talk past the question it asked).
   */
  refuseIfTaskWaiting?: boolean;
}

/** Runs one turn on the session whose slot is held; handed out by `withTurnSlot` only. */
export type RunTurn = (request: TurnRequest) => Promise<TurnResult>;

interface SlotTurn extends TurnRequest {
  session: SessionRow;
  agent: AgentConfig;
  /** The slot's write port: refused once the slot is lost or over. */
  writes: TurnWrites;
  /** How the slot checked the session, for a turn that must read it again. */
  slotOptions: SlotOptions;
  /** The remembered row's version, when `session` was not read (see `TurnDeps.ifVersion`). */
  ifVersion?: string;
}

/** A turn's result inside the engine: with the row its last append left, for the next turn. */
interface SlotTurnResult extends TurnResult {
  written: VersionedSession | undefined;
}

const NO_USAGE: TokenUsage = { input_tokens: 0, output_tokens: 0 };

export class TurnEngine {
  private readonly context: ContextBuilder;
  /**
   * The session row each unbroken hold of a shared lock was left with by its
   * last turn: the next turn in that hold starts from it instead of reading
   * the row (one round trip to Postgres fewer), its first write conditioned
   * on the row's version. Gone with the hold.
   */
  private readonly remembered = new WeakMap<SlotTenure, VersionedSession>();

  constructor(private readonly deps: TurnEngineDeps) {
    this.context = new ContextBuilder({
      store: deps.store,
      ...(deps.systemContext ? { systemContext: deps.systemContext } : {}),
    });
  }

  /**
   * Holds `sessionId`'s slot while `work` runs. `work` gets the session
   * re-read under the slot (it may have been closed, reset or compacted while
   * queued), checked usable by `agent` (and free of a waiting task, when
   * asked), the one way to run a turn on it, and the slot's write port for
   * what it writes besides its turns (a task's status after its turn), so
   * such a write lands before the slot is released, never after. A turn run
   * that way stops, failing with `SESSION_LOCK_LOST`, when the slot is lost;
   * the port refuses every write once the slot is lost or `work` returned.
   *
   * Where the lock has been held without a break since a turn left the row
   * (Postgres, turns back to back), the row is not read but remembered: no
   * other instance ran work on the session meanwhile, and no task can have
   * started waiting. What a writer without the lock changed (a title, a
   * manual compaction) shows in the row's version, which the turn's first
   * write is conditioned on; when it changed, the turn reads the session
   * again, checks it anew and starts over, having stored nothing.
   */
  async withTurnSlot<T>(
    sessionId: string,
    agent: AgentConfig,
    work: (session: SessionRow, runTurn: RunTurn, writes: TurnWrites) => Promise<T>,
    options: SlotOptions = {},
  ): Promise<T> {
    return this.deps.lock.run(sessionId, async (slot, tenure) => {
      const kept = tenure && this.remembered.get(tenure);
      if (tenure) this.remembered.delete(tenure);
      const session = kept
        ? requireUsable(kept.row, sessionId, agent)
        : await this.readUsable(sessionId, agent, options);
      let ifVersion = kept ? kept.version : undefined;
      const { writes, end } = this.deps.writer.open(sessionId, slot);
      const runTurn: RunTurn = async (request) => {
        // The turn stops when its caller gives up or the slot is lost.
        const stop = joinSignals(request.signal, slot);
        try {
          const { written, ...result } = await this.runTurn({
            ...request,
            session,
            agent,
            writes,
            signal: stop.signal,
            slotOptions: options,
            ...(ifVersion !== undefined ? { ifVersion } : {}),
          });
          // Only the slot's first turn starts from the remembered row.
          ifVersion = undefined;
          if (tenure) this.remember(tenure, result.outcome, written);
          return result;
        } finally {
          stop.dispose();
        }
      };
      try {
        return await work(session, runTurn, writes);
      } finally {
        end();
      }
    });
  }

  /**
   * Runs `work` holding `sessionId`'s slot, for what must not interleave with
   * a turn. `work` gets the slot's signal, and must write nothing once it is
   * aborted, and the slot's write port for what a turn could write too (a
   * cancelled task's status and the answer to its open call).
   */
  async exclusive<T>(
    sessionId: string,
    work: (slot: AbortSignal, writes: TurnWrites) => Promise<T>,
  ): Promise<T> {
    return this.deps.lock.run(sessionId, async (slot, tenure) => {
      // It may change the row (a reset, a close, an answered call): the next turn reads it.
      if (tenure) this.remembered.delete(tenure);
      const { writes, end } = this.deps.writer.open(sessionId, slot);
      try {
        return await work(slot, writes);
      } finally {
        end();
      }
    });
  }

  /** The session under the slot, read and checked usable by `agent` (and free of a waiting task, when asked). */
  private async readUsable(
    sessionId: string,
    agent: AgentConfig,
    options: SlotOptions,
  ): Promise<SessionRow> {
    const { store } = this.deps;
    // Both in one read: on Postgres one round trip, not two.
    const { session: row, waitingTask } =
      options.refuseIfTaskWaiting === true
        ? await store.findSessionWithWaitingTask(sessionId)
        : { session: await store.findSession(sessionId), waitingTask: undefined };
    const session = requireUsable(row, sessionId, agent);
    refuseIfTaskWaiting(waitingTask);
    return session;
  }

  /**
   * Keeps the row a turn left for the next turn in the same hold — only
   * after a turn that ended with its reply: one that stopped, failed or left
   * something waiting for a person has its next turn read the row.
   */
  private remember(
    tenure: SlotTenure,
    outcome: TurnOutcome,
    written: VersionedSession | undefined,
  ): void {
    if (written !== undefined && (outcome.kind === 'reply' || outcome.kind === 'client-tools'))
      this.remembered.set(tenure, written);
    else this.remembered.delete(tenure);
  }

  /** True while a turn or other slot work runs or waits on `sessionId` in this process. */
  isBusy(sessionId: string): boolean {
    return this.deps.lock.isBusy(sessionId);
  }

  /** Resolves when every piece of slot work queued in this process has settled. */
  async drain(): Promise<void> {
    await this.deps.lock.drain();
  }

  /** The tools a turn of `agent` gets, plus `extra` (names must not clash); throws before anything is stored. */
  async toolsFor(agent: AgentConfig, extra: readonly Tool[] = []): Promise<ToolSet> {
    const tools = (await this.deps.tools.forAgent(agent)).with(extra);
    // A client's own tools count too: the request carries them all.
    assertOfferable(agent.name, tools.size);
    return tools;
  }

  /**
   * The context the next model call on `session` gets: system messages (plus
   * build-time context such as memory), the summary pair, and the raw tail.
   */
  async buildContext(session: SessionRow, agent: AgentConfig): Promise<BuiltContext> {
    const { store, events, contextRecall } = this.deps;
    return previewContext(
      {
        store,
        events,
        context: this.context,
        contextWindow: this.deps.model.contextWindow,
        ...(contextRecall ? { recall: contextRecall } : {}),
      },
      session,
      agent,
    );
  }

  /**
   * Runs a tool call a person approved, on the session it belongs to, and
   * returns its result message (not stored: it is the input of the turn that
   * continues). The caller holds the session's slot.
   */
  async runApprovedCall(input: {
    session: SessionRow;
    agent: AgentConfig;
    call: ToolCall;
    signal?: AbortSignal;
    /** The held slot's write port: once the slot is lost, the tool's writes through it are refused. */
    writes: TurnWrites;
  }): Promise<ChatMessage> {
    const tools = await this.deps.tools.forAgent(input.agent);
    // A peer may run the session now: the call is not run on its behalf.
    input.writes.slot.throwIfAborted();
    return runApprovedToolCall(input.call, {
      tools,
      toolContext: toolContextOf(this.deps.store, input.writes, input.session, input.agent, {}),
      ...(input.signal ? { signal: input.signal } : {}),
      // Counted like the calls the loop runs: an approved call is a tool call too.
      onResult: (isError) =>
        this.deps.observer?.toolResult?.({
          agentName: input.agent.name,
          tool: input.call.function.name,
          isError,
        }),
    });
  }

  /**
   * Runs the loop over a session: repairs interrupted calls, persists the
   * turn's input, injects the summary, runs automatic compaction before each
   * model call, and resolves how the turn ended. Only under the slot.
   */
  private async runTurn(input: SlotTurn): Promise<SlotTurnResult> {
    const trace = traceTurn(this.deps.tracing, {
      agentName: input.agent.name,
      sessionId: input.session.id,
      ownerKey: input.session.owner_key,
      endUser: input.session.end_user,
      traceparent: input.traceparent,
    });
    let result: SlotTurnResult | undefined;
    try {
      result = await this.runTracedTurn(input, trace);
      return result;
    } finally {
      trace.end(result);
      await this.deps.afterTurn?.();
    }
  }

  private async runTracedTurn(input: SlotTurn, trace: TracedTurn): Promise<SlotTurnResult> {
    const { agent } = input;
    const turn = new Turn(input.session, agent, {
      store: this.deps.store,
      events: this.deps.events,
      context: this.context,
      ...(this.deps.contextGuard ? { guard: this.deps.contextGuard } : {}),
      ...(this.deps.contextRecall ? { recall: this.deps.contextRecall } : {}),
      ...(input.onEvent
        ? { onRecall: (done) => input.onEvent?.({ type: 'recall', ...done }) }
        : {}),
      writes: input.writes,
      ...(input.runningTask !== undefined ? { runningTask: input.runningTask } : {}),
      ...(this.deps.records ? { records: this.deps.records } : {}),
      span: trace.span,
      contextWindow: this.deps.model.contextWindow,
      ...(input.ifVersion !== undefined ? { ifVersion: input.ifVersion } : {}),
      ...(this.deps.lock.confirm
        ? { confirmSlot: () => this.deps.lock.confirm!(input.session.id) }
        : {}),
    });
    const ended = (outcome: TurnOutcome, usage: TokenUsage): SlotTurnResult => ({
      outcome,
      usage,
      stored: turn.stored,
      compaction: turn.compaction,
      recall: turn.recall,
      written: turn.written,
    });
    try {
      // Resolve the tools first: an agent whose tools cannot load fails before anything is stored.
      const tools = await this.toolsFor(agent, input.extraTools);
      const result = await this.loopOver(turn, input, tools, trace);
      const outcome = outcomeOf(result);
      const held = input.holdInChat
        ? await holdInChat(this.deps, turn, outcome, input.holdInChat)
        : outcome;
      // The next summary may be prepared now, off this turn: nobody waits for it.
      this.deps.contextGuard?.afterTurn?.(turn);
      return ended(held, result.usage);
    } catch (err) {
      return ended(outcomeOfError(reportOutage(err, turn.stored)), NO_USAGE);
    }
  }

  private async loopOver(turn: Turn, input: SlotTurn, tools: ToolSet, trace: TracedTurn) {
    const { agent } = input;
    const guard = this.deps.contextGuard;
    const messages = await this.begin(turn, input);
    input.onInputStored?.();
    const budget = new TurnBudget({
      agentName: agent.name,
      limits: agent.limits ?? {},
      sessionTokensBefore: sessionTokens(turn.session),
      compactionTokens: () =>
        (turn.compaction?.input_tokens ?? 0) + (turn.compaction?.output_tokens ?? 0),
      outputTokens: this.deps.budget?.defaultOutputTokens ?? 0,
    });
    if (!budget.unlimited) {
      turn.summaryHold = (claim) => budget.beforeSummary(claim);
      turn.retryHold = (request) => budget.beforeRetry(request);
    }
    const temperature = input.temperature ?? agent.temperature;
    const turnSeq = turn.turnStartSeq;
    try {
      return await runLoop({
        model: guard ? guard.guardModel(this.deps.model, turn) : this.deps.model,
        ...(agent.model !== undefined ? { modelName: agent.model } : {}),
        ...(temperature !== undefined ? { temperature } : {}),
        messages,
        tools,
        maxIterations: agent.maxIterations,
        ...(budget.unlimited ? {} : { budget }),
        ...this.reserving(input.session.owner_key),
        turn,
        scope: {
          sessionId: input.session.id,
          agentName: agent.name,
          ...(turnSeq !== Number.MAX_SAFE_INTEGER ? { turnSeq } : {}),
          span: trace.span,
          compacted: () => turn.session.compact_seq > 0,
        },
        toolContext: toolContextOf(this.deps.store, input.writes, input.session, agent, input),
        ...(input.signal ? { signal: input.signal } : {}),
        ...(input.stream !== undefined ? { stream: input.stream } : {}),
        onEvent: (event) => {
          trace.onEvent(event);
          if (event.type === 'tool_result') {
            this.deps.observer?.toolResult?.({
              agentName: agent.name,
              // A name the model made up is not passed on: observers (metrics
              // labels) see only names from the agent's tool list.
              tool: tools.find(event.name) ? event.name : UNKNOWN_TOOL,
              isError: event.isError,
            });
          }
          input.onEvent?.(event);
        },
      });
    } finally {
      // Calls that wait (approval, ask_user, client tools) end with the turn.
      trace.endOpenToolCalls();
    }
  }

  /** The loop's `reserve` for a session of `ownerKey` (nothing for the admin's sessions). */
  private reserving(ownerKey: string | null): Pick<LoopOptions, 'reserve'> {
    const spending = this.deps.budget;
    if (!spending || ownerKey === null) return {};
    return {
      reserve: (request) =>
        spending.budget.reserve(ownerKey, claimedTokens(request, spending.defaultOutputTokens)),
    };
  }

  /**
   * Begins `turn`. A turn started from a remembered row that changed since
   * (its first write refused, nothing stored) reads the session, checks it
   * as the slot would have, and begins again from it.
   */
  private async begin(turn: Turn, input: SlotTurn): Promise<ChatMessage[]> {
    const start = () => turn.begin(input.input, input.pendingCallIds, input.opening);
    try {
      return await start();
    } catch (err) {
      if (!(err instanceof SessionMovedError)) throw err;
      turn.restart(await this.readUsable(input.session.id, input.agent, input.slotOptions));
      return start();
    }
  }
}

/**
 * The runtime (the router between the HTTP layer and the loop): sessions, chat
 * turns, and the turn slot of each session. A turn (`Turn`) builds its context,
 * repairs interrupted tool calls and persists what the loop produces; the loop
 * gets a plain message array. Tasks, subagents, daemons and API conversations
 * run their turns through `withTurnSlot`, which takes the session's slot.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { CairnError } from '../errors.js';
import type { ChatMessage, StoredMessage, TokenUsage, ToolCall } from '../llm/messages.js';
import { linkAbort } from '../llm/abort-link.js';
import { ContextBuilder, type BuiltContext } from './context-builder.js';
import type { ContextGuard, ContextRecall } from './context-guard.js';
import { Turn, type TurnCompactionReport, type TurnRecallReport } from './turn.js';
import type { ModelClient } from '../llm/model-client.js';
import type { MemoryStore, Owner, SessionMode, SessionRow, Store } from '../store/store.js';
import { requireSession, sessionNotFound } from '../store/session-not-found.js';
import type { RunBudget, Tool } from '../tools/tool.js';
import { assertOfferable, type ToolCatalog } from '../tools/tool-catalog.js';
import type { ToolSet } from '../tools/tool-set.js';
import type { EventBus } from './event-bus.js';
import { runApprovedToolCall, runLoop, type LoopEvent, type LoopResult } from './loop.js';
import { sessionTokens, TurnBudget } from './turn-budget.js';
import type { ApprovalTimer } from './approval-timeouts.js';
import { pendingApprovalCall, waitForApproval } from './approvals.js';
import { KeyedQueue } from './keyed-queue.js';
import type { SessionLock } from './session-lock.js';
import type { SessionTitler } from './session-titler.js';
import {
  errorCodeOf,
  UNKNOWN_TOOL,
  type ChatTurnNote,
  type TurnObserver,
} from './turn-observer.js';
import { reportOutage } from './outage-report.js';
import { NO_TRACING, type TraceSpan, type Tracing } from '../telemetry/tracing.js';

/** How many subagents one top-level run (with everything under it) may start. */
export const SUBAGENTS_PER_RUN = 10;

export const ASK_USER_IN_CHAT_RESULT =
  'The question was shown to the user as your reply; their answer will arrive as the next user message.';

export interface RuntimeDeps {
  store: Store;
  agents: AgentRegistry;
  model: ModelClient;
  tools: ToolCatalog;
  events: EventBus;
  /** The per-session turn slot (default: a `KeyedQueue`, for one process). */
  queue?: SessionLock;
  contextGuard?: ContextGuard;
  /** Puts recalled compacted messages into each model call (automatic recall). */
  contextRecall?: ContextRecall;
  /** Adds memory notes or other build-time context to the system messages. */
  systemContext?: (agent: AgentConfig) => Promise<string | undefined>;
  /** Told of tool results and finished chat turns (metrics, the info log). */
  observer?: TurnObserver;
  /** Titles untitled sessions of agents with `autoTitle` after their first exchange. */
  titler?: Pick<SessionTitler, 'titleLater'>;
  /** An `invoke_agent` span per turn and an `execute_tool` span per tool call. */
  tracing?: Tracing;
  /**
   * Awaited as each turn ends (the call records' write): what a turn cost is
   * on the session once its reply is out. Never throws.
   */
  afterTurn?: () => Promise<void>;
  /** Arms the deadline of a wait for approval of a tool with an approvalTimeout. */
  approvalTimer?: ApprovalTimer;
}

export interface CreateSessionInput {
  agentName: string;
  mode?: SessionMode;
  title?: string | null;
  /** The percent of the raw tail a compaction covers (the API's and the column's `compactCount`). */
  compactPercent?: number;
  parentSessionId?: string | null;
  /** Who the session belongs to (default: the admin; a subagent's: its parent's owner). */
  owner?: Owner;
  /** Where its visible-transcript chain starts (see `NewSession.transcriptSeed`). */
  transcriptSeed?: string | null;
}

/** Who asked for an action, as its audit event records it (`by: {key, user}`). */
export type ActedBy = Owner;

export interface ChatInput {
  agentName: string;
  message: string;
  sessionId?: string;
  /** The owner of a new session (default: the admin). */
  owner?: Owner;
  stream?: boolean;
  signal?: AbortSignal;
  onEvent?: (event: LoopEvent | { type: 'session'; sessionId: string }) => void;
  /** The caller's W3C `traceparent`: the turn's span continues that trace. */
  traceparent?: string;
}

export interface ChatResult {
  sessionId: string;
  reply: string;
  /** The messages this turn stored, in order (the user message first). */
  messages: StoredMessage[];
  /** The turn's tokens, and what its calls cost (null when the main role has no pricing). */
  usage: Omit<TokenUsage, 'cost'> & { cost: number | null };
  compaction: TurnCompactionReport | null;
  /** Which compacted messages automatic recall put back into the turn's model calls; null: none. */
  recall: TurnRecallReport | null;
  /**
   * Present when the turn stopped on a tool call that needs a person's
   * approval: the chat turn became a waiting task (the reply says how to continue).
   */
  pendingApproval?: { taskId: string; callId: string; tool: string; arguments: string };
}

/** What `runChat` learns of a turn as it runs, for its report. */
interface ChatSeen {
  sessionId?: string;
  outcome?: ChatTurnNote['outcome'];
}

/** One loop run over a session, shared by chats, tasks, subagents and API conversations. */
interface TurnInput {
  session: SessionRow;
  agent: AgentConfig;
  /** Messages that start this turn (the user message, or a resumed call's answer). */
  input: ChatMessage[];
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
  /** Aborted when the session's slot is lost: the turn writes nothing more. */
  slot?: AbortSignal;
  /** The task this turn runs: it appends only while the task is still this instance's to run. */
  runningTask?: string;
  /** The caller's W3C `traceparent`. */
  traceparent?: string;
}

export interface TurnResult {
  result: LoopResult;
  stored: StoredMessage[];
  compaction: TurnCompactionReport | null;
  recall: TurnRecallReport | null;
}

/** A turn's input as a caller inside the session's slot gives it (the session, agent and slot are the slot's). */
export type TurnRequest = Omit<TurnInput, 'session' | 'agent' | 'slot'>;

/** Runs one turn on the session whose slot is held; handed out by `withTurnSlot` only. */
export type RunTurn = (request: TurnRequest) => Promise<TurnResult>;

export class Runtime {
  private readonly store: Store;
  private readonly agents: AgentRegistry;
  private readonly events: EventBus;
  private readonly queue: SessionLock;
  private readonly deps: RuntimeDeps;
  private readonly context: ContextBuilder;

  constructor(deps: RuntimeDeps) {
    this.deps = deps;
    this.context = new ContextBuilder({
      store: deps.store,
      ...(deps.systemContext ? { systemContext: deps.systemContext } : {}),
    });
    this.store = deps.store;
    this.agents = deps.agents;
    this.events = deps.events;
    this.queue = deps.queue ?? new KeyedQueue();
  }

  // ---- sessions -------------------------------------------------------------

  async createSession(input: CreateSessionInput): Promise<SessionRow> {
    const agent = this.agents.get(input.agentName);
    const parent =
      input.parentSessionId == null
        ? undefined
        : await this.store.findSession(input.parentSessionId);
    // A subagent works for whoever its parent session belongs to.
    const owner = input.owner ?? (parent && { key: parent.owner_key, user: parent.end_user });
    const session = await this.store.createSession({
      agentName: agent.name,
      mode: input.mode ?? 'chat',
      title: input.title ?? null,
      parentSessionId: input.parentSessionId ?? null,
      compactCount: input.compactPercent ?? agent.defaultCompaction.compactionCount,
      systemPrompt: agent.system,
      ...(owner ? { owner } : {}),
      ...(input.transcriptSeed != null ? { transcriptSeed: input.transcriptSeed } : {}),
    });
    await this.events.emit('session.created', session.id, {
      agentName: agent.name,
      mode: session.mode,
      parentSessionId: session.parent_session_id,
      ownerKey: session.owner_key,
      endUser: session.end_user,
    });
    return session;
  }

  /**
   * A new chat session holding `id`'s history up to `atSeq` (default: all of
   * it), compaction state included where `atSeq` is past the pointer. It does
   * not wait for a running turn: it copies what is committed up to `atSeq`.
   */
  async forkSession(id: string, atSeq?: number): Promise<SessionRow> {
    const outcome = await this.store.forkSession(id, atSeq);
    if (outcome.kind === 'no-session') throw sessionNotFound(id);
    if (outcome.kind === 'no-message')
      throw new CairnError(
        'MESSAGE_NOT_FOUND',
        `Session "${id}" has no message with seq ${atSeq ?? '(none)'}. Fork at the seq of one of its messages (GET /sessions/${id}/messages), or omit atSeq to fork all of it.`,
      );
    const fork = outcome.session;
    await this.events.emit('session.created', fork.id, {
      agentName: fork.agent_name,
      mode: fork.mode,
      parentSessionId: null,
      forkedFrom: { sessionId: id, atSeq: fork.last_seq },
    });
    return fork;
  }

  /** The session, or 404 `SESSION_NOT_FOUND`. */
  async getSession(id: string): Promise<SessionRow> {
    return requireSession(await this.store.findSession(id), id);
  }

  /** Runs `work` in the slot of an existing session (404 at once, without queueing). */
  private async inSessionSlot<T>(id: string, work: () => Promise<T>): Promise<T> {
    await this.getSession(id);
    return this.queue.run(id, work);
  }

  /** Waits for the session's running turns, then clears its conversation and compaction state. */
  async resetSession(id: string, by?: ActedBy): Promise<SessionRow> {
    return this.inSessionSlot(id, async () => {
      // A task waiting on this session waits on a call that reset deletes.
      const waiting = await this.store.findWaitingTaskForSession(id);
      if (waiting) {
        await this.store.transitionTask(waiting.id, ['waiting'], {
          status: 'cancelled',
          error: 'Cancelled: the session was reset.',
          pending_call_id: null,
          pending_tool: null,
          pending_arguments: null,
        });
        await this.events.emit('task.cancelled', id, {
          taskId: waiting.id,
          reason: 'session reset',
        });
      }
      const session = requireSession(await this.store.resetSession(id), id);
      await this.events.emit('session.reset', id, by ? { by } : {});
      return session;
    });
  }

  async closeSession(id: string): Promise<SessionRow> {
    return this.inSessionSlot(id, async () => {
      const session = requireSession(await this.store.closeSession(id), id);
      await this.events.emit('session.closed', id, {});
      return session;
    });
  }

  async deleteSession(id: string, by?: ActedBy): Promise<void> {
    await this.inSessionSlot(id, async () => {
      await this.store.deleteSession(id);
      await this.events.emit('session.deleted', id, by ? { by } : {});
    });
  }

  // ---- chat -----------------------------------------------------------------

  /** One chat turn on a new or existing session. */
  async runChat(input: ChatInput): Promise<ChatResult> {
    const started = performance.now();
    const seen: ChatSeen = {};
    const note = (outcome: ChatTurnNote['outcome'], errorCode?: string): void =>
      this.deps.observer?.chatTurn?.({
        ...(seen.sessionId !== undefined ? { sessionId: seen.sessionId } : {}),
        agentName: input.agentName,
        outcome,
        durationMs: Math.round(performance.now() - started),
        ...(errorCode !== undefined ? { errorCode } : {}),
      });
    try {
      const result = await this.runChatTurn(input, seen);
      note(seen.outcome ?? 'answer');
      return result;
    } catch (err) {
      note('error', errorCodeOf(err, input.signal));
      throw err;
    }
  }

  /** `runChat` without the report; notes the session and how the turn ended in `seen`. */
  private async runChatTurn(input: ChatInput, seen: ChatSeen): Promise<ChatResult> {
    const agent = this.agents.get(input.agentName);
    // An existing session is read once, under its slot (a turn's reads must not
    // grow with the number of model calls or the history): a missing
    // one still gets its 404 at once, as nothing queues on an id no session
    // has; a closed one gets SESSION_CLOSED once the turns before it ran.
    const sessionId =
      input.sessionId ??
      (
        await this.createSession({
          agentName: agent.name,
          mode: 'chat',
          ...(input.owner ? { owner: input.owner } : {}),
        })
      ).id;
    const announce = (): void => {
      seen.sessionId = sessionId;
      input.onEvent?.({ type: 'session', sessionId });
    };
    if (input.sessionId === undefined) announce();

    return this.withTurnSlot(sessionId, agent, async (session, runTurn) => {
      try {
        return await this.chatTurnIn(session, agent, input, seen, runTurn, announce);
      } catch (err) {
        // A turn that failed before it stored anything (its tools could not
        // load, the client left while it queued) leaves no session behind:
        // the one made for it is deleted, still under its slot, so nothing
        // queued on the announced id runs on it first.
        if (input.sessionId === undefined) await this.dropIfUntouched(session);
        throw err;
      }
    });
  }

  /** Deletes `session` when nothing was stored on it since it was read (its turn never began). */
  private async dropIfUntouched(session: SessionRow): Promise<void> {
    const current = await this.store.findSession(session.id).catch(() => undefined);
    if (current && current.last_seq === session.last_seq)
      await this.store.deleteSession(session.id).catch(() => undefined);
  }

  private async chatTurnIn(
    session: SessionRow,
    agent: AgentConfig,
    input: ChatInput,
    seen: ChatSeen,
    runTurn: RunTurn,
    announce: () => void,
  ): Promise<ChatResult> {
    if (input.sessionId !== undefined) announce();
    await this.rejectIfTaskWaiting(session.id);
    const turn = await runTurn({
      input: [{ role: 'user', content: input.message }],
      ...(input.stream !== undefined ? { stream: input.stream } : {}),
      ...(input.signal ? { signal: input.signal } : {}),
      ...(input.onEvent ? { onEvent: input.onEvent } : {}),
      ...(input.traceparent !== undefined ? { traceparent: input.traceparent } : {}),
    });
    seen.outcome = turn.result.kind === 'outside' ? 'answer' : turn.result.kind;
    if (turn.result.kind === 'waiting') {
      // ask_user in a chat: the question is the reply, and the user's next
      // message is the answer. The call gets a result now so the history
      // stays valid (only tasks wait on an open call).
      const answered = await this.store.appendMessagesWithEvents(
        session.id,
        [
          {
            role: 'tool',
            tool_call_id: turn.result.callId,
            name: 'ask_user',
            content: ASK_USER_IN_CHAT_RESULT,
          },
        ],
        'message.created',
      );
      turn.stored.push(...answered.messages);
      this.events.publish(answered.events);
      return this.envelope(session.id, turn, turn.result.question);
    }
    if (turn.result.kind === 'pending') {
      const held = await this.holdForApproval(
        session,
        agent,
        input.message,
        turn.result.call,
        turn.result.approvalTimeout,
      );
      return {
        ...this.envelope(session.id, turn, held.question),
        pendingApproval: held.pendingApproval,
      };
    }
    const userSeq = turn.stored[0]?.seq;
    if (agent.autoTitle && session.title === null && userSeq !== undefined) {
      this.deps.titler?.titleLater(session.id, userSeq, input.message, turn.result.reply);
    }
    return this.envelope(session.id, turn, turn.result.reply);
  }

  /**
   * A call that needs approval in a chat turn: the turn becomes a waiting
   * task on this session, continued by POST /tasks/:id/approve|deny.
   */
  async holdForApproval(
    session: SessionRow,
    agent: AgentConfig,
    message: string,
    call: ToolCall,
    approvalTimeout?: string,
  ): Promise<{ question: string; pendingApproval: NonNullable<ChatResult['pendingApproval']> }> {
    const task = await this.store.createTask({
      sessionId: session.id,
      agentName: agent.name,
      input: message,
    });
    const waiting =
      (await waitForApproval(
        { store: this.store, events: this.events, approvalTimer: this.deps.approvalTimer },
        task,
        call,
        approvalTimeout,
      )) ?? task;
    return {
      question: waiting.question ?? '',
      pendingApproval: {
        taskId: task.id,
        callId: call.id,
        tool: call.function.name,
        arguments: call.function.arguments,
      },
    };
  }

  private envelope(sessionId: string, turn: TurnResult, reply: string): ChatResult {
    return {
      sessionId,
      reply,
      messages: turn.stored,
      usage: { ...turn.result.usage, cost: turn.result.usage.cost ?? null },
      compaction: turn.compaction,
      recall: turn.recall,
    };
  }

  /** The tools a turn of `agent` gets, plus `extra` (names must not clash); throws before anything is stored. */
  async toolsFor(agent: AgentConfig, extra: readonly Tool[] = []): Promise<ToolSet> {
    const tools = (await this.deps.tools.forAgent(agent)).with(extra);
    // A client's own tools count too: the request carries them all.
    assertOfferable(agent.name, tools.size);
    return tools;
  }

  /** The session, checked to belong to `agent` and to be open. */
  async usableSession(id: string, agent: AgentConfig): Promise<SessionRow> {
    const session = await this.getSession(id);
    if (session.agent_name !== agent.name) {
      throw new CairnError(
        'SESSION_AGENT_MISMATCH',
        `Session "${id}" belongs to agent "${session.agent_name}", not "${agent.name}". Use POST /agents/${session.agent_name}/chat.`,
      );
    }
    if (session.status === 'closed') {
      throw new CairnError('SESSION_CLOSED', `Session "${id}" is closed. Start a new session.`);
    }
    return session;
  }

  async rejectIfTaskWaiting(sessionId: string): Promise<void> {
    const waiting = await this.store.findWaitingTaskForSession(sessionId);
    if (waiting && pendingApprovalCall(waiting)) {
      throw new CairnError(
        'TASK_WAITING',
        `Task "${waiting.id}" on this session is waiting for a person to approve the tool call "${waiting.pending_tool ?? ''}". Approve it with POST /tasks/${waiting.id}/approve, or deny it with POST /tasks/${waiting.id}/deny.`,
      );
    }
    if (waiting) {
      throw new CairnError(
        'TASK_WAITING',
        `Task "${waiting.id}" on this session is waiting for an answer: ${waiting.question ?? ''} Answer it with POST /tasks/${waiting.id}/resume.`,
      );
    }
  }

  /**
   * The context the next model call on `session` gets: system messages (plus
   * build-time context such as memory), the summary pair, and the raw tail.
   */
  async buildContext(session: SessionRow, agent: AgentConfig): Promise<BuiltContext> {
    const built = await this.context.build(session, agent);
    const recall = this.deps.contextRecall;
    if (!recall) return built;
    // What recall would add for the newest user message, counted apart.
    const turn = new Turn(session, agent, {
      store: this.store,
      events: this.events,
      context: this.context,
    });
    const { done } = await recall.recall(turn, built.messages, { preview: true });
    return done ? { ...built, recall: done } : built;
  }

  /**
   * Holds `sessionId`'s turn slot while `work` runs. `work` gets the session
   * re-read under the slot (it may have been closed, reset or compacted while
   * queued), checked usable by `agent`, and the one way to run a turn on it.
   * A turn run that way stops, failing with `SESSION_LOCK_LOST`, when the
   * slot is lost (the Postgres lock's connection dropped).
   */
  async withTurnSlot<T>(
    sessionId: string,
    agent: AgentConfig,
    work: (session: SessionRow, runTurn: RunTurn) => Promise<T>,
  ): Promise<T> {
    return this.queue.run(sessionId, async (slot) => {
      const session = await this.usableSession(sessionId, agent);
      return work(session, async (request) => {
        // The turn stops when its caller gives up or the slot is lost.
        const stop = linkAbort(request.signal, slot);
        try {
          return await this.runTurn({ ...request, session, agent, slot, signal: stop.signal });
        } finally {
          stop.dispose();
        }
      });
    });
  }

  /**
   * Runs the loop over a session: repairs interrupted calls, persists the
   * turn's input, injects the summary, runs automatic compaction before each
   * model call. Only under the session's slot (`withTurnSlot`).
   */
  private async runTurn(input: TurnInput): Promise<TurnResult> {
    const { agent } = input;
    const tracing = this.deps.tracing ?? NO_TRACING;
    const span = tracing.startSpan(`invoke_agent ${agent.name}`, {
      traceparent: input.traceparent,
      attributes: {
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.agent.name': agent.name,
        'gen_ai.conversation.id': input.session.id,
      },
    });
    try {
      const turn = await this.runTracedTurn(input, span, tracing);
      span.setAttributes({
        'gen_ai.usage.input_tokens': turn.result.usage.input_tokens,
        'gen_ai.usage.output_tokens': turn.result.usage.output_tokens,
        'cairn.turn.outcome': turn.result.kind,
      });
      return turn;
    } catch (err) {
      span.fail(errorCodeOf(err), err instanceof Error ? err.message : 'The turn failed.');
      throw err;
    } finally {
      span.end();
      await this.deps.afterTurn?.();
    }
  }

  private async runTracedTurn(
    input: TurnInput,
    span: TraceSpan,
    tracing: Tracing,
  ): Promise<TurnResult> {
    const { agent } = input;
    // Resolve the tools first: an agent whose tools cannot load fails before anything is stored.
    const tools = await this.toolsFor(agent, input.extraTools);
    const guard = this.deps.contextGuard;
    const recall = this.deps.contextRecall;
    const turn = new Turn(input.session, agent, {
      store: this.store,
      events: this.events,
      context: this.context,
      ...(guard ? { guard } : {}),
      ...(recall ? { recall } : {}),
      ...(input.onEvent
        ? { onRecall: (done) => input.onEvent?.({ type: 'recall', ...done }) }
        : {}),
      ...(input.slot ? { slot: input.slot } : {}),
      ...(input.runningTask !== undefined ? { runningTask: input.runningTask } : {}),
      span,
    });
    try {
      return await this.loopOver(turn, input, tools, span, tracing);
    } catch (err) {
      throw reportOutage(err, turn.stored);
    }
  }

  private async loopOver(
    turn: Turn,
    input: TurnInput,
    tools: ToolSet,
    span: TraceSpan,
    tracing: Tracing,
  ): Promise<TurnResult> {
    const { agent } = input;
    const guard = this.deps.contextGuard;
    const budget = new TurnBudget({
      agentName: agent.name,
      limits: agent.limits ?? {},
      sessionTokensBefore: sessionTokens(input.session),
      compactionTokens: () =>
        (turn.compaction?.input_tokens ?? 0) + (turn.compaction?.output_tokens ?? 0),
    });
    const messages = await turn.begin(input.input, input.pendingCallIds);
    const temperature = input.temperature ?? agent.temperature;
    const turnSeq = turn.turnStartSeq;
    // Tool calls the loop announced and has not finished: each has its span.
    const toolSpans = new Map<string, TraceSpan>();
    try {
      const result = await runLoop({
        model: guard ? guard.guardModel(this.deps.model, turn) : this.deps.model,
        ...(agent.model !== undefined ? { modelName: agent.model } : {}),
        ...(temperature !== undefined ? { temperature } : {}),
        messages,
        tools,
        maxIterations: agent.maxIterations,
        ...(budget.unlimited ? {} : { budget }),
        turn,
        scope: {
          sessionId: input.session.id,
          agentName: agent.name,
          ...(turnSeq !== Number.MAX_SAFE_INTEGER ? { turnSeq } : {}),
          span,
          compacted: () => turn.session.compact_seq > 0,
        },
        toolContext: this.toolContext(input.session, agent, input),
        ...(input.signal ? { signal: input.signal } : {}),
        ...(input.stream !== undefined ? { stream: input.stream } : {}),
        onEvent: (event) => {
          if (event.type === 'tool_call' && tracing.enabled) {
            toolSpans.set(
              event.call.id,
              tracing.startSpan(`execute_tool ${event.call.function.name}`, {
                parent: span,
                attributes: {
                  'gen_ai.operation.name': 'execute_tool',
                  'gen_ai.tool.name': event.call.function.name,
                  'gen_ai.tool.call.id': event.call.id,
                  'gen_ai.conversation.id': input.session.id,
                },
              }),
            );
          }
          if (event.type === 'tool_result') {
            const toolSpan = toolSpans.get(event.callId);
            if (toolSpan) {
              if (event.isError) toolSpan.fail('TOOL_ERROR', 'The tool call failed.');
              toolSpan.end();
              toolSpans.delete(event.callId);
            }
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
      return { result, stored: turn.stored, compaction: turn.compaction, recall: turn.recall };
    } finally {
      // Calls that wait (approval, ask_user, client tools) end with the turn.
      for (const toolSpan of toolSpans.values()) {
        toolSpan.setAttributes({ 'cairn.tool.outcome': 'not finished in this turn' });
        toolSpan.end();
      }
    }
  }

  /**
   * Runs a tool call a person approved, on the session it belongs to, and
   * returns its result message (not stored: it is the input of the turn that
   * continues). The caller holds the session's queue slot.
   */
  async runApprovedCall(input: {
    session: SessionRow;
    agent: AgentConfig;
    call: ToolCall;
    signal?: AbortSignal;
  }): Promise<ChatMessage> {
    const tools = await this.deps.tools.forAgent(input.agent);
    return runApprovedToolCall(input.call, {
      tools,
      toolContext: this.toolContext(input.session, input.agent, {}),
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

  private toolContext(
    session: SessionRow,
    agent: AgentConfig,
    turn: Pick<TurnInput, 'depth' | 'lineage' | 'budget' | 'runningTask'>,
  ) {
    return {
      sessionId: session.id,
      agentName: agent.name,
      history: this.store,
      memory: memoryOfRun(this.store, turn.runningTask),
      depth: turn.depth ?? 0,
      lineage: [...(turn.lineage ?? []), agent.name],
      budget: turn.budget ?? { subagentsLeft: SUBAGENTS_PER_RUN },
    };
  }
}

/** The memory port of a run: a task run's writes are refused once a peer took the task over. */
function memoryOfRun(store: MemoryStore, runningTask: string | undefined): MemoryStore {
  if (runningTask === undefined) return store;
  return {
    listMemory: (agentName, query, limit) => store.listMemory(agentName, query, limit),
    putMemory: (agentName, key, content) =>
      store.putMemory(agentName, key, content, { runningTask }),
    deleteMemory: (agentName, key) => store.deleteMemory(agentName, key, { runningTask }),
  };
}

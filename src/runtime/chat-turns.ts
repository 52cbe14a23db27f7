/**
 * A chat turn: a person's message on a new or existing session, answered in
 * the same request. The session comes from the session service, the turn
 * from the engine (held chat-style: a question is the reply, an approval a
 * waiting task), and the outcome is mapped onto the chat envelope here.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { StoredMessage, TokenUsage } from '../llm/messages.js';
import type { Owner, SessionRow } from '../store/store.js';
import type { LoopEvent } from './loop.js';
import type { SessionTitler } from './session-titler.js';
import type { Sessions } from './sessions.js';
import type { TurnCompactionReport, TurnRecallReport } from './turn.js';
import type { RunTurn, TurnEngine, TurnResult } from './turn-engine.js';
import { errorCodeOf, type ChatTurnNote, type TurnObserver } from './turn-observer.js';
import { impossibleOutcome, throwIfStopped, unreachableOutcome } from './turn-outcome.js';

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

export interface ChatTurnsDeps {
  sessions: Pick<Sessions, 'create'>;
  engine: Pick<TurnEngine, 'withTurnSlot'>;
  agents: Pick<AgentRegistry, 'get'>;
  /** Told of every finished chat turn (the info log). */
  observer?: Pick<TurnObserver, 'chatTurn'>;
  /** Titles untitled sessions of agents with `autoTitle` after their first exchange. */
  titler?: Pick<SessionTitler, 'titleLater'>;
}

/** What a chat learns of its turn as it runs, for its report. */
interface ChatSeen {
  sessionId?: string;
  outcome?: ChatTurnNote['outcome'];
}

export class ChatTurns {
  constructor(private readonly deps: ChatTurnsDeps) {}

  /** One chat turn on a new or existing session. */
  async run(input: ChatInput): Promise<ChatResult> {
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
      const result = await this.runNoted(input, seen);
      note(seen.outcome ?? 'answer');
      return result;
    } catch (err) {
      note('error', errorCodeOf(err, input.signal));
      throw err;
    }
  }

  /** `run` without the report; notes the session and how the turn ended in `seen`. */
  private async runNoted(input: ChatInput, seen: ChatSeen): Promise<ChatResult> {
    const agent = this.deps.agents.get(input.agentName);
    // An existing session is read once, under its slot: a missing one still
    // gets its 404 at once, as nothing queues on an id no session has; a
    // closed one gets SESSION_CLOSED once the turns before it ran.
    const sessionId =
      input.sessionId ??
      (
        await this.deps.sessions.create({
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

    return this.deps.engine.withTurnSlot(
      sessionId,
      agent,
      async (session, runTurn, writes) => {
        try {
          if (input.sessionId !== undefined) announce();
          return await this.turnIn(session, agent, input, seen, runTurn);
        } catch (err) {
          // A turn that failed before it stored anything (its tools could not
          // load, the client left while it queued) leaves no session behind:
          // the one made for it is deleted, still under its slot, so nothing
          // queued on the announced id runs on it first.
          if (input.sessionId === undefined)
            await writes.dropSessionIfUntouched(session.last_seq).catch(() => undefined);
          throw err;
        }
      },
      { refuseIfTaskWaiting: true },
    );
  }

  private async turnIn(
    session: SessionRow,
    agent: AgentConfig,
    input: ChatInput,
    seen: ChatSeen,
    runTurn: RunTurn,
  ): Promise<ChatResult> {
    const turn = await runTurn({
      input: [{ role: 'user', content: input.message }],
      holdInChat: { taskInput: input.message },
      ...(input.stream !== undefined ? { stream: input.stream } : {}),
      ...(input.signal ? { signal: input.signal } : {}),
      ...(input.onEvent ? { onEvent: input.onEvent } : {}),
      ...(input.traceparent !== undefined ? { traceparent: input.traceparent } : {}),
    });
    const { outcome } = turn;
    throwIfStopped(outcome);
    switch (outcome.kind) {
      case 'reply': {
        seen.outcome = 'answer';
        const userSeq = turn.stored[0]?.seq;
        if (agent.autoTitle && session.title === null && userSeq !== undefined)
          this.deps.titler?.titleLater(session, userSeq, input.message, outcome.reply);
        return envelope(session.id, turn, outcome.reply);
      }
      case 'held-question':
        seen.outcome = 'waiting';
        return envelope(session.id, turn, outcome.question);
      case 'held-approval': {
        seen.outcome = 'pending';
        const { call, task } = outcome;
        return {
          ...envelope(session.id, turn, task.question),
          pendingApproval: {
            taskId: task.id,
            callId: call.id,
            tool: call.function.name,
            arguments: call.function.arguments,
          },
        };
      }
      case 'client-tools':
        // A chat offers no client tools: a reply that still names some is its text.
        seen.outcome = 'answer';
        return envelope(session.id, turn, outcome.reply);
      case 'question':
      case 'approval':
        // The turn holds both (holdInChat).
        return impossibleOutcome(outcome);
      default:
        return unreachableOutcome(outcome);
    }
  }
}

function envelope(sessionId: string, turn: TurnResult, reply: string): ChatResult {
  return {
    sessionId,
    reply,
    messages: turn.stored,
    usage: { ...turn.usage, cost: turn.usage.cost ?? null },
    compaction: turn.compaction,
    recall: turn.recall,
  };
}

/**
 * One OpenAI-style request as a Cairn turn: finds the session the
 * posted messages continue (the `X-Cairn-Session-Id` header, else the hash of
 * their visible transcript, else a new session seeded with them), then runs
 * the posted user turn or client tool results through the runtime, with the
 * client's tools offered beside the agent's.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { ChatMessage, TokenUsage, ToolCall, ToolSpec } from '../llm/messages.js';
import { missingTrailingResults } from '../llm/normalize-request.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { Sessions } from '../runtime/sessions.js';
import type { RunTurn, TurnEngine } from '../runtime/turn-engine.js';
import { impossibleOutcome, throwIfStopped, unreachableOutcome } from '../runtime/turn-outcome.js';
import type { MessageLog, SessionRow, SessionStore } from '../store/store.js';
import { sessionNotFound } from '../store/session-not-found.js';
import { transcriptHash, transcriptSeed } from '../store/transcript-hash.js';
import type { Access } from '../http/access.js';
import { owns, ownerOf, withEndUser, type Principal } from '../http/principal.js';
import { clientTools } from './client-tools.js';
import { CairnError } from '../errors.js';
import { InvalidRequestError } from './errors.js';

export interface ConversationRequest {
  /** Who posts it: their own sessions only, and their key's agents only. */
  principal: Principal;
  agentName: string;
  /** The posted messages, system messages included. */
  messages: ChatMessage[];
  /** An explicit session (the session header). */
  sessionId?: string;
  /**
   * Continue `sessionId` from its message `atSeq` (a `previous_response_id`):
   * in that session when `atSeq` is still its last message, else in a fork
   * of it holding the history up to `atSeq`.
   */
  branch?: { sessionId: string; atSeq: number };
  clientTools: ToolSpec[];
  /** How errors name the i-th client tool (default `tools[i].function`). */
  clientToolParam?: (index: number) => string;
  temperature?: number;
}

export interface ConversationRunOptions {
  stream: boolean;
  signal: AbortSignal;
  onDelta?: (text: string) => void;
  /** Called once the turn holds the session and its input is stored (the response id can be read back). */
  onStart?: (session: SessionRow) => void;
  /** The caller's W3C `traceparent`: the turn's span continues that trace. */
  traceparent?: string;
}

/** The run option carrying an incoming W3C `traceparent` header, if the request has one. */
export function traceparentOf(headers: Record<string, unknown>): { traceparent?: string } {
  const value = headers.traceparent;
  return typeof value === 'string' ? { traceparent: value } : {};
}

export interface ConversationResult {
  sessionId: string;
  /** `tool_calls`: the turn stopped on calls to the client's tools, listed in `calls`. */
  finish: 'stop' | 'tool_calls';
  reply: string;
  calls: ToolCall[];
  usage: TokenUsage;
  /** Seq of the stored assistant message that carries the reply. */
  replySeq: number;
  /** Seq of the last message the turn stored: where a turn continuing this one starts. */
  lastSeq: number;
}

/** A resolved request: its session, and the turn to run on it once the session's queue slot is ours. */
export interface PreparedConversation {
  readonly session: SessionRow;
  run(options: ConversationRunOptions): Promise<ConversationResult>;
}

interface PostedParts {
  /** The client's system messages: stored after the agent's prompt in a new session. */
  instructions: ChatMessage[];
  /** How many non-system messages came before each instruction (part of the transcript's seed). */
  positions: number[];
  /** Everything before the new input. */
  history: ChatMessage[];
  /** The final user message, or the trailing tool results. */
  input: ChatMessage[];
}

function splitPosted(messages: readonly ChatMessage[]): Omit<PostedParts, 'positions'> {
  const instructions = messages.filter((m) => m.role === 'system');
  const conversation = messages.filter((m) => m.role !== 'system');
  const last = conversation[conversation.length - 1];
  if (last?.role === 'user') {
    if (last.content === null || last.content.trim() === '')
      throw new InvalidRequestError('The last user message is empty.', { param: 'messages' });
    return { instructions, history: conversation.slice(0, -1), input: [last] };
  }
  if (last?.role === 'tool') {
    let start = conversation.length;
    while (start > 0 && conversation[start - 1]!.role === 'tool') start -= 1;
    return {
      instructions,
      history: conversation.slice(0, start),
      input: conversation.slice(start),
    };
  }
  throw new InvalidRequestError(
    'The last message must be a user message, or tool messages answering the tool_calls of the previous response.',
    { param: 'messages' },
  );
}

/**
 * A 4xx: the request was refused. A 5xx is the server's failure, and a turn
 * that ran out of iterations did work (its tool calls ran): both are kept.
 */
function isRefusal(err: unknown): boolean {
  if (err instanceof CairnError && err.code === 'MAX_ITERATIONS') return false;
  const status =
    err instanceof InvalidRequestError || err instanceof CairnError ? err.status : undefined;
  return status !== undefined && status >= 400 && status < 500;
}

/** For each system message of `messages`, how many other messages came before it. */
function positions(messages: readonly ChatMessage[]): number[] {
  const found: number[] = [];
  let others = 0;
  for (const message of messages) {
    if (message.role === 'system') found.push(others);
    else others += 1;
  }
  return found;
}

/**
 * The principal of a /v1 request, with the end user its body names
 * (`safety_identifier`, else `user`, as OpenAI's clients send them) in place
 * of the `X-Cairn-User` header's.
 */
export function postedPrincipal(principal: Principal, body: unknown): Principal {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const named = [fields['safety_identifier'], fields['user']].find(
    (value): value is string => typeof value === 'string' && value !== '',
  );
  return withEndUser(principal, named);
}

export interface ConversationsDeps {
  sessions: Pick<Sessions, 'create' | 'usable' | 'rejectIfTaskWaiting' | 'fork'>;
  engine: Pick<TurnEngine, 'toolsFor' | 'withTurnSlot'>;
  agents: Pick<AgentRegistry, 'get'>;
  access: Pick<Access, 'agent'>;
  store: Pick<SessionStore, 'findSession' | 'findSessionByTranscript' | 'deleteSession'> &
    Pick<MessageLog, 'loadContext'>;
}

export class Conversations {
  constructor(private readonly deps: ConversationsDeps) {}

  /**
   * Resolves the session (creating and seeding one if nothing matches)
   * without running the turn, so a streamed reply can send the session header
   * before the first token.
   */
  async prepare(request: ConversationRequest): Promise<PreparedConversation> {
    const { principal } = request;
    this.deps.access.agent(principal, request.agentName);
    const agent = this.deps.agents.get(request.agentName);
    const parts = { ...splitPosted(request.messages), positions: positions(request.messages) };
    const owner = ownerOf(principal);
    const seed = transcriptSeed(
      owner,
      parts.instructions.map((m, i) => ({ position: parts.positions[i]!, content: m.content })),
    );
    const extraTools = clientTools(request.clientTools, request.clientToolParam);
    // A clash with the agent's tool names is a 400 before any session is created.
    await this.deps.engine.toolsFor(agent, extraTools);
    let session: SessionRow | undefined;
    let expectedHash: string | null = null;
    let expectedLastSeq: number | null = null;
    if (request.branch !== undefined) {
      session = await this.branchFrom(request.branch, agent, parts, principal);
      expectedLastSeq = request.branch.atSeq;
    } else if (request.sessionId !== undefined) {
      // Another key's session is answered as if it did not exist, before anything else is said of it.
      const named = await this.deps.store.findSession(request.sessionId);
      if (named && !owns(principal, named.owner_key)) throw sessionNotFound(request.sessionId);
      session = await this.deps.sessions.usable(request.sessionId, agent);
    } else if (transcriptHash(parts.history) !== null) {
      // Matched within the same key and end user only, from the scope's seed.
      expectedHash = transcriptHash(parts.history, seed);
      const found = await this.deps.store.findSessionByTranscript(agent.name, expectedHash!, owner);
      if (found) session = found;
      else expectedHash = null;
    }
    const seeded = session === undefined;
    session ??= await this.deps.sessions.create({
      agentName: agent.name,
      mode: 'chat',
      owner,
      transcriptSeed: seed,
    });
    // A new session's posted instructions and history are stored by its turn,
    // under the session's lock, before the input.
    const opening = seeded ? [...parts.instructions, ...parts.history] : [];

    const sessionId = session.id;
    const turn = (options: ConversationRunOptions) =>
      this.deps.engine.withTurnSlot(sessionId, agent, async (current, runTurn) => {
        if (expectedHash !== null && current.transcript_hash !== expectedHash) {
          throw new InvalidRequestError(
            'The conversation moved on while this request waited (another request continued it). Resend with the current history.',
            { status: 409, code: 'conversation_conflict', param: 'messages' },
          );
        }
        if (expectedLastSeq !== null && current.last_seq !== expectedLastSeq) {
          throw new InvalidRequestError(
            'Another request continued the previous response while this one waited. Send this request again: it will branch from the previous response.',
            { status: 409, code: 'conversation_conflict', param: 'previous_response_id' },
          );
        }
        await this.deps.sessions.rejectIfTaskWaiting(sessionId);
        const input =
          parts.input[0]?.role === 'tool' ? await this.answers(current, parts.input) : parts.input;
        return this.runTurn(runTurn, current, { input, opening, extraTools }, request, options);
      });
    return {
      session,
      run: async (options) => {
        try {
          return await turn(options);
        } catch (err) {
          // A refused request leaves nothing behind: not even the session
          // seeded for it (the client resends the history; it seeds anew).
          if (seeded && isRefusal(err))
            await this.deps.store.deleteSession(sessionId).catch(() => undefined);
          throw err;
        }
      },
    };
  }

  /**
   * The session a branch continues: the named one while `atSeq` is its last
   * message, else a fork of it up to `atSeq`. Posted tool results are checked
   * against the calls open at `atSeq` first, so a bad request forks nothing.
   */
  private async branchFrom(
    branch: NonNullable<ConversationRequest['branch']>,
    agent: AgentConfig,
    parts: PostedParts,
    principal: Principal,
  ): Promise<SessionRow> {
    // Another key's conversation is answered as if it did not exist.
    const named = await this.deps.store.findSession(branch.sessionId);
    if (named && !owns(principal, named.owner_key)) throw sessionNotFound(branch.sessionId);
    const session = await this.deps.sessions.usable(branch.sessionId, agent);
    if (session.last_seq === branch.atSeq) return session;
    if (parts.input[0]?.role === 'tool') await this.answers(session, parts.input, branch.atSeq);
    return this.deps.sessions.fork(session.id, branch.atSeq);
  }

  /**
   * The posted tool results, checked against the calls the session waits on
   * (at its message `atSeq`, when given), with their tool names.
   */
  private async answers(
    session: SessionRow,
    results: ChatMessage[],
    atSeq = session.last_seq,
  ): Promise<ChatMessage[]> {
    const { tail } = await this.deps.store.loadContext(session.id, session.compact_seq);
    const open = new Map(
      missingTrailingResults(tail.filter((m) => m.seq <= atSeq)).map((m) => [
        m.tool_call_id ?? '',
        m.name ?? '',
      ]),
    );
    const answered = new Set<string>();
    return results.map((result) => {
      const id = result.tool_call_id ?? '';
      if (!open.has(id) || answered.has(id)) {
        const waiting = [...open.keys()].filter((k) => !answered.has(k));
        throw new InvalidRequestError(
          `The tool message for call "${id}" answers a call this session is not waiting for (${
            waiting.length > 0
              ? `it waits for: ${waiting.join(', ')}`
              : 'it waits for no tool results'
          }). Send a user message, or results for the tool_calls of the last response only.`,
          { param: 'messages', code: 'tool_call_not_waiting' },
        );
      }
      answered.add(id);
      return { role: 'tool', tool_call_id: id, name: open.get(id) ?? '', content: result.content };
    });
  }

  private async runTurn(
    runTurn: RunTurn,
    session: SessionRow,
    turnInput: {
      input: ChatMessage[];
      opening: ChatMessage[];
      extraTools: ReturnType<typeof clientTools>;
    },
    request: ConversationRequest,
    options: ConversationRunOptions,
  ): Promise<ConversationResult> {
    const { input, opening, extraTools } = turnInput;
    const lastUser = [...input].reverse().find((m) => m.role === 'user');
    const turn = await runTurn({
      input,
      ...(opening.length > 0 ? { opening } : {}),
      extraTools,
      stream: options.stream,
      signal: options.signal,
      // Once the input is stored, so the response id a client is told can be read back.
      ...(options.onStart ? { onInputStored: () => options.onStart?.(session) } : {}),
      // As in a native chat; the question is also stored as the assistant's
      // text, which a client shows as the reply and resends.
      holdInChat: {
        taskInput: typeof lastUser?.content === 'string' ? lastUser.content : '',
        storeQuestion: true,
      },
      ...(options.traceparent !== undefined ? { traceparent: options.traceparent } : {}),
      ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
      ...(input[0]?.role === 'tool'
        ? { pendingCallIds: new Set(input.map((m) => m.tool_call_id ?? '')) }
        : {}),
      ...(options.onDelta
        ? {
            onEvent: (event) => {
              if (event.type === 'delta') options.onDelta?.(event.text);
            },
          }
        : {}),
    });
    const { outcome } = turn;
    throwIfStopped(outcome);
    const lastAssistant = [...turn.stored].reverse().find((m) => m.role === 'assistant');
    const base = {
      sessionId: session.id,
      usage: turn.usage,
      replySeq: lastAssistant?.seq ?? session.last_seq,
      lastSeq: Math.max(session.last_seq, ...turn.stored.map((m) => m.seq)),
    };
    switch (outcome.kind) {
      case 'client-tools':
        return { ...base, finish: 'tool_calls', reply: outcome.reply, calls: outcome.calls };
      case 'reply':
        return { ...base, finish: 'stop', reply: outcome.reply, calls: [] };
      case 'held-question':
        options.onDelta?.(outcome.question);
        return { ...base, finish: 'stop', reply: outcome.question, calls: [] };
      case 'question':
      case 'approval':
        // The turn holds both (holdInChat).
        return impossibleOutcome(outcome);
      case 'held-approval': {
        const { question } = outcome.task;
        options.onDelta?.(question);
        return { ...base, finish: 'stop', reply: question, calls: [] };
      }
      default:
        return unreachableOutcome(outcome);
    }
  }
}

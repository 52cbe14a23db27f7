/**
 * The Vercel AI SDK's UI endpoint: `POST /ai-sdk/:name` speaks the UI message
 * stream protocol (server-sent events, `x-vercel-ai-ui-message-stream: v1`)
 * with the `ai` package's own stream helpers, so `useChat` and
 * `DefaultChatTransport` work unchanged. The chat `id` maps to one session
 * per key, end user and agent (the front-end chats table); of the posted
 * messages only what is new is read (ui-messages.ts). The turn runs on its
 * own (chat-runs.ts): a dropped connection does not cancel it, `GET
 * …/:chatId/stream` resumes it and `POST …/:chatId/stop` cancels it on any
 * instance sharing the database (through the chat stream log), and `GET
 * …/:chatId/messages` returns the history for a reloaded page.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import {
  generateId,
  pipeUIMessageStreamToResponse,
  UI_MESSAGE_STREAM_HEADERS,
  type UIMessageChunk,
} from 'ai';
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { ChatMessage } from '../llm/messages.js';
import type { EventBus } from '../runtime/event-bus.js';
import type { LoopEvent } from '../runtime/loop.js';
import type { Sessions } from '../runtime/sessions.js';
import type { TurnEngine, TurnResult } from '../runtime/turn-engine.js';
import { deniedResult } from '../runtime/approvals.js';
import type { ChatStreamStore, FrontEndChat, SessionRow, Store } from '../store/store.js';
import { logFailure, toHttpError } from '../http/errors.js';
import { auditBy, ownerOf, principalOf } from '../http/principal.js';
import { AGENT_NAME, objectSchema } from '../http/schemas.js';
import type { StreamGate } from '../http/stream-gate.js';
import { ChatRun, ChatRuns, type ChatStreamLiveness } from './chat-runs.js';
import {
  callInput,
  forkPointBefore,
  newInput,
  openCallOf,
  toUIMessages,
  userSeqs,
  type ChatInput,
  type PostedMessage,
} from './ui-messages.js';

/** How many messages `…/messages` returns at most: the newest of a longer history. */
export const AI_SDK_HISTORY_LIMIT = 2_000;
/** How far back the open tool call is looked for. */
const TAIL_MESSAGES = 64;
const CHAT_ID = { type: 'string', minLength: 1, maxLength: 200, pattern: '^[^/?#]+$' } as const;

const postedMessage = {
  type: 'object',
  required: ['id', 'role', 'parts'],
  properties: {
    id: { type: 'string', maxLength: 200 },
    role: { enum: ['system', 'user', 'assistant'] },
    parts: {
      type: 'array',
      maxItems: 1_000,
      items: { type: 'object', required: ['type'], properties: { type: { type: 'string' } } },
    },
  },
} as const;

/** useChat's request: the app may add fields of its own (`body`), which are not read. */
const chatBody = {
  type: 'object',
  required: ['id', 'messages'],
  properties: {
    id: CHAT_ID,
    messages: { type: 'array', minItems: 1, maxItems: 100_000, items: postedMessage },
    trigger: { enum: ['submit-message', 'regenerate-message'] },
    messageId: { type: 'string', maxLength: 200 },
  },
} as const;

const chatParams = objectSchema({ name: AGENT_NAME, chatId: CHAT_ID }, ['name', 'chatId']);

interface ChatBody {
  id: string;
  messages: PostedMessage[];
  trigger?: 'submit-message' | 'regenerate-message';
}

export interface AiSdkRoutesOptions {
  agents: Pick<AgentRegistry, 'get'>;
  sessions: Pick<Sessions, 'create' | 'fork' | 'usable' | 'rejectIfTaskWaiting'>;
  engine: Pick<TurnEngine, 'withTurnSlot' | 'runApprovedCall'>;
  store: Pick<
    Store,
    | 'findFrontEndChat'
    | 'bindFrontEndChat'
    | 'rebindFrontEndChat'
    | 'deleteSession'
    | 'findSession'
    | 'listMessageMeta'
    | 'listMessages'
  > &
    ChatStreamStore;
  events: Pick<EventBus, 'emit'>;
  streams: StreamGate;
  /** This instance, and when another counts as gone: whose turns the chat stream log shows running. */
  liveness: ChatStreamLiveness;
  /** Whether other instances share the database: only then are turns written to the chat stream log. */
  shared: boolean;
}

function chatOf(request: FastifyRequest, agent: string, chatId: string): FrontEndChat {
  return { protocol: 'ai-sdk', owner: ownerOf(principalOf(request)), agentName: agent, chatId };
}

/** A failure as the stream's `error` part: Cairn's stable code, then what to do. */
function errorText(err: unknown, requestId: string): string {
  const [, body] = toHttpError(err, requestId);
  return `${body.error.code}: ${body.error.message}`;
}

export const aiSdkRoutes: FastifyPluginAsync<AiSdkRoutesOptions> = async (app, deps) => {
  const { store, sessions, engine } = deps;
  const runs = new ChatRuns({
    store,
    liveness: deps.liveness,
    shared: deps.shared,
    onLogError: (err) => app.log.warn({ err }, 'ai-sdk chat stream log write failed'),
  });

  /** The chat's session, or undefined when the chat is unknown (or another key's or end user's). */
  async function boundSession(chat: FrontEndChat): Promise<SessionRow | undefined> {
    const id = await store.findFrontEndChat(chat);
    return id === undefined ? undefined : store.findSession(id);
  }

  /** A new session for `chat`; when another request bound one first, that one (ours is dropped). */
  async function openChat(chat: FrontEndChat, agent: AgentConfig): Promise<string> {
    const made = await sessions.create({ agentName: agent.name, mode: 'chat', owner: chat.owner });
    const bound = await store.bindFrontEndChat(chat, made.id);
    if (bound !== made.id) await store.deleteSession(made.id);
    return bound;
  }

  /** Streams a run to the client (from its first chunk) in the UI message stream protocol. */
  function streamRun(
    request: FastifyRequest,
    reply: FastifyReply,
    follow: (gone: AbortSignal) => ReadableStream<UIMessageChunk>,
  ): FastifyReply {
    // A stream slot first (429/503 before any byte is sent), given back when the client goes.
    const release = deps.streams.acquire(principalOf(request));
    const gone = new AbortController();
    reply.raw.once('close', () => {
      gone.abort();
      release();
    });
    reply.hijack();
    void pipeUIMessageStreamToResponse({
      response: reply.raw,
      stream: follow(gone.signal),
      headers: UI_MESSAGE_STREAM_HEADERS,
    }).catch((err: unknown) => logFailure(request, err, 500, 'ai-sdk stream failed'));
    return reply;
  }

  app.post<{ Params: { name: string }; Body: ChatBody }>(
    '/ai-sdk/:name',
    {
      schema: {
        summary: "A chat turn in the AI SDK's UI message stream protocol (useChat).",
        params: objectSchema({ name: AGENT_NAME }, ['name']),
        body: chatBody,
      },
    },
    async (request, reply) => {
      const agent = deps.agents.get(request.params.name);
      const chat = chatOf(request, agent.name, request.body.id);
      // Everything that can be refused is checked before the 200 stream starts.
      const existing = await boundSession(chat);
      if (existing) {
        await sessions.usable(existing.id, agent);
        await sessions.rejectIfTaskWaiting(existing.id);
      }
      const meta = existing ? await store.listMessageMeta(existing.id, 0) : [];
      const tail = existing
        ? await store.listMessages(existing.id, {
            afterSeq: Math.max(0, existing.last_seq - TAIL_MESSAGES),
            limit: TAIL_MESSAGES,
          })
        : [];
      const input = newInput(
        request.body.messages,
        userSeqs(meta),
        openCallOf(tail),
        request.body.trigger ?? 'submit-message',
      );
      let sessionId = existing?.id ?? (await openChat(chat, agent));
      if (input.kind === 'message' && input.forkBefore !== undefined && existing) {
        // An edit or a regenerate: the chat goes on in a fork that ends before the replaced message.
        const at = forkPointBefore(meta, input.forkBefore);
        const fork =
          at === 0
            ? await sessions.create({ agentName: agent.name, mode: 'chat', owner: chat.owner })
            : await sessions.fork(existing.id, at);
        await store.rebindFrontEndChat(chat, existing.id, fork.id);
        sessionId = fork.id;
      }
      // An answer continues the assistant message it answers; anything else starts a new one.
      const last = request.body.messages.at(-1);
      const messageId = last?.role === 'assistant' ? last.id : generateId();
      const run = await runs.start(sessionId, generateId());
      void runTurn(request, agent, sessionId, input, run, messageId).finally(() =>
        runs.finish(sessionId, run),
      );
      return streamRun(request, reply, (gone) => run.follow(gone));
    },
  );

  /** Runs the turn `input` starts on `sessionId`, sending its parts to `run` as message `messageId`. */
  async function runTurn(
    request: FastifyRequest,
    agent: AgentConfig,
    sessionId: string,
    input: ChatInput,
    run: ChatRun,
    messageId: string,
  ): Promise<void> {
    const parts = new PartWriter(run);
    run.send({ type: 'start', messageId });
    try {
      await engine.withTurnSlot(
        sessionId,
        agent,
        async (session, runTurnIn, writes) => {
          const signal = run.cancel.signal;
          let first: ChatMessage;
          let pendingCallIds: ReadonlySet<string> | undefined;
          if (input.kind === 'message') {
            first = { role: 'user', content: input.text };
          } else if (input.kind === 'answer') {
            first = input.result;
            pendingCallIds = new Set([input.callId]);
          } else {
            const { call, approved } = input;
            first = approved
              ? await engine.runApprovedCall({ session, agent, call, signal, writes })
              : {
                  role: 'tool',
                  tool_call_id: call.id,
                  name: call.function.name,
                  content: deniedResult(input.reason),
                };
            pendingCallIds = new Set([call.id]);
            if (approved) parts.toolResult(call.id, first.content ?? '', false);
            else parts.denied(call.id);
            await writes.emit(approved ? 'tool.approved' : 'tool.denied', sessionId, {
              callId: call.id,
              tool: call.function.name,
              by: auditBy(principalOf(request)),
            });
          }
          const turn = await runTurnIn({
            input: [first],
            stream: true,
            signal,
            onEvent: (event) => parts.loopEvent(event),
            ...(pendingCallIds ? { pendingCallIds } : {}),
          });
          parts.outcome(turn);
        },
        { refuseIfTaskWaiting: true },
      );
      parts.finish();
    } catch (err) {
      if (run.cancel.signal.aborted) {
        parts.closeText();
        run.send({ type: 'abort', reason: 'stopped' });
        return;
      }
      const [status] = toHttpError(err, request.id);
      logFailure(request, err, status, 'ai-sdk turn failed');
      parts.closeText();
      run.send({ type: 'error', errorText: errorText(err, request.id) });
    }
  }

  app.get<{ Params: { name: string; chatId: string } }>(
    '/ai-sdk/:name/:chatId/stream',
    {
      schema: {
        summary: "Resumes the chat's running turn (204 when none runs).",
        params: chatParams,
      },
    },
    async (request, reply) => {
      const agent = deps.agents.get(request.params.name);
      const session = await boundSession(chatOf(request, agent.name, request.params.chatId));
      if (!session) return reply.code(204).send();
      const run = runs.active(session.id);
      if (run) return streamRun(request, reply, (gone) => run.follow(gone));
      // A turn another instance runs: replayed and followed through the database.
      const streamId = await runs.remote(session.id);
      if (streamId === undefined) return reply.code(204).send();
      return streamRun(request, reply, (gone) => runs.followRemote(session.id, streamId, gone));
    },
  );

  app.post<{ Params: { name: string; chatId: string } }>(
    '/ai-sdk/:name/:chatId/stop',
    {
      schema: {
        summary: "Cancels the chat's running turn; what it stored stays stored.",
        params: chatParams,
      },
    },
    async (request) => {
      const agent = deps.agents.get(request.params.name);
      const session = await boundSession(chatOf(request, agent.name, request.params.chatId));
      if (!session) return { stopped: false };
      const run = runs.active(session.id);
      if (run) {
        run.cancel.abort(new Error('stopped'));
        return { stopped: true };
      }
      // A turn another instance runs reads its stop flag within about a second.
      return { stopped: await runs.stopRemote(session.id) };
    },
  );

  app.get<{ Params: { name: string; chatId: string } }>(
    '/ai-sdk/:name/:chatId/messages',
    {
      schema: {
        summary: "The chat's history as the AI SDK's UIMessages (empty for a chat never posted).",
        params: chatParams,
      },
    },
    async (request) => {
      const agent = deps.agents.get(request.params.name);
      const session = await boundSession(chatOf(request, agent.name, request.params.chatId));
      if (!session) return [];
      const messages = await store.listMessages(session.id, {
        afterSeq: Math.max(0, session.last_seq - AI_SDK_HISTORY_LIMIT),
        limit: AI_SDK_HISTORY_LIMIT,
      });
      return toUIMessages(messages);
    },
  );
};

/** Turns the loop's events into UI message chunks: text, tool inputs and outputs, steps. */
class PartWriter {
  private textId: string | undefined;
  private texts = 0;
  private inStep = false;

  constructor(private readonly run: ChatRun) {}

  private send(chunk: UIMessageChunk): void {
    this.run.send(chunk);
  }

  private step(): void {
    if (this.inStep) return;
    this.inStep = true;
    this.send({ type: 'start-step' });
  }

  private endStep(): void {
    this.closeText();
    if (!this.inStep) return;
    this.inStep = false;
    this.send({ type: 'finish-step' });
  }

  closeText(): void {
    if (this.textId === undefined) return;
    this.send({ type: 'text-end', id: this.textId });
    this.textId = undefined;
  }

  loopEvent(event: LoopEvent): void {
    switch (event.type) {
      case 'delta':
        this.step();
        if (this.textId === undefined) {
          this.textId = `text-${++this.texts}`;
          this.send({ type: 'text-start', id: this.textId });
        }
        this.send({ type: 'text-delta', id: this.textId, delta: event.text });
        break;
      case 'tool_call':
        this.step();
        this.closeText();
        this.send({
          type: 'tool-input-available',
          toolCallId: event.call.id,
          toolName: event.call.function.name,
          input: callInput(event.call),
        });
        break;
      case 'tool_result':
        this.toolResult(event.callId, event.content, event.isError);
        // The next model call is the next step.
        this.endStep();
        break;
      case 'recall':
        break;
    }
  }

  toolResult(callId: string, content: string, isError: boolean): void {
    this.send(
      isError
        ? { type: 'tool-output-error', toolCallId: callId, errorText: content }
        : { type: 'tool-output-available', toolCallId: callId, output: content },
    );
  }

  denied(callId: string): void {
    this.send({ type: 'tool-output-denied', toolCallId: callId });
  }

  /** How the turn ended, as parts: an approval request when a call waits for a person. */
  outcome(turn: TurnResult): void {
    const { outcome } = turn;
    if (outcome.kind === 'limit' || outcome.kind === 'failed') throw outcome.error;
    if (outcome.kind === 'approval')
      this.send({
        type: 'tool-approval-request',
        approvalId: outcome.call.id,
        toolCallId: outcome.call.id,
      });
    // A question (`ask_user`) needs nothing more: its call went out as a tool input the client answers.
  }

  finish(): void {
    this.endStep();
    this.send({ type: 'finish' });
  }
}

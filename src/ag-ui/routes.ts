/**
 * AG-UI's endpoint: `POST /ag-ui/:name` takes a RunAgentInput and answers
 * with AG-UI events as server-sent events, encoded by @ag-ui/encoder's
 * EventEncoder, so
 * `HttpAgent` from @ag-ui/client works unchanged. The `threadId` maps to one
 * session per key, end user and agent (the front-end chats table); of the
 * input only what is new is read (run-input.ts). A tool call that needs a
 * person's approval, and an `ask_user` question, finish the run with an
 * interrupt outcome; the next run's resume entry carries the decision or
 * the answer. A client that goes away cancels the run, as on every other
 * streaming route.
 */
import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { EventType, PROTOCOL_VERSION, type AGUIEvent, type RunAgentInput } from '@ag-ui/core';
import { EventEncoder } from '@ag-ui/encoder';
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { ChatMessage } from '../llm/messages.js';
import type { EventBus } from '../runtime/event-bus.js';
import type { LoopEvent } from '../runtime/loop.js';
import type { Sessions } from '../runtime/sessions.js';
import type { TurnEngine, TurnResult } from '../runtime/turn-engine.js';
import { deniedResult } from '../runtime/approvals.js';
import type { FrontEndChat, SessionRow, Store } from '../store/store.js';
import { logFailure, toHttpError } from '../http/errors.js';
import { auditBy, ownerOf, principalOf } from '../http/principal.js';
import { AGENT_NAME, objectSchema } from '../http/schemas.js';
import { SseStream } from '../http/sse.js';
import type { StreamGate } from '../http/stream-gate.js';
import { openCallOf, type OpenCall } from '../ai-sdk/ui-messages.js';
import {
  approvalInterrupt,
  newRunInput,
  parseRunInput,
  questionInterrupt,
  type RunInput,
} from './run-input.js';

/** How far back the open tool call is looked for. */
const TAIL_MESSAGES = 64;

export interface AgUiRoutesOptions {
  agents: Pick<AgentRegistry, 'get'>;
  sessions: Pick<Sessions, 'create' | 'usable' | 'rejectIfTaskWaiting'>;
  engine: Pick<TurnEngine, 'withTurnSlot' | 'runApprovedCall'>;
  store: Pick<
    Store,
    'findFrontEndChat' | 'bindFrontEndChat' | 'deleteSession' | 'findSession' | 'listMessages'
  >;
  events: Pick<EventBus, 'emit'>;
  streams: StreamGate;
}

export const agUiRoutes: FastifyPluginAsync<AgUiRoutesOptions> = async (app, deps) => {
  const { store, sessions, engine } = deps;

  /** The thread's session, or undefined when it is unknown (or another key's or end user's). */
  async function boundSession(chat: FrontEndChat): Promise<SessionRow | undefined> {
    const id = await store.findFrontEndChat(chat);
    return id === undefined ? undefined : store.findSession(id);
  }

  /** A new session for `chat`; when another request bound one first, that one (ours is dropped). */
  async function openThread(chat: FrontEndChat, agent: AgentConfig): Promise<string> {
    const made = await sessions.create({ agentName: agent.name, mode: 'chat', owner: chat.owner });
    const bound = await store.bindFrontEndChat(chat, made.id);
    if (bound !== made.id) await store.deleteSession(made.id);
    return bound;
  }

  /** The call the session's last assistant message left open, if any. */
  async function openCallIn(session: SessionRow): Promise<OpenCall | undefined> {
    const tail = await store.listMessages(session.id, {
      afterSeq: Math.max(0, session.last_seq - TAIL_MESSAGES),
      limit: TAIL_MESSAGES,
    });
    return openCallOf(tail);
  }

  app.post<{ Params: { name: string } }>(
    '/ag-ui/:name',
    {
      schema: {
        summary: "Runs the agent on an AG-UI RunAgentInput; answers with AG-UI's events.",
        params: objectSchema({ name: AGENT_NAME }, ['name']),
        // The body is checked against AG-UI's own RunAgentInput schema in the handler.
        body: { type: 'object' },
      },
    },
    async (request, reply) => {
      const agent = deps.agents.get(request.params.name);
      const input = parseRunInput(request.body);
      const chat: FrontEndChat = {
        protocol: 'ag-ui',
        owner: ownerOf(principalOf(request)),
        agentName: agent.name,
        chatId: input.threadId,
      };
      // Everything that can be refused is checked before the 200 stream starts.
      const existing = await boundSession(chat);
      if (existing) {
        await sessions.usable(existing.id, agent);
        await sessions.rejectIfTaskWaiting(existing.id);
      }
      const asked = newRunInput(input, existing ? await openCallIn(existing) : undefined);
      const sessionId = existing?.id ?? (await openThread(chat, agent));
      const stream = new SseStream(reply, deps.streams);
      const writer = new AgUiWriter(stream, input);
      const cancel = new AbortController();
      reply.raw.once('close', () => cancel.abort(new Error('client went away')));
      await runThread(request, agent, sessionId, asked, writer, cancel.signal);
      stream.end();
      return reply;
    },
  );

  /** Runs the turn `asked` starts on `sessionId`, as one AG-UI run. */
  async function runThread(
    request: FastifyRequest,
    agent: AgentConfig,
    sessionId: string,
    asked: RunInput,
    writer: AgUiWriter,
    signal: AbortSignal,
  ): Promise<void> {
    writer.started();
    try {
      const turn = await engine.withTurnSlot(
        sessionId,
        agent,
        async (session, runTurnIn, writes) => {
          let first: ChatMessage;
          let pendingCallIds: ReadonlySet<string> | undefined;
          if (asked.kind === 'message') {
            first = { role: 'user', content: asked.text };
          } else if (asked.kind === 'answer') {
            first = asked.result;
            pendingCallIds = new Set([asked.callId]);
          } else {
            const { call, approved } = asked;
            first = approved
              ? await engine.runApprovedCall({ session, agent, call, signal, writes })
              : {
                  role: 'tool',
                  tool_call_id: call.id,
                  name: call.function.name,
                  content: deniedResult(asked.reason),
                };
            pendingCallIds = new Set([call.id]);
            writer.toolResult(call.id, first.content ?? '');
            await writes.emit(approved ? 'tool.approved' : 'tool.denied', sessionId, {
              callId: call.id,
              tool: call.function.name,
              by: auditBy(principalOf(request)),
            });
          }
          return runTurnIn({
            input: [first],
            stream: true,
            signal,
            onEvent: (event) => writer.loopEvent(event),
            ...(pendingCallIds ? { pendingCallIds } : {}),
          });
        },
        { refuseIfTaskWaiting: true },
      );
      writer.finished(turn);
    } catch (err) {
      if (signal.aborted) return;
      const [status, body] = toHttpError(err, request.id);
      logFailure(request, err, status, 'ag-ui run failed');
      writer.failed(body.error.code, body.error.message);
    }
  }
};

/** Turns the loop's events into AG-UI events: text messages, tool calls and results, the run's end. */
class AgUiWriter {
  /** The assistant message the current model call writes into. */
  private messageId = randomUUID();
  /** Server-sent events only: AG-UI's protobuf framing is not offered. */
  private readonly encoder = new EventEncoder();
  private textOpen = false;

  constructor(
    private readonly stream: SseStream,
    private readonly input: RunAgentInput,
  ) {}

  private send(event: AGUIEvent): void {
    this.stream.encoded(this.encoder.encode(event));
  }

  started(): void {
    this.send({
      type: EventType.RUN_STARTED,
      threadId: this.input.threadId,
      runId: this.input.runId,
      protocolVersion: PROTOCOL_VERSION,
    });
  }

  private closeText(): void {
    if (!this.textOpen) return;
    this.textOpen = false;
    this.send({ type: EventType.TEXT_MESSAGE_END, messageId: this.messageId });
  }

  loopEvent(event: LoopEvent): void {
    switch (event.type) {
      case 'delta':
        if (!this.textOpen) {
          this.textOpen = true;
          this.send({
            type: EventType.TEXT_MESSAGE_START,
            messageId: this.messageId,
            role: 'assistant',
          });
        }
        this.send({
          type: EventType.TEXT_MESSAGE_CONTENT,
          messageId: this.messageId,
          delta: event.text,
        });
        break;
      case 'tool_call': {
        this.closeText();
        const { id, function: fn } = event.call;
        this.send({
          type: EventType.TOOL_CALL_START,
          toolCallId: id,
          toolCallName: fn.name,
          parentMessageId: this.messageId,
        });
        if (fn.arguments !== '')
          this.send({ type: EventType.TOOL_CALL_ARGS, toolCallId: id, delta: fn.arguments });
        this.send({ type: EventType.TOOL_CALL_END, toolCallId: id });
        break;
      }
      case 'tool_result':
        this.toolResult(event.callId, event.content);
        // The next model call writes a new assistant message.
        this.messageId = randomUUID();
        break;
      case 'recall':
        break;
    }
  }

  toolResult(callId: string, content: string): void {
    this.closeText();
    this.send({
      type: EventType.TOOL_CALL_RESULT,
      messageId: randomUUID(),
      toolCallId: callId,
      content,
      role: 'tool',
    });
  }

  /** How the turn ended: success, or an interrupt when a call waits for a person. */
  finished(turn: TurnResult): void {
    const { outcome } = turn;
    if (outcome.kind === 'limit' || outcome.kind === 'failed') throw outcome.error;
    this.closeText();
    const interrupt =
      outcome.kind === 'approval'
        ? approvalInterrupt(outcome.call)
        : outcome.kind === 'question'
          ? questionInterrupt(outcome.callId, outcome.question)
          : undefined;
    this.send({
      type: EventType.RUN_FINISHED,
      threadId: this.input.threadId,
      runId: this.input.runId,
      outcome: interrupt ? { type: 'interrupt', interrupts: [interrupt] } : { type: 'success' },
    });
  }

  failed(code: string, message: string): void {
    this.closeText();
    this.send({ type: EventType.RUN_ERROR, message, code });
  }
}

/**
 * POST /agents/:name/chat: one chat turn, as JSON or as server-sent events
 * (`session`, `delta`, `tool_call`, `tool_result`, `done`, `error`). A client
 * that disconnects mid-turn cancels it; what was stored stays stored.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { AgentRegistry } from '../../agents/agent-registry.js';
import type { ChatTurns } from '../../runtime/chat-turns.js';
import type { Sessions } from '../../runtime/sessions.js';
import { logFailure, toHttpError } from '../errors.js';
import { agentParams, objectSchema, SESSION_ID, USER_TEXT } from '../schemas.js';
import { SseStream, wantsEventStream } from '../sse.js';
import type { StreamGate } from '../stream-gate.js';
import { markTurnFailed } from '../turn-outcome.js';
import { ownerOf, principalOf } from '../principal.js';

interface ChatBody {
  message: string;
  sessionId?: string;
  stream?: boolean;
}

const chatBody = objectSchema(
  { message: USER_TEXT, sessionId: SESSION_ID, stream: { type: 'boolean' } },
  ['message'],
);

export interface ChatRoutesOptions {
  chats: Pick<ChatTurns, 'run'>;
  sessions: Pick<Sessions, 'usable' | 'rejectIfTaskWaiting'>;
  agents: Pick<AgentRegistry, 'get'>;
  streams: StreamGate;
}

export const chatRoutes: FastifyPluginAsync<ChatRoutesOptions> = async (app, deps) => {
  app.post<{ Params: { name: string }; Body: ChatBody }>(
    '/agents/:name/chat',
    { schema: { params: agentParams, body: chatBody } },
    async (request, reply) => {
      const { message, sessionId, stream } = request.body;
      const cancel = new AbortController();
      // `close` on the response fires when the client goes away before we answered.
      reply.raw.on('close', () => {
        if (!reply.raw.writableFinished) cancel.abort(new Error('client disconnected'));
      });
      // An incoming W3C trace context: the turn's span continues the caller's trace.
      const traceparent = request.headers.traceparent;
      const base = {
        agentName: request.params.name,
        message,
        ...(sessionId !== undefined ? { sessionId } : {}),
        ...(typeof traceparent === 'string' ? { traceparent } : {}),
        owner: ownerOf(principalOf(request)),
        signal: cancel.signal,
      };

      if (!wantsEventStream(stream, request.headers.accept)) {
        return deps.chats.run(base);
      }

      // Validate agent and session before committing to a 200 stream, so a
      // bad request still gets its 4xx status instead of a 200 with an error event.
      const agent = deps.agents.get(request.params.name);
      if (sessionId !== undefined) {
        await deps.sessions.usable(sessionId, agent);
        await deps.sessions.rejectIfTaskWaiting(sessionId);
      }
      // Takes a stream slot (503 when none is free) before the turn starts,
      // so a refused stream never runs a turn.
      const sse = new SseStream(reply, deps.streams);
      try {
        const result = await deps.chats.run({
          ...base,
          stream: true,
          onEvent: (event) => {
            switch (event.type) {
              case 'session':
                sse.send('session', { sessionId: event.sessionId });
                break;
              case 'delta':
                sse.send('delta', { text: event.text });
                break;
              case 'tool_call':
                sse.send('tool_call', {
                  id: event.call.id,
                  name: event.call.function.name,
                  arguments: event.call.function.arguments,
                });
                break;
              case 'tool_result':
                sse.send('tool_result', {
                  id: event.callId,
                  name: event.name,
                  content: event.content,
                  isError: event.isError,
                });
                break;
              case 'recall':
                sse.send('recall', { seqs: event.seqs, tokens: event.tokens });
                break;
            }
          },
        });
        sse.send('done', result);
      } catch (err) {
        const [status, body] = toHttpError(err, request.id);
        markTurnFailed(request);
        logFailure(request, err, status, 'streamed chat failed');
        sse.send('error', { status, ...body });
      } finally {
        sse.end();
      }
      return reply;
    },
  );
};

/**
 * The OpenAI-compatible API under `/v1`, registered as one
 * fastify plugin so that everything failing under `/v1` — auth, rate limit,
 * bad JSON, unknown routes — answers in OpenAI's error shape, while the rest
 * of the API keeps Cairn's.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { StreamGate } from '../http/stream-gate.js';
import { chatCompletionRoutes } from './chat-completions.js';
import { Conversations, type ConversationsDeps } from './conversations.js';
import { InvalidRequestError, sendOpenAIError } from './errors.js';
import { modelRoutes } from './models.js';
import { responseRoutes, type ResponseRouteDeps } from './responses.js';

export interface OpenAIApiRoutesOptions extends ConversationsDeps {
  agents: AgentRegistry;
  store: ConversationsDeps['store'] & ResponseRouteDeps['store'];
  engine: ConversationsDeps['engine'] & ResponseRouteDeps['engine'];
  /** The server's one stream gate: /v1 streams count against `server.maxStreams` too. */
  streams: StreamGate;
}

/** The `/v1/*` routes, under their own error and not-found handlers (the prefix is set here). */
export const openaiApiRoutes: FastifyPluginAsync<OpenAIApiRoutesOptions> = async (app, deps) => {
  const conversations = new Conversations(deps);
  const startedAt = Math.floor(Date.now() / 1000);
  void app.register(
    async (v1) => {
      v1.setErrorHandler((err, request, reply) => sendOpenAIError(err, request, reply));
      v1.setNotFoundHandler((request, reply) =>
        sendOpenAIError(
          new InvalidRequestError(
            `Invalid URL (${request.method} ${request.url.split('?')[0]}): Cairn serves /v1/models, /v1/chat/completions and /v1/responses.`,
            { status: 404, code: 'unknown_url' },
          ),
          request,
          reply,
        ),
      );
      modelRoutes(v1, { agents: deps.agents, startedAt });
      chatCompletionRoutes(v1, { conversations, streams: deps.streams });
      responseRoutes(v1, {
        conversations,
        store: deps.store,
        engine: deps.engine,
        streams: deps.streams,
      });
    },
    { prefix: '/v1' },
  );
};

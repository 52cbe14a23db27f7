/**
 * A2A over HTTP: every agent's card at `/a2a/:name/.well-known/agent-card.json`,
 * the server's index card at `/.well-known/agent-card.json`, and each agent's
 * JSON-RPC endpoint at `POST /a2a/:name` (src/a2a/endpoint.ts, loaded with
 * the A2A SDK on the first A2A request). An unknown agent is a 404 in Cairn's
 * error envelope, like every other route.
 */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { CairnError } from '../errors.js';
import { agentParams } from '../http/schemas.js';
import { accessFor } from './access.js';
import type { CardContext } from './agent-card.js';
import type { A2AEndpointDeps } from './endpoint.js';
import { AGENT_CARD_PATH } from './paths.js';

export interface A2ARoutesOptions extends A2AEndpointDeps {
  agents: Pick<AgentRegistry, 'get' | 'list'>;
  /** True when the server has an API key (the cards then name the bearer scheme). */
  keyRequired: boolean;
}

function loadEndpoint() {
  return import('./endpoint.js');
}

function cardContext(request: FastifyRequest, keyRequired: boolean): CardContext {
  return { baseUrl: `${request.protocol}://${request.host}`, keyRequired };
}

/** The agent named in the URL, if the caller may use it; 404 AGENT_NOT_FOUND otherwise. */
function visibleAgent(request: FastifyRequest, deps: A2ARoutesOptions, name: string): AgentConfig {
  // get() throws the registry's own 404, which says why a broken agent is missing.
  const agent = deps.agents.get(name);
  if (!accessFor(request).mayUseAgent(agent)) {
    throw new CairnError(
      'AGENT_NOT_FOUND',
      `Agent "${name}" not found. Its card is at /a2a/<agent>/${AGENT_CARD_PATH} for the agents this key may use.`,
    );
  }
  return agent;
}

export const a2aRoutes: FastifyPluginAsync<A2ARoutesOptions> = async (app, deps) => {
  // Open streams end at shutdown: a peer re-subscribes with SubscribeToTask.
  const openStreams = new Set<AbortController>();
  app.addHook('preClose', async () => {
    for (const controller of openStreams) controller.abort();
  });

  app.get(
    `/${AGENT_CARD_PATH}`,
    {
      schema: {
        summary: "The server's A2A card: one skill per agent, and where each agent's card is.",
      },
    },
    async (request) => {
      const access = accessFor(request);
      const agents = deps.agents.list().filter((agent) => access.mayUseAgent(agent));
      const { indexCard } = await loadEndpoint();
      return indexCard(agents, cardContext(request, deps.keyRequired));
    },
  );

  app.get<{ Params: { name: string } }>(
    `/a2a/:name/${AGENT_CARD_PATH}`,
    { schema: { summary: "An agent's A2A 1.0 agent card.", params: agentParams } },
    async (request) => {
      const agent = visibleAgent(request, deps, request.params.name);
      const { agentCard } = await loadEndpoint();
      return agentCard(agent, cardContext(request, deps.keyRequired));
    },
  );

  // JSON-RPC bodies are read as text: a body that is not JSON is a JSON-RPC
  // parse error, not Cairn's 400. The parsers live in this scope only.
  void app.register(async (rpc) => {
    rpc.removeContentTypeParser('application/json');
    rpc.addContentTypeParser(
      ['application/json', 'application/a2a+json'],
      { parseAs: 'string' },
      (_request, body, done) => done(null, body),
    );
    rpc.post<{ Params: { name: string } }>(
      '/a2a/:name',
      {
        schema: {
          summary: "An agent's A2A 1.0 JSON-RPC endpoint",
          description:
            'JSON-RPC 2.0, A2A 1.0 binding: SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask. The streaming methods answer with server-sent events. JSON-RPC errors are HTTP 200 with "error" in the body.',
          params: agentParams,
        },
      },
      async (request, reply) => {
        const agent = visibleAgent(request, deps, request.params.name);
        const { answerRpc } = await loadEndpoint();
        return answerRpc({
          request,
          reply,
          agent,
          cards: cardContext(request, deps.keyRequired),
          deps,
          openStreams,
        });
      },
    );
  });
};

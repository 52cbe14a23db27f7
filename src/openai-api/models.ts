/** GET /v1/models and /v1/models/:id: every loaded agent, as an OpenAI model. */
import type { FastifyInstance } from 'fastify';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { InvalidRequestError } from './errors.js';
import { mayUseAgent, principalOf } from '../http/principal.js';

export function modelRoutes(
  app: FastifyInstance,
  deps: { agents: AgentRegistry; startedAt: number },
): void {
  const model = (name: string) => ({
    id: name,
    object: 'model' as const,
    // Agents have no creation date of their own; the server's start stands in.
    created: deps.startedAt,
    owned_by: 'cairn',
  });
  app.get('/models', async (request) => ({
    object: 'list' as const,
    data: deps.agents
      .list()
      .filter((agent) => mayUseAgent(principalOf(request), agent.name))
      .map((agent) => model(agent.name)),
  }));
  app.get<{ Params: { id: string } }>('/models/:id', async (request) => {
    const agent = deps.agents.find(request.params.id);
    // A model the key may not use does not exist for it.
    if (!agent || !mayUseAgent(principalOf(request), agent.name)) {
      throw new InvalidRequestError(
        `The model "${request.params.id}" does not exist: models are Cairn agents (GET /v1/models).`,
        { status: 404, code: 'model_not_found', param: 'model' },
      );
    }
    return model(agent.name);
  });
}

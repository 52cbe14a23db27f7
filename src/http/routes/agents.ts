/** GET /agents and GET /agents/:name: the loaded agents, without filesystem paths. */
import type { FastifyInstance } from 'fastify';
import type { AgentConfig } from '../../agents/agent-config.js';
import type { AgentRegistry } from '../../agents/agent-registry.js';
import { agentParams, NO_OPTIONS_BODY } from '../schemas.js';
import { mayUseAgent, principalOf } from '../principal.js';

/** The API view of an agent: its configuration minus where it lives on disk. */
export function publicAgent(agent: AgentConfig): Omit<AgentConfig, 'dir'> {
  const { dir: _dir, ...rest } = agent;
  return rest;
}

export function agentRoutes(app: FastifyInstance, deps: { agents: AgentRegistry }): void {
  app.get('/agents', async (request) => {
    const principal = principalOf(request);
    return {
      agents: deps.agents
        .list()
        .filter((agent) => mayUseAgent(principal, agent.name))
        .map(publicAgent),
    };
  });

  app.get<{ Params: { name: string } }>(
    '/agents/:name',
    { schema: { params: agentParams } },
    async (request) => ({
      agent: publicAgent(deps.agents.get(request.params.name)),
    }),
  );
}

/** `POST /agents/reload`: reload agents/*\/agent.json now (the watch does it on changes too). */
export function agentReloadRoutes(
  app: FastifyInstance,
  deps: { reload: () => Promise<{ agents: string[]; problems: string[] }> },
): void {
  app.post('/agents/reload', { schema: { body: NO_OPTIONS_BODY } }, async () => deps.reload());
}

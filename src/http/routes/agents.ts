/**
 * GET /agents and GET /agents/:name: the loaded agents, without filesystem
 * paths, each with the model its conversations call (`resolvedModel`).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { AgentConfig } from '../../agents/agent-config.js';
import type { AgentRegistry } from '../../agents/agent-registry.js';
import type { ModelRoleSettings } from '../../config/settings.js';
import type { McpEntryNotReady } from '../../mcp/mcp-manager.js';
import { agentParams, NO_OPTIONS_BODY } from '../schemas.js';
import { mayUseAgent, principalOf } from '../principal.js';

/** What the API says of the `main` role: never its URL or key. */
export type MainModel = Pick<ModelRoleSettings, 'provider' | 'model' | 'contextWindow'>;

/** The model an agent's chats, tasks and ticks call: `main`, with the agent's `model` name if it sets one. */
export interface ResolvedModel {
  provider: string;
  model: string;
  contextWindow: number;
}

export type PublicAgent = Omit<AgentConfig, 'dir' | 'defaultCompaction'> & {
  defaultCompaction: AgentConfig['defaultCompaction'] & {
    /** The older spelling of `compactCount`, still sent: clients written before the rename read it. */
    compactionCount: number;
  };
  resolvedModel: ResolvedModel;
  /** Its `mcp:` entries whose server is not connected yet (or has failed); absent when all are ready. */
  toolsNotReady?: McpEntryNotReady[];
};

/** The API view of an agent: its configuration minus where it lives on disk, plus its model. */
export function publicAgent(
  agent: AgentConfig,
  main: MainModel,
  notReady: readonly McpEntryNotReady[] = [],
): PublicAgent {
  const { dir: _dir, defaultCompaction, ...rest } = agent;
  return {
    ...(notReady.length > 0 ? { toolsNotReady: [...notReady] } : {}),
    ...rest,
    defaultCompaction: { ...defaultCompaction, compactionCount: defaultCompaction.compactCount },
    resolvedModel: {
      provider: main.provider,
      // The offline model has one name; an agent's `model` only renames an online one.
      model: main.provider === 'offline' ? main.model : (agent.model ?? main.model),
      contextWindow: main.contextWindow,
    },
  };
}

/**
 * The documented response: `resolvedModel` spelled out, the configuration
 * fields (as in agent.json, with defaults) passed through as they are.
 */
const AGENT_VIEW = {
  type: 'object',
  additionalProperties: true,
  required: ['name', 'resolvedModel'],
  properties: {
    name: { type: 'string' },
    description: { type: 'string' },
    resolvedModel: {
      type: 'object',
      additionalProperties: false,
      required: ['provider', 'model', 'contextWindow'],
      description:
        "The model this agent's conversations call: the main role's provider and context window, with the agent's `model` as the name when it sets one.",
      properties: {
        provider: { type: 'string', description: 'openai, anthropic or offline' },
        model: { type: 'string' },
        contextWindow: { type: 'integer' },
      },
    },
    toolsNotReady: {
      type: 'array',
      description:
        "The agent's `mcp:` entries whose server is not connected: still connecting after start-up (servers connect in the background) or failing and being retried. Their tools are missing from its turns until the server answers. Absent when every entry is ready.",
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['tool', 'status'],
        properties: {
          tool: { type: 'string' },
          status: { type: 'string', enum: ['connecting', 'error', 'closed'] },
          error: { type: 'string' },
        },
      },
    },
  },
} as const;

export interface AgentRoutesOptions {
  agents: AgentRegistry;
  mainModel: MainModel;
  /** The agent's `mcp:` entries whose server is not connected. */
  toolsNotReady: (toolEntries: readonly string[]) => McpEntryNotReady[];
}

export const agentRoutes: FastifyPluginAsync<AgentRoutesOptions> = async (app, deps) => {
  const view = (agent: AgentConfig) =>
    publicAgent(agent, deps.mainModel, deps.toolsNotReady(agent.tools));

  app.get(
    '/agents',
    {
      schema: {
        response: {
          200: {
            type: 'object',
            required: ['agents'],
            properties: { agents: { type: 'array', items: AGENT_VIEW } },
          },
        },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      return {
        agents: deps.agents
          .list()
          .filter((agent) => mayUseAgent(principal, agent.name))
          .map(view),
      };
    },
  );

  app.get<{ Params: { name: string } }>(
    '/agents/:name',
    {
      schema: {
        params: agentParams,
        response: {
          200: { type: 'object', required: ['agent'], properties: { agent: AGENT_VIEW } },
        },
      },
    },
    async (request) => ({
      agent: view(deps.agents.get(request.params.name)),
    }),
  );
};

export interface AgentReloadRoutesOptions {
  reload: () => Promise<{ agents: string[]; problems: string[] }>;
}

/** `POST /agents/reload`: reload agents/*\/agent.json now (the watch does it on changes too). */
export const agentReloadRoutes: FastifyPluginAsync<AgentReloadRoutesOptions> = async (
  app,
  deps,
) => {
  app.post('/agents/reload', { schema: { body: NO_OPTIONS_BODY } }, async () => deps.reload());
};

/**
 * A2A agent cards: each Cairn agent described as an A2A 1.0 agent (one
 * JSON-RPC interface at `/a2a/<name>`, streaming, bearer auth when the server
 * has a key), and the server's index card naming them all. Pure: the base URL
 * and whether a key is configured are passed in. Cards go on the wire in the
 * protocol's JSON form (`AgentCard.toJSON`).
 */
import { A2A_PROTOCOL_VERSION, AgentCard } from '@a2a-js/sdk';
import type { AgentSkill, SecurityRequirement, SecurityScheme } from '@a2a-js/sdk';
import type { AgentConfig } from '../agents/agent-config.js';
import { VERSION } from '../version.js';
import { AGENT_CARD_PATH } from './paths.js';

/** What the peer may send: text, and JSON data parts (given to the agent as JSON text). */
const INPUT_MODES = ['text/plain', 'application/json'];
const OUTPUT_MODES = ['text/plain'];
const BEARER = 'bearer';

export interface CardContext {
  /** Where the server is reached, e.g. `http://127.0.0.1:3000` (no trailing slash). */
  baseUrl: string;
  /** True when requests need `Authorization: Bearer <key>`. */
  keyRequired: boolean;
}

/** The URL of an agent's JSON-RPC endpoint. */
export function agentEndpoint(baseUrl: string, agentName: string): string {
  return `${baseUrl}/a2a/${agentName}`;
}

function security(keyRequired: boolean): {
  securitySchemes: Record<string, SecurityScheme>;
  securityRequirements: SecurityRequirement[];
} {
  if (!keyRequired) return { securitySchemes: {}, securityRequirements: [] };
  return {
    securitySchemes: {
      [BEARER]: {
        scheme: {
          $case: 'httpAuthSecurityScheme',
          value: {
            scheme: 'Bearer',
            bearerFormat: '',
            description:
              "The Cairn server's API key, sent as Authorization: Bearer <key> (the same key as the rest of the API).",
          },
        },
      },
    },
    securityRequirements: [{ schemes: { [BEARER]: { list: [] } } }],
  };
}

/** The agent as one skill: what it is for (its description) and the tools it can use. */
function agentSkill(agent: AgentConfig): AgentSkill {
  return {
    id: agent.name,
    name: agent.name,
    description: agent.description,
    tags: ['cairn', ...agent.tools],
    examples: [],
    inputModes: INPUT_MODES,
    outputModes: OUTPUT_MODES,
    securityRequirements: [],
  };
}

/** The agent card of `agent`, in the protocol's JSON form. */
export function agentCard(agent: AgentConfig, context: CardContext): unknown {
  return AgentCard.toJSON({
    name: agent.name,
    description: agent.description,
    supportedInterfaces: [
      {
        url: agentEndpoint(context.baseUrl, agent.name),
        protocolBinding: 'JSONRPC',
        protocolVersion: A2A_PROTOCOL_VERSION,
        tenant: '',
      },
    ],
    provider: undefined,
    version: VERSION,
    capabilities: {
      streaming: true,
      pushNotifications: false,
      extensions: [],
      extendedAgentCard: false,
    },
    ...security(context.keyRequired),
    defaultInputModes: INPUT_MODES,
    defaultOutputModes: OUTPUT_MODES,
    skills: [agentSkill(agent)],
    signatures: [],
  });
}

/**
 * The server's card at `/.well-known/agent-card.json`: Cairn itself, with one
 * skill per agent and no interface of its own (a peer talks to one agent, at
 * the URL in that agent's card). `agents` lists where each card is.
 */
export function indexCard(agents: readonly AgentConfig[], context: CardContext): unknown {
  const card = AgentCard.toJSON({
    name: 'Cairn',
    description: `A Cairn server with ${agents.length} agent(s). Each agent is an A2A agent of its own: fetch its card at /a2a/<agent>/${AGENT_CARD_PATH} (listed under "agents").`,
    supportedInterfaces: [],
    provider: undefined,
    version: VERSION,
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    ...security(context.keyRequired),
    defaultInputModes: INPUT_MODES,
    defaultOutputModes: OUTPUT_MODES,
    skills: agents.map(agentSkill),
    signatures: [],
  }) as Record<string, unknown>;
  return {
    ...card,
    agents: agents.map((agent) => ({
      name: agent.name,
      description: agent.description,
      url: agentEndpoint(context.baseUrl, agent.name),
      agentCardUrl: `${agentEndpoint(context.baseUrl, agent.name)}/${AGENT_CARD_PATH}`,
    })),
  };
}

/**
 * Cairn as an MCP server: each agent is a tool `chat_with_<agent>` taking
 * `{message, sessionId?}` and answering with the reply and the session id, so
 * an MCP client (desktop assistant, IDE, another agent framework) can hold a
 * conversation with a Cairn agent. Served over stdio by `cairn mcp` and over
 * Streamable HTTP by `POST /mcp`; both build it with this function. A call
 * that carries a `progressToken` gets progress notifications while it runs.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  type CallToolResult,
  type Tool as McpTool,
} from '@modelcontextprotocol/sdk/types.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { CairnError, describeError } from '../errors.js';
import type { ChatTurns } from '../runtime/chat-turns.js';
import { VERSION } from '../version.js';
import { TurnProgress } from './turn-progress.js';

export const CHAT_TOOL_PREFIX = 'chat_with_';
/** The longest message accepted from an MCP client, like the HTTP chat route's body limit in spirit. */
const MAX_MESSAGE_CHARS = 100_000;

export interface CairnMcpServerDeps {
  /** The one call the server needs: a chat turn. */
  chats: Pick<ChatTurns, 'run'>;
  agents: Pick<AgentRegistry, 'list' | 'find'>;
  /** Where unexpected failures go (their details are not sent to the client). */
  logError?: (details: Record<string, unknown>, message: string) => void;
  /** How often a turn reporting progress says it is still working (default 5 s). */
  progressHeartbeatMs?: number;
}

const INPUT_SCHEMA = {
  type: 'object' as const,
  properties: {
    message: {
      type: 'string',
      minLength: 1,
      description: 'What to say to the agent.',
    },
    sessionId: {
      type: 'string',
      description:
        'Continue this conversation (the sessionId of an earlier reply). Omit to start a new one.',
    },
  },
  required: ['message'],
  additionalProperties: false,
};

const OUTPUT_SCHEMA = {
  type: 'object' as const,
  properties: { reply: { type: 'string' }, sessionId: { type: 'string' } },
  required: ['reply', 'sessionId'],
};

function toolFor(agent: { name: string; description: string }): McpTool {
  return {
    name: `${CHAT_TOOL_PREFIX}${agent.name}`,
    description: `Chat with the Cairn agent "${agent.name}"${agent.description ? `: ${agent.description}` : ''}. Returns the reply and a sessionId; pass the sessionId back to continue the conversation.`,
    inputSchema: INPUT_SCHEMA,
    outputSchema: OUTPUT_SCHEMA,
  };
}

function errorResult(message: string): CallToolResult {
  return { content: [{ type: 'text', text: message }], isError: true };
}

/** Arguments as the input schema describes them, or the problem with them. */
function readArguments(
  args: Record<string, unknown> | undefined,
): { message: string; sessionId?: string } | string {
  const message = args?.['message'];
  const sessionId = args?.['sessionId'];
  if (typeof message !== 'string' || message.trim() === '')
    return '"message" must be a non-empty string.';
  if (message.length > MAX_MESSAGE_CHARS)
    return `"message" is longer than ${MAX_MESSAGE_CHARS} characters.`;
  if (sessionId !== undefined && typeof sessionId !== 'string')
    return '"sessionId" must be a string (the sessionId of an earlier reply).';
  const unknown = Object.keys(args ?? {}).filter((k) => k !== 'message' && k !== 'sessionId');
  if (unknown.length > 0) return `Unknown argument(s): ${unknown.join(', ')}.`;
  return { message, ...(sessionId !== undefined ? { sessionId } : {}) };
}

/** A new MCP server over Cairn's agents; connect it to one transport. */
export function createCairnMcpServer(deps: CairnMcpServerDeps): Server {
  const server = new Server({ name: 'cairn', version: VERSION }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: deps.agents.list().map(toolFor),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name, arguments: args } = request.params;
    const agent = name.startsWith(CHAT_TOOL_PREFIX)
      ? deps.agents.find(name.slice(CHAT_TOOL_PREFIX.length))
      : undefined;
    if (!agent) {
      return errorResult(
        `Unknown tool "${name}". Tools: ${
          deps.agents
            .list()
            .map((a) => `${CHAT_TOOL_PREFIX}${a.name}`)
            .join(', ') || 'none'
        }.`,
      );
    }
    const input = readArguments(args);
    if (typeof input === 'string') return errorResult(input);
    const token = request.params._meta?.progressToken;
    const progress =
      token === undefined
        ? undefined
        : new TurnProgress(
            token,
            (notification) => extra.sendNotification(notification),
            agent.name,
            deps.progressHeartbeatMs,
          );
    try {
      const result = await deps.chats.run({
        agentName: agent.name,
        message: input.message,
        ...(input.sessionId !== undefined ? { sessionId: input.sessionId } : {}),
        signal: extra.signal,
        ...(progress ? { stream: true, onEvent: progress.onEvent } : {}),
      });
      return {
        content: [
          { type: 'text', text: result.reply },
          { type: 'text', text: `sessionId: ${result.sessionId}` },
        ],
        structuredContent: { reply: result.reply, sessionId: result.sessionId },
      };
    } catch (err) {
      // Cairn's own errors carry a stable code and a message fit to show;
      // anything else is reported without its details (no stack, no internals).
      if (err instanceof CairnError) return errorResult(`${err.code}: ${err.message}`);
      deps.logError?.({ agent: agent.name, message: describeError(err) }, 'MCP chat turn failed');
      return errorResult('INTERNAL: the turn failed unexpectedly; the server log has the details.');
    } finally {
      progress?.stop();
    }
  });
  return server;
}

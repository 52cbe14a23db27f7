/**
 * POST /mcp: Cairn as an MCP server over Streamable HTTP, behind
 * the same bearer key as the rest of the API. Stateless: each request gets its
 * own server and transport, since the conversation state lives in Cairn's
 * sessions (the tools' `sessionId`), not in an MCP session. GET and DELETE
 * (server-sent streams, session teardown) are not offered: 405.
 */
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { CairnMcpServerDeps } from '../../mcp/cairn-mcp-server.js';
import { CairnError } from '../../errors.js';
import type { Access } from '../access.js';
import { sendError } from '../errors.js';
import { mayUseAgent, ownerOf, principalOf, type Principal } from '../principal.js';

const METHOD_NOT_ALLOWED = {
  jsonrpc: '2.0',
  error: {
    code: -32000,
    message: 'Method not allowed: this MCP endpoint is stateless; send requests with POST.',
  },
  id: null,
};

/**
 * The MCP server SDK (and zod under it, ~20 MB resident) loads on the first
 * POST /mcp, not at start-up: most servers are never used as an MCP server.
 */
async function loadServerSdk() {
  const [transport, server] = await Promise.all([
    import('@modelcontextprotocol/sdk/server/streamableHttp.js'),
    import('../../mcp/cairn-mcp-server.js'),
  ]);
  return {
    StreamableHTTPServerTransport: transport.StreamableHTTPServerTransport,
    createCairnMcpServer: server.createCairnMcpServer,
  };
}

/** The posted JSON-RPC message carries `params._meta.progressToken`. */
function asksForProgress(body: unknown): boolean {
  const meta = (body as { params?: { _meta?: { progressToken?: unknown } } } | null)?.params?._meta;
  return meta?.progressToken !== undefined;
}

export interface McpRoutesOptions extends CairnMcpServerDeps {
  access: Pick<Access, 'session'>;
}

/**
 * The MCP server as `principal` sees it: only its key's agents are tools,
 * a conversation it starts is its own, and it continues only its own.
 */
function scopedTo(principal: Principal, deps: McpRoutesOptions): CairnMcpServerDeps {
  return {
    agents: {
      list: () => deps.agents.list().filter((agent) => mayUseAgent(principal, agent.name)),
      find: (name) => (mayUseAgent(principal, name) ? deps.agents.find(name) : undefined),
    },
    chats: {
      run: async (input) => {
        if (input.sessionId !== undefined) await deps.access.session(principal, input.sessionId);
        return deps.chats.run({ ...input, owner: ownerOf(principal) });
      },
    },
  };
}

export const mcpRoutes: FastifyPluginAsync<McpRoutesOptions> = async (app, deps) => {
  // A body too deep to walk is JSON-RPC's invalid params, in JSON-RPC's shape.
  app.setErrorHandler((err, request, reply) => {
    if (err instanceof CairnError && err.code === 'JSON_TOO_DEEP')
      return reply.code(400).send({
        jsonrpc: '2.0',
        id: null,
        error: { code: -32602, message: err.message },
      });
    sendError(err, request, reply);
  });
  app.post('/mcp', async (request, reply) => {
    const { StreamableHTTPServerTransport, createCairnMcpServer } = await loadServerSdk();
    const server = createCairnMcpServer({
      ...scopedTo(principalOf(request), deps),
      logError: (details, message) => request.log.error(details, message),
    });
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      // A plain JSON answer has no room for notifications: a call that asks
      // for progress is answered as an event stream carrying them.
      enableJsonResponse: !asksForProgress(request.body),
    });
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    // The transport writes the response itself.
    reply.hijack();
    await transport.handleRequest(request.raw, reply.raw, request.body);
  });
  const notAllowed = async (_request: unknown, reply: FastifyReply): Promise<FastifyReply> =>
    reply.code(405).header('allow', 'POST').send(METHOD_NOT_ALLOWED);
  app.get('/mcp', notAllowed);
  app.delete('/mcp', notAllowed);
};

/**
 * POST /mcp: Cairn as an MCP server over Streamable HTTP (DESIGN §11), behind
 * the same bearer key as the rest of the API. Stateless: each request gets its
 * own server and transport, since the conversation state lives in Cairn's
 * sessions (the tools' `sessionId`), not in an MCP session. GET and DELETE
 * (server-sent streams, session teardown) are not offered: 405.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { CairnMcpServerDeps } from '../../mcp/cairn-mcp-server.js';

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

export function mcpRoutes(app: FastifyInstance, deps: CairnMcpServerDeps): void {
  app.post('/mcp', async (request, reply) => {
    const { StreamableHTTPServerTransport, createCairnMcpServer } = await loadServerSdk();
    const server = createCairnMcpServer({
      ...deps,
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
}

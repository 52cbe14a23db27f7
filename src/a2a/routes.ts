/**
 * A2A over HTTP: every agent's card at `/a2a/:name/.well-known/agent-card.json`,
 * the server's index card at `/.well-known/agent-card.json`, and each agent's
 * JSON-RPC endpoint at `POST /a2a/:name`. The SDK's JSON-RPC transport reads
 * the envelope and calls CairnA2AHandler; this module checks the envelope
 * first (so a malformed one gets the JSON-RPC code for it) and writes the
 * answer: JSON, or server-sent events for the streaming methods. A JSON-RPC
 * error is always HTTP 200 with the error in the body; an unknown agent is a
 * 404 in Cairn's error envelope, like every other route.
 */
import { A2A_PROTOCOL_VERSION, A2A_VERSION_HEADER, AgentCard } from '@a2a-js/sdk';
import { VersionNotSupportedError } from '@a2a-js/sdk/errors';
import { JsonRpcTransportHandler, ServerCallContext } from '@a2a-js/sdk/server';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { CairnError } from '../errors.js';
import { agentParams } from '../http/schemas.js';
import { SseStream } from '../http/sse.js';
import type { StreamGate } from '../http/stream-gate.js';
import { SSE_KEEPALIVE_MS } from '../http/routes/events.js';
import { accessFor } from './access.js';
import { agentCard, AGENT_CARD_PATH, indexCard, type CardContext } from './agent-card.js';
import {
  CairnA2AHandler,
  STREAM_ABORT_KEY,
  type CairnA2AHandlerDeps,
} from './cairn-a2a-handler.js';

/** The methods of A2A 1.0's JSON-RPC binding that Cairn answers. */
const METHODS = new Set([
  'SendMessage',
  'SendStreamingMessage',
  'GetTask',
  'ListTasks',
  'CancelTask',
  'SubscribeToTask',
  'CreateTaskPushNotificationConfig',
  'GetTaskPushNotificationConfig',
  'ListTaskPushNotificationConfigs',
  'DeleteTaskPushNotificationConfig',
  'GetExtendedAgentCard',
]);

const PARSE_ERROR = -32700;
const INVALID_REQUEST = -32600;
const METHOD_NOT_FOUND = -32601;

type JsonRpcId = string | number | null;

interface RpcError {
  jsonrpc: '2.0';
  id: JsonRpcId;
  error: { code: number; message: string; data?: unknown };
}

export interface A2ARouteDeps extends Omit<
  CairnA2AHandlerDeps,
  'agent' | 'card' | 'access' | 'log'
> {
  agents: Pick<AgentRegistry, 'get' | 'list'>;
  streams: StreamGate;
  /** True when the server has an API key (the cards then name the bearer scheme). */
  keyRequired: boolean;
}

function rpcError(id: JsonRpcId, code: number, message: string): RpcError {
  return { jsonrpc: '2.0', id, error: { code, message } };
}

function cardContext(request: FastifyRequest, keyRequired: boolean): CardContext {
  return { baseUrl: `${request.protocol}://${request.host}`, keyRequired };
}

/** The agent named in the URL, if the caller may use it; 404 AGENT_NOT_FOUND otherwise. */
function visibleAgent(request: FastifyRequest, deps: A2ARouteDeps, name: string): AgentConfig {
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

/**
 * The request's JSON-RPC envelope, or the error it deserves: -32700 for text
 * that is not JSON, -32600 for JSON that is not one request object (a batch
 * included: A2A has none), -32601 for a method A2A 1.0 does not have.
 */
function readEnvelope(body: unknown): { request: Record<string, unknown> } | { error: RpcError } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(typeof body === 'string' ? body : '');
  } catch {
    return {
      error: rpcError(null, PARSE_ERROR, 'Parse error: the request body is not valid JSON.'),
    };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return {
      error: rpcError(
        null,
        INVALID_REQUEST,
        'Invalid request: send one JSON-RPC 2.0 request object (batches are not part of A2A).',
      ),
    };
  }
  const request = parsed as Record<string, unknown>;
  const id = request.id;
  const idOk = id === undefined || id === null || typeof id === 'string' || Number.isInteger(id);
  const replyId: JsonRpcId = idOk && id !== undefined ? (id as JsonRpcId) : null;
  if (request.jsonrpc !== '2.0' || typeof request.method !== 'string' || !idOk) {
    return {
      error: rpcError(
        replyId,
        INVALID_REQUEST,
        'Invalid request: a JSON-RPC 2.0 request has "jsonrpc": "2.0", a string "method", and an "id" that is a string, an integer or null.',
      ),
    };
  }
  if (!METHODS.has(request.method)) {
    const legacy = request.method.includes('/')
      ? ' This server speaks A2A 1.0 (SendMessage, GetTask, …), not the 0.3 names (message/send, tasks/get, …).'
      : '';
    return {
      error: rpcError(
        replyId,
        METHOD_NOT_FOUND,
        `Method "${request.method}" not found.${legacy} Methods: ${[...METHODS].join(', ')}.`,
      ),
    };
  }
  return { request };
}

export function a2aRoutes(app: FastifyInstance, deps: A2ARouteDeps): void {
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
      return indexCard(agents, cardContext(request, deps.keyRequired));
    },
  );

  app.get<{ Params: { name: string } }>(
    `/a2a/:name/${AGENT_CARD_PATH}`,
    { schema: { summary: "An agent's A2A 1.0 agent card.", params: agentParams } },
    async (request) =>
      agentCard(
        visibleAgent(request, deps, request.params.name),
        cardContext(request, deps.keyRequired),
      ),
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
      async (request, reply) => answer(request, reply, deps, openStreams),
    );
  });
}

async function answer(
  request: FastifyRequest<{ Params: { name: string } }>,
  reply: FastifyReply,
  deps: A2ARouteDeps,
  openStreams: Set<AbortController>,
): Promise<unknown> {
  const agent = visibleAgent(request, deps, request.params.name);
  const envelope = readEnvelope(request.body);
  if ('error' in envelope) return envelope.error;
  const id = (envelope.request.id ?? null) as JsonRpcId;

  const card = AgentCard.fromJSON(agentCard(agent, cardContext(request, deps.keyRequired)));
  const header = request.headers[A2A_VERSION_HEADER.toLowerCase()];
  const version = typeof header === 'string' && header.trim() !== '' ? header.trim() : undefined;
  // No header: the peer gets the only version there is here.
  if (version !== undefined && version !== A2A_PROTOCOL_VERSION) {
    const error = new VersionNotSupportedError(
      `A2A version "${version}" is not supported: this server speaks ${A2A_PROTOCOL_VERSION}.`,
    );
    return { jsonrpc: '2.0', id, error: JsonRpcTransportHandler.mapToJSONRPCError(error) };
  }
  const abort = new AbortController();
  const context = new ServerCallContext({ requestedVersion: A2A_PROTOCOL_VERSION });
  context.state.set(STREAM_ABORT_KEY, abort.signal);
  const handler = new CairnA2AHandler({
    agent,
    card,
    access: accessFor(request),
    tasks: deps.tasks,
    store: deps.store,
    events: deps.events,
    log: (details, message) => request.log.error(details, message),
  });
  const result = await new JsonRpcTransportHandler(handler).handle(envelope.request, context);
  if (!(Symbol.asyncIterator in result)) return result;

  // A stream: its first event decides whether this is an event stream at all
  // (an error before it is a plain JSON-RPC error answer).
  const iterator = result[Symbol.asyncIterator]();
  let first: IteratorResult<unknown>;
  try {
    first = await iterator.next();
  } catch (err) {
    return { jsonrpc: '2.0', id, error: JsonRpcTransportHandler.mapToJSONRPCError(err) };
  }
  let sse: SseStream;
  try {
    sse = new SseStream(reply, deps.streams);
  } catch (err) {
    await iterator.return(undefined);
    throw err;
  }
  openStreams.add(abort);
  const keepalive = setInterval(() => sse.comment('keepalive'), SSE_KEEPALIVE_MS);
  // The response's close: the peer went away (or the stream ended).
  reply.raw.on('close', () => abort.abort());
  try {
    if (!first.done) sse.data(first.value);
    for (;;) {
      const next = await iterator.next();
      if (next.done || sse.isClosed) break;
      sse.data(next.value);
    }
  } catch (err) {
    sse.data({ jsonrpc: '2.0', id, error: JsonRpcTransportHandler.mapToJSONRPCError(err) });
  } finally {
    clearInterval(keepalive);
    openStreams.delete(abort);
    abort.abort();
    await iterator.return(undefined);
    sse.end();
  }
  return reply;
}

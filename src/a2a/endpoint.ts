/**
 * The A2A JSON-RPC endpoint's work, loaded with the SDK on the first A2A
 * request (src/a2a/routes.ts): the SDK adds some 9 MB resident, which a
 * server nobody calls over A2A should not pay. This module checks the
 * envelope first (so a malformed one gets the JSON-RPC code for it), hands
 * it to the SDK's JSON-RPC transport, which calls CairnA2AHandler, and
 * writes the answer: JSON, or server-sent events for the streaming methods.
 * A JSON-RPC error is always HTTP 200 with the error in the body.
 */
import { A2A_PROTOCOL_VERSION, A2A_VERSION_HEADER, AgentCard } from '@a2a-js/sdk';
import { VersionNotSupportedError } from '@a2a-js/sdk/errors';
import { JsonRpcTransportHandler, ServerCallContext } from '@a2a-js/sdk/server';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AgentConfig } from '../agents/agent-config.js';
import { jsonDepth, MAX_JSON_DEPTH, tooDeepMessage } from '../json-depth.js';
import { principalOf } from '../http/principal.js';
import { SseStream } from '../http/sse.js';
import type { StreamGate } from '../http/stream-gate.js';
import { SSE_KEEPALIVE_MS } from '../http/routes/events.js';
import { accessFor } from './access.js';
import { agentCard, indexCard, type CardContext } from './agent-card.js';
import {
  CairnA2AHandler,
  STREAM_ABORT_KEY,
  type CairnA2AHandlerDeps,
} from './cairn-a2a-handler.js';

export { agentCard, indexCard };

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

/** The `A2A-Version` values this endpoint speaks: 1.0, with or without a patch number. */
const SPOKEN_VERSION = /^1\.0(\.\d+)?$/;

/** The methods that answer with an event stream. */
const STREAMING_METHODS = new Set(['SendStreamingMessage', 'SubscribeToTask']);

const PARSE_ERROR = -32700;
const INVALID_REQUEST = -32600;
const METHOD_NOT_FOUND = -32601;
const INVALID_PARAMS = -32602;

type JsonRpcId = string | number | null;

interface RpcError {
  jsonrpc: '2.0';
  id: JsonRpcId;
  error: { code: number; message: string; data?: unknown };
}

export interface A2AEndpointDeps extends Omit<
  CairnA2AHandlerDeps,
  'agent' | 'card' | 'access' | 'log'
> {
  streams: StreamGate;
}

function rpcError(id: JsonRpcId, code: number, message: string): RpcError {
  return { jsonrpc: '2.0', id, error: { code, message } };
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
  // Refused before anything walks it: the SDK's recursion overflows the stack on a few thousand levels.
  if (jsonDepth(parsed) > MAX_JSON_DEPTH)
    return { error: rpcError(null, INVALID_PARAMS, tooDeepMessage('The request')) };
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

/**
 * Answers one JSON-RPC request to `agent`: the JSON answer to return, or the
 * reply itself once a stream has been written to it.
 */
export async function answerRpc(call: {
  request: FastifyRequest;
  reply: FastifyReply;
  agent: AgentConfig;
  cards: CardContext;
  deps: A2AEndpointDeps;
  openStreams: Set<AbortController>;
}): Promise<unknown> {
  const { request, reply, agent, deps, openStreams } = call;
  const envelope = readEnvelope(request.body);
  if ('error' in envelope) return envelope.error;
  const id = (envelope.request.id ?? null) as JsonRpcId;

  const card = AgentCard.fromJSON(agentCard(agent, call.cards));
  const header = request.headers[A2A_VERSION_HEADER.toLowerCase()];
  const version = typeof header === 'string' && header.trim() !== '' ? header.trim() : undefined;
  // No header: the peer gets the only version there is here. Versions are
  // major.minor; a patch number ("1.0.1") is the same protocol.
  if (version !== undefined && !SPOKEN_VERSION.test(version)) {
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
  // A stream's slot is taken before any work, so a stream refused for the
  // limit (503) has started no task. It is handed to the event stream below.
  const holdSlot = STREAMING_METHODS.has(envelope.request.method as string)
    ? deps.streams.acquire(principalOf(request))
    : undefined;
  let result: Awaited<ReturnType<JsonRpcTransportHandler['handle']>>;
  let first: IteratorResult<unknown> | undefined;
  try {
    result = await new JsonRpcTransportHandler(handler).handle(envelope.request, context);
    if (!(Symbol.asyncIterator in result)) return result;
    // The first event decides whether this is an event stream at all (an
    // error before it is a plain JSON-RPC error answer).
    first = await result[Symbol.asyncIterator]().next();
  } catch (err) {
    return { jsonrpc: '2.0', id, error: JsonRpcTransportHandler.mapToJSONRPCError(err) };
  } finally {
    holdSlot?.();
  }
  const iterator = result[Symbol.asyncIterator]();
  // Synchronously after giving the slot back: nothing can take it in between.
  const sse = new SseStream(reply, deps.streams);
  openStreams.add(abort);
  const keepalive = setInterval(() => sse.comment('keepalive'), SSE_KEEPALIVE_MS);
  // The response's close: the peer went away (or the stream ended).
  reply.raw.on('close', () => abort.abort());
  try {
    if (first !== undefined && !first.done) sse.data(first.value);
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

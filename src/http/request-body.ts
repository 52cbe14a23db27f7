/**
 * How a request's body arrives, in one place: the HTTP server that cuts a
 * request not in full by `server.requestTimeoutMs` (checked often enough that
 * the cut comes at the documented time, not up to half a minute after), and
 * the answer to a body over the limit — read and thrown away, within bounds,
 * before the 413 is sent, so the client reads the 413 instead of a connection
 * reset (a server that closes a socket with unread bytes in it resets it, and
 * the reset can arrive before the client has read the answer).
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { FastifyInstance, FastifyServerFactory } from 'fastify';

/** Bytes of an oversized body read and discarded at most before its 413 is sent. */
export const OVERSIZED_DRAIN_MAX_BYTES = 16 * 1024 * 1024;
/** How long an oversized body is drained at most before its 413 is sent. */
export const OVERSIZED_DRAIN_MAX_MS = 5_000;
/** Idle keep-alive connections are kept this long (fastify's default). */
const KEEP_ALIVE_TIMEOUT_MS = 72_000;

/**
 * The HTTP server fastify serves on: a request (headers and body) must
 * arrive in full within `requestTimeoutMs`, else it is answered 408 and
 * closed. Node checks the deadline every `connectionsCheckingInterval`
 * (30 s by default, which let a slow body run 85 s under a 60 s limit).
 */
export function serverWithRequestTimeout(requestTimeoutMs: number): FastifyServerFactory<Server> {
  return (handler) => {
    const server: Server = createServer(
      {
        requestTimeout: requestTimeoutMs,
        headersTimeout: requestTimeoutMs,
        connectionsCheckingInterval: Math.max(50, Math.min(1_000, requestTimeoutMs / 10)),
        keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
      },
      handler,
    );
    return server;
  };
}

/** Reads and discards the rest of `raw` until it ends or a bound is reached; true if it ended. */
function drain(raw: IncomingMessage): Promise<boolean> {
  if (raw.readableEnded || raw.destroyed) return Promise.resolve(raw.readableEnded);
  return new Promise((resolve) => {
    let bytes = 0;
    const finish = (ended: boolean): void => {
      clearTimeout(timer);
      raw.off('data', onData);
      raw.off('end', onEnd);
      raw.off('error', onError);
      raw.off('close', onError);
      resolve(ended);
    };
    const onData = (chunk: Buffer): void => {
      bytes += chunk.length;
      if (bytes > OVERSIZED_DRAIN_MAX_BYTES) finish(false);
    };
    const onEnd = (): void => finish(true);
    const onError = (): void => finish(false);
    const timer = setTimeout(() => finish(false), OVERSIZED_DRAIN_MAX_MS);
    raw.on('data', onData);
    raw.on('end', onEnd);
    raw.on('error', onError);
    raw.on('close', onError);
    raw.resume();
  });
}

function isOversized(error: { code?: unknown; statusCode?: unknown; status?: unknown }): boolean {
  return (
    error.code === 'FST_ERR_CTP_BODY_TOO_LARGE' ||
    error.code === 'PAYLOAD_TOO_LARGE' ||
    error.code === 'IMPORT_LINE_TOO_LONG'
  );
}

/**
 * Drains an oversized body before its 413 goes out, on every route (a root
 * hook reaches every plugin). A body that does not end within the bounds is
 * answered anyway, with `Connection: close`.
 */
export function registerBodyRules(app: FastifyInstance): void {
  app.addHook('onError', async (request, reply, error) => {
    if (!isOversized(error)) return;
    const ended = await drain(request.raw);
    if (!ended) void reply.header('connection', 'close');
  });
}

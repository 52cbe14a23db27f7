/**
 * Builds the fastify instance: JSON Schema validation that never coerces JSON
 * bodies, bearer auth, rate and stream limits, the error envelope, and the
 * OpenAPI document; the routes are the composition root's list. Never listens.
 */
import { Ajv } from 'ajv';
import rateLimit from '@fastify/rate-limit';
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { CairnError } from '../errors.js';
import { clientIdentity, registerAuth } from './auth.js';
import { registerBrowserGuard, type BrowserPolicy } from './browser-guard.js';
import type { ClientKeys } from './client-keys.js';
import { registerOwnership, type OwnershipDeps } from './ownership.js';
import { errorBody, sendError } from './errors.js';
import { isConsolePath } from './routes/console.js';
import { registerOpenApi } from './openapi.js';
import { StreamGate, type StreamLimits } from './stream-gate.js';
import { DEFAULT_MAX_STREAMS, DEFAULT_STREAM_BUFFER_BYTES } from '../config/settings.js';

/** A request that takes longer than this to arrive in full is dropped (slow-loris). */
export const REQUEST_TIMEOUT_MS = 60_000;

export interface ServerDeps {
  apiKey: string | null;
  /** Hosts and web origins the server answers to (checked before anything else). */
  browser: BrowserPolicy;
  /** Client keys (`cairn_sk_…`); without them only the admin key is known. */
  clientKeys?: Pick<ClientKeys, 'authenticate'>;
  /** Who may call each route and the per-key limits; without it every caller is the admin. */
  ownership?: Omit<OwnershipDeps, 'rateLimit'>;
  bodyLimitBytes: number;
  /** Requests per client per window (the client is the key holder, or its IP); null = none. */
  rateLimit: { max: number; windowMs: number } | null;
  logger: FastifyServerOptions['logger'];
  /** Limits on event streams (default: 200 streams, 1 MiB queued per stream). */
  streamLimits?: StreamLimits;
  /** Every route group, in order, from the composition root; each gets the shared stream gate. */
  routes: ((app: FastifyInstance, shared: { streams: StreamGate }) => void)[];
}

/** Paths anyone may call, even when an API key is configured. */
const OPEN_PATHS = new Set(['/health']);

function isOpenPath(path: string): boolean {
  return OPEN_PATHS.has(path) || isConsolePath(path);
}

export function createServer(deps: ServerDeps): FastifyInstance {
  const app = Fastify({
    logger: deps.logger,
    bodyLimit: deps.bodyLimitBytes,
    requestTimeout: REQUEST_TIMEOUT_MS,
    // Our own hook answers 503 while closing, in the API's error envelope.
    return503OnClosing: false,
    // A URL the router cannot decode (`%zz`) or a path parameter over its
    // length cap would otherwise get fastify's own body, not our envelope.
    frameworkErrors: (err, request, reply) => sendError(err, request, reply),
    // fastify logs two lines per request at info; ours is one, at debug (below).
    logController: new LogController({ disableRequestLogging: true }),
  });
  app.addHook('onResponse', async (request, reply) => {
    request.log.debug(
      {
        method: request.method,
        url: request.url,
        statusCode: reply.statusCode,
        responseTimeMs: Math.round(reply.elapsedTime),
      },
      'request completed',
    );
  });

  // Bodies are validated strictly (no coercion, no silent stripping); query
  // strings and params arrive as text, so they are coerced to their types.
  const bodyAjv = new Ajv({
    allErrors: true,
    coerceTypes: false,
    removeAdditional: false,
    useDefaults: true,
    strict: false,
  });
  const textAjv = new Ajv({
    allErrors: true,
    coerceTypes: true,
    removeAdditional: false,
    useDefaults: true,
    strict: false,
  });
  app.setValidatorCompiler(({ schema, httpPart }) =>
    httpPart === 'body' ? bodyAjv.compile(schema) : textAjv.compile(schema),
  );

  // An empty JSON body means "no options" (POST /sessions/:id/compact with curl -X POST).
  const jsonParser = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    if (text.trim() === '') return done(null, undefined);
    void jsonParser(request, text, done);
  });

  // First of all hooks: a foreign Host or Origin is refused before anything runs.
  registerBrowserGuard(app, deps.browser, isConsolePath);

  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onRequest', async (_request, reply) => {
    if (closing) {
      void reply.header('connection', 'close');
      throw new CairnError(
        'SERVICE_UNAVAILABLE',
        'The server is shutting down. Retry against another instance or after restart.',
      );
    }
  });

  registerAuth(app, {
    apiKey: deps.apiKey,
    ...(deps.clientKeys ? { clientKeys: deps.clientKeys } : {}),
    isOpenPath,
  });
  // Before any route: each one must have an ownership rule.
  if (deps.ownership) registerOwnership(app, { ...deps.ownership, rateLimit: deps.rateLimit });

  app.setErrorHandler((err, request, reply) => sendError(err, request, reply));
  app.setNotFoundHandler((request, reply) => {
    void reply
      .code(404)
      .send(
        errorBody(
          'NOT_FOUND',
          `No route ${request.method} ${request.url.split('?')[0]}. See the API table in the README.`,
        ),
      );
  });

  if (deps.rateLimit !== null) {
    void app.register(rateLimit, {
      max: deps.rateLimit.max,
      timeWindow: deps.rateLimit.windowMs,
      // One bucket for the key holder, else one per address: never per
      // header spelling, which a client could vary at will to get fresh buckets.
      keyGenerator: clientIdentity,
      allowList: (request) => isOpenPath(request.url.split('?')[0] ?? ''),
      errorResponseBuilder: (_request, context) =>
        new CairnError(
          'RATE_LIMITED',
          `Too many requests: at most ${context.max} every ${deps.rateLimit!.windowMs / 1000} s. Retry after ${context.after}.`,
        ),
    });
  }

  // One gate for every kind of stream: the cap is on open connections.
  const streams = new StreamGate(
    deps.streamLimits ?? {
      maxStreams: DEFAULT_MAX_STREAMS,
      maxBufferedBytes: DEFAULT_STREAM_BUFFER_BYTES,
    },
    (details, message) => app.log.warn(details, message),
  );
  // Before the routes: the OpenAPI document is collected as routes are added.
  registerOpenApi(app);
  // Routes register after the limiter, so its hook covers every one of them.
  void app.register(async (api) => {
    for (const register of deps.routes) register(api, { streams });
  });
  return app;
}

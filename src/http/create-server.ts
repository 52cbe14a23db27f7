/**
 * Builds the fastify instance every route group is registered on: JSON Schema
 * validation that never coerces JSON bodies, the browser guard, bearer auth,
 * ownership, rate limits, the error envelope, and the OpenAPI document. All of
 * it sits on the root instance, so every route plugin registered afterwards
 * inherits it. Holds no routes of its own but the OpenAPI ones; never listens.
 */
import { Ajv } from 'ajv';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { CairnError } from '../errors.js';
import { jsonDepth, MAX_JSON_DEPTH, tooDeepMessage } from '../json-depth.js';
import { clientIdentity, registerAuth } from './auth.js';
import { registerBrowserGuard, type BrowserPolicy } from './browser-guard.js';
import type { ClientKeys } from './client-keys.js';
import { WindowCounter } from './key-limits.js';
import { registerOwnership, type OwnershipDeps } from './ownership.js';
import { errorBody, sendError } from './errors.js';
import { isConsolePath } from './routes/console.js';
import { registerOpenApi } from './openapi.js';
import { registerBodyRules, serverWithRequestTimeout } from './request-body.js';

export interface ServerDeps {
  apiKey: string | null;
  /** Hosts and web origins the server answers to (checked before anything else). */
  browser: BrowserPolicy;
  /** Client keys (`cairn_sk_…`); without them only the admin key is known. */
  clientKeys?: Pick<ClientKeys, 'authenticate'>;
  /** Who may call each route and the per-key limits; without it every caller is the admin. */
  ownership?: Omit<OwnershipDeps, 'rateLimit'>;
  bodyLimitBytes: number;
  /** A request must arrive in full within this (slow-loris clients are cut with 408). */
  requestTimeoutMs: number;
  /** `server.trustProxy`: read the client's address from `X-Forwarded-For`, from these hops. */
  trustProxy: boolean | readonly string[];
  /** Requests per client per window (the client is the key holder, or its IP); null = none. */
  rateLimit: { max: number; windowMs: number } | null;
  /** The process's logger: requests log through a child of it, like every other part. */
  logger: FastifyBaseLogger;
}

/** Paths anyone may call, even when an API key is configured. */
const OPEN_PATHS = new Set(['/health']);

function isOpenPath(path: string): boolean {
  return OPEN_PATHS.has(path) || isConsolePath(path);
}

/**
 * The root instance with every cross-cutting hook in place. Register the
 * route groups on it (as plugins) after this returns: hooks added at the root
 * reach every plugin registered below it, and the rate limiter and the
 * OpenAPI generator see each route as it is added.
 */
export function createServer(deps: ServerDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger,
    bodyLimit: deps.bodyLimitBytes,
    serverFactory: serverWithRequestTimeout(deps.requestTimeoutMs),
    // The address failed authentications and rate limits count by.
    trustProxy: typeof deps.trustProxy === 'boolean' ? deps.trustProxy : [...deps.trustProxy],
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
    void jsonParser(request, text, (err, value) => {
      if (err) return done(err);
      if (jsonDepth(value) > MAX_JSON_DEPTH)
        return done(new CairnError('JSON_TOO_DEEP', tooDeepMessage('The request body')));
      done(null, value);
    });
  });

  registerBodyRules(app);

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
  // server.rateLimit: one bucket per client, the key holder's or its
  // address's (never per header spelling, which a client could vary at will
  // to get fresh buckets). A request takes one call from it here; the
  // ownership hook takes the other calls of an MCP batch from the same bucket.
  const serverLimit = deps.rateLimit && {
    ...deps.rateLimit,
    bucket: new WindowCounter(deps.rateLimit.windowMs),
  };
  if (serverLimit) {
    app.addHook('onRequest', async (request) => {
      if (isOpenPath(request.url.split('?')[0] ?? '')) return;
      const waitMs = serverLimit.bucket.take(clientIdentity(request), 1, serverLimit.max);
      if (waitMs === undefined) return;
      const seconds = Math.max(1, Math.ceil(waitMs / 1000));
      throw new CairnError(
        'RATE_LIMITED',
        `Too many requests: at most ${serverLimit.max} every ${serverLimit.windowMs / 1000} s (server.rateLimit). Retry after ${seconds} s.`,
        { retryAfterSeconds: seconds },
      );
    });
  }
  // Before any route: each one must have an ownership rule.
  if (deps.ownership) registerOwnership(app, { ...deps.ownership, rateLimit: serverLimit });

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

  // Before the routes: the OpenAPI document is collected as routes are added.
  registerOpenApi(app);
  return app;
}

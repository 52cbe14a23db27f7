/**
 * Builds the fastify instance: JSON Schema validation that never coerces JSON
 * bodies, bearer auth, the error envelope, and the routes. Never listens.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Ajv } from 'ajv';
import rateLimit from '@fastify/rate-limit';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { CairnError } from '../errors.js';
import type { EventBus } from '../runtime/events.js';
import type { Runtime } from '../runtime/router.js';
import type { Store } from '../store/store.js';
import { errorBody, sendError } from './errors.js';
import { registerOpenApi } from './openapi.js';
import { agentRoutes } from './routes/agents.js';
import { chatRoutes } from './routes/chat.js';
import { eventRoutes } from './routes/events.js';
import { healthRoutes } from './routes/health.js';
import { sessionRoutes } from './routes/sessions.js';

/** A request that takes longer than this to arrive in full is dropped (slow-loris). */
export const REQUEST_TIMEOUT_MS = 60_000;

export interface ServerDeps {
  runtime: Runtime;
  store: Store;
  agents: AgentRegistry;
  events: EventBus;
  apiKey: string | null;
  bodyLimitBytes: number;
  /** Requests per client per window (the client is its bearer token, or its IP); null = none. */
  rateLimit: { max: number; windowMs: number } | null;
  logger: FastifyServerOptions['logger'];
  /** Extra route groups (compaction, tasks, memory) registered by their features. */
  routes?: ((app: FastifyInstance) => void)[];
}

/** Paths anyone may call, even when an API key is configured. */
const OPEN_PATHS = new Set(['/health']);

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
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

  if (deps.apiKey !== null) {
    const expected = digest(deps.apiKey);
    app.addHook('onRequest', async (request) => {
      if (OPEN_PATHS.has(request.url.split('?')[0] ?? '')) return;
      const header = request.headers.authorization ?? '';
      // The scheme name is case-insensitive (RFC 9110 §11.1).
      const token = /^bearer /i.test(header) ? header.slice('Bearer '.length) : '';
      // Compare digests so the comparison is constant-time whatever the length.
      if (!timingSafeEqual(digest(token), expected)) {
        throw new CairnError(
          'UNAUTHORIZED',
          'Missing or wrong API key. Send "Authorization: Bearer <CAIRN_API_KEY>".',
        );
      }
    });
  }

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
      // One bucket per API key when clients send one, else per address.
      keyGenerator: (request) => {
        const auth = request.headers.authorization;
        return auth ? `key:${digest(auth).toString('hex')}` : `ip:${request.ip}`;
      },
      allowList: (request) => OPEN_PATHS.has(request.url.split('?')[0] ?? ''),
      errorResponseBuilder: (_request, context) =>
        new CairnError(
          'RATE_LIMITED',
          `Too many requests: at most ${context.max} every ${deps.rateLimit!.windowMs / 1000} s. Retry after ${context.after}.`,
        ),
    });
  }

  // Before the routes: the OpenAPI document is collected as routes are added.
  registerOpenApi(app);
  // Routes register after the limiter, so its hook covers every one of them.
  void app.register(async (api) => {
    healthRoutes(api, deps);
    agentRoutes(api, deps);
    chatRoutes(api, deps);
    sessionRoutes(api, deps);
    eventRoutes(api, deps);
    for (const register of deps.routes ?? []) register(api);
  });
  return app;
}

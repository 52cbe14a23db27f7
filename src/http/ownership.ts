/**
 * Who may call each route, in one table: open to anyone, admin only, or any
 * key, with the session, task or agent the route names checked against the
 * caller before the handler runs (another key's objects are 404, as if they
 * did not exist). A route with no rule here cannot be registered: the server
 * refuses to start, so no route is ever added without deciding who owns it.
 * Routes that list or create things (`filters`) scope them in their handler.
 * The same hook applies the per-key limits.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { CairnError } from '../errors.js';
import type { Access } from './access.js';
import { clientIdentity } from './auth.js';
import type { KeyLimits } from './key-limits.js';
import type { KeyShares } from './key-shares.js';
import type { WindowCounter } from './key-limits.js';
import { principalOf } from './principal.js';
import { isConsolePath } from './routes/console.js';
import { DOCS_PATH, OPENAPI_PATH } from './openapi.js';

type Locator = `params.${string}` | `body.${string}` | `query.${string}`;

export type OwnershipRule =
  | { readonly access: 'open' }
  | { readonly access: 'admin' }
  | {
      readonly access: 'key';
      readonly session?: Locator;
      readonly task?: Locator;
      readonly agent?: Locator;
      /** Runs a model: refused once the key spent its tokensPerDay. */
      readonly spends?: boolean;
      /** How the handler keeps a key to its own world, where the route names no one object. */
      readonly filters?: string;
    };

const OPEN: OwnershipRule = { access: 'open' };
const ADMIN: OwnershipRule = { access: 'admin' };
const SESSION: OwnershipRule = { access: 'key', session: 'params.id' };
const TASK: OwnershipRule = { access: 'key', task: 'params.id' };
const TASK_SPENDS: OwnershipRule = { access: 'key', task: 'params.id', spends: true };
/** Any key; the handler keeps it to its own world as `filters` says. */
const scoped = (filters: string): OwnershipRule => ({ access: 'key', filters });
/** The same, for a route that runs a model (counted against tokensPerDay). */
const scopedSpending = (filters: string): OwnershipRule => ({
  access: 'key',
  spends: true,
  filters,
});
/** A chat or a task: the agent, and the session when one is continued, must be the key's. */
const AGENT_TURN: OwnershipRule = {
  access: 'key',
  agent: 'params.name',
  session: 'body.sessionId',
  spends: true,
  filters: 'a new session belongs to the key',
};
/** An AI SDK chat named in the path: found only under the caller's key and end user. */
const AI_SDK_CHAT: OwnershipRule = {
  access: 'key',
  agent: 'params.name',
  filters: "the chat id is looked up under the key and end user: another's chat is unknown",
};
const API_DOCS = scoped('the API docs page: no objects');

/** Every route of the server, `METHOD path` as registered. */
export const ROUTE_RULES: Readonly<Record<string, OwnershipRule>> = {
  'GET /health': OPEN,
  [`GET ${OPENAPI_PATH}`]: scoped('the API description: no objects'),
  'GET /agents': scoped("lists the key's agents only"),
  'GET /agents/:name': { access: 'key', agent: 'params.name' },
  'POST /agents/reload': ADMIN,
  'POST /agents/:name/chat': AGENT_TURN,
  'POST /agents/:name/tasks': AGENT_TURN,
  'GET /agents/:name/memory': ADMIN,
  'PUT /agents/:name/memory/:key': ADMIN,
  'DELETE /agents/:name/memory/:key': ADMIN,
  'GET /tasks': scoped("lists the key's tasks only"),
  'GET /tasks/:id': TASK,
  'POST /tasks/:id/resume': TASK_SPENDS,
  'POST /tasks/:id/approve': TASK_SPENDS,
  'POST /tasks/:id/deny': TASK_SPENDS,
  'POST /tasks/:id/cancel': TASK,
  'POST /sessions': {
    access: 'key',
    agent: 'body.agentName',
    filters: 'the new session belongs to the key',
  },
  'GET /sessions': scoped("lists the key's sessions only"),
  'POST /sessions/import': scoped(
    'the imported session belongs to the key; its agent must be one of the key',
  ),
  'GET /sessions/:id': SESSION,
  'PATCH /sessions/:id': SESSION,
  'DELETE /sessions/:id': SESSION,
  'GET /sessions/:id/messages': SESSION,
  'GET /sessions/:id/context': SESSION,
  'GET /sessions/:id/compactions': SESSION,
  'GET /sessions/:id/export': SESSION,
  'POST /sessions/:id/compact': { access: 'key', session: 'params.id', spends: true },
  'POST /sessions/:id/compact/undo': SESSION,
  'POST /sessions/:id/reset': SESSION,
  'POST /sessions/:id/close': SESSION,
  'POST /sessions/:id/fork': SESSION,
  'GET /sessions/:id/calls': SESSION,
  'GET /calls/:id': scoped("answers the calls of the key's sessions only"),
  'GET /events': {
    access: 'key',
    session: 'query.sessionId',
    filters: "streams the events of the key's sessions only",
  },
  'POST /mcp': scopedSpending("offers the key's agents only; a sessionId must be the key's"),
  'GET /mcp': scoped('answers 405'),
  'DELETE /mcp': scoped('answers 405'),
  'GET /metrics': ADMIN,
  'GET /v1/models': scoped("lists the key's agents only"),
  'GET /v1/models/:id': scoped("answers the key's agents only"),
  'POST /v1/chat/completions': scopedSpending(
    "the model must be the key's agent; sessions continued must be the key's",
  ),
  'POST /v1/responses': scopedSpending(
    "the model must be the key's agent; previous_response_id must be the key's",
  ),
  'GET /v1/responses/:id': scoped("answers the key's responses only"),
  'GET /.well-known/agent-card.json': scoped("lists the key's agents only"),
  'GET /a2a/:name/.well-known/agent-card.json': { access: 'key', agent: 'params.name' },
  'POST /a2a/:name': {
    access: 'key',
    agent: 'params.name',
    spends: true,
    filters: "tasks and contexts continued must be the key's; new ones belong to it",
  },
  'POST /ai-sdk/:name': {
    access: 'key',
    agent: 'params.name',
    spends: true,
    filters:
      "the chat id is looked up under the key and end user; a new chat's session belongs to them",
  },
  'GET /ai-sdk/:name/:chatId/stream': AI_SDK_CHAT,
  'POST /ai-sdk/:name/:chatId/stop': AI_SDK_CHAT,
  'GET /ai-sdk/:name/:chatId/messages': AI_SDK_CHAT,
  'POST /ag-ui/:name': {
    access: 'key',
    agent: 'params.name',
    spends: true,
    filters:
      "the thread id is looked up under the key and end user; a new thread's session belongs to them",
  },
  'POST /keys': ADMIN,
  'GET /keys': ADMIN,
  'GET /keys/:id': ADMIN,
  'PATCH /keys/:id': ADMIN,
  'DELETE /keys/:id': ADMIN,
};

/** The rule of a route as fastify registered it (HEAD answers as GET does). */
export function ruleFor(method: string, url: string): OwnershipRule | undefined {
  if (isConsolePath(url)) return OPEN;
  if (url === DOCS_PATH || url.startsWith(`${DOCS_PATH}/`)) return API_DOCS;
  return ROUTE_RULES[`${method === 'HEAD' ? 'GET' : method} ${url}`];
}

function locate(request: FastifyRequest, locator: Locator): string | undefined {
  const [part, name] = locator.split('.') as ['params' | 'body' | 'query', string];
  const source = request[part] as Record<string, unknown> | null | undefined;
  const value = source?.[name];
  return typeof value === 'string' ? value : undefined;
}

/** How many calls a request makes: an MCP JSON-RPC batch makes one per message in it. */
function callCount(request: FastifyRequest): number {
  return request.routeOptions.url === '/mcp' && Array.isArray(request.body)
    ? Math.max(1, request.body.length)
    : 1;
}

const routesSeen = new WeakMap<FastifyInstance, string[]>();

/** The maxTurns share each model-running request holds, until its response ends or a route takes it. */
const turnShares = new WeakMap<FastifyRequest, () => void>();

/**
 * Takes the request's maxTurns share off its response: the caller releases
 * it when the turn it started ends. A task answered 201 at once runs on in
 * the background, and its turn still counts against the key's concurrent
 * turns. Undefined when the request holds no share (the admin, no limit).
 */
export function takeTurnShare(request: FastifyRequest): (() => void) | undefined {
  const release = turnShares.get(request);
  turnShares.delete(request);
  return release;
}

/** Every `METHOD path` registered on `app` since the rules were added (HEAD routes included). */
export function registeredRoutes(app: FastifyInstance): readonly string[] {
  return routesSeen.get(app) ?? [];
}

export interface OwnershipDeps {
  access: Access;
  limits: KeyLimits;
  /** Each key's share of this instance's model-running requests (limits.maxTurns). */
  shares?: Pick<KeyShares, 'take'>;
  /**
   * The server-wide limit per client (`server.rateLimit`) and its bucket, from
   * which the server took one call per request: an MCP batch's other calls
   * are taken from the same bucket here.
   */
  rateLimit: { max: number; windowMs: number; bucket: WindowCounter } | null;
}

/**
 * Adds the ownership rules to every route registered after it: call it on
 * the root instance before any route.
 */
export function registerOwnership(app: FastifyInstance, deps: OwnershipDeps): void {
  const methodsOf = (method: string | string[]) => (Array.isArray(method) ? method : [method]);
  const unruled: string[] = [];
  const seen: string[] = [];
  routesSeen.set(app, seen);
  app.addHook('onRoute', (route) => {
    for (const method of methodsOf(route.method)) {
      seen.push(`${method} ${route.url}`);
      if (ruleFor(method, route.url) === undefined) unruled.push(`${method} ${route.url}`);
    }
  });
  // Refused at start (a throw inside onRoute would stall the plugin that adds the route).
  app.addHook('onReady', async () => {
    if (unruled.length > 0) {
      throw new Error(
        `Route(s) without an ownership rule: ${unruled.join(', ')}. Add each to ROUTE_RULES in src/http/ownership.ts.`,
      );
    }
  });
  const serverLimit = deps.rateLimit;

  app.addHook('preHandler', async (request, reply) => {
    const url = request.routeOptions.url;
    if (url === undefined) return; // the not-found handler
    // Every route has a rule: onReady refused to start the server otherwise.
    const rule = ruleFor(request.method, url)!;
    if (rule.access === 'open') return;
    const principal = principalOf(request);
    const calls = callCount(request);
    if (serverLimit && calls > 1) {
      // The server-wide limiter took this request's first call; its other calls come from the same bucket.
      const { bucket, max, windowMs } = serverLimit;
      const waitMs = bucket.take(clientIdentity(request), calls - 1, max);
      if (waitMs !== undefined) {
        throw new CairnError(
          'RATE_LIMITED',
          `This batch makes ${calls} calls; at most ${max} are allowed every ${windowMs / 1000} s (server.rateLimit). Send fewer calls at once.`,
          { retryAfterSeconds: waitMs / 1000 },
        );
      }
    }
    if (principal.kind === 'admin') return;
    if (rule.access === 'admin') {
      throw new CairnError(
        'FORBIDDEN',
        `${request.method} ${url} needs the admin key (server.apiKey); client keys cannot use it.`,
      );
    }
    deps.limits.takeRequests(principal.key, calls);
    const agent = rule.agent && locate(request, rule.agent);
    if (agent !== undefined) deps.access.agent(principal, agent);
    const session = rule.session && locate(request, rule.session);
    if (session !== undefined) await deps.access.session(principal, session);
    const task = rule.task && locate(request, rule.task);
    if (task !== undefined) await deps.access.task(principal, task);
    if (rule.spends) {
      await deps.limits.checkTokens(principal.key);
      // Held until the response ends (a stream's too), however it ends, unless
      // the route hands it to a turn that runs on after its answer.
      const release = deps.shares?.take(principal, 'maxTurns');
      if (release) {
        turnShares.set(request, release);
        reply.raw.once('close', () => {
          if (turnShares.get(request) === release) release();
        });
      }
    }
  });
}

/**
 * `GET /metrics` (Prometheus text, behind the API key like every route but
 * /health), and the chat-turn metrics taken from each chat response (the
 * agents' own chat route and the OpenAI-compatible ones).
 */
import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { CairnMetrics } from '../../metrics/metrics.js';
import { turnOutcome } from '../turn-outcome.js';

/** The routes that run one agent turn per request, and where each names its agent. */
const TURN_ROUTES: Record<string, (request: FastifyRequest) => unknown> = {
  '/agents/:name/chat': (request) => (request.params as { name?: unknown }).name,
  '/v1/chat/completions': (request) => (request.body as { model?: unknown } | null)?.model,
  '/v1/responses': (request) => (request.body as { model?: unknown } | null)?.model,
};

export interface TurnMetricsOptions {
  metrics: Pick<CairnMetrics, 'chatTurn'>;
  isAgent: (name: string) => boolean;
}

/**
 * Counts each chat turn's outcome and duration. Call it on the root instance
 * before the route plugins: a hook inside the metrics plugin would see only
 * the plugin's own routes, not the chat and /v1 routes it measures.
 */
export function registerTurnMetrics(app: FastifyInstance, deps: TurnMetricsOptions): void {
  app.addHook('onResponse', async (request, reply) => {
    const agentOf = TURN_ROUTES[request.routeOptions.url ?? ''];
    if (!agentOf) return;
    // Only loaded agents get their own label: a client's made-up names are not series.
    const named = agentOf(request);
    const agent = typeof named === 'string' && deps.isAgent(named) ? named : 'unknown';
    deps.metrics.chatTurn(agent, turnOutcome(request, reply.statusCode), reply.elapsedTime);
  });
}

export interface MetricsRoutesOptions {
  metrics: Pick<CairnMetrics, 'scrape'>;
}

export const metricsRoutes: FastifyPluginAsync<MetricsRoutesOptions> = async (app, deps) => {
  app.get('/metrics', async (_request, reply) => {
    const { contentType, body } = await deps.metrics.scrape();
    return reply.type(contentType).send(body);
  });
};

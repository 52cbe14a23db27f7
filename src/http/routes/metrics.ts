/**
 * `GET /metrics` (Prometheus text, behind the API key like every route but
 * /health), and the chat-turn metrics taken from each chat response (the
 * agents' own chat route and the OpenAI-compatible ones).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { CairnMetrics } from '../../metrics/metrics.js';
import { turnOutcome } from '../turn-outcome.js';

/** The routes that run one agent turn per request, and where each names its agent. */
const TURN_ROUTES: Record<string, (request: FastifyRequest) => unknown> = {
  '/agents/:name/chat': (request) => (request.params as { name?: unknown }).name,
  '/v1/chat/completions': (request) => (request.body as { model?: unknown } | null)?.model,
  '/v1/responses': (request) => (request.body as { model?: unknown } | null)?.model,
};

export function metricsRoutes(
  app: FastifyInstance,
  deps: { metrics: CairnMetrics; isAgent: (name: string) => boolean },
): void {
  app.addHook('onResponse', async (request, reply) => {
    const agentOf = TURN_ROUTES[request.routeOptions.url ?? ''];
    if (!agentOf) return;
    // Only loaded agents get their own label: a client's made-up names are not series.
    const named = agentOf(request);
    const agent = typeof named === 'string' && deps.isAgent(named) ? named : 'unknown';
    deps.metrics.chatTurn(agent, turnOutcome(request, reply.statusCode), reply.elapsedTime);
  });

  app.get('/metrics', async (_request, reply) => {
    const { contentType, body } = await deps.metrics.scrape();
    return reply.type(contentType).send(body);
  });
}

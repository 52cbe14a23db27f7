/**
 * `GET /metrics` (Prometheus text, behind the API key like every route but
 * /health), and the chat-turn metrics taken from each chat response.
 */
import type { FastifyInstance } from 'fastify';
import type { CairnMetrics } from '../../metrics/metrics.js';
import { turnOutcome } from '../turn-outcome.js';

const CHAT_ROUTE = '/agents/:name/chat';

export function metricsRoutes(app: FastifyInstance, deps: { metrics: CairnMetrics }): void {
  app.addHook('onResponse', async (request, reply) => {
    if (request.routeOptions.url !== CHAT_ROUTE) return;
    const agent = (request.params as { name?: string }).name ?? 'unknown';
    deps.metrics.chatTurn(agent, turnOutcome(request, reply.statusCode), reply.elapsedTime);
  });

  app.get('/metrics', async (_request, reply) => {
    const { contentType, body } = await deps.metrics.scrape();
    return reply.type(contentType).send(body);
  });
}

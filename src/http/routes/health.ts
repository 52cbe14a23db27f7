/**
 * GET /health: version, database kind, instance id and features' extras (MCP
 * servers). Open even when auth is on. It is a readiness answer: 200 while
 * the database answers, 503 with `databaseReachable: false` while it does
 * not, so a load balancer sends requests elsewhere. The process is alive as
 * long as it answers at all, 200 or 503.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { Store } from '../../store/store.js';
import { VERSION } from '../../version.js';

/** How long the database may take to answer the health check's query. */
export const HEALTH_DATABASE_TIMEOUT_MS = 2_000;

async function databaseAnswers(store: Pick<Store, 'ping'>, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([
      store.ping().then(
        () => true,
        () => false,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export interface HealthRoutesOptions {
  store: Pick<Store, 'kind' | 'ping'>;
  instanceId: string;
  healthExtras?: () => Record<string, unknown>;
  databaseTimeoutMs?: number;
}

export const healthRoutes: FastifyPluginAsync<HealthRoutesOptions> = async (app, deps) => {
  app.get('/health', async (_request, reply) => {
    const reachable = await databaseAnswers(
      deps.store,
      deps.databaseTimeoutMs ?? HEALTH_DATABASE_TIMEOUT_MS,
    );
    const body = {
      status: reachable ? 'ok' : 'unavailable',
      version: VERSION,
      database: deps.store.kind,
      databaseReachable: reachable,
      instance: deps.instanceId,
      ...deps.healthExtras?.(),
    };
    if (!reachable) {
      return reply.code(503).send({
        ...body,
        error: {
          code: 'DATABASE_UNAVAILABLE',
          message: `The ${deps.store.kind} database did not answer; this instance cannot serve requests until it does.`,
        },
      });
    }
    return body;
  });
};

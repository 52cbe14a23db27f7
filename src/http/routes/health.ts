/** GET /health: liveness, version, database kind, instance id and features' extras (MCP servers). Open even when auth is on. */
import type { FastifyInstance } from 'fastify';
import type { Store } from '../../store/store.js';
import { VERSION } from '../../version.js';

export function healthRoutes(
  app: FastifyInstance,
  deps: {
    store: Pick<Store, 'kind'>;
    instanceId: string;
    healthExtras?: () => Record<string, unknown>;
  },
): void {
  app.get('/health', async () => ({
    status: 'ok',
    version: VERSION,
    database: deps.store.kind,
    instance: deps.instanceId,
    ...deps.healthExtras?.(),
  }));
}

/** GET /health: liveness, version and database kind. Open even when auth is on. */
import type { FastifyInstance } from 'fastify';
import type { Store } from '../../store/store.js';
import { VERSION } from '../../version.js';

export function healthRoutes(app: FastifyInstance, deps: { store: Store }): void {
  app.get('/health', async () => ({ status: 'ok', version: VERSION, database: deps.store.kind }));
}

/**
 * `GET /openapi.json` and `GET /docs`. The document is generated
 * by @fastify/swagger from the JSON Schemas every route already declares for
 * validation, so a route added anywhere (by any routes plugin) appears without
 * extra work. Error responses are added to each operation here, from the one
 * table of error codes (src/errors.ts). `/docs` is Swagger UI served from the
 * package's own files: no CDN.
 */
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, FastifySchema } from 'fastify';
import { ERROR_STATUS } from '../errors.js';
import { VERSION } from '../version.js';

export const OPENAPI_PATH = '/openapi.json';
export const DOCS_PATH = '/docs';

/** The error envelope, with every stable code. */
const ERROR_BODY = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: {
        code: { type: 'string', enum: Object.keys(ERROR_STATUS) },
        message: { type: 'string' },
      },
    },
  },
} as const;

/** Error codes grouped by HTTP status, e.g. `404 → AGENT_NOT_FOUND, SESSION_NOT_FOUND, …`. */
function codesByStatus(): Map<number, string[]> {
  const byStatus = new Map<number, string[]>();
  for (const [code, status] of Object.entries(ERROR_STATUS)) {
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return new Map([...byStatus].sort(([a], [b]) => a - b));
}

/** Adds one response per error status to the route's documented schema (not to its real one). */
function withErrorResponses(schema: FastifySchema | undefined): FastifySchema {
  const responses: Record<string, unknown> = {
    ...((schema?.response as Record<string, unknown> | undefined) ?? {}),
  };
  for (const [status, codes] of codesByStatus()) {
    responses[String(status)] ??= {
      description: `Error: ${codes.join(', ')} (see the API table in the README for when each is returned)`,
      content: { 'application/json': { schema: ERROR_BODY } },
    };
  }
  return { ...(schema ?? {}), response: responses };
}

/**
 * Registers the generator and the UI. Call before any route is registered:
 * the generator collects routes as they are added.
 */
export function registerOpenApi(app: FastifyInstance): void {
  void app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Cairn',
        version: VERSION,
        description:
          'Self-hosted agent server. Every error is `{ "error": { "code", "message" } }`. When the server has an API key, send `Authorization: Bearer <CAIRN_API_KEY>`.',
      },
      components: {
        securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      },
      security: [{ bearer: [] }],
    },
    transform: ({ schema, url }) => {
      // The UI's own asset routes are not part of the API.
      if (url === DOCS_PATH || url.startsWith(`${DOCS_PATH}/`))
        return { schema: { ...(schema ?? {}), hide: true }, url };
      return { schema: withErrorResponses(schema), url };
    },
  });
  void app.register(swaggerUi, { routePrefix: DOCS_PATH, staticCSP: true });
  app.get(OPENAPI_PATH, { schema: { hide: true } }, () => app.swagger());
}

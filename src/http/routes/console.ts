/**
 * The web console: the static files Vite builds into
 * `dist/console/`, served at `/`. Hashed assets are cached for good; the page
 * itself is never cached, so a new build is picked up on the next load. The
 * console's own routes live under `/console/` so they can never shadow an API
 * path: everything else keeps the API's JSON 404.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';

/** Where `npm run build` puts the console, from src/ (tests) and dist/ (the bin) alike. */
export const DEFAULT_CONSOLE_DIR = fileURLToPath(
  new URL('../../../dist/console/', import.meta.url),
);

/** The URL prefix of the console's pages and assets. */
export const CONSOLE_PREFIX = '/console/';
const ASSETS_PREFIX = `${CONSOLE_PREFIX}assets/`;
const IMMUTABLE = 'public, max-age=31536000, immutable';
const NO_CACHE = 'no-cache';

/**
 * Paths that hold only the console's static files: they carry no data, so
 * they are open even when an API key is configured (the page must load to ask
 * for the key). Every API call the page makes still sends the key.
 */
export function isConsolePath(path: string): boolean {
  return path === '/' || path === '/console' || path.startsWith(CONSOLE_PREFIX);
}

/** True when the console has been built into `dir` (it is absent in a bare `tsc` build). */
export function consoleBuilt(dir: string): boolean {
  return existsSync(join(dir, 'index.html'));
}

export interface ConsoleRoutesOptions {
  dir: string;
}

export const consoleRoutes: FastifyPluginAsync<ConsoleRoutesOptions> = async (app, deps) => {
  // Only the files that exist at start-up get routes (wildcard off), so an
  // unknown asset falls through to the JSON 404 instead of the page.
  void app.register(fastifyStatic, {
    root: deps.dir,
    prefix: CONSOLE_PREFIX,
    wildcard: false,
    index: false,
    cacheControl: false,
    setHeaders: (res, path) => {
      res.setHeader('cache-control', path.includes('/assets/') ? IMMUTABLE : NO_CACHE);
    },
  });

  // The page goes to browsers (they ask for HTML); an API client that asks
  // for `/` (or for `/agents/..`, which URL rules turn into `/`) keeps getting
  // the API's JSON 404.
  const page = (request: FastifyRequest, reply: FastifyReply): FastifyReply => {
    if (!(request.headers.accept ?? '').includes('text/html')) {
      reply.callNotFound();
      return reply;
    }
    return reply.header('cache-control', NO_CACHE).sendFile('index.html', deps.dir, {
      cacheControl: false,
    });
  };
  app.get('/', async (request, reply) => page(request, reply));
  app.get('/console', async (request, reply) => page(request, reply));
  // Client-side routes (`/console/sessions/sess_…`) load the page, which routes itself.
  app.get('/console/*', async (request, reply) => {
    if (request.url.startsWith(ASSETS_PREFIX)) {
      reply.callNotFound();
      return reply;
    }
    return page(request, reply);
  });
};

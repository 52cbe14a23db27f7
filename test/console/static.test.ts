/**
 * Serving the built console: the page at `/` and under
 * `/console/…` (client-side routes), hashed assets cached for good, the page
 * never cached; API paths and unknown paths keep their JSON errors; the
 * static files are open even when an API key guards the API.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const PAGE = '<!doctype html><title>Cairn console</title><div id="app"></div>';
const ASSET = 'console.log("console")';
const ASSET_PATH = '/console/assets/index-AbC123.js';

function makeConsoleDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-console-'));
  mkdirSync(join(dir, 'assets'));
  writeFileSync(join(dir, 'index.html'), PAGE);
  writeFileSync(join(dir, 'assets', 'index-AbC123.js'), ASSET);
  return dir;
}

describe('console static files', () => {
  let t: TestApp;
  let dir: string;
  beforeAll(async () => {
    dir = makeConsoleDir();
    t = await startTestApp({ fake: null, app: { consoleDir: dir } });
  });
  afterAll(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const get = (url: string) => t.app.server.inject({ url });
  /** What a browser sends when it loads a page. */
  const BROWSER = { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' };
  const getPage = (url: string) => t.app.server.inject({ url, headers: BROWSER });

  it('serves the page at / and never lets it be cached', async () => {
    const res = await getPage('/');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/html/);
    expect(res.headers['cache-control']).toBe('no-cache');
    expect(res.body).toBe(PAGE);
  });

  it('falls back to the page for client-side routes under /console/', async () => {
    for (const url of [
      '/console',
      '/console/',
      '/console/sessions/sess_abc',
      '/console/tasks?status=waiting',
    ]) {
      const res = await getPage(url);
      expect(res.statusCode, url).toBe(200);
      expect(res.body, url).toBe(PAGE);
      expect(res.headers['cache-control'], url).toBe('no-cache');
    }
  });

  it('serves hashed assets as immutable', async () => {
    const res = await get(ASSET_PATH);
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/javascript/);
    expect(res.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect(res.body).toBe(ASSET);
  });

  it('answers an API client (no text/html in Accept) at / with the JSON 404', async () => {
    for (const headers of [{}, { accept: 'application/json' }, { accept: '*/*' }]) {
      const res = await t.app.server.inject({ url: '/', headers });
      expect(res.statusCode).toBe(404);
      expect(res.json()).toMatchObject({ error: { code: 'NOT_FOUND' } });
    }
    // An API path that URL rules resolve to `/` stays a JSON error too.
    const dotted = await t.app.server.inject({ url: '/agents/..' });
    expect(dotted.statusCode).toBe(404);
    expect(dotted.json()).toMatchObject({ error: { code: 'NOT_FOUND' } });
  });

  it('answers an unknown asset with the JSON 404, not the page', async () => {
    const res = await getPage('/console/assets/missing-123.js');
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ error: { code: 'NOT_FOUND' } });
  });

  it('refuses to leave the console folder', async () => {
    for (const url of ['/console/assets/..%2f..%2fpackage.json', '/console/../package.json']) {
      const res = await get(url);
      expect(res.body, url).not.toContain('"dependencies"');
    }
  });

  it('keeps API paths and unknown paths as JSON', async () => {
    const session = await get('/sessions/sess_unknown');
    expect(session.statusCode).toBe(404);
    expect(session.json()).toMatchObject({ error: { code: 'SESSION_NOT_FOUND' } });
    const unknown = await get('/no/such/path');
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toMatchObject({ error: { code: 'NOT_FOUND' } });
    const agents = await get('/agents');
    expect(agents.statusCode).toBe(200);
    expect(agents.headers['content-type']).toMatch(/^application\/json/);
  });
});

describe('console with an API key', () => {
  let t: TestApp;
  let dir: string;
  beforeAll(async () => {
    dir = makeConsoleDir();
    t = await startTestApp({
      fake: null,
      server: { apiKey: 'sekrit-key' },
      app: { consoleDir: dir },
    });
  });
  afterAll(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves the page and assets without the key, and still guards the API', async () => {
    const page = { accept: 'text/html' };
    expect((await t.app.server.inject({ url: '/', headers: page })).statusCode).toBe(200);
    expect(
      (await t.app.server.inject({ url: '/console/sessions/sess_x', headers: page })).statusCode,
    ).toBe(200);
    expect((await t.app.server.inject({ url: ASSET_PATH })).statusCode).toBe(200);
    const api = await t.app.server.inject({ url: '/agents' });
    expect(api.statusCode).toBe(401);
    expect(api.json()).toMatchObject({ error: { code: 'UNAUTHORIZED' } });
    const consoleLookalike = await t.app.server.inject({ url: '/consoles' });
    expect(consoleLookalike.statusCode).toBe(401);
  });
});

describe('console not built', () => {
  it('answers / with the JSON 404 instead of failing to start', async () => {
    const t = await startTestApp({
      fake: null,
      app: { consoleDir: join(tmpdir(), 'cairn-no-console') },
    });
    try {
      const res = await t.app.server.inject({ url: '/', headers: { accept: 'text/html' } });
      expect(res.statusCode).toBe(404);
      expect(res.json()).toMatchObject({ error: { code: 'NOT_FOUND' } });
    } finally {
      await t.close();
    }
  });
});

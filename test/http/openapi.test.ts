/**
 * GET /openapi.json and GET /docs: an OpenAPI 3.1 document
 * generated from the routes' own schemas, every route and every error code in
 * it, and a UI whose assets come from the server itself.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_STATUS } from '../../src/errors.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

interface OpenApiDoc {
  openapi: string;
  paths: Record<
    string,
    Record<
      string,
      { responses: Record<string, unknown>; requestBody?: unknown; parameters?: unknown[] }
    >
  >;
}

describe('OpenAPI and /docs', () => {
  let t: TestApp;
  let doc: OpenApiDoc;
  beforeAll(async () => {
    t = await startTestApp({ fake: null });
    const res = await t.app.server.inject({ method: 'GET', url: '/openapi.json' });
    expect(res.statusCode).toBe(200);
    doc = res.json<OpenApiDoc>();
  });
  afterAll(() => t.close());

  it('is OpenAPI 3.1 and lists every API route the server has', () => {
    expect(doc.openapi).toBe('3.1.0');
    const documented = new Set(
      Object.entries(doc.paths).flatMap(([path, ops]) =>
        Object.keys(ops).map((m) => `${m.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ':$1')}`),
      ),
    );
    for (const expected of [
      'GET /health',
      'GET /agents',
      'POST /agents/:name/chat',
      'POST /sessions',
      'PATCH /sessions/:id',
      'GET /sessions/:id/export',
      'POST /sessions/import',
      'POST /sessions/:id/compact',
      'POST /sessions/:id/fork',
      'GET /tasks/:id',
      'PUT /agents/:name/memory/:key',
      'GET /events',
      'GET /.well-known/agent-card.json',
      'GET /a2a/:name/.well-known/agent-card.json',
      'POST /a2a/:name',
    ]) {
      expect(documented, expected).toContain(expected);
    }
    expect([...documented].some((r) => r.includes('/docs'))).toBe(false);
  });

  it('carries the request schemas the routes validate with', () => {
    const chat = doc.paths['/agents/{name}/chat']!['post']!;
    const body = JSON.stringify(chat.requestBody);
    expect(body).toContain('"message"');
    expect(body).toContain('"sessionId"');
    expect(JSON.stringify(doc.paths['/sessions']!['get']!.parameters)).toContain('"status"');
  });

  it('documents every error code, with its status, on every operation', () => {
    const ops = Object.values(doc.paths).flatMap((p) => Object.values(p));
    for (const op of ops) {
      for (const status of new Set(Object.values(ERROR_STATUS)))
        expect(op.responses, JSON.stringify(op)).toHaveProperty(String(status));
    }
    const text = JSON.stringify(doc);
    for (const code of Object.keys(ERROR_STATUS)) expect(text).toContain(code);
  });

  it('/docs serves the UI and its assets from the server (no CDN)', async () => {
    const page = await t.app.server.inject({ method: 'GET', url: '/docs/' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toContain('text/html');
    const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(assets.length).toBeGreaterThan(0);
    for (const asset of assets) expect(asset).not.toMatch(/^(https?:)?\/\//);
    const script = assets.find((a) => a.endsWith('swagger-ui-bundle.js'))!;
    const bundle = await t.app.server.inject({
      method: 'GET',
      url: new URL(script, 'http://x/docs/').pathname,
    });
    expect(bundle.statusCode).toBe(200);
  });

  it('is behind the API key like the rest', async () => {
    const locked = await startTestApp({ fake: null, env: { CAIRN_API_KEY: 'k'.repeat(32) } });
    try {
      const res = await locked.app.server.inject({ method: 'GET', url: '/openapi.json' });
      expect(res.statusCode).toBe(401);
      const ok = await locked.app.server.inject({
        method: 'GET',
        url: '/openapi.json',
        headers: { authorization: `Bearer ${'k'.repeat(32)}` },
      });
      expect(ok.statusCode).toBe(200);
    } finally {
      await locked.close();
    }
  });
});

/**
 * `SESSION_NOT_FOUND` is raised in one place (src/store/session-not-found.ts):
 * every route that looks up a missing session answers 404 with the same code
 * and the same advice, and no other source file spells the code.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const SRC_DIR = fileURLToPath(new URL('../../src/', import.meta.url));
const MISSING = 'sess_doesnotexist';

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(join(dir, entry.name))
      : entry.name.endsWith('.ts')
        ? [join(dir, entry.name)]
        : [],
  );
}

describe('SESSION_NOT_FOUND', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({});
  });
  afterAll(async () => {
    await t.close();
  });

  const requests = [
    { method: 'GET', url: `/sessions/${MISSING}` },
    { method: 'GET', url: `/sessions/${MISSING}/messages` },
    { method: 'PATCH', url: `/sessions/${MISSING}`, payload: { title: 'x' } },
    { method: 'POST', url: `/sessions/${MISSING}/reset` },
    { method: 'POST', url: `/sessions/${MISSING}/close` },
    { method: 'POST', url: `/sessions/${MISSING}/compact` },
    { method: 'POST', url: `/sessions/${MISSING}/compact/undo` },
    { method: 'GET', url: `/sessions/${MISSING}/export` },
  ] as const;

  it.each(requests)('$method $url answers 404 with the one code and message', async (request) => {
    const res = await t.app.server.inject(request);
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toMatchObject({
      code: 'SESSION_NOT_FOUND',
      message: `Session "${MISSING}" not found. List sessions with GET /sessions.`,
    });
  });

  it('is spelled only by the error table and src/store/session-not-found.ts', () => {
    const spelling = sourceFiles(SRC_DIR)
      .filter((file) => readFileSync(file, 'utf8').includes("'SESSION_NOT_FOUND'"))
      .map((file) => relative(SRC_DIR, file));
    expect(spelling).toEqual(['store/session-not-found.ts']);
  });
});

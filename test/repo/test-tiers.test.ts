/**
 * A test's tier is in its file name (see vitest.fast.config.ts): the fast
 * tier must run on a machine with nothing but Node, so a test file that
 * reaches for Postgres or starts a process has to say so in its name, or a
 * new slow test would silently join the edit loop and fail there.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');
const TEST_ROOTS = ['test', 'console/test'];

/** What a file does that puts it in a tier, by the helpers and modules it uses. */
const NEEDS_POSTGRES = [
  /from '(?:\.\.\/)+helpers\/postgres\.js'/,
  /from '\.\/scratch-database\.js'/,
  /from 'pg'/,
  /\bDATABASES\b/,
  /database: 'postgres'/,
];
const NEEDS_PROCESSES = [
  /from 'node:child_process'/,
  /spawn-server\.js'/,
  /from '\.\/mcp-servers\.js'/,
  /private-postgres\.js'/,
  /\btmux\b/,
  /\bchromium\b/i,
  /\bdist\/cli\b/,
  /\bplaywright-core\b/,
];

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'fixtures' ? [] : testFiles(path);
    return /\.test\.tsx?$/.test(entry.name) ? [path] : [];
  });
}

function tierOf(file: string): 'fast' | 'pg' | 'process' {
  if (/\.process\.test\.tsx?$/.test(file)) return 'process';
  if (/\.pg\.test\.tsx?$/.test(file)) return 'pg';
  return 'fast';
}

/** This file names the patterns it looks for; it needs neither. */
const SELF = relative(ROOT, import.meta.filename);

describe('test tiers', () => {
  const files = TEST_ROOTS.flatMap((dir) => testFiles(join(ROOT, dir)))
    .map((path) => relative(ROOT, path))
    .filter((file) => file !== SELF);

  it('finds the suite', () => {
    expect(files.length).toBeGreaterThan(100);
    expect(files.filter((f) => tierOf(f) === 'pg').length).toBeGreaterThan(10);
    expect(files.filter((f) => tierOf(f) === 'process').length).toBeGreaterThan(10);
  });

  it('names every file that starts a process *.process.test.ts', () => {
    const misnamed = files.filter(
      (file) =>
        tierOf(file) !== 'process' &&
        NEEDS_PROCESSES.some((p) => p.test(readFileSync(join(ROOT, file), 'utf8'))),
    );
    expect(misnamed, 'rename these to <name>.process.test.ts').toEqual([]);
  });

  it('names every file that needs Postgres *.pg.test.ts (or *.process.test.ts)', () => {
    const misnamed = files.filter(
      (file) =>
        tierOf(file) === 'fast' &&
        NEEDS_POSTGRES.some((p) => p.test(readFileSync(join(ROOT, file), 'utf8'))),
    );
    expect(misnamed, 'rename these to <name>.pg.test.ts').toEqual([]);
  });
});

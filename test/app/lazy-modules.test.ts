/**
 * Idle RSS (an idle server should stay small): packages an idle server rarely
 * needs are loaded on first use, not at start-up. This walks the static imports
 * reachable from the composition root (src/app.ts) and from `cairn serve`, and
 * fails when one of the lazy packages is reachable by a static import again:
 * the MCP SDK (with zod, ~20 MB resident; loaded by the first MCP connection or
 * POST /mcp), the A2A SDK (~9 MB; loaded by the first A2A request), pino-pretty
 * (only for pretty log lines), the OpenTelemetry SDK (only when an OTLP
 * endpoint is configured), the Anthropic SDK (~23 MB with the OpenTelemetry
 * API it imports; loaded by a role's first call) and the Postgres driver
 * (~16 MB; loaded only when `database.url` is set).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

const LAZY_PACKAGES = [
  '@modelcontextprotocol/sdk',
  '@a2a-js/sdk',
  'pino-pretty',
  '@opentelemetry/',
  '@anthropic-ai/sdk',
  'pg',
];

/** Static value imports and re-exports of a module (`import type` and `import()` excluded). */
function staticImports(source: string): string[] {
  const specifiers: string[] = [];
  const patterns = [
    /^import\s+(?!type\b)[^;]*?\bfrom\s+'([^']+)'/gms,
    /^import\s+'([^']+)'/gm,
    /^export\s+(?!type\b)[^;]*?\bfrom\s+'([^']+)'/gms,
  ];
  for (const pattern of patterns)
    for (const match of source.matchAll(pattern)) specifiers.push(match[1]!);
  return specifiers;
}

/** Every package reachable from `entry` (a path under src/) by static imports. */
function reachablePackages(entry: string): Set<string> {
  const packages = new Set<string>();
  const seen = new Set<string>();
  const pending = [path.join(SRC, entry)];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const specifier of staticImports(fs.readFileSync(file, 'utf8'))) {
      if (specifier.startsWith('.')) {
        pending.push(path.resolve(path.dirname(file), specifier.replace(/\.js$/, '.ts')));
      } else if (!specifier.startsWith('node:')) {
        packages.add(specifier);
      }
    }
  }
  return packages;
}

const lazy = (packages: Set<string>): string[] =>
  [...packages].filter((p) =>
    LAZY_PACKAGES.some(
      (name) => p === name || p.startsWith(name.endsWith('/') ? name : `${name}/`),
    ),
  );

describe('start-up imports', () => {
  it('finds the packages the app does import statically (the walk works)', () => {
    const packages = reachablePackages('app.ts');
    expect(packages).toContain('fastify');
    expect(packages).toContain('better-sqlite3');
  });

  it('the composition root reaches no lazy package by a static import', () => {
    expect(lazy(reachablePackages('app.ts'))).toEqual([]);
  });

  it('cairn serve reaches no lazy package by a static import', () => {
    expect(lazy(reachablePackages('cli/serve.ts'))).toEqual([]);
  });

  it('would notice one: the tracing module imports the OpenTelemetry SDK statically', () => {
    expect(lazy(reachablePackages('telemetry/otel-tracing.ts'))).toContain(
      '@opentelemetry/sdk-trace-base',
    );
  });

  it('would notice one: the Postgres store and the Anthropic model import theirs statically', () => {
    expect(lazy(reachablePackages('store/postgres/pg-store.ts'))).toContain('pg');
    expect(lazy(reachablePackages('llm/anthropic-model.ts'))).toContain('@anthropic-ai/sdk');
  });

  it('would notice one: the MCP stdio command imports the SDK statically', () => {
    expect(lazy(reachablePackages('cli/mcp-stdio.ts'))).not.toEqual([]);
  });
});

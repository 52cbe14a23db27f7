/**
 * The package as a user gets it: packed the way `npm publish` packs it (its
 * `files` list over the suite's fresh build), installed into an empty folder
 * with production dependencies only (better-sqlite3 built there, as on a
 * user's machine), and its `cairn` bin started in a folder with no agents —
 * where it serves the package's demo agent on the offline model and answers
 * a chat.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnServer, type ServerProcess } from './process/spawn-server.js';

const ROOT = join(import.meta.dirname, '..');
const PACKAGE = '@cairn-agents/server';
/** Packing, a production install (native build included) and its start: minutes, not seconds. */
const INSTALL_MS = 600_000;

let work: string;
let installed: string;
let server: ServerProcess | undefined;

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'cairn-package-'));
  // The global setup built dist/; packing runs no script, so it packs that build.
  execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', work], {
    cwd: ROOT,
    stdio: 'pipe',
  });
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  if (!tarball) throw new Error(`npm pack wrote no tarball into ${work}`);
  installed = join(work, 'project');
  execFileSync('mkdir', ['-p', installed]);
  writeFileSync(join(installed, 'package.json'), '{"name":"empty-project","private":true}\n');
  execFileSync(
    'npm',
    ['install', '--omit=dev', '--prefer-offline', '--no-audit', '--no-fund', join(work, tarball)],
    { cwd: installed, stdio: 'pipe', env: { ...process.env, npm_config_loglevel: 'error' } },
  );
}, INSTALL_MS);

afterAll(async () => {
  await server?.stop('SIGTERM');
  // The installed tree is ~22 000 files: fs.rmSync took 74 s of them on a
  // loaded 2-core machine (past the hook's minute), rm -rf about 5.
  if (work) execFileSync('rm', ['-rf', work]);
}, INSTALL_MS);

describe('the packed package', () => {
  const packageDir = () => join(installed, 'node_modules', ...PACKAGE.split('/'));

  it('carries the build, the schema and the demo agent, and no sources, tests or source maps', () => {
    const dir = packageDir();
    for (const file of ['dist/cli/main.js', 'dist/console/index.html', 'schemas/agent.json'])
      expect(existsSync(join(dir, file)), file).toBe(true);
    expect(existsSync(join(dir, 'agents', 'assistant', 'agent.json'))).toBe(true);
    for (const absent of ['src', 'test', 'bench', 'console', 'dist/cli/main.js.map'])
      expect(existsSync(join(dir, absent)), absent).toBe(false);
  });

  it('installs production dependencies only', () => {
    const modules = join(installed, 'node_modules');
    expect(existsSync(join(modules, 'better-sqlite3'))).toBe(true);
    for (const dev of ['vitest', 'typescript', 'eslint', 'vite'])
      expect(existsSync(join(modules, dev)), dev).toBe(false);
  });

  it('its bin serves the demo agent in a folder with no agents, and chats', async () => {
    const home = join(work, 'elsewhere');
    execFileSync('mkdir', ['-p', home]);
    server = await spawnServer({
      home,
      cliPath: join(installed, 'node_modules', '.bin', 'cairn'),
      env: { CAIRN_LOG_LEVEL: 'info' },
    });
    await expect
      .poll(() => server!.output(), { timeout: 10_000 })
      .toContain("serving the package's demo agent");
    const res = await fetch(`${server.url}/agents/assistant/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'Hello there' }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { sessionId: string; reply: string };
    expect(body.sessionId).toMatch(/^sess_/);
    expect(body.reply.length).toBeGreaterThan(0);
    // The conversation is in this folder's database, not in the package.
    expect(existsSync(join(home, 'data', 'cairn.db'))).toBe(true);
  });
});

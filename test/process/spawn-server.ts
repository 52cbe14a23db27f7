/**
 * Process-test helper: runs the compiled CLI (`node dist/cli/main.js serve`,
 * built by test/global-setup.ts) as a real child process on a real port, so
 * tests can SIGKILL or SIGTERM it and restart it on the same home folder.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The bin the README documents, compiled by the global setup. */
export const CLI_PATH = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

const READY_TIMEOUT_MS = 15_000;
const READY_POLL_MS = 25;
const START_ATTEMPTS = 3;

export interface ServerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ServerProcess {
  readonly child: ChildProcess;
  readonly port: number;
  /** e.g. `http://127.0.0.1:PORT` */
  readonly url: string;
  /** Everything the process wrote to stdout and stderr so far (for failure messages). */
  output(): string;
  /** Resolves when the process has exited. */
  readonly exited: Promise<ServerExit>;
  /** Sends `signal` and waits for the process to exit. */
  stop(signal: NodeJS.Signals): Promise<ServerExit>;
}

export interface SpawnServerOptions {
  /** CAIRN_HOME: a folder made with `makeHome` (test/helpers/test-app.ts). */
  home: string;
  /** Extra environment (e.g. `CAIRN_LOG_LEVEL`). */
  env?: Record<string, string>;
  /** Run scheduled daemon agents (default false: `--no-daemons`). */
  daemons?: boolean;
  /** The bin to run (default: this checkout's build, `CLI_PATH`), e.g. an installed package's. */
  cliPath?: string;
}

/** The SQLite file a spawned server uses: passed explicitly as CAIRN_DB. */
export function dbPathOf(home: string): string {
  return join(home, 'data', 'cairn.db');
}

/**
 * A port that was free a moment ago: listen on 0, read the port, close.
 * Another process could take it before the server binds; `spawnServer`
 * retries on EADDRINUSE.
 */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/**
 * Settings a developer's shell may carry (a provider key, a collector's
 * address) and the server reads: none reaches a test's server.
 */
const SETTING_PREFIXES = ['CAIRN_', 'OPENAI_', 'ANTHROPIC_', 'OTEL_'];

/** Our environment without anything that would override the test home's settings. */
function baseEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (SETTING_PREFIXES.some((prefix) => key.startsWith(prefix)) || key === 'DATABASE_URL') {
      continue;
    }
    env[key] = value;
  }
  return env;
}

/** Starts `cairn serve --no-daemons` (or with daemons) and resolves once GET /health answers 200. */
export async function spawnServer(options: SpawnServerOptions): Promise<ServerProcess> {
  let lastError: Error | undefined;
  for (let attempt = 0; attempt < START_ATTEMPTS; attempt++) {
    const port = await freePort();
    const server = launch(options, port);
    try {
      await waitUntilReady(server);
      return server;
    } catch (err) {
      lastError = err as Error;
      if (server.child.exitCode === null && server.child.signalCode === null) {
        await server.stop('SIGKILL');
      }
      // Only a lost race for the port is worth another attempt.
      if (!server.output().includes('EADDRINUSE')) break;
    }
  }
  throw lastError ?? new Error('server did not start');
}

function launch(options: SpawnServerOptions, port: number): ServerProcess {
  const args = options.daemons ? ['serve'] : ['serve', '--no-daemons'];
  const child = spawn(process.execPath, [options.cliPath ?? CLI_PATH, ...args], {
    env: {
      ...baseEnv(),
      CAIRN_HOME: options.home,
      CAIRN_DB: dbPathOf(options.home),
      CAIRN_HOST: '127.0.0.1',
      CAIRN_PORT: String(port),
      CAIRN_LOG_LEVEL: 'warn',
      ...(options.env ?? {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const exited = new Promise<ServerExit>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  return {
    child,
    port,
    url: `http://127.0.0.1:${port}`,
    output: () => output,
    exited,
    async stop(signal) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

async function waitUntilReady(server: ServerProcess): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let exit: ServerExit | undefined;
  void server.exited.then((e) => (exit = e));
  while (Date.now() < deadline) {
    if (exit) {
      throw new Error(
        `cairn serve exited (code ${exit.code}, signal ${exit.signal}) before it was ready:\n${server.output()}`,
      );
    }
    try {
      const res = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(1_000) });
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, READY_POLL_MS));
  }
  throw new Error(`cairn serve was not ready within ${READY_TIMEOUT_MS} ms:\n${server.output()}`);
}

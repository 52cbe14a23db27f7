/**
 * `cairn serve`: builds the app, listens, and shuts down gracefully on
 * SIGTERM/SIGINT — new requests get 503, running turns drain within the grace
 * period, and the process exits 0.
 */
import { existsSync } from 'node:fs';
import { isIP } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startApp, type CairnApp } from '../app.js';
import { describeModelRole, isLoopbackHost, loadSettings } from '../config/settings.js';
import { CairnError, describeError } from '../errors.js';
import { acquireProcessLock } from '../store/sqlite/process-lock.js';
import { StartFiles } from '../store/sqlite/start-files.js';
import { CliUsageError } from './client.js';
import { chooseLogFormat, loggerOptions } from './log-format.js';
import { localUrlOf, recordServerAddress } from './server-address.js';

export const SHUTDOWN_GRACE_MS = 30_000;
/** While draining, how often connections that went idle are closed. */
const IDLE_REAP_INTERVAL_MS = 100;

export interface ServeOptions {
  daemons: boolean;
  /** `--port`: overrides CAIRN_PORT and server.port. */
  port?: string;
  /** `--host`: overrides CAIRN_HOST and server.host. */
  host?: string;
}

/** `--port`'s value as a port number, or a one-line error. */
export function parsePortOption(value: string): number {
  const port = /^\d+$/.test(value.trim()) ? Number(value) : NaN;
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new CliUsageError(`--port must be an integer 0–65535, got "${value}".`);
  return port;
}

/**
 * `--host`'s value: a host name or an IP address (IPv6 with or without
 * brackets), never a URL or a host with a port, which would only fail later
 * at bind time with a less clear message.
 */
export function parseHostOption(value: string): string {
  const host = value.trim().replace(/^\[(.*)\]$/, '$1');
  if (isIP(host) === 0 && !/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/.test(host))
    throw new CliUsageError(
      `--host takes a host name or an IP address such as 127.0.0.1 or 0.0.0.0 (no scheme, no port), got "${value}". Give the port with --port.`,
    );
  return host;
}

export async function serve(options: ServeOptions): Promise<CairnApp> {
  // The flags are the variables' values, read as the settings read every other override.
  const flags = {
    ...(options.port !== undefined ? { CAIRN_PORT: String(parsePortOption(options.port)) } : {}),
    ...(options.host !== undefined ? { CAIRN_HOST: parseHostOption(options.host) } : {}),
  };
  const loaded = loadSettings({ env: { ...process.env, ...flags } });
  // A folder with no agents/ at all (`npx … serve` in an empty folder) gets
  // the package's demo agent, said in one line below; an empty agents/ is
  // the user's own choice and stays empty.
  const demoAgents = existsSync(loaded.agentsDir) ? undefined : packagedDemoAgents();
  const settings = demoAgents ? { ...loaded, agentsDir: demoAgents } : loaded;
  if (!isLoopbackHost(settings.server.host) && settings.server.apiKey === null) {
    throw new CairnError(
      'VALIDATION_ERROR',
      `Refusing to listen on ${settings.server.host} without an API key: anyone on the network could use your agents. Set CAIRN_API_KEY, or bind to 127.0.0.1.`,
    );
  }
  // Held for the life of the process (the OS frees it when the process dies);
  // `stop` keeps a reference so it is never garbage-collected early.
  let lock: ReturnType<typeof acquireProcessLock> | undefined;
  // A start that fails leaves no empty database behind (nor its lock file).
  const startFiles =
    settings.database.kind === 'sqlite' ? StartFiles.before(settings.database.path) : undefined;
  const undoStart = (): void => {
    lock?.release();
    startFiles?.removeCreated();
  };
  const startedAt = performance.now();
  let app: CairnApp;
  try {
    lock =
      settings.database.kind === 'sqlite' ? acquireProcessLock(settings.database.path) : undefined;
    app = await startApp(settings, {
      logger: loggerOptions(
        chooseLogFormat(process.env, process.stdout.isTTY === true),
        process.env.CAIRN_LOG_LEVEL ?? 'info',
        process.stdout.isTTY === true,
      ),
      daemons: options.daemons,
      watchAgents: true,
    });
  } catch (err) {
    undoStart();
    throw databaseError(err, settings.database.path);
  }
  let address: string;
  try {
    address = await app.server.listen({
      host: settings.server.host,
      port: settings.server.port,
    });
  } catch (err) {
    await app.close().catch(() => undefined);
    undoStart();
    throw listenError(err, settings.server.host, settings.server.port, {
      port: options.port !== undefined,
      host: options.host !== undefined,
    });
  }
  // Client commands started in this home (cairn chat, …) find this server through it.
  const boundPort = (app.server.server.address() as { port: number }).port;
  const forgetAddress = recordServerAddress(
    settings.home,
    localUrlOf(settings.server.host, boundPort),
  );
  // Every way out of the process but a crash or kill -9 (after which clients ignore the record).
  process.once('exit', forgetAddress);
  // Logged only once the port is ours, so "ready" is never followed by a bind error.
  app.server.log.info(
    {
      address,
      startupMs: Math.round(performance.now() - startedAt),
      agents: app.agents.list().map((a) => a.name),
      database: settings.database.kind === 'sqlite' ? settings.database.path : 'postgres',
      instance: app.instanceId,
      mainModel: describeModelRole(settings.models.main),
      compactModel: describeModelRole(settings.models.compact),
      daemons: options.daemons === false ? 'off' : app.daemons.daemonAgents().map((a) => a.name),
      console: `${address}/console/`,
    },
    `cairn ready, listening on ${address}`,
  );
  if (demoAgents)
    app.server.log.info(
      `no agents folder in ${settings.home}: serving the package's demo agent "assistant" on ${describeModelRole(settings.models.main)}; \`cairn init\` writes agents/ here to make your own`,
    );
  else if (app.agents.list().length === 0) app.server.log.warn(noAgentsWarning(settings.agentsDir));

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    app.server.log.info(`${signal}: draining running turns (up to ${SHUTDOWN_GRACE_MS / 1000} s)`);
    const timer = setTimeout(() => {
      // What did not finish is marked interrupted now (resumable with
      // POST /tasks/:id/resume); every message it produced is already stored.
      app.store
        .interruptRunningTasks(app.instanceId)
        .then((count) =>
          app.server.log.warn(`grace period over; ${count} task(s) marked interrupted`),
        )
        .catch(() =>
          app.server.log.warn('grace period over; tasks will be marked interrupted on next start'),
        )
        .finally(() => process.exit(0));
    }, SHUTDOWN_GRACE_MS);
    timer.unref();
    // server.close() waits for every open connection, but only closes the ones
    // idle at that moment: a keep-alive connection whose response finishes
    // during the drain would stay open (72 s keep-alive) and hold the process
    // until the grace period. Close such connections as they go idle.
    const reaper = setInterval(
      () => app.server.server.closeIdleConnections(),
      IDLE_REAP_INTERVAL_MS,
    );
    reaper.unref();
    app
      .close()
      .then(() => {
        lock?.release();
        process.exit(0);
      })
      .catch((err: unknown) => {
        app.server.log.error({ message: (err as Error).message }, 'shutdown failed');
        process.exit(1);
      });
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  return app;
}

/** Failures of the file system or SQLite itself while opening the database. */
const DATABASE_ERROR = /^(SQLITE_\w+|EACCES|EPERM|EROFS|ENOTDIR|EISDIR)$/;

/**
 * A database file that cannot be opened (not SQLite, a folder, not writable):
 * one line naming the file and how to fix it, not SQLite's bare "file is not
 * a database". Anything else is passed on as it is.
 */
function databaseError(err: unknown, path: string): unknown {
  const code = (err as { code?: unknown }).code;
  if (err instanceof CairnError || typeof code !== 'string' || !DATABASE_ERROR.test(code))
    return err;
  return new CliUsageError(
    `cannot open the database ${path} (${code}: ${describeError(err)}). Check that it is a SQLite file this user may read and write, or point CAIRN_DB (or database.path in cairn.json) at another file.`,
  );
}

/** A bind failure as one line that says how to fix it (the code stays in it for scripts). */
function listenError(
  err: unknown,
  host: string,
  port: number,
  given: { port: boolean; host: boolean },
): Error {
  const code = (err as NodeJS.ErrnoException).code;
  const choosePort = given.port
    ? 'choose another port with --port'
    : 'choose another port with --port or CAIRN_PORT (or server.port in cairn.json)';
  if (code === 'EADDRINUSE') {
    return new CliUsageError(
      `port ${port} on ${host} is already in use (EADDRINUSE). Stop the program using it, or ${choosePort}.`,
    );
  }
  if (code === 'EACCES') {
    return new CliUsageError(
      `not allowed to listen on port ${port} (EACCES): ports below 1024 need privileges. ${choosePort[0]!.toUpperCase()}${choosePort.slice(1)}.`,
    );
  }
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND') {
    return new CliUsageError(
      `cannot listen on host ${host} (${code}): it is not an address of this machine. ${given.host ? 'Give another with --host' : 'Set --host or CAIRN_HOST (or server.host in cairn.json)'}, e.g. 127.0.0.1.`,
    );
  }
  return err as Error;
}

/** The agents folder shipped with the package (its demo agent), when it is there. */
function packagedDemoAgents(): string | undefined {
  // dist/cli/serve.js → the package root's agents/.
  const dir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'agents');
  return existsSync(join(dir, 'assistant', 'agent.json')) ? dir : undefined;
}

/** Why a server with no agents answers every chat with 404, and what to do about it. */
function noAgentsWarning(agentsDir: string): string {
  const fix = 'add agents/<name>/agent.json (`cairn init` writes a demo agent)';
  if (!existsSync(agentsDir)) return `the agents folder ${agentsDir} does not exist: ${fix}`;
  return `no agents loaded from ${agentsDir}: ${fix}, or fix the files reported above`;
}

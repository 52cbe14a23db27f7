/**
 * A second `cairn serve` on the same SQLite file is refused
 * at start with one clear line and exit code 1; the first keeps serving.
 * The lock is the OS's: once the holder is `kill -9`ed, a new server starts.
 * Real processes throughout.
 */
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH, dbPathOf, spawnServer, type ServerProcess } from '../process/spawn-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** `cairn serve` (or another command) on `home`'s database, as spawnServer runs it, until it exits. */
function serveOnce(home: string, args: string[] = ['serve', '--no-daemons']): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, ...args],
      {
        env: {
          PATH: process.env.PATH ?? '',
          CAIRN_HOME: home,
          CAIRN_DB: dbPathOf(home),
          CAIRN_HOST: '127.0.0.1',
          CAIRN_PORT: '0',
          CAIRN_LOG_LEVEL: 'warn',
        },
        timeout: 20_000,
      },
      (error, stdout, stderr) => {
        resolve({
          code: error ? (typeof error.code === 'number' ? error.code : -1) : 0,
          stdout,
          stderr,
        });
      },
    );
  });
}

describe('one cairn serve per SQLite file', () => {
  const servers: ServerProcess[] = [];
  let home: string | undefined;
  afterEach(async () => {
    for (const server of servers.splice(0)) await server.stop('SIGKILL');
    if (home) rmSync(home, { recursive: true, force: true });
    home = undefined;
  });

  it('refuses a second server with one line, and frees the file when the first is killed', async () => {
    home = makeHome({}, null);
    const first = await spawnServer({ home });
    servers.push(first);

    const second = await serveOnce(home);
    expect(second.code).toBe(1);
    const lines = second.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`Another cairn server is already using ${dbPathOf(home)}`);
    expect(lines[0]).toContain('CAIRN_DB');
    expect(second.stdout).toBe('');

    // The first one is untouched.
    expect((await fetch(`${first.url}/health`)).status).toBe(200);

    await first.stop('SIGKILL');
    const third = await spawnServer({ home });
    servers.push(third);
    expect((await fetch(`${third.url}/health`)).status).toBe(200);
    // …and it holds the lock in turn.
    expect((await serveOnce(home)).code).toBe(1);
  });

  it('cairn mcp (stdio) beside a running server is refused too: its start-up recovery would break the server', async () => {
    home = makeHome({}, null);
    const first = await spawnServer({ home });
    servers.push(first);
    const mcp = await serveOnce(home, ['mcp']);
    expect(mcp.code).toBe(1);
    expect(mcp.stderr).toContain(`Another cairn server is already using ${dbPathOf(home)}`);
    expect(mcp.stdout).toBe('');
    expect((await fetch(`${first.url}/health`)).status).toBe(200);
  });

  it('a server stopped with SIGTERM frees the file for the next one', async () => {
    home = makeHome({}, null);
    const first = await spawnServer({ home });
    expect((await first.stop('SIGTERM')).code).toBe(0);
    const next = await spawnServer({ home });
    servers.push(next);
    expect((await fetch(`${next.url}/health`)).status).toBe(200);
  });
});

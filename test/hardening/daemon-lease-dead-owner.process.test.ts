/**
 * A process dies (`kill -9`) in the middle of a daemon tick,
 * holding the agent's lease. With two real server processes: after the
 * restart the daemon ticks again within about one interval (not after the
 * lease's 15 minutes), and the dead tick's task and session are closed out.
 * On Postgres the same, once the dead instance's heartbeat goes stale.
 */
import { rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { HEARTBEAT_MS, STALE_AFTER_MS } from '../../src/coordination/instance-heartbeat.js';
import { DAEMON_LEASE_MS } from '../../src/runtime/daemon-scheduler.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { makeHome } from '../helpers/test-app.js';
import { dbPathOf, spawnServer, type ServerProcess } from '../process/spawn-server.js';

const TICKER = {
  name: 'ticker',
  system: 'You are a daemon.',
  tools: [],
  daemon: { every: '2s', prompt: 'Report.' },
};
/** The first tick's model call outlives the process. */
const SLOW_TICK_MS = 60_000;

interface Row {
  id: string;
  status: string;
  session_id?: string;
}

function readDb<T>(home: string, query: (db: Database.Database) => T): T {
  const db = new Database(dbPathOf(home), { readonly: true });
  try {
    return query(db);
  } finally {
    db.close();
  }
}

describe('a daemon tick killed with its process', () => {
  let fake: FakeLlmServer | undefined;
  let home: string | undefined;
  let database: TestDatabase | undefined;
  const servers: ServerProcess[] = [];
  afterEach(async () => {
    for (const server of servers.splice(0)) await server.stop('SIGKILL');
    await fake?.close();
    await database?.drop();
    database = undefined;
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('ticks again soon after a restart and closes out the dead tick', async () => {
    fake = await startFakeLlmServer();
    home = makeHome({ agents: { ticker: TICKER } }, fake.baseURL);
    fake.script({ content: 'never delivered', delayMs: SLOW_TICK_MS });

    const first = await spawnServer({ home, daemons: true });
    servers.push(first);
    // The tick is in its model call: its task runs and it holds the lease.
    await expect.poll(() => fake!.requests.length, { timeout: 15_000 }).toBe(1);
    const held = readDb(home, (db) =>
      db
        .prepare("SELECT lease_owner, lease_expires FROM daemon_runs WHERE agent_name = 'ticker'")
        .get(),
    ) as { lease_owner: string | null; lease_expires: string };
    expect(held.lease_owner).not.toBeNull();
    expect(Date.parse(held.lease_expires) - Date.now()).toBeGreaterThan(DAEMON_LEASE_MS / 2);
    const deadTask = readDb(home, (db) =>
      db.prepare("SELECT id, status, session_id FROM tasks WHERE agent_name = 'ticker'").get(),
    ) as Row;
    expect(deadTask.status).toBe('running');

    await first.stop('SIGKILL');
    fake.setDefault(() => ({ content: 'tick report' }));
    const restartedAt = Date.now();
    const second = await spawnServer({ home, daemons: true });
    servers.push(second);

    // The next tick comes within about one interval of the restart.
    await expect
      .poll(() => fake!.requests.length, { timeout: 10_000, interval: 100 })
      .toBeGreaterThan(1);
    expect(Date.now() - restartedAt).toBeLessThan(10_000);
    await expect
      .poll(
        () =>
          (
            readDb(home!, (db) =>
              db
                .prepare(
                  "SELECT COUNT(*) AS n FROM tasks WHERE agent_name = 'ticker' AND status = 'completed'",
                )
                .get(),
            ) as { n: number }
          ).n,
        { timeout: 10_000, interval: 100 },
      )
      .toBeGreaterThan(0);

    // The dead tick's task and session are closed out.
    const after = readDb(home, (db) => ({
      task: db.prepare('SELECT id, status FROM tasks WHERE id = ?').get(deadTask.id) as Row,
      session: db
        .prepare('SELECT id, status FROM sessions WHERE id = ?')
        .get(deadTask.session_id) as Row,
    }));
    expect(after.task.status).toBe('interrupted');
    expect(after.session.status).toBe('closed');
  });

  it('on Postgres, a live peer closes out the dead tick once its heartbeat is stale, and ticks again', async () => {
    fake = await startFakeLlmServer();
    database = await createTestDatabase('cairn_w1_dead_tick');
    home = makeHome({ agents: { ticker: TICKER } }, fake.baseURL, database.url);
    fake.script({ content: 'never delivered', delayMs: SLOW_TICK_MS });
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    const query = async <R extends pg.QueryResultRow>(sql: string, params: unknown[] = []) =>
      (await client.query<R>(sql, params)).rows;
    try {
      const first = await spawnServer({ home, daemons: true });
      servers.push(first);
      await expect.poll(() => fake!.requests.length, { timeout: 15_000 }).toBe(1);
      const [deadTask] = await query<Row>(
        "SELECT id, status, session_id FROM tasks WHERE agent_name = 'ticker'",
      );
      expect(deadTask?.status).toBe('running');

      await first.stop('SIGKILL');
      fake.setDefault(() => ({ content: 'tick report' }));
      const second = await spawnServer({ home, daemons: true });
      servers.push(second);

      // The peer's heartbeat sweep finds the dead instance stale: its tick's
      // session is closed, its task interrupted, its lease freed.
      const sessionStatus = async () =>
        (
          await query<Row>('SELECT id, status FROM sessions WHERE id = $1', [deadTask!.session_id])
        )[0]?.status;
      await expect
        .poll(sessionStatus, { timeout: STALE_AFTER_MS + 4 * HEARTBEAT_MS + 5_000, interval: 250 })
        .toBe('closed');
      // The sweep closes the session and interrupts the task in two statements: poll the second too.
      const taskStatus = async () =>
        (await query<Row>('SELECT id, status FROM tasks WHERE id = $1', [deadTask!.id]))[0]?.status;
      await expect.poll(taskStatus, { timeout: 5_000, interval: 100 }).toBe('interrupted');
      // The daemon ticks again, on the live instance.
      await expect
        .poll(
          async () =>
            (
              await query<{ n: number }>(
                "SELECT COUNT(*)::int AS n FROM tasks WHERE agent_name = 'ticker' AND status = 'completed'",
              )
            )[0]?.n,
          { timeout: 10_000, interval: 250 },
        )
        .toBeGreaterThan(0);
      // Ticks of the live instance still close their own sessions: none stays open but a running one.
      const open = await query<{ n: number }>(
        "SELECT COUNT(*)::int AS n FROM sessions WHERE mode = 'daemon' AND status = 'active'",
      );
      expect(open[0]!.n).toBeLessThanOrEqual(1);
    } finally {
      await client.end();
    }
  }, 60_000);
});

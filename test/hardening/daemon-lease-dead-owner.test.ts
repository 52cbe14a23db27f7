/**
 * RELIABILITY 49 — a process dies (`kill -9`) in the middle of a daemon tick,
 * holding the agent's lease. With two real server processes: after the
 * restart the daemon ticks again within about one interval (not after the
 * lease's 15 minutes), and the dead tick's task and session are closed out.
 */
import { rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { DAEMON_LEASE_MS } from '../../src/runtime/daemon-scheduler.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
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

describe('a daemon tick killed with its process (49)', () => {
  let fake: FakeLlmServer | undefined;
  let home: string | undefined;
  const servers: ServerProcess[] = [];
  afterEach(async () => {
    for (const server of servers.splice(0)) await server.stop('SIGKILL');
    await fake?.close();
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
});

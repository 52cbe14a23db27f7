/**
 * The dedicated connection (the session lock's, the event feed's) against a
 * real Postgres: its statements go out one at a time in the order asked,
 * queued by the connection itself rather than in the driver (which warns it
 * will refuse a query while another waits), and a statement queued on a
 * connection that breaks fails with it instead of going out on the next.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DedicatedConnection } from '../../src/coordination/dedicated-connection.js';
import { createScratchDatabase, type ScratchDatabase } from './scratch-database.js';

let db: ScratchDatabase;
const opened: DedicatedConnection[] = [];
const warnings: string[] = [];
const noteWarning = (warning: Error) => warnings.push(warning.message);

beforeAll(async () => {
  db = await createScratchDatabase();
  process.on('warning', noteWarning);
});
afterEach(async () => {
  for (const connection of opened.splice(0)) await connection.close();
});
afterAll(async () => {
  process.off('warning', noteWarning);
  await db.drop();
});

function connection(): DedicatedConnection {
  const made = new DedicatedConnection(
    { connectionString: db.url, instanceId: 'queue-test', retryMs: { first: 20, max: 100 } },
    { purpose: 'queue' },
  );
  opened.push(made);
  return made;
}

describe('DedicatedConnection', () => {
  it('sends statements asked for at once one after another, in the order asked', async () => {
    const c = connection();
    const settled: number[] = [];
    const runs = Array.from({ length: 20 }, (_, i) =>
      c
        .query<{ n: number; backend: number }>(
          'SELECT $1::int AS n, pg_backend_pid() AS backend, pg_sleep(0.002)',
          [i],
        )
        .then(({ rows }) => {
          settled.push(rows[0]!.n);
          return rows[0]!.backend;
        }),
    );
    const backends = await Promise.all(runs);
    expect(settled).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(new Set(backends).size).toBe(1);
    expect(warnings.filter((w) => w.includes('already executing a query'))).toEqual([]);
  });

  it('fails a statement queued on a connection that breaks, and sends the next on a new one', async () => {
    const c = connection();
    const { rows } = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const first = rows[0]!.pid;
    // Both outcomes are watched before the connection is cut: either may fail
    // before the statement that cuts it has answered.
    const outcomes = Promise.allSettled([
      c.query('SELECT pg_sleep(5)'),
      c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'),
    ]);
    await db.pool.query('SELECT pg_terminate_backend($1)', [first]);
    const [running, queued] = await outcomes;
    expect(running.status).toBe('rejected');
    expect(queued.status).toBe('rejected');

    const again = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect(again.rows[0]!.pid).not.toBe(first);
  });

  it('never sends a statement whose caller gave up while it waited in the queue', async () => {
    const c = connection();
    await c.query('CREATE TABLE IF NOT EXISTS marks (n int)');
    const running = c.query('SELECT pg_sleep(0.2)');
    const gaveUp = new AbortController();
    const abandoned = c.query('INSERT INTO marks VALUES (1)', [], gaveUp.signal);
    // Given up while the statement before it still runs: it is queued by then.
    await new Promise((resolve) => setTimeout(resolve, 50));
    gaveUp.abort();
    await running;
    await expect(abandoned).rejects.toThrow('abandoned');
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM marks');
    expect(rows[0].n).toBe(0);
  });
});

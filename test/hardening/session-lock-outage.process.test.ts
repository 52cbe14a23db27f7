/**
 * The Postgres session lock when the database goes away, against a private
 * throwaway cluster (never the shared server). A lock attempt made while the
 * server is stopped fails after its timeout — and must never take the lock
 * later, when the connection comes back, behind Cairn's back: such a lock is
 * recorded nowhere, never released, and every turn on the session from
 * another instance would wait on it for good. And a turn waiting for a lock
 * another instance holds gives up with a 503 after a bounded time.
 */
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AdvisorySessionLock } from '../../src/coordination/advisory-session-lock.js';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.js';

describe('the session lock through a database outage', () => {
  let server: PrivatePostgres;
  const opened: AdvisorySessionLock[] = [];
  beforeAll(async () => {
    server = await startPrivatePostgres();
  }, 120_000);
  afterEach(async () => {
    for (const lock of opened.splice(0)) await lock.close();
  });
  afterAll(async () => server?.destroy());

  function instance(name: string, lockWaitMs = 30_000): AdvisorySessionLock {
    const lock = new AdvisorySessionLock({
      connectionString: server.url,
      instanceId: name,
      connectTimeoutMs: 1_000,
      lockWaitMs,
      retryMs: { first: 50, max: 200 },
    });
    opened.push(lock);
    return lock;
  }

  /** Advisory locks held now, by the application name of the connection holding each. */
  async function advisoryHolders(): Promise<string[]> {
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    try {
      const { rows } = await client.query<{ application_name: string }>(
        `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted`,
      );
      return rows.map((r) => r.application_name);
    } finally {
      await client.end();
    }
  }

  /** Whether `name`'s lock connection is connected now. */
  async function lockConnectionUp(name: string): Promise<boolean> {
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    try {
      const { rows } = await client.query(
        'SELECT 1 FROM pg_stat_activity WHERE application_name = $1',
        [`cairn ${name} locks`],
      );
      return rows.length > 0;
    } finally {
      await client.end();
    }
  }

  it('an attempt that timed out during the outage holds no lock afterwards; a peer then runs at once', async () => {
    const a = instance('a');
    const b = instance('b', 5_000);
    // Both connected before the outage.
    await a.run('sess_warm', async () => undefined);
    await b.run('sess_warm', async () => undefined);

    await server.stop();
    let ran = false;
    await expect(
      a.run('sess_outage', async () => {
        ran = true;
      }),
    ).rejects.toMatchObject({ code: 'DATABASE_UNAVAILABLE' });
    expect(ran).toBe(false);
    await server.start();

    // A's lock connection comes back; whatever it had queued has run by now.
    await expect.poll(() => lockConnectionUp('a'), { timeout: 15_000, interval: 100 }).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await advisoryHolders()).toEqual([]);

    // B takes the session at once instead of waiting on a lock nobody will release.
    let peerRan = false;
    await b.run('sess_outage', async () => {
      peerRan = true;
    });
    expect(peerRan).toBe(true);
  }, 60_000);

  it('a turn waiting for a lock another instance holds gives up with a 503 after the wait limit', async () => {
    const holder = instance('holder');
    const waiter = instance('waiter', 1_000);
    let release!: () => void;
    const holding = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const isHeld = new Promise<void>((resolve) => (started = resolve));
    const held = holder.run('sess_busy', async () => {
      started();
      await holding;
    });
    await isHeld;
    let ran = false;
    const waited = waiter.run('sess_busy', async () => {
      ran = true;
    });
    await expect(waited).rejects.toMatchObject({
      code: 'SERVICE_UNAVAILABLE',
      message: expect.stringContaining('Retry later') as unknown,
    });
    expect(ran).toBe(false);
    release();
    await held;
    // The session is usable again from the instance that gave up.
    await waiter.run('sess_busy', async () => {
      ran = true;
    });
    expect(ran).toBe(true);
  }, 30_000);
});

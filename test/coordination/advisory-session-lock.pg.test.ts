/**
 * The Postgres session lock against a real Postgres: instances that share a
 * database never run work on one session at once, keep arrival order within
 * an instance, free a dead holder's lock, and stop the work holding a lock
 * when their own lock connection breaks (without re-taking it).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import pg from 'pg';
import { StatementCounter } from '../helpers/statement-counter.js';
import { AdvisorySessionLock } from '../../src/coordination/advisory-session-lock.js';
import { createScratchDatabase, type ScratchDatabase } from './scratch-database.js';

let db: ScratchDatabase;
const opened: AdvisorySessionLock[] = [];

beforeAll(async () => {
  db = await createScratchDatabase();
});
afterEach(async () => {
  for (const lock of opened.splice(0)) await lock.close();
});
afterAll(async () => {
  await db.drop();
});

function instance(
  name: string,
  log?: (d: Record<string, unknown>, m: string) => void,
  keepMs?: number,
) {
  const lock = new AdvisorySessionLock({
    connectionString: db.url,
    instanceId: name,
    retryMs: { first: 20, max: 100 },
    ...(log ? { log } : {}),
    ...(keepMs !== undefined ? { keepMs } : {}),
  });
  opened.push(lock);
  return lock;
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Starts work on `sessionId` that holds the slot until `finish`; resolves once the work runs. */
async function occupy(
  lock: AdvisorySessionLock,
  sessionId: string,
): Promise<{ finish: () => Promise<void> }> {
  const entered = deferred();
  const finished = deferred();
  const done = lock.run(sessionId, async () => {
    entered.resolve();
    await finished.promise;
  });
  await entered.promise;
  return {
    finish: async () => {
      finished.resolve();
      await done;
    },
  };
}

/** Starts work on `sessionId` that only notes it ran. */
function attempt(
  lock: AdvisorySessionLock,
  sessionId: string,
): { ran: () => boolean; done: Promise<void> } {
  let ran = false;
  const done = lock.run(sessionId, async () => {
    ran = true;
  });
  return { ran: () => ran, done };
}

/** Work of `waiter` on the session waits while `held` runs, and runs once `held` finishes. */
async function expectRunsAfter(
  held: { finish: () => Promise<void> },
  waiter: AdvisorySessionLock,
  sessionId: string,
): Promise<void> {
  const waiting = attempt(waiter, sessionId);
  // Long enough for several failed attempts (they retry every 20-100 ms), each asking for the lock.
  await new Promise((r) => setTimeout(r, 150));
  expect(waiting.ran()).toBe(false);
  await held.finish();
  await waiting.done;
  expect(waiting.ran()).toBe(true);
}

/** Advisory locks of this database held now, by application name. */
async function advisoryHolders(): Promise<string[]> {
  const { rows } = await db.pool.query<{ application_name: string }>(
    `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()`,
  );
  return rows.map((r) => r.application_name);
}

describe('AdvisorySessionLock', () => {
  it('runs work on one session from three instances one at a time, all of it', async () => {
    const locks = [instance('a'), instance('b'), instance('c')];
    let active = 0;
    let maxActive = 0;
    const done: string[] = [];
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        locks[i % 3]!.run('sess_shared', async () => {
          active++;
          maxActive = Math.max(maxActive, active);
          await new Promise((r) => setTimeout(r, 5));
          active--;
          done.push(`w${i}`);
        }),
      ),
    );
    expect(maxActive).toBe(1);
    expect(done).toHaveLength(12);
    // The last to run keeps the lock for a moment; nobody else holds it.
    expect(await advisoryHolders()).toHaveLength(1);
  });

  it('keeps the lock after the work, so the next work here takes it without a statement, and gives it back after keepMs', async () => {
    const a = instance('a', undefined, 300);
    await a.run('sess_kept', async () => undefined);
    expect(await advisoryHolders()).toEqual(['cairn a locks']);
    const counter = StatementCounter.install();
    try {
      const { statements } = await counter.count(() => a.run('sess_kept', async () => 'again'));
      expect(statements.postgres).toBe(0);
    } finally {
      counter.uninstall();
    }
    await vi.waitFor(async () => expect(await advisoryHolders()).toEqual([]), { timeout: 5_000 });
    // Given back, so the next work takes it again.
    const counter2 = StatementCounter.install();
    try {
      const { statements } = await counter2.count(() => a.run('sess_kept', async () => 'cold'));
      expect(statements.postgres).toBe(1);
    } finally {
      counter2.uninstall();
    }
  });

  it('gives a kept lock at once to another instance that asks for it', async () => {
    // Kept far longer than the test may run: only the ask can free it.
    const a = instance('a', undefined, 600_000);
    const b = instance('b', undefined, 600_000);
    await a.run('sess_asked', async () => undefined);
    expect(await advisoryHolders()).toEqual(['cairn a locks']);
    let ranOnB = false;
    await b.run('sess_asked', async () => {
      ranOnB = true;
    });
    expect(ranOnB).toBe(true);
    expect(await advisoryHolders()).toEqual(['cairn b locks']);
  });

  it('gives back a lock asked for while its work runs when the work ends, instead of keeping it', async () => {
    const a = instance('a', undefined, 600_000);
    const b = instance('b', undefined, 600_000);
    await expectRunsAfter(await occupy(a, 'sess_busy'), b, 'sess_busy');
  });

  it('keeps arrival order within one instance', async () => {
    const lock = instance('a');
    const order: number[] = [];
    await Promise.all(
      [1, 2, 3, 4].map((n) =>
        lock.run('sess_order', async () => {
          await new Promise((r) => setTimeout(r, 4 - n));
          order.push(n);
        }),
      ),
    );
    expect(order).toEqual([1, 2, 3, 4]);
  });

  it('runs different sessions at the same time across instances', async () => {
    const a = instance('a');
    const b = instance('b');
    const bothIn = deferred();
    let inside = 0;
    const enter = async () => {
      if (++inside === 2) bothIn.resolve();
      await bothIn.promise;
    };
    await Promise.all([a.run('sess_one', enter), b.run('sess_two', enter)]);
    expect(inside).toBe(2);
  });

  it('frees the lock of a holder whose connection dies, and the waiter gets it', async () => {
    const lock = instance('a');
    const dead = new pg.Client({ connectionString: db.url, application_name: 'doomed' });
    await dead.connect();
    dead.on('error', () => undefined);
    await dead.query(`SELECT pg_advisory_lock(hashtextextended($1, 12))`, ['sess_dead']);
    let ran = false;
    const waiting = lock.run('sess_dead', async () => {
      ran = true;
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(ran).toBe(false);
    expect(lock.isBusy('sess_dead')).toBe(true);
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'doomed'`,
    );
    await waiting;
    expect(ran).toBe(true);
  });

  it('aborts the work holding a lock when its lock connection breaks, and does not re-take the lock', async () => {
    const notes: string[] = [];
    const a = instance('a', (_d, m) => notes.push(m));
    const b = instance('b');
    const inside = deferred();
    let seen: AbortSignal | undefined;
    const running = a.run('sess_keep', async (signal) => {
      seen = signal;
      inside.resolve();
      // Work that stops when told to, as a turn does at its next boundary.
      await new Promise((_, reject) =>
        signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }),
      );
    });
    await inside.promise;
    expect(seen!.aborted).toBe(false);
    expect(await advisoryHolders()).toEqual(['cairn a locks']);
    // Watched before the cut: the work may fail before the statement that cuts it has answered.
    const stopped = expect(running).rejects.toMatchObject({ code: 'SESSION_LOCK_LOST' });
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'cairn a locks'`,
    );
    await stopped;
    expect(notes).toContain(
      'session lock connection lost; work holding a session lock was stopped',
    );
    // Another instance takes the session at once; A never takes it back for the stopped work.
    const onB = await occupy(b, 'sess_keep');
    expect(await advisoryHolders()).toEqual(['cairn b locks']);
    await onB.finish();
    // A's next work on the session runs normally, on its new connection.
    let ranAgain = false;
    await a.run('sess_keep', async (signal) => {
      ranAgain = !signal.aborted;
    });
    expect(ranAgain).toBe(true);
    expect(await advisoryHolders()).toEqual(['cairn a locks']);
  });

  it('forgets the locks it keeps when its lock connection breaks, and takes the lock again for the next work', async () => {
    const a = instance('a', undefined, 600_000);
    const b = instance('b', undefined, 600_000);
    await a.run('sess_forgot', async () => undefined);
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'cairn a locks'`,
    );
    // The lock went with the connection: B takes it without asking anyone.
    const onB = await occupy(b, 'sess_forgot');
    // A does not believe it still holds the lock: its work waits for B's.
    await expectRunsAfter(onB, a, 'sess_forgot');
  });

  it('hands the work one tenure per unbroken hold: the same while kept, a new one once given back, asked for or lost', async () => {
    const a = instance('a', undefined, 600_000);
    const b = instance('b', undefined, 600_000);
    const tenureOn = (lock: AdvisorySessionLock, sessionId: string) =>
      lock.run(sessionId, async (_signal, tenure) => tenure);

    const first = await tenureOn(a, 'sess_tenure');
    expect(first).toEqual({ sessionId: 'sess_tenure' });
    // Kept between the works: one hold.
    expect(await tenureOn(a, 'sess_tenure')).toBe(first);
    // Another session is another hold.
    expect(await tenureOn(a, 'sess_other')).not.toBe(first);

    // B asked for it: A gave it back, and its next hold is a new one.
    const onB = await tenureOn(b, 'sess_tenure');
    expect(onB).not.toBe(first);
    const again = await tenureOn(a, 'sess_tenure');
    expect(again).not.toBe(first);
    expect(await tenureOn(a, 'sess_tenure')).toBe(again);

    // The lock connection broke: what A kept went with it.
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'cairn a locks'`,
    );
    await vi.waitFor(async () => expect(await advisoryHolders()).toEqual([]), { timeout: 5_000 });
    await vi.waitFor(async () => expect(await tenureOn(a, 'sess_tenure')).not.toBe(again), {
      timeout: 5_000,
    });
  });

  it('starts a new tenure after keepMs gave the lock back', async () => {
    const a = instance('a', undefined, 100);
    const first = await a.run('sess_expired', async (_signal, tenure) => tenure);
    await vi.waitFor(async () => expect(await advisoryHolders()).toEqual([]), { timeout: 5_000 });
    expect(await a.run('sess_expired', async (_signal, tenure) => tenure)).not.toBe(first);
  });

  it('fails the work with DATABASE_UNAVAILABLE when the database cannot be reached, without running it', async () => {
    const lock = new AdvisorySessionLock({
      connectionString: 'postgres://postgres@127.0.0.1:1/nowhere',
      instanceId: 'cut-off',
      connectTimeoutMs: 300,
      retryMs: { first: 20, max: 50 },
    });
    opened.push(lock);
    let ran = false;
    await expect(
      lock.run('sess_x', async () => {
        ran = true;
      }),
    ).rejects.toMatchObject({ code: 'DATABASE_UNAVAILABLE' });
    expect(ran).toBe(false);
    expect(lock.isBusy('sess_x')).toBe(false);
  });
});

/**
 * The shared event feed against a real Postgres (PgStore's schema, with
 * migration 006's notify trigger): events committed by any connection reach the feed in id
 * order, a late commit of a lower id is waited for (never skipped), and a
 * hole left by a rolled-back insert is stepped over after the grace period.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { SharedEventFeed } from '../../src/coordination/shared-event-feed.js';
import { PgStore } from '../../src/store/postgres/pg-store.js';
import type { EventRow } from '../../src/store/store.js';
import { createScratchDatabase, type ScratchDatabase } from './scratch-database.js';

let db: ScratchDatabase;
const feeds: SharedEventFeed[] = [];

let store: PgStore;
/** This run's own instance name: cutting its connection never touches another run's. */
const INSTANCE = `test-${randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  db = await createScratchDatabase();
  // The real schema (migrations 001-006, with the notify trigger) and the real reader.
  store = await PgStore.open(db.url, { poolSize: 2 });
});
afterEach(async () => {
  for (const feed of feeds.splice(0)) await feed.close();
  await db.pool.query('TRUNCATE events RESTART IDENTITY');
});
afterAll(async () => {
  await store.close();
  await db.drop();
});

async function startFeed(
  gapGraceMs = 10_000,
): Promise<{ seen: EventRow[]; feed: SharedEventFeed }> {
  const seen: EventRow[] = [];
  const feed = new SharedEventFeed({
    connectionString: db.url,
    instanceId: INSTANCE,
    store,
    deliver: (events) => seen.push(...events),
    gapGraceMs,
    // The poll is a fallback; the notifications must do the work here.
    pollMs: 60_000,
  });
  feeds.push(feed);
  await feed.start();
  return { seen, feed };
}

async function insert(client: pg.Pool | pg.PoolClient, type: string): Promise<number> {
  const { rows } = await client.query<{ id: string }>(
    `INSERT INTO events (type, data, created_at) VALUES ($1, '{}', $2) RETURNING id`,
    [type, new Date().toISOString()],
  );
  return Number(rows[0]!.id);
}

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(check(), what).toBe(true);
}

describe('SharedEventFeed', () => {
  it('delivers events committed on other connections, woken by the notify trigger', async () => {
    const { seen, feed } = await startFeed();
    await insert(db.pool, 'a');
    await insert(db.pool, 'b');
    await until(() => seen.length === 2, 'both events delivered');
    expect(seen.map((e) => [e.id, e.type])).toEqual([
      [1, 'a'],
      [2, 'b'],
    ]);
    expect(feed.watermark).toBe(2);
  });

  it('waits for a lower id that commits late instead of skipping it', async () => {
    const { seen, feed } = await startFeed();
    const slow = await db.pool.connect();
    try {
      await slow.query('BEGIN');
      const lowId = await insert(slow, 'late');
      const highId = await insert(db.pool, 'early');
      expect(highId).toBeGreaterThan(lowId);
      // The high id is committed and notified, but 'late' is still open.
      await new Promise((r) => setTimeout(r, 200));
      expect(seen).toEqual([]);
      expect(feed.watermark).toBe(0);
      await slow.query('COMMIT');
    } finally {
      slow.release();
    }
    await until(() => seen.length === 2, 'both events delivered');
    expect(seen.map((e) => e.type)).toEqual(['late', 'early']);
  });

  it('steps over a hole a rolled-back insert left, after the grace period', async () => {
    const { seen } = await startFeed(150);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await insert(client, 'never');
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    await insert(db.pool, 'after');
    await until(() => seen.length === 1, 'the event after the hole delivered');
    expect(seen.map((e) => [e.id, e.type])).toEqual([[2, 'after']]);
  });

  it('catches up after its connection is cut, from where it was', async () => {
    const { seen } = await startFeed();
    await insert(db.pool, 'one');
    await until(() => seen.length === 1, 'first event delivered');
    await db.pool.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
      [`cairn ${INSTANCE} events`],
    );
    await insert(db.pool, 'two');
    await insert(db.pool, 'three');
    await until(() => seen.length === 3, 'events after the cut delivered');
    expect(seen.map((e) => e.type)).toEqual(['one', 'two', 'three']);
  });
});

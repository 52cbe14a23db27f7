/**
 * The shared event feed against a real Postgres (PgStore's schema, with
 * migration 006's notify trigger): events committed by any connection reach the feed in id
 * order, a late commit of a lower id is waited for (never skipped), and a
 * hole left by a rolled-back insert is stepped over after the grace period.
 * With nobody listening it reads on its poll only, and a subscriber joining
 * the event bus then gets what commits after it joined, once each.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { SharedEventFeed } from '../../src/coordination/shared-event-feed.js';
import { EventBus } from '../../src/runtime/event-bus.js';
import { insertEvents } from '../../src/store/postgres/pg-append.js';
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
  options: {
    listening?: () => boolean;
    deliver?: (events: readonly EventRow[]) => void;
  } = {},
): Promise<{ seen: EventRow[]; feed: SharedEventFeed }> {
  const seen: EventRow[] = [];
  const feed = new SharedEventFeed({
    connectionString: db.url,
    instanceId: INSTANCE,
    store,
    deliver: options.deliver ?? ((events) => seen.push(...events)),
    ...(options.listening ? { listening: options.listening } : {}),
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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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

  it('never skips a committed event whose transaction commits long after the grace period, live or on resume', async () => {
    // The store's own inserts: ids are handed out under the events lock, held to the commit.
    const { seen, feed } = await startFeed(150);
    const frozen = await db.pool.connect();
    let early: Promise<EventRow> | undefined;
    try {
      await frozen.query('BEGIN');
      const [late] = await insertEvents(
        frozen,
        [{ type: 'late', data: {} }],
        new Date().toISOString(),
      );
      // Another writer's event waits for the lock instead of taking a higher id and committing first.
      early = store.appendEvent({ type: 'early', data: {} });
      // Twenty grace periods: a feed that stepped over a missing id would have done so by now.
      await sleep(3_000);
      expect(seen).toEqual([]);
      await frozen.query('COMMIT');
      const written = await early;
      expect(written.id).toBeGreaterThan(late!.id);
    } finally {
      frozen.release();
      await early?.catch(() => undefined);
    }
    await until(() => seen.length === 2, 'both events delivered live');
    expect(seen.map((e) => e.type)).toEqual(['late', 'early']);
    expect(feed.watermark).toBe(seen[1]!.id);
    // A client resuming with Last-Event-ID 0 reads both from the store, in order.
    const replay = await store.listEvents({ afterId: 0, limit: 10 });
    expect(replay.map((e) => e.type)).toEqual(['late', 'early']);
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

  it('reads nothing on a notification while nobody listens, and everything on catchUp', async () => {
    const { seen, feed } = await startFeed(10_000, { listening: () => false });
    await insert(db.pool, 'a');
    await insert(db.pool, 'b');
    // Long enough for the notifications to have been read, had they been.
    await sleep(200);
    expect(seen).toEqual([]);
    expect(feed.watermark).toBe(0);
    await feed.catchUp();
    expect(seen.map((e) => e.type)).toEqual(['a', 'b']);
    expect(feed.watermark).toBe(2);
  });

  it('lets a subscriber of the bus join after a catch-up: what commits after, once each, nothing before', async () => {
    const bus = new EventBus(store);
    const { feed } = await startFeed(10_000, {
      listening: () => bus.following,
      deliver: (events) => bus.deliverShared(events),
    });
    bus.useSharedFeed(feed);
    await insert(db.pool, 'before-1');
    await insert(db.pool, 'before-2');
    await sleep(100);
    expect(feed.watermark).toBe(0);

    const got: string[] = [];
    const early = bus.subscribe((e) => got.push(`early:${e.type}`));
    const late = bus.subscribe((e) => got.push(`late:${e.type}`));
    expect(bus.subscriberCount).toBe(0);
    await Promise.all([early.live, late.live]);
    expect(bus.subscriberCount).toBe(2);
    expect(feed.watermark).toBe(2);
    expect(got).toEqual([]);

    // Listening now: a notification is read at once (the poll is a minute away).
    await insert(db.pool, 'after');
    await until(() => got.length === 2, 'the event after joining delivered to both');
    expect(got).toEqual(['early:after', 'late:after']);

    // A third subscriber joins the live feed at once.
    const third = bus.subscribe((e) => got.push(`third:${e.type}`));
    expect(bus.subscriberCount).toBe(3);
    await third.live;

    for (const subscription of [early, late, third]) subscription.close();
    expect(bus.following).toBe(false);
    await insert(db.pool, 'unheard');
    await sleep(200);
    expect(feed.watermark).toBe(3);
    expect(got).toEqual(['early:after', 'late:after']);
  });
});

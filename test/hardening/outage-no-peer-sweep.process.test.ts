/**
 * A database-wide outage longer than the stale limit, against a private
 * throwaway cluster that the test stops and starts: during it no instance
 * can heartbeat, so when the database is back every peer's heartbeat looks
 * stale. Live peers must not interrupt each other's tasks for that. Two
 * instances' heartbeats on real stores, with the sweeper beating faster than
 * its peer (so it is first to beat once the database is back, as some
 * instance always is): each sweeps only after a stale limit of its own
 * unbroken beats, by which time every live peer has beaten again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InstanceHeartbeat } from '../../src/coordination/instance-heartbeat.js';
import { PgStore } from '../../src/store/postgres/pg-store.js';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.js';

const STALE_MS = 3_000;
/** Longer than the stale limit. */
const OUTAGE_MS = 4_500;

describe('a database outage longer than the stale limit', () => {
  let server: PrivatePostgres;
  const stores: PgStore[] = [];
  const heartbeats: InstanceHeartbeat[] = [];
  const sweeperLog: string[] = [];

  beforeAll(async () => {
    server = await startPrivatePostgres();
  }, 120_000);
  afterAll(async () => {
    for (const heartbeat of heartbeats) await heartbeat.stop();
    for (const store of stores) await store.close();
    await server?.destroy();
  });

  it("leaves a live peer's running task alone when the database is back", async () => {
    const peer = await PgStore.open(server.url, { instanceId: 'inst_peer', poolSize: 2 });
    const sweeper = await PgStore.open(server.url, { instanceId: 'inst_sweeper', poolSize: 2 });
    stores.push(peer, sweeper);
    heartbeats.push(
      new InstanceHeartbeat({
        store: peer,
        instanceId: 'inst_peer',
        heartbeatMs: 1_000,
        staleAfterMs: STALE_MS,
        log: () => undefined,
      }),
      new InstanceHeartbeat({
        store: sweeper,
        instanceId: 'inst_sweeper',
        heartbeatMs: 100,
        staleAfterMs: STALE_MS,
        log: (_details, message) => sweeperLog.push(message),
      }),
    );
    for (const heartbeat of heartbeats) await heartbeat.start();
    const session = await peer.createSession({
      agentName: 'assistant',
      mode: 'task',
      compactCount: 40,
      systemPrompt: 'You help.',
    });
    const task = await peer.createTask({
      sessionId: session.id,
      agentName: 'assistant',
      input: 'x',
    });
    // Both have beaten for longer than the stale limit: the sweeper sweeps.
    await new Promise((resolve) => setTimeout(resolve, STALE_MS + 500));
    expect((await sweeper.findTask(task.id))?.status).toBe('running');

    await server.stop();
    await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS));
    await server.start();
    // The sweeper beats again within 100 ms, its peer within a second.
    await new Promise((resolve) => setTimeout(resolve, STALE_MS + 1_500));

    expect(sweeperLog).toContain('instance heartbeat restored');
    expect(sweeperLog.filter((m) => /marked interrupted/.test(m))).toEqual([]);
    expect(await sweeper.findTask(task.id)).toMatchObject({
      status: 'running',
      owner_instance: 'inst_peer',
    });
  }, 60_000);

  it('still interrupts the tasks of a peer that stopped beating while the sweeper kept beating', async () => {
    const gone = await PgStore.open(server.url, { instanceId: 'inst_gone', poolSize: 2 });
    stores.push(gone);
    await gone.heartbeatInstance('inst_gone');
    const session = await gone.createSession({
      agentName: 'assistant',
      mode: 'task',
      compactCount: 40,
      systemPrompt: 'You help.',
    });
    const task = await gone.createTask({
      sessionId: session.id,
      agentName: 'assistant',
      input: 'x',
    });
    const sweeper = stores[1]!;
    await expect
      .poll(async () => (await sweeper.findTask(task.id))?.status, { timeout: 10_000 })
      .toBe('interrupted');
  }, 30_000);
});

/**
 * A chat turn on Postgres sends few statements: every one is a round trip,
 * and on a growing conversation the round trips are most of the turn's
 * cost. The count is exact, never a timing: the pool's and the lock
 * connection's statements issued by the turn, BEGIN and COMMIT included
 * (test/helpers/statement-counter.ts). The same turn on SQLite is counted
 * alongside, so a change that moves work between the dialects shows.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type DatabaseKind, type TestApp } from '../helpers/test-app.js';
import { StatementCounter } from '../helpers/statement-counter.js';

/** The most statements one chat turn may send to Postgres. */
const MAX_POSTGRES_STATEMENTS_PER_TURN = 8;

const AGENT = { name: 'assistant', system: 'You are a test assistant.', tools: [] };

let counter: StatementCounter;
const apps = new Map<DatabaseKind, TestApp>();

beforeAll(async () => {
  for (const database of ['sqlite', 'postgres'] as const)
    apps.set(database, await startTestApp({ database, agents: { assistant: AGENT } }));
  counter = StatementCounter.install();
});
afterAll(async () => {
  counter?.uninstall();
  for (const app of apps.values()) await app.close();
});

/**
 * The statements of each of `turns` chat turns on one session, after two turns not counted;
 * the session the admin's, or owned by a key with `limits`.
 */
async function statementsPerTurn(
  database: DatabaseKind,
  turns: number,
  limits?: Record<string, number>,
) {
  const { app } = apps.get(database)!;
  const key =
    limits &&
    (await app.store.createKey({
      name: 'tenant',
      agents: '*',
      limits,
      secretHash: Math.random().toString(16).slice(2).padEnd(64, '0'),
    }));
  const session = await app.sessions.create({
    agentName: AGENT.name,
    ...(key ? { owner: { key: key.id, user: null } } : {}),
  });
  const chat = (message: string) =>
    app.chats.run({ agentName: AGENT.name, message, sessionId: session.id });
  await chat('first');
  await chat('second');
  const counts = [];
  for (let i = 0; i < turns; i++) {
    const { result, statements } = await counter.count(() => chat(`question ${i}`));
    expect(result.reply).toContain(`question ${i}`);
    counts.push(statements);
  }
  return { counts, app };
}

describe('statements of one chat turn', () => {
  it(`on Postgres: at most ${MAX_POSTGRES_STATEMENTS_PER_TURN}, every turn stored`, async () => {
    const { counts, app } = await statementsPerTurn('postgres', 5);
    for (const count of counts) {
      expect(count.sqlite).toBe(0);
      expect(count.postgres).toBeGreaterThan(0);
      expect(count.postgres).toBeLessThanOrEqual(MAX_POSTGRES_STATEMENTS_PER_TURN);
    }
    // Fewer statements, nothing less stored: each turn's two messages and their events.
    const [session] = (await app.store.listSessions({ limit: 1 })).items;
    expect(session!.message_count).toBe(1 + 2 * 7);
    const events = await app.store.listEvents({ afterId: 0, sessionId: session!.id, limit: 100 });
    expect(events.filter((e) => e.type === 'message.created')).toHaveLength(2 * 7);
    expect(events.map((e) => e.id)).toEqual([...events.map((e) => e.id)].sort((a, b) => a - b));
  });

  // A key's session adds its token reservation: nothing for a key with no
  // tokensPerDay but the one call that finds no limit, the reserve and its
  // release for a limited key.
  it('on Postgres, a key with no tokensPerDay: one statement more', async () => {
    const admin = (await statementsPerTurn('postgres', 3)).counts.map((c) => c.postgres);
    const free = (await statementsPerTurn('postgres', 3, {})).counts.map((c) => c.postgres);
    expect(free).toEqual(admin.map((n) => n + 1));
  });

  it('on Postgres, a key with a tokensPerDay: two statements more', async () => {
    const admin = (await statementsPerTurn('postgres', 3)).counts.map((c) => c.postgres);
    const limited = (await statementsPerTurn('postgres', 3, { tokensPerDay: 1_000_000 })).counts;
    expect(limited.map((c) => c.postgres)).toEqual(admin.map((n) => n + 2));
    for (const count of limited)
      expect(count.postgres).toBeLessThanOrEqual(MAX_POSTGRES_STATEMENTS_PER_TURN);
  });

  it('on SQLite: counted the same way', async () => {
    const { counts } = await statementsPerTurn('sqlite', 2);
    for (const count of counts) {
      expect(count.postgres).toBe(0);
      expect(count.sqlite).toBeGreaterThan(0);
    }
  });
});

/**
 * PgStore: the shared Store contract on a real Postgres database (a fresh one
 * per test), plus what only Postgres has — migrations under an advisory lock,
 * the refusal of a database from a newer Cairn, concurrent writers on one
 * session, pool exhaustion and a lost server as 503s.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CairnError } from '../../src/errors.js';
import { POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS } from '../../src/store/migrations/index.js';
import {
  inTransaction,
  migratePostgres,
  PG_MAX_ATTEMPTS,
} from '../../src/store/postgres/open-pool.js';
import { PgStore } from '../../src/store/postgres/pg-store.js';
import { createTestDatabase, createTestSchema, type TestDatabase } from '../helpers/postgres.js';
import { describeStoreContract } from './store-contract.js';

// One database for the file, a fresh schema for each test.
let contractDb: TestDatabase | undefined;
afterAll(async () => contractDb?.drop());

describeStoreContract('PgStore', async () => {
  contractDb ??= await createTestDatabase();
  const schema = await createTestSchema(contractDb);
  const store = await PgStore.open(schema.url, { poolSize: 4 });
  const instances: PgStore[] = [];
  return {
    store,
    async openInstance(instanceId) {
      const peer = await PgStore.open(schema.url, { poolSize: 2, instanceId });
      instances.push(peer);
      return peer;
    },
    async cleanup() {
      for (const peer of instances) await peer.close();
      await store.close();
      await schema.drop();
    },
  };
});

describe('PgStore on Postgres', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => db.drop());

  async function adminQuery<R extends pg.QueryResultRow>(sql: string): Promise<R[]> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      return (await client.query<R>(sql)).rows;
    } finally {
      await client.end();
    }
  }

  it('applies every migration exactly once when several instances start at once', async () => {
    const stores = await Promise.all(Array.from({ length: 4 }, () => PgStore.open(db.url)));
    try {
      const rows = await adminQuery<{ version: number }>(
        'SELECT version FROM schema_migrations ORDER BY version',
      );
      expect(rows.map((r) => r.version)).toEqual(POSTGRES_MIGRATIONS.map((m) => m.version));
      // A later start finds nothing to do.
      const pool = new pg.Pool({ connectionString: db.url });
      try {
        expect(await migratePostgres(pool)).toEqual({ ran: [], addedColumns: [] });
      } finally {
        await pool.end();
      }
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it('uses the same migration numbers as SQLite', () => {
    expect(POSTGRES_MIGRATIONS.map((m) => [m.version, m.name])).toEqual(
      SQLITE_MIGRATIONS.map((m) => [m.version, m.name]),
    );
  });

  it('re-adds columns of applied migrations that were dropped, with their type, default and generation', async () => {
    await (await PgStore.open(db.url)).close();
    const describeColumns = `SELECT table_name, column_name, data_type, is_nullable, column_default,
        is_generated, generation_expression
      FROM information_schema.columns
      WHERE table_schema = current_schema() AND table_name IN ('tasks', 'sessions', 'messages')
      ORDER BY table_name, column_name`;
    const before = await adminQuery(describeColumns);
    await adminQuery(`ALTER TABLE tasks DROP COLUMN pending_tool;
      ALTER TABLE sessions DROP COLUMN compact_count;
      ALTER TABLE messages DROP COLUMN search`);
    const pool = new pg.Pool({ connectionString: db.url });
    try {
      const { ran, addedColumns } = await migratePostgres(pool);
      expect(ran).toEqual([]);
      expect([...addedColumns].sort()).toEqual([
        'messages.search',
        'sessions.compact_count',
        'tasks.pending_tool',
      ]);
      expect(await adminQuery(describeColumns)).toEqual(before);
      // Nothing is left of the scratch schema the columns were derived in.
      expect(
        await adminQuery("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'cairn_scratch%'"),
      ).toEqual([]);
      expect(await migratePostgres(pool)).toEqual({ ran: [], addedColumns: [] });
    } finally {
      await pool.end();
    }
  });

  it("re-adds a new migration's column from the migration alone, with no list to edit", async () => {
    const schema = await createTestSchema(db);
    const withExtra = [
      ...POSTGRES_MIGRATIONS,
      {
        version: 999,
        name: 'extra-column',
        up: "ALTER TABLE tasks ADD COLUMN extra_note TEXT NOT NULL DEFAULT 'none';",
      },
    ];
    const pool = new pg.Pool({ connectionString: schema.url });
    try {
      expect((await migratePostgres(pool, withExtra)).ran).toContain(999);
      await pool.query('ALTER TABLE tasks DROP COLUMN extra_note');
      expect(await migratePostgres(pool, withExtra)).toEqual({
        ran: [],
        addedColumns: ['tasks.extra_note'],
      });
      const rows = await pool.query<{ column_default: string; is_nullable: string }>(
        `SELECT column_default, is_nullable FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = 'tasks' AND column_name = 'extra_note'`,
      );
      expect(rows.rows).toEqual([{ column_default: "'none'::text", is_nullable: 'NO' }]);
    } finally {
      await pool.end();
      await schema.drop();
    }
  });

  it('refuses a database that a newer Cairn migrated, saying to upgrade', async () => {
    await (await PgStore.open(db.url)).close();
    await adminQuery(
      "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'from-the-future', 'x')",
    );
    try {
      const err = await PgStore.open(db.url).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CairnError);
      expect((err as CairnError).code).toBe('DATABASE_TOO_NEW');
      expect((err as CairnError).message).toMatch(/999 \(from-the-future\).*Upgrade Cairn/);
    } finally {
      await adminQuery('DELETE FROM schema_migrations WHERE version = 999');
    }
  });

  it('serialises concurrent appends to one session from two pools: every seq once, in order', async () => {
    const [a, b] = await Promise.all([PgStore.open(db.url), PgStore.open(db.url)]);
    try {
      const session = await a.createSession({
        agentName: 'assistant',
        mode: 'chat',
        compactCount: 50,
        systemPrompt: 'sys',
      });
      await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          (i % 2 === 0 ? a : b).appendMessagesWithEvents(
            session.id,
            [
              { role: 'user', content: `q${i}` },
              { role: 'assistant', content: `a${i}` },
            ],
            'message.created',
          ),
        ),
      );
      const messages = await a.listMessages(session.id, { afterSeq: 0, limit: 100 });
      expect(messages.map((m) => m.seq)).toEqual(Array.from({ length: 41 }, (_, i) => i + 1));
      // Each batch stays contiguous: no interleaving inside one append.
      for (let i = 1; i < 41; i += 2) {
        expect(messages[i + 1]!.content?.slice(1)).toBe(messages[i]!.content?.slice(1));
      }
      expect((await b.findSession(session.id))?.message_count).toBe(41);
      const events = await b.listEvents({ afterId: 0, sessionId: session.id, limit: 100 });
      expect(events.map((e) => e.data.seq)).toEqual(Array.from({ length: 40 }, (_, i) => i + 2));
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('an append whose remembered head moved (a peer appended, or reset) chains on the real head', async () => {
    const [a, b, alone] = await Promise.all([
      PgStore.open(db.url),
      PgStore.open(db.url),
      PgStore.open(db.url),
    ]);
    const create = (store: PgStore) =>
      store.createSession({
        agentName: 'assistant',
        mode: 'chat',
        compactCount: 50,
        systemPrompt: 'sys',
      });
    const user = (content: string) => [{ role: 'user' as const, content }];
    const said = (content: string) => [{ role: 'assistant' as const, content }];
    try {
      // Behind a's back, b appends, then resets: a's next append must not reuse what it remembered.
      const appended = await create(a);
      await a.appendMessages(appended.id, user('one'));
      await b.appendMessages(appended.id, said('two'));
      const three = await a.appendMessagesWithEvents(appended.id, user('three'), 'message.created');
      expect(three.messages.map((m) => m.seq)).toEqual([4]);
      expect(three.events.map((e) => e.data.seq)).toEqual([4]);
      const reset = await create(a);
      await a.appendMessages(reset.id, user('one'));
      await b.resetSession(reset.id);
      await a.appendMessages(reset.id, user('after'));

      // The same histories written by one store that saw every step.
      const expected = [await create(alone), await create(alone)];
      for (const m of [user('one'), said('two'), user('three')])
        await alone.appendMessages(expected[0]!.id, m);
      await alone.appendMessages(expected[1]!.id, user('after'));

      const seqs = async (id: string) =>
        (await b.listMessages(id, { afterSeq: 0, limit: 10 })).map((m) => m.seq);
      expect(await seqs(appended.id)).toEqual([1, 2, 3, 4]);
      expect(await seqs(reset.id)).toEqual([1, 3]);
      for (const [i, id] of [appended.id, reset.id].entries()) {
        const row = await b.findSession(id);
        expect(row?.transcript_hash).toBe((await b.findSession(expected[i]!.id))?.transcript_hash);
        expect(row?.message_count).toBe(i === 0 ? 4 : 2);
      }
    } finally {
      await Promise.all([a.close(), b.close(), alone.close()]);
    }
  });

  it('event ids become visible in order: a reader paging by afterId during concurrent writes misses none', async () => {
    const writers = await Promise.all([PgStore.open(db.url), PgStore.open(db.url)]);
    const reader = await PgStore.open(db.url);
    try {
      const start = (await reader.listEvents({ afterId: 0, limit: 1_000_000 })).at(-1)?.id ?? 0;
      let writing = true;
      const seen: number[] = [];
      const read = (async () => {
        let after = start;
        for (;;) {
          const done = !writing;
          const page = await reader.listEvents({ afterId: after, limit: 1_000 });
          for (const event of page) seen.push(event.id);
          after = page.at(-1)?.id ?? after;
          if (done && page.length === 0) return;
        }
      })();
      await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          writers[i % 2]!.appendEvent({ type: 'probe', data: { i } }),
        ),
      );
      writing = false;
      await read;
      const all = (await reader.listEvents({ afterId: start, limit: 1_000 })).map((e) => e.id);
      expect(all).toHaveLength(200);
      expect(seen).toEqual(all);
    } finally {
      await Promise.all([...writers, reader].map((s) => s.close()));
    }
  });

  it('an exhausted pool answers 503 SERVICE_UNAVAILABLE instead of hanging', async () => {
    const store = await PgStore.open(db.url, { poolSize: 1, connectTimeoutMs: 200 });
    const hog = await store.pool.connect();
    try {
      const err = await store.findSession('sess_x').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CairnError);
      expect((err as CairnError).code).toBe('SERVICE_UNAVAILABLE');
      expect((err as CairnError).status).toBe(503);
      expect((err as CairnError).message).toMatch(/database\.poolSize is 1/);
    } finally {
      hog.release();
    }
    // Free again: the next call goes through.
    expect(await store.findSession('sess_x')).toBeUndefined();
    await store.close();
  });

  it('retries a unit of work that Postgres aborts as a serialization failure or deadlock', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      await pool.query('CREATE TABLE IF NOT EXISTS retry_probe (n INTEGER)');
      let attempts = 0;
      const abortAs = (code: string) =>
        `DO $$ BEGIN RAISE EXCEPTION 'aborted' USING ERRCODE = '${code}'; END $$`;
      await inTransaction(pool, 2, async (c) => {
        attempts += 1;
        await c.query('INSERT INTO retry_probe (n) VALUES ($1)', [attempts]);
        if (attempts === 1) await c.query(abortAs('40001'));
        if (attempts === 2) await c.query(abortAs('40P01'));
      });
      expect(attempts).toBe(3);
      // The aborted attempts left nothing behind: only the third one committed.
      expect((await pool.query('SELECT n FROM retry_probe')).rows).toEqual([{ n: 3 }]);

      // Aborted every time: a retryable 503 after PG_MAX_ATTEMPTS, not an endless loop.
      let tries = 0;
      const err = await inTransaction(pool, 2, async (c) => {
        tries += 1;
        await c.query(abortAs('40001'));
      }).catch((e: unknown) => e);
      expect(tries).toBe(PG_MAX_ATTEMPTS);
      expect(err).toBeInstanceOf(CairnError);
      expect((err as CairnError).code).toBe('SERVICE_UNAVAILABLE');

      // Any other error is not retried and passes through unchanged.
      let once = 0;
      const syntax = await inTransaction(pool, 2, async (c) => {
        once += 1;
        await c.query('SELEKT 1');
      }).catch((e: unknown) => e);
      expect(once).toBe(1);
      expect((syntax as { code?: string }).code).toBe('42601');
    } finally {
      await pool.end();
    }
  });

  it('stores text with a NUL character (which Postgres text cannot hold) as U+FFFD instead of failing', async () => {
    const store = await PgStore.open(db.url);
    try {
      const session = await store.createSession({
        agentName: 'assistant',
        mode: 'chat',
        compactCount: 50,
        systemPrompt: 'sys',
      });
      const [stored] = await store.appendMessages(session.id, [
        { role: 'tool', content: 'bytes\u0000here', tool_call_id: 'call_1' },
      ]);
      expect(stored!.content).toBe('bytes\uFFFDhere');
      const [read] = await store.listMessages(session.id, { afterSeq: 1, limit: 1 });
      expect(read!.content).toBe('bytes\uFFFDhere');
      expect((await store.searchHistory(session.id, 'bytes', 5)).map((h) => h.seq)).toEqual([2]);
      expect((await store.putMemory('assistant', 'k\u0000', 'v\u0000')).content).toBe('v\uFFFD');
      const task = await store.createTask({
        sessionId: session.id,
        agentName: 'assistant',
        input: 'in\u0000put',
      });
      const done = await store.transitionTask(task.id, ['running'], {
        status: 'completed',
        result: 'out\u0000put',
      });
      expect([task.input, done?.result]).toEqual(['in\uFFFDput', 'out\uFFFDput']);
    } finally {
      await store.close();
    }
  });

  it('a server that cannot be reached is 503 DATABASE_UNAVAILABLE', async () => {
    const err = await PgStore.open('postgres://postgres@127.0.0.1:1/none').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CairnError);
    expect((err as CairnError).code).toBe('DATABASE_UNAVAILABLE');
  });

  it('finds history by words with a [bracketed] snippet, and memory by key or content', async () => {
    const store = await PgStore.open(db.url);
    try {
      const session = await store.createSession({
        agentName: 'assistant',
        mode: 'chat',
        compactCount: 50,
        systemPrompt: 'sys',
      });
      await store.appendMessages(session.id, [
        { role: 'user', content: 'Where did I park the bicycle yesterday?' },
      ]);
      const [hit] = await store.searchHistory(session.id, 'bicycle', 5);
      expect(hit).toEqual({ seq: 2, role: 'user', snippet: expect.stringContaining('[bicycle]') });
      await store.putMemory('assistant', 'parking_spot', 'level 3 near the lift');
      expect((await store.listMemory('assistant', 'lift')).map((n) => n.key)).toEqual([
        'parking_spot',
      ]);
      expect((await store.listMemory('assistant', 'parking_spot')).map((n) => n.key)).toEqual([
        'parking_spot',
      ]);
    } finally {
      await store.close();
    }
  });
});

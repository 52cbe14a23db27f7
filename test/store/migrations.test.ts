/**
 * SQLite migrations (frozen once landed): numbered, applied once in
 * a transaction each, recorded in schema_migrations; a failing migration
 * records nothing; an old database regains missing columns at startup.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  ensureColumns,
  migrate,
  openDatabase,
  requiredColumns,
  type SqliteDatabase,
} from '../../src/store/sqlite/open-database.js';
import {
  POSTGRES_MIGRATIONS,
  SQLITE_MIGRATIONS,
  type Migration,
} from '../../src/store/migrations/index.js';
import { CairnError } from '../../src/errors.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

const MIGRATIONS_DIR = fileURLToPath(new URL('../../src/store/migrations/', import.meta.url));

/**
 * sha256 of each landed migration's SQL, as each dialect runs it; see the
 * 'landed migrations are frozen' test.
 */
const LANDED_SQL_SHA256: Record<'sqlite' | 'postgres', Record<number, string>> = {
  sqlite: {
    1: '673dc552b7fa8a391f906be6bdeb38eee16deb904864fc52821de2b5ea45ef81',
    2: 'e05bba77110b54e2a97482799ee1f74600103a52f9fdfad56f89535f009c4f58',
    3: '47d89c47da3106e2cae92d5cf929af2e1f7a7e219e568bbf017bb855b45486b0',
    4: '306440a41279231a0a33f964fe074deeb34b8d55e9dc2fa76b07ebd6c639aef0',
    5: '89d4b4f1a38c91edadad25ec979649f0d6f7f09c94ff3564cdefe03ad9696390',
    6: '9a3e8418aa8500c5bdb44719f80470fd4b3c7f21041280f77c603689da368edb',
    7: '192d6057cbd57464f2c0f9adec6c4c5ce39e19d9ce0e68aad8bc1e85a7152c96',
    8: '20fd3bf2750303ec01ae5c11aa4bec6cfba8bacae35b83b3d48e77682f33b7be',
    9: '5958f569aa2ef630c50204f662924f9db8669660e3ec64155946ef33996458e6',
    10: '720f8500eb0c41cd8bc3aa1380dc4578e9ffd4237b836bd2d0b82a60094753f6',
    12: '2a18e63212400047ecd0639e5f23b8dd1d4a0848d82b7465984fe3986b38406e',
    13: '47da494d99c13800fb89231e68d9cd877f5199cb20d4f9307e700bdfd9c8a4a7',
    14: '899297c0cb39e97b75d3a3505d50f094a6e21d3b95420bc49bb96284bdf24e43',
    15: '200b3d966f02978b6eec5ac691c3fbdaf9a84e581dc16833d9679724fabaa78a',
    16: '638becce757e4ba0b2928df2cb3fe47d8460e99d9654df929d215b5c8e1515ee',
    18: '503a7458404a08986dd9d3155a0e9e648e872aef64f594c9c99895b9f749f98d',
    19: '790c42591c872bb316448bde98cb4a29f770a6946ee1050d8b896a3d95207e84',
    20: '426d8f41e86ba06c7b1286b8dd4d111b9dccea34d65c29c4d50030ebdbb539df',
    21: 'd51b8d49a62df64135c169d365ee0575c0d6d88035f433f5e066ca5b2923785e',
    22: '73e1e7144e670613da61ae92085d9dc88d17ee6485d06cde65d1e1d00a155b50',
    23: '108b7a0ec7a4c8620f0ad985dec2c952d379b318ad5460dff5160c83315a15b5',
    25: '405f4369da8a4ce0156142f4524323deee4779026b670a21ab79eb82acd226df',
    26: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    27: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  },
  postgres: {
    1: 'ff003a5fa1c92e49828c42590bfefec4a9118d524622d8b7a093545db494e480',
    2: 'e05bba77110b54e2a97482799ee1f74600103a52f9fdfad56f89535f009c4f58',
    3: 'bed01b720cb52ecbfaffde56ca91566fcc617ba45e66a32655441610622c7499',
    4: '306440a41279231a0a33f964fe074deeb34b8d55e9dc2fa76b07ebd6c639aef0',
    5: '161f57b9e45f2d753afb7b2b100a9627f0c3fd8f276db6090f38f2ee0915d1ee',
    6: 'df346df37213f3ad630ad770611da8cf400079a901a8c395c5bdd1034d8aeae7',
    7: '192d6057cbd57464f2c0f9adec6c4c5ce39e19d9ce0e68aad8bc1e85a7152c96',
    8: '17db4fd369edb9244b9f91d9aeed145c3d04ad8ba6e95d06247f07a63527d11a',
    9: '9a60d94ba62d116df9afee7ebc4386bb700d29654bce74947dea0791f21a4759',
    10: '08193e219ebafbf9c4de312875c2c58f427605b0f65e1a84a7ab9265142eb663',
    12: 'cd8ebe96876bca1daece7a3894c46f2ef496aea514a61fddbc4725812fad9211',
    13: '60b96b71bf263df6e508d616a7a657aaa6645c077b28fe7f54c7fc64100fe724',
    14: '17db4fd369edb9244b9f91d9aeed145c3d04ad8ba6e95d06247f07a63527d11a',
    15: '200b3d966f02978b6eec5ac691c3fbdaf9a84e581dc16833d9679724fabaa78a',
    16: '638becce757e4ba0b2928df2cb3fe47d8460e99d9654df929d215b5c8e1515ee',
    18: '17db4fd369edb9244b9f91d9aeed145c3d04ad8ba6e95d06247f07a63527d11a',
    19: '8fcca4d00161a5f40b41d59e87012db3105498a5944c21c48cdcefc722a07f8a',
    20: 'f156535243987819715d4e8a7cb519deaddbb95a431d228b284de67e35f40134',
    21: 'abbecf087f0ee64488953029f0bf547f080341c5fcc7c7303b1f653f3cf393eb',
    22: 'cfd35ce87f21075fd4779144ab823177aed98505ede39c2062d9fcdbd020ee45',
    23: '62a7b8fb4fd1ea820927f2b02c1133073c488c3ee99013ae0385dd04a7c69be4',
    25: '47c97033248094af74f27a8959e4aa657830a2356cf1bf76cca94da265b507a5',
    26: 'ba537c87953f493c36e97efa9af8049960767c07c01267c37e510060a07b078e',
    27: 'ff0906592d2fda82f298ebd507615e4e84ea47aaeefd882bb493454fd43923e7',
  },
};

const SCHEMA_TABLES = [
  'sessions',
  'messages',
  'messages_fts',
  'tasks',
  'events',
  'compactions',
  'memory',
  'memory_fts',
  'daemon_runs',
];

let dir: string;
let dbPath: string;
const handles: SqliteDatabase[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-migrations-'));
  dbPath = path.join(dir, 'cairn.db');
});
afterEach(() => {
  for (const db of handles.splice(0)) if (db.open) db.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function open(): SqliteDatabase {
  const db = openDatabase(dbPath);
  handles.push(db);
  return db;
}

function openRaw(): SqliteDatabase {
  const db = new Database(dbPath);
  handles.push(db);
  return db;
}

function recorded(db: SqliteDatabase): { version: number; name: string; applied_at: string }[] {
  return db
    .prepare('SELECT version, name, applied_at FROM schema_migrations ORDER BY version')
    .all() as { version: number; name: string; applied_at: string }[];
}

function tables(db: SqliteDatabase): string[] {
  return db
    .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    .pluck()
    .all() as string[];
}

function columns(db: SqliteDatabase, table: string): string[] {
  return (db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).map((c) => c.name);
}

/** The shipped versions from `version` on: what a database left just before it migrates. */
function versionsFrom(version: number): number[] {
  return SQLITE_MIGRATIONS.filter((m) => m.version >= version).map((m) => m.version);
}

/** The versions that ship, and the first free one for test migrations. */
const SHIPPED = SQLITE_MIGRATIONS.map((m) => m.version);
const NEXT = Math.max(...SHIPPED) + 1;

describe('migrate', () => {
  it('applies every migration to a fresh database and records migration 1', () => {
    const db = open();
    const rows = recorded(db);
    expect(rows.map((r) => [r.version, r.name])).toEqual(
      SQLITE_MIGRATIONS.map((m) => [m.version, m.name]),
    );
    expect(rows[0]).toMatchObject({ version: 1, name: 'initial' });
    expect(Number.isNaN(Date.parse(rows[0]!.applied_at))).toBe(false);
    for (const table of SCHEMA_TABLES) expect(tables(db)).toContain(table);
    for (const { table, column } of requiredColumns(SQLITE_MIGRATIONS))
      expect(columns(db, table)).toContain(column);
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
  });

  it('returns the versions it ran, and nothing when run again', () => {
    const db = openRaw();
    expect(migrate(db)).toEqual(SQLITE_MIGRATIONS.map((m) => m.version));
    expect(migrate(db)).toEqual([]);
    expect(ensureColumns(db)).toEqual([]);
  });

  it('applies nothing when the database is reopened', () => {
    const first = open();
    const before = recorded(first);
    const schemaBefore = first
      .prepare('SELECT type, name, sql FROM sqlite_master ORDER BY name')
      .all();
    first.close();

    const again = open();
    expect(recorded(again)).toEqual(before);
    expect(again.prepare('SELECT type, name, sql FROM sqlite_master ORDER BY name').all()).toEqual(
      schemaBefore,
    );
    expect(migrate(again)).toEqual([]);
  });

  it('003 re-arms sessions suspended only because nothing before the turn could be compacted', () => {
    const db = openRaw();
    migrate(
      db,
      SQLITE_MIGRATIONS.filter((m) => m.version < 3),
    );
    // A database from before 003: the columns of later migrations are not there yet.
    expect(columns(db, 'tasks')).not.toContain('pending_tool');
    expect(columns(db, 'messages')).not.toContain('transcript_hash');
    const now = new Date().toISOString();
    const session = db.prepare(
      `INSERT INTO sessions (id, agent_name, mode, status, created_at, updated_at, compaction_suspended)
       VALUES (?, 'a', 'chat', 'active', ?, ?, 1)`,
    );
    const event = db.prepare(
      `INSERT INTO events (type, session_id, data, created_at) VALUES ('context.compactionSuspended', ?, ?, ?)`,
    );
    session.run('sess_nothing', now, now);
    event.run(
      'sess_nothing',
      JSON.stringify({ reason: 'nothing before the running turn can be compacted' }),
      now,
    );
    session.run('sess_failed', now, now);
    event.run(
      'sess_failed',
      JSON.stringify({ reason: '3 automatic compactions in a row failed' }),
      now,
    );

    expect(migrate(db)).toEqual(
      SQLITE_MIGRATIONS.filter((m) => m.version >= 3).map((m) => m.version),
    );
    const suspended = db
      .prepare('SELECT id, compaction_suspended AS s FROM sessions ORDER BY id')
      .all();
    expect(suspended).toEqual([
      { id: 'sess_failed', s: 1 },
      { id: 'sess_nothing', s: 0 },
    ]);
    expect(columns(db, 'tasks')).toEqual(
      expect.arrayContaining(['pending_call_id', 'pending_tool', 'pending_arguments']),
    );
  });

  it("009 upgrades a database with sessions and tasks: every existing row is the admin's", async () => {
    const db = openRaw();
    migrate(
      db,
      SQLITE_MIGRATIONS.filter((m) => m.version < 9),
    );
    const now = new Date().toISOString();
    db.prepare(
      `INSERT INTO sessions (id, agent_name, mode, status, created_at, updated_at)
       VALUES ('sess_old', 'a', 'chat', 'active', ?, ?)`,
    ).run(now, now);
    db.prepare(
      `INSERT INTO tasks (id, session_id, agent_name, status, input, created_at, updated_at)
       VALUES ('task_old', 'sess_old', 'a', 'completed', 'x', ?, ?)`,
    ).run(now, now);
    expect(migrate(db)).toEqual(
      SQLITE_MIGRATIONS.filter((m) => m.version >= 9).map((m) => m.version),
    );
    db.close();
    const store = new SqliteStore(dbPath);
    try {
      expect(await store.findSession('sess_old')).toMatchObject({
        owner_key: null,
        end_user: null,
      });
      expect(await store.findTask('task_old')).toMatchObject({ owner_key: null, decided_by: null });
      expect(await store.listKeys()).toEqual([]);
      // A client key's view of the old database is empty.
      expect((await store.listSessions({ ownerKey: 'key_x', limit: 10 })).items).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it("014 rebuilds the history index with each message's session, indexed and queued rows alike", async () => {
    const db = openRaw();
    migrate(
      db,
      SQLITE_MIGRATIONS.filter((m) => m.version < 14),
    );
    const now = new Date().toISOString();
    const session = db.prepare(
      `INSERT INTO sessions (id, agent_name, mode, status, created_at, updated_at)
       VALUES (?, 'a', 'chat', 'active', ?, ?)`,
    );
    const message = db.prepare(
      `INSERT INTO messages (session_id, seq, role, content, created_at) VALUES (?, ?, 'user', ?, ?)`,
    );
    session.run('sess_0a1b', now, now);
    session.run('sess_2c3d', now, now);
    message.run('sess_0a1b', 1, 'pelican indexed before', now);
    message.run('sess_2c3d', 1, 'pelican elsewhere', now);
    // What the store's batch did before 014: index the queue, then empty it.
    db.exec(`INSERT INTO messages_fts (rowid, content)
      SELECT id, content FROM messages WHERE id IN (SELECT id FROM messages_fts_pending);
      DELETE FROM messages_fts_pending;`);
    message.run('sess_0a1b', 2, 'pelican still queued', now);
    expect(db.prepare('SELECT COUNT(*) FROM messages_fts_pending').pluck().get()).toBe(1);

    // Up to 018, which rebuilds the index again (its own test below).
    const upTo18 = SQLITE_MIGRATIONS.filter((m) => m.version < 18);
    expect(migrate(db, upTo18)).toEqual(
      upTo18.filter((m) => m.version >= 14).map((m) => m.version),
    );
    const inSession = (id: string) =>
      db
        .prepare(
          `SELECT m.seq FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
           WHERE messages_fts MATCH ? ORDER BY m.seq`,
        )
        .pluck()
        .all(`session_id : "${id}" AND content : pelican`);
    expect(inSession('sess_0a1b')).toEqual([1, 2]);
    expect(inSession('sess_2c3d')).toEqual([1]);
    expect(db.prepare('SELECT COUNT(*) FROM messages_fts_pending').pluck().get()).toBe(0);
    const integrity = () =>
      db.exec("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)");
    integrity();
    // The delete trigger removes every indexed column's old value.
    db.prepare("DELETE FROM messages WHERE session_id = 'sess_0a1b' AND seq = 1").run();
    integrity();
    expect(inSession('sess_0a1b')).toEqual([2]);
    db.close();

    const store = new SqliteStore(dbPath);
    try {
      expect((await store.searchHistory('sess_0a1b', 'pelican', 10)).map((h) => h.seq)).toEqual([
        2,
      ]);
      expect(
        (await store.recallMessages('sess_2c3d', [{ text: 'pelican', prefix: false }], 1, 10)).map(
          (h) => h.seq,
        ),
      ).toEqual([1]);
    } finally {
      await store.close();
    }
  });

  it('016 gives compactions a dropped list, null on those made before it', async () => {
    const db = openRaw();
    migrate(
      db,
      SQLITE_MIGRATIONS.filter((m) => m.version < 16),
    );
    const now = new Date().toISOString();
    db.prepare(
      `INSERT INTO sessions (id, agent_name, mode, status, created_at, updated_at, last_seq)
       VALUES ('sess_0c1d', 'a', 'chat', 'active', ?, ?, 0)`,
    ).run(now, now);
    db.prepare(
      `INSERT INTO compactions (session_id, from_size, to_size, from_seq, to_seq, summary, trigger,
         model, input_chars, summary_chars, created_at)
       VALUES ('sess_0c1d', 0, 2, 0, 3, 'old summary', 'manual', 'm', 10, 11, ?)`,
    ).run(now);
    expect(columns(db, 'compactions')).not.toContain('dropped');
    expect(migrate(db)).toEqual(
      SQLITE_MIGRATIONS.filter((m) => m.version >= 16).map((m) => m.version),
    );
    expect(columns(db, 'compactions')).toContain('dropped');
    db.close();

    const store = new SqliteStore(dbPath);
    try {
      const [old] = await store.listCompactions('sess_0c1d');
      expect(old).toMatchObject({ summary: 'old summary', dropped: null });
    } finally {
      await store.close();
    }
  });

  it('018 stems the history index: every message queued, indexed in batches that resume after a stop', async () => {
    const db = openRaw();
    migrate(
      db,
      SQLITE_MIGRATIONS.filter((m) => m.version < 18),
    );
    const now = new Date().toISOString();
    db.prepare(
      `INSERT INTO sessions (id, agent_name, mode, status, created_at, updated_at, last_seq)
       VALUES ('sess_0a1b', 'a', 'chat', 'active', ?, ?, 3)`,
    ).run(now, now);
    const message = db.prepare(
      `INSERT INTO messages (session_id, seq, role, content, created_at) VALUES ('sess_0a1b', ?, 'user', ?, ?)`,
    );
    message.run(1, 'the servers were deploying', now);
    message.run(2, 'one server deployed', now);
    message.run(3, 'serving the invoices', now);
    // Indexed the way the store did before 018.
    db.exec(`INSERT INTO messages_fts (rowid, content, session_id)
      SELECT id, content, session_id FROM messages WHERE id IN (SELECT id FROM messages_fts_pending);
      DELETE FROM messages_fts_pending;`);
    const matching = (match: string) =>
      db
        .prepare('SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid')
        .pluck()
        .all(match);
    expect(matching('server')).toEqual([2]);

    expect(migrate(db)).toEqual(versionsFrom(18));
    const queued = () => db.prepare('SELECT COUNT(*) FROM messages_fts_pending').pluck().get();
    expect(queued()).toBe(3);
    expect(matching('server')).toEqual([]);
    // One batch of two, then the server stops: the rest stays queued on disk.
    db.exec(`INSERT INTO messages_fts (rowid, content, session_id)
      SELECT id, content, session_id FROM messages WHERE id IN (SELECT id FROM messages_fts_pending ORDER BY id LIMIT 2);
      DELETE FROM messages_fts_pending WHERE id IN (SELECT id FROM messages_fts_pending ORDER BY id LIMIT 2);`);
    expect(queued()).toBe(1);
    expect(matching('server')).toEqual([1, 2]);
    expect(matching('serve')).toEqual([]);
    db.close();

    const store = new SqliteStore(dbPath);
    try {
      // The next start resumes; a search indexes what is left first. Stems
      // match ("servers", "server"; "serving" is a stem of its own).
      const hits = await store.searchHistory('sess_0a1b', 'server', 10);
      expect(hits.map((h) => h.seq).sort()).toEqual([1, 2]);
      expect((await store.searchHistory('sess_0a1b', 'serve', 10)).map((h) => h.seq)).toEqual([3]);
      const recalled = await store.recallMessages(
        'sess_0a1b',
        [{ text: 'deploy', prefix: false }],
        3,
        10,
      );
      expect(recalled.map((h) => h.seq).sort()).toEqual([1, 2]);
      store.db.exec("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)");
      store.db.prepare('DELETE FROM messages WHERE seq = 1').run();
      store.db.exec("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)");
    } finally {
      await store.close();
    }
  });

  it('015 keeps the duplicate results an old database holds, and refuses a new one', async () => {
    const db = openRaw();
    migrate(
      db,
      SQLITE_MIGRATIONS.filter((m) => m.version < 15),
    );
    const now = new Date().toISOString();
    db.prepare(
      `INSERT INTO sessions (id, agent_name, mode, status, created_at, updated_at, last_seq)
       VALUES ('sess_0a1b', 'a', 'chat', 'active', ?, ?, 4)`,
    ).run(now, now);
    const message = db.prepare(
      `INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, created_at)
       VALUES ('sess_0a1b', ?, ?, ?, ?, ?, ?)`,
    );
    const call = JSON.stringify([
      { id: 'call_0', type: 'function', function: { name: 'current_time', arguments: '{}' } },
    ]);
    message.run(1, 'user', 'What time is it?', null, null, now);
    message.run(2, 'assistant', null, call, null, now);
    // What the approval race of older builds left: two results for one call.
    message.run(3, 'tool', 'interrupted', null, 'call_0', now);
    message.run(4, 'tool', '12:00', null, 'call_0', now);

    expect(migrate(db)).toEqual(versionsFrom(15));
    expect(
      db.prepare("SELECT COUNT(*) FROM messages WHERE tool_call_id = 'call_0'").pluck().get(),
    ).toBe(2);
    db.close();

    const store = new SqliteStore(dbPath);
    try {
      // The next turn reuses the call id (as some servers do): its call is answered once.
      await store.appendMessages('sess_0a1b', [
        { role: 'user', content: 'And now?' },
        { role: 'assistant', content: null, tool_calls: JSON.parse(call) },
        { role: 'tool', tool_call_id: 'call_0', name: 'current_time', content: '12:01' },
      ]);
      await expect(
        store.appendMessages('sess_0a1b', [
          { role: 'tool', tool_call_id: 'call_0', name: 'current_time', content: 'again' },
        ]),
      ).rejects.toMatchObject({ code: 'TOOL_RESULT_EXISTS' });
      expect(
        (await store.listMessages('sess_0a1b', { afterSeq: 0, limit: 20 })).map((m) => m.seq),
      ).toEqual([1, 2, 3, 4, 5, 6, 7]);
    } finally {
      await store.close();
    }
  });

  it('applies migrations in version order whatever the order of the list', () => {
    const db = openRaw();
    const later: Migration = {
      version: NEXT + 1,
      name: 'uses-two',
      up: 'INSERT INTO t2 (x) VALUES (42);',
    };
    const earlier: Migration = {
      version: NEXT,
      name: 'creates-two',
      up: 'CREATE TABLE t2 (x INTEGER);',
    };
    const all = [...SHIPPED, NEXT, NEXT + 1];
    expect(migrate(db, [later, ...SQLITE_MIGRATIONS, earlier])).toEqual(all);
    expect(db.prepare('SELECT x FROM t2').pluck().all()).toEqual([42]);
    expect(recorded(db).map((r) => r.version)).toEqual(all);
  });

  it('a failing migration throws, records nothing and leaves earlier tables untouched', async () => {
    const store = new SqliteStore(dbPath);
    const session = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'Keep me.',
    });
    await store.appendMessages(session.id, [{ role: 'user', content: 'and me' }]);
    await store.close();

    const db = openRaw();
    const before = {
      recorded: recorded(db),
      sessions: db.prepare('SELECT * FROM sessions').all(),
      messages: db.prepare('SELECT * FROM messages').all(),
      schema: db.prepare('SELECT type, name, sql FROM sqlite_master ORDER BY name').all(),
    };
    const broken: Migration = {
      version: NEXT,
      name: 'broken',
      // The first statements succeed; the last is not SQL. None of it may stay.
      up: `CREATE TABLE half_done (x INTEGER);
           ALTER TABLE sessions ADD COLUMN half_column TEXT;
           UPDATE sessions SET title = 'changed';
           THIS IS NOT SQL;`,
    };
    expect(() => migrate(db, [...SQLITE_MIGRATIONS, broken])).toThrow(/syntax error/);

    expect(recorded(db)).toEqual(before.recorded);
    expect(tables(db)).not.toContain('half_done');
    expect(columns(db, 'sessions')).not.toContain('half_column');
    expect(db.prepare('SELECT * FROM sessions').all()).toEqual(before.sessions);
    expect(db.prepare('SELECT * FROM messages').all()).toEqual(before.messages);
    expect(db.prepare('SELECT type, name, sql FROM sqlite_master ORDER BY name').all()).toEqual(
      before.schema,
    );
    expect(db.inTransaction).toBe(false);

    // The database still works, and the fixed migration applies later.
    expect(migrate(db)).toEqual([]);
    const fixed: Migration = { ...broken, up: 'CREATE TABLE half_done (x INTEGER);' };
    expect(migrate(db, [...SQLITE_MIGRATIONS, fixed])).toEqual([NEXT]);
  });

  it('on a fresh database, a failing later migration leaves the earlier ones recorded', () => {
    const db = openRaw();
    const broken: Migration = { version: NEXT, name: 'broken', up: 'CREATE TABLE nope (' };
    expect(() => migrate(db, [...SQLITE_MIGRATIONS, broken])).toThrow();
    expect(recorded(db).map((r) => r.version)).toEqual(SHIPPED);
    expect(tables(db)).toContain('sessions');
    expect(tables(db)).not.toContain('nope');
  });
});

describe('a database from a newer Cairn', () => {
  it('is refused, naming the version, and left untouched', () => {
    const db = openRaw();
    migrate(db);
    db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
      NEXT + 5,
      'from-the-future',
      new Date().toISOString(),
    );
    const before = recorded(db);
    let thrown: unknown;
    try {
      migrate(db);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(CairnError);
    // The same code as Postgres's refusal, so scripts need to know only one.
    expect((thrown as CairnError).code).toBe('DATABASE_TOO_NEW');
    expect((thrown as CairnError).message).toMatch(
      new RegExp(`migrated by a newer Cairn, version ${NEXT + 5}.*upgrade`),
    );
    expect(recorded(db)).toEqual(before);
    db.close();
    expect(() => new SqliteStore(dbPath)).toThrow(
      expect.objectContaining({ code: 'DATABASE_TOO_NEW' }),
    );
  });

  it('is refused even when the unknown migration is older than the newest known one', () => {
    const db = openRaw();
    migrate(
      db,
      SQLITE_MIGRATIONS.filter((m) => m.version !== 2),
    );
    expect(() =>
      migrate(
        db,
        SQLITE_MIGRATIONS.filter((m) => m.version !== 3),
      ),
    ).toThrow(
      expect.objectContaining({
        code: 'DATABASE_TOO_NEW',
        message: expect.stringMatching(/newer Cairn.*migrations 3 are unknown/),
      }),
    );
  });
});

describe('requiredColumns (derived from the migrations, no second list)', () => {
  it('holds the columns later migrations add with ALTER, and the initial schema', () => {
    const names = requiredColumns(SQLITE_MIGRATIONS).map((c) => `${c.table}.${c.column}`);
    expect(names).toEqual(
      expect.arrayContaining([
        'sessions.compact_summary',
        'sessions.epoch',
        'messages.chars',
        'sessions.last_seq', // 002
        'tasks.pending_tool', // 003
        'messages.transcript_hash', // 004
        'compactions.input_tokens', // 005
      ]),
    );
    expect(names.some((n) => n.startsWith('messages_fts'))).toBe(false);
    expect(requiredColumns(SQLITE_MIGRATIONS)).toContainEqual({
      table: 'sessions',
      column: 'compact_count',
      definition: 'REAL NOT NULL DEFAULT 50',
    });
  });

  it('only counts the migrations given, so a later ALTER never finds its column first', () => {
    const before3 = requiredColumns(SQLITE_MIGRATIONS.filter((m) => m.version < 3));
    expect(before3.map((c) => c.column)).not.toContain('pending_tool');
  });

  it('restores a column a new migration adds, with no list to update', () => {
    const db = openRaw();
    const addsColumn: Migration = {
      version: NEXT,
      name: 'adds-column',
      up: "ALTER TABLE sessions ADD COLUMN mood TEXT NOT NULL DEFAULT 'calm';",
    };
    const all = [...SQLITE_MIGRATIONS, addsColumn];
    migrate(db, all);
    db.exec('ALTER TABLE sessions DROP COLUMN mood');
    expect(ensureColumns(db, all)).toEqual(['sessions.mood']);
    expect(columns(db, 'sessions')).toContain('mood');
  });
});

describe('ensureColumns (an old database upgrades itself)', () => {
  it('restores dropped compaction columns when reopened, with data intact', async () => {
    const store = new SqliteStore(dbPath);
    const session = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      title: 'Old one',
      compactCount: 33.3,
      systemPrompt: 'Old system prompt.',
    });
    await store.appendMessages(session.id, [
      { role: 'user', content: 'hello from the past' },
      { role: 'assistant', content: 'hi' },
    ]);
    await store.close();

    // Simulate a database made by a build from before these columns existed.
    const old = openRaw();
    old.exec('ALTER TABLE sessions DROP COLUMN compact_summary');
    old.exec('ALTER TABLE sessions DROP COLUMN compact_seq');
    expect(columns(old, 'sessions')).not.toContain('compact_summary');
    expect(columns(old, 'sessions')).not.toContain('compact_seq');
    old.close();

    const db = open();
    expect(columns(db, 'sessions')).toEqual(
      expect.arrayContaining(['compact_summary', 'compact_seq']),
    );
    expect(recorded(db).map((r) => r.version)).toEqual(SQLITE_MIGRATIONS.map((m) => m.version));
    expect(db.prepare('SELECT * FROM sessions WHERE id = ?').get(session.id)).toMatchObject({
      agent_name: 'assistant',
      title: 'Old one',
      compact_count: 33.3,
      message_count: 3,
      compact_summary: null,
      compact_seq: 0,
      compact_size: 0,
    });
    expect(
      db
        .prepare('SELECT content FROM messages WHERE session_id = ? ORDER BY seq')
        .pluck()
        .all(session.id),
    ).toEqual(['Old system prompt.', 'hello from the past', 'hi']);
    expect(ensureColumns(db)).toEqual([]);
    db.close();

    // And the store works on it, compaction columns included.
    const upgraded = new SqliteStore(dbPath);
    const compacted = await upgraded.commitCompaction({
      sessionId: session.id,
      expectedSize: 0,
      toSize: 2,
      toSeq: 3,
      summary: 'Greetings were exchanged.',
      trigger: 'manual',
      model: 'm',
      inputChars: 20,
    });
    expect(compacted).toMatchObject({
      compact_summary: 'Greetings were exchanged.',
      compact_seq: 3,
    });
    await upgraded.close();
  });

  it('upgrades a database made by the first 001 (no sessions.epoch, no messages.chars)', async () => {
    const store = new SqliteStore(dbPath);
    const session = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'Legacy.',
    });
    await store.appendMessages(session.id, [
      { role: 'user', content: 'legacy question' },
      {
        role: 'assistant',
        content: 'ok',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'look', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'c1', name: 'look', content: 'found' },
    ]);
    await store.close();

    const old = openRaw();
    old.exec('ALTER TABLE sessions DROP COLUMN epoch');
    old.exec('ALTER TABLE messages DROP COLUMN chars');
    old.close();

    const upgraded = new SqliteStore(dbPath);
    try {
      expect(columns(upgraded.db, 'sessions')).toContain('epoch');
      expect(columns(upgraded.db, 'messages')).toContain('chars');
      expect((await upgraded.findSession(session.id))?.epoch).toBe(0);
      // Rows from before the chars column are measured from their content and tool calls.
      expect(await upgraded.listMessageMeta(session.id, 0)).toEqual([
        { seq: 2, role: 'user', chars: 'legacy question'.length },
        { seq: 3, role: 'assistant', chars: 2 + 'look'.length + 2, callIds: ['c1'] },
        { seq: 4, role: 'tool', chars: 5, toolCallId: 'c1' },
      ]);
      const [added] = await upgraded.appendMessages(session.id, [{ role: 'user', content: 'new' }]);
      expect(added?.seq).toBe(5);
      expect((await upgraded.listMessageMeta(session.id, 4))[0]).toEqual({
        seq: 5,
        role: 'user',
        chars: 3,
      });
    } finally {
      await upgraded.close();
    }
  });

  it('adds every required column that is missing and reports what it added', () => {
    const db = openRaw();
    migrate(db);
    db.exec('ALTER TABLE sessions DROP COLUMN compaction_suspended');
    db.exec('ALTER TABLE sessions DROP COLUMN last_prompt_seq');
    expect(ensureColumns(db).sort()).toEqual(
      ['sessions.compaction_suspended', 'sessions.last_prompt_seq'].sort(),
    );
    expect(columns(db, 'sessions')).toEqual(
      expect.arrayContaining(['compaction_suspended', 'last_prompt_seq']),
    );
    expect(ensureColumns(db)).toEqual([]);
  });
});

describe('migration files', () => {
  it('landed migrations are frozen: each dialect runs exactly the SQL that landed', () => {
    // Changing a landed migration means databases that already recorded it never get the
    // change (and a changed dialect word changes every migration that uses it). Add a
    // numbered migration instead, and its hashes here.
    for (const [dialect, migrations] of [
      ['sqlite', SQLITE_MIGRATIONS],
      ['postgres', POSTGRES_MIGRATIONS],
    ] as const) {
      const landed = Object.fromEntries(
        migrations.map((m) => [m.version, createHash('sha256').update(m.up).digest('hex')]),
      );
      expect(landed, dialect).toEqual(LANDED_SQL_SHA256[dialect]);
    }
    expect(SQLITE_MIGRATIONS.find((m) => m.version === 1)?.name).toBe('initial');
  });

  it('carry the same versions and names in both dialects, the dialects differing only where they must', () => {
    expect(POSTGRES_MIGRATIONS.map((m) => [m.version, m.name])).toEqual(
      SQLITE_MIGRATIONS.map((m) => [m.version, m.name]),
    );
    // Same text where no dialect word is used, e.g. 002.
    const second = (list: readonly Migration[]) => list.find((m) => m.version === 2)!.up;
    expect(second(POSTGRES_MIGRATIONS)).toBe(second(SQLITE_MIGRATIONS));
    expect(SQLITE_MIGRATIONS[0]!.up).not.toContain('COLLATE');
    expect(POSTGRES_MIGRATIONS[0]!.up).toContain('COLLATE "C"');
  });

  it('are numbered, unique, and import nothing but the dialect type', () => {
    const files = fs.readdirSync(MIGRATIONS_DIR).filter((f) => /^\d{3}-.+\.ts$/.test(f));
    expect(files.length).toBe(SQLITE_MIGRATIONS.length);
    const versions = SQLITE_MIGRATIONS.map((m) => m.version);
    expect(new Set(versions).size).toBe(versions.length);
    for (const file of files) {
      const version = Number(file.slice(0, 3));
      expect(versions, file).toContain(version);
      const source = fs.readFileSync(path.join(MIGRATIONS_DIR, file), 'utf8');
      const imports = source.match(/^\s*import\s.*$/gm) ?? [];
      for (const line of imports)
        expect(line, file).toBe("import type { SchemaDialect } from './dialect.js';");
      expect(source, file).not.toMatch(/\brequire\(/);
    }
  });
});

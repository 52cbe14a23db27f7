/**
 * Group commit, on a real SQLite file: the writes asked for together share
 * one transaction (a second connection sees none of them, then all), each
 * keeps its own outcome, they run in the order asked, they wait out another
 * connection's write lock, and nothing asked for is dropped at close.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GroupCommit } from '../../src/store/sqlite/group-commit.js';
import { openDatabase } from '../../src/store/sqlite/open-database.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

let dir: string;
let file: string;
const closers: (() => void)[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-group-commit-'));
  file = path.join(dir, 'cairn.db');
});

afterEach(() => {
  for (const close of closers.splice(0).reverse()) close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** A table of its own on a connection opened the way the store opens one. */
function open(): Database.Database {
  const db = openDatabase(file, { busyTimeoutMs: 10 });
  db.exec('CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE)');
  closers.push(() => db.close());
  return db;
}

function peer(): Database.Database {
  const db = new Database(file);
  db.pragma('busy_timeout = 0');
  closers.push(() => db.close());
  return db;
}

const countOn = (db: Database.Database): number =>
  (db.prepare('SELECT COUNT(*) AS n FROM notes').get() as { n: number }).n;

describe('GroupCommit', () => {
  it('tells of each commit: one for a write alone, one for a group, none for a write that failed alone', async () => {
    const db = open();
    let commits = 0;
    const writer = new GroupCommit(db, 1_000, () => (commits += 1));
    const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
    await writer.write(() => insert.run('alone'));
    expect(commits).toBe(1);
    const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
    await nextTurn();
    await Promise.all([1, 2, 3].map((i) => writer.write(() => insert.run(`together ${i}`))));
    // The first ran at once (a commit), the other two shared the next.
    expect(commits).toBe(3);
    await nextTurn();
    await expect(writer.write(() => insert.run('alone'))).rejects.toThrow(/UNIQUE/);
    expect(commits).toBe(3);
  });

  it('runs a write at once when idle, and the writes asked for after it in one transaction', async () => {
    const db = open();
    const other = peer();
    const commits = new GroupCommit(db, 1_000);
    const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
    const seenByPeer: number[] = [];
    const writes = Array.from({ length: 6 }, (_, i) =>
      commits.write(() => {
        // Another connection sees only what is committed: with a commit per
        // write it would see each earlier write here.
        seenByPeer.push(countOn(other));
        return insert.run(`note ${i}`).lastInsertRowid;
      }),
    );
    // The first ran and committed at once, before anything was awaited.
    expect(countOn(other)).toBe(1);
    let resolvedEarly = false;
    void writes[1]!.then(() => (resolvedEarly = countOn(other) !== 6));
    expect(await Promise.all(writes)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(seenByPeer).toEqual([0, 1, 1, 1, 1, 1]);
    expect(resolvedEarly).toBe(false);
    expect(countOn(other)).toBe(6);

    // In a later turn of the event loop, a write runs at once again.
    await new Promise((resolve) => setImmediate(resolve));
    void commits.write(() => insert.run('later'));
    expect(countOn(other)).toBe(7);
  });

  it('a write that throws is undone alone and rejects alone; the others commit, in order', async () => {
    const db = open();
    const commits = new GroupCommit(db, 1_000);
    const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
    const order: string[] = [];
    const first = commits.write(() => (order.push('first'), insert.run('first')));
    const failing = commits.write(() => {
      order.push('failing');
      insert.run('written, then undone');
      insert.run('first'); // UNIQUE: throws
    });
    const thrown = commits.write(() => {
      order.push('thrown');
      throw new Error('not SQL at all');
    });
    const last = commits.write(() => (order.push('last'), insert.run('last')));

    await expect(first).resolves.toBeDefined();
    await expect(failing).rejects.toMatchObject({ code: 'SQLITE_CONSTRAINT_UNIQUE' });
    await expect(thrown).rejects.toThrow('not SQL at all');
    await expect(last).resolves.toBeDefined();
    expect(order).toEqual(['first', 'failing', 'thrown', 'last']);
    const texts = db.prepare('SELECT text FROM notes ORDER BY id').pluck().all();
    expect(texts).toEqual(['first', 'last']);
    expect(db.inTransaction).toBe(false);
  });

  it('a write on its own that throws is undone and rejects', async () => {
    const db = open();
    const commits = new GroupCommit(db, 1_000);
    const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
    await commits.write(() => insert.run('kept'));
    const alone = commits.write(() => {
      insert.run('written, then undone');
      insert.run('kept'); // UNIQUE: throws
    });
    await expect(alone).rejects.toMatchObject({ code: 'SQLITE_CONSTRAINT_UNIQUE' });
    expect(db.prepare('SELECT text FROM notes').pluck().all()).toEqual(['kept']);
    expect(db.inTransaction).toBe(false);
  });

  it('waits while another connection holds the write lock, then commits the whole group', async () => {
    const db = open();
    const other = peer();
    const commits = new GroupCommit(db, 5_000);
    other.exec('BEGIN IMMEDIATE');
    const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
    const writes = ['a', 'b', 'c'].map((text) => commits.write(() => insert.run(text)));
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(countOn(db)).toBe(0);
    other.exec('COMMIT');
    await Promise.all(writes);
    expect(countOn(other)).toBe(3);
  });

  it('past the busy budget every write of the group fails with a retryable 503 and nothing is written', async () => {
    const db = open();
    const other = peer();
    const commits = new GroupCommit(db, 50);
    other.exec('BEGIN IMMEDIATE');
    const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
    const writes = ['a', 'b'].map((text) => commits.write(() => insert.run(text)));
    for (const write of writes) {
      await expect(write).rejects.toMatchObject({ code: 'SERVICE_UNAVAILABLE', status: 503 });
    }
    other.exec('ROLLBACK');
    expect(countOn(db)).toBe(0);
    // The next group is not held back by the failed one.
    await commits.write(() => insert.run('after'));
    expect(countOn(other)).toBe(1);
  });

  it('drain commits what was asked for, before the next event-loop turn', async () => {
    const db = open();
    const other = peer();
    const commits = new GroupCommit(db, 1_000);
    const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
    const writes = ['at once', 'in the group'].map((text) => commits.write(() => insert.run(text)));
    expect(countOn(other)).toBe(1);
    await commits.drain();
    expect(countOn(other)).toBe(2);
    await expect(Promise.all(writes)).resolves.toHaveLength(2);
  });
});

describe('SqliteStore and group commit', () => {
  it('commits the writes asked for before close, not dropped', async () => {
    const store = new SqliteStore(file);
    const session = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      systemPrompt: 'System prompt.',
      compactCount: 50,
    });
    // Asked for together: the second (at least) waits for its group, which close commits.
    const appends = ['said', 'said at close'].map((content) =>
      store.appendMessages(session.id, [{ role: 'user', content }]),
    );
    await store.close();
    await expect(Promise.all(appends)).resolves.toHaveLength(2);
    const reopened = new SqliteStore(file);
    try {
      const messages = await reopened.listMessages(session.id, { afterSeq: 0, limit: 10 });
      expect(messages.map((m) => m.content)).toEqual(['System prompt.', 'said', 'said at close']);
    } finally {
      await reopened.close();
    }
  });
});

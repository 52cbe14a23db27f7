/**
 * WAL checkpoints in a worker thread, on a real SQLite file: the server's
 * connection never checkpoints, the worker copies the WAL into the database
 * file a moment after commits, empties a WAL past its limit, stops when idle,
 * falls back to SQLite's own checkpoints when it cannot work, and leaves no
 * WAL behind at close.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  BackgroundCheckpoints,
  SQLITE_AUTOCHECKPOINT_PAGES,
} from '../../src/store/sqlite/background-checkpoints.js';
import { openDatabase, type SqliteDatabase } from '../../src/store/sqlite/open-database.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

let dir: string;
let file: string;
const cleanups: (() => Promise<void> | void)[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-checkpoints-'));
  file = path.join(dir, 'cairn.db');
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  fs.rmSync(dir, { recursive: true, force: true });
});

const sizeOf = (target: string): number => (fs.existsSync(target) ? fs.statSync(target).size : 0);
const autocheckpoint = (db: SqliteDatabase): unknown =>
  db.pragma('wal_autocheckpoint', { simple: true });

/** A connection with a table of its own and background checkpoints on it. */
function openWithCheckpoints(options: ConstructorParameters<typeof BackgroundCheckpoints>[2] = {}) {
  const db = openDatabase(file, { migrate: false });
  db.exec('CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)');
  const checkpoints = new BackgroundCheckpoints(db, file, options);
  cleanups.push(async () => {
    await checkpoints.close();
    db.close();
  });
  const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
  /** About `kib` KiB of rows in one transaction, then what a commit tells the checkpointer. */
  const write = (kib: number): void => {
    db.transaction(() => {
      for (let i = 0; i < kib; i++) insert.run('x'.repeat(1_000));
    })();
    checkpoints.committed();
  };
  return { db, checkpoints, write };
}

describe('BackgroundCheckpoints', () => {
  it('turns the connection’s own checkpoints off and copies the WAL into the database file from a worker', async () => {
    const { db, checkpoints, write } = openWithCheckpoints();
    expect(autocheckpoint(db)).toBe(0);
    const before = sizeOf(file);
    // 2 MB is about 500 pages: below SQLite's 1 000-page mark, so only the
    // worker can have moved it into the database file.
    write(2_000);
    expect(sizeOf(file)).toBe(before);
    await checkpoints.settled();
    expect(checkpoints.workerRunning).toBe(true);
    expect(sizeOf(file)).toBeGreaterThan(before + 1_900_000);
    expect(checkpoints.active).toBe(true);
  });

  it('empties a WAL larger than its limit', async () => {
    const { checkpoints, write } = openWithCheckpoints({ truncateBytes: 1 });
    write(500);
    expect(sizeOf(`${file}-wal`)).toBeGreaterThan(400_000);
    await checkpoints.settled();
    expect(sizeOf(`${file}-wal`)).toBe(0);
  });

  it('stops its worker when idle, and starts one again for the next commit', async () => {
    const { checkpoints, write } = openWithCheckpoints({ idleMs: 50 });
    for (let i = 0; i < 5; i++) write(10);
    await checkpoints.settled();
    expect(checkpoints.workerRunning).toBe(true);
    await expect.poll(() => checkpoints.workerRunning, { timeout: 5_000 }).toBe(false);
    // The next commit starts a worker again.
    write(10);
    await checkpoints.settled();
    expect(checkpoints.workerRunning).toBe(true);
  });

  it('gives checkpoints back to the connection when the worker cannot open the database', async () => {
    const db = openDatabase(file, { migrate: false });
    const reasons: string[] = [];
    const checkpoints = new BackgroundCheckpoints(db, path.join(dir, 'missing.db'), {
      onFallback: (reason) => reasons.push(reason),
    });
    cleanups.push(async () => {
      await checkpoints.close();
      db.close();
    });
    expect(autocheckpoint(db)).toBe(0);
    checkpoints.committed();
    await checkpoints.settled();
    expect(checkpoints.active).toBe(false);
    expect(autocheckpoint(db)).toBe(SQLITE_AUTOCHECKPOINT_PAGES);
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toMatch(/checkpoint/);
    // Told once; later commits change nothing.
    checkpoints.committed();
    await checkpoints.settled();
    expect(reasons).toHaveLength(1);
  });
});

describe('the SQLite store with background checkpoints', () => {
  it('is the default for a file, and leaves no WAL behind once closed', async () => {
    const store = new SqliteStore(file);
    const session = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      systemPrompt: 'You are terse.',
      compactCount: 10,
    });
    for (let i = 0; i < 20; i++) {
      await store.appendMessages(session.id, [{ role: 'user', content: `note ${i} `.repeat(200) }]);
    }
    expect(store.checkpoints?.active).toBe(true);
    expect(autocheckpoint(store.db)).toBe(0);
    await store.checkpoints?.settled();
    expect(store.checkpoints?.workerRunning).toBe(true);
    await store.close();
    expect(store.checkpoints?.workerRunning).toBe(false);
    expect(fs.existsSync(`${file}-wal`)).toBe(false);
    // Reopened, everything is there.
    const again = new SqliteStore(file, { checkpoints: 'inline' });
    cleanups.push(() => again.close());
    expect(again.checkpoints).toBeUndefined();
    expect(autocheckpoint(again.db)).toBe(SQLITE_AUTOCHECKPOINT_PAGES);
    expect((await again.findSession(session.id))?.message_count).toBe(21);
  });

  it('has none in memory', async () => {
    const store = new SqliteStore(':memory:');
    cleanups.push(() => store.close());
    expect(store.checkpoints).toBeUndefined();
  });
});

/**
 * One server process per SQLite file: a second is refused at start. Two `cairn
 * serve` on one file would double-fire every daemon slot and mark each other's
 * running turns interrupted. The lock is an OS file lock, so the OS frees it
 * when the holder dies, even by `kill -9`: a small SQLite file next to the
 * database, opened in exclusive locking mode with a write done, which keeps its
 * exclusive lock until the connection closes. Another process fails at once
 * (busy_timeout 0) instead of waiting.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { CairnError } from '../../errors.js';

export interface ProcessLock {
  readonly path: string;
  release(): void;
}

/** The lock file of a database file. */
export function lockPathOf(databasePath: string): string {
  return `${databasePath}.lock`;
}

/**
 * Takes the process lock of `databasePath`, or throws a one-line error
 * saying which file is in use. `:memory:` needs no lock.
 */
export function acquireProcessLock(databasePath: string): ProcessLock {
  const path = lockPathOf(databasePath);
  if (databasePath === ':memory:') return { path, release: () => undefined };
  mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  try {
    db.pragma('busy_timeout = 0');
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL, since TEXT NOT NULL)');
    db.exec('BEGIN EXCLUSIVE');
    db.prepare('DELETE FROM holder').run();
    db.prepare('INSERT INTO holder (pid, since) VALUES (?, ?)').run(
      process.pid,
      new Date().toISOString(),
    );
    db.exec('COMMIT');
  } catch (err) {
    db.close();
    if ((err as { code?: unknown }).code === 'SQLITE_BUSY') {
      throw new CairnError(
        'DATABASE_IN_USE',
        `Another cairn server is already using ${databasePath}. Stop it first, or point this one at another file with CAIRN_DB.`,
        { cause: err },
      );
    }
    throw err;
  }
  return { path, release: () => db.close() };
}

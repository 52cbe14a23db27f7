/**
 * The one place a SQLite connection is opened: explicit pragmas, migrations in
 * a transaction, then the idempotent missing-column check.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { REQUIRED_COLUMNS, SQLITE_MIGRATIONS, type Migration } from './migrations/index.js';

export type SqliteDatabase = Database.Database;

/**
 * How long a write waits in total for another connection's lock before a
 * retryable 503. The store waits asynchronously, between attempts.
 */
export const SQLITE_BUSY_TIMEOUT_MS = 5_000;
/**
 * SQLite's own busy_timeout: a synchronous wait that blocks the event loop,
 * so it is kept tiny (RELIABILITY 56); the store retries after it.
 */
export const SQLITE_SYNC_BUSY_TIMEOUT_MS = 10;
/** First pause between attempts on a busy database; doubles up to 32×. */
export const BUSY_RETRY_BASE_MS = 5;

/**
 * Opens `path` and migrates it. Opening may wait out another process's lock
 * synchronously (nothing is served yet); afterwards `busy_timeout` is
 * `options.busyTimeoutMs` (default SQLITE_BUSY_TIMEOUT_MS; the server's store
 * passes SQLITE_SYNC_BUSY_TIMEOUT_MS and waits asynchronously instead).
 */
export function openDatabase(
  path: string,
  options: { migrate?: boolean; busyTimeoutMs?: number } = {},
): SqliteDatabase {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // NORMAL is durable against process crashes (kill -9) in WAL mode; only an
  // OS crash or power loss can drop the last transactions.
  db.pragma('synchronous = NORMAL');
  db.pragma(`busy_timeout = ${SQLITE_BUSY_TIMEOUT_MS}`);
  db.pragma('foreign_keys = ON');
  if (options.migrate !== false) migrate(db);
  db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? SQLITE_BUSY_TIMEOUT_MS}`);
  return db;
}

/** Applies pending migrations, each in its own transaction, and records them. */
export function migrate(
  db: SqliteDatabase,
  migrations: readonly Migration[] = SQLITE_MIGRATIONS,
): number[] {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`);
  const isApplied = db.prepare('SELECT 1 FROM schema_migrations WHERE version = ?').pluck();
  const record = db.prepare(
    'INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)',
  );
  const ran: number[] = [];
  for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
    // `immediate` takes the write lock before the check, so two processes
    // starting at once cannot both apply the same migration.
    const applied = db
      .transaction(() => {
        if (isApplied.get(migration.version) !== undefined) return false;
        db.exec(migration.up);
        record.run(migration.version, migration.name, new Date().toISOString());
        return true;
      })
      .immediate();
    if (applied) ran.push(migration.version);
  }
  ensureColumns(db);
  return ran;
}

/** Adds any missing column of the applied migrations; safe to run on every start. */
export function ensureColumns(db: SqliteDatabase): string[] {
  const applied = new Set(
    db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[],
  );
  const added: string[] = [];
  for (const { since, table, column, definition } of REQUIRED_COLUMNS) {
    if (!applied.has(since)) continue;
    const columns = db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[];
    if (columns.length === 0 || columns.some((c) => c.name === column)) continue;
    db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${definition}`);
    added.push(`${table}.${column}`);
  }
  return added;
}

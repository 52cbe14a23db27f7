/**
 * The one place a SQLite connection is opened: explicit pragmas, migrations in
 * a transaction, then the idempotent missing-column check.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { CairnError } from '../../errors.js';
import { SQLITE_MIGRATIONS, type Migration } from '../migrations/index.js';

export type SqliteDatabase = Database.Database;

/**
 * How long a write waits in total for another connection's lock before a
 * retryable 503. The store waits asynchronously, between attempts.
 */
export const SQLITE_BUSY_TIMEOUT_MS = 5_000;
/**
 * SQLite's own busy_timeout: a synchronous wait that blocks the event loop, so
 * it is kept tiny (other clients must not wait on it); the store retries after
 * it.
 */
export const SQLITE_SYNC_BUSY_TIMEOUT_MS = 10;
/** First pause between attempts on a busy database; doubles up to 32×. */
export const BUSY_RETRY_BASE_MS = 5;

/**
 * Opens `path` and migrates it. Opening may wait out another process's lock
 * synchronously (nothing is served yet); afterwards `busy_timeout` is
 * `options.busyTimeoutMs` (default SQLITE_BUSY_TIMEOUT_MS; the server's store
 * passes SQLITE_SYNC_BUSY_TIMEOUT_MS and waits asynchronously instead).
 * `cacheMb` bounds SQLite's page cache (default: as SQLite was built, 16 MB).
 */
export function openDatabase(
  path: string,
  options: { migrate?: boolean; busyTimeoutMs?: number; cacheMb?: number } = {},
): SqliteDatabase {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // NORMAL is durable against process crashes (kill -9) in WAL mode; only an
  // OS crash or power loss can drop the last transactions.
  db.pragma('synchronous = NORMAL');
  db.pragma(`busy_timeout = ${SQLITE_BUSY_TIMEOUT_MS}`);
  db.pragma('foreign_keys = ON');
  // Negative: a size in KiB rather than a number of pages.
  if (options.cacheMb !== undefined) db.pragma(`cache_size = ${-options.cacheMb * 1024}`);
  if (options.migrate !== false) migrate(db);
  db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? SQLITE_BUSY_TIMEOUT_MS}`);
  return db;
}

/**
 * Applies pending migrations, each in its own transaction, and records them.
 * Refuses a database that records a migration this build does not have: a
 * newer Cairn migrated it, and this one would misread its schema.
 */
export function migrate(
  db: SqliteDatabase,
  migrations: readonly Migration[] = SQLITE_MIGRATIONS,
): number[] {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`);
  refuseUnknownMigrations(db, migrations);
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
  ensureColumns(db, migrations);
  return ran;
}

function refuseUnknownMigrations(db: SqliteDatabase, migrations: readonly Migration[]): void {
  const known = new Set(migrations.map((m) => m.version));
  const recorded = db
    .prepare('SELECT version FROM schema_migrations ORDER BY version')
    .pluck()
    .all() as number[];
  const unknown = recorded.filter((version) => !known.has(version));
  if (unknown.length === 0) return;
  const newest = Math.max(...recorded);
  throw new CairnError(
    'DATABASE_TOO_NEW',
    `This database was migrated by a newer Cairn, version ${newest} (migrations ${unknown.join(', ')} are unknown to this one); upgrade Cairn to open it.`,
  );
}

/** A column the applied migrations create, with the definition that re-adds it. */
export interface RequiredColumn {
  readonly table: string;
  readonly column: string;
  readonly definition: string;
}

interface ColumnInfo {
  name: string;
  type: string;
  notnull: number;
  dflt_value: string | null;
  pk: number;
}

const requiredCache = new Map<string, readonly RequiredColumn[]>();

/**
 * The columns of ordinary tables that `migrations` create, read back from a
 * scratch in-memory database they are applied to: the migrations stay the one
 * source of truth, and a migration that adds a column needs no second entry
 * anywhere. Memoized per list of versions (the derivation takes a few ms).
 */
export function requiredColumns(migrations: readonly Migration[]): readonly RequiredColumn[] {
  const ordered = [...migrations].sort((a, b) => a.version - b.version);
  const key = ordered.map((m) => `${m.version}:${m.name}`).join(',');
  const cached = requiredCache.get(key);
  if (cached) return cached;
  const scratch = new Database(':memory:');
  try {
    for (const migration of ordered) scratch.exec(migration.up);
    const tables = scratch
      .prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' AND name NOT LIKE 'sqlite_%' ORDER BY name",
      )
      .pluck()
      .all() as string[];
    const columns: RequiredColumn[] = [];
    for (const table of tables) {
      // Shadow tables of FTS (messages_fts_data, …) belong to their virtual table.
      if (/_(data|idx|content|docsize|config)$/.test(table)) continue;
      for (const info of scratch.prepare(`PRAGMA table_info(${table})`).all() as ColumnInfo[]) {
        // A primary key or a NOT NULL column without a default cannot be added by ALTER.
        if (info.pk > 0 || (info.notnull === 1 && info.dflt_value === null)) continue;
        const definition = [
          info.type,
          info.notnull === 1 ? 'NOT NULL' : '',
          info.dflt_value !== null ? `DEFAULT ${info.dflt_value}` : '',
        ]
          .filter(Boolean)
          .join(' ');
        columns.push({ table, column: info.name, definition });
      }
    }
    requiredCache.set(key, columns);
    return columns;
  } finally {
    scratch.close();
  }
}

/**
 * Adds any missing column of the applied migrations (a database made by an
 * older build, or one whose migration half-applied); safe to run on every
 * start. Only the migrations recorded as applied count, so a later migration
 * that adds its column with ALTER never finds it there first.
 */
export function ensureColumns(
  db: SqliteDatabase,
  migrations: readonly Migration[] = SQLITE_MIGRATIONS,
): string[] {
  const applied = new Set(
    db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[],
  );
  const added: string[] = [];
  const byTable = new Map<string, string[]>();
  for (const { table, column, definition } of requiredColumns(
    migrations.filter((m) => applied.has(m.version)),
  )) {
    let existing = byTable.get(table);
    if (existing === undefined) {
      existing = (db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).map(
        (c) => c.name,
      );
      byTable.set(table, existing);
    }
    if (existing.length === 0 || existing.includes(column)) continue;
    db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${definition}`);
    existing.push(column);
    added.push(`${table}.${column}`);
  }
  return added;
}

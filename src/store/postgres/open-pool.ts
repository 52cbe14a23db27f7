/**
 * The one place a Postgres pool is opened: the pool, its error mapping
 * (serialization failures and deadlocks are retried with backoff, a lost
 * server or an exhausted pool is a retryable 503, never a hang or a crash),
 * and the migrations, applied once however many instances start at once.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { DEFAULT_POOL_SIZE } from '../../config/settings.js';
import { CairnError } from '../../errors.js';
import { secondResultError } from '../second-result.js';
import { POSTGRES_MIGRATIONS, type Migration } from '../migrations/index.js';
import { prepared } from './prepared.js';

/** How long a unit of work waits for a free connection (or a new one) before a 503. */
export const PG_CONNECT_TIMEOUT_MS = 5_000;
/** Attempts of a unit of work that Postgres aborted as a serialization failure or deadlock. */
export const PG_MAX_ATTEMPTS = 5;
/** First pause before retrying an aborted unit of work; doubles with each attempt. */
export const PG_RETRY_BASE_MS = 10;

/**
 * The key of the transaction-scoped advisory lock that migrations run under:
 * instances starting together apply each migration exactly once.
 */
const MIGRATION_LOCK_KEY = 0x636169726e; // "cairn"

const INT8_OID = 20;

/**
 * BIGINT columns (ids, token sums, COUNT(*)) read as JavaScript numbers, as
 * SQLite returns them: every value Cairn stores stays far below 2^53.
 */
function getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown {
  if (oid === INT8_OID) return (value: string) => Number(value);
  return pg.types.getTypeParser(oid, format ?? 'text') as (value: string) => unknown;
}
const TYPES: pg.CustomTypesConfig = { getTypeParser };

export interface PoolOptions {
  poolSize?: number;
  connectTimeoutMs?: number;
}

/** Something that runs a query: the pool, or the client of an open transaction. */
export type Queryable = Pick<pg.PoolClient, 'query'>;

export function openPool(url: string, options: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.poolSize ?? DEFAULT_POOL_SIZE,
    connectionTimeoutMillis: options.connectTimeoutMs ?? PG_CONNECT_TIMEOUT_MS,
    keepAlive: true,
    types: TYPES,
  });
  // An idle connection the server closed (restart, failover) is dropped by the
  // pool and replaced on next use; without a listener the error would crash
  // the process.
  pool.on('error', () => undefined);
  // The same for a connection that dies while checked out (between the
  // statements of a unit of work): its next query fails, the unit of work
  // maps that to a 503 and discards the connection.
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

const CONNECTION_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (starting up / shutting down)
]);

function codeOf(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
}

/** Postgres aborted the transaction and it can simply run again. */
export function isRetryable(err: unknown): boolean {
  const code = codeOf(err);
  return code === '40001' || code === '40P01';
}

/** The connection is gone: the client must be discarded, not returned to the pool. */
export function isConnectionError(err: unknown): boolean {
  const code = codeOf(err);
  if (CONNECTION_ERROR_CODES.has(code) || code.startsWith('08')) return true;
  const message = err instanceof Error ? err.message : '';
  return /Connection terminated|connection is closed|Client has encountered a connection error|Client was closed/i.test(
    message,
  );
}

function isPoolTimeout(err: unknown): boolean {
  return err instanceof Error && /timeout exceeded when trying to connect/i.test(err.message);
}

/**
 * What a failed unit of work means to a client: a lost or unreachable server
 * is DATABASE_UNAVAILABLE, no free connection in time is SERVICE_UNAVAILABLE,
 * both 503 and retryable; anything else is passed on unchanged.
 */
export function translateError(err: unknown, poolSize: number): unknown {
  if (err instanceof CairnError) return err;
  const secondResult = secondResultError(err);
  if (secondResult) return secondResult;
  if (isPoolTimeout(err)) {
    return new CairnError(
      'SERVICE_UNAVAILABLE',
      `No database connection became free in time (database.poolSize is ${poolSize}). Retry the request shortly; if this persists, raise database.poolSize.`,
      { cause: err },
    );
  }
  if (isConnectionError(err)) {
    return new CairnError(
      'DATABASE_UNAVAILABLE',
      'The Postgres database cannot be reached; the write that met the outage was not saved. Retry when the database is back.',
      { cause: err },
    );
  }
  if (isRetryable(err)) {
    return new CairnError(
      'SERVICE_UNAVAILABLE',
      'The database kept aborting this write under contention. Retry the request shortly.',
      { cause: err },
    );
  }
  return err;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `attempt`, again with backoff while Postgres aborts it as a
 * serialization failure or deadlock; what finally fails is mapped by
 * `translateError`.
 */
async function retried<T>(poolSize: number, attempt: () => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (!isRetryable(err) || n >= PG_MAX_ATTEMPTS) throw translateError(err, poolSize);
    }
    await sleep(PG_RETRY_BASE_MS * 2 ** (n - 1) * (0.5 + Math.random()));
  }
}

/**
 * Runs `work` in one transaction on one pooled connection and commits it.
 * `work` awaits only its own queries (never a model call or another unit of
 * work), so a transaction is open for as long as its statements take.
 * Serialization failures and deadlocks roll back and run again with backoff.
 */
export function inTransaction<T>(
  pool: pg.Pool,
  poolSize: number,
  work: (client: Queryable) => Promise<T>,
): Promise<T> {
  return retried(poolSize, async () => {
    let client: pg.PoolClient;
    try {
      client = await pool.connect();
    } catch (err) {
      throw translateError(err, poolSize);
    }
    let broken = false;
    try {
      await client.query('BEGIN');
      const result = await work(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      broken = isConnectionError(err);
      if (!broken) {
        await client.query('ROLLBACK').catch(() => {
          broken = true;
        });
      }
      throw err;
    } finally {
      client.release(broken ? true : undefined);
    }
  });
}

/**
 * `work` — exactly one statement, sent on the pool — committed on its own,
 * with no BEGIN or COMMIT round trip: a unit of work of one statement, such
 * as a write that data-modifying CTEs make atomic. Retried like
 * `inTransaction` when Postgres aborts it, with the same error mapping.
 */
export function inStatement<T>(
  pool: pg.Pool,
  poolSize: number,
  work: (client: Queryable) => Promise<T>,
): Promise<T> {
  return retried(poolSize, () => work(pool));
}

/**
 * One query outside a transaction (reads), as a named statement (the texts
 * are the store's fixed set), with the same error mapping. `planEach`: sent
 * unnamed, so Postgres plans it with each call's values; a named statement
 * may be given a generic plan after five calls, chosen without them.
 */
export async function queryRows<R extends pg.QueryResultRow>(
  pool: pg.Pool,
  poolSize: number,
  sql: string,
  params: unknown[] = [],
  planEach = false,
): Promise<R[]> {
  try {
    return (await pool.query<R>(planEach ? { text: sql, values: params } : prepared(sql, params)))
      .rows;
  } catch (err) {
    throw translateError(err, poolSize);
  }
}

/**
 * Applies pending migrations and the missing-column step, all in one
 * transaction under an advisory lock, so instances starting at once wait for
 * each other and apply each migration exactly once. Refuses a database that
 * records a migration this build does not know: it was written by a newer
 * Cairn, and running older code against it could corrupt it.
 */
export async function migratePostgres(
  pool: pg.Pool,
  migrations: readonly Migration[] = POSTGRES_MIGRATIONS,
): Promise<{ ran: number[]; addedColumns: string[] }> {
  return inTransaction(pool, 1, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`);
    const recorded = await client.query<{ version: number; name: string }>(
      'SELECT version, name FROM schema_migrations ORDER BY version',
    );
    const known = new Set(migrations.map((m) => m.version));
    const unknown = recorded.rows.filter((r) => !known.has(r.version));
    if (unknown.length > 0) {
      throw new CairnError(
        'DATABASE_TOO_NEW',
        `The database has migration ${unknown.map((r) => `${r.version} (${r.name})`).join(', ')}, which this version of Cairn does not know: a newer Cairn has upgraded it. Upgrade Cairn on this machine before starting it against this database.`,
      );
    }
    const applied = new Set(recorded.rows.map((r) => r.version));
    const ran: number[] = [];
    for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
      if (applied.has(migration.version)) continue;
      await client.query(migration.up);
      await client.query(
        'INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)',
        [migration.version, migration.name, new Date().toISOString()],
      );
      applied.add(migration.version);
      ran.push(migration.version);
    }
    const required = await requiredPostgresColumns(
      client,
      migrations.filter((m) => applied.has(m.version)),
    );
    const addedColumns = await ensurePostgresColumns(client, required);
    return { ran, addedColumns };
  });
}

/** A column the applied migrations create, with the definition that re-adds it. */
export interface RequiredColumn {
  readonly table: string;
  readonly column: string;
  readonly definition: string;
}

interface ScratchColumn {
  table_name: string;
  column_name: string;
  type: string;
  not_null: boolean;
  is_primary: boolean;
  identity: string;
  generated: string;
  expression: string | null;
}

const requiredCache = new Map<string, readonly RequiredColumn[]>();

/**
 * The columns of the tables that `migrations` create, read back from a
 * scratch schema they are applied to inside a savepoint that is then rolled
 * back (nothing of it is ever committed): the migrations stay the one source
 * of truth, and a migration that adds a column needs no second entry
 * anywhere. Memoized per list of versions, so a process derives it once.
 */
export async function requiredPostgresColumns(
  client: Queryable,
  migrations: readonly Migration[],
): Promise<readonly RequiredColumn[]> {
  const ordered = [...migrations].sort((a, b) => a.version - b.version);
  const key = ordered.map((m) => `${m.version}:${m.name}`).join(',');
  const cached = requiredCache.get(key);
  if (cached) return cached;
  const scratch = `cairn_scratch_${randomBytes(6).toString('hex')}`;
  await client.query('SAVEPOINT cairn_scratch');
  try {
    await client.query(`CREATE SCHEMA ${scratch}`);
    // Undone with the savepoint, like everything else in it.
    await client.query(`SET LOCAL search_path TO ${scratch}`);
    for (const migration of ordered) await client.query(migration.up);
    const { rows } = await client.query<ScratchColumn>(
      `SELECT c.relname AS table_name, a.attname AS column_name,
              format_type(a.atttypid, a.atttypmod) AS type,
              a.attnotnull AS not_null,
              EXISTS (SELECT 1 FROM pg_index i
                      WHERE i.indrelid = c.oid AND i.indisprimary AND a.attnum = ANY (i.indkey)) AS is_primary,
              a.attidentity AS identity, a.attgenerated AS generated,
              pg_get_expr(d.adbin, d.adrelid) AS expression
       FROM pg_attribute a
       JOIN pg_class c ON c.oid = a.attrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY c.relname, a.attnum`,
      [scratch],
    );
    const columns: RequiredColumn[] = [];
    for (const row of rows) {
      const definition = columnDefinition(row);
      if (definition !== null) {
        columns.push({ table: row.table_name, column: row.column_name, definition });
      }
    }
    requiredCache.set(key, columns);
    return columns;
  } finally {
    await client.query('ROLLBACK TO SAVEPOINT cairn_scratch');
    await client.query('RELEASE SAVEPOINT cairn_scratch');
  }
}

/** How ALTER TABLE … ADD COLUMN re-creates `column`, or null when it cannot. */
function columnDefinition(column: ScratchColumn): string | null {
  // A key, an identity or serial column, or a NOT NULL column without a
  // default cannot be added to a table that has rows.
  if (column.is_primary || column.identity !== '') return null;
  if (column.generated === 's') {
    return `${column.type} GENERATED ALWAYS AS (${column.expression}) STORED`;
  }
  if (column.expression?.includes('nextval(')) return null;
  if (column.not_null && column.expression === null) return null;
  return [
    column.type,
    column.not_null ? 'NOT NULL' : '',
    column.expression !== null ? `DEFAULT ${column.expression}` : '',
  ]
    .filter(Boolean)
    .join(' ');
}

/**
 * Adds any missing column of the applied migrations (a database made by an
 * older build, or one whose migration half-applied); only alters a table
 * that exists and lacks one.
 */
async function ensurePostgresColumns(
  client: Queryable,
  required: readonly RequiredColumn[],
): Promise<string[]> {
  const existing = await client.query<{ table_name: string; column_name: string }>(
    `SELECT table_name, column_name FROM information_schema.columns
     WHERE table_schema = current_schema()`,
  );
  const tables = new Set(existing.rows.map((r) => r.table_name));
  const columns = new Set(existing.rows.map((r) => `${r.table_name}.${r.column_name}`));
  const added: string[] = [];
  for (const { table, column, definition } of required) {
    if (!tables.has(table) || columns.has(`${table}.${column}`)) continue;
    await client.query(`ALTER TABLE ${table} ADD COLUMN ${column} ${definition}`);
    added.push(`${table}.${column}`);
  }
  return added;
}

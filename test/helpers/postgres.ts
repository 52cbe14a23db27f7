/**
 * Fresh Postgres databases for tests: each test file (or app) gets its own
 * `cairn_test_<random>` database on the server of CAIRN_TEST_DATABASE_URL
 * (set by test/global-setup.ts: the machine's server or the embedded one it
 * started; default: the local server, user postgres), dropped afterwards.
 * When the server cannot be reached the test fails with a message saying how
 * to get one: Postgres tests are never skipped.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const TEST_DATABASE_URL =
  process.env.CAIRN_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  readonly name: string;
  /** The connection string of the new database. */
  readonly url: string;
  drop(): Promise<void>;
}

/** `url` with its database name replaced by `name`. */
export function withDatabase(url: string, name: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${name}`;
  return parsed.toString();
}

async function admin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({
    connectionString: TEST_DATABASE_URL,
    connectionTimeoutMillis: 5_000,
  });
  try {
    await client.connect();
  } catch (err) {
    throw new Error(
      `Postgres is not reachable at ${TEST_DATABASE_URL} (${(err as Error).message}). Run the tests through vitest (its global setup provides a server), or point CAIRN_TEST_DATABASE_URL at one.`,
    );
  }
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

export async function createTestDatabase(prefix = 'cairn_test'): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await admin((client) => client.query(`CREATE DATABASE ${name}`));
  return {
    name,
    url: withDatabase(TEST_DATABASE_URL, name),
    drop: () =>
      admin(async (client) => {
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      }),
  };
}

export interface TestSchema {
  /** The connection string of `database` with this schema first on the search_path. */
  readonly url: string;
  drop(): Promise<void>;
}

/**
 * A fresh, empty schema in `database`: much cheaper than a database per test,
 * and just as separate, because Cairn's tables and migrations live in the
 * connection's current schema.
 */
export async function createTestSchema(database: TestDatabase): Promise<TestSchema> {
  const name = `s_${randomBytes(6).toString('hex')}`;
  const run = async (sql: string) => {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      await client.query(sql);
    } finally {
      await client.end();
    }
  };
  await run(`CREATE SCHEMA ${name}`);
  const url = new URL(database.url);
  url.searchParams.set('options', `-c search_path=${name}`);
  return { url: url.toString(), drop: () => run(`DROP SCHEMA IF EXISTS ${name} CASCADE`) };
}

/**
 * A fresh, empty Postgres database per test file, on the shared server (the
 * Postgres tests' server, test/helpers/postgres.ts; or CAIRN_TEST_PG_ADMIN),
 * dropped afterwards. The name carries this branch's prefix so parallel
 * suites never meet.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { TEST_DATABASE_URL } from '../helpers/postgres.js';

const ADMIN_URL = process.env.CAIRN_TEST_PG_ADMIN ?? TEST_DATABASE_URL;

export interface ScratchDatabase {
  readonly url: string;
  readonly name: string;
  /** A pooled connection for the test's own checks. */
  readonly pool: pg.Pool;
  drop(): Promise<void>;
}

export async function createScratchDatabase(): Promise<ScratchDatabase> {
  const name = `cairn_p2_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = ADMIN_URL.replace(/\/[^/]*$/, `/${name}`);
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  // Tests here cut connections on purpose; an idle one the server closes must
  // be dropped by the pool, not crash the test process as an unhandled 'error'.
  pool.on('error', () => undefined);
  return {
    url,
    name,
    pool,
    async drop() {
      await pool.end();
      const client = new pg.Client({ connectionString: ADMIN_URL });
      await client.connect();
      try {
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await client.end();
      }
    },
  };
}

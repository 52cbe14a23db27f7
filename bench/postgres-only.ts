/**
 * `node --expose-gc dist-bench/bench/postgres-only.js`: only the Postgres rows
 * of `npm run bench` (bench/postgres-instances.ts: the chat turn on SQLite
 * and Postgres in the same run, statements per turn, turns/s with 1 and 3
 * instances), with the bench's fake.
 */
import { postgresRows } from './postgres-instances.js';
import { printRowsOnly } from './rows-only.js';

await printRowsOnly(postgresRows);

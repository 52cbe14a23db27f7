/**
 * Automatic recall's cost per model call: `AutomaticRecall.recall` (query
 * terms, the one full-text query over the compacted messages, scoring,
 * fitting and rendering the block) timed in-process against a real store,
 * SQLite and Postgres, for one session of RECALL_BENCH_SIZES compacted
 * messages among RECALL_BENCH_OTHER messages of other sessions (500 each)
 * that share the index, as on a real server. The messages are generated
 * prose over a 2 000-word vocabulary (a Zipf-like mix, so common words match
 * many rows and rare ones few; the commonest are in nine messages of ten, the
 * worst case); every query is a different eight-word question drawn the same
 * way. Median and p95 over RECALL_BENCH_QUERIES calls after a tenth as many
 * unmeasured ones.
 *
 * Also the compaction eval with the offline model (its default 40 facts,
 * 10 compactions, seed 1): the figures the guide's eval chapter quotes
 * (RECALL_BENCH_EVAL=0 skips it).
 *
 * Figures (a busy 2-core machine shared with other builds; median / p95 per call):
 *
 *   store     session   whole index    before (words only)    after (session in the MATCH)
 *   SQLite     1 000        21 000       1 988 / 9 514 ms    13.7 / 53 ms
 *   SQLite     1 000       101 000     10 610 / 39 315 ms    31.8 / 74 ms
 *   SQLite    20 000        40 000                      —    66.4 / 171 ms
 *   SQLite    20 000       120 000                      —    48.5 / 90 ms
 *   Postgres   1 000        21 000          6.4 / 11.7 ms     2.8 / 12 ms
 *   Postgres   1 000       101 000          4.9 / 13.6 ms     7.2 / 19 ms
 *   Postgres  20 000        40 000                      —    60.8 / 126 ms
 *   Postgres  20 000       120 000                      —    63.2 / 120 ms
 *   (before: 10 queries; after: 50. Postgres needed no change.)
 *
 * Then SQLite's ranking (50 queries, the same hour, the ranked query against
 * src/store/recall-rank.ts):
 *
 *   store     session   whole index    FTS5 bm25()            BM25 over the session's matches
 *   SQLite     1 000       101 000      11.6–13.9 / 18–23 ms    5.9 / 9.6 ms
 *   SQLite    20 000       120 000      33.4 / 58 ms            13.6 / 20.8 ms
 *
 * Before, SQLite's planner walked the session's rows by the (session_id, seq)
 * index and ran the whole MATCH once per row by rowid, so each call cost
 * (session rows) x (the words' posting lists over the whole database). Now the
 * index holds each message's session and the query runs one MATCH naming it,
 * first (CROSS JOIN), so FTS5 intersects posting lists. What still grew with
 * the database was bm25's document frequency of each word, which FTS5 counts
 * over the whole index once per query, and prefix words, which FTS5 reads in
 * every session however the query is limited, so the ranked query read them
 * twice. The store now reads each word once and ranks over the session's own
 * rows (the table above); the prefix words are what is left. Postgres starts
 * from the session either way: the (session_id, seq)
 * index with common words, a BitmapAnd with the GIN index with rare ones.
 *
 * Run: npm run build && npx tsc -p tsconfig.bench.json && node dist-bench/bench/recall.js
 * (CAIRN_BENCH_DATABASE_URL: the Postgres server, default the local one.)
 * The defaults (sessions of 1 000 and 20 000 among 100 000 others, 50 queries)
 * finish in a few minutes.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type * as AppModule from '../src/app.js';
import { runCompactionEval, formatEvalReport } from '../src/eval/compaction-eval.js';
import type * as EvalCliModule from '../src/cli/eval-compaction.js';
import type * as CommandsModule from '../src/cli/commands.js';
import { loadSettings } from '../src/config/settings.js';
import type { ChatMessage } from '../src/llm/messages.js';
import type { ObservedCall } from '../src/llm/observed-model.js';
import { AutomaticRecall } from '../src/recall/automatic-recall.js';
import { RecallLedger } from '../src/recall/recall-ledger.js';
import type { GuardedTurn } from '../src/runtime/context-guard.js';
import { PgStore } from '../src/store/postgres/pg-store.js';
import { SqliteStore } from '../src/store/sqlite/sqlite-store.js';
import type { Store } from '../src/store/store.js';
import { seededRandom } from '../src/eval/planted-facts.js';
import { percentile } from './compacted-tail.js';
import { RECALL_BENCH_AGENT } from './recall-cost.js';

const DIST = new URL('../../dist/', import.meta.url);
const SIZES = (process.env.RECALL_BENCH_SIZES ?? '1000,20000').split(',').map(Number);
/** Messages of other sessions sharing the index, spread over sessions of OTHER_SESSION_SIZE. */
const OTHER_MESSAGES = Number(process.env.RECALL_BENCH_OTHER ?? 100_000);
const OTHER_SESSION_SIZE = 500;
const QUERIES = Number(process.env.RECALL_BENCH_QUERIES ?? 50);
const WARMUP = Math.min(20, Math.ceil(QUERIES / 10));
const SEED_BATCH = 5_000;
const ADMIN_URL =
  process.env.CAIRN_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

const random = seededRandom(42);
const SYLLABLES = ['ka', 'lo', 'mi', 'ren', 'to', 'sa', 'vel', 'dor', 'ni', 'pa', 'qua', 'ber'];
const VOCABULARY = Array.from({ length: 2_000 }, (_, i) => {
  let word = '';
  for (let n = i + 1; n > 0; n = Math.floor(n / SYLLABLES.length))
    word += SYLLABLES[n % SYLLABLES.length];
  return word;
});

/** A word, the first ones far more often (rank r drawn with weight ~1/r). */
function word(): string {
  const r = Math.floor(Math.exp(random() * Math.log(VOCABULARY.length)));
  return VOCABULARY[Math.min(r, VOCABULARY.length - 1)]!;
}
const sentence = (words: number) => Array.from({ length: words }, word).join(' ');

function messages(count: number): ChatMessage[] {
  return Array.from({ length: count }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `${sentence(12 + Math.floor(random() * 40))}.`,
  }));
}

/** Bulk rows for one dialect: the bench seeds with plain INSERTs, not through the turn path. */
type InsertRows = (
  sessionId: string,
  rows: { seq: number; role: string; content: string }[],
) => Promise<void>;

async function seed(store: Store, insert: InsertRows, count: number): Promise<string> {
  const session = await store.createSession({
    agentName: 'bench',
    mode: 'chat',
    compactCount: 50,
    systemPrompt: 'You help.',
  });
  for (let done = 0; done < count; done += SEED_BATCH) {
    const rows = messages(Math.min(SEED_BATCH, count - done)).map((m, i) => ({
      seq: done + i + 2,
      role: m.role,
      content: m.content ?? '',
    }));
    await insert(session.id, rows);
  }
  return session.id;
}

async function measure(store: Store, insert: InsertRows, label: string): Promise<string[]> {
  const recall = new AutomaticRecall({
    store,
    contextWindow: 128_000,
    estimate: async () => 2_000,
    ledger: new RecallLedger(),
  });
  for (let done = 0; done < OTHER_MESSAGES; done += OTHER_SESSION_SIZE)
    await seed(store, insert, Math.min(OTHER_SESSION_SIZE, OTHER_MESSAGES - done));
  const rows: string[] = [];
  for (const size of SIZES) {
    const seeding = performance.now();
    const id = await seed(store, insert, size);
    console.error(`${label}: seeded ${size} in ${Math.round(performance.now() - seeding)} ms`);
    const session = (await store.findSession(id))!;
    const turn = { session, agent: RECALL_BENCH_AGENT } as unknown as GuardedTurn;
    const times: number[] = [];
    let recalled = 0;
    for (let i = 0; i < WARMUP + QUERIES; i++) {
      const context: ChatMessage[] = [
        { role: 'system', content: 'You help.' },
        { role: 'user', content: `${sentence(8)}?` },
      ];
      const started = performance.now();
      const { done } = await recall.recall(turn, context);
      const ms = performance.now() - started;
      if (i >= WARMUP) {
        times.push(ms);
        recalled += done?.seqs.length ?? 0;
      }
    }
    times.sort((a, b) => a - b);
    console.error(`${label} ${size}: median ${percentile(times, 50).toFixed(2)} ms`);
    rows.push(
      `| recall per model call, ${label}, ${size.toLocaleString('en')} compacted of ${(size + OTHER_MESSAGES).toLocaleString('en')} | ${percentile(times, 50).toFixed(2)} ms | ${percentile(times, 95).toFixed(2)} ms | ${(recalled / QUERIES).toFixed(1)} messages |`,
    );
  }
  return rows;
}

async function withAdmin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

async function offlineEval(): Promise<string> {
  const home = mkdtempSync(join(tmpdir(), 'cairn-bench-eval-'));
  try {
    // The app from dist/ (what `npm start` runs; it reads the package version).
    const { init } = (await import(new URL('cli/commands.js', DIST).href)) as typeof CommandsModule;
    const { evalSettings } = (await import(
      new URL('cli/eval-compaction.js', DIST).href
    )) as typeof EvalCliModule;
    const { startApp } = (await import(new URL('app.js', DIST).href)) as typeof AppModule;
    init(home);
    const settings = evalSettings(loadSettings({ home, env: {} }), home);
    const calls: ObservedCall[] = [];
    const app = await startApp(settings, {
      logger: false,
      daemons: false,
      observeModelCall: (call) => calls.push(call),
    });
    try {
      const started = performance.now();
      const report = await runCompactionEval({
        app,
        agentName: 'assistant',
        facts: 40,
        compactions: 10,
        seed: 1,
        calls,
        scoreAnswers: false,
      });
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      return `${formatEvalReport(report)}\n(eval wall time ${seconds} s)`;
    } finally {
      await app.close();
    }
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-recall-'));
  const rows: string[] = [];
  // It writes around the store's writer, so no commit would call a background checkpoint.
  const sqlite = new SqliteStore(join(dir, 'bench.db'), { checkpoints: 'inline' });
  const insertSqlite: InsertRows = async (sessionId, batch) => {
    const insert = sqlite.db.prepare(
      'INSERT INTO messages (session_id, seq, role, content, chars, created_at) VALUES (?, ?, ?, ?, ?, ?)',
    );
    const at = new Date().toISOString();
    sqlite.db.transaction(() => {
      for (const row of batch)
        insert.run(sessionId, row.seq, row.role, row.content, row.content.length, at);
    })();
    const last = batch.at(-1)!.seq;
    sqlite.db
      .prepare('UPDATE sessions SET compact_seq = ?, compact_size = ?, last_seq = ? WHERE id = ?')
      .run(last, last - 1, last, sessionId);
  };
  try {
    rows.push(...(await measure(sqlite, insertSqlite, 'SQLite')));
  } finally {
    await sqlite.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const name = `cairn_bench_${randomBytes(5).toString('hex')}`;
  await withAdmin((c) => c.query(`CREATE DATABASE ${name}`));
  try {
    const url = new URL(ADMIN_URL);
    url.pathname = `/${name}`;
    const store = await PgStore.open(url.toString());
    const client = new pg.Client({ connectionString: url.toString() });
    await client.connect();
    const insertPg: InsertRows = async (sessionId, batch) => {
      await client.query(
        `INSERT INTO messages (session_id, seq, role, content, chars, created_at)
         SELECT $1, s, r, c, length(c), $5 FROM unnest($2::int[], $3::text[], $4::text[]) AS t(s, r, c)`,
        [
          sessionId,
          batch.map((r) => r.seq),
          batch.map((r) => r.role),
          batch.map((r) => r.content),
          new Date().toISOString(),
        ],
      );
      const last = batch.at(-1)!.seq;
      await client.query(
        'UPDATE sessions SET compact_seq = $1, compact_size = $2, last_seq = $1 WHERE id = $3',
        [last, last - 1, sessionId],
      );
    };
    try {
      await client.query('ANALYZE');
      rows.push(...(await measure(store, insertPg, 'Postgres')));
    } finally {
      await client.end();
      await store.close();
    }
  } finally {
    await withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
  }
  console.log('| figure | median | p95 | recalled per call |');
  console.log('|---|---:|---:|---:|');
  for (const row of rows) console.log(row);
  if (process.env.RECALL_BENCH_EVAL === '0') return;
  console.log('');
  console.log(await offlineEval());
}

await main();

/**
 * Recall's worst case: the CPU one automatic-recall call costs
 * (`AutomaticRecall.recall`: query terms, the store's search, ranking,
 * fitting and rendering the block) in one conversation that grows to 100,
 * 10 000 and 100 000 compacted messages, on a real store of each dialect.
 *
 * The conversation repeats its topic, as long ones do: every message is drawn
 * from a 30-word vocabulary, so each of those words is in about half of the
 * messages (the common-words case a varied vocabulary hides). Every 97th
 * message also holds one of a few hundred rare words (an id, a name), each
 * said in a handful of messages. Two kinds of question are timed at each size:
 * eight common words, and two rare words among six common ones. CPU time
 * (`process.cpuUsage`, this process: the Postgres server's work is not in
 * it, so its wall time is reported too and is what its aim is on), median
 * and p95 over QUERIES calls
 * after WARMUP unmeasured ones, in a process warmed first by
 * WARM_PROCESS_CALLS calls on a session of its own. The growing row is the common-words median at
 * 100 000 over the one at 100 (the aim: within 1.2×).
 *
 * Run alone: npm run build && npx tsc -p tsconfig.bench.json &&
 * node dist-bench/bench/recall-cost.js (RECALL_COST_SIZES, RECALL_COST_PG=0).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { DEFAULT_RECALL, type AgentConfig } from '../src/agents/agent-config.js';
import { seededRandom } from '../src/eval/planted-facts.js';
import type { ChatMessage } from '../src/llm/messages.js';
import { AutomaticRecall } from '../src/recall/automatic-recall.js';
import { RecallLedger } from '../src/recall/recall-ledger.js';
import type { GuardedTurn } from '../src/runtime/context-guard.js';
import { PgStore } from '../src/store/postgres/pg-store.js';
import { SqliteStore } from '../src/store/sqlite/sqlite-store.js';
import type { Store } from '../src/store/store.js';
import { percentile } from './compacted-tail.js';
import { ADMIN_URL, withAdmin } from './postgres-instances.js';

const SIZES = (process.env.RECALL_COST_SIZES ?? '100,10000,100000').split(',').map(Number);
const QUERIES = 60;
const WARMUP = 30;
const WARM_PROCESS_CALLS = 300;
const AIM_SQLITE_MS = 2;
const AIM_POSTGRES_MS = 5;
const AIM_GROWTH = 1.2;

const COMMON = (
  'deploy build cache queue order invoice service customer report schedule server client ' +
  'request reply model budget latency replica billing ticket release branch config database ' +
  'backup metric alert owner team plan'
).split(' ');
const RARE_EVERY = 97;
const RARE = Array.from({ length: 400 }, (_, i) => `zq${(i * 7919).toString(36)}x`);

/** The agent the recall benches recall for (its recall settings are the defaults). */
export const RECALL_BENCH_AGENT = {
  name: 'bench',
  defaultCompaction: {
    compactionCount: 50,
    maxSummaryChars: 12_000,
    summaryFormat: 'sections',
    recall: DEFAULT_RECALL,
  },
} as unknown as AgentConfig;

type InsertRows = (sessionId: string, from: number, contents: string[]) => Promise<void>;

function contents(random: () => number, from: number, count: number): string[] {
  return Array.from({ length: count }, (_, k) => {
    const i = from + k;
    const words = Array.from({ length: 14 }, () => COMMON[Math.floor(random() * COMMON.length)]!);
    if (i % RARE_EVERY === 0) words.push(RARE[(i / RARE_EVERY) % RARE.length]!);
    return `${words.join(' ')}.`;
  });
}

export interface CostFigure {
  dialect: string;
  size: number;
  kind: 'common' | 'rare';
  cpuMedian: number;
  cpuP95: number;
  wallMedian: number;
  recalled: number;
}

async function measure(store: Store, insert: InsertRows, dialect: string): Promise<CostFigure[]> {
  const random = seededRandom(7);
  const recall = new AutomaticRecall({
    store,
    contextWindow: 128_000,
    estimate: async () => 2_000,
    ledger: new RecallLedger(),
  });
  const session = await store.createSession({
    agentName: 'bench',
    mode: 'chat',
    compactCount: 50,
    systemPrompt: 'You help.',
  });
  // A warm process (V8 done compiling): untimed calls on a session of its own first.
  const warm = await store.createSession({
    agentName: 'bench',
    mode: 'chat',
    compactCount: 50,
    systemPrompt: 'You help.',
  });
  await insert(warm.id, 2, contents(random, 0, 2_000));
  const warmTurn = {
    session: (await store.findSession(warm.id))!,
    agent: RECALL_BENCH_AGENT,
  } as unknown as GuardedTurn;
  for (let q = 0; q < WARM_PROCESS_CALLS; q++) {
    const words = Array.from({ length: 8 }, () => COMMON[Math.floor(random() * COMMON.length)]!);
    await recall.recall(warmTurn, [{ role: 'user', content: words.join(' ') }]);
  }
  const figures: CostFigure[] = [];
  let stored = 0;
  for (const size of SIZES) {
    while (stored < size) {
      const count = Math.min(10_000, size - stored);
      await insert(session.id, stored + 2, contents(random, stored, count));
      stored += count;
    }
    const turn = {
      session: (await store.findSession(session.id))!,
      agent: RECALL_BENCH_AGENT,
    } as unknown as GuardedTurn;
    for (const kind of ['common', 'rare'] as const) {
      const cpu: number[] = [];
      const wall: number[] = [];
      let recalled = 0;
      for (let q = 0; q < WARMUP + QUERIES; q++) {
        const words = Array.from(
          { length: kind === 'common' ? 8 : 6 },
          () => COMMON[Math.floor(random() * COMMON.length)]!,
        );
        if (kind === 'rare') {
          const planted = Math.floor(random() * Math.min(RARE.length, size / RARE_EVERY));
          words.push(RARE[planted]!, RARE[(planted + 1) % RARE.length]!);
        }
        const context: ChatMessage[] = [{ role: 'user', content: `${words.join(' ')}?` }];
        const started = process.cpuUsage();
        const wallStarted = performance.now();
        const { done } = await recall.recall(turn, context);
        const wallMs = performance.now() - wallStarted;
        const used = process.cpuUsage(started);
        if (q < WARMUP) continue;
        cpu.push((used.user + used.system) / 1000);
        wall.push(wallMs);
        recalled += done?.seqs.length ?? 0;
      }
      cpu.sort((a, b) => a - b);
      wall.sort((a, b) => a - b);
      figures.push({
        dialect,
        size,
        kind,
        cpuMedian: percentile(cpu, 50),
        cpuP95: percentile(cpu, 95),
        wallMedian: percentile(wall, 50),
        recalled: recalled / QUERIES,
      });
    }
  }
  return figures;
}

async function sqliteFigures(): Promise<CostFigure[]> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-recall-cost-'));
  const store = new SqliteStore(join(dir, 'bench.db'), { checkpoints: 'inline' });
  const insert: InsertRows = async (sessionId, from, batch) => {
    const statement = store.db.prepare(
      'INSERT INTO messages (session_id, seq, role, content, chars, created_at) VALUES (?, ?, ?, ?, ?, ?)',
    );
    const at = new Date().toISOString();
    store.db.transaction(() => {
      batch.forEach((content, i) =>
        statement.run(
          sessionId,
          from + i,
          i % 2 === 0 ? 'user' : 'assistant',
          content,
          content.length,
          at,
        ),
      );
    })();
    const last = from + batch.length - 1;
    store.db
      .prepare('UPDATE sessions SET compact_seq = ?, compact_size = ?, last_seq = ? WHERE id = ?')
      .run(last, last - 1, last, sessionId);
    await store.indexHistory();
  };
  try {
    return await measure(store, insert, 'SQLite');
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function postgresFigures(): Promise<CostFigure[]> {
  const name = `cairn_bench_${randomBytes(5).toString('hex')}`;
  await withAdmin((c) => c.query(`CREATE DATABASE ${name}`));
  try {
    const url = new URL(ADMIN_URL);
    url.pathname = `/${name}`;
    const store = await PgStore.open(url.toString());
    const client = new pg.Client({ connectionString: url.toString() });
    await client.connect();
    const insert: InsertRows = async (sessionId, from, batch) => {
      await client.query(
        `INSERT INTO messages (session_id, seq, role, content, chars, created_at)
         SELECT $1, s, CASE WHEN s % 2 = 0 THEN 'user' ELSE 'assistant' END, c, length(c), $3
         FROM unnest($2::int[], $4::text[]) AS t(s, c)`,
        [sessionId, batch.map((_, i) => from + i), new Date().toISOString(), batch],
      );
      const last = from + batch.length - 1;
      await client.query(
        'UPDATE sessions SET compact_seq = $1, compact_size = $2, last_seq = $1 WHERE id = $3',
        [last, last - 1, sessionId],
      );
      // What autovacuum does after a bulk load: the GIN index's pending list merged.
      await client.query('VACUUM ANALYZE messages');
    };
    try {
      return await measure(store, insert, 'Postgres');
    } finally {
      await client.end();
      await store.close();
    }
  } finally {
    await withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
  }
}

const ms = (n: number): string => `${n.toFixed(2)} ms`;

/** The bench's rows: [figure, value, budget, ✓/✗]. */
export async function recallCostRows(): Promise<string[][]> {
  const figures = await sqliteFigures();
  if (process.env.RECALL_COST_PG !== '0') figures.push(...(await postgresFigures()));
  const rows: string[][] = [];
  for (const f of figures) {
    // On Postgres the work is the server's: its aim is on the wall time.
    const sqlite = f.dialect === 'SQLite';
    const aim = sqlite ? AIM_SQLITE_MS : AIM_POSTGRES_MS;
    const ok = f.size < 100_000 || (sqlite ? f.cpuMedian : f.wallMedian) <= aim;
    rows.push([
      `recall per call, ${f.dialect}, ${f.size.toLocaleString('en-US')} compacted, ${f.kind} words: CPU median / p95, wall median, items`,
      `${ms(f.cpuMedian)} / ${ms(f.cpuP95)}, ${ms(f.wallMedian)}, ${f.recalled.toFixed(1)}`,
      `≤ ${aim} ms ${sqlite ? 'CPU' : 'wall'} at 100 000`,
      f.size < 100_000 ? '' : ok ? '✓' : '✗',
    ]);
  }
  for (const dialect of new Set(figures.map((f) => f.dialect))) {
    const common = figures.filter((f) => f.dialect === dialect && f.kind === 'common');
    const first = common[0];
    const last = common.at(-1);
    if (!first || !last || first === last) continue;
    const cost = (f: CostFigure) => (dialect === 'SQLite' ? f.cpuMedian : f.wallMedian);
    const growth = cost(last) / Math.max(cost(first), 0.001);
    rows.push([
      `recall, growing conversation of common words, ${dialect}: ${dialect === 'SQLite' ? 'CPU' : 'wall'} median at ${last.size.toLocaleString('en-US')} over ${first.size.toLocaleString('en-US')}`,
      `${growth.toFixed(2)}× (${ms(cost(first))} → ${ms(cost(last))})`,
      `≤ ${AIM_GROWTH}×`,
      growth <= AIM_GROWTH ? '✓' : '✗',
    ]);
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const row of await recallCostRows()) console.log(`| ${row.join(' | ')} |`);
}

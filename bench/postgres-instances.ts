/**
 * The Postgres rows, on a fresh database of the
 * local server (CAIRN_BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres),
 * dropped afterwards.
 *
 * - Per-turn latency, Postgres vs SQLite: one app per store in this process,
 *   `chats.run` on one session (no HTTP), the fake model over loopback;
 *   the session is reset every RESET_EVERY turns so the context stays short.
 *   The two stores alternate batch by batch, so machine noise hits them alike.
 *   Aim: Postgres's median within POSTGRES_AIM_RATIO of SQLite's.
 * - Statements per chat turn on each store, counted for real after the timed
 *   turns (back to back, so the session lock is kept between them) and on a
 *   session's first turn, which takes the lock (test/helpers/statement-counter.ts:
 *   every `pg.Client#query` the turn issues, on the pool and the session-lock
 *   connection, BEGIN and COMMIT included; every better-sqlite3 statement
 *   execution, its transactions' BEGIN and COMMIT included). The event feed's reads, which
 *   run on the feed's own schedule and serve every turn at once, are not a
 *   turn's. Aim: at most POSTGRES_AIM_STATEMENTS on Postgres.
 * - turns/s with 1 and with 3 instances on one database: real `cairn serve`
 *   processes (dist/cli/main.js), CLIENTS clients each on its own session,
 *   client k sending to instance k mod N over HTTP. On a machine with few
 *   cores the instances compete for the same CPUs, so this shows the cost of
 *   coordination more than any gain from scale.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startBenchApp } from './bench-app.js';
import { percentile } from './compacted-tail.js';
import { StatementCounter, type StatementCount } from '../test/helpers/statement-counter.js';

/** The Postgres server the benches make their databases on. */
export const ADMIN_URL =
  process.env.CAIRN_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const AGENT = { name: 'pgbench', system: 'You are a helpful assistant.', tools: [] };

/**
 * Untimed turns per store first. Both paths keep getting faster for the
 * first several hundred turns while V8 compiles them (SQLite's more so, which
 * raises the ratio): at 100 the ratio read 2.32–2.40×, at 800 2.44–2.63×
 * (this machine), and the row should show the steady state.
 */
const WARMUP_TURNS = 800;
const BATCH = 10;
const ROUNDS = 40;
const RESET_EVERY = 20;
const CLIENTS = 24;
const TURNS_PER_CLIENT = 20;
const COUNTED_TURNS = 10;
const POSTGRES_AIM_RATIO = 2.5;
const POSTGRES_AIM_STATEMENTS = 8;

/** Runs `work` on a short-lived admin connection (create and drop bench databases). */
export async function withAdmin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

async function createDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `cairn_bench_${randomBytes(5).toString('hex')}`;
  await withAdmin((c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      await withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}

function model(baseURL: string) {
  return { main: { baseURL, model: 'bench-model', maxRetries: 0, timeoutMs: 10_000 } };
}

function stats(latencies: number[]): { median: number; p95: number } {
  const sorted = [...latencies].sort((a, b) => a - b);
  return { median: percentile(sorted, 50), p95: percentile(sorted, 95) };
}

async function latencyRows(baseURL: string, databaseUrl: string): Promise<string[][]> {
  const apps = [
    await startBenchApp(AGENT, { models: model(baseURL) }),
    await startBenchApp(AGENT, { models: model(baseURL), database: { url: databaseUrl } }),
  ];
  try {
    const sessions = await Promise.all(
      apps.map(({ app }) => app.sessions.create({ agentName: AGENT.name })),
    );
    const latencies: number[][] = [[], []];
    let turn = 0;
    const run = async (i: number, measure: boolean): Promise<void> => {
      const { app } = apps[i]!;
      const sessionId = sessions[i]!.id;
      for (let t = 0; t < BATCH; t++, turn++) {
        if (turn % RESET_EVERY === 0) await app.store.resetSession(sessionId);
        const started = performance.now();
        const result = await app.chats.run({
          agentName: AGENT.name,
          message: `question ${turn}`,
          sessionId,
        });
        if (result.reply !== 'ok') throw new Error(`postgres bench: reply ${result.reply}`);
        if (measure) latencies[i]!.push(performance.now() - started);
      }
    };
    for (let w = 0; w < WARMUP_TURNS / BATCH; w++) for (const i of [0, 1]) await run(i, false);
    for (let round = 0; round < ROUNDS; round++)
      for (const i of round % 2 === 0 ? [0, 1] : [1, 0]) await run(i, true);
    // Counted after the timed turns, so the counting costs them nothing.
    const counter = StatementCounter.install();
    const counted: StatementCount[] = [];
    const firstTurn: number[] = [];
    try {
      for (const i of [0, 1]) {
        const { app } = apps[i]!;
        const total: StatementCount = { postgres: 0, sqlite: 0 };
        for (let t = 0; t < COUNTED_TURNS; t++, turn++) {
          const { statements } = await counter.count(() =>
            app.chats.run({
              agentName: AGENT.name,
              message: `question ${turn}`,
              sessionId: sessions[i]!.id,
            }),
          );
          total.postgres += statements.postgres;
          total.sqlite += statements.sqlite;
        }
        counted.push(total);
      }
      // A session's first turn: the session lock is taken, not kept from a turn before.
      for (const i of [0, 1]) {
        const { app } = apps[i]!;
        const fresh = await app.sessions.create({ agentName: AGENT.name });
        const { statements } = await counter.count(() =>
          app.chats.run({ agentName: AGENT.name, message: 'first', sessionId: fresh.id }),
        );
        firstTurn.push(i === 0 ? statements.sqlite : statements.postgres);
      }
    } finally {
      counter.uninstall();
    }
    const perTurn = (n: number) => (n / COUNTED_TURNS).toFixed(1);
    const sqliteStatements = perTurn(counted[0]!.sqlite);
    const postgresStatements = perTurn(counted[1]!.postgres);
    const [sqlite, postgres] = latencies.map(stats) as [
      { median: number; p95: number },
      { median: number; p95: number },
    ];
    const ratio = postgres.median / sqlite.median;
    const cell = (s: { median: number; p95: number }) =>
      `${s.median.toFixed(2)} ms / ${s.p95.toFixed(2)} ms`;
    return [
      [
        `chat turn in process (chats.run, fake over loopback, ≤ ${RESET_EVERY * 2}-message context) on SQLite: median / p95`,
        cell(sqlite),
        '—',
        '',
      ],
      [
        'the same on Postgres (local server, one instance: pool + session lock + event feed)',
        `${cell(postgres)} (${ratio.toFixed(2)}× of SQLite)`,
        `median ≤ ${POSTGRES_AIM_RATIO}× of SQLite's`,
        ratio <= POSTGRES_AIM_RATIO ? '✓' : '✗',
      ],
      [
        "SQL statements per chat turn, counted (SQLite / Postgres; locks, BEGIN, COMMIT and events included): back to back on one session (the lock kept between turns); a session's first turn",
        `${sqliteStatements} / ${postgresStatements}; ${firstTurn[0]} / ${firstTurn[1]}`,
        `≤ ${POSTGRES_AIM_STATEMENTS} on Postgres`,
        Math.max(Number(postgresStatements), firstTurn[1]!) <= POSTGRES_AIM_STATEMENTS ? '✓' : '✗',
      ],
    ];
  } finally {
    for (const { close } of apps) await close();
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

async function startInstance(home: string): Promise<{ child: ChildProcess; url: string }> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env))
    if (!key.startsWith('CAIRN_') && key !== 'DATABASE_URL') env[key] = value;
  const child = spawn(process.execPath, [CLI, 'serve', '--no-daemons'], {
    env: {
      ...env,
      CAIRN_HOME: home,
      CAIRN_HOST: '127.0.0.1',
      CAIRN_PORT: String(port),
      CAIRN_LOG_LEVEL: 'error',
    },
    stdio: 'ignore',
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${url}/health`)).ok) return { child, url };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill('SIGKILL');
  throw new Error('postgres bench: cairn serve did not start');
}

async function throughput(home: string, instances: number): Promise<number> {
  const servers: { child: ChildProcess; url: string }[] = [];
  try {
    for (let i = 0; i < instances; i++) servers.push(await startInstance(home));
    const sessions: string[] = [];
    for (let c = 0; c < CLIENTS; c++) {
      const res = await fetch(`${servers[0]!.url}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ agentName: AGENT.name }),
      });
      sessions.push(((await res.json()) as { session: { id: string } }).session.id);
    }
    const started = performance.now();
    await Promise.all(
      sessions.map(async (sessionId, c) => {
        const url = servers[c % instances]!.url;
        for (let t = 0; t < TURNS_PER_CLIENT; t++) {
          const res = await fetch(`${url}/agents/${AGENT.name}/chat`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ message: `q ${t}`, sessionId }),
          });
          if (res.status !== 200) throw new Error(`postgres bench: HTTP ${res.status}`);
          await res.arrayBuffer();
        }
      }),
    );
    return (CLIENTS * TURNS_PER_CLIENT) / ((performance.now() - started) / 1000);
  } finally {
    for (const { child } of servers) child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function instanceRows(baseURL: string, databaseUrl: string): Promise<string[][]> {
  const home = mkdtempSync(join(tmpdir(), 'cairn-bench-pg-'));
  try {
    mkdirSync(join(home, 'agents', AGENT.name), { recursive: true });
    writeFileSync(join(home, 'agents', AGENT.name, 'agent.json'), JSON.stringify(AGENT));
    writeFileSync(
      join(home, 'cairn.json'),
      JSON.stringify({ database: { url: databaseUrl }, models: model(baseURL) }),
    );
    await throughput(home, 1); // warm-up: migrations, caches
    const one = await throughput(home, 1);
    const three = await throughput(home, 3);
    const shape = `${CLIENTS} clients on their own sessions, HTTP`;
    return [
      [`chat turns/s, 1 instance on Postgres (${shape})`, one.toFixed(0), '—', ''],
      [
        `chat turns/s, 3 instances on one Postgres database (${shape}, round-robin)`,
        `${three.toFixed(0)} (${(three / one).toFixed(2)}× of 1)`,
        '—',
        '',
      ],
    ];
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

export async function postgresRows(baseURL: string): Promise<string[][]> {
  let db: { url: string; drop: () => Promise<void> };
  try {
    db = await createDatabase();
  } catch (err) {
    return [[`Postgres rows: no server at ${ADMIN_URL}`, (err as Error).message, '—', '']];
  }
  try {
    return [...(await latencyRows(baseURL, db.url)), ...(await instanceRows(baseURL, db.url))];
  } finally {
    await db.drop();
  }
}

/**
 * `npm run soak -- --minutes N`: a bounded soak of a real
 * `cairn serve` process (the compiled dist/cli/main.js, daemons on) against
 * the fake model, on 127.0.0.1 only. It stops by itself after N minutes
 * (default 10, at most 240) and prints one table row per sample:
 *
 * - rss MB, fds: the server process's resident memory (/proc/<pid>/status)
 *   and open file descriptors (/proc/<pid>/fd), sampled now; heap MB: its V8
 *   heap in use (`cairn_process_heap_used_bytes` from GET /metrics);
 * - db MB, wal KB: sizes of the SQLite database file and its write-ahead log;
 * - turns: chats answered 200 since the previous row; compactions: manual
 *   POST /sessions/:id/compact answered 200; auto: the server's automatic
 *   compactions since it started (the conversations stay at a steady size);
 * - lock: answers that say the database was busy or locked (503
 *   SERVICE_UNAVAILABLE while not restarting); 5xx: every other 5xx;
 * - down: requests refused while the server was restarting (expected);
 * - restarts: SIGTERM and kill -9 restarts so far.
 *
 * Load: SESSIONS clients each chat on their own session (a short pause
 * between turns); a daemon agent ticks every few seconds; one manual
 * compaction every COMPACT_EVERY_MS; a restart every RESTART_EVERY_MS,
 * alternating SIGTERM and kill -9 (`--no-restarts` turns them off, to watch
 * one process's memory for the whole run). At the end: integrity_check, no
 * task left running, and — without restarts — RSS at the end against RSS
 * after the warm-up: the median of the last RSS_WINDOW_MS of samples against
 * the median of the RSS_WINDOW_MS after the warm-up. Medians, because one
 * sample lands anywhere in a garbage-collection cycle. Exit code 1 if any
 * lock error, 5xx, integrity problem, or (without restarts) the end figure
 * more than MAX_RSS_GROWTH above the warm-up figure.
 *
 * Two caches fill by design, and the warm-up waits for both, so that growth
 * after it is what the process keeps, not what it was allowed to take:
 *
 * - V8's heap: left alone, V8 sizes the old generation from the allocation
 *   rate and the machine's memory (a server with 60 MB live can sit at
 *   300 MB), so the server runs with --max-old-space-size=SOAK_HEAP_MB, as a
 *   production server should (CAIRN_SOAK_NODE_OPTIONS replaces it);
 * - SQLite's page cache (`database.cacheMb`, 16 MB by default), which fills
 *   as the run writes new pages: the soak's server has SOAK_CACHE_MB, and
 *   the warm-up lasts until the database has grown by that much (and at
 *   least WARM_UP_MS).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { startFakeLlmServer } from '../test/fakes/llm-server.js';
import { freePort } from '../test/process/spawn-server.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'dist/cli/main.js');
const SESSIONS = 10;
const TURN_PAUSE_MS = 200;
const SAMPLE_MS = 10_000;
const COMPACT_EVERY_MS = 15_000;
const RESTART_EVERY_MS = 45_000;
const MAX_MINUTES = 240;
const WARM_UP_MS = 60_000;
/** RSS at the end may exceed RSS after the warm-up by this fraction at most. */
const MAX_RSS_GROWTH = 0.15;
/** The stretch of samples each RSS figure is the median of. */
const RSS_WINDOW_MS = 60_000;
/** The server's old-generation cap: about twice what the soak's server keeps live. */
const SOAK_HEAP_MB = 128;
/** The server's SQLite page cache (`database.cacheMb`): full within minutes of the run's writes. */
const SOAK_CACHE_MB = 2;
const READY_TIMEOUT_MS = 30_000;
/** Small enough that every session compacts several times a minute. */
const SOAK_CONTEXT_WINDOW = 4_096;

function minutesArg(argv: string[]): number {
  const at = argv.indexOf('--minutes');
  const value = at >= 0 ? Number(argv[at + 1]) : 10;
  if (!Number.isFinite(value) || value <= 0 || value > MAX_MINUTES) {
    console.error(`--minutes must be a number of minutes, 0 < N ≤ ${MAX_MINUTES}`);
    process.exit(2);
  }
  return value;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function makeSoakHome(baseURL: string): string {
  const home = mkdtempSync(join(tmpdir(), 'cairn-soak-'));
  const agents = {
    assistant: {
      name: 'assistant',
      description: 'Soak chat agent',
      system: 'You are a soak-test assistant.',
      tools: ['current_time'],
      maxIterations: 4,
      // Each conversation reaches its steady size within the warm-up and
      // stays there: automatic compaction at half the small window below.
      // Without it every turn carries a longer history than the one before,
      // and RSS grows with the working set, which is not a leak.
      defaultCompaction: { autoThreshold: 50 },
    },
    ticker: {
      name: 'ticker',
      description: 'Soak daemon',
      system: 'You are a daemon.',
      tools: [],
      daemon: { every: '5s', prompt: 'Report the status.' },
    },
  };
  for (const [name, agent] of Object.entries(agents)) {
    mkdirSync(join(home, 'agents', name), { recursive: true });
    writeFileSync(join(home, 'agents', name, 'agent.json'), JSON.stringify(agent));
  }
  writeFileSync(
    join(home, 'cairn.json'),
    JSON.stringify({
      models: {
        main: {
          baseURL,
          model: 'soak-model',
          maxRetries: 0,
          timeoutMs: 10_000,
          contextWindow: SOAK_CONTEXT_WINDOW,
        },
      },
      database: { cacheMb: SOAK_CACHE_MB },
    }),
  );
  return home;
}

class Server {
  child: ChildProcess | undefined;
  url = '';
  constructor(
    private readonly home: string,
    private readonly dbPath: string,
  ) {}

  async start(): Promise<void> {
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    const child = spawn(process.execPath, [CLI, 'serve'], {
      env: {
        PATH: process.env.PATH,
        CAIRN_HOME: this.home,
        CAIRN_DB: this.dbPath,
        CAIRN_HOST: '127.0.0.1',
        CAIRN_PORT: String(port),
        CAIRN_LOG_LEVEL: 'error',
        // e.g. --heapsnapshot-signal=SIGUSR2, to look inside a growing process.
        NODE_OPTIONS: process.env.CAIRN_SOAK_NODE_OPTIONS ?? `--max-old-space-size=${SOAK_HEAP_MB}`,
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    this.child = child;
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`cairn serve exited with ${child.exitCode}`);
      const ok = await fetch(`${this.url}/health`, { signal: AbortSignal.timeout(1_000) })
        .then((res) => res.status === 200)
        .catch(() => false);
      if (ok) return;
      await sleep(25);
    }
    throw new Error('cairn serve did not become ready');
  }

  async stop(signal: NodeJS.Signals): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill(signal);
    await exited;
  }
}

interface Counters {
  turns: number;
  compactions: number;
  lock: number;
  other5xx: number;
  down: number;
}

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return Math.round(kb / 1024);
}

function openFds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** From the server's metrics: its V8 heap in use, and its automatic compactions so far. */
async function serverFigures(url: string): Promise<{ heapMb?: number; autoCompactions: number }> {
  const text = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2_000) })
    .then((res) => res.text())
    .catch(() => '');
  const bytes = /^cairn_process_heap_used_bytes (\d+(?:\.\d+)?)/m.exec(text)?.[1];
  let autoCompactions = 0;
  for (const match of text.matchAll(
    /^cairn_compactions_total\{[^}]*trigger="auto"[^}]*\} (\d+)/gm,
  )) {
    autoCompactions += Number(match[1]);
  }
  return {
    ...(bytes === undefined ? {} : { heapMb: Math.round(Number(bytes) / 1024 / 1024) }),
    autoCompactions,
  };
}

/** The median RSS of `samples`, or undefined when there are none. */
function median(samples: readonly { mb: number }[]): number | undefined {
  if (samples.length === 0) return undefined;
  const sorted = samples.map((s) => s.mb).sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function fileBytes(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

function fileKb(path: string): number {
  try {
    return Math.round(statSync(path).size / 1024);
  } catch {
    return 0;
  }
}

async function main(): Promise<void> {
  const minutes = minutesArg(process.argv.slice(2));
  const restartsOn = !process.argv.includes('--no-restarts');
  // Validation off: the compiled fake cannot find its OpenAPI fixture, and
  // request shapes are the test suite's job, not the soak's.
  const fake = await startFakeLlmServer({ validate: false });
  fake.setDefault((body: { messages?: { role: string; content?: unknown }[] }) => {
    const last = [...(body.messages ?? [])].reverse().find((m) => m.role === 'user');
    const text = typeof last?.content === 'string' ? last.content : '';
    return { content: `soak reply to ${text.slice(0, 40)}`, delayMs: 20 };
  });
  const home = makeSoakHome(fake.baseURL);
  const dbPath = join(home, 'data', 'cairn.db');
  const server = new Server(home, dbPath);
  await server.start();

  const counters: Counters = { turns: 0, compactions: 0, lock: 0, other5xx: 0, down: 0 };
  const totals: Counters = { ...counters };
  let restarting = false;
  let restarts = 0;
  let running = true;
  const sessionIds: (string | undefined)[] = Array.from({ length: SESSIONS }, () => undefined);

  const firstErrors = new Set<string>();
  const count = (status: number, text: string): void => {
    if (status < 500) return;
    if (restarting) counters.down += 1;
    else if (/SERVICE_UNAVAILABLE|busy|locked/i.test(text)) counters.lock += 1;
    else counters.other5xx += 1;
    // Show each kind of failure once, so a failing soak says why.
    const kind = `${status} ${text.slice(0, 200)}`;
    if (!restarting && !firstErrors.has(kind) && firstErrors.size < 5) {
      firstErrors.add(kind);
      console.log(`first seen: HTTP ${kind}`);
    }
  };

  const client = async (index: number): Promise<void> => {
    for (let n = 0; running; n++) {
      try {
        const res = await fetch(`${server.url}/agents/assistant/chat`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            message: `client ${index} turn ${n}`,
            ...(sessionIds[index] ? { sessionId: sessionIds[index] } : {}),
          }),
          signal: AbortSignal.timeout(30_000),
        });
        const text = await res.text();
        if (res.status === 200) {
          counters.turns += 1;
          sessionIds[index] ??= (JSON.parse(text) as { sessionId: string }).sessionId;
        } else count(res.status, text);
      } catch {
        counters.down += 1; // connection refused or cut: the server is restarting
      }
      await sleep(TURN_PAUSE_MS);
    }
  };
  const clients = Array.from({ length: SESSIONS }, (_, i) => client(i));

  const compactor = setInterval(() => {
    const id = sessionIds[Math.floor(Math.random() * SESSIONS)];
    if (!id || restarting) return;
    void fetch(`${server.url}/sessions/${id}/compact`, { method: 'POST' })
      .then(async (res) => {
        const text = await res.text();
        if (res.status === 200) counters.compactions += 1;
        else count(res.status, text);
      })
      .catch(() => (counters.down += 1));
  }, COMPACT_EVERY_MS);

  const restarter = setInterval(() => {
    if (restarting || !restartsOn) return;
    restarting = true;
    const signal: NodeJS.Signals = restarts % 2 === 0 ? 'SIGTERM' : 'SIGKILL';
    void server
      .stop(signal)
      .then(() => server.start())
      .then(() => {
        restarts += 1;
      })
      .catch((err: unknown) => console.error(`restart failed: ${(err as Error).message}`))
      .finally(() => (restarting = false));
  }, RESTART_EVERY_MS);

  const started = Date.now();
  console.log(
    `soak: ${minutes} min, ${SESSIONS} sessions, a daemon every 5 s, ` +
      `${restartsOn ? 'restarts' : 'no restarts'}, home ${home}\n`,
  );
  console.log(
    '| t (s) | rss MB | heap MB | fds | db MB | wal KB | turns | compactions | auto | lock | 5xx | down | restarts |',
  );
  console.log(
    '|------:|-------:|--------:|----:|------:|-------:|------:|------------:|-----:|-----:|----:|-----:|---------:|',
  );
  const rssSamples: { atMs: number; mb: number }[] = [];
  const dbBytesAtStart = fileBytes(dbPath);
  /** When the warm-up ended: past WARM_UP_MS, with the database grown past SQLite's page cache. */
  let warmAtMs: number | undefined;
  const sample = async (): Promise<void> => {
    const pid = server.child?.pid;
    let rss = '-';
    let fds = '-';
    let heap = '-';
    let auto = '-';
    const t = Math.round((Date.now() - started) / 1000);
    try {
      if (pid !== undefined && !restarting) {
        const mb = rssMb(pid);
        rss = String(mb);
        fds = String(openFds(pid));
        const atMs = Date.now() - started;
        rssSamples.push({ atMs, mb });
        const grown = fileBytes(dbPath) - dbBytesAtStart >= SOAK_CACHE_MB * 1024 * 1024;
        if (warmAtMs === undefined && atMs >= WARM_UP_MS && grown) warmAtMs = atMs;
        const figures = await serverFigures(server.url);
        heap = String(figures.heapMb ?? '-');
        auto = String(figures.autoCompactions);
      }
    } catch {
      // the process is being replaced
    }
    console.log(
      `| ${t} | ${rss} | ${heap} | ${fds} | ${(fileBytes(dbPath) / 1e6).toFixed(1)} | ${fileKb(`${dbPath}-wal`)} | ${counters.turns} | ${counters.compactions} | ${auto} | ${counters.lock} | ${counters.other5xx} | ${counters.down} | ${restarts} |`,
    );
    // Forget the fake's records: they would grow for hours.
    fake.requests.length = 0;
    for (const key of Object.keys(counters) as (keyof Counters)[]) {
      totals[key] += counters[key];
      counters[key] = 0;
    }
  };
  const sampler = setInterval(() => void sample(), SAMPLE_MS);

  await sleep(minutes * 60_000);
  clearInterval(restarter);
  clearInterval(compactor);
  clearInterval(sampler);
  while (restarting) await sleep(50);
  running = false;
  await Promise.all(clients);
  await sample();
  await server.stop('SIGTERM');

  // A final start and stop closes out what the last run left, then check the file.
  await server.start();
  await server.stop('SIGTERM');
  const db = new Database(dbPath, { readonly: true });
  const integrity = db.pragma('integrity_check', { simple: true }) as string;
  const stuck = (
    db.prepare("SELECT COUNT(*) AS n FROM tasks WHERE status = 'running'").get() as { n: number }
  ).n;
  db.close();
  await fake.close();

  console.log(
    `\ntotals: ${totals.turns} turns, ${totals.compactions} compactions, ${restarts} restarts; ` +
      `${totals.lock} lock errors, ${totals.other5xx} other 5xx, ${totals.down} refused while restarting; ` +
      `integrity_check ${integrity}; ${stuck} task(s) stuck running`,
  );
  let memoryGrew = false;
  const endMs = rssSamples.at(-1)?.atMs ?? 0;
  const warmRss =
    warmAtMs === undefined
      ? undefined
      : median(rssSamples.filter((s) => s.atMs >= warmAtMs! && s.atMs < warmAtMs! + RSS_WINDOW_MS));
  const lastRss = median(rssSamples.filter((s) => s.atMs > endMs - RSS_WINDOW_MS));
  if (!restartsOn && (warmAtMs === undefined || warmAtMs + 2 * RSS_WINDOW_MS > endMs)) {
    memoryGrew = true;
    console.log(
      `rss: the warm-up ${warmAtMs === undefined ? 'never ended' : `ended at ${Math.round(warmAtMs / 1000)} s`}, too late to compare two minutes apart; run longer`,
    );
  } else if (!restartsOn && warmRss !== undefined && lastRss !== undefined) {
    const growth = (lastRss - warmRss) / warmRss;
    memoryGrew = growth > MAX_RSS_GROWTH;
    console.log(
      `rss (median of a minute): ${warmRss} MB after the warm-up (${Math.round(warmAtMs! / 1000)} s), ${lastRss} MB at the end ` +
        `(${(growth * 100).toFixed(1)} %, limit ${MAX_RSS_GROWTH * 100} %)`,
    );
  }
  rmSync(home, { recursive: true, force: true });
  const failed =
    totals.lock > 0 || totals.other5xx > 0 || integrity !== 'ok' || stuck > 0 || memoryGrew;
  process.exit(failed ? 1 : 0);
}

await main();

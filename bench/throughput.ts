/**
 * HTTP throughput at CLIENTS concurrent clients: Cairn against a bare fastify
 * + better-sqlite3 server doing the same writes, and against one writing only
 * the messages in one transaction (bench/throughput-server.ts says what each
 * does). Each server runs in its own process on 127.0.0.1; the
 * load generator is this process: CLIENTS clients over node's `http` with a
 * keep-alive Agent (one socket each), each on its own session (a session's
 * turns queue by design), each sending `POST /agents/assistant/chat`
 * (JSON, not streamed, the bearer key) and waiting for the 200 before the
 * next. Every answer is checked (200, a reply, two stored messages).
 *
 * A run: a fresh server on a fresh database, warmed up first: each client
 * runs PREWARM_TURNS turns on a session of its own that is then left alone
 * (not measured). Then each client creates the session it is measured on
 * with its first turn and runs WARMUP_TURNS more (not measured); then all
 * clients run until CLIENTS × TURNS_PER_CLIENT turns are done or RUN_MS has
 * passed, whichever is first.
 *
 * Why the separate warm-up: the measured part lasts about a second, and a
 * server's first few thousand requests are when V8 compiles its hot code, on
 * background threads that count in the process's CPU time. Measured without
 * it (this machine, Cairn): 278 µs per turn on V8's worker threads and 446 on
 * the main thread, against 61 and 379 after it; the bare servers' small code
 * warms sooner. The figures level off after about 60 turns per client (120
 * and 200 gave the same). The warm-up runs on other sessions, so the measured
 * conversations are exactly as long as before. turns/s = turns completed / wall time of the
 * measured part. The servers take turns, ROUNDS times each, the order
 * rotating each round, so drift on a shared machine hits all alike; a row
 * gives the median turns/s of each and the median of the per-round ratios.
 *
 * Beside turns/s, the CPU time each server process used per measured turn
 * (all its threads, user + system, read from /proc): what a turn costs the
 * server whatever else the machine was doing, which moves far less from run
 * to run than turns/s on a shared machine.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startScript } from './child-script.js';
import { percentile } from './compacted-tail.js';

/** The bearer key both servers require. */
export const THROUGHPUT_API_KEY = 'bench-throughput-key';
export const CLIENTS = 32;
/** Turns per client on a session of its own before the measured sessions start (see above). */
const PREWARM_TURNS = 60;
const WARMUP_TURNS = 10;
const TURNS_PER_CLIENT = 60;
const RUN_MS = 20_000;
const ROUNDS = 3;
/** Cairn within 15 % of the baseline's turns/s. */
export const AIM_RATIO = 0.85;

type Mode = 'cairn' | 'baseline' | 'minimal';

/** The kernel's clock ticks per second, in which /proc reports CPU time (USER_HZ: 100 on Linux). */
const CLOCK_TICKS_PER_SECOND = 100;

/** CPU time (user + system, ms) process `pid` has used so far; undefined without /proc. */
function cpuMsOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After the command name (in parentheses, which may hold spaces): utime and stime are the 12th and 13th fields.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/** One run's figures. */
export interface RunFigures {
  turnsPerSecond: number;
  /** The server process's CPU time per measured turn, ms; undefined without /proc. */
  cpuMsPerTurn: number | undefined;
}

interface ChatAnswer {
  sessionId: string;
  reply: string;
  messages: unknown[];
}

function post(agent: http.Agent, port: number, body: string): Promise<ChatAnswer> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/agents/assistant/chat',
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          authorization: `Bearer ${THROUGHPUT_API_KEY}`,
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          if (res.statusCode !== 200) {
            reject(new Error(`throughput: status ${res.statusCode}: ${text.slice(0, 200)}`));
            return;
          }
          const answer = JSON.parse(text) as ChatAnswer;
          if (!answer.reply || answer.messages.length !== 2) {
            reject(new Error(`throughput: unexpected answer ${text.slice(0, 200)}`));
            return;
          }
          resolve(answer);
        });
        res.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

/** One run against a fresh server of `mode`: measured turns/s and the server's CPU per turn. */
export async function throughputRun(mode: Mode): Promise<RunFigures> {
  const home = mkdtempSync(join(tmpdir(), `cairn-bench-${mode}-`));
  const server = startScript('throughput-server.js', [mode, home]);
  const agent = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });
  try {
    const { port } = JSON.parse(await server.line) as { port: number };
    const turn = (sessionId: string | undefined, message: string) =>
      post(agent, port, JSON.stringify(sessionId ? { message, sessionId } : { message }));
    /** Each client opens a session with `first(c)` and runs `turns` more on it, unmeasured. */
    const openSessions = (first: (c: number) => string, word: string, turns: number) =>
      Promise.all(
        Array.from({ length: CLIENTS }, async (_, c) => {
          const { sessionId } = await turn(undefined, first(c));
          for (let i = 0; i < turns; i++) await turn(sessionId, `${word} ${c}.${i}`);
          return sessionId;
        }),
      );
    await openSessions((c) => `first words of client ${c}`, 'pre-warm', PREWARM_TURNS);
    const sessions = await openSessions((c) => `hello from client ${c}`, 'warm-up', WARMUP_TURNS);
    let done = 0;
    const wanted = CLIENTS * TURNS_PER_CLIENT;
    const started = performance.now();
    const cpuBefore = cpuMsOf(server.child.pid);
    const deadline = started + RUN_MS;
    await Promise.all(
      sessions.map(async (sessionId, c) => {
        for (let i = 0; done < wanted && performance.now() < deadline; i++) {
          await turn(sessionId, `question ${c}.${i} about the deploy`);
          done += 1;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const cpuAfter = cpuMsOf(server.child.pid);
    const cpuMs =
      cpuBefore !== undefined && cpuAfter !== undefined ? cpuAfter - cpuBefore : undefined;
    return {
      turnsPerSecond: done / seconds,
      cpuMsPerTurn: cpuMs === undefined ? undefined : cpuMs / done,
    };
  } finally {
    agent.destroy();
    const exited = new Promise((resolve) => server.child.once('exit', resolve));
    server.child.kill('SIGTERM');
    await exited;
    rmSync(home, { recursive: true, force: true });
  }
}

export interface ThroughputResult {
  cairn: number[];
  baseline: number[];
  minimal: number[];
  /** Each server's CPU ms per turn, per round (NaN without /proc). */
  cpu: Record<Mode, number[]>;
  /** Cairn ÷ the baseline (the same writes), per round. */
  ratios: number[];
  /** Cairn ÷ the minimal server, per round. */
  minimalRatios: number[];
}

const MODES: readonly Mode[] = ['cairn', 'baseline', 'minimal'];

/** ROUNDS rounds of a run of each server, the order rotating each round. */
export async function measureThroughput(rounds = ROUNDS): Promise<ThroughputResult> {
  const result: ThroughputResult = {
    cairn: [],
    baseline: [],
    minimal: [],
    cpu: { cairn: [], baseline: [], minimal: [] },
    ratios: [],
    minimalRatios: [],
  };
  for (let round = 0; round < rounds; round++) {
    const order = MODES.map((_, i) => MODES[(i + round) % MODES.length]!);
    const runs: Partial<Record<Mode, RunFigures>> = {};
    for (const mode of order) runs[mode] = await throughputRun(mode);
    for (const mode of MODES) {
      result[mode].push(runs[mode]!.turnsPerSecond);
      result.cpu[mode].push(runs[mode]!.cpuMsPerTurn ?? Number.NaN);
    }
    result.ratios.push(runs.cairn!.turnsPerSecond / runs.baseline!.turnsPerSecond);
    result.minimalRatios.push(runs.cairn!.turnsPerSecond / runs.minimal!.turnsPerSecond);
  }
  return result;
}

const median = (values: readonly number[]): number =>
  percentile(
    [...values].sort((a, b) => a - b),
    50,
  );

export async function throughputRows(): Promise<string[][]> {
  const r = await measureThroughput();
  const ratio = median(r.ratios);
  const perRound = (ratios: readonly number[]) => ratios.map((x) => x.toFixed(2)).join(', ');
  const cpu = (mode: Mode) => `${median(r.cpu[mode]).toFixed(2)} ms`;
  return [
    [
      `chat turns/s over HTTP, ${CLIENTS} clients (own session each, keep-alive, offline model, bearer auth; each server warmed up with ${CLIENTS * PREWARM_TURNS} turns on other sessions): Cairn / bare fastify + better-sqlite3 doing the same writes (user message committed first, reply with the call record) (median of ${ROUNDS} rounds; per-round ratios ${perRound(r.ratios)})`,
      `${median(r.cairn).toFixed(0)} / ${median(r.baseline).toFixed(0)} (${ratio.toFixed(2)}×)`,
      `aim: Cairn ≥ ${AIM_RATIO}× the baseline`,
      ratio >= AIM_RATIO ? '✓' : '✗',
    ],
    [
      `… the same, against a bare server writing only both messages in one transaction (no call record; per-round ratios ${perRound(r.minimalRatios)})`,
      `${median(r.cairn).toFixed(0)} / ${median(r.minimal).toFixed(0)} (${median(r.minimalRatios).toFixed(2)}×)`,
      'for reference',
      '',
    ],
    [
      `… the server process's CPU time per turn (all threads, user + system; median of the rounds): Cairn / the bare server doing the same writes / the one writing less`,
      `${cpu('cairn')} / ${cpu('baseline')} / ${cpu('minimal')}`,
      'for reference',
      '',
    ],
  ];
}

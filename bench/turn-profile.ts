/**
 * `node dist-bench/bench/turn-profile.js <main-thread .cpuprofile> [turns]`: where the
 * growing conversation's turn spends its time, from a CPU profile of
 * bench/growing-only.ts (run it with `--cpu-prof`; GROWING_SIZES runs one size).
 *
 * Only the samples from the first turn on count (start-up, imports and the
 * wait for the seeding process are left out), and the pointer moves between
 * batches (trimTail, not timed by the bench) are shown on their own line.
 * Each sample goes to a part of the turn: the innermost frame of the stack
 * that belongs to a feature (tokenizer, call records, recall, event bus, model
 * client, context build) names it, so a SQLite statement run by the call
 * recorder counts as call records; what no feature claims goes to the store
 * or the turn engine by its innermost frame. The "SQLite" column is the part
 * of each row spent in the store's files and better-sqlite3 (statements and
 * row mapping). "(idle)" is the main thread waiting, mostly for the fake model
 * in its own process, so it is not Cairn's CPU. With `turns` (warm-up and
 * timed turns of the run: (GROWING_WARMUP + GROWING_ROUNDS) × 5 per size) it
 * prints each part's ms per turn too, the profiler's own overhead included.
 */
import { readFileSync } from 'node:fs';

interface CallFrame {
  functionName: string;
  url: string;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const FEATURES: [part: string, test: RegExp][] = [
  ['tokenizer / estimate', /gpt-tokenizer|\/dist\/llm\/tokens\.js|window-check|context-accounting/],
  ['call records', /\/dist\/records\/|\/store\/records\.js|sqlite-call-records|model-call-rows/],
  ['recall', /\/dist\/recall\/|recall-rank|vocabulary|\/store\/stem\.js|recall-plan/],
  ['event bus', /event-bus|event-log|turn-observer|turn-tracing|\/dist\/metrics\//],
  ['model client + node:http', /\/dist\/llm\/|node_modules\/openai|undici/],
  ['context build', /context-builder|context-guard|tool-result-clearing|\/dist\/compaction\//],
];
const FALLBACK: [part: string, test: RegExp][] = [
  ['store (other statements)', /\/dist\/store\/|better-sqlite3/],
  ['turn engine (rest of runtime)', /\/dist\/runtime\/|\/dist\/agents\//],
  ['bench harness', /dist-bench\/bench\//],
  ['model client + node:http', /node:_http|node:net|stream_base_commons|internal\/streams\//],
  ['event loop (microtasks, timers)', /task_queues|timers|node:events|async_hooks/],
];
const SQLITE = /\/dist\/store\/|better-sqlite3/;
const SPECIAL = new Map(
  Object.entries({
    '(garbage collector)': 'GC',
    '(idle)': '(idle): waiting on the fake model',
    '(program)': '(program): V8 and native outside JS',
  }),
);

const profile = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

function stackOf(id: number): CallFrame[] {
  const frames: CallFrame[] = [];
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at))
    frames.push(byId.get(at)!.callFrame);
  return frames;
}

function partOf(frames: CallFrame[]): string {
  const leaf = frames[0]!;
  const special = SPECIAL.get(leaf.functionName);
  if (special) return special;
  if (frames.some((f) => f.functionName === 'trimTail')) return 'pointer move (untimed)';
  if (leaf.url === '' && /^(parse|stringify)$/.test(leaf.functionName)) return 'JSON';
  for (const rules of [FEATURES, FALLBACK])
    for (const frame of frames)
      for (const [part, test] of rules) if (test.test(frame.url)) return part;
  return 'other (fastify, ajv, node internals)';
}

const inTurn = (frames: CallFrame[]) =>
  frames.some((f) => f.functionName === 'turn' && f.url.includes('growing-conversation'));
const totals = new Map<string, { us: number; sqliteUs: number }>();
let started = false;
let allUs = 0;
profile.samples.forEach((id, i) => {
  const frames = stackOf(id);
  started ||= inTurn(frames);
  if (!started) return;
  const us = profile.timeDeltas[i + 1] ?? 0;
  const part = partOf(frames);
  const row = totals.get(part) ?? { us: 0, sqliteUs: 0 };
  row.us += us;
  if (SQLITE.test(frames.find((f) => f.url !== '')?.url ?? '')) row.sqliteUs += us;
  totals.set(part, row);
  allUs += us;
});

const busyUs = [...totals]
  .filter(([part]) => !part.startsWith('(idle)') && part !== 'pointer move (untimed)')
  .reduce((sum, [, row]) => sum + row.us, 0);
console.log(
  `profiled ${(allUs / 1e6).toFixed(2)} s from the first turn; busy in turns ${(busyUs / 1e6).toFixed(2)} s`,
);
const turns = Number(process.argv[3] ?? 0);
const perTurn = (us: number) => (turns > 0 ? ` | ${(us / 1000 / turns).toFixed(3)}` : '');
console.log(
  `| part | ms${turns > 0 ? ' | ms per turn' : ''} | share of all | share of busy | of which SQLite |`,
);
for (const [part, row] of [...totals].sort((a, b) => b[1].us - a[1].us)) {
  const busy =
    part.startsWith('(idle)') || part === 'pointer move (untimed)'
      ? ''
      : `${((100 * row.us) / busyUs).toFixed(1)} %`;
  console.log(
    `| ${part} | ${(row.us / 1000).toFixed(0)}${perTurn(row.us)} | ${((100 * row.us) / allUs).toFixed(1)} % | ${busy} | ${(row.sqliteUs / 1000).toFixed(0)} ms |`,
  );
}

/**
 * `node --expose-gc dist-bench/bench/growing-only.js`: the growing-conversation
 * rows of `npm run bench` alone (bench/growing-conversation.ts), for working
 * on the turn without running the whole table. Then a look at the slow turns
 * (above the median's double): how many overlap a garbage collection, and
 * how much of their time the collections took.
 */
import { PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { startScript } from './child-script.js';
import { growingConversationRows, type TurnTrace } from './growing-conversation.js';

const gcs: PerformanceEntry[] = [];
const observer = new PerformanceObserver((list) => gcs.push(...list.getEntries()));
observer.observe({ entryTypes: ['gc'] });

const fake = startScript('fake-model.js', []);
try {
  const { baseURL } = JSON.parse(await fake.line) as { baseURL: string };
  const trace: TurnTrace[] = [];
  for (const row of await growingConversationRows(baseURL, trace))
    console.log(`| ${row.join(' | ')} |`);
  observer.disconnect();
  const sorted = trace.map((t) => t.ms).sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)]!;
  const overlap = (t: TurnTrace): number =>
    gcs
      .filter((g) => g.startTime < t.startedAt + t.ms && g.startTime + g.duration > t.startedAt)
      .reduce((sum, g) => sum + g.duration, 0);
  const slow = trace.filter((t) => t.ms > 2 * median);
  const fast = trace.filter((t) => t.ms <= 2 * median);
  const withGc = (list: TurnTrace[]) => list.filter((t) => overlap(t) > 0).length;
  const gcMs = (list: TurnTrace[]) => list.reduce((sum, t) => sum + overlap(t), 0);
  const slowMs = slow.reduce((sum, t) => sum + t.ms, 0);
  console.log(
    `turns ${trace.length}, median ${median.toFixed(2)} ms; slow (> 2× median): ${slow.length}, ` +
      `${withGc(slow)} of them overlap a GC (GC ${gcMs(slow).toFixed(0)} ms of their ${slowMs.toFixed(0)} ms); ` +
      `fast turns overlapping a GC: ${withGc(fast)} of ${fast.length}`,
  );
  const cpuSorted = trace.map((t) => t.cpuMs).sort((a, b) => a - b);
  const at = (q: number) => cpuSorted[Math.floor((q / 100) * (cpuSorted.length - 1))]!;
  const cpuSlow = trace.filter((t) => t.cpuMs >= at(95));
  console.log(
    `CPU per turn: median ${at(50).toFixed(2)} / p95 ${at(95).toFixed(2)} / p99 ${at(99).toFixed(2)} ms; ` +
      `of the turns at or above the CPU p95, ${withGc(cpuSlow)} of ${cpuSlow.length} overlap a GC ` +
      `(GC ${gcMs(cpuSlow).toFixed(0)} ms of their ${cpuSlow.reduce((n, t) => n + t.cpuMs, 0).toFixed(0)} ms CPU)`,
  );
  // Position of each CPU-slow turn in its batch of five (0 = first after the trim) and its size.
  const position = new Map<string, number>();
  for (const t of cpuSlow) {
    const index = trace.indexOf(t);
    const key = `#${index % 5}`;
    position.set(key, (position.get(key) ?? 0) + 1);
    position.set(`size ${t.size}`, (position.get(`size ${t.size}`) ?? 0) + 1);
  }
  console.log(
    'CPU-slow turns by position in batch and size:',
    [...position]
      .sort()
      .map(([k, v]) => `${k}: ${v}`)
      .join(', '),
  );
  const kinds = new Map<string, { count: number; ms: number }>();
  for (const g of gcs) {
    const kind = String((g as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind);
    const k = kinds.get(kind) ?? { count: 0, ms: 0 };
    k.count += 1;
    k.ms += g.duration;
    kinds.set(kind, k);
  }
  console.log(
    'GCs by kind (1 minor, 2 major, 4 incremental, 8 weak callbacks):',
    [...kinds].map(([k, v]) => `${k}: ${v.count} × ${(v.ms / v.count).toFixed(2)} ms`).join(', '),
  );
} finally {
  fake.child.kill('SIGTERM');
}

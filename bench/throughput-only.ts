/**
 * `node dist-bench/bench/throughput-only.js [rounds]`: the HTTP throughput
 * row of `npm run bench` alone (bench/throughput.ts), for working on the
 * server's per-request cost without running the whole table. Prints each
 * run's turns/s as it goes, then the row.
 */
import { measureThroughput } from './throughput.js';

const rounds = Number(process.argv[2] ?? 3);
const r = await measureThroughput(rounds);
for (let i = 0; i < r.ratios.length; i++) {
  console.log(
    `round ${i + 1}: Cairn ${r.cairn[i]!.toFixed(0)} turns/s, baseline ${r.baseline[i]!.toFixed(0)} turns/s (ratio ${r.ratios[i]!.toFixed(2)}), minimal ${r.minimal[i]!.toFixed(0)} turns/s (ratio ${r.minimalRatios[i]!.toFixed(2)}); server CPU per turn ${r.cpu.cairn[i]!.toFixed(2)} / ${r.cpu.baseline[i]!.toFixed(2)} / ${r.cpu.minimal[i]!.toFixed(2)} ms`,
  );
}
const sorted = [...r.ratios].sort((a, b) => a - b);
console.log(`median ratio ${sorted[Math.floor(sorted.length / 2)]!.toFixed(2)}`);

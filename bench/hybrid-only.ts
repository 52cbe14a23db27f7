/**
 * `node dist-bench/bench/hybrid-only.js`: the hybrid recall rows of
 * `npm run bench` alone (bench/hybrid-recall.ts).
 */
import { loadavg } from 'node:os';
import { hybridRecallRows } from './hybrid-recall.js';

console.log(`load average ${loadavg()[0]!.toFixed(2)}`);
for (const row of await hybridRecallRows()) console.log(`| ${row.join(' | ')} |`);

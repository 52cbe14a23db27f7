/**
 * `node dist-bench/bench/call-records-only.js`: only the model-call record
 * rows of `npm run bench` (bench/call-records.ts), with the bench's fake.
 */
import { callRecordRows } from './call-records.js';
import { startScript } from './child-script.js';

const fake = startScript('fake-model.js', []);
try {
  const { baseURL } = JSON.parse(await fake.line) as { baseURL: string };
  const rows = await callRecordRows(baseURL);
  console.log(
    [
      '| figure | value | budget | |',
      '|---|---|---|---|',
      ...rows.map((r) => `| ${r.join(' | ')} |`),
    ].join('\n'),
  );
} finally {
  fake.child.kill('SIGTERM');
}

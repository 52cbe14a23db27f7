/**
 * `node dist-bench/bench/call-records-only.js`: only the model-call record
 * rows of `npm run bench` (bench/call-records.ts), with the bench's fake.
 */
import { callRecordRows } from './call-records.js';
import { printRowsOnly } from './rows-only.js';

await printRowsOnly(callRecordRows);

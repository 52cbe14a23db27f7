/**
 * `node dist-bench/bench/tool-result-clearing-only.js`: the tool-result
 * clearing rows of `npm run bench` alone (bench/tool-result-clearing.ts).
 */
import { printRowsOnly } from './rows-only.js';
import { toolResultClearingRows } from './tool-result-clearing.js';

await printRowsOnly(() => toolResultClearingRows());

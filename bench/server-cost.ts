/**
 * Server cost of a chat turn without any network: the app's own work per
 * turn (validation, queue, context load, persistence, events, envelope),
 * measured through `app.server.inject` with the built-in offline model, which
 * answers in-process at once. The end-to-end rows add the loopback HTTP of the
 * client and the model round trip through the `openai` client on top of this.
 */
import { startBenchApp } from './bench-app.js';

const WARMUP_TURNS = 300;
const MEASURED_TURNS = 2_000;
/** Compact the session every so many turns, so the tail stays short as in the other rows. */
const RESET_EVERY = 20;

export async function serverCostRows(aimMs: number): Promise<string[][]> {
  const { app, close } = await startBenchApp({
    name: 'inproc',
    system: 'You are a helpful assistant.',
    tools: ['current_time'],
    defaultCompaction: { autoThreshold: 80 },
  });
  try {
    const session = await app.sessions.create({ agentName: 'inproc' });
    const latencies: number[] = [];
    for (let i = 0; i < WARMUP_TURNS + MEASURED_TURNS; i++) {
      if (i % RESET_EVERY === 0) await app.store.resetSession(session.id);
      const started = performance.now();
      const res = await app.server.inject({
        method: 'POST',
        url: '/agents/inproc/chat',
        payload: { message: `hello ${i}`, sessionId: session.id },
      });
      if (res.statusCode !== 200) throw new Error(`in-process turn: HTTP ${res.statusCode}`);
      if (i >= WARMUP_TURNS) latencies.push(performance.now() - started);
    }
    latencies.sort((a, b) => a - b);
    const median = latencies[Math.floor(latencies.length / 2)]!;
    const p95 = latencies[Math.floor(latencies.length * 0.95)]!;
    return [
      [
        'server cost per chat turn (inject, in-process instant model, no network): median / p95',
        `${median.toFixed(2)} ms / ${p95.toFixed(2)} ms`,
        `aim: median ≤ ${aimMs.toFixed(2)} ms`,
        median <= aimMs ? '✓' : '✗',
      ],
    ];
  } finally {
    await close();
  }
}

/**
 * Compaction off the hot path, for `npm run bench`: a 300-turn conversation
 * through the HTTP API with a summariser that takes 1.5 s (real ones take
 * seconds), once with summaries made on the turn (`prepareAt: 0`: the turn
 * that reaches `autoThreshold` waits for its summary) and once prepared off
 * the turn from `prepareAt` (the default, 60 %), landing at the next turn's
 * start. Figures: the share of turns that waited for a summariser (took at
 * least WAITED_MS), the median and the p99 turn.
 *
 * The client pauses PAUSE_MS between turns, as a person reads the reply
 * (people take seconds; the pause is kept short so the row stays quick, and
 * is not counted in the turn). The model is the scripted fake provider in
 * this process: chat replies at once, summary calls after SUMMARY_MS.
 */
import { startFakeLlmServer } from '../test/fakes/llm-server.js';
import { startBenchApp } from './bench-app.js';
import { percentile } from './compacted-tail.js';

const TURNS = 300;
const SUMMARY_MS = 1_500;
/** A turn this long waited for a summariser (an instant model answers in milliseconds). */
const WAITED_MS = 1_000;
const PAUSE_MS = 60;
const CONTEXT_WINDOW = 3_000;
const AUTO_THRESHOLD = 80;

interface Run {
  waited: number;
  median: number;
  p99: number;
  compactions: number;
  background: number;
}

function isSummary(body: { messages?: { role: string; content: unknown }[] }): boolean {
  const first = body.messages?.[0];
  return first?.role === 'system' && String(first.content).includes('rolling summary');
}

async function conversation(baseURL: string, prepareAt: number | undefined): Promise<Run> {
  const { app, close } = await startBenchApp(
    {
      name: 'talker',
      system: 'You are a helpful assistant.',
      tools: [],
      defaultCompaction: {
        compactCount: 50,
        autoThreshold: AUTO_THRESHOLD,
        ...(prepareAt !== undefined ? { prepareAt } : {}),
      },
    },
    {
      models: {
        main: { baseURL, model: 'bench-model', maxRetries: 0, contextWindow: CONTEXT_WINDOW },
      },
    },
  );
  try {
    const session = await app.sessions.create({ agentName: 'talker' });
    const times: number[] = [];
    for (let turn = 0; turn < TURNS; turn++) {
      const started = performance.now();
      const res = await app.server.inject({
        method: 'POST',
        url: '/agents/talker/chat',
        payload: {
          sessionId: session.id,
          message: `Turn ${turn}: order #${1000 + turn}, the customer asked about delivery windows.`,
        },
      });
      times.push(performance.now() - started);
      if (res.statusCode !== 200)
        throw new Error(`background bench turn ${turn}: HTTP ${res.statusCode} ${res.body}`);
      await new Promise((resolve) => setTimeout(resolve, PAUSE_MS));
    }
    const records = await app.store.listCompactions(session.id);
    const sorted = [...times].sort((a, b) => a - b);
    return {
      waited: times.filter((ms) => ms >= WAITED_MS).length,
      median: percentile(sorted, 50),
      p99: percentile(sorted, 99),
      compactions: records.length,
      background: records.filter((c) => c.trigger === 'background').length,
    };
  } finally {
    await close();
  }
}

export async function backgroundCompactionRows(): Promise<string[][]> {
  const fake = await startFakeLlmServer({ validate: false });
  fake.setDefault((body: { messages?: { role: string; content: unknown }[] }) =>
    isSummary(body)
      ? { content: 'Summary: orders discussed.', delayMs: SUMMARY_MS }
      : { content: 'ok' },
  );
  const forget = setInterval(() => (fake.requests.length = 0), 1_000);
  try {
    const onTurn = await conversation(fake.baseURL, 0);
    const prepared = await conversation(fake.baseURL, undefined);
    const cell = (run: Run): string =>
      `${((run.waited / TURNS) * 100).toFixed(1)} % of turns waited (${run.waited}); median ${run.median.toFixed(1)} ms, p99 ${run.p99.toFixed(0)} ms; ${run.compactions} compactions (${run.background} background)`;
    const title = `${TURNS}-turn conversation, ${SUMMARY_MS / 1000} s summariser, window ${CONTEXT_WINDOW.toLocaleString('en-US')}, autoThreshold ${AUTO_THRESHOLD}`;
    return [
      [`${title}: summaries on the turn (prepareAt 0)`, cell(onTurn), '—', ''],
      [
        `${title}: summaries prepared off the turn (prepareAt 60, the default)`,
        cell(prepared),
        'no turn waits',
        prepared.waited === 0 ? '✓' : '✗',
      ],
    ];
  } finally {
    clearInterval(forget);
    await fake.close();
  }
}

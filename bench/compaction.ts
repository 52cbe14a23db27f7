/**
 * Compaction figures for `npm run bench` (issue: defaultCompaction bench rows).
 *
 * - bookkeeping: everything `runDefaultCompaction` does except the model call
 *   (load message metadata, plan the tool-safe cut, load and clip the batch up
 *   to the summariser's budget, the compare-and-set write, the history row,
 *   the event) on a session of 100 000 uncompacted messages. The model is an
 *   in-process client that answers at once, and its own time is subtracted.
 *   Also the JS heap growth during the run (memory bounded: the plan reads
 *   metadata, never all contents). Budget < 300 ms.
 * - prompt tokens per turn over a 500-turn conversation through the HTTP API,
 *   with automatic compaction (autoThreshold 50 % of an 8 192-token window)
 *   and without: the prompt size the model reported for each turn's call.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as CompactionModule from '../src/compaction/default-compaction.js';
import type * as RegistryModule from '../src/agents/agent-registry.js';
import type * as EventsModule from '../src/runtime/event-bus.js';
import type * as StoreModule from '../src/store/sqlite/sqlite-store.js';
import type { ModelClient } from '../src/llm/model-client.js';
import { startBenchApp } from './bench-app.js';

const DIST = new URL('../../dist/', import.meta.url);
const BOOKKEEPING_MESSAGES = 100_000;
const BOOKKEEPING_RUNS = 3;
const BUDGET_BOOKKEEPING_MS = 300;
const CONVERSATION_TURNS = 500;
const CONTEXT_WINDOW = 8_192;
const AUTO_THRESHOLD = 50;

async function load<T>(path: string): Promise<T> {
  return (await import(new URL(path, DIST).href)) as T;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** A model that answers instantly and records how long its calls took. */
function instantModel(): ModelClient & { spentMs: number } {
  const model = {
    model: 'instant',
    contextWindow: 128_000,
    spentMs: 0,
    async complete() {
      const started = performance.now();
      const response = {
        message: { role: 'assistant' as const, content: 'Summary: the user and the agent talked.' },
        finishReason: 'stop',
        usage: { prompt_tokens: 1, completion_tokens: 1 },
        model: 'instant',
      };
      model.spentMs += performance.now() - started;
      return response;
    },
  };
  return model;
}

export async function bookkeepingRows(): Promise<string[][]> {
  const { SqliteStore } = await load<typeof StoreModule>('store/sqlite/sqlite-store.js');
  const { DefaultCompaction } = await load<typeof CompactionModule>(
    'compaction/default-compaction.js',
  );
  const { AgentRegistry } = await load<typeof RegistryModule>('agents/agent-registry.js');
  const { EventBus } = await load<typeof EventsModule>('runtime/event-bus.js');
  const home = mkdtempSync(join(tmpdir(), 'cairn-bench-compaction-'));
  const store = new SqliteStore(join(home, 'cairn.db'));
  try {
    const model = instantModel();
    const compaction = new DefaultCompaction({
      store,
      events: new EventBus(store),
      agents: new AgentRegistry([]),
      model,
    });
    const times: number[] = [];
    const heapGrowth: number[] = [];
    let compacted = 0;
    for (let run = 0; run < BOOKKEEPING_RUNS; run++) {
      const session = await store.createSession({
        agentName: 'bench',
        mode: 'chat',
        compactCount: 50,
        systemPrompt: 'sys',
      });
      // Seed through the store in large batches: real rows, chars column and FTS included.
      const batch = Array.from({ length: 5_000 }, (_, i) => ({
        role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
        content: `message ${i}: ${'lorem ipsum dolor sit amet '.repeat(3)}`,
      }));
      for (let n = 0; n < BOOKKEEPING_MESSAGES; n += batch.length)
        await store.appendMessages(session.id, batch);
      globalThis.gc?.();
      const heapBefore = process.memoryUsage().heapUsed;
      model.spentMs = 0;
      const started = performance.now();
      const result = await compaction.run({ sessionId: session.id, trigger: 'manual' });
      const elapsed = performance.now() - started - model.spentMs;
      heapGrowth.push((process.memoryUsage().heapUsed - heapBefore) / 1_048_576);
      times.push(elapsed);
      if ('compactedCount' in result) compacted = result.compactedCount;
    }
    const ms = median(times);
    return [
      [
        `compaction bookkeeping, ${BOOKKEEPING_MESSAGES.toLocaleString('en-US')} uncompacted messages (all but the model call; median of ${BOOKKEEPING_RUNS})`,
        `${ms.toFixed(1)} ms (cut ${compacted.toLocaleString('en-US')} messages; heap +${median(heapGrowth).toFixed(1)} MB)`,
        `< ${BUDGET_BOOKKEEPING_MS} ms`,
        ms < BUDGET_BOOKKEEPING_MS ? '✓' : '✗',
      ],
    ];
  } finally {
    await store.close();
    rmSync(home, { recursive: true, force: true });
  }
}

interface TokenSeries {
  mean: number;
  last: number;
  max: number;
  compactions: number;
}

/** Runs a conversation through the HTTP API and records each turn's reported prompt tokens. */
async function conversation(
  baseURL: string,
  autoThreshold: number | undefined,
): Promise<TokenSeries> {
  const { app, close } = await startBenchApp(
    {
      name: 'talker',
      system: 'You are a helpful assistant.',
      tools: [],
      defaultCompaction: {
        compactionCount: 50,
        ...(autoThreshold !== undefined ? { autoThreshold } : {}),
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
    const tokens: number[] = [];
    for (let turn = 0; turn < CONVERSATION_TURNS; turn++) {
      const res = await app.server.inject({
        method: 'POST',
        url: '/agents/talker/chat',
        payload: {
          sessionId: session.id,
          message: `Turn ${turn}: here are some details to remember — order #${1000 + turn}, ${'the customer asked about delivery windows and invoices. '.repeat(3)}`,
        },
      });
      if (res.statusCode !== 200)
        throw new Error(`conversation turn ${turn}: HTTP ${res.statusCode} ${res.body}`);
      tokens.push((await app.store.findSession(session.id))!.last_prompt_tokens ?? 0);
    }
    const after = (await app.store.findSession(session.id))!;
    return {
      mean: tokens.reduce((a, b) => a + b, 0) / tokens.length,
      last: tokens.at(-1)!,
      max: Math.max(...tokens),
      compactions: after.compaction_count,
    };
  } finally {
    await close();
  }
}

export async function promptTokenRows(baseURL: string): Promise<string[][]> {
  const without = await conversation(baseURL, undefined);
  const withAuto = await conversation(baseURL, AUTO_THRESHOLD);
  const cell = (s: TokenSeries): string =>
    `mean ${Math.round(s.mean).toLocaleString('en-US')} / last ${s.last.toLocaleString('en-US')} / max ${s.max.toLocaleString('en-US')}`;
  const limit = (CONTEXT_WINDOW * AUTO_THRESHOLD) / 100;
  return [
    [
      `prompt tokens per turn, ${CONVERSATION_TURNS}-turn conversation, no automatic compaction`,
      cell(without),
      '— (grows with the conversation)',
      '',
    ],
    [
      `prompt tokens per turn, ${CONVERSATION_TURNS}-turn conversation, autoThreshold ${AUTO_THRESHOLD}% of ${CONTEXT_WINDOW.toLocaleString('en-US')}`,
      `${cell(withAuto)} (${withAuto.compactions} compactions)`,
      `stays near ≤ ${limit.toLocaleString('en-US')}`,
      withAuto.max <= limit * 1.1 ? '✓' : '✗',
    ],
  ];
}

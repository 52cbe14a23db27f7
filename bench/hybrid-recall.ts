/**
 * Hybrid recall's rows: the in-memory vector search per call, and how fast
 * the background walk embeds a backlog, with what it costs on disk.
 *
 * - vector search: one session's index (recall/vector-index.ts) of synthetic
 *   unit vectors (seeded, uniform on the sphere), the top 18 of each query
 *   (6 messages × 3 candidates, the default); median and p95 wall time over
 *   QUERIES queries after a tenth as many unmeasured ones. Up to 20 000 the
 *   search is exact (WebAssembly SIMD dot products over the buffer); at
 *   100 000 it scans int8 copies first and scores the best few hundred
 *   exactly, and the row checks its top 10 against a brute-force JavaScript
 *   pass, for queries that lie near a stored vector (the case recall cares
 *   about). 1 536
 *   dimensions (OpenAI's text-embedding-3-small in full) are shown without a
 *   budget: the scan reads three times the memory.
 * - backlog: a real SQLite store in a temp folder holding BACKLOG_MESSAGES
 *   messages, walked by EmbeddingBacklog (batches of 64) with an in-process
 *   embedding of 512 dimensions that costs nothing (the store's side: read,
 *   write, charge), then with the bundled local model for LOCAL_MESSAGES
 *   messages (the model's side, in its worker). Storage: the database's
 *   pages before and after, per message embedded.
 *
 * Run alone: npm run build && npx tsc -p tsconfig.bench.json &&
 * node dist-bench/bench/hybrid-only.js
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EmbedRoleSettings } from '../src/config/settings.js';
import { normalize, type EmbeddingClient } from '../src/llm/embedding-client.js';
import { LocalEmbeddings, resolveLocalModel } from '../src/llm/local-embeddings.js';
import { Embedder } from '../src/recall/embedder.js';
import { EmbeddingBacklog } from '../src/recall/embedding-backlog.js';
import { PREFILTER_FROM, VectorIndex } from '../src/recall/vector-index.js';
import { SqliteStore } from '../src/store/sqlite/sqlite-store.js';

const QUERIES = Number(process.env.HYBRID_BENCH_QUERIES ?? 200);
const BACKLOG_MESSAGES = Number(process.env.HYBRID_BENCH_BACKLOG ?? 20_000);
const LOCAL_MESSAGES = Number(process.env.HYBRID_BENCH_LOCAL ?? 500);
const TOP = 18;

function rng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/** A unit vector, roughly uniform on the sphere (sums of uniforms, near-Gaussian). */
function randomUnit(next: () => number, dims: number): Float32Array {
  const v = new Float32Array(dims);
  for (let i = 0; i < dims; i++) v[i] = next() + next() + next() - 1.5;
  return normalize(v);
}

function ms(value: number): string {
  return value < 10 ? `${value.toFixed(2)} ms` : `${value.toFixed(1)} ms`;
}

function timeSearches(index: VectorIndex, queries: Float32Array[], maxSeq: number) {
  for (const q of queries.slice(0, Math.ceil(queries.length / 10))) index.search(q, TOP, maxSeq);
  const times = queries.map((q) => {
    const started = performance.now();
    index.search(q, TOP, maxSeq);
    return performance.now() - started;
  });
  times.sort((a, b) => a - b);
  return {
    median: times[Math.floor(times.length / 2)]!,
    p95: times[Math.floor(times.length * 0.95)]!,
  };
}

function searchRow(count: number, dims: number, budgetMs: number | undefined): string[] {
  const next = rng(count + dims);
  const index = new VectorIndex(dims);
  const stored: Float32Array[] = [];
  for (let seq = 1; seq <= count; seq++) {
    const v = randomUnit(next, dims);
    if (seq % 97 === 0) stored.push(v);
    index.add(seq, v);
  }
  // Queries near stored vectors: what a paraphrase of a stored message looks like.
  const queries = Array.from({ length: QUERIES }, (_, i) => {
    const base = stored[i % stored.length]!;
    const noise = randomUnit(next, dims);
    return normalize(base.map((x, d) => x + 0.8 * noise[d]!));
  });
  const t = timeSearches(index, queries, count);
  let kept = '';
  if (count > PREFILTER_FROM) {
    // The exact pass over the same vectors, timed query by query in turn
    // with the pre-filtered search, so both see the same load.
    const exact = new VectorIndex(dims, { prefilterFrom: Infinity });
    const again = rng(count + dims);
    for (let seq = 1; seq <= count; seq++) exact.add(seq, randomUnit(again, dims));
    const both = { pre: [] as number[], exact: [] as number[] };
    for (const q of queries) {
      let started = performance.now();
      index.search(q, TOP, count);
      both.pre.push(performance.now() - started);
      started = performance.now();
      exact.search(q, TOP, count);
      both.exact.push(performance.now() - started);
    }
    const mid = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    kept += `; in turn with the exact pass: ${ms(mid(both.pre))} vs ${ms(mid(both.exact))}`;
  }
  if (count > 20_000) {
    // The exact top 10 by brute force, for the shortlist's recall.
    let found = 0;
    let wanted = 0;
    const sample = queries.slice(0, 20);
    const all: Float32Array[] = [];
    const replay = rng(count + dims);
    for (let seq = 1; seq <= count; seq++) all.push(randomUnit(replay, dims));
    for (const q of sample) {
      const truth = all
        .map((v, i) => ({ seq: i + 1, s: v.reduce((sum, x, d) => sum + x * q[d]!, 0) }))
        .sort((a, b) => b.s - a.s)
        .slice(0, 10)
        .map((m) => m.seq);
      const got = new Set(index.search(q, 10, count).map((m) => m.seq));
      wanted += truth.length;
      found += truth.filter((seq) => got.has(seq)).length;
    }
    kept = `${kept}; ${((100 * found) / wanted).toFixed(0)} % of the brute-force top 10`;
  }
  return [
    `vector search, ${count.toLocaleString('en-US')} vectors × ${dims} dims (${count > PREFILTER_FROM ? 'int8 pre-filter, exact re-rank' : 'exact'}, SIMD): median / p95`,
    `${ms(t.median)} / ${ms(t.p95)}${kept}`,
    budgetMs === undefined ? '— (set models.embed.dimensions ≤ 512)' : `≤ ${budgetMs} ms`,
    budgetMs === undefined ? '' : t.median <= budgetMs ? '✓' : '✗',
  ];
}

/** An embedding client that costs nothing: the store's side of the walk alone. */
class InstantEmbeddings implements EmbeddingClient {
  readonly model = 'instant-512';
  private readonly next = rng(7);
  async embed(texts: readonly string[]) {
    return {
      vectors: texts.map(() => randomUnit(this.next, 512)),
      tokens: texts.length * 12,
      request: { model: this.model, input: [...texts] },
    };
  }
  async close(): Promise<void> {}
}

const ROLE: EmbedRoleSettings = {
  provider: 'openai',
  baseURL: null,
  model: 'instant-512',
  apiKeyEnv: '',
  apiKey: null,
  dimensions: 512,
  timeoutMs: 60_000,
  pricing: null,
};

async function backlogRows(): Promise<string[][]> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-hybrid-'));
  const store = new SqliteStore(join(dir, 'bench.db'));
  try {
    const session = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'You are a bench assistant.',
    });
    const sentences = [
      'We moved the staging cluster to the new region last week.',
      'The invoice for March is still waiting for approval by finance.',
      'Remember that the deploy key rotates every 90 days.',
      'Lunch on Friday is at the Italian place near the station.',
    ];
    for (let start = 0; start < BACKLOG_MESSAGES; start += 1_000)
      await store.appendMessages(
        session.id,
        Array.from({ length: Math.min(1_000, BACKLOG_MESSAGES - start) }, (_, i) => ({
          role: (start + i) % 2 === 0 ? ('user' as const) : ('assistant' as const),
          content: `${sentences[(start + i) % sentences.length]} (#${start + i})`,
        })),
      );
    const pages = () =>
      (store.db.pragma('page_count', { simple: true }) as number) *
      (store.db.pragma('page_size', { simple: true }) as number);
    const before = pages();
    const recorder = { noteEmbedding: () => null };
    const instant = new EmbeddingBacklog({
      store,
      embedder: new Embedder({ client: new InstantEmbeddings(), role: ROLE, recorder, store }),
      warn: () => {},
    });
    let started = performance.now();
    const done = await instant.catchUp();
    const instantSeconds = (performance.now() - started) / 1000;
    const bytesPerMessage = (pages() - before) / done;

    const local = new LocalEmbeddings(resolveLocalModel(), 120_000);
    const localRole = { ...ROLE, provider: 'local' as const, model: local.model };
    const localWalk = new EmbeddingBacklog({
      store: {
        // Only the first LOCAL_MESSAGES: the model's rate, not a half-hour run.
        unembeddedMessages: async (model, dims, after, limit) =>
          after >= LOCAL_MESSAGES ? [] : store.unembeddedMessages(model, dims, after, limit),
        saveVectors: (vectors, charges) => store.saveVectors(vectors, charges),
      },
      embedder: new Embedder({ client: local, role: localRole, recorder, store }),
      warn: () => {},
    });
    await local.embed(['warm the worker up']);
    started = performance.now();
    const localDone = await localWalk.catchUp();
    const localSeconds = (performance.now() - started) / 1000;
    await local.close();
    return [
      [
        `embedding backlog catch-up, ${done.toLocaleString('en-US')} messages, instant 512-dim embedder (store side): messages/s`,
        `${(done / instantSeconds).toFixed(0)} /s`,
        '—',
        '',
      ],
      [
        `embedding backlog catch-up, ${localDone} messages, local model (${local.model}, worker thread): messages/s`,
        `${(localDone / localSeconds).toFixed(0)} /s`,
        '—',
        '',
      ],
      [
        'vector storage per message (512 dims, SQLite, row + indexes)',
        `${bytesPerMessage.toFixed(0)} bytes`,
        '— (2 048 of them the float32s)',
        '',
      ],
    ];
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The hybrid recall rows of `npm run bench`. */
export async function hybridRecallRows(): Promise<string[][]> {
  return [
    searchRow(20_000, 512, 5),
    searchRow(20_000, 1536, undefined),
    searchRow(100_000, 512, 10),
    ...(await backlogRows()),
  ];
}

/**
 * The in-memory vector search and the fusion of its candidates with the
 * lexical ones: exact search returns the true nearest vectors in order (the
 * SIMD kernel and the JavaScript loop agree), the shortlist past 20 000
 * vectors still finds a planted near neighbour, the int8 pre-filter past
 * 20 000 vectors keeps the exact top 10 (with their exact similarities),
 * seqs past the pointer are never returned, and a weak vector list cannot push lexical hits down.
 */
import { describe, expect, it } from 'vitest';
import { compiledInt8Kernel, compiledKernel } from '../../src/recall/dot-kernel.js';
import { fuseCandidates, type VectorHit } from '../../src/recall/hybrid-recall.js';
import { EXACT_SEARCH_LIMIT, PREFILTER_FROM, VectorIndex } from '../../src/recall/vector-index.js';
import type { RecallHit } from '../../src/store/store.js';

/** A deterministic pseudo-random unit vector. */
function unit(seed: number, dimensions: number): Float32Array {
  let state = seed * 2654435761 + 1;
  const v = new Float32Array(dimensions);
  let sum = 0;
  for (let i = 0; i < dimensions; i++) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    v[i] = state / 2 ** 32 - 0.5;
    sum += v[i]! * v[i]!;
  }
  const norm = Math.sqrt(sum);
  for (let i = 0; i < dimensions; i++) v[i]! /= norm;
  return v;
}

function near(base: Float32Array, seed: number, amount: number): Float32Array {
  const noise = unit(seed, base.length);
  const v = base.map((x, i) => x + amount * noise[i]!);
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / norm);
}

function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

describe('VectorIndex', () => {
  it('the WebAssembly SIMD kernels (float32 and int8) are available on this Node', () => {
    expect(compiledKernel()).toBeDefined();
    expect(compiledInt8Kernel()).toBeDefined();
  });

  it.each([
    ['SIMD', true],
    ['JavaScript', false],
  ])('exact search (%s) returns the nearest vectors, best first, within maxSeq', (_, simd) => {
    const dims = 37; // not a multiple of 4: the padding must not count
    const index = new VectorIndex(dims, { simd });
    const vectors = Array.from({ length: 500 }, (_, i) => unit(i + 1, dims));
    vectors.forEach((v, i) => index.add(i + 1, v));
    const query = unit(9999, dims);
    const want = vectors
      .map((v, i) => ({ seq: i + 1, similarity: dot(query, v) }))
      .filter((m) => m.seq <= 400)
      .sort((a, b) => b.similarity - a.similarity)
      .slice(0, 10);
    const got = index.search(query, 10, 400);
    expect(got.map((m) => m.seq)).toEqual(want.map((m) => m.seq));
    for (const [i, m] of got.entries()) expect(m.similarity).toBeCloseTo(want[i]!.similarity, 5);
    expect(got.every((m) => m.seq <= 400)).toBe(true);
  });

  it('a re-added seq replaces its vector; a floor drops weak matches', () => {
    const index = new VectorIndex(8);
    const a = unit(1, 8);
    index.add(1, a);
    index.add(2, unit(2, 8));
    index.add(1, unit(3, 8));
    expect(index.size).toBe(2);
    expect(index.search(a, 5, 10).find((m) => m.seq === 1)!.similarity).toBeCloseTo(
      dot(a, unit(3, 8)),
      5,
    );
    expect(index.search(a, 5, 10, 0.999)).toEqual([]);
  });

  it('without SIMD, past the exact limit, the sign-code shortlist still finds planted neighbours', () => {
    const dims = 64;
    const index = new VectorIndex(dims, { simd: false });
    const count = EXACT_SEARCH_LIMIT + 5_000;
    const query = unit(424242, dims);
    const planted = new Set([777, 12_345, 24_000]);
    for (let seq = 1; seq <= count; seq++)
      index.add(seq, planted.has(seq) ? near(query, seq, 0.3) : unit(seq, dims));
    const got = index.search(query, 3, count).map((m) => m.seq);
    expect(new Set(got)).toEqual(planted);
    // And the pointer still bounds it.
    expect(index.search(query, 3, 20_000).map((m) => m.seq)).not.toContain(24_000);
  });
});

describe('VectorIndex past PREFILTER_FROM vectors (int8 pre-filter, exact re-rank)', () => {
  const dims = 512;
  const count = PREFILTER_FROM + 5_000;
  const vectors = Array.from({ length: count }, (_, i) => unit(i + 1, dims));
  const index = new VectorIndex(dims);
  vectors.forEach((v, i) => index.add(i + 1, v));

  /** The exact top `k` with seq ≤ maxSeq, by brute force in JavaScript. */
  function truth(query: Float32Array, k: number, maxSeq = count) {
    return vectors
      .map((v, i) => ({ seq: i + 1, similarity: dot(query, v) }))
      .filter((m) => m.seq <= maxSeq)
      .sort((a, b) => b.similarity - a.similarity)
      .slice(0, k);
  }

  it('keeps the exact top 10, in order and with exact similarities, for near and random queries', () => {
    let kept = 0;
    let wanted = 0;
    for (let q = 0; q < 20; q++) {
      // Half lie near a stored vector (a paraphrase), half anywhere.
      const query = q % 2 === 0 ? near(vectors[q * 997]!, 5_000 + q, 0.8) : unit(90_000 + q, dims);
      const want = truth(query, 10);
      const got = index.search(query, 18, count).slice(0, 10);
      wanted += want.length;
      kept += want.filter((m) => got.some((g) => g.seq === m.seq)).length;
      expect(got.map((m) => m.seq)).toEqual(want.map((m) => m.seq));
      for (const [i, m] of got.entries()) expect(m.similarity).toBeCloseTo(want[i]!.similarity, 5);
    }
    expect(kept / wanted).toBe(1);
  });

  it('never returns a seq past maxSeq, and finds the best of those before it', () => {
    const query = near(vectors[count - 10]!, 31, 0.3);
    const maxSeq = count - 100;
    const got = index.search(query, 10, maxSeq);
    expect(got.every((m) => m.seq <= maxSeq)).toBe(true);
    expect(got.map((m) => m.seq)).toEqual(truth(query, 10, maxSeq).map((m) => m.seq));
    expect(index.search(query, 10, 0)).toEqual([]);
  });
});

describe('fuseCandidates', () => {
  const hit = (seq: number): RecallHit => ({
    seq,
    role: 'user',
    content: `message ${seq}`,
    created_at: '2026-01-01T00:00:00.000Z',
    score: 1,
  });
  const vec = (seq: number, similarity: number): VectorHit => ({ ...hit(seq), similarity });

  it('keeps every lexical hit ahead of vector-only ones, whatever their similarity', () => {
    const fused = fuseCandidates([hit(5), hit(9)], [vec(1, 0.99), vec(2, 0.98), vec(3, 0.97)]);
    expect(fused.map((h) => h.seq)).toEqual([5, 9, 1, 2, 3]);
  });

  it('lifts a lexical hit the vectors agree with', () => {
    const fused = fuseCandidates([hit(5), hit(9)], [vec(9, 0.8)]);
    expect(fused.map((h) => h.seq)).toEqual([9, 5]);
  });

  it('drops vectors under the absolute floor or far below the best', () => {
    expect(fuseCandidates([], [vec(1, 0.2)]).map((h) => h.seq)).toEqual([]);
    expect(fuseCandidates([], [vec(1, 0.9), vec(2, 0.5)]).map((h) => h.seq)).toEqual([1]);
    expect(fuseCandidates([hit(4)], []).map((h) => h.seq)).toEqual([4]);
  });
});

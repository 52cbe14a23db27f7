/**
 * One session's vectors in memory, as one contiguous Float32Array, and the
 * search over them. Vectors are unit length, so a dot product is the cosine
 * similarity. Up to PREFILTER_FROM vectors the search is exact: WebAssembly
 * SIMD dot products over the whole buffer (dot-kernel.ts), whose memory the
 * vectors live in; on a busy 2-core machine about 3.7 ms at 20 000 vectors
 * of 512 dimensions. That pass is memory-bound (17 ms at 100 000), so
 * beyond PREFILTER_FROM each vector's int8 copy (its floats scaled so the
 * largest is ±127, with the scale kept) is scanned instead, a quarter of
 * the memory, with the int8 SIMD kernel; the best PREFILTER_PER_HIT per
 * wanted hit (at least MIN_PREFILTER) of those approximate scores are then
 * scored exactly in float32. The rounding moves a score by far less than
 * the gap between the true top ten and the few hundredth, so the true top
 * ten is kept (the bench row and the tests measure it). Two other
 * shortlists were tried and measured worse: a pass over one sign bit per
 * dimension (21 ms, 65 % of the true top 10 kept) and a 128-dimension
 * feature-hashing sketch scanned with the float kernel (20 ms, 41 % kept).
 * Where WebAssembly SIMD is missing, a JavaScript loop is exact up to
 * EXACT_SEARCH_LIMIT vectors, and beyond that the sign-bit pass picks a
 * shortlist that is then scored exactly. Pure CPU, no I/O.
 */
import {
  compiledInt8Kernel,
  compiledKernel,
  int8KernelWithMemory,
  kernelWithMemory,
  type ScoresFunction,
  type WasmMemory,
} from './dot-kernel.js';

/** Without SIMD, up to this many vectors a session is searched exactly. */
export const EXACT_SEARCH_LIMIT = 20_000;
/** Above it, the sign-code pass keeps at least this many candidates per wanted hit … */
export const SHORTLIST_PER_HIT = 64;
/** … and never fewer than this many. */
export const MIN_SHORTLIST = 1_024;

/** With SIMD, past this many vectors the int8 pre-filter runs before the exact scores. */
export const PREFILTER_FROM = 20_000;
/** The pre-filter keeps this many candidates per wanted hit for the exact scores … */
export const PREFILTER_PER_HIT = 16;
/** … and never fewer than this many. */
export const MIN_PREFILTER = 256;
/** Scores sampled to set the pre-filter's cut-off. */
const PREFILTER_SAMPLE = 4_096;

/** A vector found by a search: the message's seq and its cosine similarity to the query. */
export interface VectorMatch {
  seq: number;
  similarity: number;
}

const INITIAL_CAPACITY = 256;
const WASM_PAGE_BYTES = 65_536;

/** The number of set bits of a 32-bit integer. */
function popcount(x: number): number {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  x = (x + (x >>> 4)) & 0x0f0f0f0f;
  return Math.imul(x, 0x01010101) >>> 24;
}

export class VectorIndex {
  private capacity = 0;
  private count = 0;
  private seqs = new Int32Array(0);
  /** Floats per vector in the buffer: `dimensions` rounded up to a multiple of 4 (SIMD lanes). */
  private readonly stride: number;
  /** The vectors, `stride` floats each: a view of `memory` when the kernel runs. */
  private data = new Float32Array(0);
  private readonly memory: WasmMemory | undefined;
  private readonly scores: ScoresFunction | undefined;
  /** One sign bit per dimension, `words` 32-bit words per vector. */
  private codes = new Uint32Array(0);
  private readonly words: number;
  /** The int8 copies, `bytes8` bytes each (`dimensions` rounded up to 16), in the int8 kernel's memory. */
  private codes8 = new Int8Array(0);
  /** Per slot, the factor that turns an int8 copy back into floats (largest component / 127). */
  private scales8 = new Float32Array(0);
  private readonly bytes8: number;
  /** Past this many vectors the int8 pre-filter runs (a bench sets Infinity to time the exact pass). */
  private readonly prefilterFrom: number;
  /** Scratch for the pre-filter's approximate scores, by slot. */
  private approx = new Float32Array(0);
  private readonly memory8: WasmMemory | undefined;
  private readonly scores8: ScoresFunction | undefined;
  /** The slot of each seq (a re-embedded message replaces its vector). */
  private readonly slots = new Map<number, number>();
  /** The highest vector row id loaded: the next load asks for what is newer. */
  lastId = 0;

  constructor(
    readonly dimensions: number,
    options: { simd?: boolean; prefilterFrom?: number } = {},
  ) {
    this.words = Math.ceil(dimensions / 32);
    this.stride = Math.ceil(dimensions / 4) * 4;
    const kernel = options.simd === false ? undefined : compiledKernel();
    const bound = kernel ? kernelWithMemory(kernel) : undefined;
    this.memory = bound?.memory;
    this.scores = bound?.scores;
    this.prefilterFrom = options.prefilterFrom ?? PREFILTER_FROM;
    this.bytes8 = Math.ceil(dimensions / 16) * 16;
    const kernel8 = bound ? compiledInt8Kernel() : undefined;
    const bound8 = kernel8 ? int8KernelWithMemory(kernel8) : undefined;
    this.memory8 = bound8?.memory;
    this.scores8 = bound8?.scores8;
  }

  get size(): number {
    return this.count;
  }

  /** Bytes this index holds. */
  get bytes(): number {
    const int8 = this.memory8 ? this.bytes8 + 4 : 0;
    return this.capacity * (this.stride * 4 + this.words * 4 + 4 + int8);
  }

  /** Adds (or replaces, for a seq already held) one vector of `dimensions` floats. */
  add(seq: number, vector: Float32Array): void {
    if (vector.length !== this.dimensions) return;
    let slot = this.slots.get(seq);
    if (slot === undefined) {
      if (this.count === this.capacity) this.grow();
      slot = this.count++;
      this.slots.set(seq, slot);
      this.seqs[slot] = seq;
    }
    this.data.set(vector, slot * this.stride);
    const base = slot * this.words;
    this.codes.fill(0, base, base + this.words);
    for (let d = 0; d < this.dimensions; d++)
      if (vector[d]! > 0) this.codes[base + (d >>> 5)]! |= 1 << (d & 31);
    if (this.memory8) this.scales8[slot] = quantise(vector, this.codes8, slot * this.bytes8);
  }

  private grow(): void {
    const capacity = Math.max(INITIAL_CAPACITY, this.capacity * 2);
    if (this.memory) {
      // The vectors sit at the start of the memory and stay in place; the
      // query and the scores go after them (scratch), so room for both.
      const needed = capacity * this.stride * 4 + this.stride * 4 + capacity * 4;
      const pages =
        Math.ceil(needed / WASM_PAGE_BYTES) - this.memory.buffer.byteLength / WASM_PAGE_BYTES;
      if (pages > 0) this.memory.grow(pages);
      this.data = new Float32Array(this.memory.buffer, 0, capacity * this.stride);
    } else {
      const data = new Float32Array(capacity * this.stride);
      data.set(this.data);
      this.data = data;
    }
    if (this.memory8) {
      // As above: the int8 copies at the start, the query and the scores after them.
      const needed = capacity * this.bytes8 + this.bytes8 + capacity * 4;
      const pages =
        Math.ceil(needed / WASM_PAGE_BYTES) - this.memory8.buffer.byteLength / WASM_PAGE_BYTES;
      if (pages > 0) this.memory8.grow(pages);
      this.codes8 = new Int8Array(this.memory8.buffer, 0, capacity * this.bytes8);
      const scales = new Float32Array(capacity);
      scales.set(this.scales8);
      this.scales8 = scales;
    }
    const codes = new Uint32Array(capacity * this.words);
    codes.set(this.codes);
    const seqs = new Int32Array(capacity);
    seqs.set(this.seqs);
    this.codes = codes;
    this.seqs = seqs;
    this.capacity = capacity;
  }

  /** Similarities of `query` to every vector held, by slot (the kernel's pass, or a JS loop). */
  private allScores(query: Float32Array): Float32Array {
    if (this.memory && this.scores) {
      const queryAt = this.capacity * this.stride * 4;
      const outAt = queryAt + this.stride * 4;
      const scratch = new Float32Array(this.memory.buffer, queryAt, this.stride);
      scratch.fill(0);
      scratch.set(query);
      this.scores(queryAt, 0, this.count, this.stride, outAt);
      return new Float32Array(this.memory.buffer, outAt, this.count);
    }
    const out = new Float32Array(this.count);
    for (let slot = 0; slot < this.count; slot++) out[slot] = this.dot(query, slot);
    return out;
  }

  /**
   * The `limit` vectors with seq ≤ `maxSeq` most similar to `query` (unit
   * length), best first, none below `minSimilarity`.
   */
  search(query: Float32Array, limit: number, maxSeq: number, minSimilarity = -1): VectorMatch[] {
    if (query.length !== this.dimensions || limit <= 0 || this.count === 0) return [];
    const top = new TopMatches(limit, minSimilarity);
    const seqs = this.seqs;
    if (this.scores8 && this.count > this.prefilterFrom) {
      const wanted = Math.max(MIN_PREFILTER, limit * PREFILTER_PER_HIT);
      for (const slot of this.prefiltered(query, wanted, maxSeq))
        top.offer(slot, this.dot(query, slot));
    } else if (this.scores || this.count <= EXACT_SEARCH_LIMIT) {
      const scores = this.allScores(query);
      for (let slot = 0; slot < this.count; slot++) {
        if (seqs[slot]! > maxSeq) continue;
        top.offer(slot, scores[slot]!);
      }
    } else {
      const wanted = Math.max(MIN_SHORTLIST, limit * SHORTLIST_PER_HIT);
      for (const slot of this.shortlist(query, wanted, maxSeq))
        top.offer(slot, this.dot(query, slot));
    }
    return top.sorted().map(({ slot, similarity }) => ({ seq: seqs[slot]!, similarity }));
  }

  /**
   * The `wanted` slots (seq ≤ maxSeq) with the best int8 dot products with
   * the query's int8 copy, each scaled back by its vector's factor (the
   * query's own factor is the same for all, so it is left out). The cut-off
   * comes from a sorted sample of the scores, set to keep about twice
   * `wanted`, so the pass stays linear; when the sample misjudges and fewer
   * pass, every slot is offered to a bounded list instead.
   */
  private prefiltered(query: Float32Array, wanted: number, maxSeq: number): number[] {
    const count = this.count;
    const queryAt = this.capacity * this.bytes8;
    const outAt = queryAt + this.bytes8;
    const scratch = new Int8Array(this.memory8!.buffer, queryAt, this.bytes8);
    scratch.fill(0);
    quantise(query, scratch, 0);
    this.scores8!(queryAt, 0, count, this.bytes8, outAt);
    const dots = new Int32Array(this.memory8!.buffer, outAt, count);
    if (this.approx.length < count) this.approx = new Float32Array(this.capacity);
    const approx = this.approx;
    const seqs = this.seqs;
    const scales = this.scales8;
    for (let slot = 0; slot < count; slot++)
      approx[slot] = seqs[slot]! > maxSeq ? -Infinity : dots[slot]! * scales[slot]!;
    const step = Math.max(1, Math.floor(count / PREFILTER_SAMPLE));
    const sample = new Float32Array(Math.ceil(count / step));
    for (let i = 0; i < sample.length; i++) sample[i] = approx[i * step]!;
    sample.sort();
    const cut = sample[Math.max(0, sample.length - 1 - Math.ceil((2 * wanted) / step))]!;
    const passed: number[] = [];
    if (cut > -Infinity)
      for (let slot = 0; slot < count; slot++) if (approx[slot]! >= cut) passed.push(slot);
    if (passed.length < wanted) {
      const best = new TopMatches(wanted, -Infinity);
      for (let slot = 0; slot < count; slot++)
        if (approx[slot]! > -Infinity) best.offer(slot, approx[slot]!);
      return best.sorted().map(({ slot }) => slot);
    }
    return passed.sort((a, b) => approx[b]! - approx[a]!).slice(0, wanted);
  }

  private dot(query: Float32Array, slot: number): number {
    const data = this.data;
    const dims = this.dimensions;
    let at = slot * this.stride;
    let a = 0;
    let b = 0;
    let c = 0;
    let d = 0;
    let i = 0;
    for (; i + 3 < dims; i += 4, at += 4) {
      a += query[i]! * data[at]!;
      b += query[i + 1]! * data[at + 1]!;
      c += query[i + 2]! * data[at + 2]!;
      d += query[i + 3]! * data[at + 3]!;
    }
    for (; i < dims; i++, at++) a += query[i]! * data[at]!;
    return a + b + c + d;
  }

  /**
   * The slots (seq ≤ maxSeq) whose sign codes are nearest the query's, at
   * least `wanted` of them when there are that many: every distance is
   * computed once, then a histogram of distances gives the cut-off, so the
   * pass is linear with no sort.
   */
  private shortlist(query: Float32Array, wanted: number, maxSeq: number): number[] {
    const words = this.words;
    const code = new Uint32Array(words);
    for (let d = 0; d < this.dimensions; d++) if (query[d]! > 0) code[d >>> 5]! |= 1 << (d & 31);
    const distances = new Uint16Array(this.count);
    const histogram = new Uint32Array(this.dimensions + 2);
    const codes = this.codes;
    for (let slot = 0; slot < this.count; slot++) {
      if (this.seqs[slot]! > maxSeq) {
        distances[slot] = this.dimensions + 1;
        continue;
      }
      let distance = 0;
      const base = slot * words;
      for (let w = 0; w < words; w++) distance += popcount((codes[base + w]! ^ code[w]!) >>> 0);
      distances[slot] = distance;
      histogram[distance]! += 1;
    }
    let cut = 0;
    let kept = histogram[0]!;
    while (kept < wanted && cut < this.dimensions) kept += histogram[++cut]!;
    const out: number[] = [];
    for (let slot = 0; slot < this.count; slot++) if (distances[slot]! <= cut) out.push(slot);
    return out;
  }
}

/**
 * Writes `vector` as int8 into `out` at `at` (its largest component as ±127)
 * and returns the factor that turns the bytes back into floats.
 */
function quantise(vector: Float32Array, out: Int8Array, at: number): number {
  let largest = 0;
  for (let d = 0; d < vector.length; d++) largest = Math.max(largest, Math.abs(vector[d]!));
  if (largest === 0) {
    out.fill(0, at, at + vector.length);
    return 0;
  }
  const scale = 127 / largest;
  for (let d = 0; d < vector.length; d++) out[at + d] = Math.round(vector[d]! * scale);
  return largest / 127;
}

/** The best `limit` (slot, similarity) pairs seen, kept sorted by an insertion (limit is small). */
class TopMatches {
  private readonly items: { slot: number; similarity: number }[] = [];

  constructor(
    private readonly limit: number,
    private readonly floor: number,
  ) {}

  offer(slot: number, similarity: number): void {
    if (similarity < this.floor) return;
    const items = this.items;
    if (items.length === this.limit && similarity <= items[items.length - 1]!.similarity) return;
    let at = items.length;
    while (at > 0 && items[at - 1]!.similarity < similarity) at--;
    items.splice(at, 0, { slot, similarity });
    if (items.length > this.limit) items.pop();
  }

  sorted(): { slot: number; similarity: number }[] {
    return this.items;
  }
}

/**
 * Dot products of one query against many vectors, with WebAssembly SIMD
 * (four float32 lanes at a time): JavaScript has no SIMD, and a plain loop
 * over 20 000 vectors of 512 dimensions takes about four times as long. The
 * module is 150 bytes, written out here (no toolchain at build time); it
 * exports `scores(query, data, count, dimensions, out)` over byte offsets of
 * the memory it imports, `dimensions` a multiple of 4. Where the runtime has
 * no WebAssembly SIMD, `compiledKernel()` is undefined and the caller loops
 * in JavaScript.
 */

/** The part of the WebAssembly API used here (the project's type libraries do not declare it). */
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  Module: new (bytes: Uint8Array) => object;
  Instance: new (
    module: object,
    imports: Record<string, Record<string, unknown>>,
  ) => { exports: Record<string, unknown> };
  Memory: new (descriptor: { initial: number }) => WasmMemory;
}
const wasm = (globalThis as { WebAssembly?: WasmApi }).WebAssembly;

const I32 = 0x7f;
const V128 = 0x7b;

function leb(value: number): number[] {
  const out: number[] = [];
  do {
    let byte = value & 0x7f;
    value >>>= 7;
    if (value !== 0) byte |= 0x80;
    out.push(byte);
  } while (value !== 0);
  return out;
}

function section(id: number, content: number[]): number[] {
  return [id, ...leb(content.length), ...content];
}

function name(text: string): number[] {
  return [text.length, ...Buffer.from(text, 'utf8')];
}

// Locals: 0 query, 1 data, 2 count, 3 dimensions, 4 out (parameters); 5 slot, 6 offset, 7 bytes; 8 sum.
const get = (i: number) => [0x20, i];
const set = (i: number) => [0x21, i];
const i32 = (n: number) => [0x41, ...leb(n)];
const ADD = 0x6a;
const SHL = 0x74;
const GE_U = 0x4f;
const load = [0xfd, 0x00, 0x02, 0x00];
const lane = (n: number) => [...get(8), 0xfd, 0x1f, n];

const BODY = [
  ...[0x02, 0x03, I32, 0x01, V128],
  ...get(3),
  ...i32(2),
  SHL,
  ...set(7),
  0x02,
  0x40,
  0x03,
  0x40,
  ...get(5),
  ...get(2),
  GE_U,
  0x0d,
  0x01,
  0xfd,
  0x0c,
  ...new Array<number>(16).fill(0),
  ...set(8),
  ...i32(0),
  ...set(6),
  0x02,
  0x40,
  0x03,
  0x40,
  ...get(6),
  ...get(7),
  GE_U,
  0x0d,
  0x01,
  ...get(8),
  ...get(0),
  ...get(6),
  ADD,
  ...load,
  ...get(1),
  ...get(6),
  ADD,
  ...load,
  0xfd,
  0xe6,
  0x01, // f32x4.mul
  0xfd,
  0xe4,
  0x01, // f32x4.add
  ...set(8),
  ...get(6),
  ...i32(16),
  ADD,
  ...set(6),
  0x0c,
  0x00,
  0x0b,
  0x0b,
  ...get(4),
  ...get(5),
  ...i32(2),
  SHL,
  ADD,
  ...lane(0),
  ...lane(1),
  0x92,
  ...lane(2),
  0x92,
  ...lane(3),
  0x92,
  0x38,
  0x02,
  0x00, // f32.store
  ...get(1),
  ...get(7),
  ADD,
  ...set(1),
  ...get(5),
  ...i32(1),
  ADD,
  ...set(5),
  0x0c,
  0x00,
  0x0b,
  0x0b,
  0x0b,
];

const MODULE_BYTES = new Uint8Array([
  ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
  ...section(1, [0x01, 0x60, 0x05, I32, I32, I32, I32, I32, 0x00]),
  ...section(2, [0x01, ...name('env'), ...name('mem'), 0x02, 0x00, 0x01]),
  ...section(3, [0x01, 0x00]),
  ...section(7, [0x01, ...name('scores'), 0x00, 0x00]),
  ...section(10, [0x01, ...leb(BODY.length), ...BODY]),
]);

/*
 * The int8 kernel, `scores8(query, data, count, bytes, out)`: the same walk
 * over vectors of `bytes` signed bytes each (a multiple of 16), sixteen
 * bytes at a time: each half widened to 16 bits and multiplied pairwise
 * into four 32-bit sums (i32x4.dot_i16x8_s), the integer dot product stored
 * at `out` as an i32. A quarter of the memory the float32 pass reads.
 */
const SIMD = (op: number) => [0xfd, ...leb(op)];
const LOAD_ANY = [0xfd, 0x00, 0x00, 0x00];
const WIDEN_LOW = SIMD(0x87); // i16x8.extend_low_i8x16_s
const WIDEN_HIGH = SIMD(0x88); // i16x8.extend_high_i8x16_s
const DOT16 = SIMD(0xba); // i32x4.dot_i16x8_s
const ADD32 = SIMD(0xae); // i32x4.add
const intLane = (n: number) => [...get(8), 0xfd, 0x1b, n];
// Locals: 0 query, 1 data, 2 count, 3 bytes, 4 out (parameters); 5 slot, 6 offset, 7 unused; 8 sum, 9 q, 10 d.
const BODY8 = [
  ...[0x02, 0x03, I32, 0x03, V128],
  ...[0x02, 0x40, 0x03, 0x40],
  ...[...get(5), ...get(2), GE_U, 0x0d, 0x01],
  ...[0xfd, 0x0c, ...new Array<number>(16).fill(0), ...set(8)],
  ...[...i32(0), ...set(6)],
  ...[0x02, 0x40, 0x03, 0x40],
  ...[...get(6), ...get(3), GE_U, 0x0d, 0x01],
  ...[...get(0), ...get(6), ADD, ...LOAD_ANY, ...set(9)],
  ...[...get(1), ...get(6), ADD, ...LOAD_ANY, ...set(10)],
  ...get(8),
  ...[...get(9), ...WIDEN_LOW, ...get(10), ...WIDEN_LOW, ...DOT16, ...ADD32],
  ...[...get(9), ...WIDEN_HIGH, ...get(10), ...WIDEN_HIGH, ...DOT16, ...ADD32],
  ...set(8),
  ...[...get(6), ...i32(16), ADD, ...set(6)],
  ...[0x0c, 0x00, 0x0b, 0x0b],
  ...[...get(4), ...get(5), ...i32(2), SHL, ADD],
  ...[...intLane(0), ...intLane(1), ADD, ...intLane(2), ADD, ...intLane(3), ADD],
  ...[0x36, 0x02, 0x00], // i32.store
  ...[...get(1), ...get(3), ADD, ...set(1)],
  ...[...get(5), ...i32(1), ADD, ...set(5)],
  ...[0x0c, 0x00, 0x0b, 0x0b, 0x0b],
];

const MODULE8_BYTES = new Uint8Array([
  ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
  ...section(1, [0x01, 0x60, 0x05, I32, I32, I32, I32, I32, 0x00]),
  ...section(2, [0x01, ...name('env'), ...name('mem'), 0x02, 0x00, 0x01]),
  ...section(3, [0x01, 0x00]),
  ...section(7, [0x01, ...name('scores8'), 0x00, 0x00]),
  ...section(10, [0x01, ...leb(BODY8.length), ...BODY8]),
]);

/** `scores(query, data, count, dimensions, out)`: byte offsets into the memory it was made with. */
export type ScoresFunction = (
  query: number,
  data: number,
  count: number,
  dimensions: number,
  out: number,
) => void;

let compiled: object | null | undefined;

/** The compiled kernel, or undefined where WebAssembly SIMD is not available. */
export function compiledKernel(): object | undefined {
  if (compiled === undefined) {
    try {
      compiled = wasm?.validate(MODULE_BYTES) ? new wasm.Module(MODULE_BYTES) : null;
    } catch {
      compiled = null;
    }
  }
  return compiled ?? undefined;
}

/** A kernel with a memory of its own (one 64 KiB page to start with). */
export function kernelWithMemory(
  module: object,
): { memory: WasmMemory; scores: ScoresFunction } | undefined {
  if (!wasm) return undefined;
  const memory = new wasm.Memory({ initial: 1 });
  const instance = new wasm.Instance(module, { env: { mem: memory } });
  return { memory, scores: instance.exports.scores as ScoresFunction };
}

let compiled8: object | null | undefined;

/** The compiled int8 kernel, or undefined where WebAssembly SIMD is not available. */
export function compiledInt8Kernel(): object | undefined {
  if (compiled8 === undefined) {
    try {
      compiled8 = wasm?.validate(MODULE8_BYTES) ? new wasm.Module(MODULE8_BYTES) : null;
    } catch {
      compiled8 = null;
    }
  }
  return compiled8 ?? undefined;
}

/** The int8 kernel with a memory of its own: `scores8(query, data, count, bytes, out)`, byte offsets. */
export function int8KernelWithMemory(
  module: object,
): { memory: WasmMemory; scores8: ScoresFunction } | undefined {
  if (!wasm) return undefined;
  const memory = new wasm.Memory({ initial: 1 });
  const instance = new wasm.Instance(module, { env: { mem: memory } });
  return { memory, scores8: instance.exports.scores8 as ScoresFunction };
}

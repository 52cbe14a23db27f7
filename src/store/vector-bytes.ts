/**
 * How a vector is stored: its float32s as little-endian bytes, in a BLOB on
 * SQLite and a bytea on Postgres, the same bytes on both.
 */
import { endianness } from 'node:os';

const LITTLE_ENDIAN = endianness() === 'LE';

/** The bytes of `vector`, little-endian. */
export function vectorBytes(vector: Float32Array): Buffer {
  const out = Buffer.alloc(vector.length * 4);
  if (LITTLE_ENDIAN) {
    out.set(new Uint8Array(vector.buffer, vector.byteOffset, vector.byteLength));
    return out;
  }
  for (let i = 0; i < vector.length; i++) out.writeFloatLE(vector[i]!, i * 4);
  return out;
}

/** The vector stored as `bytes` (a copy: a database buffer need not be 4-byte aligned). */
export function vectorOf(bytes: Uint8Array): Float32Array {
  const length = Math.floor(bytes.byteLength / 4);
  const out = new Float32Array(length);
  if (LITTLE_ENDIAN) {
    new Uint8Array(out.buffer).set(bytes.subarray(0, length * 4));
    return out;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

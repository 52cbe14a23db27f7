/**
 * How a recorded request stays small in a growing conversation: successive
 * requests of a session share almost all their messages, so a call stores
 * only what changed against the previous call of its session and role — how
 * many leading messages it shares with it (`baseKeep`) and the refs of the
 * rest — and each distinct message once per session, content-addressed. A
 * chain of deltas starts at a checkpoint that lists every ref; chains are cut
 * at MAX_CHAIN_CALLS so a rebuild reads a bounded number of rows.
 * Pure: the recorder keeps the state between calls and writes the result.
 */
import { createHash } from 'node:crypto';
import type { CallBlob } from '../store/store.js';

/** Calls in one chain at most (the checkpoint included). */
export const MAX_CHAIN_CALLS = 32;

/** What the encoder remembers of the previous request of a session and role. */
export interface RequestState {
  callId: string;
  chainId: string;
  /** Calls in the chain so far. */
  chainLength: number;
  messages: readonly unknown[];
  /** The blob ref of each of `messages`. */
  refs: readonly string[];
  params: Readonly<Record<string, unknown>>;
  paramsRef: string;
  /** Blob refs of the session already written (or on their way). */
  known: Set<string>;
}

export interface EncodedRequest {
  paramsRef: string;
  chainId: string;
  baseCallId: string | null;
  baseKeep: number;
  /** Refs of the messages after the first `baseKeep` (all of them at a checkpoint). */
  messageRefs: string[];
  /** Blobs the store may not have yet. */
  blobs: CallBlob[];
  /** The state for the next request of the same session and role. */
  next: RequestState;
}

/** A blob's ref: 96 bits of SHA-256, unique enough within one session. */
export function blobRef(body: string): string {
  return createHash('sha256').update(body).digest('base64url').slice(0, 16);
}

/**
 * Deep equality that also requires the same key order (the order is part of
 * the bytes sent). Strings shared between requests are compared by reference
 * first, so a long unchanged history costs little.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const aKeys = Object.keys(a);
  let index = 0;
  for (const key in b) {
    if (key !== aKeys[index]) return false;
    index += 1;
    if (!sameJson((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]))
      return false;
  }
  if (index !== aKeys.length) return false;
  return true;
}

/** The body without its messages, `messages` kept as null in its place (so the key order survives). */
function paramsOf(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const params: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) params[key] = key === 'messages' ? null : value;
  return params;
}

/** Encodes `body` (a request whose `messages` is an array) against `previous`. */
export function encodeRequest(
  callId: string,
  body: Readonly<Record<string, unknown>>,
  previous: RequestState | undefined,
): EncodedRequest {
  const messages = Array.isArray(body.messages) ? (body.messages as unknown[]) : [];
  let shared = 0;
  if (previous) {
    const limit = Math.min(previous.messages.length, messages.length);
    while (shared < limit && sameJson(previous.messages[shared], messages[shared])) shared += 1;
  }
  const continues = previous !== undefined && shared > 0 && previous.chainLength < MAX_CHAIN_CALLS;
  // What the encoder remembers is bounded by the chain it serves: a new chain
  // starts from the refs it keeps, so a conversation of any length holds no
  // more than one chain's refs. A blob written again is ignored by the store.
  const known = continues ? previous.known : new Set(previous?.refs.slice(0, shared));
  const blobs: CallBlob[] = [];
  const ref = (value: unknown): string => {
    const text = JSON.stringify(value);
    const hash = blobRef(text);
    if (!known.has(hash)) {
      known.add(hash);
      blobs.push({ hash, body: text });
    }
    return hash;
  };

  const params = paramsOf(body);
  const paramsRef =
    previous && sameJson(previous.params, params) ? previous.paramsRef : ref(params);

  const refs = [
    ...(previous ? previous.refs.slice(0, shared) : []),
    ...messages.slice(shared).map(ref),
  ];
  const chainId = continues ? previous.chainId : callId;
  return {
    paramsRef,
    chainId,
    baseCallId: continues ? previous.callId : null,
    baseKeep: continues ? shared : 0,
    messageRefs: continues ? refs.slice(shared) : refs,
    blobs,
    next: {
      callId,
      chainId,
      chainLength: continues ? previous.chainLength + 1 : 1,
      messages,
      refs,
      params,
      paramsRef,
      known,
    },
  };
}

/**
 * The delta encoding of recorded requests: each call stores only what changed
 * against the previous request of its session and role, and the request is
 * rebuilt byte for byte from its chain and the blobs.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  MAX_CHAIN_CALLS,
  encodeRequest,
  sameJson,
  type RequestState,
} from '../../src/records/request-delta.js';
import {
  chainRefs,
  rebuildRequest,
  type ChainLinkRecord,
} from '../../src/store/model-call-rows.js';

/** Stores encoded calls the way a store does and rebuilds any of them. */
function memoryStore() {
  const links: ChainLinkRecord[] = [];
  const blobs = new Map<string, string>();
  let previous: RequestState | undefined;
  let n = 0;
  return {
    record(body: Record<string, unknown>) {
      const id = `call_${++n}`;
      const encoded = encodeRequest(id, body, previous);
      previous = encoded.next;
      for (const blob of encoded.blobs) blobs.set(blob.hash, blob.body);
      links.push({
        id,
        base_call_id: encoded.baseCallId,
        base_keep: encoded.baseKeep,
        message_refs: JSON.stringify(encoded.messageRefs),
        params_ref: encoded.paramsRef,
        wire: 1,
      });
      return { id, encoded };
    },
    rebuild(id: string): string {
      const { refs, link } = chainRefs(id, links);
      return JSON.stringify(rebuildRequest(blobs.get(link.params_ref)!, refs, blobs));
    },
    blobs,
  };
}

const body = (messages: unknown[], extra: Record<string, unknown> = {}) => ({
  model: 'm',
  messages,
  tools: [{ type: 'function', function: { name: 't', parameters: { type: 'object' } } }],
  ...extra,
  stream: false,
});

describe('recorded request deltas', () => {
  it('stores only the new tail of a growing conversation and rebuilds every request exactly', () => {
    const store = memoryStore();
    const history: unknown[] = [{ role: 'system', content: 'You help.' }];
    const sent: { id: string; text: string }[] = [];
    for (let turn = 0; turn < 10; turn++) {
      history.push({ role: 'user', content: `question ${turn}` });
      const request = body([...history.map((m) => ({ ...(m as object) }))]);
      const { id, encoded } = store.record(request);
      if (turn > 0) {
        // The previous answer and the new question are new; the parameters (tools) are not.
        expect(encoded.baseKeep).toBe(history.length - 2);
        expect(encoded.messageRefs).toHaveLength(2);
        expect(encoded.blobs).toHaveLength(2);
      }
      sent.push({ id, text: JSON.stringify(request) });
      history.push({ role: 'assistant', content: `answer ${turn}` });
    }
    for (const { id, text } of sent) expect(store.rebuild(id)).toBe(text);
  });

  it('starts a new chain after MAX_CHAIN_CALLS calls, listing every ref again', () => {
    const store = memoryStore();
    const history: unknown[] = [{ role: 'system', content: 'S' }];
    const recorded = [];
    for (let i = 0; i <= MAX_CHAIN_CALLS; i++) {
      history.push({ role: 'user', content: `q${i}` });
      recorded.push(store.record(body([...history])));
    }
    const last = recorded[recorded.length - 1]!;
    expect(recorded[MAX_CHAIN_CALLS - 1]!.encoded.baseCallId).not.toBeNull();
    expect(last.encoded.baseCallId).toBeNull();
    expect(last.encoded.messageRefs).toHaveLength(history.length);
    // Nothing already stored is written again.
    expect(last.encoded.blobs).toHaveLength(1);
    expect(store.rebuild(last.id)).toBe(JSON.stringify(body([...history])));
  });

  it('remembers no more than one chain of refs in a conversation of any length', () => {
    // A steady-size conversation, as compaction keeps it: the system prompt
    // and the last few messages, every call with two new ones.
    const store = memoryStore();
    const system = { role: 'system', content: 'S' };
    let tail: unknown[] = [];
    const sent: { id: string; text: string }[] = [];
    let largest = 0;
    for (let turn = 0; turn < 20 * MAX_CHAIN_CALLS; turn++) {
      tail = [...tail, { role: 'user', content: `q${turn}` }].slice(-6);
      const request = body([system, ...tail]);
      const { id, encoded } = store.record(request);
      largest = Math.max(largest, encoded.next.known.size);
      if (turn % 97 === 0) sent.push({ id, text: JSON.stringify(request) });
      tail.push({ role: 'assistant', content: `a${turn}` });
    }
    // Each call of a chain adds at most two refs; 1 280 calls would have added 2 560.
    expect(largest).toBeLessThanOrEqual(2 * MAX_CHAIN_CALLS + 8);
    // Forgetting what was written never loses a blob a request needs.
    for (const { id, text } of sent) expect(store.rebuild(id)).toBe(text);
  });

  it('keeps the key order, parameters that change, and a history rewritten by compaction', () => {
    const store = memoryStore();
    const a = body([
      { role: 'system', content: 'S' },
      { role: 'user', content: 'a' },
    ]);
    const b = {
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'Summary so far' },
        { role: 'user', content: 'b', name: undefined },
      ],
      model: 'other',
      temperature: 0.25,
    };
    const c = body([{ content: 'S', role: 'system' }]);
    const ids = [a, b, c].map((request) => store.record(request).id);
    expect(store.rebuild(ids[0]!)).toBe(JSON.stringify(a));
    expect(store.rebuild(ids[1]!)).toBe(JSON.stringify(b));
    expect(store.rebuild(ids[2]!)).toBe(JSON.stringify(c));
  });

  it('rebuilds any sequence of requests byte for byte', () => {
    const message = fc.record({
      role: fc.constantFrom('system', 'user', 'assistant', 'tool'),
      content: fc.oneof(fc.string(), fc.constant(null)),
    });
    fc.assert(
      fc.property(
        fc.array(fc.array(message, { maxLength: 8 }), { minLength: 1, maxLength: 12 }),
        (requests) => {
          const store = memoryStore();
          const recorded = requests.map((messages) => ({
            id: store.record(body(messages)).id,
            text: JSON.stringify(body(messages)),
          }));
          for (const { id, text } of recorded) expect(store.rebuild(id)).toBe(text);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('compares JSON values with their key order', () => {
    expect(sameJson({ a: 1, b: [1, { c: 'x' }] }, { a: 1, b: [1, { c: 'x' }] })).toBe(true);
    expect(sameJson({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(false);
    expect(sameJson([1, 2], [1, 2, 3])).toBe(false);
    expect(sameJson({ a: null }, { a: undefined })).toBe(false);
    expect(sameJson([], {})).toBe(false);
  });
});

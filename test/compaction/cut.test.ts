/**
 * The pure cut planner of defaultCompaction: the greedy-by-length rule on
 * worked examples, the tool-safe rule case by case, and property tests
 * over random histories (parallel tool calls, results in any order, pending
 * calls at the end) checking that the request built from the summary and the
 * tail after the cut is one a provider accepts, without needing any repair.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { buildMessagesWithSummary } from '../../src/runtime/context-builder.js';
import { planCut, safeBoundaries, type CutCandidate } from '../../src/compaction/cut.js';
import { messageChars, type ChatMessage } from '../../src/llm/messages.js';
import { INTERRUPTED_TOOL_RESULT, normalizeOutgoing } from '../../src/llm/normalize-request.js';
import { validateChatRequest } from '../fakes/openai-request-validator.js';

// ---- builders ----------------------------------------------------------------

const user = (chars: number): ChatMessage => ({ role: 'user', content: 'u'.repeat(chars) });
const text = (chars: number): ChatMessage => ({ role: 'assistant', content: 'a'.repeat(chars) });
/** An assistant message calling `ids`; each call is `f` with `argChars` characters of arguments. */
const calls = (ids: string[], argChars = 2, content: string | null = null): ChatMessage => ({
  role: 'assistant',
  content,
  tool_calls: ids.map((id) => ({
    id,
    type: 'function',
    function: { name: 'f', arguments: 'x'.repeat(argChars) },
  })),
});
const result = (id: string, chars = 10): ChatMessage => ({
  role: 'tool',
  tool_call_id: id,
  name: 'f',
  content: 'r'.repeat(chars),
});

/** What the planner sees of a message (as `listMessageMeta` gives it). */
function candidate(message: ChatMessage): CutCandidate {
  const c: CutCandidate = { role: message.role, chars: messageChars(message) };
  if (message.tool_calls) c.callIds = message.tool_calls.map((call) => call.id);
  if (message.tool_call_id !== undefined) c.toolCallId = message.tool_call_id;
  return c;
}
const candidates = (messages: readonly ChatMessage[]): CutCandidate[] => messages.map(candidate);

/** Alternating user / assistant text messages of the given sizes. */
function conversation(sizes: readonly number[]): ChatMessage[] {
  return sizes.map((size, i) => (i % 2 === 0 ? user(size) : text(size)));
}

// ---- an independent statement of the rules ----------------------------------

/** True when a cut after `c` messages leaves no call open and no result first in the tail. */
function isSafeCut(messages: readonly ChatMessage[], c: number): boolean {
  if (messages[c]?.role === 'tool') return false;
  const called = new Set<string>();
  const answered = new Set<string>();
  for (const m of messages.slice(0, c)) {
    for (const call of m.tool_calls ?? []) called.add(call.id);
    if (m.role === 'tool' && m.tool_call_id !== undefined) answered.add(m.tool_call_id);
  }
  return [...called].every((id) => answered.has(id));
}

/** The greedy count: whole messages from the oldest until the batch reaches the target. */
function greedyCount(messages: readonly ChatMessage[], target: number): number {
  let count = 0;
  let chars = 0;
  while (count < messages.length && chars < target) {
    chars += messageChars(messages[count]!);
    count += 1;
  }
  return count;
}

const sumChars = (messages: readonly ChatMessage[]): number =>
  messages.reduce((n, m) => n + messageChars(m), 0);

const SYSTEM: ChatMessage = { role: 'system', content: 'You are a test assistant.' };

/** The request the next model call would send after this cut, as the fake provider would get it. */
function requestAfterCut(messages: readonly ChatMessage[], cutoff: number): ChatMessage[] {
  return buildMessagesWithSummary([SYSTEM], messages.slice(cutoff), 'summary');
}

function isBlank(m: ChatMessage): boolean {
  return !m.tool_calls?.length && m.role !== 'tool' && (m.content ?? '').trim() === '';
}

// ---- worked examples ----------------------------------------------------------

describe('planCut: the greedy rule by length', () => {
  it('takes messages until ≥ compactCount% of the total characters, not compactCount% of the messages', () => {
    // 100 messages: ten giant ones first, then 90 short ones (why the cut counts characters).
    const messages = conversation([...Array<number>(10).fill(1000), ...Array<number>(90).fill(10)]);
    const plan = planCut(candidates(messages), 0, 50);
    expect(plan.totalChars).toBe(10_900);
    expect(plan.targetChars).toBe(5_450);
    // 5 messages are 5 000 < 5 450; the 6th is taken whole (rounding up, never splitting).
    expect(plan.cutoff).toBe(6);
    expect(plan.batchChars).toBe(6_000);
  });

  it('stops exactly at the target when a message boundary reaches it', () => {
    const plan = planCut(candidates(conversation([50, 50, 100])), 0, 50);
    expect(plan).toEqual({ cutoff: 2, totalChars: 200, targetChars: 100, batchChars: 100 });
  });

  it('rounds the target down and the batch up on varied lengths', () => {
    // 100 messages of varied lengths; compactCount 50.
    const sizes = Array.from({ length: 100 }, (_, i) => ((i * 37) % 91) + 1);
    const messages = conversation(sizes);
    const total = sizes.reduce((a, b) => a + b, 0);
    const plan = planCut(candidates(messages), 0, 50);
    expect(plan.totalChars).toBe(total);
    expect(plan.targetChars).toBe(Math.floor(total / 2));
    const before = sizes.slice(0, plan.cutoff - 1).reduce((a, b) => a + b, 0);
    expect(before).toBeLessThan(plan.targetChars); // one message fewer is not enough
    expect(plan.batchChars).toBeGreaterThanOrEqual(plan.targetChars);
    expect(plan.batchChars).toBe(before + sizes[plan.cutoff - 1]!);
  });

  it('keeps fractional compactCount exact (33.3 is not 33)', () => {
    const messages = conversation([110, 110, 110, 10, 660]);
    // total 1000: 33% → 330, reached after 3 messages; 33.3% → 333 needs a 4th.
    expect(planCut(candidates(messages), 0, 33).cutoff).toBe(3);
    expect(planCut(candidates(messages), 0, 33.3)).toMatchObject({ cutoff: 4, targetChars: 333 });
  });

  it('counts the summary in the total: a longer summary compacts more of the same messages', () => {
    const messages = conversation(Array<number>(10).fill(100));
    expect(planCut(candidates(messages), 0, 50).cutoff).toBe(5);
    expect(planCut(candidates(messages), 200, 50)).toMatchObject({
      cutoff: 6,
      totalChars: 1_200,
      targetChars: 600,
    });
    // The target exceeds the messages: all of them are compacted.
    expect(planCut(candidates(messages), 1_000, 50)).toMatchObject({
      cutoff: 10,
      batchChars: 1_000,
    });
  });

  it('the second call plans over the rest plus the (shorter) summary', () => {
    const messages = conversation(Array<number>(100).fill(100));
    const first = planCut(candidates(messages), 0, 50);
    expect(first.cutoff).toBe(50);
    const rest = candidates(messages.slice(first.cutoff));
    // The summary (500) is much shorter than the 5 000 characters it replaced.
    const second = planCut(rest, 500, 50);
    expect(second).toMatchObject({ totalChars: 5_500, targetChars: 2_750, cutoff: 28 });
    // Had the summary been as long as the messages, more would be compacted.
    expect(planCut(rest, 3_000, 50).cutoff).toBe(40);
  });

  it('targetLength 0 (all messages empty, no summary) → cutoff 0', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: '' },
      { role: 'assistant', content: '' },
    ];
    expect(planCut(candidates(messages), 0, 50)).toEqual({
      cutoff: 0,
      totalChars: 0,
      targetChars: 0,
      batchChars: 0,
    });
    // A total so small that the target floors to 0 is the same case.
    expect(planCut(candidates(conversation([60, 39])), 0, 1)).toMatchObject({
      cutoff: 0,
      targetChars: 0,
    });
  });

  it('nothing uncompacted → cutoff 0, whatever the summary', () => {
    expect(planCut([], 0, 50)).toEqual({ cutoff: 0, totalChars: 0, targetChars: 0, batchChars: 0 });
    expect(planCut([], 4_000, 99)).toEqual({
      cutoff: 0,
      totalChars: 4_000,
      targetChars: 3_960,
      batchChars: 0,
    });
  });
});

describe('planCut: the tool-safe cut', () => {
  it('marks as safe only the boundaries where no call is open and no result comes next', () => {
    const messages = [
      user(10),
      calls(['a', 'b', 'c']),
      result('c'),
      result('a'),
      result('b'),
      user(5),
    ];
    expect(safeBoundaries(candidates(messages))).toEqual([
      true,
      true,
      false,
      false,
      false,
      true,
      true,
    ]);
    // A stray result whose call is not in the history (older data) never starts the tail either.
    const stray = [user(100), result('gone', 10), user(100)];
    expect(safeBoundaries(candidates(stray))).toEqual([true, false, true, true]);
    expect(planCut(candidates(stray), 0, 40).cutoff).toBe(2);
    // A history that starts with a result (its call already compacted) cannot be cut before it.
    expect(safeBoundaries(candidates([result('z'), user(1)]))[0]).toBe(false);
  });

  it('moves a greedy cut that falls between a call and its results forward past the last result', () => {
    // greedy: 10 + 500 (the call) ≥ target → would cut after the call message.
    const messages = [
      user(10),
      calls(['a', 'b'], 249),
      result('a', 300),
      result('b', 300),
      text(10),
      user(10),
    ];
    const plan = planCut(candidates(messages), 0, 30);
    expect(greedyCount(messages, plan.targetChars)).toBe(2);
    expect(plan.cutoff).toBe(4);
    expect(plan.batchChars).toBe(10 + 500 + 300 + 300);
    expect(messages[plan.cutoff]!.role).not.toBe('tool');
  });

  it('moves a greedy cut that falls between parallel results (in any order) forward', () => {
    const messages = [
      user(10),
      calls(['a', 'b', 'c'], 9),
      result('b', 400),
      result('c', 10),
      result('a', 10),
      user(400),
    ];
    const plan = planCut(candidates(messages), 0, 50);
    expect(greedyCount(messages, plan.targetChars)).toBe(3); // after result b
    expect(plan.cutoff).toBe(5);
  });

  it('moves the cut back when no boundary exists forward (a pending ask_user call at the end)', () => {
    const messages = [user(10), text(10), user(10), calls(['ask'], 2_000, 'Let me ask.')];
    const plan = planCut(candidates(messages), 0, 50);
    expect(greedyCount(messages, plan.targetChars)).toBe(4);
    expect(plan.cutoff).toBe(3);
    expect(plan.batchChars).toBe(30);
  });

  it('moves back before a parallel call whose results are only partly stored', () => {
    const messages = [user(10), text(10), calls(['x', 'y'], 50), result('x', 2_000)];
    const plan = planCut(candidates(messages), 0, 50);
    expect(greedyCount(messages, plan.targetChars)).toBe(4);
    expect(plan.cutoff).toBe(2);
  });

  it('compacts nothing when no safe boundary exists at all', () => {
    expect(planCut(candidates([calls(['a', 'b'], 100), result('a', 100)]), 0, 50).cutoff).toBe(0);
    expect(planCut(candidates([calls(['a'], 100)]), 0, 99).cutoff).toBe(0);
    expect(
      planCut(candidates([calls(['a', 'b', 'c'], 10), result('c', 500), result('a', 5)]), 0, 1),
    ).toMatchObject({ cutoff: 0, batchChars: 0 });
  });

  it('respects maxCutoff, moving back inside it when it falls within a tool exchange', () => {
    const plain = conversation(Array<number>(10).fill(100));
    expect(planCut(candidates(plain), 0, 50, { maxCutoff: 3 }).cutoff).toBe(3);
    expect(planCut(candidates(plain), 0, 50, { maxCutoff: 8 }).cutoff).toBe(5);
    expect(planCut(candidates(plain), 0, 50, { maxCutoff: 0 }).cutoff).toBe(0);
    expect(planCut(candidates(plain), 0, 50, { maxCutoff: 50 }).cutoff).toBe(5);

    const withTools = [
      user(100),
      text(100),
      user(100),
      calls(['a'], 100),
      result('a', 100),
      user(500),
    ];
    // maxCutoff 4 falls after the call but before its result: back to 3.
    const plan = planCut(candidates(withTools), 0, 99, { maxCutoff: 4 });
    expect(plan.cutoff).toBe(3);
    expect(plan.batchChars).toBe(300);
  });
});

// ---- property tests -------------------------------------------------------------

type Block =
  | { kind: 'user'; chars: number }
  | { kind: 'text'; chars: number }
  | { kind: 'tools'; content: string | null; results: number[]; order: number[] };

const lengthArb = fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 2_000 }));
const blockArb: fc.Arbitrary<Block> = fc.oneof(
  fc.record({ kind: fc.constant('user' as const), chars: fc.integer({ min: 1, max: 2_000 }) }),
  fc.record({ kind: fc.constant('text' as const), chars: lengthArb }),
  fc.record({
    kind: fc.constant('tools' as const),
    content: fc.oneof(fc.constant(null), fc.constant(''), fc.constant('Let me check.')),
    results: fc.array(lengthArb, { minLength: 1, maxLength: 3 }),
    order: fc.array(fc.nat(), { minLength: 3, maxLength: 3 }),
  }),
);
const pendingArb = fc.option(
  fc.record({ calls: fc.integer({ min: 1, max: 3 }), answered: fc.nat({ max: 2 }) }),
  { nil: undefined },
);
const compactCountArb = fc.oneof(
  fc.integer({ min: 1, max: 99 }),
  fc.double({ min: 1, max: 99, noNaN: true, noDefaultInfinity: true }),
);

/** A stored history: users, texts (some empty), tool exchanges, maybe pending calls at the end. */
function historyOf(
  blocks: readonly Block[],
  pending?: { calls: number; answered: number },
): ChatMessage[] {
  let nextId = 0;
  const out: ChatMessage[] = [];
  for (const block of blocks) {
    if (block.kind === 'user') out.push(user(block.chars));
    else if (block.kind === 'text') out.push(text(block.chars));
    else {
      const ids = block.results.map(() => `call_${++nextId}`);
      out.push(calls(ids, 7, block.content));
      // Results in any order (parallel calls finish when they finish).
      const order = ids.map((id, i) => ({ id, chars: block.results[i]!, key: block.order[i]! }));
      order.sort((x, y) => x.key - y.key);
      for (const r of order) out.push(result(r.id, r.chars));
    }
  }
  if (pending) {
    const ids = Array.from({ length: pending.calls }, () => `call_${++nextId}`);
    out.push(calls(ids, 30));
    for (const id of ids.slice(0, Math.min(pending.answered, pending.calls - 1)))
      out.push(result(id, 20));
  }
  return out;
}

const historyArb = fc
  .tuple(fc.array(blockArb, { maxLength: 30 }), pendingArb)
  .map(([blocks, pending]) => ({
    messages: historyOf(blocks, pending),
    pending: pending !== undefined,
  }));

describe('planCut: properties over random histories', () => {
  it('the cut is in [0, n], safe, and where the greedy rule and the safe-move rule put it', () => {
    fc.assert(
      fc.property(
        historyArb,
        compactCountArb,
        fc.nat({ max: 3_000 }),
        fc.option(fc.nat({ max: 60 }), { nil: undefined }),
        ({ messages }, compactCount, summaryLength, maxCutoff) => {
          const n = messages.length;
          const plan = planCut(
            candidates(messages),
            summaryLength,
            compactCount,
            maxCutoff === undefined ? {} : { maxCutoff },
          );
          const total = summaryLength + sumChars(messages);
          expect(plan.totalChars).toBe(total);
          expect(plan.targetChars).toBe(Math.floor((total * compactCount) / 100));
          expect(plan.cutoff).toBeGreaterThanOrEqual(0);
          expect(plan.cutoff).toBeLessThanOrEqual(Math.min(n, maxCutoff ?? n));
          expect(plan.batchChars).toBe(sumChars(messages.slice(0, plan.cutoff)));

          const limit = Math.min(n, maxCutoff ?? n);
          const greedy = Math.min(greedyCount(messages, plan.targetChars), limit);
          const safeIn = (from: number, to: number): number[] =>
            Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i).filter(
              (c) => c > 0 && isSafeCut(messages, c),
            );
          if (plan.cutoff > 0) {
            expect(isSafeCut(messages, plan.cutoff)).toBe(true);
            expect(messages[plan.cutoff]?.role).not.toBe('tool');
            if (plan.cutoff >= greedy) {
              // Moved forward as little as possible.
              expect(safeIn(greedy, plan.cutoff)).toEqual([]);
            } else {
              // Moved back only because nothing is safe forward, and as little as possible.
              expect(safeIn(greedy, limit + 1)).toEqual([]);
              expect(safeIn(plan.cutoff + 1, greedy)).toEqual([]);
            }
          } else if (plan.targetChars > 0 && n > 0) {
            expect(safeIn(1, limit + 1)).toEqual([]);
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  it('the request built from the summary and the tail is valid and needs no structural repair', () => {
    fc.assert(
      fc.property(
        historyArb,
        compactCountArb,
        fc.nat({ max: 3_000 }),
        ({ messages, pending }, compactCount, summaryLength) => {
          const { cutoff } = planCut(candidates(messages), summaryLength, compactCount);
          const raw = requestAfterCut(messages, cutoff);
          const normalized = normalizeOutgoing(raw);
          // Valid for a provider whatever the history (pending calls get their synthetic results).
          expect(validateChatRequest({ model: 'test-model', messages: normalized })).toEqual([]);
          if (!pending) {
            // The normaliser only drops blank texts: the cut itself never needs repair.
            const expected = raw.filter((m) => !isBlank(m));
            expect(normalized.map((m) => m.role)).toEqual(expected.map((m) => m.role));
            const ids = (list: ChatMessage[]): string[] =>
              list.flatMap((m) => (m.role === 'tool' ? [m.tool_call_id!] : [])).sort();
            expect(ids(normalized)).toEqual(ids(expected));
            expect(normalized.some((m) => m.content === INTERRUPTED_TOOL_RESULT)).toBe(false);
          }
          // The summary pair comes right after the system prompt.
          expect(normalized[0]).toEqual(SYSTEM);
          expect(normalized[1]).toEqual({
            role: 'user',
            content: '[Summary of previous conversation]\n\nsummary',
          });
        },
      ),
      { numRuns: 400 },
    );
  });

  it('repeated compaction moves the pointer forward over a prefix, never past n, every stop safe', () => {
    fc.assert(
      fc.property(
        historyArb,
        compactCountArb,
        fc.double({ min: 0, max: 1, noNaN: true }),
        ({ messages }, compactCount, ratio) => {
          const n = messages.length;
          let pointer = 0;
          let summaryLength = 0;
          const batches: [number, number][] = [];
          for (let round = 0; round < 12; round++) {
            const plan = planCut(candidates(messages.slice(pointer)), summaryLength, compactCount);
            if (plan.cutoff === 0) break;
            batches.push([pointer, pointer + plan.cutoff]);
            const next = pointer + plan.cutoff;
            expect(next).toBeGreaterThan(pointer);
            expect(next).toBeLessThanOrEqual(n);
            // Safe in the whole history, not only in the part that was planned over.
            expect(isSafeCut(messages, next)).toBe(true);
            pointer = next;
            // The new summary is shorter than what it replaced (previous summary + batch).
            summaryLength = Math.floor((summaryLength + plan.batchChars) * ratio * 0.9);
          }
          // The compacted messages are exactly the prefix [0, pointer): batches tile it.
          let expectedStart = 0;
          for (const [start, end] of batches) {
            expect(start).toBe(expectedStart);
            expectedStart = end;
          }
          expect(expectedStart).toBe(pointer);
          // What stays raw still makes a valid request.
          const request = normalizeOutgoing(requestAfterCut(messages, pointer));
          expect(validateChatRequest({ model: 'test-model', messages: request })).toEqual([]);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('planCut: a call waiting for a person stays raw', () => {
  const messages = [
    user(100),
    text(100),
    user(100),
    calls(['wait_1']),
    result('wait_1'),
    user(100),
    text(100),
  ];

  it('stops before the message that makes the pending call, however much is asked', () => {
    expect(planCut(candidates(messages), 0, 99).cutoff).toBe(7);
    expect(planCut(candidates(messages), 0, 99, { pendingCallId: 'wait_1' }).cutoff).toBe(3);
  });

  it('with the running turn as well, the stricter limit holds', () => {
    const plan = planCut(candidates(messages), 0, 99, { pendingCallId: 'wait_1', maxCutoff: 2 });
    expect(plan.cutoff).toBe(2);
  });

  it('a pending call the history does not hold limits nothing', () => {
    expect(planCut(candidates(messages), 0, 99, { pendingCallId: 'other' }).cutoff).toBe(7);
  });

  it('a pending call in the first message leaves nothing to compact', () => {
    const first = [calls(['wait_1']), result('wait_1'), user(100), text(100)];
    expect(planCut(candidates(first), 0, 99, { pendingCallId: 'wait_1' }).cutoff).toBe(0);
  });
});

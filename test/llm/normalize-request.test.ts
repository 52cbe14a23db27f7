/**
 * The outgoing-request normaliser: unit
 * cases for each repair, and property tests over random, damaged histories
 * checked with the same validator the fake provider enforces.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ChatMessage, ToolCall } from '../../src/llm/messages.js';
import {
  EMPTY_TOOL_RESULT,
  INTERRUPTED_TOOL_RESULT,
  LEADING_TOOL_CALL_BRIDGE,
  MAX_TOOL_CALL_ID_CHARS,
  missingTrailingResults,
  normalizeOutgoing,
  normalizeToolCallId,
} from '../../src/llm/normalize-request.js';
import { validateChatRequest } from '../fakes/openai-request-validator.js';

const LONG_ID = `toolu_${'x'.repeat(50)}_1`;

const system = (content: string): ChatMessage => ({ role: 'system', content });
const user = (content: string): ChatMessage => ({ role: 'user', content });
const assistant = (content: string | null): ChatMessage => ({ role: 'assistant', content });
const call = (id: string, name = 'lookup'): ToolCall => ({
  id,
  type: 'function',
  function: { name, arguments: '{}' },
});
const calling = (ids: string[], content: string | null = null): ChatMessage => ({
  role: 'assistant',
  content,
  tool_calls: ids.map((id) => call(id)),
});
const result = (id: string, content = `result of ${id}`): ChatMessage => ({
  role: 'tool',
  tool_call_id: id,
  name: 'lookup',
  content,
});

function problemsOf(messages: ChatMessage[]): string[] {
  return validateChatRequest({ model: 'm', messages });
}

describe('normalizeOutgoing: unit cases', () => {
  it('leaves a valid history unchanged', () => {
    const history = [
      system('sys'),
      user('hi'),
      calling(['call_1', 'call_2']),
      result('call_1'),
      result('call_2'),
      assistant('done'),
    ];
    const out = normalizeOutgoing(history);
    expect(out).toEqual([
      system('sys'),
      user('hi'),
      { role: 'assistant', content: null, tool_calls: [call('call_1'), call('call_2')] },
      result('call_1'),
      result('call_2'),
      assistant('done'),
    ]);
    expect(problemsOf(out)).toEqual([]);
  });

  it('keeps a plain valid message as the same object, and copies one with more keys without them', () => {
    const plain = user('what changed in the deploy?');
    const stored = { ...assistant('the port'), seq: 4, session_id: 'sess_a', tokens: 7 };
    const leadingSpace = user(' indented question');
    const out = normalizeOutgoing([system('be brief'), plain, stored, leadingSpace]);
    expect(out[1]).toBe(plain);
    expect(out[3]).toBe(leadingSpace);
    expect(out[2]).not.toBe(stored);
    expect(out[2]).toEqual({ role: 'assistant', content: 'the port' });
    expect(Object.keys(out[2]!)).toEqual(['role', 'content']);
  });

  it('gives a call with no result an "interrupted" result with its id', () => {
    const out = normalizeOutgoing([user('hi'), calling(['a', 'b', 'c']), result('a'), result('b')]);
    expect(out.map((m) => [m.role, m.tool_call_id, m.content])).toEqual([
      ['user', undefined, 'hi'],
      ['assistant', undefined, null],
      ['tool', 'a', 'result of a'],
      ['tool', 'b', 'result of b'],
      ['tool', 'c', INTERRUPTED_TOOL_RESULT],
    ]);
    expect(problemsOf(out)).toEqual([]);
  });

  it('drops orphan tool results, including one at the start', () => {
    const out = normalizeOutgoing([
      system('sys'),
      result('ghost'),
      user('hi'),
      assistant('hello'),
      result('other'),
      user('again'),
    ]);
    expect(out.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'user']);
    expect(problemsOf(out)).toEqual([]);
  });

  it('keeps the first of duplicated results and puts results in call order', () => {
    const out = normalizeOutgoing([
      user('hi'),
      calling(['a', 'b']),
      result('b', 'b first'),
      result('a', 'a first'),
      result('b', 'b again'),
    ]);
    expect(out.slice(2).map((m) => [m.tool_call_id, m.content])).toEqual([
      ['a', 'a first'],
      ['b', 'b first'],
    ]);
    expect(problemsOf(out)).toEqual([]);
  });

  it('treats a result that arrives after a later message as an orphan', () => {
    const out = normalizeOutgoing([user('hi'), calling(['a']), user('next'), result('a', 'late')]);
    expect(out.map((m) => [m.role, m.content])).toEqual([
      ['user', 'hi'],
      ['assistant', null],
      ['tool', INTERRUPTED_TOOL_RESULT],
      ['user', 'next'],
    ]);
    expect(problemsOf(out)).toEqual([]);
  });

  it('sends nothing empty: blank texts are dropped, blank results get a placeholder', () => {
    const out = normalizeOutgoing([
      system('  '),
      user('hi'),
      assistant(''),
      user(' \n\t'),
      calling(['a', 'b'], '   '),
      result('a', ''),
      result('b', ' '),
      assistant(null),
    ]);
    expect(out).toEqual([
      user('hi'),
      { role: 'assistant', content: null, tool_calls: [call('a'), call('b')] },
      { ...result('a'), content: EMPTY_TOOL_RESULT },
      { ...result('b'), content: EMPTY_TOOL_RESULT },
    ]);
    expect(problemsOf(out)).toEqual([]);
  });

  it('keeps the text of an assistant message that also calls tools', () => {
    const out = normalizeOutgoing([user('hi'), calling(['a'], 'Let me look.'), result('a')]);
    expect(out[1]).toMatchObject({ content: 'Let me look.', tool_calls: [{ id: 'a' }] });
  });

  it('shortens an over-long or foreign id the same way for the call and its result', () => {
    const foreign = 'functions.lookup:0';
    const out = normalizeOutgoing([
      user('hi'),
      calling([LONG_ID, foreign]),
      result(foreign, 'foreign result'),
      result(LONG_ID, 'long result'),
    ]);
    const [longCall, foreignCall] = out[1]!.tool_calls!;
    expect(longCall!.id).not.toBe(LONG_ID);
    expect(longCall!.id.length).toBeLessThanOrEqual(MAX_TOOL_CALL_ID_CHARS);
    expect(foreignCall!.id).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(out.slice(2).map((m) => [m.tool_call_id, m.content])).toEqual([
      [longCall!.id, 'long result'],
      [foreignCall!.id, 'foreign result'],
    ]);
    // Deterministic: a replay of the same history maps to the same ids.
    expect(normalizeToolCallId(LONG_ID)).toBe(longCall!.id);
    expect(normalizeToolCallId(foreign)).toBe(foreignCall!.id);
    expect(problemsOf(out)).toEqual([]);
  });

  it('keeps ids providers accept as they are', () => {
    expect(normalizeToolCallId('call_abc-DEF_123')).toBe('call_abc-DEF_123');
    expect(normalizeToolCallId('x'.repeat(40))).toBe('x'.repeat(40));
    expect(normalizeToolCallId('x'.repeat(41))).not.toBe('x'.repeat(41));
    expect(normalizeToolCallId('')).toMatch(/^call_[A-Za-z0-9_-]+$/);
  });

  it('never starts the exchange with a tool-calling assistant message', () => {
    const out = normalizeOutgoing([system('sys'), user('  '), calling(['a']), result('a')]);
    expect(out[0]).toEqual(system('sys'));
    expect(out[1]).toEqual(user(LEADING_TOOL_CALL_BRIDGE));
    expect(out[2]).toMatchObject({ role: 'assistant', tool_calls: [{ id: 'a' }] });
    expect(problemsOf(out)).toEqual([]);
  });

  it('does not modify its input', () => {
    const history = [user('hi'), calling([LONG_ID, 'b']), result('b', ''), result('zzz')];
    const copy = structuredClone(history);
    normalizeOutgoing(history);
    expect(history).toEqual(copy);
  });
});

describe('missingTrailingResults: unit cases', () => {
  it('returns an interrupted result for each unanswered call of the last turn', () => {
    const history = [user('hi'), calling(['a', 'b', 'c']), result('a'), result('b')];
    expect(missingTrailingResults(history)).toEqual([
      { role: 'tool', tool_call_id: 'c', name: 'lookup', content: INTERRUPTED_TOOL_RESULT },
    ]);
  });

  it('leaves out pending ids (an ask_user call waiting for its answer)', () => {
    const history = [user('hi'), calling(['a', 'b'])];
    expect(missingTrailingResults(history, new Set(['b'])).map((m) => m.tool_call_id)).toEqual([
      'a',
    ]);
  });

  it('returns nothing when the last turn is complete or is not a tool turn', () => {
    expect(missingTrailingResults([user('hi'), calling(['a']), result('a')])).toEqual([]);
    expect(missingTrailingResults([user('hi'), assistant('hello')])).toEqual([]);
    expect(missingTrailingResults([user('hi')])).toEqual([]);
    expect(missingTrailingResults([])).toEqual([]);
  });
});

// ---- property tests -------------------------------------------------------------

type IdKind = 'short' | 'long' | 'foreign';

type Block =
  | { type: 'system'; text: string }
  | { type: 'user'; text: string }
  | { type: 'assistant'; text: string }
  | {
      type: 'toolTurn';
      text: string | null;
      idKinds: IdKind[];
      /** Indexes into the turn's calls (mod the number of calls); repeats are duplicates. */
      results: { call: number; text: string }[];
    }
  | { type: 'orphan'; text: string }
  /** A result for some earlier call (mod the calls seen so far): late or duplicated. */
  | { type: 'late'; call: number; text: string };

const textArb = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom('', ' ', '\n\t ') },
  { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 12 }) },
);

const blockArb: fc.Arbitrary<Block> = fc.oneof(
  { weight: 1, arbitrary: fc.record({ type: fc.constant('system' as const), text: textArb }) },
  { weight: 3, arbitrary: fc.record({ type: fc.constant('user' as const), text: textArb }) },
  { weight: 2, arbitrary: fc.record({ type: fc.constant('assistant' as const), text: textArb }) },
  {
    weight: 4,
    arbitrary: fc.record({
      type: fc.constant('toolTurn' as const),
      text: fc.option(textArb, { nil: null }),
      idKinds: fc.array(fc.constantFrom<IdKind>('short', 'long', 'foreign'), {
        minLength: 1,
        maxLength: 3,
      }),
      results: fc.array(fc.record({ call: fc.nat(5), text: textArb }), { maxLength: 5 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('orphan' as const), text: textArb }) },
  {
    weight: 1,
    arbitrary: fc.record({ type: fc.constant('late' as const), call: fc.nat(20), text: textArb }),
  },
);

/** Turns generated blocks into messages; call ids are unique across the history. */
function buildHistory(blocks: readonly Block[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  const allCalls: ToolCall[] = [];
  let counter = 0;
  const newId = (kind: IdKind): string => {
    counter += 1;
    if (kind === 'short') return `call_${counter}`;
    if (kind === 'long') return `toolu_${'y'.repeat(45)}_${counter}`;
    return `functions.tool_${counter}:${counter}`;
  };
  for (const block of blocks) {
    switch (block.type) {
      case 'system':
      case 'user':
      case 'assistant':
        messages.push({ role: block.type, content: block.text });
        break;
      case 'toolTurn': {
        const calls = block.idKinds.map((kind, i): ToolCall => ({
          id: newId(kind),
          type: 'function',
          function: { name: `tool_${i}`, arguments: `{"n":${i}}` },
        }));
        allCalls.push(...calls);
        messages.push({ role: 'assistant', content: block.text, tool_calls: calls });
        for (const r of block.results) {
          const target = calls[r.call % calls.length]!;
          messages.push({
            role: 'tool',
            tool_call_id: target.id,
            name: target.function.name,
            content: r.text,
          });
        }
        break;
      }
      case 'orphan':
        messages.push({ role: 'tool', tool_call_id: `orphan_${++counter}`, content: block.text });
        break;
      case 'late': {
        const target = allCalls[block.call % Math.max(1, allCalls.length)];
        if (target) {
          messages.push({
            role: 'tool',
            tool_call_id: target.id,
            name: target.function.name,
            content: block.text,
          });
        }
        break;
      }
    }
  }
  return messages;
}

const historyArb = fc.array(blockArb, { maxLength: 14 }).map(buildHistory);

describe('normalizeOutgoing: properties over random histories', () => {
  it('always produces a request a provider accepts', () => {
    fc.assert(
      fc.property(historyArb, (history) => {
        const out = normalizeOutgoing(history);
        if (!out.some((m) => m.role !== 'system')) return;
        expect(problemsOf(out)).toEqual([]);
      }),
      { numRuns: 500 },
    );
  });

  it('answers every call exactly once, right after it, in call order, with mapped ids', () => {
    fc.assert(
      fc.property(historyArb, (history) => {
        const out = normalizeOutgoing(history);
        const originalIds = history.flatMap((m) => m.tool_calls ?? []).map((c) => c.id);
        const mapped = new Set(originalIds.map(normalizeToolCallId));
        out.forEach((message, i) => {
          if (message.role === 'tool') {
            expect(i).toBeGreaterThan(0);
            expect(['assistant', 'tool']).toContain(out[i - 1]!.role);
          }
          if (!message.tool_calls) return;
          const ids = message.tool_calls.map((c) => c.id);
          for (const id of ids) {
            expect(id.length).toBeLessThanOrEqual(MAX_TOOL_CALL_ID_CHARS);
            expect(mapped.has(id)).toBe(true);
          }
          const results = out.slice(i + 1, i + 1 + ids.length);
          expect(results.map((r) => [r.role, r.tool_call_id])).toEqual(
            ids.map((id) => ['tool', id]),
          );
          expect(out[i + 1 + ids.length]?.role).not.toBe('tool');
        });
      }),
      { numRuns: 300 },
    );
  });

  it('keeps the first real result of each call and synthesizes only the missing ones', () => {
    fc.assert(
      fc.property(historyArb, (history) => {
        const out = normalizeOutgoing(history);
        // Expected content per (mapped) call id, computed from the raw history:
        // the first non-orphan result in the block right after the call.
        const expected = new Map<string, string>();
        history.forEach((message, i) => {
          for (const c of message.tool_calls ?? []) {
            let content = INTERRUPTED_TOOL_RESULT;
            for (let j = i + 1; j < history.length && history[j]!.role === 'tool'; j++) {
              if (history[j]!.tool_call_id === c.id) {
                const text = history[j]!.content;
                content = text === null || text.trim() === '' ? EMPTY_TOOL_RESULT : text;
                break;
              }
            }
            expected.set(normalizeToolCallId(c.id), content);
          }
        });
        const actual = new Map(
          out.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id!, m.content]),
        );
        expect(actual).toEqual(expected);
      }),
      { numRuns: 300 },
    );
  });

  it('is idempotent and leaves its input untouched', () => {
    fc.assert(
      fc.property(historyArb, (history) => {
        const copy = structuredClone(history);
        const once = normalizeOutgoing(history);
        expect(history).toEqual(copy);
        expect(normalizeOutgoing(once)).toEqual(once);
      }),
      { numRuns: 200 },
    );
  });
});

describe('missingTrailingResults: properties', () => {
  /** A history that ends in a tool turn, with some of its results present (maybe duplicated). */
  const endingInToolTurnArb = fc
    .tuple(
      historyArb,
      fc.array(fc.constantFrom<IdKind>('short', 'long', 'foreign'), {
        minLength: 1,
        maxLength: 3,
      }),
      fc.array(fc.nat(5), { maxLength: 4 }),
      fc.array(fc.nat(5), { maxLength: 2 }),
    )
    .map(([prefix, kinds, answered, pending]) => {
      const tail = buildHistory([
        {
          type: 'toolTurn',
          text: null,
          idKinds: kinds,
          results: answered.map((n) => ({ call: n, text: 'ok' })),
        },
      ]);
      // Prefix ids must not collide with the tail's: tag the tail's.
      const calls = tail[0]!.tool_calls!.map((c) => ({ ...c, id: `last_${c.id}` }));
      const results = tail.slice(1).map((m) => ({ ...m, tool_call_id: `last_${m.tool_call_id}` }));
      const pendingIds = new Set(pending.map((n) => calls[n % calls.length]!.id));
      return {
        history: [...prefix, { ...tail[0]!, tool_calls: calls }, ...results],
        calls,
        answered: new Set(results.map((r) => r.tool_call_id)),
        pendingIds,
      };
    });

  it('returns exactly the unanswered calls of the last assistant message, minus pending ids', () => {
    fc.assert(
      fc.property(endingInToolTurnArb, ({ history, calls, answered, pendingIds }) => {
        const repairs = missingTrailingResults(history, pendingIds);
        const expected = calls.filter((c) => !answered.has(c.id) && !pendingIds.has(c.id));
        expect(repairs).toEqual(
          expected.map((c) => ({
            role: 'tool',
            tool_call_id: c.id,
            name: c.function.name,
            content: INTERRUPTED_TOOL_RESULT,
          })),
        );
        // Once persisted, the history is whole: nothing more to repair.
        expect(missingTrailingResults([...history, ...repairs], pendingIds)).toEqual([]);
      }),
      { numRuns: 300 },
    );
  });

  it('returns nothing when the history does not end in a tool turn', () => {
    fc.assert(
      fc.property(historyArb, fc.string({ minLength: 1 }), (history, text) => {
        expect(missingTrailingResults([...history, user(text)])).toEqual([]);
        expect(missingTrailingResults([...history, assistant(text)])).toEqual([]);
      }),
      { numRuns: 100 },
    );
  });
});

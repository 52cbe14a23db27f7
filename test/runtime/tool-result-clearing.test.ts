/**
 * Which old tool results a request sends as placeholders: only those outside
 * the newest keepLast and longer than minTokens, in batches (the request's
 * prefix changes only when a batch is worth it), never undone as the
 * conversation grows, with a placeholder that names the tool, the call and
 * the size; the messages given are never changed.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ChatMessage, StoredMessage } from '../../src/llm/messages.js';
import { estimateTextTokens } from '../../src/llm/tokens.js';
import {
  clearedZone,
  clearingPolicy,
  storedClearedResults,
  ToolResultClearing,
  type ClearingPolicy,
} from '../../src/runtime/tool-result-clearing.js';

const policy = (over: Partial<ClearingPolicy> = {}): ClearingPolicy => ({
  keepLast: 2,
  minTokens: 50,
  batchTokens: 300,
  recallable: true,
  ...over,
});

/** A text of about `tokens` tokens (" data" is one token). */
function textOf(tokens: number, tag: string): string {
  return `${tag}:${' data'.repeat(tokens)}`;
}

/** An exchange: the assistant's call and its result, of `tokens` tokens. */
function exchange(id: string, tokens: number): ChatMessage[] {
  return [
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id, type: 'function', function: { name: 'fetch_page', arguments: '{}' } }],
    },
    { role: 'tool', tool_call_id: id, name: 'fetch_page', content: textOf(tokens, id) },
  ];
}

function conversation(sizes: readonly number[]): ChatMessage[] {
  return [
    { role: 'system', content: 'You help.' },
    { role: 'user', content: 'read the pages' },
    ...sizes.flatMap((tokens, i) => exchange(`call_${i}`, tokens)),
  ];
}

describe('clearedZone', () => {
  it('waits until the clearable results outside the newest keepLast are worth a batch', () => {
    // 200-token results, keepLast 2, batch 300: the third result pushes the
    // first out (200 waiting), the fourth the second (400 ≥ 300): both go.
    expect(clearedZone([200, 200, 200], policy())).toBe(0);
    expect(clearedZone([200, 200, 200, 200], policy())).toBe(2);
    expect(clearedZone([200, 200, 200, 200, 200], policy())).toBe(2);
    expect(clearedZone([200, 200, 200, 200, 200, 200], policy())).toBe(4);
  });

  it('never counts results that are not clearable (0) towards a batch', () => {
    expect(clearedZone([0, 0, 0, 0, 0, 0, 0], policy())).toBe(0);
  });

  it('is monotone: a longer conversation never clears less', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 51, max: 900 })), { maxLength: 40 }),
        fc.integer({ min: 0, max: 5 }),
        fc.integer({ min: 50, max: 2_000 }),
        (tokens, keepLast, batchTokens) => {
          const p = policy({ keepLast, batchTokens });
          let last = 0;
          for (let n = 0; n <= tokens.length; n++) {
            const zone = clearedZone(tokens.slice(0, n), p);
            expect(zone).toBeGreaterThanOrEqual(last);
            expect(zone).toBeLessThanOrEqual(Math.max(0, n - keepLast));
            last = zone;
          }
        },
      ),
    );
  });
});

describe('ToolResultClearing', () => {
  it('clears only old, long results; keeps the newest keepLast and the short ones whole', () => {
    const clearing = new ToolResultClearing(policy({ batchTokens: 100 }));
    const messages = conversation([200, 20, 200, 200, 200]);
    const cleared = clearing.plan(messages);
    expect(cleared.map((r) => r.toolCallId)).toEqual(['call_0', 'call_2']);
    for (const result of cleared) {
      expect(result.tool).toBe('fetch_page');
      expect(result.tokens).toBe(estimateTextTokens(messages[result.index]!.content!));
    }
  });

  it('sends a one-line placeholder naming the tool, the call, the size and recall; changes nothing given', () => {
    const clearing = new ToolResultClearing(policy({ batchTokens: 100 }));
    const messages = conversation([200, 200, 200, 200]);
    const copy = structuredClone(messages);
    const cleared = clearing.plan(messages);
    const sent = clearing.apply(messages, cleared);
    expect(messages).toEqual(copy);
    expect(sent).toHaveLength(messages.length);
    const first = sent[cleared[0]!.index]!;
    expect(first).toMatchObject({ role: 'tool', tool_call_id: 'call_0', name: 'fetch_page' });
    expect(first.content).not.toContain('\n');
    expect(first.content).toContain('fetch_page');
    expect(first.content).toContain('call_0');
    expect(first.content).toContain(`${cleared[0]!.tokens} tokens`);
    expect(first.content).toMatch(/recall brings it back/);
    // Every assistant message and every call id is still there, in order.
    expect(sent.map((m) => [m.role, m.tool_call_id, m.tool_calls])).toEqual(
      messages.map((m) => [m.role, m.tool_call_id, m.tool_calls]),
    );
    expect(clearing.savedTokens(cleared)).toBeGreaterThan(300);
  });

  it('does not promise recall when the agent turned recall off', () => {
    const clearing = new ToolResultClearing(policy({ batchTokens: 100, recallable: false }));
    const messages = conversation([200, 200, 200, 200]);
    const sent = clearing.apply(messages, clearing.plan(messages));
    expect(sent[3]!.content).toMatch(/cleared/);
    expect(sent[3]!.content).not.toMatch(/recall/);
  });

  it('changes the request rarely over a long tool-heavy conversation: once per batch', () => {
    // 60 results of ~250 tokens, window 8 000 (batch 800 tokens): a prefix
    // change every fourth result, not at each one.
    const clearing = new ToolResultClearing(
      clearingPolicy({ keepLast: 3, minTokens: 100 }, 8_000, true)!,
    );
    const sizes = Array.from({ length: 60 }, () => 250);
    let changes = 0;
    let previous = '';
    for (let n = 1; n <= sizes.length; n++) {
      const messages = conversation(sizes.slice(0, n));
      const ids = clearing
        .plan(messages)
        .map((r) => r.toolCallId)
        .join(',');
      if (ids !== previous) changes += 1;
      previous = ids;
    }
    expect(changes).toBeGreaterThan(5);
    expect(changes).toBeLessThanOrEqual(60 / 3);
  });

  it('is off when the setting is false', () => {
    expect(clearingPolicy(false, 8_000, true)).toBeNull();
    expect(clearingPolicy({ keepLast: 3, minTokens: 400 }, 8_000, true)?.batchTokens).toBe(800);
    // A small window: the batch is never below minTokens.
    expect(clearingPolicy({ keepLast: 3, minTokens: 400 }, 1_000, true)?.batchTokens).toBe(400);
  });
});

describe('storedClearedResults', () => {
  it('finds each cleared result’s stored message, a reused call id included', () => {
    const clearing = new ToolResultClearing(policy({ batchTokens: 100, keepLast: 1 }));
    // The same call id twice (a provider that numbers calls per turn).
    const messages = [...conversation([200]), ...exchange('call_0', 200), ...exchange('x', 200)];
    const stored = messages
      .filter((m) => m.role !== 'system')
      .map((m, i): StoredMessage => ({ ...m, session_id: 's', seq: i + 2, created_at: 'now' }));
    const cleared = clearing.plan(messages);
    expect(cleared.map((r) => r.toolCallId)).toEqual(['call_0', 'call_0']);
    expect(storedClearedResults(cleared, stored).map((m) => m.message.seq)).toEqual([4, 6]);
  });
});

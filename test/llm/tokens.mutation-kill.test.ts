/**
 * The estimator's edges that the general tests leave open: a text just past
 * one slice whose sliced count differs from the whole count (so the slicing is
 * observable), a stored count standing in for the tokenizer, and the sum over
 * several messages.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import {
  ESTIMATE_SLICE_CHARS,
  estimateMessagesTokens,
  estimateMessageTokens,
  estimateTextTokens,
  MESSAGE_OVERHEAD_TOKENS,
} from '../../src/llm/tokens.js';

const { countTokens } = createRequire(import.meta.url)(
  'gpt-tokenizer/cjs/encoding/cl100k_base',
) as { countTokens: (text: string) => number };

describe('estimateTextTokens slices a text longer than one slice', () => {
  // 'word ' × 300 = 1 500 characters: the slice boundary at 1 000 falls
  // between "word" and its space, which the whole text tokenizes as one.
  const text = 'word '.repeat(300);

  it('counts each slice apart, which differs from the whole count here', () => {
    expect(text.length).toBeGreaterThan(ESTIMATE_SLICE_CHARS);
    const sliced =
      countTokens(text.slice(0, ESTIMATE_SLICE_CHARS)) +
      countTokens(text.slice(ESTIMATE_SLICE_CHARS));
    expect(sliced).not.toBe(countTokens(text));
    expect(estimateTextTokens(text)).toBe(sliced);
  });

  it('counts a text of exactly one slice whole', () => {
    const one = 'word '.repeat(ESTIMATE_SLICE_CHARS / 5);
    expect(one.length).toBe(ESTIMATE_SLICE_CHARS);
    expect(estimateTextTokens(one)).toBe(countTokens(one));
  });
});

describe('estimateMessageTokens with a stored count', () => {
  it('returns the stored count rather than counting the text', () => {
    const message = {
      role: 'user' as const,
      content: 'a much longer text than seven tokens, surely',
      tokens: 7,
    };
    expect(estimateMessageTokens(message)).toBe(7);
  });

  it('counts the text when the stored count is null', () => {
    const message = { role: 'user' as const, content: 'hello there', tokens: null };
    expect(estimateMessageTokens(message)).toBe(
      MESSAGE_OVERHEAD_TOKENS + countTokens('hello there'),
    );
  });
});

describe('estimateMessagesTokens', () => {
  it('adds up every message, stored counts and counted ones', () => {
    const counted = { role: 'user' as const, content: 'hello there' };
    const total = estimateMessagesTokens([
      counted,
      { role: 'assistant', content: 'x', tokens: 11 },
      counted,
    ]);
    expect(total).toBe(2 * (MESSAGE_OVERHEAD_TOKENS + countTokens('hello there')) + 11);
    expect(estimateMessagesTokens([])).toBe(0);
  });
});

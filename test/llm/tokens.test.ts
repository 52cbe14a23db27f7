/**
 * The one token estimator: long texts are counted in slices, so a run without
 * spaces (a base64 blob, a minified file) cannot stall a write, and ordinary
 * prose counts about the same as whole.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import {
  ESTIMATE_SLICE_CHARS,
  estimateMessageTokens,
  estimateTextTokens,
  MESSAGE_OVERHEAD_TOKENS,
} from '../../src/llm/tokens.js';

const { countTokens } = createRequire(import.meta.url)(
  'gpt-tokenizer/cjs/encoding/cl100k_base',
) as { countTokens: (text: string) => number };

describe('estimateTextTokens', () => {
  it('counts short text exactly as the tokenizer does', () => {
    const text = 'The quick brown fox jumps over the lazy dog.';
    expect(estimateTextTokens(text)).toBe(countTokens(text));
    expect(estimateTextTokens('')).toBe(0);
  });

  it('counts long prose within 1 % of the whole-text count', () => {
    const prose = 'Compaction keeps a long session inside the window. '.repeat(400);
    expect(prose.length).toBeGreaterThan(ESTIMATE_SLICE_CHARS * 10);
    const whole = countTokens(prose);
    expect(Math.abs(estimateTextTokens(prose) - whole) / whole).toBeLessThan(0.01);
  });

  it('counts a long run without spaces slice by slice', () => {
    const run = 'x'.repeat(ESTIMATE_SLICE_CHARS * 50);
    const slice = countTokens('x'.repeat(ESTIMATE_SLICE_CHARS));
    expect(estimateTextTokens(run)).toBe(slice * 50);
  });
});

describe('estimateMessageTokens', () => {
  it('adds the framing overhead and the tool calls', () => {
    const content = estimateMessageTokens({ role: 'user', content: 'hi' });
    expect(content).toBe(MESSAGE_OVERHEAD_TOKENS + countTokens('hi'));
    const withCall = estimateMessageTokens({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c', type: 'function', function: { name: 'look', arguments: '{}' } }],
    });
    expect(withCall).toBe(MESSAGE_OVERHEAD_TOKENS + countTokens('look') + countTokens('{}') + 3);
  });
});

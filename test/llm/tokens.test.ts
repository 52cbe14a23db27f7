/**
 * The one token estimator: long texts are counted in slices, so a run without
 * spaces (a base64 blob, a minified file) cannot stall a write, and ordinary
 * prose counts about the same as whole.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import {
  ESTIMATE_SLICE_CHARS,
  estimateJoinedTextTokens,
  estimateMessagesTokens,
  estimateMessageTokens,
  estimateTextTokens,
  MESSAGE_OVERHEAD_TOKENS,
  PROMPT_COUNTER_MAX_KEYS,
  PromptTokenCounter,
  SHARED_MEMO_MIN_TEXT_CHARS,
  TOKEN_MEMO_MAX_CHARS,
  TOKEN_MEMO_MAX_TEXT_CHARS,
  TokenMemo,
} from '../../src/llm/tokens.js';

const encoding = createRequire(import.meta.url)('gpt-tokenizer/cjs/encoding/cl100k_base') as {
  countTokens: (text: string, options?: { disallowedSpecial: Set<string> }) => number;
};
/** The tokenizer's own count, special-token text taken as plain text. */
const countTokens = (text: string): number =>
  encoding.countTokens(text, { disallowedSpecial: new Set() });

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

  it('gives the same count for a text it has seen (remembered) and its own count for a near copy', () => {
    const text = 'A reply the model gave, stored, then sent back in the next prompt.';
    expect(text.length).toBeGreaterThanOrEqual(SHARED_MEMO_MIN_TEXT_CHARS);
    const first = estimateTextTokens(text);
    expect(estimateTextTokens(`${text}`)).toBe(first);
    expect(first).toBe(countTokens(text));
    const edited = `${text} With a long tail of extra words appended to it.`;
    expect(estimateTextTokens(edited)).toBe(countTokens(edited));
    expect(estimateTextTokens(text)).toBe(countTokens(text));
  });
});

describe('special-token text', () => {
  it('is counted as the plain text it is, short or long, not refused', () => {
    // The tokenizer's default throws on these; a chat that mentions one was an internal error.
    expect(() => encoding.countTokens('a <|endoftext|> b')).toThrow(/special token/);
    for (const text of [
      '<|endoftext|>',
      'What does <|im_start|>system mean in a chat template? And <|fim_prefix|>?',
      `${'Some prose before it. '.repeat(60)}<|endofprompt|>`,
    ]) {
      const expected =
        Math.ceil(text.length / ESTIMATE_SLICE_CHARS) > 1 ? undefined : countTokens(text);
      const counted = estimateTextTokens(text);
      expect(counted).toBeGreaterThan(1);
      if (expected !== undefined) expect(counted).toBe(expected);
      expect(estimateMessageTokens({ role: 'user', content: text })).toBe(
        counted + MESSAGE_OVERHEAD_TOKENS,
      );
    }
  });
});

describe('estimateJoinedTextTokens', () => {
  it('counts parts that meet between pre-tokens exactly as the whole, and remembers the whole', () => {
    const tail = ' Then a constant sentence follows, the same every time it is used here.';
    const heads = [
      'She said: "yes".',
      'Numbers 12345 at the end: 678.',
      'Questions?!".',
      'Unicode – naïve café, 東京 and an emoji 🎉.',
      '"".',
    ];
    for (const head of heads) {
      const joined = estimateJoinedTextTokens([head, tail]);
      expect(joined).toBe(countTokens(head + tail));
      // The whole is remembered: counting it again gives the same, from the memo.
      expect(estimateTextTokens(head + tail)).toBe(joined);
    }
  });

  it('adds up the parts, whatever they are (the caller chooses where they meet)', () => {
    // "ab" + "cd" is one pre-token: the parts' sum differs from the whole's count.
    const parts = ['Unbelievab', 'lyunpronounceablewordsjoined'];
    expect(estimateJoinedTextTokens(parts)).toBe(countTokens(parts[0]!) + countTokens(parts[1]!));
    expect(estimateJoinedTextTokens(parts)).not.toBe(countTokens(parts.join('')));
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

describe('TokenMemo', () => {
  it('counts what estimateTextTokens counts, messages included', () => {
    const memo = new TokenMemo();
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a helpful assistant.' },
      { role: 'user', content: 'where is the lighthouse' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c', type: 'function', function: { name: 'look', arguments: '{}' } }],
      },
    ];
    const expected = estimateMessagesTokens(messages);
    expect(estimateMessagesTokens(messages, memo.count)).toBe(expected);
    expect(estimateMessagesTokens(messages, memo.count)).toBe(expected);
    const long = 'word '.repeat(TOKEN_MEMO_MAX_TEXT_CHARS);
    expect(memo.count(long)).toBe(estimateTextTokens(long));
  });

  it('holds at most TOKEN_MEMO_MAX_CHARS, forgetting the oldest texts first', () => {
    const memo = new TokenMemo();
    const counts = memo['counts'];
    const text = (i: number) => `${i} `.padEnd(TOKEN_MEMO_MAX_TEXT_CHARS, 'x');
    const fit = Math.floor(TOKEN_MEMO_MAX_CHARS / TOKEN_MEMO_MAX_TEXT_CHARS);
    for (let i = 0; i <= fit; i++) memo.count(text(i));
    expect(counts.size).toBe(fit);
    expect(counts.has(text(0))).toBe(false);
    expect(counts.has(text(fit))).toBe(true);
    // Longer texts are counted, never kept; one of exactly the limit is kept.
    memo.count('y'.repeat(TOKEN_MEMO_MAX_TEXT_CHARS + 1));
    expect(counts.size).toBe(fit);
    expect(counts.has('y'.repeat(TOKEN_MEMO_MAX_TEXT_CHARS + 1))).toBe(false);
  });

  it('keeps texts adding up to exactly TOKEN_MEMO_MAX_CHARS, and one more evicts the oldest', () => {
    const memo = new TokenMemo();
    const counts = memo['counts'];
    const size = 10_000;
    const text = (i: number) => `${i} `.padEnd(size, 'z');
    const fit = TOKEN_MEMO_MAX_CHARS / size;
    for (let i = 0; i < fit; i++) memo.count(text(i));
    expect(counts.size).toBe(fit);
    expect(counts.has(text(0))).toBe(true);
    memo.count(text(fit));
    expect(counts.has(text(0))).toBe(false);
    expect(counts.size).toBe(fit);
  });

  it('counts a remembered text once against the bound, however often it is asked', () => {
    const memo = new TokenMemo();
    const counts = memo['counts'];
    memo.count('the first text');
    const long = 'w '.repeat(TOKEN_MEMO_MAX_TEXT_CHARS / 2);
    // Asked often enough to pass the bound many times over, were it counted each time.
    for (let i = 0; i < 200; i++) expect(memo.count(long)).toBe(estimateTextTokens(long));
    expect(counts.has('the first text')).toBe(true);
    expect(memo['chars']).toBe('the first text'.length + long.length);
  });
});

describe('PromptTokenCounter', () => {
  const call = (name: string, args: string): ChatMessage => ({
    role: 'assistant',
    content: null,
    tool_calls: [{ id: 'c', type: 'function', function: { name, arguments: args } }],
  });
  const conversation = (turns: number): ChatMessage[] => [
    { role: 'system', content: 'You are a helpful assistant.' },
    ...Array.from({ length: turns }, (_, i): ChatMessage[] => [
      { role: 'user', content: `question number ${i} about the lighthouse` },
      { role: 'assistant', content: `answer ${i}: `.padEnd(40 + i, 'x y ') },
    ]).flat(),
  ];

  it('counts what estimateMessagesTokens counts, prompt after growing prompt', () => {
    const counter = new PromptTokenCounter();
    for (let turns = 0; turns < 6; turns++) {
      const messages = conversation(turns);
      expect(counter.count(messages, 'sess_a')).toBe(estimateMessagesTokens(messages));
    }
  });

  it('recounts a message that changed at its place: text, tool name or arguments', () => {
    const counter = new PromptTokenCounter();
    const messages = [...conversation(2), call('look', '{}')];
    counter.count(messages, 'sess_a');
    const edits: ChatMessage[][] = [
      messages.map((m, i) =>
        i === 1 ? { ...m, content: 'a much longer question than before, by far' } : m,
      ),
      [...messages.slice(0, -1), call('look_everywhere_at_once', '{}')],
      [...messages.slice(0, -1), call('look', '{"where": "under the lighthouse stairs"}')],
      messages.slice(1),
    ];
    for (const edited of edits) {
      expect(counter.count(edited, 'sess_a')).toBe(estimateMessagesTokens(edited));
    }
  });

  it('keeps conversations apart by key, and counts a prompt without a key whole', () => {
    const counter = new PromptTokenCounter();
    const a = conversation(3);
    const b = a.map((m) => ({ ...m, content: `${m.content ?? ''} and some more words here` }));
    counter.count(a, 'sess_a');
    expect(counter.count(b, 'sess_b')).toBe(estimateMessagesTokens(b));
    expect(counter.count(b)).toBe(estimateMessagesTokens(b));
    expect(counter.count(a, 'sess_a')).toBe(estimateMessagesTokens(a));
  });

  it(`remembers at most ${PROMPT_COUNTER_MAX_KEYS} keys, the least recently used going first`, () => {
    const counter = new PromptTokenCounter();
    const previous = counter['previous'];
    const messages = conversation(1);
    for (let k = 0; k <= PROMPT_COUNTER_MAX_KEYS; k++) counter.count(messages, `sess_${k}`);
    expect(previous.size).toBe(PROMPT_COUNTER_MAX_KEYS);
    expect(previous.has('sess_0')).toBe(false);
    // Using sess_1 again keeps it past the next eviction, which takes sess_2.
    counter.count(messages, 'sess_1');
    counter.count(messages, 'sess_new');
    expect(previous.has('sess_1')).toBe(true);
    expect(previous.has('sess_2')).toBe(false);
    expect(previous.size).toBe(PROMPT_COUNTER_MAX_KEYS);
    // Without a key nothing is remembered.
    counter.count(conversation(2));
    expect(previous.size).toBe(PROMPT_COUNTER_MAX_KEYS);
  });

  it('reuses the previous count for an unchanged message instead of counting it again', () => {
    const counted: string[] = [];
    const counter = new PromptTokenCounter(
      (text: string) => (counted.push(text), estimateTextTokens(text)),
    );
    const first = conversation(2);
    counter.count(first, 'sess_a');
    counted.length = 0;
    const next = [...first, { role: 'user' as const, content: 'one more question' }];
    expect(counter.count(next, 'sess_a')).toBe(estimateMessagesTokens(next));
    expect(counted).toEqual(['one more question']);
  });
});

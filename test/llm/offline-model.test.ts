/**
 * The built-in offline model: deterministic, labelled as offline in every
 * reply, and an extractive summariser that stays within its token budget.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { OFFLINE_LABEL, OfflineModel } from '../../src/llm/offline-model.js';
import { CHARS_PER_TOKEN } from '../../src/llm/tokens.js';
import { TITLE_PROMPT } from '../../src/runtime/session-titler.js';

const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are helpful.' },
  { role: 'user', content: 'What is the capital of Norway?' },
  { role: 'assistant', content: 'Oslo.' },
  { role: 'user', content: 'And   its\npopulation?' },
];

describe('OfflineModel', () => {
  it('answers chats deterministically, quoting the last user message, labelled offline', async () => {
    const model = new OfflineModel();
    const first = await model.complete({ messages: conversation, purpose: 'chat' });
    const second = await model.complete({ messages: conversation, purpose: 'chat' });
    expect(first).toEqual(second);
    expect(first.message.role).toBe('assistant');
    expect(first.message.content!.startsWith(OFFLINE_LABEL)).toBe(true);
    expect(OFFLINE_LABEL).toBe('[offline model]');
    expect(first.message.content).toContain('"And its population?"');
    expect(first.finishReason).toBe('stop');
    expect(first.model).toBe('offline');
    expect(first.usage!.prompt_tokens).toBeGreaterThan(0);
    expect(first.usage!.completion_tokens).toBeGreaterThan(0);
  });

  it("reports the canned reply's usage as the tokenizer counts the whole reply, whatever was quoted", async () => {
    const { countTokens } = createRequire(import.meta.url)(
      'gpt-tokenizer/cjs/encoding/cl100k_base',
    ) as { countTokens: (text: string, options: { disallowedSpecial: Set<string> }) => number };
    const model = new OfflineModel();
    const quotes = [
      'Where is it?',
      'Say "hi".',
      'ends with digits 2041',
      'trailing punctuation!?…',
      `${'long words '.repeat(40)}end`,
      'naïve 東京 🎉',
      'mentions <|endoftext|>',
      '',
    ];
    for (const quote of quotes) {
      const response = await model.complete({
        messages: [{ role: 'user', content: quote }],
        purpose: 'chat',
      });
      const reply = response.message.content!;
      expect(reply).toContain('This is a canned reply');
      expect(response.usage!.completion_tokens).toBe(
        countTokens(reply, { disallowedSpecial: new Set() }),
      );
    }
  });

  it('streams the same reply in word-sized deltas', async () => {
    const model = new OfflineModel();
    const deltas: string[] = [];
    const streamed = await model.complete(
      { messages: conversation, purpose: 'chat' },
      { onDelta: (text) => deltas.push(text) },
    );
    const plain = await model.complete({ messages: conversation, purpose: 'chat' });
    expect(deltas.length).toBeGreaterThan(3);
    expect(deltas.join('')).toBe(plain.message.content);
    expect(streamed.message.content).toBe(plain.message.content);
  });

  it('keeps its context window', () => {
    expect(new OfflineModel(4096).contextWindow).toBe(4096);
  });

  it('summarises extractively: the start of each input line, labelled offline', async () => {
    const model = new OfflineModel();
    const input = [
      'User asked about invoice INV-2041 for ACME Corp.',
      '',
      'Assistant found the amount: 1 250 EUR, due 2024-07-01.',
    ].join('\n');
    const response = await model.complete({
      messages: [
        { role: 'system', content: 'Summarise.' },
        { role: 'user', content: input },
      ],
      purpose: 'summary',
    });
    expect(response.message.content).toBe(
      `${OFFLINE_LABEL} Extractive summary:\n` +
        '- User asked about invoice INV-2041 for ACME Corp.\n' +
        '- Assistant found the amount: 1 250 EUR, due 2024-07-01.',
    );
  });

  it('clips long lines and bounds the summary by maxTokens × CHARS_PER_TOKEN characters', async () => {
    const model = new OfflineModel();
    const lines = Array.from({ length: 200 }, (_, i) => `fact ${i}: ${'detail '.repeat(40)}`);
    for (const maxTokens of [20, 100, 500]) {
      const response = await model.complete({
        messages: [{ role: 'user', content: lines.join('\n') }],
        maxTokens,
        purpose: 'summary',
      });
      const summary = response.message.content!;
      expect(summary.length).toBeLessThanOrEqual(maxTokens * CHARS_PER_TOKEN);
      expect(summary.startsWith(`${OFFLINE_LABEL} Extractive summary:`)).toBe(true);
      for (const line of summary.split('\n').slice(1)) {
        expect(line.length).toBeLessThanOrEqual(2 + 160);
      }
      if (maxTokens >= 100) expect(summary).toContain('- fact 0:');
    }
  });

  it('titles a conversation with the first words the user wrote, without the offline label', async () => {
    const model = new OfflineModel();
    const titleOf = async (userText: string): Promise<string> => {
      const response = await model.complete({
        purpose: 'title',
        maxTokens: 30,
        messages: [
          { role: 'system', content: TITLE_PROMPT },
          { role: 'user', content: `User: ${userText}\n\nAssistant: ${OFFLINE_LABEL} You said: …` },
        ],
      });
      return response.message.content!;
    };
    expect(await titleOf('Hello! My name is Ada and I work on the Cairn project.')).toBe(
      'Hello! My name is Ada',
    );
    expect(await titleOf('help me plan a trip to Paris next week')).toBe('Help me plan a trip');
    expect(await titleOf('What is the capital of Norway? And Sweden?')).toBe(
      'What is the capital of Norway',
    );
    expect(await titleOf('Budget')).toBe('Budget');
    expect(await titleOf('   ')).toBe('New conversation');
    expect(await titleOf('Plan   a\nthree-day trip.')).toBe('Plan a three-day trip');
  });
});

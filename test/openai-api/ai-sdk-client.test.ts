/**
 * A second real client library against /v1: the Vercel AI SDK's
 * OpenAI-compatible provider, for chat, streaming and client-side tools.
 */
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, jsonSchema, streamText, tool } from 'ai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

let harness: TestApp;
let provider: ReturnType<typeof createOpenAICompatible>;

beforeAll(async () => {
  harness = await startTestApp({ server: { apiKey: 'sk-ai-sdk' } });
  await harness.app.server.listen({ host: '127.0.0.1', port: 0 });
  const address = harness.app.server.server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  provider = createOpenAICompatible({
    name: 'cairn',
    baseURL: `http://127.0.0.1:${address.port}/v1`,
    apiKey: 'sk-ai-sdk',
    includeUsage: true,
  });
});

afterAll(async () => {
  await harness.close();
});

beforeEach(() => {
  harness.fake!.reset();
});

describe('Vercel AI SDK (@ai-sdk/openai-compatible)', () => {
  it('generates text, with usage and the session header', async () => {
    harness.fake!.script({
      content: 'Hi from Cairn',
      usage: { prompt_tokens: 10, completion_tokens: 3 },
    });
    const result = await generateText({
      model: provider('assistant'),
      prompt: 'Hello',
      maxRetries: 0,
    });
    expect(result.text).toBe('Hi from Cairn');
    expect(result.finishReason).toBe('stop');
    expect(result.usage.inputTokens).toBe(10);
    expect(result.usage.outputTokens).toBe(3);
    expect(result.response.headers?.['x-cairn-session-id']).toMatch(/^sess_/);
  });

  it('streams text', async () => {
    harness.fake!.script({ content: 'alpha beta gamma' });
    const result = streamText({
      model: provider('assistant'),
      messages: [{ role: 'user', content: 'Stream please' }],
      maxRetries: 0,
    });
    const pieces: string[] = [];
    for await (const piece of result.textStream) pieces.push(piece);
    expect(pieces.length).toBeGreaterThan(1);
    expect(pieces.join('')).toBe('alpha beta gamma');
    expect(await result.finishReason).toBe('stop');
  });

  it('returns a call to a client tool it declared, then continues with the result', async () => {
    harness.fake!.script(
      { tool_calls: [{ id: 'call_sdk1', name: 'lookup', arguments: '{"q":"cairn"}' }] },
      { content: 'Found it.' },
    );
    const tools = {
      lookup: tool({
        description: 'Look something up',
        inputSchema: jsonSchema<{ q: string }>({
          type: 'object',
          properties: { q: { type: 'string' } },
          required: ['q'],
        }),
      }),
    };
    const first = await generateText({
      model: provider('assistant'),
      prompt: 'Find cairn',
      tools,
      maxRetries: 0,
    });
    expect(first.finishReason).toBe('tool-calls');
    expect(first.toolCalls).toMatchObject([
      { toolCallId: 'call_sdk1', toolName: 'lookup', input: { q: 'cairn' } },
    ]);

    const second = await generateText({
      model: provider('assistant'),
      tools,
      maxRetries: 0,
      messages: [
        { role: 'user', content: 'Find cairn' },
        ...first.response.messages,
        {
          role: 'tool',
          content: [
            {
              type: 'tool-result',
              toolCallId: 'call_sdk1',
              toolName: 'lookup',
              output: { type: 'text', value: 'a pile of stones' },
            },
          ],
        },
      ],
    });
    expect(second.text).toBe('Found it.');
    expect(second.response.headers?.['x-cairn-session-id']).toBe(
      first.response.headers?.['x-cairn-session-id'],
    );
    for (const request of harness.fake!.requests) expect(request.problems).toEqual([]);
  });
});

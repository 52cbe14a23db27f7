/**
 * AnthropicModel against the scripted fake Anthropic server, over real HTTP
 * with the official `@anthropic-ai/sdk` as the client: the request's shape
 * (system top-level, tool_use / tool_result blocks, cache breakpoints), the
 * usage with cache tokens, and the same retry and timeout rules as the OpenAI
 * path in Anthropic's terms (529 overloaded, 429 retry-after, max_tokens
 * cutting a tool call, stream error events).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRoleSettings } from '../../src/config/settings.js';
import { CairnError } from '../../src/errors.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import type { ModelRequest } from '../../src/llm/model-client.js';
import { AnthropicModel } from '../../src/llm/anthropic-model.js';
import { SUMMARY_ACK, SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import { RECALL_OPEN, renderRecallBlock } from '../../src/recall/recall-block.js';
import { INTERRUPTED_TOOL_RESULT } from '../../src/llm/normalize-request.js';
import {
  estimateAnthropicPromptTokens,
  startFakeAnthropicServer,
  type FakeAnthropicServer,
} from '../fakes/anthropic-server.js';

const API_KEY = 'sk-ant-test-sentinel-0123456789';

let fake: FakeAnthropicServer;
beforeAll(async () => {
  fake = await startFakeAnthropicServer({ minCacheableTokens: 1, contextWindowTokens: 50_000 });
});
afterEach(() => fake.reset());
afterAll(async () => fake.close());

interface Harness {
  model: AnthropicModel;
  delays: number[];
  warnings: Record<string, unknown>[];
}

function makeModel(overrides: Partial<ModelRoleSettings> = {}): Harness {
  const delays: number[] = [];
  const warnings: Record<string, unknown>[] = [];
  const role: ModelRoleSettings = {
    provider: 'anthropic',
    baseURL: fake.baseURL,
    model: 'claude-test',
    apiKeyEnv: 'ANTHROPIC_API_KEY',
    apiKey: API_KEY,
    contextWindow: 200_000,
    timeoutMs: 5_000,
    maxRetries: 2,
    profile: 'openai',
    ...overrides,
  };
  const model = new AnthropicModel({
    role,
    sleep: async (ms) => {
      delays.push(ms);
    },
    logger: { warn: (details) => warnings.push(details) },
    cacheHints: {
      isSummary: (m) => m.role === 'user' && (m.content ?? '').startsWith(SUMMARY_PREFIX),
      isPerCall: (m) => m.role === 'user' && (m.content ?? '').startsWith(RECALL_OPEN),
    },
  });
  return { model, delays, warnings };
}

const request = (messages: ChatMessage[] = [{ role: 'user', content: 'hi' }]): ModelRequest => ({
  messages,
  purpose: 'chat',
});

async function stream(model: AnthropicModel, req: ModelRequest = request()) {
  const deltas: string[] = [];
  const response = await model.complete(req, { onDelta: (text) => deltas.push(text) });
  return { response, deltas };
}

async function failure(promise: Promise<unknown>): Promise<CairnError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CairnError);
  const cairn = err as CairnError;
  expect(cairn.message).not.toContain(API_KEY);
  return cairn;
}

const calls = (): number => fake.requests.filter((r) => r.path === '/v1/messages').length;

describe('AnthropicModel: the request on the wire', () => {
  it('sends the system prompt top-level, max_tokens, the key header, and reads the reply', async () => {
    const { model } = makeModel();
    fake.script({ content: 'hello' });
    const response = await model.complete(
      request([
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'hi' },
      ]),
    );
    expect(response.message).toEqual({ role: 'assistant', content: 'hello' });
    expect(response.finishReason).toBe('stop');
    expect(response.model).toBe('claude-test');
    const sent = fake.requests[0]!;
    expect(sent.problems).toEqual([]);
    expect(sent.headers['x-api-key'] ?? sent.headers.authorization).toMatch(API_KEY);
    expect(sent.body.max_tokens).toBe(4096);
    expect(sent.body.system).toEqual([
      { type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } },
    ]);
    expect(sent.body.messages.every((m: { role: string }) => m.role !== 'system')).toBe(true);
  });

  it('sends tool calls as tool_use and results as tool_result blocks, and returns tool calls', async () => {
    const { model } = makeModel();
    fake.script({ tool_calls: [{ id: 'toolu_b', name: 'lookup', arguments: '{"q":"y"}' }] });
    const response = await model.complete({
      ...request([
        { role: 'user', content: 'look it up' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_a',
              type: 'function',
              function: { name: 'lookup', arguments: '{"q":"x"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'call_a', name: 'lookup', content: 'found x' },
        { role: 'user', content: 'and y?' },
      ]),
      tools: [{ name: 'lookup', description: 'Looks up', parameters: { type: 'object' } }],
      temperature: 1.5,
      maxTokens: 50,
      model: 'claude-other',
    });
    expect(response.finishReason).toBe('tool_calls');
    expect(response.message).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'toolu_b', type: 'function', function: { name: 'lookup', arguments: '{"q":"y"}' } },
      ],
    });
    const body = fake.requests[0]!.body;
    expect(fake.requests[0]!.problems).toEqual([]);
    expect(body.model).toBe('claude-other');
    expect(body.max_tokens).toBe(50);
    expect(body.temperature).toBe(1); // the API's range ends at 1
    expect(body.tools).toEqual([
      { name: 'lookup', description: 'Looks up', input_schema: { type: 'object' } },
    ]);
    expect(body.messages[1]).toEqual({
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'call_a', name: 'lookup', input: { q: 'x' } }],
    });
    // The result and the next user text share one user message, the result first.
    expect(body.messages[2].content.map((b: { type: string }) => b.type)).toEqual([
      'tool_result',
      'text',
    ]);
    expect(body.messages[2].content[0]).toMatchObject({
      tool_use_id: 'call_a',
      content: 'found x',
    });
  });

  it('answers an unanswered tool call with an interrupted result, never sending it open', async () => {
    const { model } = makeModel();
    fake.script({ content: 'ok' });
    await model.complete(
      request([
        { role: 'user', content: 'go' },
        {
          role: 'assistant',
          content: 'calling',
          tool_calls: [{ id: 'call_x', type: 'function', function: { name: 't', arguments: '' } }],
        },
        { role: 'user', content: 'what happened?' },
      ]),
    );
    const sent = fake.requests[0]!;
    expect(sent.problems).toEqual([]);
    expect(sent.body.messages[1].content[1]).toEqual({
      type: 'tool_use',
      id: 'call_x',
      name: 't',
      input: {},
    });
    expect(sent.body.messages[2].content[0]).toMatchObject({
      type: 'tool_result',
      tool_use_id: 'call_x',
      content: INTERRUPTED_TOOL_RESULT,
    });
  });

  it('gives a repeated tool-call id a fresh wire id, paired with its own result', async () => {
    const { model } = makeModel();
    fake.script({ content: 'ok' });
    const exchange = (result: string): ChatMessage[] => [
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_0', type: 'function', function: { name: 't', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'call_0', name: 't', content: result },
      { role: 'user', content: 'again' },
    ];
    await model.complete(
      request([{ role: 'user', content: 'go' }, ...exchange('one'), ...exchange('two')]),
    );
    const sent = fake.requests[0]!;
    expect(sent.problems).toEqual([]);
    expect(sent.body.messages[3].content[0].id).toBe('call_0_2');
    expect(sent.body.messages[4].content[0]).toMatchObject({
      tool_use_id: 'call_0_2',
      content: 'two',
    });
  });

  it('the fake refuses what the API refuses: system in messages, orphan results, empty text, no max_tokens', async () => {
    const post = async (body: unknown): Promise<number> =>
      (
        await fetch(`${fake.baseURL}/v1/messages`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-api-key': 'k' },
          body: JSON.stringify(body),
        })
      ).status;
    const base = { model: 'm', max_tokens: 10 };
    expect(
      await post({
        ...base,
        messages: [
          { role: 'system', content: 's' },
          { role: 'user', content: 'u' },
        ],
      }),
    ).toBe(400);
    expect(
      await post({
        ...base,
        messages: [
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'x', content: 'r' }] },
        ],
      }),
    ).toBe(400);
    expect(
      await post({ ...base, messages: [{ role: 'user', content: [{ type: 'text', text: ' ' }] }] }),
    ).toBe(400);
    expect(await post({ model: 'm', messages: [{ role: 'user', content: 'u' }] })).toBe(400);
    expect(
      await post({
        ...base,
        messages: [
          { role: 'user', content: 'u' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'a', name: 't', input: {} }] },
          { role: 'user', content: 'no result' },
        ],
      }),
    ).toBe(400);
    expect(
      await post({
        ...base,
        messages: [
          { role: 'user', content: 'a' },
          { role: 'user', content: 'b' },
        ],
      }),
    ).toBe(400);
    const marked = { type: 'text', text: 'x', cache_control: { type: 'ephemeral' } };
    expect(
      await post({
        ...base,
        system: [marked, marked],
        messages: [{ role: 'user', content: [marked, marked, marked] }],
      }),
    ).toBe(400);
    expect(await post({ ...base, messages: [{ role: 'user', content: 'fine' }] })).toBe(200);
  });
});

describe('AnthropicModel: prompt caching', () => {
  const summarised = (tail: ChatMessage[]): ChatMessage[] => [
    { role: 'system', content: 'You are a careful assistant. '.repeat(20) },
    { role: 'user', content: `${SUMMARY_PREFIX}${'The user likes tea. '.repeat(30)}` },
    { role: 'assistant', content: SUMMARY_ACK },
    ...tail,
  ];

  it('marks the system prompt, the summary pair and the newest message, and no more', async () => {
    const { model } = makeModel();
    fake.script({ content: 'ok' });
    await model.complete(request(summarised([{ role: 'user', content: 'hi' }])));
    const body = fake.requests[0]!.body;
    const marks: string[] = [];
    body.system.forEach(
      (b: { cache_control?: unknown }) => b.cache_control && marks.push('system'),
    );
    body.messages.forEach(
      (m: { content: { cache_control?: unknown; text?: string }[] }, i: number) =>
        m.content.forEach((b) => b.cache_control && marks.push(`${i}:${b.text?.slice(0, 12)}`)),
    );
    expect(marks).toEqual(['system', `1:${SUMMARY_ACK.slice(0, 12)}`, '2:hi']);
  });

  it('reports cache writes on the first call and reads of the shared prefix on the next', async () => {
    const { model } = makeModel();
    fake.script({ content: 'first answer' }, { content: 'second answer' });
    const first = await model.complete(request(summarised([{ role: 'user', content: 'hi' }])));
    expect(first.usage!.cache_read_tokens).toBe(0);
    expect(first.usage!.cache_write_tokens).toBeGreaterThan(0);
    const second = await model.complete(
      request(
        summarised([
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'first answer' },
          { role: 'user', content: 'more' },
        ]),
      ),
    );
    // Everything up to the previous newest message is read back.
    expect(second.usage!.cache_read_tokens).toBe(first.usage!.cache_write_tokens);
    expect(second.usage!.prompt_tokens).toBe(
      fake.requests[1]!.usage!.input_tokens +
        second.usage!.cache_read_tokens! +
        second.usage!.cache_write_tokens!,
    );
  });

  it('with a recall block before the question, the next call reads the whole history before it', async () => {
    const { model } = makeModel();
    fake.script({ content: 'first answer' }, { content: 'second answer' });
    const history: ChatMessage[] = Array.from({ length: 12 }, (_, i) => ({
      role: i % 2 === 0 ? 'user' : 'assistant',
      content: `Message ${i} of the raw tail, long enough to count. `.repeat(6),
    }));
    const block = (fact: string): ChatMessage => ({
      role: 'user',
      content: renderRecallBlock([
        { seq: 3, role: 'user', created_at: '2026-01-01T00:00:00.000Z', text: fact },
      ]),
    });
    const firstMessages = summarised([
      ...history,
      block('The locker code is 4812.'),
      { role: 'user', content: 'What is the locker code?' },
    ]);
    await model.complete(request(firstMessages));
    // The block and the question are one user message; the mark before it ends the history.
    const marked = (fake.requests[0]!.body.messages as { content: { cache_control?: unknown }[] }[])
      .map((m) => m.content.some((b) => b.cache_control !== undefined))
      .map((isMarked, i) => (isMarked ? i : -1))
      .filter((i) => i >= 0);
    const sent = fake.requests[0]!.body.messages as unknown[];
    expect(marked).toEqual([1, sent.length - 2, sent.length - 1]);

    const second = await model.complete(
      request(
        summarised([
          ...history,
          { role: 'user', content: 'What is the locker code?' },
          { role: 'assistant', content: 'first answer' },
          block('The spare key is under the blue mat.'),
          { role: 'user', content: 'And the spare key?' },
        ]),
      ),
    );
    // The first request without its last message is the prefix the second read.
    const firstBody = fake.requests[0]!.body as { messages: unknown[] };
    const history1 = { ...firstBody, messages: firstBody.messages.slice(0, -1) };
    expect(second.usage!.cache_read_tokens).toBe(estimateAnthropicPromptTokens(history1));
  });

  it('streams the same usage, cache tokens included', async () => {
    const { model } = makeModel();
    fake.script({ content: 'a' }, { content: 'b' });
    await stream(model, request(summarised([{ role: 'user', content: 'hi' }])));
    const { response } = await stream(
      model,
      request(summarised([{ role: 'user', content: 'hi' }])),
    );
    expect(response.usage!.cache_read_tokens).toBeGreaterThan(0);
    expect(response.usage!.completion_tokens).toBeGreaterThan(0);
  });
});

describe('AnthropicModel: retries', () => {
  it('retries a 529 overloaded and succeeds, logging the request id', async () => {
    const { model, delays, warnings } = makeModel();
    fake.script({ status: 529 }, { content: 'recovered' });
    const response = await model.complete(request());
    expect(response.message.content).toBe('recovered');
    expect(calls()).toBe(2);
    expect(delays).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ attempt: 1, retryable: true, code: 'LLM_ERROR' });
    expect(warnings[0]!.requestId).toMatch(/^req_fake_\d+$/);
  });

  it('retries a 503 and answers from the second attempt', async () => {
    const { model, delays } = makeModel({ maxRetries: 2 });
    fake.script({ status: 503 }, { content: 'second attempt' });
    expect((await model.complete(request())).message.content).toBe('second attempt');
    expect(calls()).toBe(2);
    expect(delays).toHaveLength(1);
  });

  it('gives up on repeated 503s after maxRetries + 1 attempts: one retry layer only', async () => {
    const { model, delays } = makeModel({ maxRetries: 2 });
    fake.script(...Array.from({ length: 5 }, () => ({ status: 503 })));
    const err = await failure(model.complete(request()));
    expect(err.message).toMatch(/HTTP 503/);
    expect(calls()).toBe(3);
    expect(delays).toHaveLength(2);
  });

  it('waits for a short retry-after on a 429, then retries', async () => {
    const { model, delays } = makeModel();
    fake.script({ status: 429, headers: { 'retry-after': '2' } }, { content: 'after the wait' });
    expect((await model.complete(request())).message.content).toBe('after the wait');
    expect(delays).toEqual([2000]);
  });

  it('fails fast on a long retry-after instead of holding the turn', async () => {
    const { model, delays } = makeModel({ maxRetries: 3 });
    fake.script({ status: 429, headers: { 'retry-after': '300' } }, { content: 'never' });
    const err = await failure(model.complete(request()));
    expect(err.message).toMatch(/wait 300 s/);
    expect(calls()).toBe(1);
    expect(delays).toEqual([]);
  });

  it('does not retry a billing error (credit balance too low)', async () => {
    const { model, delays } = makeModel({ maxRetries: 3 });
    fake.script({ status: 402 }, { content: 'never' });
    const err = await failure(model.complete(request()));
    expect(err.message).toMatch(/billing/);
    expect(calls()).toBe(1);
    expect(delays).toEqual([]);
  });

  it.each([400, 401, 403, 404, 422])('does not retry HTTP %i', async (status) => {
    const { model, delays } = makeModel({ maxRetries: 3 });
    fake.script({ status }, { content: 'never' });
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toContain(`HTTP ${status}`);
    expect(err.message).not.toMatch(/Fake error|invalid x-api-key/);
    if (status === 401) expect(err.message).toMatch(/ANTHROPIC_API_KEY/);
    expect(calls()).toBe(1);
    expect(delays).toEqual([]);
  });

  it('reports a server that hangs past timeoutMs as LLM_TIMEOUT after its retries', async () => {
    const { model, delays } = makeModel({ timeoutMs: 800, maxRetries: 1 });
    fake.script({ hang: true }, { hang: true });
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('LLM_TIMEOUT');
    expect(calls()).toBe(2);
    expect(delays).toHaveLength(1);
  });

  it('bounds a body that stalls after its headers by timeoutMs', async () => {
    const { model } = makeModel({ timeoutMs: 800, maxRetries: 0 });
    fake.script({ stallMidBody: true });
    expect((await failure(model.complete(request()))).code).toBe('LLM_TIMEOUT');
  });

  it('maps "prompt is too long" to CONTEXT_OVERFLOW without retrying', async () => {
    const { model, delays } = makeModel();
    const err = await failure(
      model.complete(request([{ role: 'user', content: 'x'.repeat(240_000) }])),
    );
    expect(err.code).toBe('CONTEXT_OVERFLOW');
    expect(calls()).toBe(1);
    expect(delays).toEqual([]);
  });
});

describe('AnthropicModel: streaming', () => {
  it('reassembles text and tool_use input from the event stream', async () => {
    const { model } = makeModel();
    fake.script({
      content: 'Let me check that for you.',
      tool_calls: [{ id: 'toolu_1', name: 'lookup', arguments: '{"query":"weather in Oslo"}' }],
    });
    const { response, deltas } = await stream(model);
    expect(deltas.join('')).toBe('Let me check that for you.');
    expect(deltas.length).toBeGreaterThan(1);
    expect(response.finishReason).toBe('tool_calls');
    expect(response.message.tool_calls).toEqual([
      {
        id: 'toolu_1',
        type: 'function',
        function: { name: 'lookup', arguments: '{"query":"weather in Oslo"}' },
      },
    ]);
  });

  it('reports stop_reason max_tokens cutting a tool call as length, so the loop runs no tool', async () => {
    const { model } = makeModel();
    fake.script({
      tool_calls: [{ name: 'write', arguments: '{"text":"a very long te' }],
      stop_reason: 'max_tokens',
    });
    const { response } = await stream(model);
    expect(response.finishReason).toBe('length');
  });

  it('fails a stream that stalls after its first event, with no answer', async () => {
    const { model } = makeModel({ timeoutMs: 800, maxRetries: 0 });
    fake.script({ content: 'partial answer here', stallAfterFirstChunk: true });
    expect((await failure(stream(model))).code).toBe('LLM_TIMEOUT');
  });

  it('treats a stream that ends before message_stop as an error, and retries it if nothing was emitted', async () => {
    const { model } = makeModel();
    fake.script(
      { tool_calls: [{ name: 't', arguments: '{}' }], noStop: true },
      { content: 'whole' },
    );
    const { response } = await stream(model);
    expect(response.message.content).toBe('whole');
    expect(calls()).toBe(2);
    fake.reset();
    fake.script({ content: 'half an answer', noStop: true });
    expect((await failure(stream(model))).message).toMatch(/message_stop/);
    expect(calls()).toBe(1);
  });

  it('surfaces an overloaded error event after text as an error, not a partial answer', async () => {
    const { model } = makeModel();
    fake.script({ content: 'partial text', streamError: 'overloaded_error' }, { content: 'never' });
    const err = await failure(stream(model));
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toMatch(/overloaded/);
    expect(calls()).toBe(1); // text was emitted: not retried
  });

  it('retries an error event that came before any text', async () => {
    const { model } = makeModel();
    fake.script(
      { tool_calls: [{ name: 't', arguments: '{}' }], streamError: 'overloaded_error' },
      { content: 'ok' },
    );
    const { response } = await stream(model);
    expect(response.message.content).toBe('ok');
  });

  it('fails a stream reset in the middle of tool input, returning no tool call', async () => {
    const { model } = makeModel({ maxRetries: 0 });
    fake.script({
      tool_calls: [{ name: 'lookup', arguments: '{"query":"something long"}' }],
      resetMidStream: true,
    });
    const err = await failure(stream(model));
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toMatch(/broke/);
  });
});

/**
 * OpenAIModel against the scripted fake provider, over real HTTP with the real
 * `openai` client: what is retried, how long it
 * waits, what fails fast, and that a broken stream is never taken for an answer.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRoleSettings } from '../../src/config/settings.js';
import { CairnError } from '../../src/errors.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import type { ModelRequest } from '../../src/llm/model-client.js';
import { OpenAIModel } from '../../src/llm/openai-model.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { TOOL_TO_USER_BRIDGE } from '../../src/llm/wire-profile.js';

const API_KEY = 'sk-test-sentinel-0123456789';

let fake: FakeLlmServer;
beforeAll(async () => {
  fake = await startFakeLlmServer();
});
afterEach(() => fake.reset());
afterAll(async () => fake.close());

interface Harness {
  model: OpenAIModel;
  /** Every delay the model asked to sleep for, in ms. */
  delays: number[];
  warnings: Record<string, unknown>[];
}

function makeModel(overrides: Partial<ModelRoleSettings> = {}): Harness {
  const delays: number[] = [];
  const warnings: Record<string, unknown>[] = [];
  const role: ModelRoleSettings = {
    provider: 'openai',
    baseURL: fake.baseURL,
    model: 'm',
    apiKeyEnv: 'X',
    apiKey: API_KEY,
    contextWindow: 8192,
    timeoutMs: 5_000,
    maxRetries: 2,
    profile: 'openai',
    ...overrides,
  };
  const model = new OpenAIModel({
    role,
    sleep: async (ms) => {
      delays.push(ms);
    },
    logger: { warn: (details) => warnings.push(details) },
  });
  return { model, delays, warnings };
}

const request = (messages: ChatMessage[] = [{ role: 'user', content: 'hi' }]): ModelRequest => ({
  messages,
  purpose: 'chat',
});

/** Streams a request, collecting the text deltas. */
async function stream(model: OpenAIModel, req: ModelRequest = request()) {
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
  // Nothing secret or upstream leaks into the message a client may see.
  expect(cairn.message).not.toContain(API_KEY);
  return cairn;
}

const chatRequests = (): number =>
  fake.requests.filter((r) => r.path === '/v1/chat/completions').length;

describe('OpenAIModel: non-streaming calls', () => {
  it('returns the reply, the finish reason and the usage', async () => {
    const { model } = makeModel();
    fake.script({ content: 'hello', usage: { prompt_tokens: 7, completion_tokens: 2 } });
    const response = await model.complete(request());
    expect(response).toEqual({
      message: { role: 'assistant', content: 'hello' },
      finishReason: 'stop',
      usage: { prompt_tokens: 7, completion_tokens: 2 },
      model: 'm',
    });
    const sent = fake.requests[0]!;
    expect(sent.problems).toEqual([]);
    expect(sent.body.model).toBe('m');
    expect(sent.headers.authorization).toBe(`Bearer ${API_KEY}`);
  });

  it('returns tool calls, sends tools, temperature, max_tokens and the model override', async () => {
    const { model } = makeModel();
    fake.script({ tool_calls: [{ id: 'call_a', name: 'lookup', arguments: '{"q":"x"}' }] });
    const response = await model.complete({
      ...request(),
      tools: [{ name: 'lookup', description: 'Looks up', parameters: { type: 'object' } }],
      temperature: 0.3,
      maxTokens: 50,
      model: 'other-model',
    });
    expect(response.finishReason).toBe('tool_calls');
    expect(response.message).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call_a', type: 'function', function: { name: 'lookup', arguments: '{"q":"x"}' } },
      ],
    });
    const body = fake.requests[0]!.body;
    expect(body.model).toBe('other-model');
    expect(body.temperature).toBe(0.3);
    expect(body.max_tokens).toBe(50);
    expect(body.tools).toEqual([
      {
        type: 'function',
        function: { name: 'lookup', description: 'Looks up', parameters: { type: 'object' } },
      },
    ]);
    expect(body).not.toHaveProperty('purpose');
  });
});

describe('OpenAIModel: retries', () => {
  it('retries a 503 and succeeds on the second attempt, logging the request id', async () => {
    const { model, delays, warnings } = makeModel({ maxRetries: 2 });
    fake.script({ status: 503 }, { content: 'recovered' });
    const response = await model.complete(request());
    expect(response.message.content).toBe('recovered');
    expect(chatRequests()).toBe(2);
    expect(delays).toHaveLength(1);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ attempt: 1, retryable: true, code: 'LLM_ERROR' });
    expect(warnings[0]!.requestId).toMatch(/^req_fake_\d+$/);
  });

  it('makes at most maxRetries + 1 attempts: one retry layer only', async () => {
    const { model, delays } = makeModel({ maxRetries: 2 });
    fake.script(...Array.from({ length: 6 }, () => ({ status: 503 })));
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toMatch(/HTTP 503/);
    expect(chatRequests()).toBe(3);
    expect(delays).toHaveLength(2);
  });

  it('waits for a short Retry-After, then retries', async () => {
    const { model, delays } = makeModel();
    fake.script({ status: 429, headers: { 'retry-after': '2' } }, { content: 'after the wait' });
    const response = await model.complete(request());
    expect(response.message.content).toBe('after the wait');
    expect(delays).toEqual([2000]);
    expect(chatRequests()).toBe(2);
  });

  it('fails fast on a long Retry-After instead of holding the turn', async () => {
    const { model, delays } = makeModel({ maxRetries: 3 });
    fake.script(
      { status: 429, headers: { 'retry-after': '300' } },
      { content: 'must not be reached' },
    );
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toMatch(/wait 300 s/);
    expect(chatRequests()).toBe(1);
    expect(delays).toEqual([]);
  });

  it('does not retry a 429 for exhausted quota', async () => {
    const { model, delays } = makeModel({ maxRetries: 3 });
    fake.script(
      {
        status: 429,
        errorBody: {
          error: {
            message: 'You exceeded your current quota, please check your plan and billing details.',
            type: 'insufficient_quota',
            param: null,
            code: 'insufficient_quota',
          },
        },
      },
      { content: 'must not be reached' },
    );
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toMatch(/quota/);
    expect(chatRequests()).toBe(1);
    expect(delays).toEqual([]);
  });

  it.each([400, 401, 403, 404, 422])('does not retry HTTP %i', async (status) => {
    const { model, delays } = makeModel({ maxRetries: 3 });
    fake.script({ status }, { content: 'must not be reached' });
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toContain(`HTTP ${status}`);
    // The upstream body stays out of the client-facing message.
    expect(err.message).not.toMatch(/Fake error|Incorrect API key provided/);
    if (status === 401) expect(err.message).toMatch(/API key/);
    expect(chatRequests()).toBe(1);
    expect(delays).toEqual([]);
  });

  it('reports a server that hangs past timeoutMs as LLM_TIMEOUT, after its retries', async () => {
    const { model, delays } = makeModel({ timeoutMs: 1_000, maxRetries: 1 });
    fake.script({ hang: true }, { hang: true });
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('LLM_TIMEOUT');
    expect(err.status).toBe(504);
    expect(chatRequests()).toBe(2);
    expect(delays).toHaveLength(1);
  });

  it('does not retry once the caller aborted', async () => {
    const { model, delays } = makeModel({ maxRetries: 3 });
    fake.script({ hang: true }, { content: 'must not be reached' });
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const call = model.complete(request(), { signal: controller.signal });
    // Abort once the request is in flight (the fake holds it open).
    while (chatRequests() === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    controller.abort(reason);
    await expect(call).rejects.toBe(reason);
    expect(chatRequests()).toBe(1);
    expect(delays).toEqual([]);
  });
});

describe('OpenAIModel: context overflow', () => {
  const overflowBodies: [string, unknown][] = [
    [
      'OpenAI context_length_exceeded',
      {
        error: {
          message: "This model's maximum context length is 8192 tokens.",
          type: 'invalid_request_error',
          param: 'messages',
          code: 'context_length_exceeded',
        },
      },
    ],
    [
      'Anthropic "prompt is too long"',
      {
        error: {
          message: 'prompt is too long: 210000 tokens > 200000 maximum',
          type: 'invalid_request_error',
        },
      },
    ],
    [
      'vLLM "maximum context length"',
      {
        error: {
          message:
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
          type: 'BadRequestError',
        },
      },
    ],
    [
      'OpenRouter metadata.raw',
      {
        error: {
          message: 'Provider returned error',
          code: 400,
          metadata: {
            raw: '{"error":{"code":"context_length_exceeded","message":"Input is too long for requested model."}}',
            provider_name: 'Upstream',
          },
        },
      },
    ],
  ];

  it.each(overflowBodies)('maps %s to CONTEXT_OVERFLOW without retrying', async (_, body) => {
    const { model, delays } = makeModel({ maxRetries: 3 });
    fake.script({ status: 400, errorBody: body }, { content: 'must not be reached' });
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('CONTEXT_OVERFLOW');
    expect(chatRequests()).toBe(1);
    expect(delays).toEqual([]);
  });

  it('maps the fake provider rejecting a prompt over its window to CONTEXT_OVERFLOW', async () => {
    const small = await startFakeLlmServer({ contextWindowTokens: 20 });
    try {
      const model = new OpenAIModel({
        role: {
          provider: 'openai',
          baseURL: small.baseURL,
          model: 'm',
          apiKeyEnv: 'X',
          apiKey: API_KEY,
          contextWindow: 8192,
          timeoutMs: 5_000,
          maxRetries: 2,
          profile: 'openai',
        },
        sleep: async () => {},
      });
      await expect(model.complete(request())).resolves.toBeDefined(); // fits
      const err = await failure(
        model.complete(request([{ role: 'user', content: 'x'.repeat(400) }])),
      );
      expect(err.code).toBe('CONTEXT_OVERFLOW');
      expect(err.status).toBe(400);
      expect(small.requests).toHaveLength(2);
      // Streaming requests overflow the same way.
      const streamed = await failure(
        model.complete(request([{ role: 'user', content: 'x'.repeat(400) }]), {
          onDelta: () => {},
        }),
      );
      expect(streamed.code).toBe('CONTEXT_OVERFLOW');
    } finally {
      await small.close();
    }
  });

  it('does not take a plain 400 for an overflow', async () => {
    const { model } = makeModel();
    fake.script({ status: 400 });
    const err = await failure(model.complete(request()));
    expect(err.code).toBe('LLM_ERROR');
  });
});

describe('OpenAIModel: streaming', () => {
  it('reassembles content and parallel tool calls and asks for usage', async () => {
    const { model } = makeModel();
    fake.script({
      content: 'Looking that up for you now',
      tool_calls: [
        { id: 'call_one', name: 'lookup', arguments: '{"query":"first thing"}' },
        { id: 'call_two', name: 'weather', arguments: '{"city":"Oslo","days":3}' },
      ],
      usage: { prompt_tokens: 11, completion_tokens: 22 },
    });
    const { response, deltas } = await stream(model);
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join('')).toBe('Looking that up for you now');
    expect(response).toEqual({
      message: {
        role: 'assistant',
        content: 'Looking that up for you now',
        tool_calls: [
          {
            id: 'call_one',
            type: 'function',
            function: { name: 'lookup', arguments: '{"query":"first thing"}' },
          },
          {
            id: 'call_two',
            type: 'function',
            function: { name: 'weather', arguments: '{"city":"Oslo","days":3}' },
          },
        ],
      },
      finishReason: 'tool_calls',
      usage: { prompt_tokens: 11, completion_tokens: 22 },
      model: 'm',
    });
    const body = fake.requests[0]!.body;
    expect(body.stream).toBe(true);
    expect(body.stream_options).toEqual({ include_usage: true });
  });

  it('returns null content for a pure tool-calling stream', async () => {
    const { model } = makeModel();
    fake.script({ tool_calls: [{ id: 'call_x', name: 'lookup', arguments: '{}' }] });
    const { response, deltas } = await stream(model);
    expect(deltas).toEqual([]);
    expect(response.message.content).toBeNull();
    expect(response.message.tool_calls).toHaveLength(1);
  });

  it('fails a stream that stalls after its first chunk, with no answer', async () => {
    const { model } = makeModel({ timeoutMs: 1_000, maxRetries: 0 });
    fake.script({ content: 'partial answer', stallAfterFirstChunk: true });
    const err = await failure(stream(model));
    expect(err.code).toBe('LLM_TIMEOUT');
  });

  it('retries a stall that emitted no text yet, and answers from the retry only', async () => {
    const { model, delays } = makeModel({ timeoutMs: 1_000, maxRetries: 1 });
    fake.script({ content: 'lost', stallAfterFirstChunk: true }, { content: 'second try' });
    const { response, deltas } = await stream(model);
    expect(response.message.content).toBe('second try');
    expect(deltas.join('')).toBe('second try');
    expect(chatRequests()).toBe(2);
    expect(delays).toHaveLength(1);
  });

  it('treats a clean end of stream without finish_reason as an error', async () => {
    const { model } = makeModel({ maxRetries: 2 });
    fake.script({ content: 'half an answer', noFinish: true }, { content: 'must not be used' });
    const err = await failure(stream(model));
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toMatch(/finish_reason/);
    // Text already reached the caller: no retry that would repeat it.
    expect(chatRequests()).toBe(1);
  });

  it('retries a stream that ended without finish_reason before emitting text', async () => {
    const { model } = makeModel({ maxRetries: 1 });
    fake.script(
      { tool_calls: [{ id: 'call_half', name: 'lookup', arguments: '{}' }], noFinish: true },
      { content: 'complete answer' },
    );
    const { response } = await stream(model);
    expect(response.message).toEqual({ role: 'assistant', content: 'complete answer' });
    expect(chatRequests()).toBe(2);
  });

  it('fails a stream reset in the middle of tool-call arguments, returning no tool calls', async () => {
    const { model } = makeModel({ maxRetries: 0 });
    fake.script({
      tool_calls: [{ id: 'call_cut', name: 'lookup', arguments: '{"query":"a long argument"}' }],
      resetMidStream: true,
    });
    const err = await failure(stream(model));
    expect(err.code).toBe('LLM_ERROR');
    expect(chatRequests()).toBe(1);
  });

  it('retries a reset that emitted nothing and returns only the retry’s tool calls', async () => {
    const { model } = makeModel({ maxRetries: 1 });
    fake.script(
      {
        tool_calls: [{ id: 'call_cut', name: 'lookup', arguments: '{"query":"a long argument"}' }],
        resetMidStream: true,
      },
      { tool_calls: [{ id: 'call_ok', name: 'lookup', arguments: '{"query":"b"}' }] },
    );
    const { response } = await stream(model);
    expect(response.message.tool_calls).toEqual([
      { id: 'call_ok', type: 'function', function: { name: 'lookup', arguments: '{"query":"b"}' } },
    ]);
    expect(chatRequests()).toBe(2);
  });

  it('does not retry a reset after text was emitted', async () => {
    const { model } = makeModel({ maxRetries: 2 });
    fake.script(
      { content: 'some text that gets cut', resetMidStream: true },
      { content: 'must not be used' },
    );
    const err = await failure(stream(model));
    expect(err.code).toBe('LLM_ERROR');
    expect(chatRequests()).toBe(1);
  });

  it('surfaces a data.error chunk as an error, not a partial answer', async () => {
    const { model } = makeModel({ maxRetries: 2 });
    fake.script({ content: 'text before the error', streamError: true }, { content: 'unused' });
    const err = await failure(stream(model));
    expect(err.code).toBe('LLM_ERROR');
    expect(chatRequests()).toBe(1);
  });
});

describe('OpenAIModel with profile "mistral"', () => {
  it('bridges tool → user with an assistant turn on the wire, and only there', async () => {
    const { model } = makeModel({ profile: 'mistral' });
    const messages: ChatMessage[] = [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'what time is it?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'current_time', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', name: 'current_time', content: '12:00' },
      { role: 'user', content: 'and tomorrow?' },
    ];
    const copy = structuredClone(messages);
    fake.script({ content: 'the same' });
    await model.complete({ messages, purpose: 'chat' });
    const sent = fake.requests.at(-1)!.body.messages as { role: string; content: string | null }[];
    expect(sent.map((m) => m.role)).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'assistant',
      'user',
    ]);
    expect(sent[4]!.content).toBe(TOOL_TO_USER_BRIDGE);
    expect(fake.requests.at(-1)!.problems).toEqual([]);
    // The caller's messages (what the store holds) are untouched.
    expect(messages).toEqual(copy);
  });

  it('sends tool → assistant sequences unchanged, and the default profile never bridges', async () => {
    const { model: mistral } = makeModel({ profile: 'mistral' });
    const { model: plain } = makeModel();
    const messages: ChatMessage[] = [
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_2', type: 'function', function: { name: 'current_time', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_2', name: 'current_time', content: 'now' },
    ];
    fake.script({ content: 'a' }, { content: 'b' });
    await mistral.complete({ messages, purpose: 'chat' });
    expect(fake.requests.at(-1)!.body.messages).toHaveLength(3);
    await plain.complete({
      messages: [...messages, { role: 'user', content: 'next' }],
      purpose: 'chat',
    });
    expect((fake.requests.at(-1)!.body.messages as { role: string }[]).map((m) => m.role)).toEqual([
      'user',
      'assistant',
      'tool',
      'user',
    ]);
  });
});

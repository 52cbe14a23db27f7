/**
 * The fake LLM server and its request validator, checked with the real
 * `openai` client so the fake stays wire-compatible with what Cairn talks to.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import OpenAI, { APIError } from 'openai';
import { startFakeLlmServer } from './fakes/llm-server.js';
import type { FakeLlmServer } from './fakes/llm-server.js';
import { validateChatRequest } from './fakes/openai-request-validator.js';

const MODEL = 'gpt-test';

function clientFor(server: FakeLlmServer): OpenAI {
  return new OpenAI({ baseURL: server.baseURL, apiKey: 'test', maxRetries: 0 });
}

const user = (content: string) => ({ role: 'user' as const, content });
const system = (content: string) => ({ role: 'system' as const, content });
const assistant = (content: string) => ({ role: 'assistant' as const, content });
const toolCall = (id: string, name = 'lookup') => ({
  id,
  type: 'function' as const,
  function: { name, arguments: '{}' },
});
const callingAssistant = (...ids: string[]) => ({
  role: 'assistant' as const,
  content: null,
  tool_calls: ids.map((id) => toolCall(id)),
});
const toolResult = (id: string, content = 'result') => ({
  role: 'tool' as const,
  tool_call_id: id,
  content,
});
const request = (messages: unknown[], extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages,
  ...extra,
});

describe('fake LLM server', () => {
  let server: FakeLlmServer;
  let client: OpenAI;

  beforeAll(async () => {
    server = await startFakeLlmServer();
    client = clientFor(server);
  });
  afterEach(() => server.reset());
  afterAll(() => server.close());

  it('answers a non-streaming request with a chat.completion', async () => {
    server.script({ content: 'hello there' });

    const completion = await client.chat.completions
      .create({ model: MODEL, messages: [user('hi')] })
      .withResponse();

    expect(completion.response.headers.get('x-request-id')).toMatch(/^req_fake_/);
    const { data } = completion;
    expect(data.object).toBe('chat.completion');
    expect(data.model).toBe(MODEL);
    expect(data.choices[0]!.message).toMatchObject({ role: 'assistant', content: 'hello there' });
    expect(data.choices[0]!.finish_reason).toBe('stop');
    expect(data.usage).toEqual({ prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 });
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0]!.body.messages).toEqual([user('hi')]);
    expect(server.requests[0]!.headers.authorization).toBe('Bearer test');
    expect(server.requests[0]!.problems).toEqual([]);
  });

  it('returns tool calls with null content, default ids and finish_reason tool_calls', async () => {
    server.script({ tool_calls: [{ name: 'lookup', arguments: '{"q":"x"}' }] });

    const { choices } = await client.chat.completions.create({
      model: MODEL,
      messages: [user('hi')],
    });

    const message = choices[0]!.message;
    expect(message.content).toBeNull();
    expect(message.tool_calls).toEqual([
      {
        id: expect.stringMatching(/^call_\d+$/),
        type: 'function',
        function: { name: 'lookup', arguments: '{"q":"x"}' },
      },
    ]);
    expect(choices[0]!.finish_reason).toBe('tool_calls');
  });

  it('streams content and tool-call arguments in fragments the client reassembles', async () => {
    const args = JSON.stringify({ path: '/tmp/some/file.txt', lines: [1, 2, 3] });
    server.script({
      content: 'Let me look that up.',
      tool_calls: [
        { id: 'call_a', name: 'read_file', arguments: args },
        { id: 'call_b', name: 'list_dir', arguments: '{"path":"/"}' },
      ],
    });

    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [user('read it')],
      stream: true,
    });
    let content = '';
    let contentDeltas = 0;
    const calls: { id?: string; name?: string; arguments: string }[] = [];
    let finishReason: string | null = null;
    let argumentFragments = 0;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      if (choice.delta.content) {
        content += choice.delta.content;
        contentDeltas++;
      }
      for (const delta of choice.delta.tool_calls ?? []) {
        const call = (calls[delta.index] ??= { arguments: '' });
        if (delta.id) call.id = delta.id;
        if (delta.function?.name) call.name = delta.function.name;
        if (delta.function?.arguments) {
          call.arguments += delta.function.arguments;
          argumentFragments++;
        }
      }
      finishReason = choice.finish_reason ?? finishReason;
    }

    expect(content).toBe('Let me look that up.');
    expect(contentDeltas).toBeGreaterThan(1);
    expect(argumentFragments).toBeGreaterThan(2);
    expect(calls).toEqual([
      { id: 'call_a', name: 'read_file', arguments: args },
      { id: 'call_b', name: 'list_dir', arguments: '{"path":"/"}' },
    ]);
    expect(finishReason).toBe('tool_calls');
  });

  it('sends a usage chunk with no choices when include_usage is set', async () => {
    server.script({ content: 'abc', usage: { prompt_tokens: 11, completion_tokens: 7 } });

    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [user('hi')],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);

    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({ prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
  });

  it('turns a scripted status into an APIError with that status and the scripted headers', async () => {
    server.script({ status: 503, headers: { 'retry-after': '2' } }, { content: 'recovered' });

    const error = await client.chat.completions
      .create({ model: MODEL, messages: [user('hi')] })
      .catch((e: unknown) => e);

    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(503);
    expect((error as APIError).headers?.get('retry-after')).toBe('2');
    expect((error as APIError).headers?.get('x-request-id')).toMatch(/^req_fake_/);
    const next = await client.chat.completions.create({ model: MODEL, messages: [user('hi')] });
    expect(next.choices[0]!.message.content).toBe('recovered');
  });

  it('sends a scripted status as a JSON error even for a stream request', async () => {
    server.script({
      status: 429,
      errorBody: { error: { message: 'slow down', type: 'requests', code: 'rate_limit_exceeded' } },
    });

    const error = await client.chat.completions
      .create({ model: MODEL, messages: [user('hi')], stream: true })
      .catch((e: unknown) => e);

    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(429);
    expect((error as APIError).code).toBe('rate_limit_exceeded');
  });

  it('rejects an orphan tool message with 400, records it, and keeps the script', async () => {
    server.script({ content: 'scripted' });

    const error = await client.chat.completions
      .create({ model: MODEL, messages: [user('hi'), toolResult('call_missing')] })
      .catch((e: unknown) => e);

    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(400);
    expect((error as APIError).type).toBe('invalid_request_error');
    expect((error as APIError).message).toContain(
      'does not follow an assistant message with tool_calls',
    );
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0]!.problems).toEqual([
      expect.stringContaining('messages[1]: tool message'),
    ]);
    const next = await client.chat.completions.create({ model: MODEL, messages: [user('hi')] });
    expect(next.choices[0]!.message.content).toBe('scripted');
  });

  it('uses the default function, then the echo, when the script is empty', async () => {
    const echoed = await client.chat.completions.create({
      model: MODEL,
      messages: [user('first'), assistant('ok'), user('second')],
    });
    expect(echoed.choices[0]!.message.content).toBe('echo: second');

    server.setDefault((body) => ({ content: `${body.messages.length} messages` }));
    const defaulted = await client.chat.completions.create({ model: MODEL, messages: [user('x')] });
    expect(defaulted.choices[0]!.message.content).toBe('1 messages');
  });

  it('answers 404 in the OpenAI error format for unknown routes and lists models', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['fake-model']);

    const response = await fetch(`${server.baseURL}/completions`, { method: 'POST', body: '{}' });
    expect(response.status).toBe(404);
    expect(response.headers.get('x-request-id')).toMatch(/^req_fake_/);
    expect(await response.json()).toEqual({
      error: {
        message: 'Invalid URL (POST /v1/completions)',
        type: 'invalid_request_error',
        param: null,
        code: null,
      },
    });
  });

  describe('stream faults', () => {
    async function collect(stream: AsyncIterable<OpenAI.ChatCompletionChunk>) {
      const chunks: OpenAI.ChatCompletionChunk[] = [];
      try {
        for await (const chunk of stream) chunks.push(chunk);
      } catch (error) {
        return { chunks, error };
      }
      return { chunks, error: undefined };
    }
    const streamRequest = () =>
      client.chat.completions.create({ model: MODEL, messages: [user('hi')], stream: true });

    it('noFinish ends the stream without a finish_reason', async () => {
      server.script({ content: 'partial answer', noFinish: true });
      const { chunks, error } = await collect(await streamRequest());
      expect(error).toBeUndefined();
      expect(chunks.length).toBeGreaterThan(1);
      expect(chunks.every((c) => c.choices[0]?.finish_reason === null)).toBe(true);
    });

    it('streamError surfaces as an APIError mid-stream', async () => {
      server.script({ content: 'partial answer', streamError: true });
      const { chunks, error } = await collect(await streamRequest());
      expect(chunks.length).toBeGreaterThan(0);
      expect(error).toBeInstanceOf(APIError);
    });

    it('resetMidStream cuts the connection inside the tool-call arguments', async () => {
      server.script({
        tool_calls: [{ name: 'write', arguments: '{"text":"a long argument string"}' }],
        resetMidStream: true,
      });
      const { chunks, error } = await collect(await streamRequest());
      expect(error).toBeDefined();
      const fragments = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
      const received = fragments.map((f) => f.function?.arguments ?? '').join('');
      expect(received.length).toBeGreaterThan(0);
      expect(received).not.toBe('{"text":"a long argument string"}');
    });

    it('stallAfterFirstChunk goes silent after one chunk', async () => {
      server.script({ content: 'never arrives', stallAfterFirstChunk: true });
      const controller = new AbortController();
      const stream = await client.chat.completions.create(
        { model: MODEL, messages: [user('hi')], stream: true },
        { signal: controller.signal },
      );
      const started = Date.now();
      const timer = setTimeout(() => controller.abort(), 200);

      // The openai client ends iteration quietly on abort; only the abort can end this stream.
      const { chunks } = await collect(stream);
      clearTimeout(timer);

      expect(Date.now() - started).toBeGreaterThanOrEqual(190);
      expect(chunks).toHaveLength(1);
      expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    });
  });

  it('delays a reply by delayMs', async () => {
    server.script({ content: 'late', delayMs: 150 });
    const started = Date.now();
    await client.chat.completions.create({ model: MODEL, messages: [user('hi')] });
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
  });
});

describe('fake LLM server options and shutdown', () => {
  it('rejects an over-long prompt with context_length_exceeded, without consuming the script', async () => {
    const server = await startFakeLlmServer({ contextWindowTokens: 10 });
    try {
      server.script({ content: 'fits' });
      const client = clientFor(server);

      const error = await client.chat.completions
        .create({ model: MODEL, messages: [user('x'.repeat(41))] })
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(APIError);
      expect((error as APIError).status).toBe(400);
      expect((error as APIError).code).toBe('context_length_exceeded');
      expect((error as APIError).message).toContain(
        "This model's maximum context length is 10 tokens. However, you requested 11 tokens (11 in the messages, 0 in the completion).",
      );
      // As OpenAI counts: the output the request asks for must fit beside the prompt.
      const withOutput = await client.chat.completions
        .create({ model: MODEL, messages: [user('x'.repeat(20))], max_tokens: 6 })
        .catch((e: unknown) => e);
      expect((withOutput as APIError).code).toBe('context_length_exceeded');
      expect((withOutput as APIError).message).toContain(
        '(5 in the messages, 6 in the completion)',
      );
      const ok = await client.chat.completions.create({
        model: MODEL,
        messages: [user('x'.repeat(40))],
      });
      expect(ok.choices[0]!.message.content).toBe('fits');
    } finally {
      await server.close();
    }
  });

  it('skips validation when validate is false', async () => {
    const server = await startFakeLlmServer({ validate: false });
    try {
      const client = clientFor(server);
      const completion = await client.chat.completions.create({
        model: MODEL,
        messages: [user('hi'), toolResult('orphan')],
      });
      expect(completion.choices[0]!.message.content).toBe('echo: hi');
      expect(server.requests[0]!.problems).toEqual([]);
    } finally {
      await server.close();
    }
  });

  it('close() ends hung requests promptly', async () => {
    const server = await startFakeLlmServer();
    server.script({ hang: true });
    const pending = clientFor(server)
      .chat.completions.create({ model: MODEL, messages: [user('hi')] })
      .catch((e: unknown) => e);
    await waitFor(() => server.requests.length === 1);

    const started = Date.now();
    await server.close();
    expect(await pending).toBeInstanceOf(APIError); // APIConnectionError
    expect(Date.now() - started).toBeLessThan(1000);
  });
});

describe('validateChatRequest', () => {
  const valid = (body: unknown) => expect(validateChatRequest(body)).toEqual([]);
  const invalid = (body: unknown, fragment: string) =>
    expect(validateChatRequest(body)).toEqual(
      expect.arrayContaining([expect.stringContaining(fragment)]),
    );

  it('accepts a complete tool exchange', () => {
    valid(
      request(
        [
          system('be brief'),
          user('hi'),
          callingAssistant('call_1', 'call_2'),
          toolResult('call_2'),
          toolResult('call_1'),
          assistant('done'),
          user('thanks'),
        ],
        {
          tools: [
            { type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } },
          ],
        },
      ),
    );
  });

  it('reports shape errors with their path', () => {
    expect(validateChatRequest(request([{ role: 'bogus', content: 'hi' }]))).toContain(
      '/messages/0/role must be equal to one of the allowed values',
    );
    invalid({ messages: [user('hi')] }, "must have required property 'model'");
    expect(validateChatRequest('not an object')).toEqual(['request body must be a JSON object']);
  });

  it('requires at least one message', () => {
    invalid(request([]), 'messages must not be empty');
  });

  it('requires a tool message to answer the nearest preceding tool-calling assistant message', () => {
    invalid(
      request([user('hi'), toolResult('call_1')]),
      'does not follow an assistant message with tool_calls',
    );
    invalid(
      request([user('hi'), callingAssistant('call_1'), toolResult('call_1'), toolResult('call_9')]),
      'tool_call_id "call_9" does not match any tool call of messages[1]',
    );
    // A user message in between closes the exchange.
    invalid(
      request([user('hi'), callingAssistant('call_1'), user('wait'), toolResult('call_1')]),
      'messages[3]: tool message (tool_call_id "call_1") does not follow',
    );
  });

  it('requires every tool call to be answered exactly once before the next non-tool message', () => {
    invalid(
      request([
        user('hi'),
        callingAssistant('call_1', 'call_2'),
        toolResult('call_1'),
        user('next'),
      ]),
      'messages[1]: tool call "call_2" has no tool message answering it before messages[3]',
    );
    invalid(
      request([user('hi'), callingAssistant('call_1')]),
      'tool call "call_1" has no tool message answering it before the end of the request',
    );
    invalid(
      request([user('hi'), callingAssistant('call_1'), toolResult('call_1'), toolResult('call_1')]),
      'tool call "call_1" is answered more than once',
    );
  });

  it('rejects duplicate tool call ids', () => {
    invalid(
      request([user('hi'), callingAssistant('call_1', 'call_1'), toolResult('call_1')]),
      'duplicate tool call id "call_1"',
    );
    invalid(
      request([
        user('hi'),
        callingAssistant('call_1'),
        toolResult('call_1'),
        callingAssistant('call_1'),
        toolResult('call_1'),
      ]),
      'messages[3]: duplicate tool call id "call_1"',
    );
  });

  it('rejects empty or whitespace-only system and user content', () => {
    invalid(
      request([system(''), user('hi')]),
      'messages[0]: system message content must not be empty',
    );
    invalid(request([user('  \n')]), 'messages[0]: user message content must not be empty');
    invalid(
      request([user('hi'), { role: 'user', content: [{ type: 'text', text: ' ' }] }]),
      'messages[1]: user message',
    );
    valid(request([system('rules'), { role: 'user', content: [{ type: 'text', text: 'hi' }] }]));
  });

  it('requires assistant messages to have content or tool calls', () => {
    invalid(
      request([user('hi'), assistant('')]),
      'assistant message needs non-empty content or tool_calls',
    );
    invalid(
      request([user('hi'), { role: 'assistant', content: null }]),
      'assistant message needs non-empty content',
    );
    invalid(
      request([user('hi'), { role: 'assistant', content: 'x', tool_calls: [] }]),
      'tool_calls must not be an empty array',
    );
    valid(request([user('hi'), assistant('hello')]));
  });

  it('requires tool message content to be a non-empty string', () => {
    invalid(
      request([user('hi'), callingAssistant('call_1'), toolResult('call_1', '')]),
      'messages[2]: tool message content must be a non-empty string',
    );
    invalid(
      request([
        user('hi'),
        callingAssistant('call_1'),
        { role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: 'r' }] },
      ]),
      'tool message content must be a non-empty string',
    );
  });

  it('rejects a conversation whose first non-system message is a tool message or a tool-calling assistant', () => {
    invalid(
      request([system('s'), toolResult('call_1')]),
      'messages[1]: the first non-system message must not be a tool message',
    );
    invalid(
      request([system('s'), callingAssistant('call_1'), toolResult('call_1'), user('hi')]),
      'messages[1]: the first non-system message must not be an assistant message with tool_calls',
    );
    valid(request([system('s'), assistant('Hello! How can I help?'), user('hi')]));
  });

  it('limits tool call ids to 40 characters', () => {
    const id40 = 'c'.repeat(40);
    const id41 = 'c'.repeat(41);
    valid(request([user('hi'), callingAssistant(id40), toolResult(id40)]));
    invalid(
      request([user('hi'), callingAssistant(id41), toolResult(id41)]),
      'is longer than 40 characters',
    );
  });

  it('rejects an empty tools array', () => {
    invalid(request([user('hi')], { tools: [] }), 'tools must not be an empty array');
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * The /v1 API driven by the official `openai` package over real HTTP: a real
 * Cairn app on 127.0.0.1 with a SQLite file in a temp folder, talking to the
 * fake OpenAI server. Every answer is also checked against OpenAI's published
 * schema, and every request Cairn sends on to the model is checked by the fake.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read arbitrary JSON off the wire */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';
import { schemaProblems } from '../helpers/openai-schemas.js';

type ApiError = InstanceType<typeof OpenAI.APIError>;

const API_KEY = 'sk-cairn-test';
let harness: TestApp;
let baseURL: string;
let client: OpenAI;

const WEATHER_TOOL = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

beforeAll(async () => {
  harness = await startTestApp({ server: { apiKey: API_KEY } });
  await harness.app.server.listen({ host: '127.0.0.1', port: 0 });
  const address = harness.app.server.server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  baseURL = `http://127.0.0.1:${address.port}/v1`;
  client = new OpenAI({ baseURL, apiKey: API_KEY, maxRetries: 0 });
});

afterAll(async () => {
  await harness.close();
});

beforeEach(() => {
  harness.fake!.reset();
});

function fake() {
  return harness.fake!;
}

/** Every request Cairn sent to the model was one a real provider accepts. */
function expectValidModelRequests(): void {
  for (const request of fake().requests) expect(request.problems).toEqual([]);
}

async function raw(path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${baseURL}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      authorization: `Bearer ${API_KEY}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as any };
}

async function sessionMessages(id: string) {
  const res = await harness.app.server.inject({
    url: `/sessions/${id}/messages?limit=500`,
    headers: { authorization: `Bearer ${API_KEY}` },
  });
  return res.json<{ messages: { role: string; content: string | null }[] }>().messages;
}

describe('GET /v1/models', () => {
  it('lists the agents as models, in OpenAI shape', async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toEqual(['assistant']);
    expect(page.data[0]).toMatchObject({ object: 'model', owned_by: 'cairn' });
    const res = await raw('/models');
    expect(schemaProblems('ListModelsResponse', res.json)).toEqual([]);
  });

  it('retrieves one agent, and 404s an unknown one with the SDK NotFoundError', async () => {
    const model = await client.models.retrieve('assistant');
    expect(schemaProblems('Model', model)).toEqual([]);
    const err = await client.models.retrieve('nobody').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as ApiError).code).toBe('model_not_found');
  });
});

describe('POST /v1/chat/completions', () => {
  it('answers as a chat.completion with usage and the session header', async () => {
    fake().script({
      content: 'Hello from the agent',
      usage: { prompt_tokens: 12, completion_tokens: 4 },
    });
    const { data, response } = await client.chat.completions
      .create({
        model: 'assistant',
        messages: [
          { role: 'system', content: 'Answer in English.' },
          { role: 'user', content: 'Hi there' },
        ],
        temperature: 0.3,
        user: 'u-1',
        metadata: { app: 'test' },
        seed: 7,
      })
      .withResponse();
    expect(data.object).toBe('chat.completion');
    expect(data.model).toBe('assistant');
    expect(data.choices[0]!.message.content).toBe('Hello from the agent');
    expect(data.choices[0]!.finish_reason).toBe('stop');
    expect(data.usage).toEqual({ prompt_tokens: 12, completion_tokens: 4, total_tokens: 16 });
    expect(schemaProblems('CreateChatCompletionResponse', data)).toEqual([]);
    expect(response.headers.get('x-cairn-session-id')).toMatch(/^sess_/);

    // The agent's prompt first, the client's system message after it, then the user turn.
    const sent = fake().requests[0]!.body;
    expect(sent.messages.map((m: { role: string }) => m.role)).toEqual([
      'system',
      'system',
      'user',
    ]);
    expect(sent.messages[0].content).toBe('You are a test assistant.');
    expect(sent.messages[1].content).toBe('Answer in English.');
    expect(sent.temperature).toBe(0.3);
    expectValidModelRequests();
  });

  it('streams chat.completion.chunk events, ending with usage when asked', async () => {
    fake().script({ content: 'one two three', usage: { prompt_tokens: 9, completion_tokens: 3 } });
    const stream = await client.chat.completions.create({
      model: 'assistant',
      messages: [{ role: 'user', content: 'Count' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    for (const chunk of chunks)
      expect(schemaProblems('CreateChatCompletionStreamResponse', chunk)).toEqual([]);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('one two three');
    const finish = chunks.find((c) => c.choices[0]?.finish_reason);
    expect(finish!.choices[0]!.finish_reason).toBe('stop');
    const last = chunks[chunks.length - 1]!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({ prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 });
  });

  it('ends a raw stream with data: [DONE] and sends the session header first', async () => {
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'assistant',
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      }),
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    expect(res.headers.get('x-cairn-session-id')).toMatch(/^sess_/);
    const text = await res.text();
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(text).toContain('"object":"chat.completion.chunk"');
  });
});

describe('session continuity', () => {
  it('a client resending the whole history each turn stays in one session, across a compaction', async () => {
    const history: OpenAI.ChatCompletionMessageParam[] = [{ role: 'system', content: 'Be brief.' }];
    const sessions = new Set<string>();
    for (let turn = 1; turn <= 5; turn++) {
      history.push({ role: 'user', content: `question ${turn}` });
      const { data, response } = await client.chat.completions
        .create({ model: 'assistant', messages: history })
        .withResponse();
      sessions.add(response.headers.get('x-cairn-session-id')!);
      expect(data.choices[0]!.message.content).toBe(`echo: question ${turn}`);
      history.push({ role: 'assistant', content: data.choices[0]!.message.content! });
      if (turn === 3) {
        const [id] = sessions;
        const compacted = await harness.app.server.inject({
          method: 'POST',
          url: `/sessions/${id}/compact`,
          headers: { authorization: `Bearer ${API_KEY}` },
        });
        expect(compacted.json().compactedCount).toBeGreaterThan(0);
      }
    }
    expect(sessions.size).toBe(1);
    const [id] = sessions;
    const stored = await sessionMessages(id!);
    // The agent's prompt, the client's instruction, then 5 user/assistant pairs: nothing duplicated.
    expect(stored.map((m) => m.role)).toEqual([
      'system',
      'system',
      ...Array(5).fill(['user', 'assistant']).flat(),
    ]);
    // After the compaction the model got the summary, not the whole history again.
    const lastRequest = fake().requests[fake().requests.length - 1]!.body;
    expect(JSON.stringify(lastRequest.messages)).toContain('[Summary of previous conversation]');
    expectValidModelRequests();
  });

  it('the X-Cairn-Session-Id header continues a session with only the new message', async () => {
    const first = await client.chat.completions
      .create({ model: 'assistant', messages: [{ role: 'user', content: 'my name is Ada' }] })
      .withResponse();
    const id = first.response.headers.get('x-cairn-session-id')!;
    const second = await client.chat.completions
      .create(
        { model: 'assistant', messages: [{ role: 'user', content: 'what is my name?' }] },
        { headers: { 'X-Cairn-Session-Id': id } },
      )
      .withResponse();
    expect(second.response.headers.get('x-cairn-session-id')).toBe(id);
    const sent = fake().requests[1]!.body;
    expect(JSON.stringify(sent.messages)).toContain('my name is Ada');
  });

  it('an unknown session header is a 404 in OpenAI shape', async () => {
    const err = await client.chat.completions
      .create(
        { model: 'assistant', messages: [{ role: 'user', content: 'x' }] },
        { headers: { 'X-Cairn-Session-Id': 'sess_000000000000000000000000' } },
      )
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as ApiError).code).toBe('session_not_found');
  });

  it('a history that matches no session starts a new one seeded with it', async () => {
    const { response } = await client.chat.completions
      .create({
        model: 'assistant',
        messages: [
          { role: 'user', content: 'earlier question' },
          { role: 'assistant', content: 'earlier answer' },
          { role: 'user', content: 'follow-up' },
        ],
      })
      .withResponse();
    const id = response.headers.get('x-cairn-session-id')!;
    const stored = await sessionMessages(id);
    expect(stored.map((m) => m.content)).toEqual([
      'You are a test assistant.',
      'earlier question',
      'earlier answer',
      'follow-up',
      'echo: follow-up',
    ]);
    const sent = fake().requests[0]!.body;
    expect(sent.messages.map((m: { content: string }) => m.content)).toEqual([
      'You are a test assistant.',
      'earlier question',
      'earlier answer',
      'follow-up',
    ]);
  });
});

describe('client-side tools', () => {
  it('stops on a client tool call, runs agent tools server-side, and goes on with the client result', async () => {
    fake().script(
      {
        tool_calls: [
          { id: 'call_weather1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
          { id: 'call_time1', name: 'current_time', arguments: '{}' },
        ],
      },
      { content: 'It is sunny in Oslo.' },
    );
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'Weather in Oslo?' },
    ];
    const first = await client.chat.completions
      .create({ model: 'assistant', messages, tools: [WEATHER_TOOL] })
      .withResponse();
    const choice = first.data.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toEqual([
      {
        id: 'call_weather1',
        type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
      },
    ]);
    expect(schemaProblems('CreateChatCompletionResponse', first.data)).toEqual([]);
    // Both tools were offered; the agent's ran on the server.
    const offered = fake().requests[0]!.body.tools.map((t: any) => t.function.name);
    expect(offered).toEqual(
      expect.arrayContaining(['get_weather', 'current_time', 'history_search']),
    );
    const id = first.response.headers.get('x-cairn-session-id')!;
    const stored = await sessionMessages(id);
    expect(stored.filter((m) => m.role === 'tool')).toHaveLength(1);

    messages.push(choice.message, {
      role: 'tool',
      tool_call_id: 'call_weather1',
      content: 'sunny, 21 C',
    });
    const second = await client.chat.completions
      .create({ model: 'assistant', messages, tools: [WEATHER_TOOL] })
      .withResponse();
    expect(second.response.headers.get('x-cairn-session-id')).toBe(id);
    expect(second.data.choices[0]!.message.content).toBe('It is sunny in Oslo.');
    const followUp = fake().requests[1]!.body.messages;
    expect(followUp.find((m: any) => m.tool_call_id === 'call_weather1').content).toBe(
      'sunny, 21 C',
    );
    expectValidModelRequests();
  });

  it('streams client tool calls in chunks the SDK accumulates', async () => {
    fake().script({
      tool_calls: [{ id: 'call_w2', name: 'get_weather', arguments: '{"city":"Rome"}' }],
    });
    const stream = client.chat.completions.stream({
      model: 'assistant',
      messages: [{ role: 'user', content: 'Weather in Rome?' }],
      tools: [WEATHER_TOOL],
    });
    const done = await stream.finalChatCompletion();
    expect(done.choices[0]!.finish_reason).toBe('tool_calls');
    expect(done.choices[0]!.message.tool_calls![0]).toMatchObject({
      id: 'call_w2',
      function: { name: 'get_weather', arguments: '{"city":"Rome"}' },
    });
  });

  it('a tool result for a call the session is not waiting for is a 400 that says so', async () => {
    const first = await client.chat.completions
      .create({ model: 'assistant', messages: [{ role: 'user', content: 'hello' }] })
      .withResponse();
    const id = first.response.headers.get('x-cairn-session-id')!;
    const err = await client.chat.completions
      .create(
        {
          model: 'assistant',
          messages: [
            {
              role: 'assistant',
              content: null,
              tool_calls: [
                {
                  id: 'call_nope',
                  type: 'function',
                  function: { name: 'get_weather', arguments: '{}' },
                },
              ],
            },
            { role: 'tool', tool_call_id: 'call_nope', content: 'late' },
          ],
          tools: [WEATHER_TOOL],
        },
        { headers: { 'X-Cairn-Session-Id': id } },
      )
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as ApiError).message).toContain('not waiting for');
  });

  it('a client tool named like an agent tool is a 400', async () => {
    const err = await client.chat.completions
      .create({
        model: 'assistant',
        messages: [{ role: 'user', content: 'x' }],
        tools: [
          { type: 'function', function: { name: 'current_time', parameters: { type: 'object' } } },
        ],
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as ApiError).message).toContain('current_time');
    const sessions = await harness.app.store.listSessions({ agentName: 'assistant', limit: 500 });
    expect(sessions.items.every((row) => row.message_count > 1)).toBe(true);
  });
});

describe('errors in OpenAI shape', () => {
  it('a wrong key is the SDK AuthenticationError with an OpenAI error body', async () => {
    const wrong = new OpenAI({ baseURL, apiKey: 'sk-wrong', maxRetries: 0 });
    const err = await wrong.models.list().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as ApiError).code).toBe('invalid_api_key');
    const res = await raw(
      '/chat/completions',
      { model: 'assistant', messages: [] },
      { authorization: 'Bearer nope' },
    );
    expect(res.status).toBe(401);
    expect(schemaProblems('ErrorResponse', res.json)).toEqual([]);
    expect(res.json.error.type).toBe('authentication_error');
  });

  it('parameters Cairn cannot honour are a 400 naming them; harmless ones are accepted', async () => {
    for (const [param, value] of [
      ['n', 2],
      ['logprobs', true],
      ['response_format', { type: 'json_object' }],
      ['tool_choice', 'required'],
    ] as const) {
      const res = await raw('/chat/completions', {
        model: 'assistant',
        messages: [{ role: 'user', content: 'x' }],
        [param]: value,
      });
      expect(res.status).toBe(400);
      expect(res.json.error.param).toBe(param);
      expect(res.json.error.message).toContain(param);
      expect(schemaProblems('ErrorResponse', res.json)).toEqual([]);
    }
    const err = await client.chat.completions
      .create({ model: 'assistant', messages: [{ role: 'user', content: 'x' }], n: 3 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(fake().requests).toHaveLength(0);
  });

  it('bad requests are 400s in OpenAI shape, never 500s', async () => {
    const cases: unknown[] = [
      '{not json',
      [],
      { model: 'assistant' },
      { model: 'assistant', messages: [] },
      {
        model: 'assistant',
        messages: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: 'b' },
        ],
      },
      { model: 'assistant', messages: [{ role: 'wizard', content: 'x' }] },
      {
        model: 'assistant',
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
      },
      {
        model: 'assistant',
        messages: [{ role: 'user', content: 'x' }],
        tools: [{ type: 'function', function: { name: 'bad name' } }],
      },
      {
        model: 'assistant',
        messages: [{ role: 'user', content: 'x' }],
        tools: [{ type: 'function', function: { name: 'ok', parameters: { type: 'nonsense' } } }],
      },
      { model: 'assistant', messages: [{ role: 'user', content: 'x' }], temperature: 'hot' },
      { model: 'assistant', messages: [{ role: 'user', content: 'x' }], temperature: 5 },
    ];
    for (const body of cases) {
      const res = await raw('/chat/completions', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.error.type).toBe('invalid_request_error');
      expect(schemaProblems('ErrorResponse', res.json)).toEqual([]);
    }
  });

  it('an unknown model is a 404 model_not_found; an unknown /v1 path a 404 in OpenAI shape', async () => {
    const err = await client.chat.completions
      .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as ApiError).code).toBe('model_not_found');
    const res = await raw('/embeddings', { model: 'assistant', input: 'x' });
    expect(res.status).toBe(404);
    expect(schemaProblems('ErrorResponse', res.json)).toEqual([]);
  });

  it('a model failure is a 502 the SDK raises as an APIError, streamed or not', async () => {
    fake().script({ status: 500 });
    const err = await client.chat.completions
      .create({ model: 'assistant', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as ApiError).status).toBe(502);
    expect((err as ApiError).type).toBe('server_error');
    // The turn's user message was stored: the error names the session it is in.
    expect((err as ApiError).headers?.get('x-cairn-session-id')).toMatch(/^sess_/);

    fake().script({ status: 500 });
    const stream = await client.chat.completions.create({
      model: 'assistant',
      messages: [{ role: 'user', content: 'y' }],
      stream: true,
    });
    const failed = await (async () => {
      for await (const _chunk of stream) {
        // drain
      }
    })().catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(OpenAI.APIError);
  });
});

describe('POST /v1/responses', () => {
  it('answers text input, and previous_response_id continues the same session', async () => {
    const first = await client.responses
      .create({ model: 'assistant', input: 'remember 42', instructions: 'Be terse.' })
      .withResponse();
    expect(first.data.output_text).toBe('echo: remember 42');
    expect(first.data.status).toBe('completed');
    expect(schemaProblems('Response', JSON.parse(JSON.stringify(first.data)))).toEqual([]);
    const id = first.response.headers.get('x-cairn-session-id')!;

    const second = await client.responses
      .create({
        model: 'assistant',
        input: [{ role: 'user', content: 'what number?' }],
        previous_response_id: first.data.id,
      })
      .withResponse();
    expect(second.response.headers.get('x-cairn-session-id')).toBe(id);
    expect(second.data.previous_response_id).toBe(first.data.id);
    const sent = fake().requests[1]!.body.messages.map((m: any) => m.content);
    expect(sent).toEqual([
      'You are a test assistant.',
      'Be terse.',
      'remember 42',
      'echo: remember 42',
      'what number?',
    ]);

    const again = await client.responses.retrieve(first.data.id);
    expect(again.output_text).toBe('echo: remember 42');
    expect(schemaProblems('Response', JSON.parse(JSON.stringify(again)))).toEqual([]);
    expectValidModelRequests();
  });

  it('streams response events in OpenAI order and shape', async () => {
    fake().script({ content: 'streamed words here' });
    const stream = await client.responses.create({ model: 'assistant', input: 'go', stream: true });
    const events: any[] = [];
    for await (const event of stream) events.push(event);
    const types = events.map((e) => e.type);
    expect(types[0]).toBe('response.created');
    expect(types).toContain('response.output_text.delta');
    expect(types.slice(-2)).toEqual(['response.output_item.done', 'response.completed']);
    expect(
      events
        .filter((e) => e.type === 'response.output_text.delta')
        .map((e) => e.delta)
        .join(''),
    ).toBe('streamed words here');
    expect(events.find((e) => e.type === 'response.output_text.done').text).toBe(
      'streamed words here',
    );
    events.forEach((e, i) => expect(e.sequence_number).toBe(i));
    for (const event of events) expect(schemaProblems('ResponseStreamEvent', event)).toEqual([]);
  });

  it('rejects what it cannot do, and 404s an unknown response id', async () => {
    const tools = await raw('/responses', {
      model: 'assistant',
      input: 'x',
      tools: [{ type: 'web_search' }],
    });
    expect(tools.status).toBe(400);
    expect(tools.json.error.param).toBe('tools[0]');
    expect(tools.json.error.code).toBe('unsupported_parameter');
    const bad = await raw('/responses', {
      model: 'assistant',
      input: 'x',
      previous_response_id: 'resp_x',
    });
    expect(bad.status).toBe(400);
    const err = await client.responses
      .retrieve('resp_1_sess_000000000000000000000000')
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
  });
});

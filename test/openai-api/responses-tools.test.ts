/**
 * /v1/responses with the client's function tools, driven by
 * the official `openai` package over real HTTP: a real Cairn app on
 * 127.0.0.1 (SQLite in a temp folder) with the fake OpenAI server behind it.
 * Every request body is checked against OpenAI's `CreateResponse` schema and
 * every answer and stream event against the response schemas; every request
 * Cairn sends on to the model is checked by the fake.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read arbitrary JSON off the wire */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startTestApp, type TestApp } from '../helpers/test-app.js';
import { schemaProblems } from '../helpers/openai-schemas.js';

type ApiError = InstanceType<typeof OpenAI.APIError>;

const API_KEY = 'sk-cairn-test';
let harness: TestApp;
let baseURL: string;
let client: OpenAI;

const WEATHER_TOOL = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Weather for a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
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

/** A request body as OpenAI's schema describes it, so the tests never post what OpenAI would refuse. */
function checked<T>(body: T): T {
  expect(schemaProblems('CreateResponse', body)).toEqual([]);
  return body;
}

async function raw(path: string, body?: unknown) {
  const res = await fetch(`${baseURL}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      authorization: `Bearer ${API_KEY}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as any };
}

describe('/v1/responses with function tools', () => {
  it('returns a function_call item, continues with function_call_output by previous_response_id, and GET returns both whole', async () => {
    fake().script(
      {
        tool_calls: [
          { id: 'call_w1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
          { id: 'call_t1', name: 'current_time', arguments: '{}' },
        ],
      },
      { content: 'Sunny in Oslo.' },
    );
    const first = await client.responses
      .create(
        checked({
          model: 'assistant',
          input: 'Weather in Oslo?',
          tools: [WEATHER_TOOL],
          instructions: 'Be brief.',
        }),
      )
      .withResponse();
    const response = JSON.parse(JSON.stringify(first.data));
    expect(schemaProblems('Response', response)).toEqual([]);
    expect(response.status).toBe('completed');
    // Only the client's call comes back; the agent's own tool ran on the server.
    expect(response.output).toEqual([
      {
        type: 'function_call',
        id: expect.stringMatching(/^fc_/),
        call_id: 'call_w1',
        name: 'get_weather',
        arguments: '{"city":"Oslo"}',
        status: 'completed',
      },
    ]);
    expect(response.tools).toEqual([{ ...WEATHER_TOOL }]);
    const offered = fake().requests[0]!.body.tools.map((t: any) => t.function.name);
    expect(offered).toEqual(expect.arrayContaining(['get_weather', 'current_time']));
    const sessionId = first.response.headers.get('x-cairn-session-id')!;

    const second = await client.responses
      .create(
        checked({
          model: 'assistant',
          previous_response_id: first.data.id,
          input: [{ type: 'function_call_output', call_id: 'call_w1', output: 'sunny, 21 C' }],
          tools: [WEATHER_TOOL],
        }),
      )
      .withResponse();
    expect(second.response.headers.get('x-cairn-session-id')).toBe(sessionId);
    expect(second.data.output_text).toBe('Sunny in Oslo.');
    expect(second.data.previous_response_id).toBe(first.data.id);
    const followUp = fake().requests[1]!.body.messages;
    expect(followUp.find((m: any) => m.tool_call_id === 'call_w1').content).toBe('sunny, 21 C');
    expect(followUp.find((m: any) => m.tool_call_id === 'call_t1')).toBeDefined();

    const again = JSON.parse(JSON.stringify(await client.responses.retrieve(first.data.id)));
    expect(schemaProblems('Response', again)).toEqual([]);
    expect(again).toEqual(response);
    const final = await client.responses.retrieve(second.data.id);
    expect(final.output_text).toBe('Sunny in Oslo.');
    expect(final.previous_response_id).toBe(first.data.id);
    expectValidModelRequests();
  });

  it('streams a call as output_item.added, function_call_arguments.delta/.done and output_item.done', async () => {
    fake().script({
      content: 'Let me check.',
      tool_calls: [{ id: 'call_s1', name: 'get_weather', arguments: '{"city":"Rome"}' }],
    });
    const stream = await client.responses.create(
      checked({
        model: 'assistant',
        input: 'Weather in Rome?',
        tools: [WEATHER_TOOL],
        stream: true as const,
      }),
    );
    const events: any[] = [];
    for await (const event of stream) events.push(event);
    for (const event of events) expect(schemaProblems('ResponseStreamEvent', event)).toEqual([]);
    events.forEach((e, i) => expect(e.sequence_number).toBe(i));
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.type),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const added = events.filter((e) => e.type === 'response.output_item.added');
    expect(added.map((e) => [e.output_index, e.item.type])).toEqual([
      [0, 'message'],
      [1, 'function_call'],
    ]);
    expect(added[1].item).toMatchObject({
      call_id: 'call_s1',
      arguments: '',
      status: 'in_progress',
    });
    const done = events.find((e) => e.type === 'response.function_call_arguments.done');
    expect(done).toMatchObject({
      output_index: 1,
      name: 'get_weather',
      arguments: '{"city":"Rome"}',
    });
    const completed = events[events.length - 1].response;
    expect(completed.output.map((item: any) => item.type)).toEqual(['message', 'function_call']);
    expect(completed.output[0].content[0].text).toBe('Let me check.');
    // The stored response is the one the stream completed with.
    const stored = JSON.parse(JSON.stringify(await client.responses.retrieve(completed.id)));
    expect(stored).toEqual(completed);
  });

  it("the SDK's stream helper assembles a call that has no text into one function_call item", async () => {
    fake().script({
      tool_calls: [{ id: 'call_s2', name: 'get_weather', arguments: '{"city":"Lima"}' }],
    });
    const final = await client.responses
      .stream({ model: 'assistant', input: 'Weather in Lima?', tools: [WEATHER_TOOL] })
      .finalResponse();
    expect(final.output).toHaveLength(1);
    expect(final.output[0]).toMatchObject({
      type: 'function_call',
      call_id: 'call_s2',
      arguments: '{"city":"Lima"}',
    });
  });

  it('a client resending the whole history (function_call and its output as items) stays in its session', async () => {
    fake().script(
      { tool_calls: [{ id: 'call_h1', name: 'get_weather', arguments: '{"city":"Bern"}' }] },
      { content: 'Cold in Bern.' },
    );
    const input: any[] = [{ role: 'user', content: 'Weather in Bern?' }];
    const first = await client.responses
      .create(checked({ model: 'assistant', input, tools: [WEATHER_TOOL] }))
      .withResponse();
    const sessionId = first.response.headers.get('x-cairn-session-id')!;
    input.push(...first.data.output, {
      type: 'function_call_output',
      call_id: 'call_h1',
      output: [{ type: 'input_text', text: '-3 C' }],
    });
    const second = await client.responses
      .create(checked({ model: 'assistant', input, tools: [WEATHER_TOOL] }))
      .withResponse();
    expect(second.response.headers.get('x-cairn-session-id')).toBe(sessionId);
    expect(second.data.output_text).toBe('Cold in Bern.');
    expect(
      fake().requests[1]!.body.messages.find((m: any) => m.tool_call_id === 'call_h1').content,
    ).toBe('-3 C');
    expectValidModelRequests();
  });

  it('a tool schema in draft 2020-12, as zod 4 writes it, is accepted and validates the arguments', async () => {
    const parameters = z.toJSONSchema(
      z.object({ city: z.string(), days: z.number().int().min(1).max(7) }),
    );
    expect(parameters.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    fake().script(
      // Out of range: the model is told and tries again.
      { tool_calls: [{ name: 'forecast', arguments: '{"city":"Oslo","days":30}' }] },
      { tool_calls: [{ id: 'call_z2', name: 'forecast', arguments: '{"city":"Oslo","days":3}' }] },
    );
    const res = await client.responses.create(
      checked({
        model: 'assistant',
        input: 'Forecast for Oslo',
        tools: [{ type: 'function', name: 'forecast', parameters, strict: false }],
      }),
    );
    expect(res.output[0]).toMatchObject({ type: 'function_call', call_id: 'call_z2' });
    const correction = fake().requests[1]!.body.messages.find((m: any) => m.role === 'tool');
    expect(correction.content).toContain('do not match');
  });
});

describe('stored responses', () => {
  it('a streamed turn that fails reads back as failed, never in_progress', async () => {
    fake().script({ status: 500 });
    const stream = await client.responses.create({
      model: 'assistant',
      input: 'this will fail',
      stream: true,
    });
    const events: any[] = [];
    await (async () => {
      for await (const event of stream) events.push(event);
    })().catch(() => undefined);
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'error',
    ]);
    const id = events.find((e) => e.type === 'response.created').response.id as string;
    const stored = JSON.parse(JSON.stringify(await client.responses.retrieve(id)));
    expect(stored.status).toBe('failed');
    expect(stored.error).toMatchObject({ code: 'server_error' });
    expect(schemaProblems('Response', stored)).toEqual([]);
  });

  it('a response id of a native session is a 404, never an invented response (resp_1_<native session>)', async () => {
    const res = await harness.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      headers: { authorization: `Bearer ${API_KEY}` },
      payload: { message: 'native turn' },
    });
    const sessionId = res.json<{ sessionId: string }>().sessionId;
    // Seq 1 is the system prompt, 2 the user message, 3 the reply: resp_1_ has the shape of
    // that turn's response id, but no response was issued for a native chat.
    for (const seq of [1, 0, 2, 3, 40]) {
      const err = await client.responses
        .retrieve(`resp_${seq}_${sessionId}`)
        .catch((e: unknown) => e);
      expect(err, String(seq)).toBeInstanceOf(OpenAI.NotFoundError);
      expect((err as ApiError).code).toBe('response_not_found');
    }
  });
});

describe('/v1/responses errors', () => {
  it('what Cairn cannot honour is a 400 naming it, in OpenAI shape', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ tools: [{ type: 'web_search' }] }, 'tools[0]'],
      [{ tools: [{ type: 'function', name: 'bad name', parameters: {} }] }, 'tools[0].name'],
      [
        { tools: [{ type: 'function', name: 'ok', parameters: { type: 'nonsense' } }] },
        'tools[0].parameters',
      ],
      [
        {
          tools: [
            {
              type: 'function',
              name: 'ok',
              parameters: { $schema: 'http://json-schema.org/draft-03/schema#', type: 'object' },
            },
          ],
        },
        'tools[0].parameters',
      ],
      [{ tool_choice: 'required' }, 'tool_choice'],
      [{ text: { format: { type: 'json_object' } } }, 'text.format'],
      [{ input: [{ type: 'item_reference', id: 'x' }] }, 'input[0]'],
      [{ input: [{ type: 'function_call_output', output: 'x' }] }, 'input[0].call_id'],
      [{ input: [{ role: 'wizard', content: 'x' }] }, 'input[0].role'],
    ];
    for (const [extra, param] of cases) {
      const res = await raw('/responses', { model: 'assistant', input: 'x', ...extra });
      expect(res.status, JSON.stringify(extra)).toBe(400);
      expect(res.json.error.param).toBe(param);
      expect(schemaProblems('ErrorResponse', res.json)).toEqual([]);
    }
    expect(fake().requests).toHaveLength(0);
  });
});

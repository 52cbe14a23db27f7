/**
 * Branching on the Responses API, driven by the official `openai` package
 * against a real Cairn server on 127.0.0.1 (SQLite file and Postgres
 * database), with the fake OpenAI server behind it: `previous_response_id`
 * naming an older response continues from that response in a fork of its
 * session, as OpenAI does, and the fake's request log shows exactly the
 * history each branch sent the model.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read arbitrary JSON off the wire */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DATABASES, startTestApp, type TestApp } from '../helpers/test-app.js';
import { schemaProblems } from '../helpers/openai-schemas.js';

type ApiError = InstanceType<typeof OpenAI.APIError>;

const API_KEY = 'sk-cairn-test';
let harness: TestApp;
let client: OpenAI;

const WEATHER_TOOL = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
};

function fake() {
  return harness.fake!;
}

/** Every request Cairn sent to the model was one a real provider accepts. */
function expectValidModelRequests(): void {
  for (const request of fake().requests) expect(request.problems).toEqual([]);
}

/** A request body as OpenAI's schema describes it. */
function checked<T>(body: T): T {
  expect(schemaProblems('CreateResponse', body)).toEqual([]);
  return body;
}

/** The contents of the messages of the model request `index`. */
function sentContents(index: number): (string | null)[] {
  return fake().requests[index]!.body.messages.map((m: any) => m.content);
}

async function sessionCount(): Promise<number> {
  return (await harness.app.store.listSessions({ limit: 500 })).items.length;
}

describe.each(DATABASES)('branching by previous_response_id (%s)', (database) => {
  beforeAll(async () => {
    harness = await startTestApp({ database, server: { apiKey: API_KEY } });
    await harness.app.server.listen({ host: '127.0.0.1', port: 0 });
    const address = harness.app.server.server.address();
    if (address === null || typeof address === 'string') throw new Error('no address');
    client = new OpenAI({
      baseURL: `http://127.0.0.1:${address.port}/v1`,
      apiKey: API_KEY,
      maxRetries: 0,
    });
  });
  afterAll(async () => harness.close());
  beforeEach(() => fake().reset());

  it('A, then B from A, then C from A: the model sees A then C, and each branch goes on by itself', async () => {
    const a = await client.responses
      .create(checked({ model: 'assistant', input: 'A' }))
      .withResponse();
    const b = await client.responses
      .create(checked({ model: 'assistant', input: 'B', previous_response_id: a.data.id }))
      .withResponse();
    const parentSession = a.response.headers.get('x-cairn-session-id')!;
    expect(b.response.headers.get('x-cairn-session-id')).toBe(parentSession);

    const c = await client.responses
      .create(checked({ model: 'assistant', input: 'C', previous_response_id: a.data.id }))
      .withResponse();
    expect(sentContents(2)).toEqual(['You are a test assistant.', 'A', 'echo: A', 'C']);
    const branchSession = c.response.headers.get('x-cairn-session-id')!;
    expect(branchSession).not.toBe(parentSession);
    expect(c.data.previous_response_id).toBe(a.data.id);

    // Each branch continues where it is: D after C, E after B.
    await client.responses.create({
      model: 'assistant',
      input: 'D',
      previous_response_id: c.data.id,
    });
    expect(sentContents(3)).toEqual([
      'You are a test assistant.',
      'A',
      'echo: A',
      'C',
      'echo: C',
      'D',
    ]);
    const e = await client.responses
      .create({ model: 'assistant', input: 'E', previous_response_id: b.data.id })
      .withResponse();
    expect(e.response.headers.get('x-cairn-session-id')).toBe(parentSession);
    expect(sentContents(4)).toEqual([
      'You are a test assistant.',
      'A',
      'echo: A',
      'B',
      'echo: B',
      'E',
    ]);
    expect((await client.responses.retrieve(b.data.id)).output_text).toBe('echo: B');
    expectValidModelRequests();
  });

  it('a tool output answering an older response branches from it, with the call still open there', async () => {
    fake().script(
      { tool_calls: [{ id: 'call_b1', name: 'get_weather', arguments: '{"city":"Nice"}' }] },
      { content: 'Warm in Nice.' },
      { content: 'Again: warm.' },
    );
    const asked = await client.responses.create(
      checked({ model: 'assistant', input: 'Weather in Nice?', tools: [WEATHER_TOOL] }),
    );
    const answer = checked({
      model: 'assistant',
      previous_response_id: asked.id,
      input: [{ type: 'function_call_output' as const, call_id: 'call_b1', output: '25 C' }],
      tools: [WEATHER_TOOL],
    });
    const first = await client.responses.create(answer).withResponse();
    expect(first.data.output_text).toBe('Warm in Nice.');
    // The same answer again (a regenerate): a new branch from the response with the open call.
    const again = await client.responses.create(answer).withResponse();
    expect(again.data.output_text).toBe('Again: warm.');
    expect(again.response.headers.get('x-cairn-session-id')).not.toBe(
      first.response.headers.get('x-cairn-session-id'),
    );
    const sent = fake().requests[2]!.body.messages;
    expect(sent.filter((m: any) => m.role === 'tool').map((m: any) => m.content)).toEqual(['25 C']);
    expect(sent.some((m: any) => m.content === 'Warm in Nice.')).toBe(false);
    expectValidModelRequests();
  });

  it('a tool output for a call the older response did not make is a 400 and forks nothing', async () => {
    const a = await client.responses.create({ model: 'assistant', input: 'first' });
    await client.responses.create({
      model: 'assistant',
      input: 'second',
      previous_response_id: a.id,
    });
    const before = await sessionCount();
    const err = await client.responses
      .create({
        model: 'assistant',
        previous_response_id: a.id,
        input: [{ type: 'function_call_output', call_id: 'call_never', output: 'x' }],
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as ApiError).code).toBe('tool_call_not_waiting');
    expect(await sessionCount()).toBe(before);
  });
});

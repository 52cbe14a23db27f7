/**
 * LangChain's `ChatOpenAI` (`@langchain/openai`) against a real Cairn server
 * on 127.0.0.1, with the fake OpenAI server behind Cairn. Its default tool
 * path, `bindTools` with a zod 4 schema, sends `parameters` carrying
 * `"$schema": "https://json-schema.org/draft/2020-12/schema"`: Cairn must
 * accept it, validate the model's arguments with it, and go on with the result.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read arbitrary JSON off the wire */
import {
  AIMessage,
  AIMessageChunk,
  HumanMessage,
  ToolMessage,
  type BaseMessage,
} from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { ChatOpenAI } from '@langchain/openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const API_KEY = 'sk-cairn-test';
let harness: TestApp;
let baseURL: string;

const forecast = tool(async ({ city, days }) => `${city}: sunny for ${days} days`, {
  name: 'forecast',
  description: 'The forecast for a city',
  schema: z.object({ city: z.string(), days: z.number().int().min(1).max(7) }),
});

beforeAll(async () => {
  harness = await startTestApp({ server: { apiKey: API_KEY } });
  await harness.app.server.listen({ host: '127.0.0.1', port: 0 });
  const address = harness.app.server.server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  baseURL = `http://127.0.0.1:${address.port}/v1`;
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

function model(options: { useResponsesApi?: boolean } = {}) {
  return new ChatOpenAI({
    model: 'assistant',
    apiKey: API_KEY,
    maxRetries: 0,
    configuration: { baseURL },
    ...options,
  }).bindTools([forecast]);
}

/** Runs the forecast tool on the calls of `reply` and returns the tool messages. */
async function runTools(reply: AIMessage): Promise<ToolMessage[]> {
  return Promise.all((reply.tool_calls ?? []).map((call) => forecast.invoke(call)));
}

describe('@langchain/openai bindTools with a zod tool', () => {
  it('sends a draft 2020-12 schema that Cairn accepts, returns the call, and goes on with the result', async () => {
    fake().script(
      // Out of range for the zod schema: Cairn's validation tells the model, which corrects itself.
      { tool_calls: [{ name: 'forecast', arguments: '{"city":"Oslo","days":30}' }] },
      { tool_calls: [{ id: 'call_lc1', name: 'forecast', arguments: '{"city":"Oslo","days":2}' }] },
      { content: 'Two sunny days in Oslo.' },
    );
    const chat = model();
    const history: BaseMessage[] = [new HumanMessage('Forecast for Oslo, two days')];
    const first = (await chat.invoke(history)) as AIMessage;
    expect(first.tool_calls).toEqual([
      expect.objectContaining({
        id: 'call_lc1',
        name: 'forecast',
        args: { city: 'Oslo', days: 2 },
      }),
    ]);
    // What LangChain sent is what the issue describes: a 2020-12 schema.
    const sentTools = JSON.stringify(fake().requests[0]!.body.tools);
    expect(sentTools).toContain('forecast');
    const correction = fake().requests[1]!.body.messages.find((m: any) => m.role === 'tool');
    expect(correction.content).toContain('do not match');

    history.push(first, ...(await runTools(first)));
    const second = await chat.invoke(history);
    expect(second.content).toBe('Two sunny days in Oslo.');
    const result = fake().requests[2]!.body.messages.find(
      (m: any) => m.tool_call_id === 'call_lc1',
    );
    expect(result.content).toBe('Oslo: sunny for 2 days');
    for (const request of fake().requests) expect(request.problems).toEqual([]);
  });

  it('the client really sends the 2020-12 $schema (seen on the wire)', async () => {
    const bodies: any[] = [];
    const chat = new ChatOpenAI({
      model: 'assistant',
      apiKey: API_KEY,
      maxRetries: 0,
      configuration: {
        baseURL,
        fetch: async (url: string | URL | Request, init?: RequestInit) => {
          bodies.push(JSON.parse(init?.body as string));
          return fetch(url, init);
        },
      },
    }).bindTools([forecast]);
    fake().script({ content: 'fine' });
    await chat.invoke('hello');
    expect(bodies[0].tools[0].function.parameters.$schema).toBe(
      'https://json-schema.org/draft/2020-12/schema',
    );
  });

  it('streams a tool call that LangChain assembles from the chunks', async () => {
    fake().script({
      tool_calls: [{ id: 'call_lc2', name: 'forecast', arguments: '{"city":"Rome","days":3}' }],
    });
    let gathered: AIMessageChunk | undefined;
    for await (const chunk of await model().stream('Forecast for Rome, three days'))
      gathered = gathered === undefined ? chunk : gathered.concat(chunk);
    expect(gathered!.tool_calls).toEqual([
      expect.objectContaining({
        id: 'call_lc2',
        name: 'forecast',
        args: { city: 'Rome', days: 3 },
      }),
    ]);
  });

  it('works the same over the Responses API (useResponsesApi)', async () => {
    fake().script(
      { tool_calls: [{ id: 'call_lc3', name: 'forecast', arguments: '{"city":"Bern","days":1}' }] },
      { content: 'One sunny day in Bern.' },
    );
    const chat = model({ useResponsesApi: true });
    const history: BaseMessage[] = [new HumanMessage('Forecast for Bern, one day')];
    const first = (await chat.invoke(history)) as AIMessage;
    expect(first.tool_calls?.[0]).toMatchObject({
      id: 'call_lc3',
      args: { city: 'Bern', days: 1 },
    });
    history.push(first, ...(await runTools(first)));
    const second = await chat.invoke(history);
    expect(JSON.stringify(second.content)).toContain('One sunny day in Bern.');
    for (const request of fake().requests) expect(request.problems).toEqual([]);
  });
});

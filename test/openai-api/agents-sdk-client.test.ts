/**
 * The OpenAI Agents SDK (`@openai/agents`) against a real Cairn server on
 * 127.0.0.1, with the fake OpenAI server behind Cairn. Its default model is
 * the Responses model: an SDK agent with a function tool must work plainly
 * and streamed, the SDK running its own tool between two Cairn responses.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read arbitrary JSON off the wire */
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool } from '@openai/agents';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const API_KEY = 'sk-cairn-test';
let harness: TestApp;
let runner: Runner;
/** What the SDK's tool was called with, in order. */
const toolCalls: string[] = [];

const weather = tool({
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    toolCalls.push(city);
    return `sunny in ${city}`;
  },
});

/** An SDK agent whose model is the Cairn agent `assistant`. */
const agent = new Agent({
  name: 'Weather helper',
  instructions: 'Answer weather questions with the tool.',
  model: 'assistant',
  tools: [weather],
});

beforeAll(async () => {
  // Traces would go to OpenAI's servers; this test talks to 127.0.0.1 only.
  setTracingDisabled(true);
  harness = await startTestApp({ server: { apiKey: API_KEY } });
  await harness.app.server.listen({ host: '127.0.0.1', port: 0 });
  const address = harness.app.server.server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  const openAIClient = new OpenAI({
    baseURL: `http://127.0.0.1:${address.port}/v1`,
    apiKey: API_KEY,
    maxRetries: 0,
  });
  // The provider's default model is the Responses model (useResponses is not set).
  runner = new Runner({
    modelProvider: new OpenAIProvider({ openAIClient }),
    tracingDisabled: true,
  });
});

afterAll(async () => {
  await harness.close();
});

beforeEach(() => {
  harness.fake!.reset();
  toolCalls.length = 0;
});

function fake() {
  return harness.fake!;
}

async function sessionCount(): Promise<number> {
  return (await harness.app.store.listSessions({ limit: 500 })).items.length;
}

function scriptWeatherTurn(city: string, answer: string): void {
  fake().script(
    { tool_calls: [{ name: 'get_weather', arguments: JSON.stringify({ city }) }] },
    { content: answer },
  );
}

describe('@openai/agents with its default Responses model', () => {
  it('runs an agent with a function tool: Cairn returns the call, the SDK runs it, Cairn answers', async () => {
    scriptWeatherTurn('Oslo', 'It is sunny in Oslo.');
    const before = await sessionCount();
    const result = await runner.run(agent, 'What is the weather in Oslo?');
    expect(result.finalOutput).toBe('It is sunny in Oslo.');
    expect(toolCalls).toEqual(['Oslo']);

    // Cairn offered the SDK's tool to the model beside the agent's, and sent back its result.
    expect(fake().requests[0]!.body.tools.map((t: any) => t.function.name)).toContain(
      'get_weather',
    );
    const second = fake().requests[1]!.body.messages;
    expect(second.find((m: any) => m.role === 'tool').content).toBe('sunny in Oslo');
    // The SDK's instructions come after the agent's own prompt.
    expect(second[0].content).toBe('You are a test assistant.');
    expect(second[1].content).toBe('Answer weather questions with the tool.');
    for (const request of fake().requests) expect(request.problems).toEqual([]);
    // The SDK resent the whole history with the tool output: Cairn found its session again.
    expect(await sessionCount()).toBe(before + 1);
  });

  it('runs the same agent streamed, with text deltas and the tool call events', async () => {
    scriptWeatherTurn('Rome', 'Rome is sunny today.');
    const result = await runner.run(agent, 'And in Rome?', { stream: true });
    const kinds: string[] = [];
    let text = '';
    for await (const event of result) {
      if (event.type === 'run_item_stream_event') kinds.push(event.name);
      if (event.type === 'raw_model_stream_event' && event.data.type === 'output_text_delta')
        text += event.data.delta;
    }
    await result.completed;
    expect(result.finalOutput).toBe('Rome is sunny today.');
    expect(text).toBe('Rome is sunny today.');
    expect(toolCalls).toEqual(['Rome']);
    expect(kinds).toEqual(
      expect.arrayContaining(['tool_called', 'tool_output', 'message_output_created']),
    );
    for (const request of fake().requests) expect(request.problems).toEqual([]);
  });

  it('continues a conversation by previous_response_id, as the SDK does when asked to', async () => {
    fake().script({ content: 'Noted: Ada.' }, { content: 'Your name is Ada.' });
    const first = await runner.run(agent, 'My name is Ada.');
    const second = await runner.run(agent, 'What is my name?', {
      previousResponseId: first.lastResponseId!,
    });
    expect(second.finalOutput).toBe('Your name is Ada.');
    const sent = fake().requests[1]!.body.messages.map((m: any) => m.content);
    expect(sent).toEqual(expect.arrayContaining(['My name is Ada.', 'Noted: Ada.']));
  });
});

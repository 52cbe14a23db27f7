/**
 * A `/v1` client's tool schemas are caller input, checked on a real app
 * (SQLite in a temp folder) through `inject`: a backtracking `pattern` is
 * never run against the model's arguments, so it cannot freeze the server;
 * each request's schemas are compiled for it alone, so one key's `$id` never
 * collides with, or is reachable from, another's, and nothing of them is
 * kept after the request; schemas over the depth or size cap are a clear 400.
 */
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CALLER_SCHEMA_MAX_CHARS,
  CALLER_SCHEMA_MAX_DEPTH,
} from '../../src/tools/schema-compiler.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

const API_KEY = 'admin-key-caller-schemas';
let harness: TestApp | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

function complete(body: Record<string, unknown>, key = API_KEY) {
  return harness!.app.server.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload: body,
    headers: { authorization: `Bearer ${key}` },
  });
}

function tool(name: string, parameters: Record<string, unknown>, description = '') {
  return { type: 'function', function: { name, description, parameters } };
}

async function clientKey(name: string): Promise<string> {
  const res = await harness!.app.server.inject({
    method: 'POST',
    url: '/keys',
    payload: { name, agents: '*' },
    headers: { authorization: `Bearer ${API_KEY}` },
  });
  expect(res.statusCode).toBe(201);
  return res.json().secret as string;
}

describe("a client's tool schemas are data", () => {
  it('a backtracking pattern is not run: the call reaches the client and /health answers', async () => {
    harness = await startTestApp({ server: { apiKey: API_KEY } });
    // 2^26 steps for a backtracking engine: seconds of a frozen event loop.
    const word = `${'a'.repeat(26)}!`;
    harness.fake!.script({
      tool_calls: [{ name: 'check', arguments: JSON.stringify({ word }) }],
    });
    const schema = {
      type: 'object',
      properties: { word: { type: 'string', pattern: '^(a+)+$' } },
      required: ['word'],
    };
    const [res, health] = await Promise.all([
      complete({
        model: 'assistant',
        messages: [{ role: 'user', content: 'check this word' }],
        tools: [tool('check', schema)],
      }),
      harness.app.server.inject({ url: '/health' }),
    ]);
    expect(health.statusCode).toBe(200);
    expect(res.statusCode).toBe(200);
    const choice = res.json().choices[0];
    // The arguments went to the client unjudged by the pattern (the client validates its own tool).
    expect(choice.finish_reason).toBe('tool_calls');
    expect(JSON.parse(choice.message.tool_calls[0].function.arguments)).toEqual({ word });
  });

  it('types and required fields are still checked', async () => {
    harness = await startTestApp({ server: { apiKey: API_KEY } });
    harness.fake!.script(
      { tool_calls: [{ name: 'check', arguments: JSON.stringify({ word: 7 }) }] },
      { content: 'I could not call it.' },
    );
    const res = await complete({
      model: 'assistant',
      messages: [{ role: 'user', content: 'check' }],
      tools: [
        tool('check', {
          type: 'object',
          properties: { word: { type: 'string', pattern: '^a$', format: 'email' } },
          required: ['word'],
        }),
      ],
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().choices[0].finish_reason).toBe('stop');
    // The model was told its arguments did not match (a number is not a string).
    const second = harness.fake!.requests[1]!.body;
    const result = second.messages.find((m: { role: string }) => m.role === 'tool');
    expect(result.content).toMatch(/\/word must be string/);
  });

  it('one key\'s "$id" never collides with, nor is reachable from, another key\'s request', async () => {
    harness = await startTestApp({ fake: null, server: { apiKey: API_KEY } });
    const [alice, bob] = [await clientKey('alice'), await clientKey('bob')];
    const weather = (extra: Record<string, unknown>) =>
      tool('get_weather', {
        $id: 'weather',
        type: 'object',
        properties: { city: { type: 'string' } },
        ...extra,
      });
    for (const [key, extra] of [
      [alice, {}],
      [alice, {}],
      [bob, { required: ['city'] }],
      [API_KEY, {}],
    ] as const) {
      const res = await complete(
        {
          model: 'assistant',
          messages: [{ role: 'user', content: 'hi' }],
          tools: [weather(extra)],
        },
        key,
      );
      expect(res.statusCode, res.body).toBe(200);
    }
    // A $ref to the schema another request declared resolves to nothing.
    const shared = await complete(
      {
        model: 'assistant',
        messages: [{ role: 'user', content: 'hi' }],
        tools: [tool('a', { $id: 'https://example.com/shared', type: 'object' })],
      },
      alice,
    );
    expect(shared.statusCode).toBe(200);
    const borrowed = await complete(
      {
        model: 'assistant',
        messages: [{ role: 'user', content: 'hi' }],
        tools: [tool('b', { $ref: 'https://example.com/shared' })],
      },
      bob,
    );
    expect(borrowed.statusCode).toBe(400);
    expect(borrowed.json().error.param).toBe('tools[0].function.parameters');
  });

  it('a schema deeper or longer than the caps is a 400 tool_schema_too_large', async () => {
    harness = await startTestApp({ fake: null, server: { apiKey: API_KEY } });
    let deep: Record<string, unknown> = { type: 'string' };
    // One level of JSON each: the schema passes its cap by one, the body stays under the body's.
    for (let i = 0; i < CALLER_SCHEMA_MAX_DEPTH; i++) deep = { not: deep };
    const long = {
      type: 'object',
      properties: { x: { type: 'string', description: 'y'.repeat(CALLER_SCHEMA_MAX_CHARS) } },
    };
    for (const schema of [deep, long]) {
      const res = await complete({
        model: 'assistant',
        messages: [{ role: 'user', content: 'hi' }],
        tools: [tool('big', schema)],
      });
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toMatchObject({
        code: 'tool_schema_too_large',
        param: 'tools[0].function.parameters',
      });
    }
    expect((await harness.app.store.listSessions({ limit: 10 })).items).toHaveLength(0);
  });

  it('keeps nothing of a request\'s schemas: many distinct "$id"s leave the heap where it was', async () => {
    harness = await startTestApp({ fake: null, server: { apiKey: API_KEY } });
    // Each request's schema carries 40 000 characters of its own: kept per
    // request, 150 of them would hold 6 MB. The requests are refused after
    // their schemas are compiled (the second tool takes the name of one of the
    // agent's), so no model call runs: its bounded caches (the token memo, the
    // call recorder's last request per session) would blur the figure.
    const send = (i: number) =>
      complete({
        model: 'assistant',
        messages: [{ role: 'user', content: `request ${i}` }],
        tools: [
          tool('lookup', {
            $id: `https://example.com/lookup-${i}`,
            type: 'object',
            properties: { q: { type: 'string', description: `${i}`.padEnd(40_000, '.') } },
          }),
          tool('current_time', { type: 'object' }),
        ],
      });
    const heapUsed = (): number => {
      collect();
      collect();
      return process.memoryUsage().heapUsed;
    };
    const refused = async (i: number) => {
      const res = await send(i);
      expect(res.statusCode).toBe(400);
      expect(res.json().error.message).toMatch(/current_time/);
    };
    for (let i = 0; i < 30; i++) await refused(i);
    const before = heapUsed();
    for (let i = 30; i < 180; i++) await refused(i);
    const growth = heapUsed() - before;
    expect(growth).toBeLessThan(2 * 1024 * 1024);
  }, 120_000);
});

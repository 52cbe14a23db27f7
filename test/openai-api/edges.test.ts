/**
 * /v1 edge cases through `inject` on a real app (SQLite in a temp folder, the
 * fake OpenAI server): rate limits and body limits in OpenAI's error shape,
 * closed sessions, ask_user, and a session whose client tool calls are
 * abandoned for a new user message.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { schemaProblems } from '../helpers/openai-schemas.js';

let harness: TestApp | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

function complete(app: TestApp, body: unknown, headers: Record<string, string> = {}) {
  return app.app.server.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload: body as Record<string, unknown>,
    headers,
  });
}

describe('/v1 limits and edge cases', () => {
  it('the rate limit answers 429 in OpenAI shape', async () => {
    harness = await startTestApp({ server: { rateLimit: { max: 1, windowMs: 60_000 } } });
    expect((await harness.app.server.inject({ url: '/v1/models' })).statusCode).toBe(200);
    const limited = await harness.app.server.inject({ url: '/v1/models' });
    expect(limited.statusCode).toBe(429);
    expect(schemaProblems('ErrorResponse', limited.json())).toEqual([]);
    expect(limited.json().error).toMatchObject({
      type: 'rate_limit_error',
      code: 'rate_limit_exceeded',
    });
  });

  it('a body over the limit is a 413 in OpenAI shape', async () => {
    harness = await startTestApp({ server: { bodyLimitBytes: 2048 } });
    const res = await complete(harness, {
      model: 'assistant',
      messages: [{ role: 'user', content: 'x'.repeat(5000) }],
    });
    expect(res.statusCode).toBe(413);
    expect(schemaProblems('ErrorResponse', res.json())).toEqual([]);
  });

  it('a closed session named by the header is a 400 in OpenAI shape', async () => {
    harness = await startTestApp();
    const first = await complete(harness, {
      model: 'assistant',
      messages: [{ role: 'user', content: 'hi' }],
    });
    const id = first.headers['x-cairn-session-id'] as string;
    await harness.app.server.inject({ method: 'POST', url: `/sessions/${id}/close` });
    const res = await complete(
      harness,
      { model: 'assistant', messages: [{ role: 'user', content: 'again' }] },
      { 'x-cairn-session-id': id },
    );
    expect(res.statusCode).toBe(400);
    expect(res.json().error.code).toBe('session_closed');
    // Without the header, the same history no longer continues the closed session.
    const resent = await complete(harness, {
      model: 'assistant',
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'echo: hi' },
        { role: 'user', content: 'again' },
      ],
    });
    expect(resent.statusCode).toBe(200);
    expect(resent.headers['x-cairn-session-id']).not.toBe(id);
  });

  it("an agent's ask_user question comes back as the reply", async () => {
    harness = await startTestApp({
      agents: { assistant: { ...TEST_AGENT, tools: ['ask_user'] } },
    });
    harness.fake!.script({
      tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which city?"}' }],
    });
    const res = await complete(harness, {
      model: 'assistant',
      messages: [{ role: 'user', content: 'weather' }],
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().choices[0].message.content).toBe('Which city?');
    expect(res.json().choices[0].finish_reason).toBe('stop');
    expect(schemaProblems('CreateChatCompletionResponse', res.json())).toEqual([]);
    // A UI resends the question as the assistant's reply: the same session goes on.
    const next = await complete(harness, {
      model: 'assistant',
      messages: [
        { role: 'user', content: 'weather' },
        { role: 'assistant', content: 'Which city?' },
        { role: 'user', content: 'Oslo' },
      ],
    });
    expect(next.headers['x-cairn-session-id']).toBe(res.headers['x-cairn-session-id']);
    expect(harness.fake!.requests[1]!.problems).toEqual([]);
  });

  it('a new user message instead of client tool results closes the open calls as interrupted', async () => {
    harness = await startTestApp();
    harness.fake!.script({ tool_calls: [{ id: 'call_lost', name: 'lookup', arguments: '{}' }] });
    const tools = [
      { type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } },
    ];
    const first = await complete(harness, {
      model: 'assistant',
      messages: [{ role: 'user', content: 'look it up' }],
      tools,
    });
    expect(first.json().choices[0].finish_reason).toBe('tool_calls');
    const id = first.headers['x-cairn-session-id'] as string;
    const second = await complete(harness, {
      model: 'assistant',
      messages: [
        { role: 'user', content: 'look it up' },
        first.json().choices[0].message,
        { role: 'user', content: 'never mind' },
      ],
      tools,
    });
    expect(second.statusCode).toBe(200);
    expect(second.headers['x-cairn-session-id']).toBe(id);
    const sent = harness.fake!.requests[1]!;
    expect(sent.problems).toEqual([]);
    const result = sent.body.messages.find(
      (m: { tool_call_id?: string }) => m.tool_call_id === 'call_lost',
    );
    expect(result.content).toContain('interrupted');
  });
});

/**
 * A model emits a tool call whose arguments are not a JSON
 * object. The call gets an error result the model can correct; what is
 * replayed is valid on the wire (the fake rejects, as OpenAI does, any
 * assistant tool call whose arguments are not a JSON object), so the session
 * stays usable for every later turn. The stored raw text stays for the record.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { normalizeOutgoing, wireArguments } from '../../src/llm/normalize-request.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const BAD_ARGUMENTS = ['{"key":', '', '   ', '[1, 2]', '"text"', '42', 'null'];

describe('wireArguments', () => {
  it('keeps a JSON object text byte for byte and replaces anything else by {}', () => {
    expect(wireArguments('{ "a": 1 }')).toBe('{ "a": 1 }');
    for (const bad of BAD_ARGUMENTS) expect(wireArguments(bad)).toBe('{}');
  });

  it('is applied to every replayed call, leaving the input untouched', () => {
    const history = [
      { role: 'user' as const, content: 'hi' },
      {
        role: 'assistant' as const,
        content: null,
        tool_calls: [
          { id: 'call_a', type: 'function' as const, function: { name: 'f', arguments: '{"k":' } },
        ],
      },
      { role: 'tool' as const, tool_call_id: 'call_a', content: 'Error: not JSON' },
    ];
    const out = normalizeOutgoing(history);
    expect(out[1]!.tool_calls![0]!.function.arguments).toBe('{}');
    expect(history[1]!.tool_calls![0]!.function.arguments).toBe('{"k":');
  });
});

describe('a session whose model emitted malformed tool arguments', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());
  beforeEach(() => t.fake!.reset());

  it.each(BAD_ARGUMENTS)('stays usable after arguments %j', async (bad) => {
    t.fake!.script(
      { tool_calls: [{ name: 'current_time', arguments: bad }] },
      { content: 'Sorry, I will send a JSON object next time.' },
    );
    const first = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'what time is it?' },
    });
    expect(first.statusCode).toBe(200);
    const { sessionId, reply } = first.json<{ sessionId: string; reply: string }>();
    expect(reply).toBe('Sorry, I will send a JSON object next time.');

    // The model saw an error result it can correct; blank arguments mean {}
    // (an empty argument string is the empty object), so that call ran.
    const correction = t.fake!.requests[1]!.body.messages as {
      role: string;
      content: string;
    }[];
    const toolResult = correction.find((m) => m.role === 'tool');
    if (bad.trim() === '') expect(toolResult?.content).toContain('"iso"');
    else expect(toolResult?.content).toMatch(/^Error: The arguments (are not valid JSON|must be)/);

    for (const message of ['later turn', 'and another']) {
      const next = await t.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: { message, sessionId },
      });
      expect(next.statusCode).toBe(200);
      expect(next.json().reply).toBe(`echo: ${message}`);
    }
    // Every request, the replays included, was valid on the wire.
    expect(t.fake!.requests.flatMap((r) => r.problems)).toEqual([]);
    expect(t.fake!.requests).toHaveLength(4);

    // The stored history keeps what the model actually sent.
    const history = await t.app.server.inject({
      method: 'GET',
      url: `/sessions/${sessionId}/messages`,
    });
    const stored = history
      .json<{ messages: { tool_calls?: { function: { arguments: string } }[] }[] }>()
      .messages.find((m) => m.tool_calls);
    expect(stored?.tool_calls?.[0]?.function.arguments).toBe(bad);
  });

  it('the fake rejects a replayed call whose arguments are not a JSON object, as OpenAI does', async () => {
    const res = await fetch(`${t.fake!.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        messages: [
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'call_x', type: 'function', function: { name: 'f', arguments: '{"key":' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_x', content: 'Error' },
        ],
      }),
    });
    expect(res.status).toBe(400);
    expect(t.fake!.requests[0]!.problems.join()).toContain('not a JSON object');
  });
});

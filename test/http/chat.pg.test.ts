/**
 * POST /agents/:name/chat as JSON and as server-sent events: the envelope,
 * event order, tool-call turns, upstream failures, and every bad input
 * answered before anything reaches the model.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DATABASES, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const HELPER_AGENT = {
  name: 'helper',
  description: 'Second test agent',
  system: 'You are the helper.',
  tools: [],
  maxIterations: 3,
};

/** An agent whose tools cannot load: every turn of it is refused before it begins. */
const BROKEN_AGENT = {
  name: 'broken',
  description: 'Lists a tool that does not exist',
  system: 'You are broken.',
  tools: ['no_such_tool'],
  maxIterations: 3,
};

const UNKNOWN_SESSION = 'sess_000000000000000000000000';

interface SseFrame {
  event: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary event fields
  data: any;
  id?: string;
}

/** Parses a complete text/event-stream body into frames (comments skipped). */
function parseSse(text: string): SseFrame[] {
  const frames: SseFrame[] = [];
  for (const block of text.split('\n\n')) {
    let event = 'message';
    let id: string | undefined;
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'event') event = value;
      else if (field === 'id') id = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) continue;
    frames.push({ event, data: JSON.parse(data.join('\n')), ...(id !== undefined ? { id } : {}) });
  }
  return frames;
}

/** Drops what differs between two equivalent turns on different sessions. */
function withoutIdentity(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value), (key, v: unknown) =>
    key === 'sessionId' || key === 'session_id' || key === 'created_at' ? undefined : v,
  );
}

const STACK_FRAME = /\bat .+:\d+:\d+/;

describe.each(DATABASES)('POST /agents/:name/chat (%s)', (database) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: { assistant: TEST_AGENT, helper: HELPER_AGENT, broken: BROKEN_AGENT },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  function chat(payload: unknown, headers: Record<string, string> = {}, agent = 'assistant') {
    return t.app.server.inject({
      method: 'POST',
      url: `/agents/${agent}/chat`,
      headers,
      payload: payload as Record<string, unknown>,
    });
  }

  async function newSession(agentName: string): Promise<string> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName },
    });
    return res.json().session.id as string;
  }

  describe('as JSON', () => {
    it('starts a session and answers with the documented envelope', async () => {
      t.fake!.script({ content: 'Hello there.' });
      const res = await chat({ message: 'hi' });
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      const body = res.json();
      expect(Object.keys(body).sort()).toEqual([
        'compaction',
        'messages',
        'recall',
        'reply',
        'sessionId',
        'usage',
      ]);
      expect(body).toMatchObject({
        sessionId: expect.stringMatching(/^sess_/),
        reply: 'Hello there.',
        usage: { input_tokens: expect.any(Number), output_tokens: expect.any(Number) },
        compaction: null,
        recall: null,
      });
      expect(body.usage.input_tokens).toBeGreaterThan(0);
      expect(
        body.messages.map((m: { role: string; content: string }) => [m.role, m.content]),
      ).toEqual([
        ['user', 'hi'],
        ['assistant', 'Hello there.'],
      ]);
      for (const m of body.messages) {
        expect(m).toMatchObject({ session_id: body.sessionId, seq: expect.any(Number) });
      }
      const session = (await t.app.server.inject({ url: `/sessions/${body.sessionId}` })).json()
        .session;
      expect(session).toMatchObject({ agent_name: 'assistant', mode: 'chat', message_count: 3 });
    });

    it('continues an existing session: the model sees the earlier turn', async () => {
      const sessionId = await newSession('assistant');
      t.fake!.script({ content: 'First.' }, { content: 'Second.' });
      expect((await chat({ message: 'one', sessionId })).json().reply).toBe('First.');
      const res = await chat({ message: 'two', sessionId });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ sessionId, reply: 'Second.' });
      const sent = t.fake!.requests.at(-1)!.body.messages;
      expect(sent.map((m: { role: string; content: string }) => [m.role, m.content])).toEqual([
        ['system', TEST_AGENT.system],
        ['user', 'one'],
        ['assistant', 'First.'],
        ['user', 'two'],
      ]);
      expect(t.fake!.requests.every((r) => r.problems.length === 0)).toBe(true);
    });

    it('runs a tool-call turn and returns every stored message', async () => {
      t.fake!.script(
        { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
        { content: 'It is late.' },
      );
      const res = await chat({ message: 'what time is it?' });
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(body.reply).toBe('It is late.');
      expect(body.messages.map((m: { role: string }) => m.role)).toEqual([
        'user',
        'assistant',
        'tool',
        'assistant',
      ]);
      expect(body.messages[1].tool_calls[0].function.name).toBe('current_time');
      expect(body.messages[2].tool_call_id).toBe(body.messages[1].tool_calls[0].id);
      expect(JSON.parse(body.messages[2].content)).toMatchObject({ iso: expect.any(String) });
    });

    it('maps an upstream 400 to 502 LLM_ERROR with no upstream text and no stack', async () => {
      t.fake!.script({ status: 400 });
      const res = await chat({ message: 'hi' });
      expect(res.statusCode).toBe(502);
      expect(res.json()).toEqual({ error: { code: 'LLM_ERROR', message: expect.any(String) } });
      expect(res.body).not.toContain('Fake error with status 400');
      expect(res.body).not.toMatch(STACK_FRAME);
    });
  });

  describe('as server-sent events', () => {
    it('streams session, deltas and done, and done carries the JSON envelope', async () => {
      const reply = 'The quick brown fox jumps over the lazy dog.';
      t.fake!.script({ content: reply }, { content: reply });
      const json = (await chat({ message: 'tell me' })).json();

      const res = await chat({ message: 'tell me', stream: true });
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
      const frames = parseSse(res.body);
      const names = frames.map((f) => f.event);
      expect(names[0]).toBe('session');
      expect(names.at(-1)).toBe('done');
      expect(names.slice(1, -1).every((n) => n === 'delta')).toBe(true);
      // The fake streams content in several pieces.
      expect(names.filter((n) => n === 'delta').length).toBeGreaterThan(1);

      const sessionId = frames[0]!.data.sessionId;
      expect(sessionId).toMatch(/^sess_/);
      expect(sessionId).not.toBe(json.sessionId);
      const deltas = frames.filter((f) => f.event === 'delta').map((f) => f.data.text as string);
      expect(deltas.join('')).toBe(reply);
      const done = frames.at(-1)!.data;
      expect(done.sessionId).toBe(sessionId);
      expect(done.reply).toBe(reply);
      expect(withoutIdentity(done)).toEqual(withoutIdentity(json));
      expect(t.fake!.requests.at(-1)!.body.stream).toBe(true);
    });

    it('streams when asked by the Accept header alone', async () => {
      t.fake!.script({ content: 'by header' });
      const res = await chat({ message: 'hi' }, { accept: 'text/event-stream' });
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
      const frames = parseSse(res.body);
      expect(frames.at(-1)).toMatchObject({ event: 'done', data: { reply: 'by header' } });
    });

    it('continues an existing session: the session event names it', async () => {
      const sessionId = await newSession('assistant');
      t.fake!.script({ content: 'ok' });
      const frames = parseSse((await chat({ message: 'hi', sessionId, stream: true })).body);
      expect(frames[0]).toEqual({ event: 'session', data: { sessionId } });
      expect(frames.at(-1)!.data.sessionId).toBe(sessionId);
    });

    it('shows a tool-call turn as tool_call then tool_result, then the answer', async () => {
      t.fake!.script(
        { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
        { content: 'It is now.' },
      );
      const res = await chat({ message: 'time?', stream: true });
      const frames = parseSse(res.body);
      const names = frames.map((f) => f.event);
      expect(names[0]).toBe('session');
      const callAt = names.indexOf('tool_call');
      const resultAt = names.indexOf('tool_result');
      const doneAt = names.indexOf('done');
      expect(callAt).toBeGreaterThan(0);
      expect(resultAt).toBeGreaterThan(callAt);
      expect(doneAt).toBe(names.length - 1);
      // The answer's deltas come after the tool result.
      expect(names.slice(resultAt + 1, doneAt).every((n) => n === 'delta')).toBe(true);
      expect(names.filter((n) => n === 'tool_call')).toHaveLength(1);

      const call = frames[callAt]!.data;
      expect(call).toEqual({ id: expect.any(String), name: 'current_time', arguments: '{}' });
      const result = frames[resultAt]!.data;
      expect(result).toMatchObject({ id: call.id, name: 'current_time', isError: false });
      expect(JSON.parse(result.content)).toMatchObject({ iso: expect.any(String) });
      const text = frames
        .filter((f) => f.event === 'delta')
        .map((f) => f.data.text)
        .join('');
      expect(text).toBe('It is now.');
      const done = frames[doneAt]!.data;
      expect(done.messages.map((m: { role: string }) => m.role)).toEqual([
        'user',
        'assistant',
        'tool',
        'assistant',
      ]);
      expect(done.messages[1].tool_calls[0].id).toBe(call.id);
    });

    it('reports an upstream failure as an error event with LLM_ERROR and no stack', async () => {
      t.fake!.script({
        status: 400,
        errorBody: {
          error: {
            message: 'Invalid value for messages: upstream detail 7f3a.',
            type: 'invalid_request_error',
            param: null,
            code: null,
          },
        },
      });
      const res = await chat({ message: 'hi', stream: true });
      expect(res.statusCode).toBe(200);
      const frames = parseSse(res.body);
      expect(frames.map((f) => f.event)).toEqual(['session', 'error']);
      expect(frames[1]!.data).toEqual({
        status: 502,
        error: { code: 'LLM_ERROR', message: expect.any(String) },
      });
      expect(res.body).not.toContain('upstream detail 7f3a');
      expect(res.body).not.toMatch(STACK_FRAME);

      // The session is not stuck: the next turn on it succeeds.
      const sessionId = frames[0]!.data.sessionId;
      t.fake!.script({ content: 'recovered' });
      const next = await chat({ message: 'again', sessionId });
      expect(next.statusCode).toBe(200);
      expect(next.json().reply).toBe('recovered');
    });

    it('answers bad sessions with a plain 4xx, not a 200 stream', async () => {
      const closed = await newSession('assistant');
      await t.app.server.inject({ method: 'POST', url: `/sessions/${closed}/close` });
      const helperSession = await newSession('helper');
      for (const [sessionId, status, code] of [
        [closed, 400, 'SESSION_CLOSED'],
        [helperSession, 400, 'SESSION_AGENT_MISMATCH'],
        [UNKNOWN_SESSION, 404, 'SESSION_NOT_FOUND'],
      ] as const) {
        const res = await chat({ message: 'hi', sessionId, stream: true });
        expect(res.statusCode, code).toBe(status);
        expect(res.headers['content-type']).toMatch(/^application\/json/);
        expect(res.json().error.code).toBe(code);
      }
      const ghost = await chat({ message: 'hi', stream: true }, {}, 'ghost');
      expect(ghost.statusCode).toBe(404);
      expect(ghost.json().error.code).toBe('AGENT_NOT_FOUND');
      expect(t.fake!.requests).toHaveLength(0);
    });
  });

  describe('bad input', () => {
    it.each([
      ['an unknown field', { message: 'hi', temperature: 2 }],
      ['no message', { sessionId: UNKNOWN_SESSION }],
      ['message as a number', { message: 123 }],
      ['message as an array', { message: ['hi'] }],
      ['message as an object', { message: { text: 'hi' } }],
      ['an empty message', { message: '' }],
      ['a whitespace-only message', { message: ' \n\t ' }],
      ['stream as a string', { message: 'hi', stream: 'true' }],
      ['stream as a number', { message: 'hi', stream: 1 }],
      ['sessionId as a number', { message: 'hi', sessionId: 5 }],
      ['a malformed sessionId', { message: 'hi', sessionId: 'session-1' }],
      ['sessionId null', { message: 'hi', sessionId: null }],
    ])('rejects %s with 400 VALIDATION_ERROR before calling the model', async (_label, payload) => {
      const res = await chat(payload);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual({
        error: { code: 'VALIDATION_ERROR', message: expect.any(String) },
      });
      expect(t.fake!.requests).toHaveLength(0);
    });

    it('rejects a body that is not a JSON object', async () => {
      for (const text of ['{"message":', '"hi"', '[]', 'null', '']) {
        const res = await t.app.server.inject({
          method: 'POST',
          url: '/agents/assistant/chat',
          headers: { 'content-type': 'application/json' },
          payload: text,
        });
        expect(res.statusCode, text).toBe(400);
        expect(res.json().error.code).toBe('VALIDATION_ERROR');
      }
      expect(t.fake!.requests).toHaveLength(0);
    });

    it('rejects a malformed agent name with 400 and an unknown one with 404 AGENT_NOT_FOUND', async () => {
      const bad = await chat({ message: 'hi' }, {}, 'Not%20Valid');
      expect(bad.statusCode).toBe(400);
      expect(bad.json().error.code).toBe('VALIDATION_ERROR');
      const unknown = await chat({ message: 'hi' }, {}, 'ghost');
      expect(unknown.statusCode).toBe(404);
      expect(unknown.json().error.code).toBe('AGENT_NOT_FOUND');
      expect(t.fake!.requests).toHaveLength(0);
    });

    it.each([
      ['as JSON', {}],
      ['as server-sent events', { accept: 'text/event-stream' }],
    ])(
      'leaves no session behind when a turn is refused before it begins (%s)',
      async (_label, headers) => {
        const count = async () =>
          (await t.app.store.listSessions({ agentName: 'broken', limit: 100 })).items.length;
        const before = await count();
        const res = await chat({ message: 'hi' }, headers, 'broken');
        const failure =
          res.statusCode === 200
            ? parseSse(res.body).find((f) => f.event === 'error')?.data
            : { status: res.statusCode, ...res.json() };
        expect(failure.status).toBe(400);
        expect(failure.error.code).toBe('VALIDATION_ERROR');
        expect(failure.error.message).toContain('no_such_tool');
        expect(await count()).toBe(before);
        expect(t.fake!.requests).toHaveLength(0);
      },
    );

    it('keeps a session that existed before a refused turn, with its history', async () => {
      const sessionId = await newSession('broken');
      const res = await chat({ message: 'hi', sessionId }, {}, 'broken');
      expect(res.statusCode).toBe(400);
      const after = await t.app.server.inject({ url: `/sessions/${sessionId}` });
      expect(after.statusCode).toBe(200);
    });

    it('answers an unknown session with 404 SESSION_NOT_FOUND', async () => {
      const res = await chat({ message: 'hi', sessionId: UNKNOWN_SESSION });
      expect(res.statusCode).toBe(404);
      expect(res.json().error.code).toBe('SESSION_NOT_FOUND');
      expect(t.fake!.requests).toHaveLength(0);
    });

    it('answers a closed session with 400 SESSION_CLOSED and stores nothing', async () => {
      const sessionId = await newSession('assistant');
      await t.app.server.inject({ method: 'POST', url: `/sessions/${sessionId}/close` });
      const res = await chat({ message: 'hi', sessionId });
      expect(res.statusCode).toBe(400);
      expect(res.json().error.code).toBe('SESSION_CLOSED');
      expect(t.fake!.requests).toHaveLength(0);
      const messages = (
        await t.app.server.inject({ url: `/sessions/${sessionId}/messages` })
      ).json().messages;
      expect(messages.map((m: { role: string }) => m.role)).toEqual(['system']);
    });

    it("answers another agent's session with 400 SESSION_AGENT_MISMATCH and stores nothing", async () => {
      const sessionId = await newSession('helper');
      const res = await chat({ message: 'hi', sessionId });
      expect(res.statusCode).toBe(400);
      expect(res.json().error.code).toBe('SESSION_AGENT_MISMATCH');
      expect(res.json().error.message).toContain('helper');
      expect(t.fake!.requests).toHaveLength(0);
      const messages = (
        await t.app.server.inject({ url: `/sessions/${sessionId}/messages` })
      ).json().messages;
      expect(messages.map((m: { role: string }) => m.role)).toEqual(['system']);
    });
  });
});

/**
 * The tool-calling loop through the real app, a real SQLite file and the fake
 * provider: what is persisted and in
 * which order, how tool mistakes are fed back, how a broken reply is handled,
 * how an interrupted or cancelled turn is repaired, and that turns on one
 * session queue instead of interleaving.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { StoredMessage } from '../../src/llm/messages.js';
import {
  CANCELLED_TOOL_RESULT,
  EMPTY_REPLY_NUDGE,
  TRUNCATED_TOOL_CALL_NOTE,
} from '../../src/runtime/loop.js';
import { EMPTY_TOOL_RESULT, INTERRUPTED_TOOL_RESULT } from '../../src/llm/normalize-request.js';
import type { FakeLlmServer, FakeReply, RecordedRequest } from '../fakes/llm-server.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ECHO_SCHEMA = {
  type: 'object',
  properties: { text: { type: 'string' } },
  required: ['text'],
  additionalProperties: false,
};

/** Tool modules written into the agent folder (ESM: the home gets a `"type": "module"` package.json). */
const TOOL_FILES: Record<string, string> = {
  'package.json': JSON.stringify({ type: 'module' }),
  'agents/assistant/tools/echo.js': `export default {
  name: 'echo',
  description: 'Returns its text argument',
  parameters: ${JSON.stringify(ECHO_SCHEMA)},
  async run(args) { return args.text; },
};`,
  'agents/assistant/tools/boom.js': `export default {
  name: 'boom',
  description: 'Always throws',
  parameters: { type: 'object', properties: {} },
  async run() { throw new Error('disk on fire'); },
};`,
  'agents/assistant/tools/slow.js': `export const name = 'slow';
export const description = 'Never finishes';
export const parameters = { type: 'object', properties: {} };
export const timeoutMs = 200;
export function run() { return new Promise(() => {}); }`,
  'agents/assistant/tools/hang.js': `export default {
  name: 'hang',
  description: 'Runs until cancelled',
  parameters: { type: 'object', properties: {} },
  timeoutMs: 60000,
  run() { return new Promise(() => {}); },
};`,
  'agents/assistant/tools/nothing.js': `export default {
  name: 'nothing',
  description: 'Returns nothing',
  parameters: { type: 'object', properties: {} },
  async run() { return undefined; },
};`,
};

const AGENTS = {
  assistant: {
    name: 'assistant',
    description: 'Loop test agent',
    system: 'You are a test assistant.',
    tools: [
      'current_time',
      './tools/echo.js',
      './tools/boom.js',
      './tools/slow.js',
      './tools/hang.js',
      './tools/nothing.js',
    ],
    maxIterations: 6,
  },
  looper: {
    name: 'looper',
    description: 'Gives up after three model calls',
    system: 'You loop.',
    tools: ['current_time'],
    maxIterations: 3,
  },
};

let t: TestApp;
let fake: FakeLlmServer;

beforeAll(async () => {
  t = await startTestApp({ agents: AGENTS, files: TOOL_FILES });
  fake = t.fake!;
});
afterEach(() => fake.reset());
afterAll(async () => t.close());

// ---- helpers ----------------------------------------------------------------------

interface ChatReply {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies
  body: any;
}

async function chat(message: string, sessionId?: string, agent = 'assistant'): Promise<ChatReply> {
  const res = await t.app.server.inject({
    method: 'POST',
    url: `/agents/${agent}/chat`,
    payload: { message, ...(sessionId ? { sessionId } : {}) },
  });
  return { status: res.statusCode, body: res.json() };
}

async function history(sessionId: string): Promise<StoredMessage[]> {
  return t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 1000 });
}

const roles = (messages: { role: string }[]): string[] => messages.map((m) => m.role);

/** Every request the fake received was one a provider accepts. */
function expectAllRequestsValid(): void {
  expect(fake.requests.length).toBeGreaterThan(0);
  for (const request of fake.requests) expect(request.problems).toEqual([]);
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- wire messages
const sentMessages = (request: RecordedRequest | undefined): any[] => request!.body.messages;

const toolCall = (name: string, args: string): FakeReply => ({
  tool_calls: [{ name, arguments: args }],
});

// ---- the loop -------------------------------------------------------------------------

describe('loop: tool call → result → answer', () => {
  it('runs the tool, feeds its result back and persists every message in order', async () => {
    fake.script(toolCall('echo', '{"text":"pong"}'), { content: 'The tool said pong.' });
    const { status, body } = await chat('ping it');
    expect(status).toBe(200);
    expect(body.reply).toBe('The tool said pong.');

    const stored = await history(body.sessionId);
    expect(roles(stored)).toEqual(['system', 'user', 'assistant', 'tool', 'assistant']);
    const [, user, calling, result, answer] = stored;
    expect(user!.content).toBe('ping it');
    expect(calling!.tool_calls).toEqual([
      {
        id: expect.any(String),
        type: 'function',
        function: { name: 'echo', arguments: '{"text":"pong"}' },
      },
    ]);
    expect(result).toMatchObject({
      tool_call_id: calling!.tool_calls![0]!.id,
      name: 'echo',
      content: 'pong',
    });
    expect(answer!.content).toBe('The tool said pong.');
    // The envelope lists what this turn stored, the user message first.
    expect(body.messages.map((m: StoredMessage) => m.seq)).toEqual(
      stored.slice(1).map((m) => m.seq),
    );

    expect(fake.requests).toHaveLength(2);
    expectAllRequestsValid();
    const offered = fake.requests[0]!.body.tools.map(
      (tool: { function: { name: string } }) => tool.function.name,
    );
    expect(offered).toEqual(['current_time', 'echo', 'boom', 'slow', 'hang', 'nothing']);
    expect(sentMessages(fake.requests[1]).map((m) => [m.role, m.content])).toEqual([
      ['system', 'You are a test assistant.'],
      ['user', 'ping it'],
      ['assistant', null],
      ['tool', 'pong'],
    ]);
  });

  it('answers parallel tool calls, each once, in the order they were made', async () => {
    fake.script(
      {
        tool_calls: [
          { name: 'echo', arguments: '{"text":"first"}' },
          { name: 'current_time', arguments: '' },
          { name: 'echo', arguments: '{"text":"third"}' },
        ],
      },
      { content: 'All three done.' },
    );
    const { status, body } = await chat('do three things');
    expect(status).toBe(200);
    expect(body.reply).toBe('All three done.');
    const stored = await history(body.sessionId);
    expect(roles(stored)).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'tool',
      'tool',
      'assistant',
    ]);
    const ids = stored[2]!.tool_calls!.map((c) => c.id);
    expect(new Set(ids).size).toBe(3);
    expect(stored.slice(3, 6).map((m) => m.tool_call_id)).toEqual(ids);
    expect(stored[3]!.content).toBe('first');
    expect(JSON.parse(stored[4]!.content!)).toHaveProperty('iso');
    expect(stored[5]!.content).toBe('third');
    expectAllRequestsValid();
    expect(
      sentMessages(fake.requests[1])
        .slice(3)
        .map((m) => m.tool_call_id),
    ).toEqual(ids);
  });
});

describe('loop: tool mistakes become tool results and the loop goes on', () => {
  const cases: [string, FakeReply, RegExp[]][] = [
    ['an unknown tool', toolCall('teleport', '{}'), [/no tool named "teleport"/, /echo/]],
    [
      'arguments that are not JSON',
      toolCall('echo', '{"text": "unterminated'),
      [/not valid JSON/, /"required":\["text"\]/],
    ],
    [
      'arguments that are not an object',
      toolCall('echo', '["pong"]'),
      [/must be a JSON object/, /"required":\["text"\]/],
    ],
    [
      'arguments that fail the schema',
      toolCall('echo', '{"txt":"pong"}'),
      [/do not match the tool's schema/, /text/, /"required":\["text"\]/],
    ],
    ['a tool that throws', toolCall('boom', '{}'), [/"boom" failed/, /disk on fire/]],
    [
      'a tool that hangs past its timeoutMs',
      toolCall('slow', '{}'),
      [/"slow"/, /did not finish within 200 ms/],
    ],
  ];

  it.each(cases)('%s', async (_, reply, patterns) => {
    fake.script(reply, { content: 'I will try something else.' });
    const { status, body } = await chat('go');
    expect(status).toBe(200);
    expect(body.reply).toBe('I will try something else.');

    const stored = await history(body.sessionId);
    expect(roles(stored)).toEqual(['system', 'user', 'assistant', 'tool', 'assistant']);
    const result = stored[3]!;
    expect(result.tool_call_id).toBe(stored[2]!.tool_calls![0]!.id);
    expect(result.content).toMatch(/^Error: /);
    for (const pattern of patterns) expect(result.content).toMatch(pattern);

    // The model was told, in the next request.
    expect(fake.requests).toHaveLength(2);
    expectAllRequestsValid();
    expect(sentMessages(fake.requests[1]).at(-1)).toMatchObject({
      role: 'tool',
      content: result.content,
    });
  });

  it('gives the model at most 2 correction rounds for malformed calls, then fails with LLM_ERROR', async () => {
    fake.setDefault(() => toolCall('echo', '{"txt":"still wrong"}'));
    const { status, body } = await chat('keep getting it wrong');
    expect(status).toBe(502);
    expect(body.error.code).toBe('LLM_ERROR');
    expect(body.error.message).toMatch(/correction rounds/);
    // The first call plus 2 corrections; no 4th request.
    expect(fake.requests).toHaveLength(3);
    expectAllRequestsValid();
  });

  it('resets the correction count after a valid call', async () => {
    fake.script(
      toolCall('echo', '{"txt":"wrong"}'),
      toolCall('echo', '{"txt":"wrong again"}'),
      toolCall('echo', '{"text":"right"}'),
      toolCall('echo', '{"txt":"wrong"}'),
      toolCall('echo', '{"txt":"wrong again"}'),
      { content: 'done' },
    );
    const { status, body } = await chat('mixed');
    expect(status).toBe(200);
    expect(body.reply).toBe('done');
  });

  it('sends a placeholder for a tool that returns nothing or blank text', async () => {
    fake.script(
      {
        tool_calls: [
          { name: 'nothing', arguments: '{}' },
          { name: 'echo', arguments: '{"text":""}' },
          { name: 'echo', arguments: '{"text":"  \\n "}' },
        ],
      },
      { content: 'Nothing came back.' },
    );
    const { status, body } = await chat('try the quiet tools');
    expect(status).toBe(200);
    const stored = await history(body.sessionId);
    expect(stored.slice(3, 6).map((m) => m.content)).toEqual([
      EMPTY_TOOL_RESULT,
      EMPTY_TOOL_RESULT,
      EMPTY_TOOL_RESULT,
    ]);
    expectAllRequestsValid();
    expect(
      sentMessages(fake.requests[1])
        .filter((m) => m.role === 'tool')
        .map((m) => m.content),
    ).toEqual([EMPTY_TOOL_RESULT, EMPTY_TOOL_RESULT, EMPTY_TOOL_RESULT]);
  });

  it('stops at maxIterations with MAX_ITERATIONS (422), keeping what it stored', async () => {
    const session = await t.app.sessions.create({ agentName: 'looper' });
    fake.setDefault(() => toolCall('current_time', '{}'));
    const { status, body } = await chat('never finish', session.id, 'looper');
    expect(status).toBe(422);
    expect(body.error.code).toBe('MAX_ITERATIONS');
    expect(body.error.message).toMatch(/maxIterations/);
    expect(fake.requests).toHaveLength(3);
    expectAllRequestsValid();

    const stored = await history(session.id);
    expect(roles(stored)).toEqual([
      'system',
      'user',
      ...['assistant', 'tool', 'assistant', 'tool', 'assistant', 'tool'],
    ]);
  });
});

describe('loop: broken replies (empty, or cut at the token limit)', () => {
  it('runs no tool and stores nothing for tool calls cut at the token limit, and says so next time', async () => {
    const cut = '{"text":"TRUNCATED-ARGUMENT-MARKER';
    fake.script(
      { tool_calls: [{ name: 'echo', arguments: cut }], finish_reason: 'length' },
      { content: 'Short answer instead.' },
    );
    const { status, body } = await chat('write a lot');
    expect(status).toBe(200);
    expect(body.reply).toBe('Short answer instead.');
    expect(roles(await history(body.sessionId))).toEqual(['system', 'user', 'assistant']);

    expect(fake.requests).toHaveLength(2);
    expectAllRequestsValid();
    const second = sentMessages(fake.requests[1]);
    expect(second.at(-1)).toEqual({ role: 'user', content: TRUNCATED_TOOL_CALL_NOTE });
    expect(second.some((m) => m.tool_calls)).toBe(false);
    for (const request of fake.requests)
      expect(JSON.stringify(request.body)).not.toContain('TRUNCATED-ARGUMENT-MARKER');

    // The note was for that call only: it is not stored and not sent again.
    fake.script({ content: 'Next.' });
    await chat('and now?', body.sessionId);
    const third = sentMessages(fake.requests[2]);
    expect(third.map((m) => m.content)).not.toContain(TRUNCATED_TOOL_CALL_NOTE);
    expect(roles(third)).toEqual(['system', 'user', 'assistant', 'user']);
  });

  it('nudges once after an empty reply, then fails with LLM_ERROR; nothing empty is stored', async () => {
    const session = await t.app.sessions.create({ agentName: 'assistant' });
    fake.script({ content: '' }, { content: '  \n ' }, { content: 'must not be reached' });
    const { status, body } = await chat('say something', session.id);
    expect(status).toBe(502);
    expect(body.error.code).toBe('LLM_ERROR');
    expect(fake.requests).toHaveLength(2);
    expectAllRequestsValid();
    expect(sentMessages(fake.requests[1]).at(-1)).toEqual({
      role: 'user',
      content: EMPTY_REPLY_NUDGE,
    });
    expect(roles(await history(session.id))).toEqual(['system', 'user']);
  });

  it('accepts the answer after the nudge, and later requests carry no empty text', async () => {
    fake.script({ content: '' }, { content: 'Here you go.' });
    const first = await chat('say something');
    expect(first.status).toBe(200);
    expect(first.body.reply).toBe('Here you go.');
    expect(roles(await history(first.body.sessionId))).toEqual(['system', 'user', 'assistant']);

    fake.script({ content: 'Still here.' });
    const second = await chat('again', first.body.sessionId);
    expect(second.status).toBe(200);
    expectAllRequestsValid();
    const sent = sentMessages(fake.requests.at(-1));
    expect(sent.map((m) => m.content)).toEqual([
      'You are a test assistant.',
      'say something',
      'Here you go.',
      'again',
    ]);
  });
});

// ---- repair of interrupted and cancelled turns ---------------------------------------------

describe('loop: interrupted and cancelled tool calls', () => {
  it('repairs a turn with 3 calls and 2 results before the next call, and persists the repair', async () => {
    const session = await t.app.sessions.create({ agentName: 'assistant' });
    const calls = ['call_crash_1', 'call_crash_2', 'call_crash_3'].map((id) => ({
      id,
      type: 'function' as const,
      function: { name: 'echo', arguments: `{"text":"${id}"}` },
    }));
    await t.app.store.appendMessages(session.id, [
      { role: 'user', content: 'do three things' },
      { role: 'assistant', content: null, tool_calls: calls },
      { role: 'tool', tool_call_id: 'call_crash_1', name: 'echo', content: 'one' },
      { role: 'tool', tool_call_id: 'call_crash_2', name: 'echo', content: 'two' },
    ]);

    fake.script({ content: 'The third one was interrupted.' });
    const { status, body } = await chat('what happened?', session.id);
    expect(status).toBe(200);
    expect(body.reply).toBe('The third one was interrupted.');

    expectAllRequestsValid();
    expect(
      sentMessages(fake.requests[0]).map((m) => [m.role, m.tool_call_id ?? null, m.content]),
    ).toEqual([
      ['system', null, 'You are a test assistant.'],
      ['user', null, 'do three things'],
      ['assistant', null, null],
      ['tool', 'call_crash_1', 'one'],
      ['tool', 'call_crash_2', 'two'],
      ['tool', 'call_crash_3', INTERRUPTED_TOOL_RESULT],
      ['user', null, 'what happened?'],
    ]);

    const stored = await history(session.id);
    expect(roles(stored)).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'tool',
      'tool',
      'user',
      'assistant',
    ]);
    expect(stored[5]).toMatchObject({
      role: 'tool',
      tool_call_id: 'call_crash_3',
      name: 'echo',
      content: INTERRUPTED_TOOL_RESULT,
    });
  });

  it('stores a "cancelled" result when an SSE client disconnects during a tool, and the next chat works', async () => {
    // A real port: only a real socket closes when the client walks away.
    const base = await t.app.server.listen({ port: 0, host: '127.0.0.1' });

    fake.script(toolCall('hang', '{}'), { content: 'must not be reached' });
    const controller = new AbortController();
    const res = await fetch(`${base}/agents/assistant/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ message: 'run the hanging tool', stream: true }),
      signal: controller.signal,
    });
    expect(res.status).toBe(200);

    // Read events until the tool is running, then walk away.
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    while (!text.includes('event: tool_call')) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`stream ended before the tool call:\n${text}`);
      text += decoder.decode(value, { stream: true });
    }
    const sessionId = /event: session\ndata: (\{.*\})/.exec(text)![1]!;
    const id = (JSON.parse(sessionId) as { sessionId: string }).sessionId;
    controller.abort();
    await reader.cancel().catch(() => undefined);

    // The cancelled turn ends on its own; wait for the session's queue slot.
    const deadline = Date.now() + 10_000;
    while (t.app.sessionLock.isBusy(id) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(t.app.sessionLock.isBusy(id)).toBe(false);

    const stored = await history(id);
    expect(roles(stored)).toEqual(['system', 'user', 'assistant', 'tool']);
    expect(stored[3]).toMatchObject({
      tool_call_id: stored[2]!.tool_calls![0]!.id,
      content: CANCELLED_TOOL_RESULT,
    });
    expect(fake.requests).toHaveLength(1);

    fake.reset();
    fake.script({ content: 'Back again.' });
    const next = await chat('are you there?', id);
    expect(next.status).toBe(200);
    expect(next.body.reply).toBe('Back again.');
    expectAllRequestsValid();
    expect(roles(sentMessages(fake.requests[0]))).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'user',
    ]);
    expect(sentMessages(fake.requests[0])[3].content).toBe(CANCELLED_TOOL_RESULT);
  });
});

// ---- one session, one turn at a time --------------------------------------------------------

describe('loop: concurrent chats on one session queue FIFO', () => {
  it('runs the second turn only after the first finished; the history never interleaves', async () => {
    const session = await t.app.sessions.create({ agentName: 'assistant' });
    fake.setDefault((body: { messages: { role: string; content: string }[] }) => ({
      content: `reply to ${body.messages.findLast((m) => m.role === 'user')!.content}`,
      delayMs: 150,
    }));

    const [a, b] = await Promise.all([
      chat('first message', session.id),
      chat('second message', session.id),
    ]);
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect([a.body.reply, b.body.reply].sort()).toEqual([
      'reply to first message',
      'reply to second message',
    ]);

    expect(fake.requests).toHaveLength(2);
    expectAllRequestsValid();
    const firstSent = sentMessages(fake.requests[0]);
    const secondSent = sentMessages(fake.requests[1]);
    const firstUser = firstSent.at(-1).content as string;
    const secondUser = secondSent.at(-1).content as string;
    expect([firstUser, secondUser].sort()).toEqual(['first message', 'second message']);
    // The second request carries the whole first turn, reply included.
    expect(secondSent.map((m) => [m.role, m.content])).toEqual([
      ['system', 'You are a test assistant.'],
      ['user', firstUser],
      ['assistant', `reply to ${firstUser}`],
      ['user', secondUser],
    ]);

    const stored = await history(session.id);
    expect(stored.map((m) => [m.role, m.content])).toEqual([
      ['system', 'You are a test assistant.'],
      ['user', firstUser],
      ['assistant', `reply to ${firstUser}`],
      ['user', secondUser],
      ['assistant', `reply to ${secondUser}`],
    ]);
  });
});

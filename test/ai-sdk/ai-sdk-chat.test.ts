/**
 * The AI SDK UI endpoint driven by the `ai` package's own client side:
 * `DefaultChatTransport` sends and reconnects, `readUIMessageStream` builds
 * the UI messages from the stream (no hand-written parser). A real Cairn app
 * on 127.0.0.1 (SQLite in a temp folder, an admin key and client keys)
 * talks to the scripted fake OpenAI server.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read UI message parts of any tool */
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { DefaultChatTransport, readUIMessageStream, type UIMessage } from 'ai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const API_KEY = 'sk-cairn-ai-sdk-test';
const PAGE_ORIGIN = 'http://localhost:5173';

const ASKER = {
  name: 'asker',
  description: 'Asks before it acts',
  system: 'You ask the user when you lack information.',
  tools: ['ask_user'],
  maxIterations: 6,
};

/** A side-effecting tool: appends one line per run to calls.log next to it. */
const DELETE_TOOL = `import { appendFileSync } from 'node:fs';
export default {
  name: 'delete_file',
  description: 'Deletes a file.',
  parameters: {
    type: 'object',
    properties: { path: { type: 'string' } },
    required: ['path'],
    additionalProperties: false,
  },
  async run(args) {
    appendFileSync(new URL('./calls.log', import.meta.url), args.path + '\\n');
    return 'deleted ' + args.path;
  },
};
`;

const GUARDED = {
  name: 'guarded',
  description: 'Deletes files, with approval',
  system: 'You delete files when asked.',
  tools: [{ tool: './tools/delete.js', approval: 'required' }],
  maxIterations: 6,
};

let harness: TestApp;
let base: string;

function fake() {
  return harness.fake!;
}

function transport(
  agent: string,
  headers: Record<string, string> = { authorization: `Bearer ${API_KEY}` },
) {
  return new DefaultChatTransport<UIMessage>({ api: `${base}/ai-sdk/${agent}`, headers });
}

type Transport = ReturnType<typeof transport>;

let ids = 0;
function user(text: string): UIMessage {
  return { id: `client-${++ids}`, role: 'user', parts: [{ type: 'text', text }] };
}

/** The assistant message a stream builds, read to its end; `from` is the message it continues. */
async function lastMessage(
  stream: ReadableStream<any>,
  from?: UIMessage,
): Promise<{ message: UIMessage | undefined; errors: unknown[] }> {
  const errors: unknown[] = [];
  let message: UIMessage | undefined;
  for await (const m of readUIMessageStream<UIMessage>({
    stream,
    ...(from ? { message: from } : {}),
    onError: (e) => errors.push(e),
  })) {
    message = m;
  }
  return { message, errors };
}

async function send(
  t: Transport,
  chatId: string,
  messages: UIMessage[],
  trigger: 'submit-message' | 'regenerate-message' = 'submit-message',
): Promise<UIMessage> {
  const stream = await t.sendMessages({
    chatId,
    messages,
    trigger,
    messageId: undefined,
    abortSignal: undefined,
  });
  const last = messages.at(-1);
  const { message, errors } = await lastMessage(
    stream,
    last?.role === 'assistant' ? structuredClone(last) : undefined,
  );
  expect(errors).toEqual([]);
  return message!;
}

function textOf(message: UIMessage): string {
  return message.parts
    .filter((p): p is { type: 'text'; text: string } => p.type === 'text')
    .map((p) => p.text)
    .join('');
}

function toolPart(message: UIMessage, tool: string): any {
  return message.parts.find((p) => p.type === `tool-${tool}`);
}

/** What the model was last sent: each message as role and content. */
function lastPrompt(): { role: string; content: string | null }[] {
  const body = fake().requests.at(-1)!.body;
  return body.messages.map((m: any) => ({ role: m.role, content: m.content }));
}

async function history(agent: string, chatId: string, headers?: Record<string, string>) {
  const res = await fetch(`${base}/ai-sdk/${agent}/${chatId}/messages`, {
    headers: headers ?? { authorization: `Bearer ${API_KEY}` },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as UIMessage[];
}

beforeAll(async () => {
  harness = await startTestApp({
    server: { apiKey: API_KEY, corsOrigins: [PAGE_ORIGIN] },
    agents: { assistant: TEST_AGENT, asker: ASKER, guarded: GUARDED },
    files: { 'agents/guarded/tools/delete.js': DELETE_TOOL },
  });
  await harness.app.server.listen({ host: '127.0.0.1', port: 0 });
  const address = harness.app.server.server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  base = `http://127.0.0.1:${address.port}`;
});

afterAll(async () => {
  await harness.close();
});

beforeEach(() => {
  fake().reset();
});

describe('POST /ai-sdk/:agent', () => {
  it('streams text in the UI message stream protocol and keeps one session per chat id', async () => {
    const raw = await fetch(`${base}/ai-sdk/assistant`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'chat-headers', messages: [user('Hi')] }),
    });
    fake().script({ content: 'unused' });
    expect(raw.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1');
    expect(raw.headers.get('content-type')).toMatch(/^text\/event-stream/);
    await raw.text();

    fake().reset();
    fake().script({ content: 'Hello there.' }, { content: 'Still here.' });
    const t = transport('assistant');
    const first = user('Hello');
    const reply = await send(t, 'chat-text', [first]);
    expect(reply.role).toBe('assistant');
    expect(textOf(reply)).toBe('Hello there.');
    // The client posts its whole history; only the new message is read.
    const second = user('Are you there?');
    const next = await send(t, 'chat-text', [first, reply, second]);
    expect(textOf(next)).toBe('Still here.');
    expect(lastPrompt().slice(1)).toEqual([
      { role: 'user', content: 'Hello' },
      { role: 'assistant', content: 'Hello there.' },
      { role: 'user', content: 'Are you there?' },
    ]);
    const stored = await history('assistant', 'chat-text');
    expect(stored.map((m) => [m.role, textOf(m)])).toEqual([
      ['user', 'Hello'],
      ['assistant', 'Hello there.'],
      ['user', 'Are you there?'],
      ['assistant', 'Still here.'],
    ]);
    expect(new Set(stored.map((m) => m.id)).size).toBe(4);
  });

  it("shows the agent's tool calls and results as tool parts", async () => {
    fake().script(
      { content: 'Let me look.', tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'It is late.' },
    );
    const reply = await send(transport('assistant'), 'chat-tools', [user('What time is it?')]);
    const part = toolPart(reply, 'current_time');
    expect(part).toMatchObject({ state: 'output-available', input: {} });
    expect(typeof part.output).toBe('string');
    expect(textOf(reply)).toBe('Let me look.It is late.');
    const [, assistant] = await history('assistant', 'chat-tools');
    expect(toolPart(assistant!, 'current_time')).toMatchObject({
      state: 'output-available',
      toolCallId: part.toolCallId,
      output: part.output,
    });
  });

  it('makes ask_user a client-side tool whose output is the answer', async () => {
    fake().script({
      tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which city?"}' }],
    });
    const t = transport('asker');
    const question = user('Book me a hotel');
    const asked = await send(t, 'chat-ask', [question]);
    const part = toolPart(asked, 'ask_user');
    expect(part).toMatchObject({ state: 'input-available', input: { question: 'Which city?' } });
    const reloaded = await history('asker', 'chat-ask');
    expect(toolPart(reloaded[1]!, 'ask_user')).toMatchObject({ state: 'input-available' });

    // What addToolOutput does to the message, then the automatic resend.
    const answered = structuredClone(asked);
    Object.assign(toolPart(answered, 'ask_user'), { state: 'output-available', output: 'Paris' });
    fake().script({ content: 'Booked in Paris.' });
    const done = await send(t, 'chat-ask', [question, answered]);
    expect(lastPrompt().at(-1)).toEqual({ role: 'tool', content: 'Paris' });
    expect(textOf(done)).toBe('Booked in Paris.');
    expect(done.id).toBe(asked.id);
  });

  it('asks for approval with tool-approval parts and runs the call once approved', async () => {
    const log = join(harness.home, 'agents/guarded/tools/calls.log');
    fake().script({ tool_calls: [{ name: 'delete_file', arguments: '{"path":"a.txt"}' }] });
    const t = transport('guarded');
    const ask = user('Delete a.txt');
    const pending = await send(t, 'chat-approve', [ask]);
    const part = toolPart(pending, 'delete_file');
    expect(part).toMatchObject({ state: 'approval-requested', input: { path: 'a.txt' } });
    expect(part.approval.id).toBe(part.toolCallId);
    expect(existsSync(log)).toBe(false);

    // An answer that approves nothing is refused.
    await expect(send(t, 'chat-approve', [ask, pending])).rejects.toThrow(/VALIDATION_ERROR/);

    const approved = structuredClone(pending);
    Object.assign(toolPart(approved, 'delete_file'), {
      state: 'approval-responded',
      approval: { id: part.approval.id, approved: true },
    });
    fake().script({ content: 'Deleted.' });
    const done = await send(t, 'chat-approve', [ask, approved]);
    expect(toolPart(done, 'delete_file')).toMatchObject({
      state: 'output-available',
      output: 'deleted a.txt',
    });
    expect(textOf(done)).toBe('Deleted.');
    expect(readFileSync(log, 'utf8')).toBe('a.txt\n');
  });

  it('answers a denied approval with the denial, and the call is not run', async () => {
    const log = join(harness.home, 'agents/guarded/tools/calls.log');
    const before = existsSync(log) ? readFileSync(log, 'utf8') : '';
    fake().script({ tool_calls: [{ name: 'delete_file', arguments: '{"path":"b.txt"}' }] });
    const t = transport('guarded');
    const ask = user('Delete b.txt');
    const pending = await send(t, 'chat-deny', [ask]);
    const denied = structuredClone(pending);
    const part = toolPart(denied, 'delete_file');
    Object.assign(part, {
      state: 'approval-responded',
      approval: { id: part.approval.id, approved: false, reason: 'keep it' },
    });
    fake().script({ content: 'Left it alone.' });
    const done = await send(t, 'chat-deny', [ask, denied]);
    expect(toolPart(done, 'delete_file')).toMatchObject({ state: 'output-denied' });
    expect(lastPrompt().at(-1)!.content).toMatch(/denied.*keep it/);
    expect(existsSync(log) ? readFileSync(log, 'utf8') : '').toBe(before);
  });

  it('forks the session for a regenerate and for an edited message', async () => {
    fake().script({ content: 'One.' }, { content: 'Two.' });
    const t = transport('assistant');
    const a = user('First');
    const ra = await send(t, 'chat-fork', [a]);
    const b = user('Second');
    await send(t, 'chat-fork', [a, ra, b]);

    // Regenerate the last answer: the model sees A, its answer and B, not the old answer.
    fake().script({ content: 'Two, again.' });
    const again = await send(t, 'chat-fork', [a, ra, b], 'regenerate-message');
    expect(textOf(again)).toBe('Two, again.');
    expect(lastPrompt().slice(1)).toEqual([
      { role: 'user', content: 'First' },
      { role: 'assistant', content: 'One.' },
      { role: 'user', content: 'Second' },
    ]);
    expect((await history('assistant', 'chat-fork')).map(textOf)).toEqual([
      'First',
      'One.',
      'Second',
      'Two, again.',
    ]);

    // Edit the first message: the chat starts over from it.
    fake().script({ content: 'Edited.' });
    await send(t, 'chat-fork', [user('First, edited')]);
    expect(lastPrompt().slice(1)).toEqual([{ role: 'user', content: 'First, edited' }]);
    expect((await history('assistant', 'chat-fork')).map(textOf)).toEqual([
      'First, edited',
      'Edited.',
    ]);
  });

  it('keeps running when the connection drops; the stream route resumes it, then answers 204', async () => {
    fake().script({ content: 'A slow answer.', delayMs: 1_500 });
    const t = transport('assistant');
    const dropped = new AbortController();
    const stream = await t.sendMessages({
      chatId: 'chat-resume',
      messages: [user('Take your time')],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: dropped.signal,
    });
    const reader = stream.getReader();
    expect((await reader.read()).value).toMatchObject({ type: 'start' });
    dropped.abort();
    await reader.cancel().catch(() => undefined);

    const resumed = await t.reconnectToStream({ chatId: 'chat-resume' });
    expect(resumed).not.toBeNull();
    const { message } = await lastMessage(resumed!);
    expect(textOf(message!)).toBe('A slow answer.');
    expect(await t.reconnectToStream({ chatId: 'chat-resume' })).toBeNull();
    expect((await history('assistant', 'chat-resume')).map(textOf)).toEqual([
      'Take your time',
      'A slow answer.',
    ]);
  });

  it('stops a running turn on POST …/stop', async () => {
    fake().script({ hang: true });
    const t = transport('assistant');
    const stream = await t.sendMessages({
      chatId: 'chat-stop',
      messages: [user('Never mind')],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: undefined,
    });
    const chunks: any[] = [];
    const reading = (async () => {
      const reader = stream.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        chunks.push(value);
      }
    })();
    const stop = async () =>
      (
        await fetch(`${base}/ai-sdk/assistant/chat-stop/stop`, {
          method: 'POST',
          headers: { authorization: `Bearer ${API_KEY}` },
        })
      ).json();
    expect(await stop()).toEqual({ stopped: true });
    await reading;
    expect(chunks.at(-1)).toMatchObject({ type: 'abort' });
    expect(await t.reconnectToStream({ chatId: 'chat-stop' })).toBeNull();
    expect(await stop()).toEqual({ stopped: false });
  });
});

describe('keys, end users and bad input', () => {
  async function clientKey(name: string): Promise<string> {
    const res = await fetch(`${base}/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name, agents: ['assistant'] }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as any).secret;
  }

  it('scopes a chat id to its key and end user: others see nothing and get a chat of their own', async () => {
    const keyA = await clientKey('front-end-a');
    const keyB = await clientKey('front-end-b');
    const alice = { authorization: `Bearer ${keyA}`, 'x-cairn-user': 'alice' };
    fake().script({ content: 'Secret plans.' });
    await send(transport('assistant', alice), 'shared-id', [user('My plans')]);

    const others: Record<string, string>[] = [
      { authorization: `Bearer ${keyA}`, 'x-cairn-user': 'bob' },
      { authorization: `Bearer ${keyB}`, 'x-cairn-user': 'alice' },
      { authorization: `Bearer ${API_KEY}` },
    ];
    for (const other of others) {
      expect(await history('assistant', 'shared-id', other)).toEqual([]);
      expect(await transport('assistant', other).reconnectToStream({ chatId: 'shared-id' })).toBe(
        null,
      );
      fake().script({ content: 'Fresh.' });
      await send(transport('assistant', other), 'shared-id', [user('Hello')]);
      expect(lastPrompt().slice(1)).toEqual([{ role: 'user', content: 'Hello' }]);
    }
    expect((await history('assistant', 'shared-id', alice)).map(textOf)).toEqual([
      'My plans',
      'Secret plans.',
    ]);
    // A key limited to other agents does not reach this one.
    const res = await fetch(`${base}/ai-sdk/asker/shared-id/messages`, { headers: alice });
    expect(res.status).toBe(404);
    expect(((await res.json()) as any).error.code).toBe('AGENT_NOT_FOUND');
  });

  it('answers bad input with a JSON error the transport reports, and a failed turn with an error part', async () => {
    const t = transport('assistant');
    const noText: UIMessage = { id: 'x', role: 'user', parts: [] };
    await expect(send(t, 'chat-bad', [noText])).rejects.toThrow(/VALIDATION_ERROR/);
    await expect(send(transport('nobody'), 'chat-bad', [user('Hi')])).rejects.toThrow(
      /AGENT_NOT_FOUND/,
    );
    const res = await fetch(`${base}/ai-sdk/assistant`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ messages: 'nope' }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.code).toBe('VALIDATION_ERROR');
    const noKey = await fetch(`${base}/ai-sdk/assistant/chat-bad/messages`);
    expect(noKey.status).toBe(401);
    expect(fake().requests).toHaveLength(0);

    fake().script({ status: 500 });
    const stream = await t.sendMessages({
      chatId: 'chat-fails',
      messages: [user('Hi')],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: undefined,
    });
    const { errors } = await lastMessage(stream);
    expect(String(errors[0])).toMatch(/LLM_ERROR/);
  });

  it("answers a listed page's origin with CORS and refuses any other", async () => {
    const preflight = await fetch(`${base}/ai-sdk/assistant`, {
      method: 'OPTIONS',
      headers: {
        origin: PAGE_ORIGIN,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, x-cairn-user',
      },
    });
    expect(preflight.status).toBeLessThan(300);
    expect(preflight.headers.get('access-control-allow-origin')).toBe(PAGE_ORIGIN);
    fake().script({ content: 'Hi, page.' });
    const reply = await send(
      transport('assistant', { authorization: `Bearer ${API_KEY}`, origin: PAGE_ORIGIN }),
      'chat-cors',
      [user('Hi')],
    );
    expect(textOf(reply)).toBe('Hi, page.');
    const foreign = await fetch(`${base}/ai-sdk/assistant/chat-cors/messages`, {
      headers: { authorization: `Bearer ${API_KEY}`, origin: 'http://evil.example' },
    });
    expect(foreign.status).toBe(403);
    expect(((await foreign.json()) as any).error.code).toBe('ORIGIN_NOT_ALLOWED');
  });
});

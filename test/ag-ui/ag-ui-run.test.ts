/**
 * The AG-UI endpoint driven by @ag-ui/client's own `HttpAgent`: its
 * `runAgent` parses the stream and passes every event through the client's
 * event verifier (order and pairing of starts and ends) before applying it,
 * so a malformed stream fails the run. A real Cairn app on 127.0.0.1 (SQLite
 * in a temp folder, an admin key and client keys) talks to the scripted fake
 * OpenAI server.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read events and messages of any shape */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { HttpAgent, type AgentSubscriber } from '@ag-ui/client';
import type { Interrupt, Message, ResumeEntry } from '@ag-ui/core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const API_KEY = 'sk-cairn-ag-ui-test';
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

const ADMIN = { authorization: `Bearer ${API_KEY}` };

function agentFor(name: string, threadId: string, headers: Record<string, string> = ADMIN) {
  return new HttpAgent({ url: `${base}/ag-ui/${name}`, headers, threadId });
}

interface RunSeen {
  events: string[];
  outcome?: string;
  interrupts: Interrupt[];
  error?: { message: string; code?: string };
}

let ids = 0;
function say(agent: HttpAgent, text: string): void {
  agent.addMessage({ id: `user-${++ids}`, role: 'user', content: text });
}

/** Runs `agent` (optionally resuming), recording the event types and how the run ended. */
async function run(agent: HttpAgent, resume?: ResumeEntry[]): Promise<RunSeen> {
  const seen: RunSeen = { events: [], interrupts: [] };
  const subscriber: AgentSubscriber = {
    onEvent: ({ event }) => {
      seen.events.push(event.type);
    },
    onRunFinishedEvent: (params) => {
      seen.outcome = params.outcome;
      if (params.outcome === 'interrupt') seen.interrupts = params.interrupts;
    },
    onRunErrorEvent: ({ event }) => {
      seen.error = { message: event.message, ...(event.code ? { code: event.code } : {}) };
    },
  };
  await agent.runAgent(resume ? { resume } : {}, subscriber);
  return seen;
}

/** The event types with each run of text deltas as one (the model streams text in pieces). */
function shape(events: readonly string[]): string[] {
  return events.filter(
    (type, i) => !(type === 'TEXT_MESSAGE_CONTENT' && events[i - 1] === 'TEXT_MESSAGE_CONTENT'),
  );
}

function texts(messages: readonly Message[]): [string, string][] {
  return messages
    .filter((m) => m.role === 'user' || (m.role === 'assistant' && m.content))
    .map((m) => [m.role, typeof m.content === 'string' ? m.content : JSON.stringify(m.content)]);
}

/** What the model was last sent: each message as role and content. */
function lastPrompt(): { role: string; content: string | null }[] {
  const body = fake().requests.at(-1)!.body;
  return body.messages.map((m: any) => ({ role: m.role, content: m.content }));
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

describe('POST /ag-ui/:agent', () => {
  it('runs a chat as AG-UI events and keeps one session per thread id', async () => {
    fake().script({ content: 'Hello there.' }, { content: 'Still here.' });
    const agent = agentFor('assistant', 'thread-chat');
    say(agent, 'Hello');
    const first = await run(agent);
    expect(shape(first.events)).toEqual([
      'RUN_STARTED',
      'TEXT_MESSAGE_START',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_END',
      'RUN_FINISHED',
    ]);
    expect(first.outcome).toBe('success');
    // The client posts its whole thread; only the new message is read.
    say(agent, 'Are you there?');
    await run(agent);
    expect(lastPrompt().slice(1)).toEqual([
      { role: 'user', content: 'Hello' },
      { role: 'assistant', content: 'Hello there.' },
      { role: 'user', content: 'Are you there?' },
    ]);
    expect(texts(agent.messages)).toEqual([
      ['user', 'Hello'],
      ['assistant', 'Hello there.'],
      ['user', 'Are you there?'],
      ['assistant', 'Still here.'],
    ]);
  });

  it("shows the agent's tool calls and results as TOOL_CALL events", async () => {
    fake().script(
      { content: 'Let me look.', tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'It is late.' },
    );
    const agent = agentFor('assistant', 'thread-tools');
    say(agent, 'What time is it?');
    const seen = await run(agent);
    expect(shape(seen.events)).toEqual([
      'RUN_STARTED',
      'TEXT_MESSAGE_START',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_END',
      'TOOL_CALL_START',
      'TOOL_CALL_ARGS',
      'TOOL_CALL_END',
      'TOOL_CALL_RESULT',
      'TEXT_MESSAGE_START',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_END',
      'RUN_FINISHED',
    ]);
    const call = agent.messages.find((m: any) => m.toolCalls?.length) as any;
    expect(call.toolCalls[0].function).toEqual({ name: 'current_time', arguments: '{}' });
    const result = agent.messages.find((m) => m.role === 'tool') as any;
    expect(result.toolCallId).toBe(call.toolCalls[0].id);
    expect(typeof result.content).toBe('string');
  });

  it('finishes with an approval interrupt; a resume that approves runs the call once', async () => {
    const log = join(harness.home, 'agents/guarded/tools/calls.log');
    fake().script({ tool_calls: [{ name: 'delete_file', arguments: '{"path":"a.txt"}' }] });
    const agent = agentFor('guarded', 'thread-approve');
    say(agent, 'Delete a.txt');
    const paused = await run(agent);
    expect(paused.outcome).toBe('interrupt');
    const [interrupt] = paused.interrupts;
    expect(interrupt).toMatchObject({
      reason: 'tool_approval',
      metadata: { tool: 'delete_file', arguments: { path: 'a.txt' } },
      responseSchema: { required: ['approved'] },
    });
    expect(interrupt!.toolCallId).toBe(interrupt!.id);
    expect(agent.pendingInterrupts.map((i) => i.id)).toEqual([interrupt!.id]);
    expect(existsSync(log)).toBe(false);

    // A resume whose payload decides nothing is refused before the stream starts.
    await expect(
      run(agent, [{ interruptId: interrupt!.id, status: 'resolved', payload: 'yes' }]),
    ).rejects.toThrow(/HTTP 400.*VALIDATION_ERROR/);

    fake().script({ content: 'Deleted.' });
    const done = await run(agent, [
      { interruptId: interrupt!.id, status: 'resolved', payload: { approved: true } },
    ]);
    expect(done.outcome).toBe('success');
    expect(done.events.slice(0, 2)).toEqual(['RUN_STARTED', 'TOOL_CALL_RESULT']);
    const result = agent.messages.find((m) => m.role === 'tool') as any;
    expect(result).toMatchObject({ toolCallId: interrupt!.id, content: 'deleted a.txt' });
    expect(texts(agent.messages).at(-1)).toEqual(['assistant', 'Deleted.']);
    expect(readFileSync(log, 'utf8')).toBe('a.txt\n');
    expect(agent.pendingInterrupts).toEqual([]);
  });

  it('answers a rejected approval with the denial; the call is not run', async () => {
    const log = join(harness.home, 'agents/guarded/tools/calls.log');
    const before = existsSync(log) ? readFileSync(log, 'utf8') : '';
    fake().script({ tool_calls: [{ name: 'delete_file', arguments: '{"path":"b.txt"}' }] });
    const agent = agentFor('guarded', 'thread-deny');
    say(agent, 'Delete b.txt');
    const [interrupt] = (await run(agent)).interrupts;
    fake().script({ content: 'Left it alone.' });
    const done = await run(agent, [
      {
        interruptId: interrupt!.id,
        status: 'resolved',
        payload: { approved: false, reason: 'keep it' },
      },
    ]);
    expect(done.outcome).toBe('success');
    expect(lastPrompt().at(-1)!.content).toMatch(/denied.*keep it/);
    expect(existsSync(log) ? readFileSync(log, 'utf8') : '').toBe(before);

    // A cancelled interrupt is a denial too.
    fake().script({ tool_calls: [{ name: 'delete_file', arguments: '{"path":"c.txt"}' }] });
    say(agent, 'Delete c.txt then');
    const [again] = (await run(agent)).interrupts;
    fake().script({ content: 'Fine.' });
    await run(agent, [{ interruptId: again!.id, status: 'cancelled' }]);
    expect(lastPrompt().at(-1)!.content).toMatch(/denied/);
    expect(existsSync(log) ? readFileSync(log, 'utf8') : '').toBe(before);
  });

  it('asks ask_user questions as an interrupt whose resume payload is the answer', async () => {
    fake().script({
      tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which city?"}' }],
    });
    const agent = agentFor('asker', 'thread-ask');
    say(agent, 'Book me a hotel');
    const paused = await run(agent);
    expect(paused.outcome).toBe('interrupt');
    const [interrupt] = paused.interrupts;
    expect(interrupt).toMatchObject({ reason: 'ask_user', message: 'Which city?' });

    // The client refuses to run on without answering it.
    say(agent, 'Paris');
    await expect(run(agent)).rejects.toThrow(/pending interrupt/);
    agent.messages.pop();

    fake().script({ content: 'Booked in Paris.' });
    const done = await run(agent, [
      { interruptId: interrupt!.id, status: 'resolved', payload: { answer: 'Paris' } },
    ]);
    expect(done.outcome).toBe('success');
    expect(lastPrompt().at(-1)).toEqual({ role: 'tool', content: 'Paris' });
    expect(texts(agent.messages).at(-1)).toEqual(['assistant', 'Booked in Paris.']);
  });
});

describe('keys, end users and bad input', () => {
  async function clientKey(name: string): Promise<string> {
    const res = await fetch(`${base}/keys`, {
      method: 'POST',
      headers: { ...ADMIN, 'content-type': 'application/json' },
      body: JSON.stringify({ name, agents: ['assistant'] }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as any).secret;
  }

  it('scopes a thread id to its key and end user: others get a thread of their own', async () => {
    const keyA = await clientKey('ag-ui-a');
    const keyB = await clientKey('ag-ui-b');
    const alice = { authorization: `Bearer ${keyA}`, 'x-cairn-user': 'alice' };
    fake().script({ content: 'Secret plans.' });
    const mine = agentFor('assistant', 'shared-thread', alice);
    say(mine, 'My plans');
    await run(mine);

    const others: Record<string, string>[] = [
      { authorization: `Bearer ${keyA}`, 'x-cairn-user': 'bob' },
      { authorization: `Bearer ${keyB}`, 'x-cairn-user': 'alice' },
      ADMIN,
    ];
    for (const other of others) {
      fake().script({ content: 'Fresh.' });
      const theirs = agentFor('assistant', 'shared-thread', other);
      say(theirs, 'Hello');
      await run(theirs);
      expect(lastPrompt().slice(1)).toEqual([{ role: 'user', content: 'Hello' }]);
    }
    fake().script({ content: 'Still secret.' });
    say(mine, 'And?');
    await run(mine);
    expect(
      lastPrompt()
        .slice(1)
        .map((m) => m.content),
    ).toEqual(['My plans', 'Secret plans.', 'And?']);
    // A key limited to other agents does not reach this one.
    const elsewhere = agentFor('asker', 'shared-thread', alice);
    say(elsewhere, 'Hi');
    await expect(run(elsewhere)).rejects.toThrow(/HTTP 404.*AGENT_NOT_FOUND/);
  });

  it('answers bad input with a JSON 4xx before the stream, and a failed turn with RUN_ERROR', async () => {
    const post = (body: unknown, headers: Record<string, string> = ADMIN) =>
      fetch(`${base}/ag-ui/assistant`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const noThread = await post({ runId: 'r', messages: [] });
    expect(noThread.status).toBe(400);
    expect(((await noThread.json()) as any).error).toMatchObject({
      code: 'VALIDATION_ERROR',
      message: expect.stringMatching(/body\.threadId/),
    });
    const assistantLast = await post({
      threadId: 't-bad',
      runId: 'r',
      messages: [{ id: 'a', role: 'assistant', content: 'hi' }],
    });
    expect(assistantLast.status).toBe(400);
    const stray = await post({
      threadId: 't-bad',
      runId: 'r',
      messages: [{ id: 'u', role: 'user', content: 'hi' }],
      resume: [{ interruptId: 'nothing', status: 'resolved' }],
    });
    expect(((await stray.json()) as any).error.code).toBe('VALIDATION_ERROR');
    const noKey = await post({ threadId: 't', runId: 'r', messages: [] }, {});
    expect(noKey.status).toBe(401);
    const empty = agentFor('assistant', 'thread-empty');
    await expect(run(empty)).rejects.toThrow(/HTTP 400.*VALIDATION_ERROR/);
    expect(fake().requests).toHaveLength(0);

    fake().script({ status: 500 });
    const failing = agentFor('assistant', 'thread-fails');
    say(failing, 'Hi');
    const seen: RunSeen = { events: [], interrupts: [] };
    await failing
      .runAgent(
        {},
        {
          onRunErrorEvent: ({ event }) => {
            seen.error = { message: event.message, ...(event.code ? { code: event.code } : {}) };
          },
        },
      )
      .catch(() => undefined);
    expect(seen.error?.code).toBe('LLM_ERROR');
  });

  it("answers a listed page's origin with CORS and refuses any other", async () => {
    const preflight = await fetch(`${base}/ag-ui/assistant`, {
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
    const page = agentFor('assistant', 'thread-cors', { ...ADMIN, origin: PAGE_ORIGIN });
    say(page, 'Hi');
    await run(page);
    expect(texts(page.messages).at(-1)).toEqual(['assistant', 'Hi, page.']);
    const foreign = agentFor('assistant', 'thread-cors', {
      ...ADMIN,
      origin: 'http://evil.example',
    });
    say(foreign, 'Hi');
    await expect(run(foreign)).rejects.toThrow(/HTTP 403.*ORIGIN_NOT_ALLOWED/);
  });
});

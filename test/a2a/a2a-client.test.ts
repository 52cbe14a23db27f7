/**
 * Cairn agents as A2A 1.0 agents, driven by the official `@a2a-js/sdk`
 * client over real HTTP: a real Cairn app on 127.0.0.1 (SQLite in a temp
 * folder, an API key configured) talking to the scripted fake OpenAI server.
 * A2A tasks are Cairn tasks: a reply completes them, `ask_user` and tool
 * approvals make them input-required until the next message on the task, and
 * the context is the session.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read arbitrary JSON off the wire */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  Role,
  TaskState,
  type Message,
  type Part,
  type StreamResponse,
  type Task,
} from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  type Client,
} from '@a2a-js/sdk/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { INTERRUPTED_ERROR } from '../../src/store/records.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const API_KEY = 'sk-cairn-a2a-test';

const ASKER = {
  name: 'asker',
  description: 'Asks before it acts',
  system: 'You ask the user when you lack information.',
  tools: ['ask_user', 'current_time'],
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
  tools: ['current_time', { tool: './tools/delete.js', approval: 'required' }],
  maxIterations: 6,
};

let harness: TestApp;
let base: string;

/** fetch with the API key, as a peer configured with the key sends it. */
const withKey: typeof fetch = (input, init) => {
  const headers = new Headers(init?.headers);
  headers.set('authorization', `Bearer ${API_KEY}`);
  return fetch(input, { ...init, headers });
};

function factory(fetchImpl: typeof fetch = withKey): ClientFactory {
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
    }),
  );
}

/** A client for `agent`, from its card (the trailing slash keeps the card path under the agent). */
function clientFor(agent: string): Promise<Client> {
  return factory().createFromUrl(`${base}/a2a/${agent}/`);
}

function fake() {
  return harness.fake!;
}

function userMessage(text: string, ids: { taskId?: string; contextId?: string } = {}): Message {
  return {
    messageId: `m-${Math.random().toString(36).slice(2)}`,
    contextId: ids.contextId ?? '',
    taskId: ids.taskId ?? '',
    role: Role.ROLE_USER,
    parts: [textPart(text)],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

function textPart(text: string): Part {
  return {
    content: { $case: 'text', value: text },
    metadata: undefined,
    filename: '',
    mediaType: '',
  };
}

function send(client: Client, message: Message) {
  return client.sendMessage({
    tenant: '',
    message,
    configuration: undefined,
    metadata: undefined,
  }) as Promise<Task>;
}

function texts(parts: Part[] | undefined): string[] {
  return (parts ?? []).flatMap((p) => (p.content?.$case === 'text' ? [p.content.value] : []));
}

async function collect(stream: AsyncGenerator<StreamResponse>): Promise<StreamResponse[]> {
  const events: StreamResponse[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

/** A JSON-RPC call by hand, for what the SDK client would never send. */
async function rpc(path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await withKey(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as any };
}

beforeAll(async () => {
  harness = await startTestApp({
    server: { apiKey: API_KEY },
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

describe('agent cards', () => {
  it("serve each agent's card, which the SDK client connects with", async () => {
    const res = await withKey(`${base}/a2a/assistant/.well-known/agent-card.json`);
    expect(res.status).toBe(200);
    const card = (await res.json()) as any;
    expect(card).toMatchObject({
      name: 'assistant',
      description: 'Test agent',
      supportedInterfaces: [
        { url: `${base}/a2a/assistant`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
      ],
      capabilities: { streaming: true },
      defaultInputModes: ['text/plain', 'application/json'],
      defaultOutputModes: ['text/plain'],
      securitySchemes: { bearer: { httpAuthSecurityScheme: { scheme: 'Bearer' } } },
      securityRequirements: [{ schemes: { bearer: {} } }],
    });
    expect(card.skills).toEqual([
      expect.objectContaining({
        id: 'assistant',
        description: 'Test agent',
        tags: ['cairn', 'current_time', 'history_search'],
      }),
    ]);
    const client = await clientFor('assistant');
    expect(client.protocolVersion).toBe('1.0');
  });

  it('list every agent in the index card at the server root', async () => {
    const res = await withKey(`${base}/.well-known/agent-card.json`);
    expect(res.status).toBe(200);
    const index = (await res.json()) as any;
    expect(index.skills.map((s: any) => s.id)).toEqual(['asker', 'assistant', 'guarded']);
    expect(index.agents).toContainEqual({
      name: 'asker',
      description: 'Asks before it acts',
      url: `${base}/a2a/asker`,
      agentCardUrl: `${base}/a2a/asker/.well-known/agent-card.json`,
    });
  });

  it('answer 404 AGENT_NOT_FOUND for an agent that does not exist', async () => {
    const card = await withKey(`${base}/a2a/nobody/.well-known/agent-card.json`);
    expect(card.status).toBe(404);
    expect(((await card.json()) as any).error.code).toBe('AGENT_NOT_FOUND');
    const call = await rpc('/a2a/nobody', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: {} });
    expect(call.status).toBe(404);
    expect(call.json.error.code).toBe('AGENT_NOT_FOUND');
    await expect(factory().createFromUrl(`${base}/a2a/nobody/`)).rejects.toThrow(/404/);
  });
});

describe('authentication', () => {
  it('refuses cards and calls without the key (401), and with a wrong one', async () => {
    for (const path of [
      '/.well-known/agent-card.json',
      '/a2a/assistant/.well-known/agent-card.json',
    ]) {
      const res = await fetch(`${base}${path}`);
      expect(res.status, path).toBe(401);
    }
    const noKey = await fetch(`${base}/a2a/assistant`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ListTasks', params: {} }),
    });
    expect(noKey.status).toBe(401);
    expect(((await noKey.json()) as any).error.code).toBe('UNAUTHORIZED');
    // A client built from the card with no key gets the 401 too.
    const card = await (await withKey(`${base}/a2a/assistant/.well-known/agent-card.json`)).json();
    const keyless = await factory(fetch).createFromAgentCard(card as any);
    await expect(send(keyless, userMessage('Hello'))).rejects.toThrow(/401/);
    const wrongKey: typeof fetch = (input, init) =>
      fetch(input, { ...init, headers: { ...init?.headers, authorization: 'Bearer nope' } });
    await expect(factory(wrongKey).createFromUrl(`${base}/a2a/assistant/`)).rejects.toThrow(/401/);
    expect(fake().requests).toHaveLength(0);
  });
});

describe('SendMessage', () => {
  it('runs a task to completed, with the reply as its artifact and status message', async () => {
    fake().script({ content: 'Hello from Cairn.' });
    const client = await clientFor('assistant');
    const task = await send(client, userMessage('Say hello'));
    expect(task.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(task.id).toMatch(/^task_/);
    expect(task.contextId).toMatch(/^sess_/);
    expect(task.artifacts).toHaveLength(1);
    expect(texts(task.artifacts[0]!.parts)).toEqual(['Hello from Cairn.']);
    expect(texts(task.status?.message?.parts)).toEqual(['Hello from Cairn.']);
    expect(task.history.map((m) => [m.role, texts(m.parts)])).toEqual([
      [Role.ROLE_USER, ['Say hello']],
      [Role.ROLE_AGENT, ['Hello from Cairn.']],
    ]);
    // It is a Cairn task like any other.
    const row = await harness.app.store.findTask(task.id);
    expect(row).toMatchObject({
      status: 'completed',
      session_id: task.contextId,
      agent_name: 'assistant',
      input: 'Say hello',
      result: 'Hello from Cairn.',
    });
    expect(fake().requests.at(-1)!.body.messages.at(-1)).toEqual({
      role: 'user',
      content: 'Say hello',
    });
  });

  it('continues the conversation in one contextId: the model sees the earlier turns', async () => {
    fake().script({ content: 'Noted: your name is Ada.' }, { content: 'Your name is Ada.' });
    const client = await clientFor('assistant');
    const first = await send(client, userMessage('My name is Ada.'));
    const second = await send(
      client,
      userMessage('What is my name?', { contextId: first.contextId }),
    );
    expect(second.contextId).toBe(first.contextId);
    expect(second.id).not.toBe(first.id);
    expect(texts(second.artifacts[0]!.parts)).toEqual(['Your name is Ada.']);
    const sent = fake()
      .requests.at(-1)!
      .body.messages.map((m: any) => [m.role, m.content]);
    expect(sent.slice(1)).toEqual([
      ['user', 'My name is Ada.'],
      ['assistant', 'Noted: your name is Ada.'],
      ['user', 'What is my name?'],
    ]);
  });

  it('ask_user makes the task input-required; the next message on the task answers it', async () => {
    fake().script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
    });
    const client = await clientFor('asker');
    const waiting = await send(client, userMessage('What is the weather?'));
    expect(waiting.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect(texts(waiting.status?.message?.parts)).toEqual(['Which city?']);
    expect(waiting.artifacts).toEqual([]);

    fake().script({ content: 'Sunny in Paris.' });
    const done = await send(
      client,
      userMessage('Paris', { taskId: waiting.id, contextId: waiting.contextId }),
    );
    expect(done.id).toBe(waiting.id);
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(texts(done.artifacts[0]!.parts)).toEqual(['Sunny in Paris.']);
    // The answer reached the model as the ask_user call's result.
    const last = fake().requests.at(-1)!.body.messages.at(-1);
    expect(last).toMatchObject({ role: 'tool', content: 'Paris' });
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  });

  it('a new message in the context of a waiting task (without its taskId) is refused with a pointer to it', async () => {
    fake().script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
    });
    const client = await clientFor('asker');
    const waiting = await send(client, userMessage('What is the weather?'));
    const refused = await rpc('/a2a/asker', {
      jsonrpc: '2.0',
      id: 7,
      method: 'SendMessage',
      params: {
        message: {
          messageId: 'm1',
          role: 'ROLE_USER',
          contextId: waiting.contextId,
          parts: [{ text: 'Something else' }],
        },
      },
    });
    expect(refused.status).toBe(200);
    expect(refused.json.id).toBe(7);
    expect(refused.json.error.code).toBe(-32004);
    expect(refused.json.error.message).toContain(waiting.id);
    expect(refused.json.error.message).toContain('taskId');
    const row = await harness.app.store.findTask(waiting.id);
    expect(row?.status).toBe('waiting');
  });

  describe('a tool that needs approval', () => {
    function runs(): string[] {
      try {
        return readFileSync(join(harness.home, 'agents/guarded/tools/calls.log'), 'utf8')
          .split('\n')
          .filter(Boolean);
      } catch {
        return [];
      }
    }

    async function waitingForApproval(client: Client, path: string): Promise<Task> {
      fake().script({ tool_calls: [{ name: 'delete_file', arguments: JSON.stringify({ path }) }] });
      const task = await send(client, userMessage(`Delete ${path}`));
      expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
      return task;
    }

    it('is input-required with the call shown, and runs once on "approve"', async () => {
      const client = await clientFor('guarded');
      const before = runs().length;
      const task = await waitingForApproval(client, '/tmp/a.txt');
      const parts = task.status!.message!.parts;
      expect(texts(parts)[0]).toContain('"delete_file"');
      expect(texts(parts)[0]).toContain('approve');
      expect(parts.find((p) => p.content?.$case === 'data')?.content?.value).toEqual({
        approval: { tool: 'delete_file', arguments: '{"path":"/tmp/a.txt"}' },
      });
      expect(runs()).toHaveLength(before);

      // Not a decision: refused, and nothing runs.
      await expect(send(client, userMessage('maybe later', { taskId: task.id }))).rejects.toThrow(
        /waits for a decision/,
      );
      expect(runs()).toHaveLength(before);

      fake().script({ content: 'Deleted /tmp/a.txt.' });
      const done = await send(client, userMessage('approve', { taskId: task.id }));
      expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(texts(done.artifacts[0]!.parts)).toEqual(['Deleted /tmp/a.txt.']);
      expect(runs().slice(before)).toEqual(['/tmp/a.txt']);
    });

    it('"approved? no!" approves nothing: the peer is asked again and the tool does not run', async () => {
      const client = await clientFor('guarded');
      const before = runs().length;
      const task = await waitingForApproval(client, '/tmp/hedged.txt');
      for (const said of ['approved? no!', 'ok, but not that file']) {
        await expect(send(client, userMessage(said, { taskId: task.id }))).rejects.toThrow(
          /waits for a decision/,
        );
      }
      expect(runs()).toHaveLength(before);
      expect((await harness.app.store.findTask(task.id))?.status).toBe('waiting');
    });

    it('two decisions at once: exactly one is taken, the other is refused, and the tool runs once', async () => {
      const client = await clientFor('guarded');
      const before = runs().length;
      const task = await waitingForApproval(client, '/tmp/race.txt');
      fake().setDefault(() => ({ content: 'Deleted once.' }));
      const outcomes = await Promise.allSettled([
        send(client, userMessage('approve', { taskId: task.id })),
        send(client, userMessage('approve', { taskId: task.id })),
      ]);
      const taken = outcomes.filter((o) => o.status === 'fulfilled');
      const refused = outcomes.filter((o) => o.status === 'rejected');
      expect(taken).toHaveLength(1);
      expect(refused).toHaveLength(1);
      expect(String((refused[0] as PromiseRejectedResult).reason)).toMatch(
        /still working|approved, denied or cancelled by another request|not waiting for approval/,
      );
      await harness.app.tasks.wait(task.id);
      expect(runs().slice(before)).toEqual(['/tmp/race.txt']);
    });

    it('"deny" with a reason: the tool is not run and the model hears why', async () => {
      const client = await clientFor('guarded');
      const before = runs().length;
      const task = await waitingForApproval(client, '/etc/passwd');
      fake().script({ content: 'Understood, I will not delete it.' });
      const done = await send(
        client,
        userMessage('deny: that file is needed', { taskId: task.id }),
      );
      expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(runs()).toHaveLength(before);
      const last = fake().requests.at(-1)!.body.messages.at(-1);
      expect(last.role).toBe('tool');
      expect(last.content).toContain('that file is needed');
    });

    it('a data part {"decision": "approve"} approves too', async () => {
      const client = await clientFor('guarded');
      const before = runs().length;
      const task = await waitingForApproval(client, '/tmp/b.txt');
      fake().script({ content: 'Deleted.' });
      const message = userMessage('', { taskId: task.id });
      message.parts = [
        {
          content: { $case: 'data', value: { decision: 'approve' } },
          metadata: undefined,
          filename: '',
          mediaType: '',
        },
      ];
      const done = await send(client, message);
      expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(runs().slice(before)).toEqual(['/tmp/b.txt']);
    });
  });

  it('a message to a finished task is refused; the context takes a new task', async () => {
    fake().script({ content: 'Done.' });
    const client = await clientFor('assistant');
    const task = await send(client, userMessage('Do it'));
    await expect(send(client, userMessage('Again', { taskId: task.id }))).rejects.toThrow(
      /finished task takes no more messages/,
    );
  });

  it('returnImmediately answers at once with the task working; GetTask then shows it done', async () => {
    fake().script({ content: 'Later reply.', delayMs: 200 });
    const client = await clientFor('assistant');
    const task = (await client.sendMessage({
      tenant: '',
      message: userMessage('Take your time'),
      configuration: {
        acceptedOutputModes: [],
        taskPushNotificationConfig: undefined,
        returnImmediately: true,
      },
      metadata: undefined,
    })) as Task;
    expect(task.status?.state).toBe(TaskState.TASK_STATE_WORKING);
    await harness.app.tasks.wait(task.id);
    const read = await client.getTask({ tenant: '', id: task.id });
    expect(read.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(texts(read.artifacts[0]!.parts)).toEqual(['Later reply.']);
  });
});

describe('streaming', () => {
  it('SendStreamingMessage: the task, then the reply as an artifact update, then completed', async () => {
    fake().script({ content: 'Streamed reply.' });
    const client = await clientFor('assistant');
    const events = await collect(
      client.sendMessageStream({
        tenant: '',
        message: userMessage('Stream it'),
        configuration: undefined,
        metadata: undefined,
      }),
    );
    const kinds = events.map((e) => e.payload?.$case);
    expect(kinds).toEqual(['task', 'artifactUpdate', 'statusUpdate']);
    const [first, artifact, status] = events.map((e) => e.payload!.value) as [any, any, any];
    expect(first.status.state).toBe(TaskState.TASK_STATE_WORKING);
    expect(artifact).toMatchObject({
      taskId: first.id,
      contextId: first.contextId,
      lastChunk: true,
    });
    expect(texts(artifact.artifact.parts)).toEqual(['Streamed reply.']);
    expect(status.taskId).toBe(first.id);
    expect(status.status.state).toBe(TaskState.TASK_STATE_COMPLETED);
  });

  it('reports each step in which the agent calls tools as a working update', async () => {
    fake().script(
      { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'It is noon.' },
    );
    const client = await clientFor('assistant');
    const events = await collect(
      client.sendMessageStream({
        tenant: '',
        message: userMessage('What time is it?'),
        configuration: undefined,
        metadata: undefined,
      }),
    );
    expect(events.map((e) => e.payload?.$case)).toEqual([
      'task',
      'statusUpdate',
      'artifactUpdate',
      'statusUpdate',
    ]);
    const progress = events[1]!.payload!.value as any;
    expect(progress.status.state).toBe(TaskState.TASK_STATE_WORKING);
    expect(texts(progress.status.message.parts)).toEqual(['Calling "current_time".']);
    expect((events[3]!.payload!.value as any).status.state).toBe(TaskState.TASK_STATE_COMPLETED);
  });

  it('stops at input-required, and a streamed answer carries the task to completed', async () => {
    fake().script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
    });
    const client = await clientFor('asker');
    const asked = await collect(
      client.sendMessageStream({
        tenant: '',
        message: userMessage('Weather?'),
        configuration: undefined,
        metadata: undefined,
      }),
    );
    // The question is the input-required status, not a progress update.
    expect(asked.map((e) => e.payload?.$case)).toEqual(['task', 'statusUpdate']);
    const last = asked.at(-1)!.payload!.value as any;
    expect(last.status.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect(texts(last.status.message.parts)).toEqual(['Which city?']);

    fake().script({ content: 'Rain in Oslo.' });
    const answered = await collect(
      client.sendMessageStream({
        tenant: '',
        message: userMessage('Oslo', { taskId: last.taskId }),
        configuration: undefined,
        metadata: undefined,
      }),
    );
    expect(answered.map((e) => e.payload?.$case)).toEqual([
      'task',
      'artifactUpdate',
      'statusUpdate',
    ]);
    expect((answered[0]!.payload!.value as Task).id).toBe(last.taskId);
    expect((answered.at(-1)!.payload!.value as any).status.state).toBe(
      TaskState.TASK_STATE_COMPLETED,
    );
  });

  it('SubscribeToTask follows a running task to its end', async () => {
    fake().script({ content: 'Slow reply.', delayMs: 300 });
    const client = await clientFor('assistant');
    const task = (await client.sendMessage({
      tenant: '',
      message: userMessage('Slowly'),
      configuration: {
        acceptedOutputModes: [],
        taskPushNotificationConfig: undefined,
        returnImmediately: true,
      },
      metadata: undefined,
    })) as Task;
    const events = await collect(client.resubscribeTask({ tenant: '', id: task.id }));
    expect(events[0]!.payload?.$case).toBe('task');
    expect((events.at(-1)!.payload!.value as any).status.state).toBe(
      TaskState.TASK_STATE_COMPLETED,
    );
    expect(events.some((e) => e.payload?.$case === 'artifactUpdate')).toBe(true);
  });

  it('SubscribeToTask on a finished task is refused (UnsupportedOperation), as is an unknown task', async () => {
    fake().script({ content: 'Done.' });
    const client = await clientFor('assistant');
    const task = await send(client, userMessage('Quick'));
    await expect(collect(client.resubscribeTask({ tenant: '', id: task.id }))).rejects.toThrow(
      /nothing more to follow/,
    );
    const unknown = await rpc(
      '/a2a/assistant',
      { jsonrpc: '2.0', id: 3, method: 'SubscribeToTask', params: { id: 'task_nope' } },
      { accept: 'text/event-stream' },
    );
    expect(unknown.status).toBe(200);
    expect(unknown.json.error.code).toBe(-32001);
  });
});

describe('a peer that goes away', () => {
  it('mid-stream: the stream stops following the task at once, and the task runs on', async () => {
    fake().script({ content: 'Finished without you.', delayMs: 3_000 });
    const listening = harness.app.events.subscriberCount;
    const controller = new AbortController();
    const res = await withKey(`${base}/a2a/assistant`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'SendStreamingMessage',
        params: { message: { messageId: 'm', role: 'ROLE_USER', parts: [{ text: 'Slow one' }] } },
      }),
      signal: controller.signal,
    });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    const taskId = /"id":"(task_[0-9a-f]+)"/.exec(first)![1]!;
    expect(harness.app.events.subscriberCount).toBe(listening + 1);
    controller.abort();
    // Well before the model answers, nothing listens for the task any more.
    await vi.waitFor(() => expect(harness.app.events.subscriberCount).toBe(listening), {
      timeout: 2_000,
    });
    expect((await harness.app.store.findTask(taskId))?.status).toBe('running');
    await harness.app.tasks.cancelTask(taskId);
  });
});

describe('an interrupted task', () => {
  it('is input-required, and a message on it continues it', async () => {
    const session = await harness.app.sessions.create({
      agentName: 'assistant',
      mode: 'task',
    });
    const row = await harness.app.store.createTask({
      sessionId: session.id,
      agentName: 'assistant',
      input: 'Count the files',
    });
    await harness.app.store.transitionTask(row.id, ['running'], {
      status: 'interrupted',
      error: INTERRUPTED_ERROR,
    });
    const client = await clientFor('assistant');
    const read = await client.getTask({ tenant: '', id: row.id });
    expect(read.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect(texts(read.status?.message?.parts)[0]).toContain(
      'The task was interrupted: the server running it stopped.',
    );

    fake().script({ content: 'There are 3 files.' });
    const done = await send(client, userMessage('Go on, please.', { taskId: row.id }));
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(texts(done.artifacts[0]!.parts)).toEqual(['There are 3 files.']);
    expect(fake().requests.at(-1)!.body.messages.at(-1)).toEqual({
      role: 'user',
      content: 'Go on, please.',
    });
  });
});

describe('GetTask, ListTasks, CancelTask', () => {
  it("GetTask reads a task, honouring historyLength; an unknown or other agent's task is TaskNotFound", async () => {
    fake().script({ content: 'Read me.' });
    const client = await clientFor('assistant');
    const task = await send(client, userMessage('Write something'));
    const read = await client.getTask({ tenant: '', id: task.id });
    expect(read).toMatchObject({ id: task.id, contextId: task.contextId });
    expect(read.history).toHaveLength(2);
    const short = await client.getTask({ tenant: '', id: task.id, historyLength: 1 });
    expect(short.history.map((m) => m.role)).toEqual([Role.ROLE_AGENT]);
    const none = await client.getTask({ tenant: '', id: task.id, historyLength: 0 });
    expect(none.history).toEqual([]);

    await expect(client.getTask({ tenant: '', id: 'task_doesnotexist' })).rejects.toThrow(
      /not found/,
    );
    const other = await clientFor('asker');
    await expect(other.getTask({ tenant: '', id: task.id })).rejects.toThrow(/not found/);
    const raw = await rpc('/a2a/asker', {
      jsonrpc: '2.0',
      id: 'x',
      method: 'GetTask',
      params: { id: task.id },
    });
    expect(raw.json).toMatchObject({ jsonrpc: '2.0', id: 'x', error: { code: -32001 } });
  });

  it("ListTasks lists the agent's tasks, newest first, by context and state, in pages", async () => {
    fake().setDefault(() => ({ content: 'ok' }));
    const client = await clientFor('assistant');
    const a = await send(client, userMessage('one'));
    const b = await send(client, userMessage('two', { contextId: a.contextId }));
    const c = await send(client, userMessage('three'));

    const inContext = await client.listTasks({
      tenant: '',
      contextId: a.contextId,
      status: TaskState.TASK_STATE_UNSPECIFIED,
      pageToken: '',
      statusTimestampAfter: undefined,
    });
    expect(inContext.tasks.map((t) => t.id)).toEqual([b.id, a.id]);
    expect(inContext.tasks[0]!.artifacts).toEqual([]);

    const withArtifacts = await client.listTasks({
      tenant: '',
      contextId: c.contextId,
      status: TaskState.TASK_STATE_COMPLETED,
      pageToken: '',
      statusTimestampAfter: undefined,
      includeArtifacts: true,
    });
    expect(withArtifacts.tasks.map((t) => t.id)).toEqual([c.id]);
    expect(texts(withArtifacts.tasks[0]!.artifacts[0]!.parts)).toEqual(['ok']);

    const seen: string[] = [];
    let pageToken = '';
    do {
      const page = await client.listTasks({
        tenant: '',
        contextId: '',
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 2,
        pageToken,
        statusTimestampAfter: undefined,
      });
      expect(page.tasks.length).toBeLessThanOrEqual(2);
      seen.push(...page.tasks.map((t) => t.id));
      pageToken = page.nextPageToken;
    } while (pageToken !== '');
    expect(seen.slice(0, 3)).toEqual([c.id, b.id, a.id]);
    const rows = await harness.app.store.listTasks({ agentName: 'assistant', limit: 500 });
    expect(seen).toEqual(rows.items.map((r) => r.id));

    const none = await client.listTasks({
      tenant: '',
      contextId: '',
      status: TaskState.TASK_STATE_REJECTED,
      pageToken: '',
      statusTimestampAfter: undefined,
    });
    expect(none.tasks).toEqual([]);

    const badToken = await rpc('/a2a/assistant', {
      jsonrpc: '2.0',
      id: 1,
      method: 'ListTasks',
      params: { pageToken: 'garbage' },
    });
    expect(badToken.json.error.code).toBe(-32602);
    const badSize = await rpc('/a2a/assistant', {
      jsonrpc: '2.0',
      id: 1,
      method: 'ListTasks',
      params: { pageSize: 1000 },
    });
    expect(badSize.json.error.code).toBe(-32602);
  });

  it('CancelTask cancels a waiting task; a finished one is TaskNotCancelable', async () => {
    fake().script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
    });
    const client = await clientFor('asker');
    const waiting = await send(client, userMessage('Weather?'));
    const cancelled = await client.cancelTask({ tenant: '', id: waiting.id, metadata: undefined });
    expect(cancelled.status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    expect((await harness.app.store.findTask(waiting.id))?.status).toBe('cancelled');

    const again = await rpc('/a2a/asker', {
      jsonrpc: '2.0',
      id: 2,
      method: 'CancelTask',
      params: { id: waiting.id },
    });
    expect(again.json.error.code).toBe(-32002);
    await expect(
      client.cancelTask({ tenant: '', id: 'task_unknown', metadata: undefined }),
    ).rejects.toThrow(/not found/);
  });

  it('CancelTask stops a running task', async () => {
    fake().script({ content: 'never seen', delayMs: 2_000 });
    const client = await clientFor('assistant');
    const task = (await client.sendMessage({
      tenant: '',
      message: userMessage('Long job'),
      configuration: {
        acceptedOutputModes: [],
        taskPushNotificationConfig: undefined,
        returnImmediately: true,
      },
      metadata: undefined,
    })) as Task;
    const cancelled = await client.cancelTask({ tenant: '', id: task.id, metadata: undefined });
    expect(cancelled.status?.state).toBe(TaskState.TASK_STATE_CANCELED);
  });
});

describe('bad requests get JSON-RPC errors, never a 500', () => {
  it('answers each malformed envelope with its code', async () => {
    const path = '/a2a/assistant';
    expect((await rpc(path, '{not json')).json).toMatchObject({
      id: null,
      error: { code: -32700 },
    });
    expect((await rpc(path, '')).json.error.code).toBe(-32700);
    expect((await rpc(path, [{ jsonrpc: '2.0', id: 1, method: 'GetTask' }])).json.error.code).toBe(
      -32600,
    );
    expect((await rpc(path, { jsonrpc: '1.0', id: 1, method: 'GetTask' })).json.error.code).toBe(
      -32600,
    );
    expect((await rpc(path, { jsonrpc: '2.0', id: 1.5, method: 'GetTask' })).json.error.code).toBe(
      -32600,
    );
    const unknown = await rpc(path, { jsonrpc: '2.0', id: 4, method: 'DoThings', params: {} });
    expect(unknown.json).toMatchObject({ id: 4, error: { code: -32601 } });
    const legacy = await rpc(path, { jsonrpc: '2.0', id: 5, method: 'message/send', params: {} });
    expect(legacy.json.error.code).toBe(-32601);
    expect(legacy.json.error.message).toContain('A2A 1.0');
    const noParams = await rpc(path, { jsonrpc: '2.0', id: 6, method: 'GetTask' });
    expect(noParams.json.error.code).toBe(-32602);
    const version = await rpc(
      path,
      { jsonrpc: '2.0', id: 8, method: 'GetTask', params: { id: 'task_x' } },
      { 'a2a-version': '0.3' },
    );
    expect(version.json.error.code).toBe(-32009);
    const patch = await rpc(
      path,
      { jsonrpc: '2.0', id: 8, method: 'GetTask', params: { id: 'task_x' } },
      { 'a2a-version': '1.0.1' },
    );
    expect(patch.json.error.code).toBe(-32001);
    const push = await rpc(path, {
      jsonrpc: '2.0',
      id: 9,
      method: 'CreateTaskPushNotificationConfig',
      params: { taskId: 'task_x', url: 'http://example.com' },
    });
    expect(push.json.error.code).toBe(-32003);
  });

  it('refuses messages without text, with files, or from the agent role, starting nothing', async () => {
    const path = '/a2a/assistant';
    const before = (await harness.app.store.listTasks({ limit: 500 })).items.length;
    const call = (message: unknown) =>
      rpc(path, { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message } });
    expect((await call(undefined)).json.error.code).toBe(-32602);
    expect((await call({ messageId: 'm', role: 'ROLE_USER', parts: [] })).json.error.code).toBe(
      -32602,
    );
    expect(
      (await call({ messageId: 'm', role: 'ROLE_USER', parts: [{ text: '   ' }] })).json.error.code,
    ).toBe(-32602);
    expect(
      (await call({ messageId: 'm', role: 'ROLE_AGENT', parts: [{ text: 'hi' }] })).json.error.code,
    ).toBe(-32602);
    expect(
      (
        await call({
          messageId: 'm',
          role: 'ROLE_USER',
          parts: [{ url: 'http://example.com/a.pdf', mediaType: 'application/pdf' }],
        })
      ).json.error.code,
    ).toBe(-32005);
    const foreign = await call({
      messageId: 'm',
      role: 'ROLE_USER',
      contextId: 'sess_doesnotexist',
      parts: [{ text: 'hi' }],
    });
    expect(foreign.json.error.code).toBe(-32602);
    expect(foreign.json.error.message).toContain('contextId');
    expect((await harness.app.store.listTasks({ limit: 500 })).items.length).toBe(before);
    expect(fake().requests).toHaveLength(0);
  });

  it('a message in a closed context is refused with the reason', async () => {
    fake().script({ content: 'First.' });
    const client = await clientFor('assistant');
    const task = await send(client, userMessage('Hi'));
    const closed = await harness.app.server.inject({
      method: 'POST',
      url: `/sessions/${task.contextId}/close`,
      headers: { authorization: `Bearer ${API_KEY}` },
    });
    expect(closed.statusCode).toBe(200);
    const refused = await rpc('/a2a/assistant', {
      jsonrpc: '2.0',
      id: 1,
      method: 'SendMessage',
      params: {
        message: {
          messageId: 'm',
          role: 'ROLE_USER',
          contextId: task.contextId,
          parts: [{ text: 'Again' }],
        },
      },
    });
    expect(refused.json.error.code).toBe(-32602);
    expect(refused.json.error.message).toContain('is closed');
    expect(refused.json.error.data[0].metadata).toEqual({ cairnCode: 'SESSION_CLOSED' });
  });

  it('a data part reaches the model as JSON text', async () => {
    fake().script({ content: 'Got it.' });
    const res = await rpc('/a2a/assistant', {
      jsonrpc: '2.0',
      id: 1,
      method: 'SendMessage',
      params: {
        message: {
          messageId: 'm',
          role: 'ROLE_USER',
          parts: [{ text: 'Order:' }, { data: { item: 'tea', qty: 2 } }],
        },
      },
    });
    expect(res.json.result.task.status.state).toBe('TASK_STATE_COMPLETED');
    expect(fake().requests.at(-1)!.body.messages.at(-1).content).toBe(
      'Order:\n{"item":"tea","qty":2}',
    );
  });
});

describe('the stream limit', () => {
  it('a stream over server.maxStreams is 503 before any work: no task, nothing followed', async () => {
    const t = await startTestApp({ server: { maxStreams: 1 } });
    try {
      await t.app.server.listen({ host: '127.0.0.1', port: 0 });
      const address = t.app.server.server.address();
      if (address === null || typeof address === 'string') throw new Error('no address');
      const url = `http://127.0.0.1:${address.port}/a2a/assistant`;
      const stream = (signal?: AbortSignal) =>
        fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'SendStreamingMessage',
            params: { message: { messageId: 'm', role: 'ROLE_USER', parts: [{ text: 'Hi' }] } },
          }),
          ...(signal ? { signal } : {}),
        });
      t.fake!.script({ content: 'slow', delayMs: 3_000 }, { content: 'second' });
      const controller = new AbortController();
      const first = await stream(controller.signal);
      expect(first.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const listening = t.app.events.subscriberCount;
      const second = await stream();
      expect(second.status).toBe(503);
      expect(((await second.json()) as any).error.code).toBe('SERVICE_UNAVAILABLE');
      // The refused stream started no task and follows nothing.
      expect((await t.app.store.listTasks({ limit: 10 })).items).toHaveLength(1);
      expect(t.app.events.subscriberCount).toBe(listening);
      controller.abort();
    } finally {
      await t.app.tasks.drain();
      await t.close();
    }
  });
});

describe('shutdown', () => {
  it('ends open streams (a peer re-attaches elsewhere with SubscribeToTask)', async () => {
    const t = await startTestApp({});
    await t.app.server.listen({ host: '127.0.0.1', port: 0 });
    const address = t.app.server.server.address();
    if (address === null || typeof address === 'string') throw new Error('no address');
    t.fake!.script({ content: 'After the stream.', delayMs: 1_500 });
    const res = await fetch(`http://127.0.0.1:${address.port}/a2a/assistant`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'SendStreamingMessage',
        params: { message: { messageId: 'm', role: 'ROLE_USER', parts: [{ text: 'Hi' }] } },
      }),
    });
    const reader = res.body!.getReader();
    let text = new TextDecoder().decode((await reader.read()).value);
    const closing = t.close();
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      text += new TextDecoder().decode(chunk.value);
    }
    // The stream ended with the server, before the task did.
    expect(text).toContain('TASK_STATE_WORKING');
    expect(text).not.toContain('TASK_STATE_COMPLETED');
    await closing;
  });
});

describe('an unexpected failure', () => {
  it('is a JSON-RPC internal error that says nothing of the internals (HTTP 200, never a 500)', async () => {
    const t = await startTestApp({ fake: null });
    try {
      await t.app.server.listen({ host: '127.0.0.1', port: 0 });
      const address = t.app.server.server.address();
      if (address === null || typeof address === 'string') throw new Error('no address');
      // The database goes away under the server: the store throws what its driver throws.
      await t.app.store.close();
      const res = await fetch(`http://127.0.0.1:${address.port}/a2a/assistant`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'GetTask',
          params: { id: 'task_1' },
        }),
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as any;
      expect(body).toMatchObject({ jsonrpc: '2.0', id: 1, error: { code: -32603 } });
      expect(body.error.message).toBe('Internal error. The server log has the details.');
    } finally {
      await t.close();
    }
  });
});

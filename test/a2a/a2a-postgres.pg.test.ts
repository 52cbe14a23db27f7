/**
 * The A2A paths that lean on the store and the event feed, on Postgres: there
 * a stream learns of its task's changes from the feed every instance shares,
 * not from in-process delivery. The full A2A suite runs on SQLite
 * (a2a-client.test.ts); this is the official `@a2a-js/sdk` client again.
 */
import { Role, TaskState, type Message, type StreamResponse, type Task } from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  type Client,
} from '@a2a-js/sdk/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ASKER = {
  name: 'asker',
  description: 'Asks before it acts',
  system: 'You ask the user when you lack information.',
  tools: ['ask_user'],
  maxIterations: 6,
};

function userMessage(text: string, ids: { taskId?: string; contextId?: string } = {}): Message {
  return {
    messageId: `m-${Math.random().toString(36).slice(2)}`,
    contextId: ids.contextId ?? '',
    taskId: ids.taskId ?? '',
    role: Role.ROLE_USER,
    parts: [
      { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' },
    ],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

async function collect(stream: AsyncGenerator<StreamResponse>): Promise<StreamResponse[]> {
  const events: StreamResponse[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

describe('A2A on Postgres', () => {
  let t: TestApp;
  let client: Client;

  beforeAll(async () => {
    t = await startTestApp({ database: 'postgres', agents: { asker: ASKER } });
    await t.app.server.listen({ host: '127.0.0.1', port: 0 });
    const address = t.app.server.server.address();
    if (address === null || typeof address === 'string') throw new Error('no address');
    const factory = new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
        transports: [new JsonRpcTransportFactory()],
        cardResolver: new DefaultAgentCardResolver(),
      }),
    );
    client = await factory.createFromUrl(`http://127.0.0.1:${address.port}/a2a/asker/`);
  });
  afterAll(async () => t.close());

  it('streams a question, takes the answer on the task, and lists the context', async () => {
    t.fake!.script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
    });
    const asked = await collect(
      client.sendMessageStream({
        tenant: '',
        message: userMessage('Weather?'),
        configuration: undefined,
        metadata: undefined,
      }),
    );
    const waiting = asked.at(-1)!.payload!.value as {
      taskId: string;
      contextId: string;
      status: { state: TaskState };
    };
    expect(waiting.status.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);

    t.fake!.script({ content: 'Sunny in Nice.' });
    const answered = await collect(
      client.sendMessageStream({
        tenant: '',
        message: userMessage('Nice', { taskId: waiting.taskId }),
        configuration: undefined,
        metadata: undefined,
      }),
    );
    expect(answered.map((e) => e.payload?.$case)).toEqual([
      'task',
      'artifactUpdate',
      'statusUpdate',
    ]);

    t.fake!.script({ content: 'You asked about Nice.' });
    const next = (await client.sendMessage({
      tenant: '',
      message: userMessage('What did I ask?', { contextId: waiting.contextId }),
      configuration: undefined,
      metadata: undefined,
    })) as Task;
    expect(next.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);

    const listed = await client.listTasks({
      tenant: '',
      contextId: waiting.contextId,
      status: TaskState.TASK_STATE_COMPLETED,
      pageToken: '',
      statusTimestampAfter: undefined,
    });
    expect(listed.tasks.map((task) => task.id)).toEqual([next.id, waiting.taskId]);
  });
});

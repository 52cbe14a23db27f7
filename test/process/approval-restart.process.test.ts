/**
 * Tool approval across a real restart: a task waiting for a
 * person's approval is killed with its server (SIGKILL), and the next process
 * still shows the pending call, approves it, runs the tool exactly once and
 * completes the task.
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskRow } from '../../src/store/store.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { spawnServer, type ServerProcess } from './spawn-server.js';

const SEND_TOOL = `import { appendFileSync } from 'node:fs';
export default {
  name: 'send_money',
  description: 'Sends money.',
  parameters: {
    type: 'object',
    properties: { amount: { type: 'integer' } },
    required: ['amount'],
    additionalProperties: false,
  },
  async run(args) {
    appendFileSync(new URL('./sent.log', import.meta.url), String(args.amount) + '\\n');
    return 'sent ' + args.amount;
  },
};
`;

const PAYER = {
  name: 'payer',
  description: 'Pays with approval',
  system: 'You pay bills.',
  tools: [{ tool: './tools/send.js', approval: 'required' }],
  maxIterations: 4,
};

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary response fields
async function post(url: string, body?: object): Promise<{ status: number; json: any }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: body ? { 'content-type': 'application/json' } : {},
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, json: await res.json() };
}

describe('approval across a restart', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess | undefined;

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome(
      { agents: { payer: PAYER }, files: { 'agents/payer/tools/send.js': SEND_TOOL } },
      fake.baseURL,
    );
  });
  afterAll(async () => {
    await server?.stop('SIGKILL');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  const sent = (): string[] => {
    try {
      return readFileSync(join(home, 'agents/payer/tools/sent.log'), 'utf8')
        .split('\n')
        .filter(Boolean);
    } catch {
      return [];
    }
  };

  it('waiting for approval → kill -9 → restart → approve → the tool runs once', async () => {
    server = await spawnServer({ home });
    fake.script({ tool_calls: [{ name: 'send_money', arguments: '{"amount":42}' }] });
    const started = await post(`${server.url}/agents/payer/tasks?wait=true`, {
      input: 'Pay the bill',
    });
    expect(started.status).toBe(201);
    const task = started.json.task as TaskRow;
    expect(task).toMatchObject({ status: 'waiting', pending_tool: 'send_money' });

    const killed = await server.stop('SIGKILL');
    expect(killed.signal).toBe('SIGKILL');
    server = await spawnServer({ home });

    const after = (
      (await (await fetch(`${server.url}/tasks/${task.id}`)).json()) as { task: TaskRow }
    ).task;
    expect(after).toMatchObject({
      status: 'waiting',
      pending_call_id: task.pending_call_id,
      pending_tool: 'send_money',
      pending_arguments: '{"amount":42}',
      question: task.question,
    });
    expect(sent()).toEqual([]);

    fake.script({ content: 'Paid 42.' });
    const approved = await post(`${server.url}/tasks/${task.id}/approve?wait=true`);
    expect(approved.status).toBe(200);
    expect(approved.json.task).toMatchObject({ status: 'completed', result: 'Paid 42.' });
    expect(sent()).toEqual(['42']);

    // Another restart: nothing runs again.
    await server.stop('SIGKILL');
    server = await spawnServer({ home });
    const again = await post(`${server.url}/tasks/${task.id}/approve`);
    expect(again.status).toBe(409);
    expect(again.json.error.code).toBe('TASK_NOT_WAITING');
    expect(sent()).toEqual(['42']);
    for (const r of fake.requests) expect(r.problems).toEqual([]);
  });
});

/**
 * An instance paused past the stale limit, with real processes: two
 * `cairn serve` on one Postgres database, and `kill -STOP` of the one running
 * a task while its model call is out. The peer declares it dead and marks the
 * task `interrupted`. The model answers while the process is stopped; on
 * `kill -CONT` the woken run must not store that answer nor settle the task:
 * its writes are refused by owner. The task then resumes on the peer and
 * completes once, with one final answer in its session.
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { spawnServer, type ServerProcess } from './spawn-server.js';

const AFTER_WAKING = 'written by the paused instance after waking';
const ON_PEER = 'finished on the peer';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary response fields
async function call(url: string, body?: object): Promise<{ status: number; json: any }> {
  const res = await fetch(url, {
    method: body ? 'POST' : 'GET',
    ...(body
      ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }
      : {}),
  });
  return { status: res.status, json: await res.json() };
}

describe('an instance paused longer than the stale limit', () => {
  let fake: FakeLlmServer;
  let db: TestDatabase;
  let home: string;
  let servers: ServerProcess[] = [];

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    fake.setDefault((body: { messages: { role: string; content: string | null }[] }) => {
      const last = body.messages.at(-1)!;
      if (last.role === 'tool') return { content: AFTER_WAKING, delayMs: 1_500 };
      if (last.role === 'user' && String(last.content).startsWith('Continue the task'))
        return { content: ON_PEER };
      return { tool_calls: [{ name: 'current_time', arguments: '{}' }] };
    });
    db = await createTestDatabase('cairn_paused_instance');
    home = makeHome(
      { agents: { assistant: TEST_AGENT }, mainModel: { timeoutMs: 60_000 } },
      fake.baseURL,
      db.url,
    );
    servers = [await spawnServer({ home })];
    servers.push(await spawnServer({ home }));
  }, 60_000);

  afterAll(async () => {
    for (const server of servers) {
      server.child.kill('SIGCONT');
      await server.stop('SIGKILL');
    }
    await fake?.close();
    await db?.drop();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('cannot write into the task its peer interrupted; the task resumes on the peer and completes once', async () => {
    const [a, b] = servers as [ServerProcess, ServerProcess];
    const started = await call(`${a.url}/agents/assistant/tasks`, { input: 'What time is it?' });
    expect(started.status).toBe(201);
    const { id, session_id: sessionId } = started.json.task as { id: string; session_id: string };
    const messages = async (): Promise<{ role: string; content: string | null }[]> =>
      (await call(`${b.url}/sessions/${sessionId}/messages?limit=100`)).json.messages;
    // The tool ran and its result is stored: A's second model call is out.
    await expect
      .poll(async () => (await messages()).some((m) => m.role === 'tool'), { timeout: 10_000 })
      .toBe(true);

    process.kill(a.child.pid!, 'SIGSTOP');
    try {
      // B's heartbeat sweep finds A stale and interrupts its task.
      await expect
        .poll(async () => (await call(`${b.url}/tasks/${id}`)).json.task.status, {
          timeout: 25_000,
          interval: 250,
        })
        .toBe('interrupted');
    } finally {
      process.kill(a.child.pid!, 'SIGCONT');
    }
    // A wakes with the model's answer waiting for it, and is alive again.
    await expect
      .poll(async () => (await call(`${a.url}/health`)).status, { timeout: 10_000 })
      .toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const afterWaking = await call(`${b.url}/tasks/${id}`);
    expect(afterWaking.json.task).toMatchObject({ status: 'interrupted', result: null });
    expect((await messages()).map((m) => m.content)).not.toContain(AFTER_WAKING);

    // Resumed on the peer: it completes, with exactly one final answer stored.
    const resumed = await call(`${b.url}/tasks/${id}/resume?wait=true`, {});
    expect(resumed.status).toBe(200);
    expect(resumed.json.task).toMatchObject({ status: 'completed', result: ON_PEER });
    const contents = (await messages()).map((m) => m.content);
    expect(contents.filter((c) => c === ON_PEER)).toHaveLength(1);
    expect(contents).not.toContain(AFTER_WAKING);
    expect(a.output()).not.toMatch(/\bat .+:\d+:\d+/);
  }, 90_000);
});

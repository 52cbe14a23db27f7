/**
 * `cairn serve` on Postgres, as users run it: the compiled bin with
 * DATABASE_URL, a fresh database. It migrates at start, reports the store and
 * its instance id, answers chats, and after `kill -9` a new process on the same
 * database finds every acknowledged turn, as a new instance.
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { makeHome } from '../helpers/test-app.js';
import { spawnServer, type ServerProcess } from './spawn-server.js';

describe('cairn serve with DATABASE_URL', () => {
  let fake: FakeLlmServer;
  let database: TestDatabase;
  let home: string;
  const servers: ServerProcess[] = [];
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    database = await createTestDatabase();
    home = makeHome({}, fake.baseURL);
  });
  afterAll(async () => {
    for (const server of servers) await server.stop('SIGKILL').catch(() => undefined);
    await fake.close();
    await database.drop();
    rmSync(home, { recursive: true, force: true });
  });

  async function start(): Promise<ServerProcess> {
    const server = await spawnServer({
      home,
      env: { DATABASE_URL: database.url, CAIRN_LOG_LEVEL: 'info' },
    });
    servers.push(server);
    return server;
  }

  async function health(server: ServerProcess): Promise<{ database: string; instance: string }> {
    return (await fetch(`${server.url}/health`)).json() as Promise<{
      database: string;
      instance: string;
    }>;
  }

  it('serves chats from Postgres and keeps them across a kill -9', async () => {
    const first = await start();
    const before = await health(first);
    expect(before.database).toBe('postgres');
    expect(before.instance).toMatch(/^inst_/);
    // The ready line names the instance.
    expect(first.output()).toContain(before.instance);

    let sessionId: string | undefined;
    const replies: string[] = [];
    for (const message of ['one', 'two', 'three']) {
      const res = await fetch(`${first.url}/agents/assistant/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message, ...(sessionId ? { sessionId } : {}) }),
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { sessionId: string; reply: string };
      sessionId = body.sessionId;
      replies.push(body.reply);
    }
    await first.stop('SIGKILL');

    const second = await start();
    const after = await health(second);
    expect(after.database).toBe('postgres');
    expect(after.instance).not.toBe(before.instance);
    const { messages } = (await (
      await fetch(`${second.url}/sessions/${sessionId}/messages`)
    ).json()) as { messages: { role: string; content: string }[] };
    expect(messages.filter((m) => m.role !== 'system').map((m) => m.content)).toEqual([
      'one',
      replies[0],
      'two',
      replies[1],
      'three',
      replies[2],
    ]);
    await second.stop('SIGTERM');
  });
});

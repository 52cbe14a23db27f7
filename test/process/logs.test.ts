/**
 * `cairn serve` logs (DESIGN §14): JSON lines when stdout is not a terminal,
 * human-readable lines with CAIRN_LOG_FORMAT=pretty, and each task
 * transition and chat turn logged once at info with its ids (never the user's text).
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { spawnServer } from './spawn-server.js';

describe('server logs', () => {
  let fake: FakeLlmServer;
  let home: string;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    fake.setDefault(() => ({ content: 'done' }));
    home = makeHome({}, fake.baseURL);
  });
  afterAll(async () => {
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  async function runTask(url: string): Promise<string> {
    const res = await fetch(`${url}/agents/assistant/tasks?wait=true`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: 'my secret plan' }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { task: { id: string } }).task.id;
  }

  it('JSON by default off a terminal: ready after listening, each task transition once with ids', async () => {
    const server = await spawnServer({ home, env: { CAIRN_LOG_LEVEL: 'info' } });
    const taskId = await runTask(server.url);
    await expect.poll(() => server.output().includes('task.completed')).toBe(true);
    await server.stop('SIGTERM');
    const lines = server
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.some((l) => String(l.msg).startsWith('cairn ready, listening on'))).toBe(true);
    for (const type of ['task.started', 'task.completed']) {
      const logged = lines.filter((l) => l.msg === type);
      expect(logged, type).toHaveLength(1);
      expect(logged[0]).toMatchObject({ level: 30, taskId });
    }
    expect(server.output()).not.toContain('my secret plan');
  });

  it('logs every chat turn once at info with its ids, outcome and duration', async () => {
    const server = await spawnServer({ home, env: { CAIRN_LOG_LEVEL: 'info' } });
    const post = (agent: string) =>
      fetch(`${server.url}/agents/${agent}/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message: 'my secret chat' }),
      });
    const ok = await post('assistant');
    expect(ok.status).toBe(200);
    const { sessionId } = (await ok.json()) as { sessionId: string };
    expect((await post('nobody')).status).toBe(404);
    await expect
      .poll(
        () =>
          server
            .output()
            .split('\n')
            .filter((l) => l.includes('chat.turn')).length,
      )
      .toBe(2);
    await server.stop('SIGTERM');
    const turns = server
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === 'chat.turn');
    expect(turns).toHaveLength(2);
    expect(turns[0]).toMatchObject({
      level: 30,
      sessionId,
      agentName: 'assistant',
      outcome: 'answer',
    });
    expect(typeof turns[0]!.durationMs).toBe('number');
    expect(turns[1]).toMatchObject({
      level: 30,
      agentName: 'nobody',
      outcome: 'error',
      errorCode: 'AGENT_NOT_FOUND',
    });
    expect(turns[1]).not.toHaveProperty('sessionId');
    expect(server.output()).not.toContain('my secret chat');
  });

  it('human-readable with CAIRN_LOG_FORMAT=pretty', async () => {
    const server = await spawnServer({
      home,
      env: { CAIRN_LOG_LEVEL: 'info', CAIRN_LOG_FORMAT: 'pretty' },
    });
    const taskId = await runTask(server.url);
    await expect.poll(() => server.output().includes('task.completed')).toBe(true);
    await server.stop('SIGTERM');
    const out = server.output();
    expect(out).toMatch(/INFO.*cairn ready, listening on http:\/\/127\.0\.0\.1:\d+/);
    expect(out).toMatch(new RegExp(`INFO.*task\\.completed.*${taskId}`));
    expect(out.split('\n').some((l) => l.startsWith('{"level"'))).toBe(false);
  });

  it('refuses an unknown CAIRN_LOG_FORMAT in one line', async () => {
    await expect(spawnServer({ home, env: { CAIRN_LOG_FORMAT: 'xml' } })).rejects.toThrow(
      /CAIRN_LOG_FORMAT must be "json" or "pretty", not "xml"/,
    );
  });
});

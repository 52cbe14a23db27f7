/**
 * `cairn serve` logs: JSON lines when stdout is not a terminal,
 * human-readable lines on a terminal or with CAIRN_LOG_FORMAT=pretty, and each
 * task transition, chat turn, compaction and daemon tick logged once at info
 * with its ids (never the user's text).
 */
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { CLI_PATH, spawnServer } from './spawn-server.js';

type LogLine = Record<string, unknown>;
const jsonLines = (output: string): LogLine[] =>
  output
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as LogLine);

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

  it('human-readable by default when standard output is a terminal', async () => {
    // `script` gives the server a pty as stdout; its own process group is ended after.
    const child = spawn(
      'script',
      ['-qec', `exec '${process.execPath}' '${CLI_PATH}' serve`, '/dev/null'],
      {
        env: { PATH: process.env.PATH ?? '', CAIRN_HOME: home, CAIRN_LOG_LEVEL: 'info' },
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    try {
      await expect.poll(() => out, { timeout: 20_000 }).toMatch(/cairn ready, listening on/);
    } finally {
      process.kill(-child.pid!, 'SIGTERM');
      await exited;
    }
    expect(out).toMatch(/INFO.*cairn ready, listening on http:\/\/127\.0\.0\.1:\d+/);
    expect(out.split(/\r?\n/).some((l) => l.startsWith('{'))).toBe(false);
  });

  it('logs each compaction once at info with its session and counts', async () => {
    const server = await spawnServer({ home, env: { CAIRN_LOG_LEVEL: 'info' } });
    onTestFinished(() => void server.stop('SIGTERM'));
    let sessionId: string | undefined;
    for (const message of ['first secret', 'second secret', 'third secret']) {
      const res = await fetch(`${server.url}/agents/assistant/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message, ...(sessionId ? { sessionId } : {}) }),
      });
      sessionId = ((await res.json()) as { sessionId: string }).sessionId;
    }
    const compacted = await fetch(`${server.url}/sessions/${sessionId}/compact`, {
      method: 'POST',
    });
    expect(compacted.status).toBe(200);
    await expect.poll(() => server.output().includes('context.defaultCompacted')).toBe(true);
    await server.stop('SIGTERM');
    const logged = jsonLines(server.output()).filter((l) => l.msg === 'context.defaultCompacted');
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 30, sessionId, trigger: 'manual' });
    expect(server.output()).not.toContain('secret');
  });

  it('logs each daemon tick once at info with its agent and task', async () => {
    const daemonHome = makeHome(
      {
        agents: {
          ticker: { ...TEST_AGENT, name: 'ticker', daemon: { every: '1s', prompt: 'Report.' } },
        },
      },
      fake.baseURL,
    );
    try {
      const server = await spawnServer({
        home: daemonHome,
        daemons: true,
        env: { CAIRN_LOG_LEVEL: 'info' },
      });
      onTestFinished(() => void server.stop('SIGTERM'));
      const ticks = (): LogLine[] =>
        jsonLines(server.output()).filter((l) => l.msg === 'daemon.tick');
      await expect.poll(() => ticks().length, { timeout: 20_000 }).toBeGreaterThanOrEqual(2);
      await server.stop('SIGTERM');
      const taskIds = ticks().map((l) => l.taskId);
      for (const tick of ticks())
        expect(tick).toMatchObject({ level: 30, agentName: 'ticker', status: 'completed' });
      expect(taskIds.every((id) => typeof id === 'string')).toBe(true);
      // Once each: no task is reported by two tick lines.
      expect(new Set(taskIds).size).toBe(taskIds.length);
    } finally {
      rmSync(daemonHome, { recursive: true, force: true });
    }
  });

  it('refuses an unknown CAIRN_LOG_FORMAT in one line', async () => {
    await expect(spawnServer({ home, env: { CAIRN_LOG_FORMAT: 'xml' } })).rejects.toThrow(
      /CAIRN_LOG_FORMAT must be "json" or "pretty", not "xml"/,
    );
  });
});

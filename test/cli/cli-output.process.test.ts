/**
 * What the CLI prints for people: `cairn sessions` has a header row over its
 * columns, `agents validate` names a broken MCP entry once, and the advice in
 * a server's error message is put in CLI terms.
 */
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forTheTerminal } from '../../src/cli/cli-hints.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { CLI_PATH, spawnServer, type ServerProcess } from '../process/spawn-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cairn(args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 20_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe('cairn sessions', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome({ agents: { assistant: TEST_AGENT } }, fake.baseURL);
    server = await spawnServer({ home });
  });
  afterAll(async () => {
    await server.stop('SIGTERM');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('prints a header row, then one row per session under it', async () => {
    await fetch(`${server.url}/agents/assistant/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'hi' }),
    });
    const run = await cairn(['sessions', '--url', server.url], {});
    expect(run.code).toBe(0);
    const [header, row, ...rest] = run.stdout.trimEnd().split('\n');
    expect(header!.split(/\s{2,}/)).toEqual([
      'ID',
      'AGENT',
      'MODE',
      'STATUS',
      'MESSAGES',
      'COMPACTED',
      'UPDATED',
      'TITLE',
    ]);
    expect(rest).toEqual([]);
    expect(row).toMatch(/^sess_\w+\s+assistant\s+chat\s+active\s+3\s+0\s+\d{4}-/);
    // Each column starts where its heading does.
    expect(row!.indexOf('assistant')).toBe(header!.indexOf('AGENT'));
    expect(row!.indexOf('chat')).toBe(header!.indexOf('MODE'));
  });
});

describe('cairn agents validate with a broken MCP entry', () => {
  it('names the problem once, with the file it is in', async () => {
    const home = makeHome(
      {
        agents: { a: { ...TEST_AGENT, name: 'a', tools: ['mcp:nosuch/tool', 'current_time'] } },
        mcpServers: {},
      },
      null,
    );
    try {
      const run = await cairn(['agents', 'validate'], { CAIRN_HOME: home });
      expect(run.code).toBe(1);
      const lines = run.stderr.trimEnd().split('\n');
      expect(lines.filter((l) => l.includes('mcp:nosuch/tool'))).toHaveLength(1);
      expect(lines[0]).toContain('agents/a/agent.json');
      expect(lines[0]).toContain('no MCP server "nosuch"');
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe("the server's advice at the terminal", () => {
  const server = 'http://127.0.0.1:5050';
  it.each([
    [
      'Session "sess_1" not found. List sessions with GET /sessions.',
      'Session "sess_1" not found. List sessions with `cairn sessions`.',
    ],
    [
      'Session "sess_1" belongs to agent "helper", not "assistant". Use POST /agents/helper/chat.',
      'Session "sess_1" belongs to agent "helper", not "assistant". Use `cairn chat helper --session <id>`.',
    ],
    [
      'Task "task_1" on this session is waiting for an answer: Which city? Answer it with POST /tasks/task_1/resume.',
      'Task "task_1" on this session is waiting for an answer: Which city? Do it in the console\'s Tasks page: http://127.0.0.1:5050/console/tasks.',
    ],
    [
      'Task "task_1" on this session is waiting for a person to approve the tool call "x". Approve it with POST /tasks/task_1/approve, or deny it with POST /tasks/task_1/deny.',
      'Task "task_1" on this session is waiting for a person to approve the tool call "x". Do it in the console\'s Tasks page: http://127.0.0.1:5050/console/tasks.',
    ],
    [
      'Agent "x" not found. Add agents/x/agent.json or check GET /agents.',
      'Agent "x" not found. Add agents/x/agent.json or check `cairn agents validate` on the server.',
    ],
  ])('%s', (message, expected) => {
    expect(forTheTerminal(message, server)).toBe(expected);
  });
});

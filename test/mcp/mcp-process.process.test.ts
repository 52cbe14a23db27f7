/**
 * MCP across real processes: a `cairn serve` that started stdio MCP servers
 * leaves no orphan behind after SIGTERM, and `cairn agents validate` reports
 * agents naming an unknown MCP server or a tool their server does not have.
 */
import { execFile, execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH, spawnServer, type ServerProcess } from '../process/spawn-server.js';
import { CHANGING_SERVER, everythingStdio, waitFor } from './mcp-servers.js';

const MCP_SERVERS = {
  everything: everythingStdio(),
  // Does not exit when its stdin closes: only Cairn's shutdown stops it.
  changing: { command: process.execPath, args: [CHANGING_SERVER, '--linger'] },
};

function childPids(pid: number): number[] {
  try {
    return execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' })
      .split('\n')
      .map((line) => Number(line.trim()))
      .filter((n) => n > 0);
  } catch {
    return []; // ps exits 1 when there is none
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('MCP servers and the cairn process', () => {
  let fake: FakeLlmServer;
  const homes: string[] = [];
  let server: ServerProcess | undefined;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
  });
  afterAll(async () => {
    await server?.stop('SIGKILL');
    await fake.close();
    for (const home of homes) rmSync(home, { recursive: true, force: true });
  });

  it('stops its MCP children on SIGTERM: no orphans', async () => {
    const home = makeHome({ mcpServers: MCP_SERVERS }, fake.baseURL);
    homes.push(home);
    server = await spawnServer({ home });
    const url = server.url;
    // The servers connect in the background, after Cairn listens.
    await expect
      .poll(async () => ((await (await fetch(`${url}/health`)).json()) as { mcp: unknown }).mcp, {
        timeout: 20_000,
        interval: 100,
      })
      .toMatchObject({
        everything: { status: 'connected' },
        changing: { status: 'connected' },
      });
    const children = childPids(server.child.pid!);
    expect(children).toHaveLength(2);

    const exit = await server.stop('SIGTERM');
    expect(exit.code).toBe(0);
    await waitFor('the MCP children to exit', () => children.every((pid) => !isAlive(pid)), 3_000);
  });

  it('agents validate reports an unknown MCP server and an unknown tool', async () => {
    const home = makeHome(
      {
        mcpServers: MCP_SERVERS,
        agents: {
          good: { name: 'good', system: 'x', tools: ['mcp:everything/echo', 'mcp:changing'] },
          nowhere: { name: 'nowhere', system: 'x', tools: ['mcp:elsewhere'] },
          typo: { name: 'typo', system: 'x', tools: ['mcp:everything/echoo'] },
        },
      },
      fake.baseURL,
    );
    homes.push(home);
    const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [CLI_PATH, 'agents', 'validate'],
        { env: { PATH: process.env.PATH ?? '', CAIRN_HOME: home }, timeout: 30_000 },
        (error, stdout, stderr) =>
          resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
      );
    });
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/ok\s+good/);
    expect(run.stdout).not.toMatch(/ok\s+(nowhere|typo)/);
    // An unknown server is the agent file's tool problem, reported once.
    expect(run.stderr).toContain(
      'Agent "nowhere" lists "mcp:elsewhere", but cairn.json has no MCP server "elsewhere".',
    );
    expect(run.stderr.match(/mcp:elsewhere/g)).toHaveLength(1);
    expect(run.stderr).toContain(
      'agent "typo" /tools/0 "mcp:everything/echoo": MCP server "everything" has no tool "echoo"; did you mean "echo"?',
    );
  });
});

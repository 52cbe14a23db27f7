/**
 * What `cairn serve` logs for a person at the default level: a ready line that
 * says which agents and daemons run, the model, the store and the console's
 * address; no line per request (those are at debug, one each); and a warning
 * when there are no agents to serve.
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { spawnServer } from './spawn-server.js';

interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

const WARN = 40;

function lines(output: string): LogLine[] {
  return output
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as LogLine);
}

/**
 * The ready line. It is logged once the port is bound, which can be a moment
 * after /health first answers (and the pipe may deliver it later still on a
 * busy machine): wait for it rather than read the output once.
 */
async function readyLine(output: () => string): Promise<LogLine> {
  const find = () => lines(output()).find((l) => l.msg.startsWith('cairn ready'));
  await expect.poll(find, { timeout: 10_000 }).toBeDefined();
  return find()!;
}

describe('the start-up and request log', () => {
  it('says which daemons are scheduled and where the console is, and logs no request at info', async () => {
    const home = makeHome(
      {
        agents: {
          assistant: TEST_AGENT,
          ticker: { ...TEST_AGENT, name: 'ticker', daemon: { every: '1h', prompt: 'Tick.' } },
        },
      },
      null,
    );
    const server = await spawnServer({ home, daemons: true, env: { CAIRN_LOG_LEVEL: 'info' } });
    try {
      for (let i = 0; i < 3; i++) await (await fetch(`${server.url}/health`)).text();
      await (await fetch(`${server.url}/agents`)).text();
      const ready = await readyLine(() => server.output());
      const log = lines(server.output());
      expect(ready).toMatchObject({
        agents: ['assistant', 'ticker'],
        daemons: ['ticker'],
        console: `${server.url}/console/`,
        mainModel: expect.stringContaining('offline'),
        database: expect.stringContaining('cairn.db'),
      });
      expect(log.filter((l) => /request/.test(l.msg))).toEqual([]);
    } finally {
      await server.stop('SIGTERM');
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('logs each request once at debug', async () => {
    const home = makeHome({}, null);
    const server = await spawnServer({ home, env: { CAIRN_LOG_LEVEL: 'debug' } });
    try {
      await (await fetch(`${server.url}/agents`)).text();
      const requests = () =>
        lines(server.output()).filter(
          // The readiness probe's GET /health is logged too: only this request is counted.
          (l) =>
            (l.msg === 'request completed' || l.msg === 'incoming request') &&
            (l.url === '/agents' || (l.req as { url?: string } | undefined)?.url === '/agents'),
        );
      // The line is written as the response ends: wait for it, then count.
      await expect
        .poll(() => requests().some((l) => l.msg === 'request completed'), { timeout: 10_000 })
        .toBe(true);
      expect(requests()).toHaveLength(1);
      expect(requests()[0]).toMatchObject({
        level: 20,
        method: 'GET',
        url: '/agents',
        statusCode: 200,
      });
    } finally {
      await server.stop('SIGTERM');
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('says the daemons are off under --no-daemons', async () => {
    const home = makeHome(
      {
        agents: {
          ticker: { ...TEST_AGENT, name: 'ticker', daemon: { every: '1h', prompt: 'Tick.' } },
        },
      },
      null,
    );
    const server = await spawnServer({ home, env: { CAIRN_LOG_LEVEL: 'info' } });
    try {
      const ready = await readyLine(() => server.output());
      expect(ready.daemons).toBe('off');
    } finally {
      await server.stop('SIGTERM');
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('warns when the agents folder is empty', async () => {
    const home = makeHome({ agents: {} }, null);
    mkdirSync(join(home, 'agents'), { recursive: true });
    const server = await spawnServer({ home });
    try {
      const warning = () =>
        lines(server.output()).find(
          (l) => l.level === WARN && l.msg.includes('no agents loaded from'),
        )?.msg;
      await expect.poll(warning, { timeout: 10_000 }).toContain('cairn init');
    } finally {
      await server.stop('SIGTERM');
      rmSync(home, { recursive: true, force: true });
    }
  });

  it("serves the package's demo agent, saying so in one line, when there is no agents folder", async () => {
    const home = makeHome({ agents: {} }, null);
    rmSync(join(home, 'agents'), { recursive: true, force: true });
    const server = await spawnServer({ home, env: { CAIRN_LOG_LEVEL: 'info' } });
    try {
      const ready = await readyLine(() => server.output());
      expect(ready.agents).toEqual(['assistant']);
      const demoLines = () => lines(server.output()).filter((l) => l.msg.includes('demo agent'));
      await expect.poll(() => demoLines().length, { timeout: 10_000 }).toBe(1);
      const said = demoLines();
      expect(said[0]!.msg).toContain(`no agents folder in ${home}`);
      expect(said[0]!.msg).toContain('cairn init');
      // Nothing was written into the user's folder.
      expect(existsSync(join(home, 'agents'))).toBe(false);
    } finally {
      await server.stop('SIGTERM');
      rmSync(home, { recursive: true, force: true });
    }
  });
});

/**
 * A reload applies to the daemon schedule of a running `cairn serve`: an
 * agent.json written into its agents folder while it runs schedules a new
 * daemon, an edited `every` reschedules it, and a removed agent or a removed
 * `daemon` section unschedules it; each change is logged at info. The reload
 * is the server's own file watch, and the ticks are read back from GET /tasks.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { spawnServer, type ServerProcess } from '../process/spawn-server.js';

/** Well beyond the watch's debounce and a tick of the offline model on a busy machine. */
const GENEROUS_WAIT_MS = 20_000;
/** A couple of one-second intervals, with room to spare. */
const QUIET_MS = 3_500;

interface LogLine {
  level: number;
  msg: string;
  agent?: string;
  schedule?: string;
  previous?: string;
}

const INFO = 30;

function logLines(server: ServerProcess): LogLine[] {
  return server
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as LogLine);
}

interface TaskView {
  status: string;
}

async function ticksOf(server: ServerProcess, agentName: string): Promise<TaskView[]> {
  const res = await fetch(`${server.url}/tasks?agentName=${agentName}&limit=100`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { tasks: TaskView[] }).tasks;
}

/** The ticks of `agentName` once none is running (a tick that started before a change may finish). */
async function settledTicks(server: ServerProcess, agentName: string): Promise<number> {
  let ticks: TaskView[] = [];
  await expect
    .poll(
      async () => {
        ticks = await ticksOf(server, agentName);
        return ticks.every((t) => t.status !== 'running');
      },
      { timeout: GENEROUS_WAIT_MS, interval: 200 },
    )
    .toBe(true);
  return ticks.length;
}

async function waitForLog(server: ServerProcess, msg: string, agent: string): Promise<LogLine> {
  let found: LogLine | undefined;
  await expect
    .poll(() => (found = logLines(server).find((l) => l.msg === msg && l.agent === agent)), {
      timeout: GENEROUS_WAIT_MS,
      interval: 100,
    })
    .toBeDefined();
  return found!;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a reload applies to the daemon schedule', () => {
  let server: ServerProcess | undefined;
  let home: string | undefined;
  afterEach(async () => {
    await server?.stop('SIGTERM');
    if (home) rmSync(home, { recursive: true, force: true });
    server = undefined;
    home = undefined;
  });

  const writeAgent = (name: string, config: Record<string, unknown>): void => {
    mkdirSync(join(home!, 'agents', name), { recursive: true });
    writeFileSync(join(home!, 'agents', name, 'agent.json'), JSON.stringify(config));
  };

  it('schedules a new daemon, reschedules an edited one and unschedules a removed one', async () => {
    home = makeHome({}, null);
    server = await spawnServer({ home, daemons: true, env: { CAIRN_LOG_LEVEL: 'info' } });
    const ticker = { ...TEST_AGENT, name: 'ticker', tools: [] };

    // Added with a schedule an hour away: scheduled, and it does not tick.
    writeAgent('ticker', { ...ticker, daemon: { every: '1h', prompt: 'Tick.' } });
    const scheduled = await waitForLog(server, 'daemon scheduled', 'ticker');
    expect(scheduled).toMatchObject({ level: INFO, schedule: 'every 1h' });

    // Edited to every second: the new schedule is the one that fires.
    writeAgent('ticker', { ...ticker, daemon: { every: '1s', prompt: 'Tick.' } });
    const rescheduled = await waitForLog(server, 'daemon rescheduled', 'ticker');
    expect(rescheduled).toMatchObject({ level: INFO, schedule: 'every 1s', previous: 'every 1h' });
    await expect
      .poll(async () => (await ticksOf(server!, 'ticker')).length, {
        timeout: GENEROUS_WAIT_MS,
        interval: 200,
      })
      .toBeGreaterThanOrEqual(1);
    expect((await ticksOf(server, 'ticker')).some((t) => t.status === 'completed')).toBe(true);

    // Removed: no tick after the one that may have been running.
    rmSync(join(home, 'agents', 'ticker'), { recursive: true });
    const unscheduled = await waitForLog(server, 'daemon unscheduled', 'ticker');
    expect(unscheduled).toMatchObject({ level: INFO, schedule: 'every 1s' });
    const afterRemoval = await settledTicks(server, 'ticker');
    await sleep(QUIET_MS);
    expect(await ticksOf(server, 'ticker')).toHaveLength(afterRemoval);
  });

  it('unschedules a daemon whose daemon section is removed; the agent stays', async () => {
    home = makeHome({}, null);
    server = await spawnServer({ home, daemons: true, env: { CAIRN_LOG_LEVEL: 'info' } });
    const reporter = { ...TEST_AGENT, name: 'reporter', tools: [] };

    writeAgent('reporter', { ...reporter, daemon: { every: '1s', prompt: 'Report.' } });
    await waitForLog(server, 'daemon scheduled', 'reporter');
    await expect
      .poll(async () => (await ticksOf(server!, 'reporter')).length, {
        timeout: GENEROUS_WAIT_MS,
        interval: 200,
      })
      .toBeGreaterThanOrEqual(1);

    writeAgent('reporter', reporter);
    await waitForLog(server, 'daemon unscheduled', 'reporter');
    const afterOff = await settledTicks(server, 'reporter');
    await sleep(QUIET_MS);
    expect(await ticksOf(server, 'reporter')).toHaveLength(afterOff);
    expect((await fetch(`${server.url}/agents/reporter`)).status).toBe(200);
  });
});

/**
 * POST /agents/reload applies to the daemon schedule, in process: a daemon
 * whose `every` changes is rescheduled, a changed cron that no longer parses
 * unschedules it, and with daemons turned off a reload schedules nothing.
 * Real seconds, real timers; the file watch of `cairn serve` is covered by
 * reload-schedules.process.test.ts.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { makeHome } from '../helpers/test-app.js';

const GENEROUS_WAIT_MS = 15_000;
/** A couple of one-second intervals, with room to spare. */
const QUIET_MS = 3_000;

const PULSE = {
  name: 'pulse',
  description: 'A daemon',
  system: 'You are a pulse.',
  tools: [],
  maxIterations: 2,
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('POST /agents/reload and the daemon schedule', () => {
  let app: CairnApp | undefined;
  let home: string | undefined;
  const lines: { level: number; msg?: string; agent?: string }[] = [];
  afterEach(async () => {
    await app?.close();
    if (home) rmSync(home, { recursive: true, force: true });
    app = undefined;
    home = undefined;
    lines.length = 0;
  });

  const start = async (daemons: boolean, daemon: Record<string, unknown>) => {
    home = makeHome({ agents: { pulse: { ...PULSE, daemon } } }, null);
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean))
          lines.push(JSON.parse(line) as (typeof lines)[number]);
        done();
      },
    });
    app = await startApp(loadSettings({ home, env: {} }), {
      logger: { level: 'info', stream },
      daemons,
    });
  };
  const rewrite = async (config: Record<string, unknown>) => {
    mkdirSync(join(home!, 'agents', 'pulse'), { recursive: true });
    writeFileSync(join(home!, 'agents', 'pulse', 'agent.json'), JSON.stringify(config));
    const res = await app!.server.inject({ method: 'POST', url: '/agents/reload' });
    expect(res.statusCode).toBe(200);
  };
  const ticks = async (): Promise<{ status: string }[]> =>
    (await app!.server.inject({ url: '/tasks?agentName=pulse&limit=100' })).json().tasks;
  const settledTicks = async (): Promise<number> => {
    await expect
      .poll(async () => (await ticks()).every((t) => t.status !== 'running'), {
        timeout: GENEROUS_WAIT_MS,
      })
      .toBe(true);
    return (await ticks()).length;
  };

  it('reschedules a changed `every` when the reload answers, and unschedules a cron that no longer parses', async () => {
    await start(true, { every: '1h', prompt: 'Beat.' });
    await rewrite({ ...PULSE, daemon: { every: '1s', prompt: 'Beat.' } });
    // Applied before the reload answered.
    expect(lines.filter((l) => l.msg === 'daemon rescheduled')).toMatchObject([
      { level: 30, agent: 'pulse', schedule: 'every 1s', previous: 'every 1h' },
    ]);
    await expect
      .poll(async () => (await ticks()).length, { timeout: GENEROUS_WAIT_MS })
      .toBeGreaterThanOrEqual(1);

    await rewrite({ ...PULSE, daemon: { cron: 'not a cron', prompt: 'Beat.' } });
    expect(lines.filter((l) => l.msg === 'daemon unscheduled')).toMatchObject([
      { level: 30, agent: 'pulse', schedule: 'every 1s' },
    ]);
    const settled = await settledTicks();
    await sleep(QUIET_MS);
    expect(await ticks()).toHaveLength(settled);
  }, 40_000);

  it('with daemons turned off, a reload that adds one schedules nothing', async () => {
    await start(false, { every: '1h', prompt: 'Beat.' });
    await rewrite({ ...PULSE, daemon: { every: '1s', prompt: 'Beat.' } });
    await sleep(QUIET_MS);
    expect(await ticks()).toEqual([]);
    expect(lines.filter((l) => /^daemon /.test(l.msg ?? ''))).toEqual([]);
  }, 20_000);
});

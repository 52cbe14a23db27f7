/**
 * MCP servers that overwhelm a client, run for real (a small SDK server of the
 * test's own). One listing 2 000 tools makes an agent that takes all of them
 * offer more tools than a model request may carry: that is a configuration
 * error named at start-up and by `cairn agents validate`, and a turn is
 * refused with it before anything is stored or sent — never a request the
 * provider rejects on every turn. One announcing `tools/list_changed` ten
 * times a second is logged when the burst starts and counted once when it
 * ends, not once per notice.
 */
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI_PATH } from '../process/spawn-server.js';
import { makeHome, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const CROWDED = fileURLToPath(new URL('../fixtures/mcp/crowded-server.mjs', import.meta.url));
const CROWD_AGENT = {
  name: 'crowd',
  description: 'Takes every tool of a crowded server',
  system: 'You have many tools.',
  tools: ['mcp:crowded'],
  maxIterations: 3,
};

function logSink(): { stream: Writable; messages: string[] } {
  const messages: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean))
        messages.push((JSON.parse(line) as { msg?: string }).msg ?? '');
      done();
    },
  });
  return { stream, messages };
}

describe('MCP servers with too many tools or too many notices', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('2 000 tools from one server: named at start-up, and a turn is refused before anything is sent', async () => {
    const { stream, messages } = logSink();
    t = await startTestApp({
      agents: { assistant: TEST_AGENT, crowd: CROWD_AGENT },
      mcpServers: { crowded: { command: process.execPath, args: [CROWDED, '--tools', '2000'] } },
      app: { logger: { level: 'info', stream } },
    });
    expect(messages.some((m) => /"crowd".*2000 tools.*128/.test(m))).toBe(true);

    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/crowd/chat',
      payload: { message: 'hello' },
    });
    expect(res.statusCode).toBe(400);
    const { error } = res.json<{ error: { code: string; message: string } }>();
    expect(error.code).toBe('VALIDATION_ERROR');
    expect(error.message).toContain('would offer 2000 tools');
    expect(error.message).toContain('mcp:<server>/<tool>');
    expect(t.fake!.requests).toHaveLength(0);
    // Nothing of the refused turn was stored.
    const sessions = (await t.app.server.inject({ url: '/sessions?agentName=crowd' })).json<{
      sessions: { id: string }[];
    }>().sessions;
    for (const session of sessions) {
      const stored = await t.app.store.listMessages(session.id, { afterSeq: 0, limit: 10 });
      expect(stored.filter((m) => m.role !== 'system')).toEqual([]);
    }

    // The other agent is unaffected.
    t.fake!.script({ content: 'fine' });
    const other = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hello' },
    });
    expect(other.statusCode).toBe(200);
  }, 60_000);

  it('cairn agents validate names the agent and exits 1', async () => {
    const home = makeHome(
      {
        agents: { crowd: CROWD_AGENT },
        mcpServers: { crowded: { command: process.execPath, args: [CROWDED, '--tools', '2000'] } },
      },
      'http://127.0.0.1:9/v1',
      null,
    );
    try {
      const run = await new Promise<{ code: number; stderr: string }>((resolve) => {
        execFile(
          process.execPath,
          [CLI_PATH, 'agents', 'validate'],
          { env: { PATH: process.env.PATH ?? '', CAIRN_HOME: home }, timeout: 30_000 },
          (error, _stdout, stderr) =>
            resolve({
              code: error ? (typeof error.code === 'number' ? error.code : 1) : 0,
              stderr,
            }),
        );
      });
      expect(run.code).toBe(1);
      expect(run.stderr).toMatch(/error .*crowd.*would offer 2000 tools.*128/);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  }, 60_000);

  it('a burst of tools/list_changed, ten a second, is logged when it starts, and counted once when it ends', async () => {
    const { stream, messages } = logSink();
    t = await startTestApp({
      agents: { assistant: { ...TEST_AGENT, tools: ['mcp:flooding'] } },
      mcpServers: {
        flooding: {
          command: process.execPath,
          args: [CROWDED, '--tools', '3', '--flood', 'forever'],
        },
      },
      app: { logger: { level: 'info', stream } },
    });
    const changed = () => messages.filter((m) => /"flooding" changed its tools/.test(m));
    // The server is still sending notices, ten a second, and will until told to stop:
    // the burst's first line is logged now, not once it has gone quiet.
    await expect
      .poll(() => changed().length, { timeout: 15_000, interval: 100 })
      .toBeGreaterThan(0);
    expect(changed()[0]).toMatch(/changed its tools \(3 now\); further changes are counted/);
    const connection = t.app.mcp.findConnection('flooding')!;
    await connection.callTool('stop_flood', {}, new AbortController().signal);
    // Once it is quiet, one more line: the burst's count.
    await expect.poll(() => changed().length, { timeout: 15_000, interval: 100 }).toBe(2);
    expect(changed()[1]).toMatch(/changed its tools (\d+) times in one burst, now over \(3 now\)/);
    const times = Number(/changed its tools (\d+) times/.exec(changed()[1]!)![1]);
    expect(times).toBeGreaterThan(1);
  }, 60_000);
});

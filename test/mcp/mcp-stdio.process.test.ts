/**
 * MCP tool servers over stdio, against real servers run as child
 * processes: the reference "everything" server and a small SDK-built server
 * whose tool list changes. The model sees `<server>__<tool>` names and adapted
 * schemas in requests the fake checks against OpenAI's published API; results
 * are text, structured JSON and media summaries; isError, slow calls, servers
 * that fail to start or die come back as tool errors or health entries, never
 * as a stopped Cairn.
 */
import { Writable } from 'node:stream';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';
import { CHANGING_SERVER, everythingStdio, toolTurn, waitFor } from './mcp-servers.js';

interface WireTool {
  function: { name: string; description: string; parameters: Record<string, unknown> };
}
const SECRET = 'sk-very-secret-value-123';

describe('MCP servers over stdio', () => {
  let t: TestApp;
  let log = '';
  const logStream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      log += chunk.toString('utf8');
      done();
    },
  });
  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        assistant: {
          name: 'assistant',
          system: 'You use MCP tools.',
          tools: [
            'mcp:everything/echo',
            'mcp:everything/get-tiny-image',
            'mcp:everything/get-structured-content',
            'mcp:changing',
            'mcp:slow/trigger-long-running-operation',
          ],
          maxIterations: 6,
        },
        lost: { name: 'lost', system: 'You have a missing server.', tools: ['mcp:nowhere'] },
      },
      mcpServers: {
        everything: everythingStdio(),
        changing: { command: process.execPath, args: [CHANGING_SERVER] },
        // The same server with a short per-call limit.
        slow: everythingStdio({ timeoutMs: 300 }),
        // Prints the secret from its environment, then dies at start.
        broken: {
          command: process.execPath,
          args: ['-e', "console.error('token is ' + process.env.TOKEN); process.exit(3)"],
          env: { TOKEN: '${MCP_TEST_TOKEN}' },
        },
        // Starts but never answers the MCP handshake.
        silent: {
          command: process.execPath,
          args: ['-e', 'setInterval(() => undefined, 1000)'],
          connectTimeoutMs: 300,
        },
        unset: {
          url: 'http://127.0.0.1:9/mcp',
          headers: { Authorization: 'Bearer ${NOT_SET_ANYWHERE}' },
        },
      },
      env: { MCP_TEST_TOKEN: SECRET },
      app: {
        mcpBackoff: { initialMs: 50, maxMs: 200 },
        logger: { level: 'info', stream: logStream },
      },
    });
  }, 60_000);
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  const chat = (message: string, agent = 'assistant') =>
    t.app.server.inject({ method: 'POST', url: `/agents/${agent}/chat`, payload: { message } });

  it('reports each server in GET /health, failures with a reason and no secret', async () => {
    const res = await t.app.server.inject({ method: 'GET', url: '/health' });
    expect(res.statusCode).toBe(200);
    const mcp = res.json<{
      mcp: Record<string, { status: string; tools: number; error?: string }>;
    }>().mcp;
    expect(mcp['everything']).toMatchObject({ status: 'connected' });
    expect(mcp['everything']!.tools).toBeGreaterThan(5);
    expect(mcp['changing']).toMatchObject({ status: 'connected', tools: 4 });
    expect(mcp['broken']!.status).toBe('error');
    expect(mcp['broken']!.error).toContain('token is ***');
    expect(mcp['silent']).toMatchObject({ status: 'error', tools: 0 });
    expect(mcp['silent']!.error).toContain('longer than 300 ms');
    expect(mcp['unset']).toMatchObject({ status: 'error', tools: 0 });
    expect(mcp['unset']!.error).toContain('NOT_SET_ANYWHERE');
    expect(res.body).not.toContain(SECRET);
    // The log says why, without the secret either.
    expect(log).toContain('MCP server \\"broken\\" is unavailable');
    expect(log).toContain('MCP server \\"everything\\" connected');
    expect(log).not.toContain(SECRET);
  });

  it('offers <server>__<tool> names and adapted schemas the provider accepts', async () => {
    t.fake!.script({ content: 'hi' });
    expect((await chat('hello')).statusCode).toBe(200);
    const request = t.fake!.requests[0]!;
    // The fake checks every request against OpenAI's OpenAPI description.
    expect(request.problems).toEqual([]);
    const tools = request.body.tools as WireTool[];
    const names = tools.map((tool) => tool.function.name);
    expect(names).toEqual(
      expect.arrayContaining([
        'everything__echo',
        'everything__get-tiny-image',
        'changing__add_tool',
        'changing__pick',
        'slow__trigger-long-running-operation',
      ]),
    );
    for (const name of names) expect(name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    const long = names.find((n) => n.startsWith('changing__a_tool_with'))!;
    expect(long).toHaveLength(64);
    for (const tool of tools) {
      expect(tool.function.parameters['type']).toBe('object');
      for (const key of ['anyOf', 'oneOf', 'allOf', '$schema'])
        expect(tool.function.parameters).not.toHaveProperty(key);
    }
    const pick = tools.find((tool) => tool.function.name === 'changing__pick')!;
    expect(Object.keys(pick.function.parameters['properties'] as object)).toEqual(['id', 'name']);
    expect(
      tools.find((tool) => tool.function.name === 'everything__echo')!.function.description,
    ).toBe('Echoes back the input string');
  });

  it('runs a tool and gives the model its text', async () => {
    const turn = await toolTurn(t, 'everything__echo', { message: 'over stdio' });
    expect(turn).toMatchObject({ status: 200, reply: 'done', toolResult: 'Echo: over stdio' });
  });

  it('summarises images by type and size, and gives structured content once as JSON', async () => {
    const image = await toolTurn(t, 'everything__get-tiny-image', {});
    expect(image.toolResult).toMatch(/\[image image\/png, \d+ bytes, not shown\]/);
    expect(image.toolResult).toContain("Here's the image you requested:");

    const weather = await toolTurn(t, 'everything__get-structured-content', {
      location: 'Chicago',
    });
    expect(JSON.parse(weather.toolResult)).toEqual({
      temperature: 36,
      conditions: 'Light rain / drizzle',
      humidity: 82,
    });
  });

  it('turns an isError result into a tool error and goes on', async () => {
    const turn = await toolTurn(t, 'changing__fail', {}, 'sorry');
    expect(turn.status).toBe(200);
    expect(turn.toolResult).toMatch(/^Error: .*the widget is jammed/);
  });

  it('a call slower than the server timeoutMs is a tool error; the turn completes', async () => {
    const turn = await toolTurn(
      t,
      'slow__trigger-long-running-operation',
      { duration: 5, steps: 5 },
      'gave up',
    );
    expect(turn).toMatchObject({ status: 200, reply: 'gave up' });
    expect(turn.toolResult).toMatch(/^Error: .*timed out/i);
  });

  it('refreshes the tools on tools/list_changed', async () => {
    expect((await toolTurn(t, 'changing__add_tool', {})).toolResult).toBe('added extra_4');
    await waitFor('the new tool', () => t.app.mcp.health()['changing']!.tools === 5);
    t.fake!.reset();
    t.fake!.script({ content: 'now I have it' });
    await chat('again');
    const names = (t.fake!.requests[0]!.body.tools as WireTool[]).map((tool) => tool.function.name);
    expect(names).toContain('changing__extra_4');
  });

  it('reconnects a server whose process died, with a new process', async () => {
    const connection = t.app.mcp.findConnection('everything')!;
    const firstPid = connection.pid!;
    process.kill(firstPid, 'SIGKILL');
    await waitFor(
      'the drop to be noticed',
      () => connection.status !== 'connected' || connection.pid !== firstPid,
    );
    await waitFor('the reconnect', () => connection.status === 'connected', 15_000);
    expect(connection.pid).not.toBe(firstPid);
    expect((await toolTurn(t, 'everything__echo', { message: 'back' })).toolResult).toBe(
      'Echo: back',
    );
  });

  it('an agent naming an unconfigured server gets a clear error, not a 500', async () => {
    const res = await chat('hi', 'lost');
    expect(res.statusCode).toBe(400);
    const error = res.json<{ error: { code: string; message: string } }>().error;
    expect(error.code).toBe('VALIDATION_ERROR');
    expect(error.message).toContain('no MCP server "nowhere"');
  });
});

/**
 * MCP servers over HTTP and the filesystem server: the everything
 * server in its Streamable HTTP mode and in its older SSE mode (reached through
 * the fallback), with a `${VAR}` header; the filesystem server reading a file
 * for an agent, and refusing a path outside its roots as a tool error while
 * the turn completes. All run as real child processes from node_modules.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';
import { freePort } from '../process/spawn-server.js';
import {
  FILESYSTEM_SERVER,
  startEverythingHttp,
  toolTurn,
  type HttpMcpServer,
} from './mcp-servers.js';

describe('MCP servers over HTTP, and the filesystem server', () => {
  let t: TestApp;
  let streamable: HttpMcpServer;
  let sse: HttpMcpServer;
  let shared: string;

  beforeAll(async () => {
    [streamable, sse] = await Promise.all([
      freePort().then((port) => startEverythingHttp('streamableHttp', port)),
      freePort().then((port) => startEverythingHttp('sse', port)),
    ]);
    shared = mkdtempSync(join(tmpdir(), 'cairn-mcp-files-'));
    mkdirSync(join(shared, 'notes'));
    writeFileSync(join(shared, 'notes', 'plan.txt'), 'Step 1: build the cairn.\n');
    t = await startTestApp({
      agents: {
        assistant: {
          name: 'assistant',
          system: 'You use MCP tools.',
          tools: ['mcp:remote/echo', 'mcp:legacy/echo', 'mcp:files/read_text_file'],
          maxIterations: 6,
        },
      },
      mcpServers: {
        remote: {
          url: `http://127.0.0.1:${streamable.port}/mcp`,
          headers: { Authorization: 'Bearer ${REMOTE_TOKEN}' },
        },
        legacy: { url: `http://127.0.0.1:${sse.port}/sse` },
        files: { command: process.execPath, args: [FILESYSTEM_SERVER, shared] },
      },
      env: { REMOTE_TOKEN: 'remote-secret-token' },
    });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await Promise.all([streamable?.stop(), sse?.stop()]);
    rmSync(shared, { recursive: true, force: true });
  });
  beforeEach(() => t.fake!.reset());

  it('connects over Streamable HTTP, and over SSE for a server that only speaks SSE', () => {
    const health = t.app.mcp.health();
    expect(health['remote']).toMatchObject({ status: 'connected' });
    expect(health['legacy']).toMatchObject({ status: 'connected' });
    expect(health['files']).toMatchObject({ status: 'connected' });
  });

  it('calls a tool over Streamable HTTP', async () => {
    const turn = await toolTurn(t, 'remote__echo', { message: 'over http' });
    expect(turn).toMatchObject({ status: 200, toolResult: 'Echo: over http' });
  });

  it('calls a tool over the SSE fallback', async () => {
    const turn = await toolTurn(t, 'legacy__echo', { message: 'over sse' });
    expect(turn).toMatchObject({ status: 200, toolResult: 'Echo: over sse' });
  });

  it('an agent reads a file through the filesystem server', async () => {
    const path = join(shared, 'notes', 'plan.txt');
    const turn = await toolTurn(t, 'files__read_text_file', { path }, 'Build the cairn.');
    expect(turn).toMatchObject({
      status: 200,
      reply: 'Build the cairn.',
      toolResult: 'Step 1: build the cairn.\n',
      problems: [],
    });
  });

  it('a path outside the roots is a tool error, and the turn completes', async () => {
    const turn = await toolTurn(
      t,
      'files__read_text_file',
      { path: '/etc/passwd' },
      'Not allowed.',
    );
    expect(turn).toMatchObject({ status: 200, reply: 'Not allowed.' });
    expect(turn.toolResult).toMatch(/^Error: .*(denied|outside)/i);
    expect(turn.toolResult).not.toContain('root:');
  });
});

/**
 * MCP servers over HTTP and the filesystem server (DESIGN §11): the everything
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
import { FILESYSTEM_SERVER, startEverythingHttp, type HttpMcpServer } from './mcp-servers.js';

interface WireMessage {
  role: string;
  content: string | null;
}

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

  const chat = (message: string) =>
    t.app.server.inject({ method: 'POST', url: '/agents/assistant/chat', payload: { message } });
  const toolResult = (): string =>
    (t.fake!.requests.at(-1)!.body.messages as WireMessage[]).find((m) => m.role === 'tool')!
      .content ?? '';

  it('connects over Streamable HTTP, and over SSE for a server that only speaks SSE', () => {
    const health = t.app.mcp.health();
    expect(health['remote']).toMatchObject({ status: 'connected' });
    expect(health['legacy']).toMatchObject({ status: 'connected' });
    expect(health['files']).toMatchObject({ status: 'connected' });
  });

  it('calls a tool over Streamable HTTP', async () => {
    t.fake!.script(
      { tool_calls: [{ name: 'remote__echo', arguments: '{"message":"over http"}' }] },
      { content: 'ok' },
    );
    expect((await chat('echo')).statusCode).toBe(200);
    expect(toolResult()).toBe('Echo: over http');
  });

  it('calls a tool over the SSE fallback', async () => {
    t.fake!.script(
      { tool_calls: [{ name: 'legacy__echo', arguments: '{"message":"over sse"}' }] },
      { content: 'ok' },
    );
    expect((await chat('echo')).statusCode).toBe(200);
    expect(toolResult()).toBe('Echo: over sse');
  });

  it('an agent reads a file through the filesystem server', async () => {
    t.fake!.script(
      {
        tool_calls: [
          {
            name: 'files__read_text_file',
            arguments: JSON.stringify({ path: join(shared, 'notes', 'plan.txt') }),
          },
        ],
      },
      { content: 'The plan is to build the cairn.' },
    );
    const res = await chat('what is the plan?');
    expect(res.statusCode).toBe(200);
    expect(toolResult()).toBe('Step 1: build the cairn.\n');
    expect(t.fake!.requests.at(-1)!.problems).toEqual([]);
  });

  it('a path outside the roots is a tool error, and the turn completes', async () => {
    t.fake!.script(
      { tool_calls: [{ name: 'files__read_text_file', arguments: '{"path":"/etc/passwd"}' }] },
      { content: 'I may not read that.' },
    );
    const res = await chat('read /etc/passwd');
    expect(res.statusCode).toBe(200);
    expect(res.json<{ reply: string }>().reply).toBe('I may not read that.');
    expect(toolResult()).toMatch(/^Error: .*(denied|outside)/i);
    expect(toolResult()).not.toContain('root:');
  });
});

/**
 * MCP servers connect in the background, after the server is started: one
 * that never answers `initialize` (a child that reads stdin and says nothing)
 * does not hold up start-up for its connectTimeoutMs. Until a server answers,
 * the agent's view lists its entries under `toolsNotReady` and its turns run
 * with the tools that are ready; once it answers, its tools join.
 */
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';

const CROWDED = fileURLToPath(new URL('../fixtures/mcp/crowded-server.mjs', import.meta.url));
/** Long enough that start-up would visibly wait for it, were it awaited. */
const SILENT_TIMEOUT_MS = 20_000;

interface AgentView {
  toolsNotReady?: { tool: string; status: string; error?: string }[];
}

describe('MCP servers connecting in the background', () => {
  let fake: FakeLlmServer;
  let home: string;
  let app: CairnApp | undefined;

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome(
      {
        agents: {
          mixed: {
            name: 'mixed',
            system: 'You use tools.',
            tools: ['current_time', 'mcp:crowded/tool_0', 'mcp:silent'],
          },
        },
        mcpServers: {
          crowded: { command: process.execPath, args: [CROWDED, '--tools', '3'] },
          silent: {
            command: process.execPath,
            args: ['-e', 'process.stdin.resume()'],
            connectTimeoutMs: SILENT_TIMEOUT_MS,
          },
        },
      },
      fake.baseURL,
      null,
    );
  });
  afterAll(async () => {
    await app?.close();
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  const agentView = async () =>
    (await app!.server.inject({ url: '/agents/mixed' })).json<{ agent: AgentView }>().agent;
  const offeredTools = () =>
    (fake.requests.at(-1)!.body as { tools?: { function: { name: string } }[] }).tools?.map(
      (tool) => tool.function.name,
    );

  it('starts without waiting for a silent server, says which tools are not ready, and adds them when they are', async () => {
    app = await startApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
    // Started while the silent server's first attempt has most of its 20 s to go.
    expect(app.mcp.health().silent!.status).toBe('connecting');
    const first = await agentView();
    expect(first.toolsNotReady).toContainEqual({ tool: 'mcp:silent', status: 'connecting' });

    // A turn now runs with what is ready.
    fake.script({ content: 'first' });
    const chat = await app.server.inject({
      method: 'POST',
      url: '/agents/mixed/chat',
      payload: { message: 'hello' },
    });
    expect(chat.statusCode).toBe(200);
    expect(offeredTools()).toContain('current_time');
    expect(offeredTools()).not.toContain('silent__anything');

    // The working server answers in the background; its tool joins the next turn.
    await expect
      .poll(() => app!.mcp.health().crowded!.status, { timeout: 15_000, interval: 50 })
      .toBe('connected');
    const later = await agentView();
    expect(later.toolsNotReady?.map((entry) => entry.tool)).toEqual(['mcp:silent']);
    fake.script({ content: 'second' });
    await app.server.inject({
      method: 'POST',
      url: '/agents/mixed/chat',
      payload: { message: 'again' },
    });
    expect(offeredTools()).toEqual(expect.arrayContaining(['current_time', 'crowded__tool_0']));
    expect(offeredTools()).not.toContain('crowded__tool_1');
  }, 60_000);

  it('closes cleanly while a server is still connecting', async () => {
    expect(app!.mcp.health().silent!.status).toBe('connecting');
    await app!.close();
    app = undefined;
  }, 30_000);
});

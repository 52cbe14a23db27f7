/**
 * Agents live: POST /agents/reload and the debounced file watch
 * add, change and remove agents without a restart; a running turn keeps the
 * agent version it started with.
 */
import { mkdirSync, mkdtempSync, rmSync, watch, writeFileSync, type FSWatcher } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AGENT_WATCH_DEBOUNCE_MS, AgentReloader } from '../../src/agents/agent-reloader.js';
import { AgentRegistry } from '../../src/agents/agent-registry.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

describe('agents live', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  const writeAgent = (home: string, name: string, config: Record<string, unknown>): void => {
    mkdirSync(join(home, 'agents', name), { recursive: true });
    writeFileSync(join(home, 'agents', name, 'agent.json'), JSON.stringify(config));
  };

  it('POST /agents/reload adds, changes and removes agents and reports problems', async () => {
    t = await startTestApp({ fake: null });
    const app = t.app.server;
    writeAgent(t.home, 'helper', { ...TEST_AGENT, name: 'helper', description: 'v1' });
    writeAgent(t.home, 'broken', { ...TEST_AGENT, name: 'broken', maxIterations: 0 });
    const res = await app.inject({ method: 'POST', url: '/agents/reload' });
    expect(res.statusCode).toBe(200);
    expect(res.json().agents).toEqual(['assistant', 'helper']);
    expect(res.json().problems).toHaveLength(1);
    expect(res.json().problems[0]).toContain('/maxIterations');
    expect(
      (await app.inject({ method: 'GET', url: '/agents/helper' })).json().agent.description,
    ).toBe('v1');
    const broken = await app.inject({ method: 'GET', url: '/agents/broken' });
    expect(broken.json().error.message).toContain('agents/broken/agent.json is invalid');

    writeAgent(t.home, 'helper', { ...TEST_AGENT, name: 'helper', description: 'v2' });
    await app.inject({ method: 'POST', url: '/agents/reload' });
    expect(
      (await app.inject({ method: 'GET', url: '/agents/helper' })).json().agent.description,
    ).toBe('v2');

    rmSync(join(t.home, 'agents', 'helper'), { recursive: true });
    await app.inject({ method: 'POST', url: '/agents/reload' });
    expect((await app.inject({ method: 'GET', url: '/agents/helper' })).statusCode).toBe(404);
  });

  it('refuses a body on reload', async () => {
    t = await startTestApp({ fake: null });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/reload',
      payload: { all: true },
    });
    expect(res.statusCode).toBe(400);
  });

  it('a running turn keeps the agent version it started with; the next turn gets the new one', async () => {
    t = await startTestApp({ agents: { assistant: { ...TEST_AGENT, model: 'model-v1' } } });
    const fake = t.fake!;
    fake.script(
      { tool_calls: [{ name: 'current_time', arguments: '{}' }], delayMs: 1_000 },
      { content: 'first turn done' },
      { content: 'second turn done' },
    );
    const turn = t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'what time is it?' },
    });
    await expect.poll(() => fake.requests.length).toBe(1);
    writeAgent(t.home, 'assistant', { ...TEST_AGENT, model: 'model-v2' });
    await t.app.server.inject({ method: 'POST', url: '/agents/reload' });
    const first = await turn;
    expect(first.statusCode).toBe(200);
    const second = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'again', sessionId: first.json().sessionId },
    });
    expect(second.statusCode).toBe(200);
    expect(fake.requests.map((r) => r.body.model)).toEqual(['model-v1', 'model-v1', 'model-v2']);
  });

  it('the file watch picks up a new agent without a request', async () => {
    t = await startTestApp({ fake: null, app: { watchAgents: true } });
    const home = t.home;
    writeAgent(home, 'watched', { ...TEST_AGENT, name: 'watched' });
    await expect
      .poll(
        async () =>
          (await t!.app.server.inject({ method: 'GET', url: '/agents/watched' })).statusCode,
        {
          timeout: 10_000,
          interval: 100,
        },
      )
      .toBe(200);
  });

  it('the watch is debounced: a burst of file writes is one reload, not one per write', async () => {
    const home = mkdtempSync(join(tmpdir(), 'cairn-watch-'));
    mkdirSync(join(home, 'agents'));
    const registry = new AgentRegistry([]);
    const reloads: string[][] = [];
    const reloader = new AgentReloader({
      agentsDir: join(home, 'agents'),
      registry,
      resolveTools: async () => undefined,
      log: (details) => reloads.push(details.agents as string[]),
    });
    try {
      reloader.watch();
      // Five agents written 30 ms apart, as an editor or a checkout would: well
      // inside the debounce window, but each in its own turn of the event loop.
      const names = ['a1', 'a2', 'a3', 'a4', 'a5'];
      for (const name of names) {
        writeAgent(home, name, { ...TEST_AGENT, name });
        await new Promise((resolve) => setTimeout(resolve, 30));
      }
      await expect
        .poll(() => registry.list().map((a) => a.name), { timeout: 10_000 })
        .toEqual(names);
      // Let any reload still scheduled by the burst fire before counting.
      await new Promise((resolve) => setTimeout(resolve, AGENT_WATCH_DEBOUNCE_MS * 3));
      // Without the debounce, each write would be a reload of its own; a stall
      // of the machine in mid-burst may split the burst in two, never more.
      expect(reloads.length).toBeGreaterThanOrEqual(1);
      expect(reloads.length).toBeLessThanOrEqual(2);
      expect(reloads.at(-1)).toEqual(names);
    } finally {
      reloader.close();
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('a watch that fails (a folder removed while Node reads it) watches again and reloads what it missed', async () => {
    const home = mkdtempSync(join(tmpdir(), 'cairn-watch-'));
    mkdirSync(join(home, 'agents'));
    const registry = new AgentRegistry([]);
    const watchers: FSWatcher[] = [];
    const reloader = new AgentReloader({
      agentsDir: join(home, 'agents'),
      registry,
      resolveTools: async () => undefined,
      log: () => {},
      watchFolder: (dir, onChange) => {
        const watcher = watch(dir, { recursive: true }, (_event, file) => onChange(file));
        watchers.push(watcher);
        return watcher;
      },
    });
    try {
      reloader.watch();
      // Node's recursive watch reports a folder that went while it read it as an error.
      watchers[0]!.emit('error', Object.assign(new Error('ENOENT'), { code: 'ENOENT' }));
      // Written while no watch runs: found by the reload that follows the new watch.
      writeAgent(home, 'missed', { ...TEST_AGENT, name: 'missed' });
      await expect
        .poll(() => registry.list().map((a) => a.name), { timeout: 10_000 })
        .toEqual(['missed']);
      expect(watchers).toHaveLength(2);
      // And the new watch sees what comes next.
      writeAgent(home, 'later', { ...TEST_AGENT, name: 'later' });
      await expect
        .poll(() => registry.list().map((a) => a.name), { timeout: 10_000 })
        .toEqual(['later', 'missed']);
    } finally {
      reloader.close();
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('a reload that finds broken files says so as a warning; a clean one at info', async () => {
    const home = mkdtempSync(join(tmpdir(), 'cairn-reload-warn-'));
    mkdirSync(join(home, 'agents'));
    const said: { level: string; message: string; problems?: unknown }[] = [];
    const reloader = new AgentReloader({
      agentsDir: join(home, 'agents'),
      registry: new AgentRegistry([]),
      resolveTools: async () => undefined,
      log: (details, message) => said.push({ level: 'info', message, problems: details.problems }),
      warn: (details, message) => said.push({ level: 'warn', message, problems: details.problems }),
    });
    try {
      writeAgent(home, 'good', { ...TEST_AGENT, name: 'good' });
      await reloader.reload();
      writeAgent(home, 'bad', { ...TEST_AGENT, name: 'bad', maxIterations: 1000 });
      await reloader.reload();
      expect(said.map((s) => s.level)).toEqual(['info', 'warn']);
      expect(said[1]!.message).toContain('1 problem(s)');
      expect(String(said[1]!.problems)).toContain('/maxIterations');
    } finally {
      reloader.close();
      rmSync(home, { recursive: true, force: true });
    }
  });
});

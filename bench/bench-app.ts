/**
 * A compiled Cairn app (from dist/) in a temp home with one agent, for the
 * bench rows that need their own app. `close` stops it and deletes the home.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as AppModule from '../src/app.js';
import type * as SettingsModule from '../src/config/settings.js';

const DIST = new URL('../../dist/', import.meta.url);
const DEMO_AGENT = new URL('../../agents/assistant/agent.json', import.meta.url);

/**
 * Writes the shipped demo agent (as users get it) and a cairn.json whose main
 * model is the fake at `baseURL` into `home`; returns the agent's name and
 * system prompt (what seeding needs).
 */
export function writeDemoHome(
  home: string,
  baseURL: string,
  server: Record<string, unknown> = {},
): { name: string; system: string } {
  const demo = readFileSync(DEMO_AGENT, 'utf8');
  const agent = JSON.parse(demo) as { name: string; system: string };
  mkdirSync(join(home, 'agents', agent.name), { recursive: true });
  writeFileSync(join(home, 'agents', agent.name, 'agent.json'), demo);
  writeFileSync(
    join(home, 'cairn.json'),
    JSON.stringify({
      server,
      database: { path: 'data/cairn.db' },
      models: { main: { baseURL, model: 'bench-model', maxRetries: 0, timeoutMs: 10_000 } },
    }),
  );
  return agent;
}

export async function startBenchApp(
  agent: { name: string } & Record<string, unknown>,
  cairnJson: Record<string, unknown> = {},
  /** Extra files of the agent's folder (path inside it → content), e.g. tool modules. */
  agentFiles: Record<string, string> = {},
): Promise<{ app: AppModule.CairnApp; close: () => Promise<void> }> {
  const { startApp } = (await import(new URL('app.js', DIST).href)) as typeof AppModule;
  const { loadSettings } = (await import(
    new URL('config/settings.js', DIST).href
  )) as typeof SettingsModule;
  const home = mkdtempSync(join(tmpdir(), 'cairn-bench-app-'));
  mkdirSync(join(home, 'agents', agent.name), { recursive: true });
  writeFileSync(join(home, 'agents', agent.name, 'agent.json'), JSON.stringify(agent));
  for (const [path, content] of Object.entries(agentFiles)) {
    mkdirSync(join(home, 'agents', agent.name, path, '..'), { recursive: true });
    writeFileSync(join(home, 'agents', agent.name, path), content);
  }
  writeFileSync(join(home, 'cairn.json'), JSON.stringify(cairnJson));
  const app = await startApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
  return {
    app,
    close: async () => {
      await app.close();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

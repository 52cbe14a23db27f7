/**
 * A compiled Cairn app (from dist/) in a temp home with one agent, for the
 * bench rows that need their own app. `close` stops it and deletes the home.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as AppModule from '../src/app.js';
import type * as SettingsModule from '../src/config/settings.js';

const DIST = new URL('../../dist/', import.meta.url);

export async function startBenchApp(
  agent: { name: string } & Record<string, unknown>,
  cairnJson: Record<string, unknown> = {},
): Promise<{ app: AppModule.CairnApp; close: () => Promise<void> }> {
  const { buildApp } = (await import(new URL('app.js', DIST).href)) as typeof AppModule;
  const { loadSettings } = (await import(
    new URL('config/settings.js', DIST).href
  )) as typeof SettingsModule;
  const home = mkdtempSync(join(tmpdir(), 'cairn-bench-app-'));
  mkdirSync(join(home, 'agents', agent.name), { recursive: true });
  writeFileSync(join(home, 'agents', agent.name, 'agent.json'), JSON.stringify(agent));
  writeFileSync(join(home, 'cairn.json'), JSON.stringify(cairnJson));
  const app = await buildApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
  return {
    app,
    close: async () => {
      await app.close();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

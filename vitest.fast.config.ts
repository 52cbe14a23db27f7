/**
 * The fast tier for the edit loop (`npm run test:fast`): every test that needs
 * nothing but Node — no Postgres, no spawned processes (the `cairn` bin, MCP
 * server children, tmux, Chromium, private Postgres clusters) and no build of
 * dist/ first. A test's tier is in its file name, and
 * test/repo/test-tiers.test.ts fails when a file needs more than its name says:
 *
 *   name.test.ts          Node only (this tier)
 *   name.pg.test.ts       a Postgres (the machine's, or the embedded one), in this process
 *   name.process.test.ts  real child processes and the build; may use Postgres too
 *
 * `npm test` (and CI) runs every tier.
 */
import { defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config.js';

/** The file-name suffixes of the tiers above this one. */
export const SLOWER_TIERS = ['**/*.pg.test.ts', '**/*.process.test.ts'];

export default mergeConfig(
  { ...base, test: { ...base.test, globalSetup: [] } },
  defineConfig({ test: { exclude: ['**/node_modules/**', ...SLOWER_TIERS] } }),
);

/**
 * The fast tier for the edit loop (`npm run test:fast`): every test that runs
 * in this process — no spawned `cairn` processes, MCP server children or
 * browser, and no build of dist/ first. `npm test` (and CI) runs everything.
 */
import { defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config.js';

/** Tests that spawn processes (the compiled bin, MCP servers, Chromium) or read the build. */
export const PROCESS_TESTS = [
  'test/cli/**',
  'test/process/**',
  'test/mcp/**',
  'test/console/browser.test.ts',
  'test/console/static.test.ts',
  'test/hardening/busy-database.test.ts',
  'test/hardening/daemon-lease-dead-owner.test.ts',
  'test/hardening/empty-api-key.test.ts',
  'test/hardening/one-server-per-database.test.ts',
  'test/hardening/postgres-restart.test.ts',
  'test/package.test.ts',
  'test/docs/docs-snippets.test.ts',
];

export default mergeConfig(
  { ...base, test: { ...base.test, globalSetup: [] } },
  defineConfig({ test: { exclude: ['**/node_modules/**', ...PROCESS_TESTS] } }),
);

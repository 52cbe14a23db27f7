import { defineConfig } from 'vitest/config';

/**
 * The test run Stryker repeats for each mutant (stryker.config.mjs): only the
 * test files that cover the mutated module, named in CAIRN_MUTATE_TESTS, and no
 * global build step (these tests import the sources, not dist/).
 */
const files = JSON.parse(process.env.CAIRN_MUTATE_TESTS ?? '[]') as string[];

export default defineConfig({
  test: {
    include: files.length > 0 ? files : ['test/llm/tokens.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});

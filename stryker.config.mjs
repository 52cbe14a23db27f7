// Mutation testing of the core modules (`npm run mutate`): each mutated line is
// run against the tests that cover that module, so one module's run stays
// within minutes. Not part of `npm test` or CI.
//
//   npm run mutate -- --mutate src/llm/tokens.ts     one module, its own tests
//   npm run mutate                                   every module below (slow: hours)
//   CAIRN_MUTATE_TESTS='["test/x.test.ts"]' npm run mutate -- --mutate src/y.ts
//                                                    only those test files (a quick, partial score)
//
// A module's tests are the files listed for it in TESTS_BY_MODULE; a run over
// several modules takes the union. Each selection keeps its own results in
// reports/mutation/<module>.incremental.json (and its report beside it), so a
// second run of a module only re-tests mutants whose code or tests changed,
// and a run of one module does not forget another's.

/** The core modules and the test files that cover each. */
export const TESTS_BY_MODULE = {
  'src/llm/tokens.ts': ['test/llm/tokens.test.ts', 'test/llm/tokens.mutation-kill.test.ts'],
  'src/compaction/cut.ts': [
    'test/compaction/cut.test.ts',
    'test/compaction/never-invalid.property.test.ts',
    'test/compaction/cut.mutation-kill.test.ts',
  ],
  'src/compaction/default-compaction.ts': [
    'test/compaction/api.pg.test.ts',
    'test/compaction/auto.pg.test.ts',
    'test/compaction/concurrency.test.ts',
    'test/compaction/compaction-cost.test.ts',
    'test/compaction/pending-call.pg.test.ts',
    'test/compaction/summary-sections.test.ts',
    'test/compaction/default-compaction.mutation-kill.test.ts',
    'test/compaction/default-compaction-spans.mutation-kill.test.ts',
    'test/compaction/default-compaction-direct.mutation-kill.test.ts',
    'test/tasks/taken-over-writes.test.ts',
  ],
  'src/llm/normalize-request.ts': [
    'test/llm/normalize-request.test.ts',
    'test/llm/normalize-request.mutation-kill.test.ts',
  ],
  'src/runtime/context-builder.ts': [
    'test/runtime/context-builder.test.ts',
    'test/runtime/build-context.test.ts',
    'test/runtime/session-reads.test.ts',
    'test/runtime/context-builder.mutation-kill.test.ts',
    'test/runtime/context-builder-cache.mutation-kill.test.ts',
  ],
  // The turn on its own (its mutation-kill file) plus the app-level check of
  // its session reads; the app's other chat tests only pass through it, and
  // take most of a minute a mutant.
  'src/runtime/turn.ts': [
    'test/runtime/turn.mutation-kill.test.ts',
    'test/runtime/session-reads.test.ts',
    'test/coordination/lock-lost-writes.pg.test.ts',
  ],
  'src/runtime/turn-outcome.ts': ['test/runtime/turn-outcome.test.ts'],
  // The loop on its own, against the fake provider. The app-level files
  // (loop, budgets, approval, ask_user) reach it through a whole server at
  // about 20 s a mutant, hours for its ~360 mutants on two cores; the kill
  // file checks the loop's part of what each of them asserts.
  'src/runtime/loop.ts': ['test/runtime/loop.mutation-kill.test.ts'],
  'src/recall/*.ts': [
    'test/recall/recall.pg.test.ts',
    'test/recall/recall-query.test.ts',
    'test/recall/recall-window.property.test.ts',
    'test/recall/lossy-recall.pg.test.ts',
    'test/recall/recall-query.mutation-kill.test.ts',
    'test/recall/automatic-recall.mutation-kill.test.ts',
  ],
  // SQLite recall's ranking: its own tests, and the store's recall tests
  // (the contract's order by word counts, session-local weights, both plans).
  'src/store/sqlite/recall-rank.ts': [
    'test/store/recall-rank.test.ts',
    'test/store/sqlite-store.test.ts',
  ],
  'src/http/ownership.ts': [
    'test/http/principals.test.ts',
    'test/subagents/subagent-owner.test.ts',
    'test/http/key-limits.test.ts',
    'test/http/ownership.mutation-kill.test.ts',
  ],
  'src/http/access.ts': ['test/http/principals.test.ts', 'test/http/access.mutation-kill.test.ts'],
  'src/http/principal.ts': [
    'test/http/principals.test.ts',
    'test/http/audit-events.test.ts',
    'test/http/principal.mutation-kill.test.ts',
  ],
};

/** The `--mutate` / `-m` value(s) given on the command line, if any. */
function requestedModules(argv) {
  const at = argv.findIndex((a) => a === '--mutate' || a === '-m');
  if (at >= 0 && argv[at + 1]) return argv[at + 1].split(',');
  const inline = argv.find((a) => a.startsWith('--mutate='));
  return inline ? inline.slice('--mutate='.length).split(',') : Object.keys(TESTS_BY_MODULE);
}

/** A `--mutate` value may carry a line range (`src/llm/tokens.ts:40-60`) or name a file a glob covers. */
function testsFor(module) {
  const file = module.replace(/:[\d:-]+$/, '');
  if (TESTS_BY_MODULE[file]) return TESTS_BY_MODULE[file];
  if (file.startsWith('src/recall/')) return TESTS_BY_MODULE['src/recall/*.ts'];
  throw new Error(
    `No test list for ${file}: add it to TESTS_BY_MODULE in stryker.config.mjs (the core modules are: ${Object.keys(TESTS_BY_MODULE).join(', ')}).`,
  );
}

const modules = requestedModules(process.argv);
const tests = [...new Set(modules.flatMap(testsFor))];
/** File-name stem of the selection's reports: `src/llm/tokens.ts` → `llm-tokens`. */
const stem =
  modules.length === Object.keys(TESTS_BY_MODULE).length
    ? 'all'
    : modules
        .map((m) =>
          m
            .replace(/^src\//, '')
            .replace(/\.ts(:[\d:-]+)?$/, '')
            .replace(/[^\w]+/g, '-'),
        )
        .join('+');
// Read by vitest.mutate.config.ts in the test runner processes (they inherit the
// environment). Set it yourself (a JSON list of test files) to run a narrower set.
process.env.CAIRN_MUTATE_TESTS ??= JSON.stringify(tests);

export default {
  $schema: './node_modules/@stryker-mutator/core/schema/stryker-schema.json',
  packageManager: 'npm',
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutate.config.ts', related: false },
  plugins: ['@stryker-mutator/vitest-runner'],
  mutate: Object.keys(TESTS_BY_MODULE),
  checkers: [],
  coverageAnalysis: 'perTest',
  concurrency: 1,
  timeoutMS: 60_000,
  timeoutFactor: 2,
  incremental: true,
  incrementalFile: `reports/mutation/${stem}.incremental.json`,
  reporters: ['clear-text', 'progress', 'html', 'json'],
  htmlReporter: { fileName: `reports/mutation/${stem}.html` },
  jsonReporter: { fileName: `reports/mutation/${stem}.json` },
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
  // The sandbox copies the project; node_modules is linked, never copied.
  ignorePatterns: ['dist', 'dist-bench', 'reports', 'data', 'console/dist', 'test-artifacts'],
  thresholds: { high: 90, low: 80, break: null },
};

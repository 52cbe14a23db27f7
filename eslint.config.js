// Type-aware lint: catches floating promises and misused async callbacks,
// which matter in a server that must not lose writes.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'dist.*/**',
      'dist-bench/**',
      'node_modules/**',
      'coverage/**',
      'agents/**/*.js',
      // Plain-JS fixture servers run by tests as child processes; not in the TS project.
      'test/fixtures/**/*.mjs',
      'test-artifacts/**',
      // Stryker's plain-JS config (npm run mutate); not in the TS project.
      'stryker.config.mjs',
      '.stryker-tmp/**',
      'reports/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': [
        'error',
        { checksVoidReturn: { arguments: false } },
      ],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_' },
      ],
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/only-throw-error': 'error',
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
  { files: ['eslint.config.js'], ...tseslint.configs.disableTypeChecked },
  // Checked by the root tsconfig (Node types); the console's own tsconfig is for the browser.
  { files: ['console/vite.config.ts'], ...tseslint.configs.disableTypeChecked },
);

import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['dist/', 'stoker-report/', 'node_modules/', '.stryker-tmp/', 'reports/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  {
    // The dashboard: plain browser JavaScript (an ES module, no build step); uPlot is a global.
    files: ['web/**/*.js'],
    languageOptions: { globals: { ...globals.browser, uPlot: 'readonly' } },
  },
  {
    // The core is sans-I/O: no Node APIs, no timers, no clock reads.
    files: ['src/core/**/*.ts'],
    rules: {
      'no-restricted-globals': ['error', 'setTimeout', 'setInterval', 'setImmediate', 'clearTimeout', 'process', 'performance', 'Buffer'],
      'no-restricted-properties': ['error', { object: 'Date', property: 'now' }, { object: 'Math', property: 'random' }],
      'no-restricted-imports': ['error', { patterns: ['node:*', '../sim/*', '../cli/*', 'fs', 'path'] }],
    },
  },
  // Dependencies point inward and down: nothing imports the CLI; the server does not know cluster
  // mode exists (the CLI chooses) and loads kind modules by URL only; the runtime and the
  // simulator know neither the server nor the kinds.
  ...[
    ['src/runtime/**/*.ts', ['../server/*', '../../server/*', '../cluster/*', '../../cluster/*', '../cli/*', '../../cli/*', '../kinds/*', '../../kinds/*']],
    ['src/sim/**/*.ts', ['../server/*', '../cluster/*', '../cli/*', '../kinds/*', '../runtime/*']],
    ['src/server/**/*.ts', ['../cluster/*', '../cli/*', '../kinds/*']],
    ['src/kinds/**/*.ts', ['../cluster/*', '../cli/*']],
    ['src/cluster/**/*.ts', ['../cli/*']],
    ['src/report/**/*.ts', ['../cli/*', '../server/*', '../cluster/*']],
    ['src/plan/**/*.ts', ['../cli/*', '../server/*', '../cluster/*', '../kinds/*', '../runtime/*']],
  ].map(([files, patterns]) => ({ files: [files], rules: { 'no-restricted-imports': ['error', { patterns }] } })),
);

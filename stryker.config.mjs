// @ts-check
// Mutation testing of the core (src/core) with StrykerJS: `npm run mutation`.
// The JSON report goes to reports/mutation/mutation.json (ignored by git). Against the core's
// own tests only (test/core): the simulator's tests kill many more of the pacers' mutants, but
// run too long to be run once per mutant.
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  packageManager: 'npm',
  testRunner: 'vitest',
  plugins: ['@stryker-mutator/vitest-runner'],
  vitest: {
    // Only the core's unit and property tests (test/core/**/*.test.ts).
    configFile: 'vitest.mutation.config.ts',
    related: true,
  },
  mutate: ['src/core/**/*.ts', '!src/core/index.ts'],
  coverageAnalysis: 'perTest',
  reporters: ['clear-text', 'progress', 'json'],
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  tempDirName: '.stryker-tmp',
  // Reports and other runs' sandboxes are not the project: copying them into a sandbox can race with their writers.
  ignorePatterns: ['/reports', '/.stryker-tmp*'],
  incremental: false,
};

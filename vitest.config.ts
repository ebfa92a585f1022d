import { defineConfig } from 'vitest/config';

// The model's tests (core, simulator, planner, tables) start no server and no process: they run
// first, two files at a time — beside the Redis faults' file, which mostly waits out locks and
// restarts (its project's name sorts it first, so that it starts at once). The rest start servers,
// processes, Redis and a browser, and time real waits: they run one file at a time after them, so
// one file's load does not skew another's clock.
const MODEL = ['test/core/**/*.test.ts', 'test/sim/**/*.test.ts', 'test/plan/**/*.test.ts', 'test/cli/cli.test.ts', 'test/cli/table.test.ts', 'test/cli/report.test.ts', 'test/report/report-html.test.ts'];
const FAULTS = ['test/cluster/redis-faults.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'faults', include: FAULTS, maxWorkers: 2, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'model', include: MODEL, maxWorkers: 2, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'services', include: ['test/**/*.test.ts'], exclude: [...MODEL, ...FAULTS], maxWorkers: 1, sequence: { groupOrder: 1 } } },
    ],
  },
});

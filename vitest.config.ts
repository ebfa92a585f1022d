import { defineConfig } from 'vitest/config';

// The model's tests (core, simulator, planner, tables) start no server and no process: they run
// first, two files at a time. The rest start servers, processes, Redis and a browser, and time real
// waits: they run one file at a time after them, so one file's load does not skew another's clock
// (the Redis faults' file beside the model's saved 35 s, and CI failed on a takeover's timing).
const MODEL = [
  'test/core/**/*.test.ts',
  'test/sim/**/*.test.ts',
  'test/plan/**/*.test.ts',
  'test/cli/{cli,table,report}.test.ts',
  'test/report/report-html.test.ts',
  // The service's parts on their own: no server, process or real wait.
  'test/runtime/{buffer-pool,lossless-json,ntt,runtime}.test.ts',
  'test/cluster/{keys,node-clock}.test.ts',
  'test/server/{config,failure-log,group-commit,journal,kind-module,metrics-gauges,pending-ends,progress,submit-record}.test.ts',
];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'model', include: MODEL, maxWorkers: 2, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'services', include: ['test/**/*.test.ts'], exclude: MODEL, maxWorkers: 1, sequence: { groupOrder: 1 } } },
    ],
  },
});

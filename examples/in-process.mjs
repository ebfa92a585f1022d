// A complete runnable example: a two-stage pipeline with in-process stages.
// Run it in a project that installed stoker (copied out of node_modules/stoker/examples), or in a
// checkout of stoker after `npm ci` (which builds dist/): node examples/in-process.mjs
import { Runtime } from 'stoker';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const runtime = new Runtime({
  devices: [{ workers: 2 }], // one accelerator with two pipelined workers
  budgetBytes: 64 * 2 ** 20, // memory for prepared-but-waiting items
  pacer: 'stoker',
  pacerOptions: { targetWaiting: 2 },
  workload: {
    // CPU preparation of one partition (slow).
    async prepare({ input, partition }) {
      await sleep(200);
      return new Float64Array(1024).fill(input.scale * (partition + 1));
    },
    // The device step: report the time the device really worked (here: all of it).
    async run({ prepared }) {
      const t0 = performance.now();
      await sleep(20);
      return { output: prepared.reduce((a, b) => a + b, 0), busyMs: performance.now() - t0 };
    },
    // The job's result from its partitions' outputs, in partition order.
    finish: ({ outputs }) => outputs.reduce((a, b) => a + b, 0),
  },
});

const memory = { prepareBytes: 8 * 1024, deviceBytes: 1024 };
const results = await Promise.all(
  [1, 2, 3].map((scale) => runtime.submit({ id: `job-${scale}`, kind: 'demo', partitions: 4, memory }, { scale })),
);
console.log('results', results); // [ 10240, 20480, 30720 ]

// A job that is cancelled rejects with a StokerError whose code says why.
const doomed = runtime.submit({ id: 'doomed', kind: 'demo', partitions: 4, memory }, { scale: 9 });
runtime.cancel('doomed');
await doomed.catch((e) => console.log('doomed:', e.code));

console.log('device completions', runtime.status().counters.deviceCompletions);
await runtime.close();

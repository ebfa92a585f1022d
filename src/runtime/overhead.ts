import { performance } from 'node:perf_hooks';
import { createPacer, Engine, type Command } from '../core/index.js';
import { Runtime, type Workload } from './runtime.js';
import { ThreadedWorkload } from './threaded.js';

export interface OverheadRow {
  what: string;
  items: number;
  ms: number;
  itemsPerSec: number;
  /** Wall time per item, µs. */
  usPerItem: number;
}

/** No-op stages in process: everything the runtime does per item is the runtime's own cost. */
const noop: Workload<null, null, null, number> = {
  prepare: () => Promise.resolve(null),
  run: () => Promise.resolve({ output: null, busyMs: 0 }),
  finish: (job) => job.outputs.length,
};

function row(what: string, items: number, ms: number): OverheadRow {
  return { what, items, ms, itemsPerSec: (items / ms) * 1000, usPerItem: (ms * 1000) / items };
}

/** Jobs of `partitions` through a Runtime; resolves when all are done. */
async function throughRuntime<P, O>(workload: Workload<null, P, O, unknown>, items: number, partitions: number): Promise<number> {
  const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced' });
  const t0 = performance.now();
  const jobs: Promise<unknown>[] = [];
  for (let j = 0; j < items / partitions; j++) jobs.push(rt.submit({ id: `j${j}`, kind: 'noop', partitions }, null));
  await Promise.all(jobs);
  const ms = performance.now() - t0;
  await rt.close();
  return ms;
}

/** The engine alone: the state machine's cost per item (submit, prepared, deviceDone, and their commands). */
function engineOnly(items: number, partitions: number): number {
  const e = new Engine({ devices: [{ workers: 2 }], pacer: createPacer('unpaced') });
  const t0 = performance.now();
  const queue: Command[] = [];
  let t = 0;
  for (let j = 0; j < items / partitions; j++) {
    queue.push(...e.apply({ type: 'submit', time: t, job: { id: `j${j}`, kind: 'noop', partitions } }));
    for (let c = queue.pop(); c; c = queue.pop()) {
      if (c.type === 'startPrepare') queue.push(...e.apply({ type: 'prepared', time: t, item: c.item.id, attempt: c.attempt }));
      else if (c.type === 'startDevice') queue.push(...e.apply({ type: 'deviceDone', time: t, item: c.item.id, attempt: c.attempt, busyMs: 0 }));
    }
    t += 1;
  }
  return performance.now() - t0;
}

/**
 * p-queue doing the same no-op work (prepare then run per item, concurrency 64): the baseline
 * users have today. p-queue is not a dependency of stoker: undefined when it is not installed.
 */
async function throughPQueue(items: number): Promise<number | undefined> {
  let PQueue: typeof import('p-queue').default;
  try {
    PQueue = (await import('p-queue')).default;
  } catch {
    return undefined;
  }
  const q = new PQueue({ concurrency: 64 });
  const t0 = performance.now();
  const all: Promise<unknown>[] = [];
  for (let i = 0; i < items; i++) {
    all.push(
      q.add(async () => {
        await Promise.resolve(null); // the no-op preparation
        await Promise.resolve(null); // the no-op device step
      }),
    );
  }
  await Promise.all(all);
  return performance.now() - t0;
}

/**
 * The runtime's own cost: no-op stages in process (≥ 50,000 items/s is the goal), the engine alone,
 * p-queue doing the same work (where it is installed: `npm install p-queue`), and no-op stages on
 * worker threads (message passing included).
 */
export async function measureOverhead(items = 50_000, threadedItems = 5_000, partitions = 10): Promise<OverheadRow[]> {
  // Warm the JIT once so the first row is not penalised.
  await throughRuntime(noop, 2_000, partitions);
  const rows = [row('runtime, in-process no-op stages', items, await throughRuntime(noop, items, partitions))];
  rows.push(row('engine alone (state machine only)', items, engineOnly(items, partitions)));
  const pq = await throughPQueue(items);
  if (pq !== undefined) rows.push(row('p-queue, same no-op work', items, pq));
  const threaded = new ThreadedWorkload<null, null, unknown>({
    prepareModule: new URL('./workloads/noop-prepare.js', import.meta.url).href,
    deviceModule: new URL('./workloads/noop-device.js', import.meta.url).href,
    bufferBytes: () => 64,
    finish: (job) => job.outputs.length,
    devices: [{ workers: 2 }],
    prepareThreads: 1,
    prepareConcurrency: 64,
  });
  rows.push(row('runtime, worker-thread no-op stages', threadedItems, await throughRuntime(threaded, threadedItems, partitions)));
  return rows;
}

/**
 * Preparation batches (issue 17, item 5: the field engine's batch collector), over 10 seeds; the
 * figures are printed (the README quotes them).
 * - prep-batch: sectors arriving one by one, synthesised in batches of up to 4 (6 s once + 8 s
 *   per sector, two at once, flushed after 30 s): the batches keep up with arrivals that the same
 *   kind prepared one sector per step (prep-batch-single) cannot, and the stoker pacer holds
 *   nothing back (items/s as unpaced).
 * - a burst of such jobs on a device that is the bottleneck: batches land 4 prepared items at
 *   once, and the stoker pacer still keeps the device busy with bounded waiting and memory.
 */
import { describe, expect, it } from 'vitest';
import { createPacer, type Command } from '../../src/core/index.js';
import { parseScenario, simulate, type Scenario } from '../../src/sim/index.js';
import { mean, scenario, SEEDS } from './seeds.js';

function run(s: Scenario, pacer: string, seed: number) {
  const sizes: number[] = [];
  const r = simulate(s, { seed, pacer: (o) => createPacer(pacer, o), onStep: (_e, cmds: readonly Command[]) => sizes.push(...cmds.flatMap((c) => (c.type === 'startPrepareBatch' ? [c.items.length] : []))) });
  return { m: r.metrics, sizes, done: r.jobsSubmitted - r.unfinishedJobs - r.failures.length };
}

const GiB = 1024 ** 3;
const burst = parseScenario({
  name: 'prep-batch-burst',
  targetWaiting: 4,
  maxPreparing: 8,
  kinds: {
    porep: {
      prepare: { type: 'lognormal', median: 4, sigma: 0.2 },
      prepareBatch: { maxItems: 4, maxWaitS: 30, fixed: { type: 'lognormal', median: 6, sigma: 0.1 } },
      memory: { prepareBytes: 14 * GiB, deviceBytes: 4 * GiB },
    },
  },
  devices: [{ workers: 2, service: { type: 'lognormal', median: 1, sigma: 0.2 }, batch: { maxItems: 4, fixed: { type: 'fixed', value: 4 } } }],
  arrivals: [{ atS: 0, jobs: 100, partitions: 4, kind: 'porep', everyS: 2 }],
});

describe('preparation batches, over 10 seeds', () => {
  it('prep-batch: batched synthesis keeps up where one sector per step falls behind; the stoker pacer holds nothing back', () => {
    const batched = SEEDS.map((seed) => run(scenario('prep-batch'), 'stoker', seed));
    const unpaced = SEEDS.map((seed) => run(scenario('prep-batch'), 'unpaced', seed));
    const single = SEEDS.map((seed) => run(scenario('prep-batch-single'), 'stoker', seed));
    const perSec = mean(batched.map((r) => r.m.itemsPerSec as number));
    const unpacedPerSec = mean(unpaced.map((r) => r.m.itemsPerSec as number));
    const singlePerSec = mean(single.map((r) => r.m.itemsPerSec as number));
    const p99 = mean(batched.map((r) => r.m.jobLatencyP99Ms as number));
    const singleP99 = mean(single.map((r) => r.m.jobLatencyP99Ms as number));
    const size = mean(batched.flatMap((r) => r.sizes));
    console.log(
      `prep-batch: stoker ${perSec.toFixed(4)} items/s (unpaced ${unpacedPerSec.toFixed(4)}, ratio ${(perSec / unpacedPerSec).toFixed(4)}) vs ${singlePerSec.toFixed(4)} one sector per step (× ${(perSec / singlePerSec).toFixed(2)}); p99 job latency ${(p99 / 1000).toFixed(1)} s vs ${(singleP99 / 1000).toFixed(1)} s; mean preparation batch ${size.toFixed(2)} of 4`,
    );
    // Arrivals are 0.18/s: batches keep up, single steps (2 at once, 14 s each: 0.143/s) cannot.
    expect(perSec).toBeGreaterThan(0.17);
    expect(singlePerSec).toBeLessThan(0.15);
    expect(perSec / singlePerSec).toBeGreaterThan(1.15);
    expect(perSec / unpacedPerSec).toBeGreaterThanOrEqual(0.99);
    expect(p99).toBeLessThan(singleP99 / 2);
    expect(size).toBeGreaterThan(2);
    for (const r of [...batched, ...single]) expect(r.done).toBe(r.m.jobsDone);
    expect(single.every((r) => r.sizes.every((n) => n === 1))).toBe(true);
  });

  it('a burst on a device-bound pipeline: the device stays busy, waiting stays near the target plus a batch, memory far below unpaced', () => {
    const stoker = SEEDS.map((seed) => run(burst, 'stoker', seed));
    const unpaced = SEEDS.map((seed) => run(burst, 'unpaced', seed));
    const tp = stoker.map((r) => r.m.throughputRatio as number);
    const waiting = mean(stoker.map((r) => r.m.waitingMean as number));
    const peak = mean(stoker.map((r) => r.m.peakMemoryBytes));
    const unpacedPeak = mean(unpaced.map((r) => r.m.peakMemoryBytes));
    console.log(`prep-batch-burst: stoker throughput ${mean(tp).toFixed(4)} (min ${Math.min(...tp).toFixed(4)}), waiting mean ${waiting.toFixed(2)} for target 4 (batches of 4), peak memory ${(peak / GiB).toFixed(0)} GiB vs unpaced ${(unpacedPeak / GiB).toFixed(0)} GiB`);
    expect(mean(tp)).toBeGreaterThanOrEqual(0.98);
    expect(waiting).toBeLessThanOrEqual(4 + 4);
    expect(peak).toBeLessThan(unpacedPeak / 2);
  });

  it('a batch pays its fixed part once, plus each item its own: one job of 4 prepares in 6 + 4 × 8 s', () => {
    const s = parseScenario({
      name: 'exact',
      kinds: { k: { prepare: { type: 'fixed', value: 8 }, prepareBatch: { maxItems: 4, fixed: { type: 'fixed', value: 6 } } } },
      devices: [{ workers: 1, service: { type: 'fixed', value: 1 } }],
      arrivals: [{ atS: 0, jobs: 1, partitions: 5, kind: 'k' }],
    });
    const done: number[] = [];
    simulate(s, { pacer: (o) => createPacer('unpaced', o), onStep: (e) => e.type === 'prepareBatchDone' && done.push(e.time) });
    // Batches of 4 and 1, concurrently: 38 s and 14 s.
    expect(done).toEqual([14_000, 38_000]);
  });
});

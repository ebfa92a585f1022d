/**
 * Batching devices (issue 17), over 10 seeds on the built-in scenarios; the figures are printed
 * (the README quotes them).
 * - batch-infer: a device whose batch costs 0.2 s + 10 ms per item, up to 16: the stoker pacer
 *   keeps it at ≥ 0.98 of its capacity at full batches (88.9 items/s) — planned at the batch
 *   sizes it happens to get, a pacer feeds a batching device only what it drains at those sizes.
 * - the pacer's fit of busy time per batch (a + b·n) gives the time per item exactly on a
 *   noise-free affine device, and within 5 % of the truth on batch-infer's noisy one, at every
 *   batch size the run reached.
 * - batch-infer-60 (arrivals at 60 % of capacity): nothing held back, latency as with unpaced.
 */
import { describe, expect, it } from 'vitest';
import { createPacer, type Pacer } from '../../src/core/index.js';
import { parseScenario, simulate, type Scenario } from '../../src/sim/index.js';
import { mean, scenario, SEEDS } from './seeds.js';

const run = (name: string, pacer: string, seed: number) => simulate(scenario(name), { seed, pacer: (o) => createPacer(pacer, o) }).metrics;

/** batch-infer's device: lognormal parts, so their means are median × e^(σ²/2), in ms. */
const FIXED_MS = 200 * Math.exp(0.1 ** 2 / 2);
const ITEM_MS = 10 * Math.exp(0.2 ** 2 / 2);

describe('batching devices, over 10 seeds', () => {
  it('batch-infer: throughput ≥ 0.98 of the capacity at full batches; several times the same device one item at a time', () => {
    const batched = SEEDS.map((seed) => run('batch-infer', 'stoker', seed));
    const single = SEEDS.map((seed) => run('batch-infer-single', 'stoker', seed));
    const tp = batched.map((m) => m.throughputRatio as number);
    const size = mean(batched.map((m) => m.batchItemsMean as number));
    // The capacity at the batch size the run achieved (≤ the full-batch one the ratio is measured against).
    const atSize = (2 * size * 1000) / (FIXED_MS + size * ITEM_MS);
    const perSec = mean(batched.map((m) => m.itemsPerSec as number));
    const singlePerSec = mean(single.map((m) => m.itemsPerSec as number));
    console.log(
      `batch-infer: stoker throughput ${mean(tp).toFixed(4)} of full-batch capacity (min ${Math.min(...tp).toFixed(4)}), ${(perSec / atSize).toFixed(4)} of the capacity at the achieved mean batch ${size.toFixed(2)}; ${perSec.toFixed(1)} items/s vs ${singlePerSec.toFixed(2)} one at a time (× ${(perSec / singlePerSec).toFixed(2)})`,
    );
    expect(mean(tp)).toBeGreaterThanOrEqual(0.98);
    expect(perSec / atSize).toBeGreaterThanOrEqual(0.98);
    expect(perSec / singlePerSec).toBeGreaterThan(8);
    // One at a time, the same pacer is as close to that device's (much lower) capacity.
    expect(mean(single.map((m) => m.throughputRatio as number))).toBeGreaterThanOrEqual(0.98);
  });

  /** Runs a scenario; the pacer's batch fit after `at` batches (and at the end), with the batch sizes started by then. */
  function fits(s: Scenario, seed: number, at: readonly number[]): { fit: { fixedMs: number; perItemMs: number } | null | undefined; sizes: number[] }[] {
    let pacer: Pacer | undefined;
    const reached = new Set<number>();
    let batches = 0;
    const out: { fit: { fixedMs: number; perItemMs: number } | null | undefined; sizes: number[] }[] = [];
    simulate(s, {
      seed,
      pacer: (o) => (pacer = createPacer('stoker', o)),
      onStep: (_e, cmds) => {
        for (const c of cmds) {
          if (c.type !== 'startBatch') continue;
          reached.add(c.items.length);
          if (at.includes(++batches)) out.push({ fit: pacer?.state().devices?.[0]?.batch, sizes: [...reached] });
        }
      },
    });
    expect(batches).toBeGreaterThan(Math.max(...at));
    out.push({ fit: pacer?.state().devices?.[0]?.batch, sizes: [...reached] });
    return out;
  }

  /** The worst relative error of the fitted time per item over the sizes reached, against a + b·n. */
  function worstError(f: ReturnType<typeof fits>[number], fixedMs: number, itemMs: number): number {
    if (!f.fit) return Infinity;
    const { fixedMs: a, perItemMs: b } = f.fit;
    return Math.max(...f.sizes.map((n) => Math.abs((a + b * n) / (fixedMs + n * itemMs) - 1)));
  }

  it('on an affine device (0.2 s + 10 ms per item, no noise) the fitted time per item is exact at every batch size reached, from 30 batches on', () => {
    const base = scenario('batch-infer');
    const affine = parseScenario({ ...base, name: 'affine', devices: [{ ...base.devices[0], service: { type: 'fixed', value: 0.01 }, batch: { maxItems: 16, fixed: { type: 'fixed', value: 0.2 } } }] });
    const worst = Math.max(...SEEDS.flatMap((seed) => fits(affine, seed, [30, 100, 300, 1000]).map((f) => worstError(f, 200, 10))));
    console.log(`batch fit, affine device: worst error of the time per item over the batch sizes reached ${(worst * 100).toFixed(3)} %`);
    expect(worst).toBeLessThanOrEqual(0.005);
  });

  it('on batch-infer (both parts noisy) it is within 5 % at every batch size reached by the end of the run', () => {
    const runs = SEEDS.map((seed) => fits(scenario('batch-infer'), seed, [300]));
    const mid = Math.max(...runs.map((r) => worstError(r[0] as ReturnType<typeof fits>[number], FIXED_MS, ITEM_MS)));
    const end = Math.max(...runs.map((r) => worstError(r[1] as ReturnType<typeof fits>[number], FIXED_MS, ITEM_MS)));
    // (After 300 batches the few small batches of the start fix the fixed part less well: printed, not bounded.)
    console.log(`batch fit, batch-infer: worst error of the time per item over the batch sizes reached: ${(end * 100).toFixed(2)} % at the end, ${(mid * 100).toFixed(2)} % after 300 batches`);
    expect(end).toBeLessThanOrEqual(0.05);
  });

  it('targetBatches sets the waiting target in batches: 2 batches keep about one batch more waiting than the default', () => {
    const base = scenario('batch-infer');
    const two = parseScenario({ ...base, name: 'batch-infer-2', pacerOptions: { targetBatches: 2 } });
    const waiting = (s: Scenario) => mean(SEEDS.map((seed) => simulate(s, { seed, pacer: (o) => createPacer('stoker', o) }).metrics.waitingMean as number));
    const [dflt, batches] = [waiting(base), waiting(two)];
    console.log(`batch-infer waiting mean: ${dflt.toFixed(2)} (targetWaiting 4 + half a batch), ${batches.toFixed(2)} with targetBatches 2 (32 + half a batch)`);
    // The waiting target is 4 + 8 = 12 items by default, 32 + 8 = 40 with two batches.
    expect(batches - dflt).toBeGreaterThan(16);
  });

  it('batch-infer-60: below capacity nothing is held back (throughput and p99 latency as with unpaced)', () => {
    const ratio = SEEDS.map((seed) => (run('batch-infer-60', 'stoker', seed).itemsPerSec as number) / (run('batch-infer-60', 'unpaced', seed).itemsPerSec as number));
    const p99 = SEEDS.map((seed) => (run('batch-infer-60', 'stoker', seed).jobLatencyP99Ms as number) / (run('batch-infer-60', 'unpaced', seed).jobLatencyP99Ms as number));
    console.log(`batch-infer-60: stoker / unpaced items/s ${mean(ratio).toFixed(4)}, p99 job latency × ${mean(p99).toFixed(3)}`);
    expect(mean(ratio)).toBeGreaterThanOrEqual(0.995);
    expect(mean(p99)).toBeLessThanOrEqual(1.1);
  });
});

describe('two kinds on one batching device, over 10 seeds', () => {
  // Kind a costs 10 ms per item, kind b 40 ms (kinds.b.service), both in batches of up to 16 after a 0.2 s fixed part; blocks of 500 of each arrive in turn.
  const mixed = parseScenario({
    name: 'batch-two-kinds',
    targetWaiting: 4,
    kinds: {
      a: { prepare: { type: 'lognormal', median: 2, sigma: 0.3 } },
      b: { prepare: { type: 'lognormal', median: 2, sigma: 0.3 }, service: { type: 'lognormal', median: 0.04, sigma: 0.2 } },
    },
    devices: [{ workers: 2, service: { type: 'lognormal', median: 0.01, sigma: 0.2 }, batch: { maxItems: 16, fixed: { type: 'lognormal', median: 0.2, sigma: 0.1 } } }],
    arrivals: [
      { atS: 0, jobs: 30, partitions: 500, kind: 'a', everyS: 10 },
      { atS: 5, jobs: 30, partitions: 500, kind: 'b', everyS: 10 },
    ],
  });
  /** Each kind's capacity at full batches, items/s: 2 workers × 16 ÷ (fixed + 16 × its time per item), lognormal means. */
  const truth = [10, 40].map((ms) => ((2 * 16) / (FIXED_MS + 16 * ms * Math.exp(0.2 ** 2 / 2))) * 1000);

  it("the pacer fits each kind's batches apart: its capacity estimate for each is within 3 % of the truth", () => {
    let worst = 0;
    const ratios: number[] = [];
    for (const seed of SEEDS) {
      let pacer: Pacer | undefined;
      const m = simulate(mixed, { seed, pacer: (o) => (pacer = createPacer('stoker', o)) }).metrics;
      const kinds = (pacer as Pacer).state().kinds ?? [];
      kinds.forEach((k, i) => (worst = Math.max(worst, Math.abs((k.estimatedPerSec as number) / (truth[i] as number) - 1))));
      ratios.push((m.itemsPerSec as number) / (simulate(mixed, { seed, pacer: (o) => createPacer('unpaced', o) }).metrics.itemsPerSec as number));
    }
    console.log(`batch-two-kinds: worst capacity estimate error ${(worst * 100).toFixed(2)} % (truth ${truth.map((t) => t.toFixed(1)).join(' and ')} items/s); stoker items/s ${mean(ratios).toFixed(3)} of unpaced's (min ${Math.min(...ratios).toFixed(3)}: short batches when the kinds take turns)`);
    expect(worst).toBeLessThanOrEqual(0.03);
  });
});

/**
 * The stoker pacer in harder regimes (issue 12), each bound over 10 seeds on a built-in scenario;
 * the figures are printed (the README quotes them).
 * - worker-flap: a worker lost and back within one preparation latency (30 s of every minute);
 *   the pacer plans for the workers of the last latency, so throughput stays ≥ 0.97 (it was 0.87).
 * - budget-binding, budget-bound: when the memory budget is the limit, the pacer is no reason to
 *   finish less: within 0.5 % of `unpaced` under the same budget.
 * - bimodal-service, heavy-tail-service: the mean rate estimate within 2 % of the true rate; the
 *   device busy ≥ 99.5 % of the window, throughput ≥ 0.985 of unpaced's and ≥ 0.98 of capacity;
 *   the waiting spread, over 100 seeds against an open-loop dispatcher's at the true capacity on
 *   the same seeds, printed and held within 1.25 × of it (the issue's bar, no more than it, is not met).
 * - mixed-kinds: kinds 4× apart on one device, in blocks: per-kind estimates, throughput ≥ 0.98.
 * - zk-blocks (inline, from a user trial): kinds of different sizes in blocks under a binding
 *   budget: ≥ 0.985 of unpaced's throughput under the same budget (the issue asks 0.995: not met here).
 * - mixed-latency: kinds that differ in preparation latency too (5 s to 50 s), in blocks: the plan
 *   covers the slowest queued kind's latency, throughput ≥ 0.98 (0.91 planned on the mean
 *   latency) with at most 0.6 × unpaced's peak memory.
 * - device-thrash: 4 workers, fewer finish more; the pacer runs the best k (≥ 0.98 of its capacity).
 * - prep-knee, prep-plateau: preparations that slow each other past 24 at once; the limiter
 *   finds the knee (≥ 95 % of the best fixed cap once learned, at most 1.25 × the knee preparing).
 * - prep-soft-knee: throughput still rises past the knee, slowly; the limiter does not walk down
 *   the slope (≥ 95 % of the best fixed cap over the second half of the steady window).
 * - a steep knee (prep-knee's stages, (n / 24)²): the limiter takes over before the first fill
 *   reaches the memory budget (≥ 93 % of the best fixed cap over the window's second half).
 * - a knee the first fill runs through, under Poisson arrivals and a burst: the limiter takes over
 *   on what finishes (≥ 1.5 × unpaced's speed, ≤ 0.15 × its peak memory).
 * - two kinds 3 × apart in alternating blocks past a knee: the caps are measured in each kind's
 *   own latency (≥ 0.6 of the best fixed cap; the mix's latencies read the blocks, not the caps).
 * - heavy-tailed preparation latencies (lognormal σ 1) and no contention: the limiter lets go of
 *   the caps it takes on the quick ones' floor (≥ 0.94 of unpaced's throughput on average, ≥ 0.7 on each seed).
 * - remembered rates: a burst on a pacer started from priors (what a restarted server remembers)
 *   runs like the same burst on a warm pacer (burst-after-idle, whose first job taught it).
 */
import { describe, expect, it } from 'vitest';
import { createPacer, type Pacer } from '../../src/core/index.js';
import { parseScenario, SCENARIOS, simulate, type Dist } from '../../src/sim/index.js';
import { mean, scenario, SEEDS } from './seeds.js';

/**
 * A pacer told the truth at the first completion: 8 items first (as stoker bootstraps with 2
 * workers and a target of 6), then 100 in flight (preparing, waiting, on the device) from the
 * first completion on — a base stock that keeps the seed-stage device of the skewed scenarios
 * busy throughout the window. What a pacer that must measure before it fills can reach at best.
 */
function informedPacer(): Pacer {
  let sent = 0;
  let told = false;
  return {
    name: 'informed',
    observe: (s) => {
      told ||= s.deviceCompletions > 0;
    },
    nextDispatchAt: (s) => (told ? (s.preparing + s.waiting + s.onDevice < 100 ? s.now : Infinity) : sent < 8 ? s.now : Infinity),
    onDispatch: () => {
      sent++;
    },
    state: () => ({ mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} }),
  };
}

/** Dispatches at a fixed rate (items/s) from its first look on, whatever happens. */
function openLoopPacer(perSec: number): Pacer {
  let sent = 0;
  let from = NaN;
  return {
    name: 'open-loop',
    observe: (s) => {
      if (Number.isNaN(from)) from = s.now;
    },
    nextDispatchAt: () => from + (sent * 1000) / perSec,
    onDispatch: () => {
      sent++;
    },
    state: () => ({ mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} }),
  };
}

const throughput = (name: string, pacer: string, seed: number) => throughput2(scenario(name), pacer, seed);
function throughput2(s: ReturnType<typeof scenario>, pacer: string, seed: number): number {
  return simulate(s, { seed, pacer: (o) => createPacer(pacer, o) }).metrics.throughputRatio as number;
}

describe('the stoker pacer in harder regimes, over 10 seeds', () => {
  it('worker-flap: throughput ≥ 0.97 with one worker down half of every minute', () => {
    const tp = SEEDS.map((seed) => throughput('worker-flap', 'stoker', seed));
    console.log(`worker-flap: stoker throughput mean ${mean(tp).toFixed(4)}, min ${Math.min(...tp).toFixed(4)}`);
    expect(mean(tp)).toBeGreaterThanOrEqual(0.97);
  });

  for (const name of ['budget-binding', 'budget-bound']) {
    it(`${name}: within 0.5 % of unpaced under the same budget`, () => {
      const ratios = SEEDS.map((seed) => throughput(name, 'stoker', seed) / throughput(name, 'unpaced', seed));
      console.log(`${name}: stoker / unpaced throughput mean ${mean(ratios).toFixed(4)}, min ${Math.min(...ratios).toFixed(4)}`);
      expect(mean(ratios)).toBeGreaterThanOrEqual(0.995);
    });
  }

  // Both workers busy: each item takes 1.2 × its own time, so the saturated rate is 2 / (1.2 · mean).
  for (const [name, meanS] of [
    ['bimodal-service', 1],
    ['heavy-tail-service', 0.6 * Math.exp(0.5)],
  ] as const) {
    it(`${name}: the mean rate estimate is within 2 % of the true rate`, () => {
      const truth = 2 / (1.2 * meanS);
      const ratios = SEEDS.map((seed) => {
        let pacer: ReturnType<typeof createPacer> | undefined;
        let sum = 0;
        let n = 0;
        simulate(scenario(name), {
          seed,
          pacer: (o) => (pacer = createPacer('stoker', o)),
          onStep: (e) => {
            const rate = pacer?.state().ratePerSec;
            // After the first few hundred completions (the estimate's own averaging window).
            if (e.time > 200_000 && rate) {
              sum += rate;
              n++;
            }
          },
        });
        return sum / n / truth;
      });
      console.log(`${name}: estimate / true rate mean ${mean(ratios).toFixed(4)}, each ${ratios.map((r) => r.toFixed(3)).join(' ')}`);
      expect(Math.abs(mean(ratios) - 1)).toBeLessThanOrEqual(0.02);
    });

    // throughputRatio is of the capacity (completions in the steady window ÷ capacity integrated
    // over it). Which items fall in the window sets it as much as the pacer does, with lognormal σ 1
    // by ±2 % a seed: a pacer told the truth at the first completion (informedPacer) keeps the
    // device busy throughout the window and reaches 0.983 of capacity on heavy-tail-service over
    // these seeds, `unpaced` (all 1000 items at t = 0: its device ~60 items further on when the
    // window opens) 0.990. The issue's 0.985 of capacity is out of reach of any pacer that measures
    // before it fills; bounded instead: ≥ 0.98 of capacity, ≥ 0.985 of unpaced's, and the device
    // busy ≥ 99.5 % of the window (the pacer's own part).
    it(`${name}: throughput ≥ 0.985 of unpaced's and ≥ 0.98 of capacity, the device busy ≥ 99.5 % of the window`, () => {
      const runs = SEEDS.map((seed) => {
        const s = simulate(scenario(name), { seed, pacer: (o) => createPacer('stoker', o) }).metrics;
        return { tp: s.throughputRatio as number, unpaced: throughput(name, 'unpaced', seed), occupancy: s.occupancy as number, waitingMean: s.waitingMean as number, waitingStd: s.waitingStd as number, peakGiB: s.peakMemoryBytes / 1024 ** 3 };
      });
      const tp = mean(runs.map((r) => r.tp));
      const ofUnpaced = mean(runs.map((r) => r.tp / r.unpaced));
      const occupancy = mean(runs.map((r) => r.occupancy));
      const informed = mean(SEEDS.map((seed) => simulate(scenario(name), { seed, pacer: informedPacer }).metrics.throughputRatio as number));
      console.log(
        `${name}: stoker throughput ${tp.toFixed(4)} of capacity (unpaced ${mean(runs.map((r) => r.unpaced)).toFixed(4)}, informed after the first completion ${informed.toFixed(4)}), ${ofUnpaced.toFixed(4)} of unpaced's; occupancy ${occupancy.toFixed(4)}; waiting ${mean(runs.map((r) => r.waitingMean)).toFixed(1)} ± ${mean(runs.map((r) => r.waitingStd)).toFixed(1)}; peak memory ${mean(runs.map((r) => r.peakGiB)).toFixed(0)} GiB (max ${Math.max(...runs.map((r) => r.peakGiB)).toFixed(0)})`,
      );
      expect(ofUnpaced).toBeGreaterThanOrEqual(0.985);
      expect(tp).toBeGreaterThanOrEqual(0.98);
      expect(occupancy).toBeGreaterThanOrEqual(0.995);
    });

    // The issue's reference for the waiting spread: an open-loop dispatcher at the true capacity
    // (from t = 0), seed by seed. Over 10 seeds either one reads ±1–1.5 from which items fall in
    // the window (heavy-tail-service: 13.2 against 13.5 on seeds 1–10, 15.3 against 12.1 on
    // 31–40), so over 100, paired. The open loop's is the smaller mostly where its queue runs dry:
    // its device idles 2–3 % of the window, the pacer's under 0.5 %.
    it(`${name}: the waiting spread over 100 seeds, against an open-loop dispatcher's at the true capacity`, () => {
      const seeds = Array.from({ length: 100 }, (_, i) => i + 1);
      const pairs = seeds.map((seed) => {
        const own = simulate(scenario(name), { seed, pacer: (o) => createPacer('stoker', o) }).metrics;
        const open = simulate(scenario(name), { seed, pacer: () => openLoopPacer(2 / (1.2 * meanS)) }).metrics;
        return { own: own.waitingStd as number, open: open.waitingStd as number, openBusy: open.occupancy as number, ownBusy: own.occupancy as number };
      });
      const own = mean(pairs.map((p) => p.own));
      const open = mean(pairs.map((p) => p.open));
      const diffs = pairs.map((p) => p.own - p.open);
      const d = mean(diffs);
      const se = Math.sqrt(mean(diffs.map((x) => (x - d) ** 2)) / (diffs.length - 1));
      console.log(
        `${name}: waiting spread over 100 seeds ${own.toFixed(2)} (device busy ${mean(pairs.map((p) => p.ownBusy)).toFixed(4)}), open loop at the true capacity ${open.toFixed(2)} (busy ${mean(pairs.map((p) => p.openBusy)).toFixed(4)}): ${(own / open).toFixed(3)} ×, paired difference ${d.toFixed(2)} ± ${se.toFixed(2)} (one standard error)`,
      );
      // A guard on what is measured (1.09 × and 1.17 ×), not the issue's bar (≤ 1 ×: not met).
      expect(own / open).toBeLessThanOrEqual(1.25);
    });
  }
});

describe('other skews than the built-in ones', () => {
  // heavy-tail-service's stages with other device-time distributions, each of mean 1 s: the device
  // busy ≥ 99 % of the steady window over 10 seeds (0.948–0.976 before the skew was learned from
  // the first samples on, with every sample). The Pareto one is a table of 200 quantiles.
  const pareto = (a: number) => Array.from({ length: 200 }, (_, i) => ((a - 1) / a) * (1 - (i + 0.5) / 200) ** (-1 / a));
  const skews: [string, Dist][] = [
    ['lognormal σ 0.5', { type: 'lognormal', median: Math.exp(-0.125), sigma: 0.5 }],
    ['lognormal σ 1.5', { type: 'lognormal', median: Math.exp(-1.125), sigma: 1.5 }],
    ['bimodal 90/10 (0.5 s / 5.5 s)', { type: 'empirical', values: [...Array.from({ length: 9 }, () => 0.5), 5.5] }],
    ['Pareto α 1.8', { type: 'empirical', values: pareto(1.8) }],
  ];
  for (const [name, service] of skews) {
    it(`${name}: the device busy ≥ 99 % of the window`, () => {
      const s = parseScenario({
        name,
        targetWaiting: 6,
        kinds: { proof: { prepare: { type: 'uniform', min: 30, max: 50 }, memory: { prepareBytes: 2 ** 30, deviceBytes: 128 * 2 ** 20 } } },
        devices: [{ workers: 2, service, contention: [1, 1.2] }],
        arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
      });
      const runs = SEEDS.map((seed) => simulate(s, { seed, pacer: (o) => createPacer('stoker', o) }).metrics);
      const occupancy = mean(runs.map((m) => m.occupancy as number));
      console.log(`${name}: stoker occupancy ${occupancy.toFixed(4)}, throughput ${mean(runs.map((m) => m.throughputRatio as number)).toFixed(4)} of capacity, waiting ${mean(runs.map((m) => m.waitingMean as number)).toFixed(1)} ± ${mean(runs.map((m) => m.waitingStd as number)).toFixed(1)}, peak memory ${mean(runs.map((m) => m.peakMemoryBytes / 2 ** 30)).toFixed(0)} GiB`);
      expect(occupancy).toBeGreaterThanOrEqual(0.99);
    });
  }
});

describe('kinds on the device', () => {
  // mixed-kinds: heavy items take 4 s of device time on average, light ones 1 s (×1.2 with both
  // workers busy), in blocks of 30 partitions, half and half.
  const truth: Record<string, number> = { heavy: 2 / (4 * 1.2), light: 2 / (1 * 1.2) };
  const mixOf = (rate: (kind: string) => number) => 1 / (0.5 / rate('heavy') + 0.5 / rate('light'));

  it('mixed-kinds: throughput ≥ 0.98 of the mix’s capacity; the capacity estimate for the mix within 5 % ≥ 90 % of the steady window', () => {
    const rows = SEEDS.map((seed) => {
      let pacer: ReturnType<typeof createPacer> | undefined;
      // The mix estimate after each step, then integrated over the steady window.
      const steps: [number, number][] = [];
      const r = simulate(scenario('mixed-kinds'), {
        seed,
        pacer: (o) => (pacer = createPacer('stoker', o)),
        onStep: (e) => {
          const kinds = new Map((pacer?.state().kinds ?? []).map((k) => [k.name, k.estimatedPerSec ?? NaN]));
          steps.push([e.time, mixOf((k) => kinds.get(k) ?? NaN)]);
        },
      });
      const { fromMs, toMs } = r.window;
      let inside = 0;
      steps.forEach(([t, estimate], i) => {
        const lo = Math.max(t, fromMs);
        const hi = Math.min(steps[i + 1]?.[0] ?? t, toMs);
        if (hi > lo && Math.abs(estimate / mixOf((k) => truth[k] as number) - 1) <= 0.05) inside += hi - lo;
      });
      return { tp: r.metrics.throughputRatio as number, inside: inside / (toMs - fromMs) };
    });
    console.log(`mixed-kinds: stoker throughput mean ${mean(rows.map((r) => r.tp)).toFixed(4)}, min ${Math.min(...rows.map((r) => r.tp)).toFixed(4)}; share of the window with the mix estimate within 5 %: ${rows.map((r) => r.inside.toFixed(3)).join(' ')}`);
    expect(mean(rows.map((r) => r.tp))).toBeGreaterThanOrEqual(0.98);
    // Within 5 % for 90 % of the seeds' windows together, and most of each: the time a seed spends
    // outside is the noise of its last samples of a block (uniform ± 12.5 % items, a 0.3 weight),
    // held through the other kind's block, so one seed in ten may read 0.83–0.90. Over 30 seeds
    // the mean share was 0.944 both before and after the plan took each kind's latency (one seed
    // below 0.9 before, three after); 0.945 and 0.942 before and after the dispatch that keeps the
    // devices from running dry at a heavier kind's turn (three below 0.9 in each, the least 0.861
    // and 0.826: the same spread, other seeds).
    expect(mean(rows.map((r) => r.inside))).toBeGreaterThanOrEqual(0.9);
    for (const r of rows) expect(r.inside).toBeGreaterThanOrEqual(0.8);
  });

  it('mixed-kinds: the capacity stated (state().ratePerSec, the capacity metric) is of the mix, not the rate of the kind dispatched next', () => {
    // It was λ of the plan's kind, which follows the queue's head: 0.39–1.78/s block by block
    // (the heavy and the light kind's rates), and a user trial's capacity metric read 60/s and
    // 1,390/s a second apart. Sampled every 5 s of the steady window, over the seeds.
    const mix = mixOf((k) => truth[k] as number);
    const stated = SEEDS.flatMap((seed) => {
      let pacer: ReturnType<typeof createPacer> | undefined;
      const at: [number, number][] = [];
      let next = 0;
      const r = simulate(scenario('mixed-kinds'), {
        seed,
        pacer: (o) => (pacer = createPacer('stoker', o)),
        onStep: (e) => {
          for (; e.time >= next; next += 5000) at.push([next, pacer?.state().ratePerSec ?? NaN]);
        },
      });
      return at.filter(([t]) => t >= r.window.fromMs && t < r.window.toMs).map(([, rate]) => rate / mix);
    });
    console.log(`mixed-kinds: stated capacity ÷ the mix's, ${stated.length} samples: ${Math.min(...stated).toFixed(3)}–${Math.max(...stated).toFixed(3)}, mean ${mean(stated).toFixed(3)}`);
    expect(Math.abs(mean(stated) - 1)).toBeLessThanOrEqual(0.05);
    // (The blocks of 30 move the recent mix, and with it the figure, by some ± 15 %.)
    expect(Math.min(...stated)).toBeGreaterThanOrEqual(0.75);
    expect(Math.max(...stated)).toBeLessThanOrEqual(1.25);
  });
});

describe('a one-kind workload beside one passing job of another kind', () => {
  it('fills as it would alone: the dispatch at once under the kinds’ need is for a kind’s turn, not a first fill (peak memory and the most dispatched back to back as alone, over 5 seeds)', () => {
    const GiB = 1024 ** 3;
    const proof = { prepare: { type: 'uniform', min: 30, max: 50 }, memory: { prepareBytes: GiB, deviceBytes: GiB / 8 } };
    const make = (other: boolean) =>
      parseScenario({
        name: other ? 'seed-and-one-other' : 'seed-alone',
        targetWaiting: 6,
        kinds: { proof, ...(other ? { other: proof } : {}) },
        devices: [{ workers: 2, service: { type: 'fixed', value: 1 }, contention: [1, 1.2] }],
        arrivals: [...(other ? [{ atS: 0, jobs: 1, partitions: 1, kind: 'other' }] : []), { atS: 0, jobs: 40, partitions: 10, kind: 'proof' }],
      });
    const run = (s: ReturnType<typeof make>, seed: number) => simulate(s, { seed, pacer: (o) => createPacer('stoker', o) }).metrics;
    for (const seed of SEEDS.slice(0, 5)) {
      const alone = run(make(false), seed);
      const beside = run(make(true), seed);
      // (Dispatched at once from the first estimate on: 57–63 back to back, peak memory 80 → 99 GiB.)
      expect(beside.peakMemoryBytes as number, `seed ${seed}`).toBeLessThanOrEqual(1.02 * (alone.peakMemoryBytes as number));
      expect(beside.burstMax as number, `seed ${seed}`).toBeLessThanOrEqual((alone.burstMax as number) + 2);
    }
  });
});

describe('kinds that differ in preparation latency', () => {
  it('mixed-latency: throughput ≥ 0.98 over 10 seeds, at most 0.6 × the peak memory of unpaced', () => {
    const run = (pacer: string, seed: number) => simulate(scenario('mixed-latency'), { seed, pacer: (o) => createPacer(pacer, o) }).metrics;
    const rows = SEEDS.map((seed) => ({ stoker: run('stoker', seed), unpaced: run('unpaced', seed) }));
    const tp = rows.map((r) => r.stoker.throughputRatio as number);
    const memory = rows.map((r) => (r.stoker.peakMemoryBytes as number) / (r.unpaced.peakMemoryBytes as number));
    console.log(`mixed-latency: stoker throughput mean ${mean(tp).toFixed(4)}, min ${Math.min(...tp).toFixed(4)}; peak memory ${mean(memory).toFixed(3)} of unpaced's (max ${Math.max(...memory).toFixed(3)})`);
    expect(mean(tp)).toBeGreaterThanOrEqual(0.98);
    expect(Math.max(...memory)).toBeLessThanOrEqual(0.6);
  });
});

describe('kinds of different sizes under a binding memory budget', () => {
  // A user trial's proving service, in small: three kinds (2 s, 1.2 s and 0.4 s of preparation,
  // each 5 % slower per other preparation running; 0.3, 0.15 and 0.05 s on a GPU whose 2 workers
  // share it), blocks of all three every 5 s, more than the GPU takes; a 192 MiB budget where the
  // heavy kind takes 14 MiB, and at most 16 preparing.
  const MiB = 2 ** 20;
  const slower = Array.from({ length: 40 }, (_, i) => 0.95 + 0.05 * (i + 1));
  const kind = (prepareS: number, serviceS: number, mib: number) => ({ prepare: { type: 'lognormal', median: prepareS, sigma: 0.1 }, contention: slower, memory: { prepareBytes: mib * MiB, deviceBytes: mib * MiB }, service: { type: 'fixed', value: serviceS } });
  const trial = parseScenario(
    {
      name: 'zk-blocks',
      targetWaiting: 4,
      budgetBytes: 192 * MiB,
      maxPreparing: 16,
      kinds: { heavy: kind(2, 0.3, 14), medium: kind(1.2, 0.15, 9), small: kind(0.4, 0.05, 1) },
      devices: [{ workers: 2, service: { type: 'fixed', value: 0.15 }, contention: [1, 2] }],
      arrivals: Array.from({ length: 10 }, (_, b) => [
        { atS: b * 5, jobs: 2, partitions: 6, kind: 'heavy' },
        { atS: b * 5, jobs: 2, partitions: 6, kind: 'medium' },
        { atS: b * 5, jobs: 2, partitions: 8, kind: 'small' },
      ]).flat(),
    },
    'zk-blocks',
  );

  it('finishes ≥ 0.993 of what unpaced finishes under the same budget, over 10 seeds', () => {
    const ratios = SEEDS.map((seed) => {
      const tp = (pacer: string) => simulate(trial, { seed, pacer: (o) => createPacer(pacer, o) }).metrics.throughputRatio as number;
      return tp('stoker') / tp('unpaced');
    });
    console.log(`zk-blocks: stoker ÷ unpaced throughput mean ${mean(ratios).toFixed(4)}, min ${Math.min(...ratios).toFixed(4)}`);
    // (0.90 before: the plan took the mean latency over the kinds, and paced by its rate while the
    // budget held the queue back — 0.964 with the first fixed, 0.977 with both; 0.989, min 0.981,
    // dispatching at once where the devices would run dry at a heavier kind's turn; 0.995, min 0.984,
    // planning a kind not yet measured as the quickest known, not their mean.)
    expect(mean(ratios)).toBeGreaterThanOrEqual(0.993);
  });
});

// Preparations completed per second, and the most preparing, over [from, to] of one run.
const prepRun = (s: ReturnType<typeof scenario>, pacer: string, seed: number, half: 'window' | 'second half') => {
  const steps: [number, number, number][] = [];
  const r = simulate(s, { seed, pacer: (o) => createPacer(pacer, o), onStep: (e, _c, snap) => steps.push([e.time, snap.prepareCompletions, snap.preparing]) });
  const from = half === 'window' ? r.window.fromMs : (r.window.fromMs + r.window.toMs) / 2;
  const to = r.window.toMs;
  let first = NaN;
  let last = 0;
  let peak = 0;
  for (const [t, done, preparing] of steps) {
    if (t < from || t > to) continue;
    if (Number.isNaN(first)) first = done;
    last = done;
    peak = Math.max(peak, preparing);
  }
  return { perSec: ((last - first) / (to - from)) * 1000, peak };
};

describe('preparation contention: the knee', () => {
  for (const name of ['prep-knee', 'prep-plateau']) {
    it(`${name}: once learned, preparation throughput ≥ 95 % of the best fixed cap (a sweep)`, () => {
      const s = scenario(name);
      // The sweep: unpaced under each cap; the knee is the least cap within 1 % of the best.
      const caps = [16, 20, 22, 24, 26, 28, 32, 40].map((cap) => ({ cap, perSec: mean(SEEDS.map((seed) => prepRun({ ...s, maxPreparing: cap }, 'unpaced', seed, 'window').perSec)) }));
      const best = Math.max(...caps.map((c) => c.perSec));
      const knee = (caps.find((c) => c.perSec >= 0.99 * best) as { cap: number }).cap;
      const late = SEEDS.map((seed) => prepRun(s, 'stoker', seed, 'second half'));
      const whole = SEEDS.map((seed) => prepRun(s, 'stoker', seed, 'window'));
      const ratio = mean(late.map((r) => r.perSec / best));
      const peak = mean(late.map((r) => r.peak));
      console.log(
        `${name}: best fixed cap ${best.toFixed(3)}/s, knee ${knee}; stoker over the window's second half ${ratio.toFixed(3)} of it (min ${Math.min(...late.map((r) => r.perSec / best)).toFixed(3)}), peak preparing ${peak.toFixed(1)} = ${(peak / knee).toFixed(2)} × the knee (each ${late.map((r) => r.peak).join(' ')}); over the whole window ${mean(whole.map((r) => r.perSec / best)).toFixed(3)}, peak ${Math.max(...whole.map((r) => r.peak))} (the first fill, before anything is measured)`,
      );
      // Started from the limit a first run ended with (what a restarted server remembers): no first-fill overshoot.
      const learned = (seed: number) => {
        let pacer: ReturnType<typeof createPacer> | undefined;
        simulate(s, { seed, pacer: (o) => (pacer = createPacer('stoker', o)) });
        return (pacer?.state().terms['prepareLimitBest'] ?? pacer?.state().terms['prepareLimit']) as number;
      };
      const primed = SEEDS.map((seed) => prepRun({ ...s, pacerOptions: { priorPrepareLimit: learned(seed + 100) } }, 'stoker', seed, 'window'));
      console.log(`${name} from a remembered limit: over the whole window ${mean(primed.map((r) => r.perSec / best)).toFixed(3)} of the best fixed cap, peak preparing ${Math.max(...primed.map((r) => r.peak))}`);
      expect(knee).toBe(24);
      expect(ratio).toBeGreaterThanOrEqual(0.95);
      expect(mean(primed.map((r) => r.perSec / best))).toBeGreaterThanOrEqual(0.95);
      if (name === 'prep-knee') expect(Math.max(...primed.map((r) => r.peak))).toBeLessThanOrEqual(1.25 * knee);
      // Near the knee on both: past it prep-knee finishes less, prep-plateau only as much (there a
      // lower cap wins what the measurements' noise cannot tell apart, and the climb down splits
      // the difference past its first step that finishes less); the runaway reaches 200.
      expect(peak).toBeLessThanOrEqual(1.25 * knee);
    });
  }
});

describe('a remembered preparation limit the work does not need', () => {
  it("a small one (another workload's) is tried and let go: no contention here, the run at most 1.15 × unpaced's on each seed, 1.08 × on average (held, it took 3 ×)", () => {
    // A server restarted with the limit of 1 a flood of 1 ms preparations left: 1 s preparations,
    // two device workers of 0.13 s, a burst and then a busier one after an idle minute.
    const s = parseScenario(
      {
        name: 'small-remembered-limit',
        targetWaiting: 4,
        kinds: { crunch: { prepare: { type: 'uniform', min: 0.5, max: 1.5 } } },
        devices: [{ workers: 2, service: { type: 'uniform', min: 0.05, max: 0.2 } }],
        arrivals: [
          { atS: 0, jobs: 3, partitions: 8, kind: 'crunch' },
          { atS: 60, jobs: 20, partitions: 8, kind: 'crunch' },
        ],
        pacerOptions: { priorServiceMs: 130, priorLatencyMs: 1000, priorLatencySdMs: 300 },
      },
      'test',
    );
    for (const limit of [1, 2, 4]) {
      const ratios = SEEDS.map((seed) => {
        const paced = simulate({ ...s, pacerOptions: { ...s.pacerOptions, priorPrepareLimit: limit } }, { seed, pacer: (o) => createPacer('stoker', o) });
        const unpaced = simulate(s, { seed, pacer: (o) => createPacer('unpaced', o) });
        expect(paced.unfinishedJobs).toBe(0);
        return paced.simulatedMs / unpaced.simulatedMs;
      });
      console.log(`remembered limit ${limit}: run time ÷ unpaced's ${ratios.map((r) => r.toFixed(2)).join(' ')}`);
      expect(Math.max(...ratios)).toBeLessThanOrEqual(1.15);
      expect(mean(ratios)).toBeLessThanOrEqual(1.08);
    }
  });

  it('a larger one (≥ TRIAL_DOUBLE) probes above first: let go within 20 s on each of 10 seeds (it rested and probed below first: 48 s)', () => {
    // A user trial's restart: a cap of 12 remembered, then 600 partitions of 1.5 s preparations
    // that nothing slows (timers), two device workers of 20 ms. Before, the remembered limit was
    // held for two more measurements, then probed below, then above: 48 s at a twelfth of what
    // the devices take.
    const s = parseScenario(
      {
        name: 'larger-remembered-limit',
        targetWaiting: 2,
        kinds: { sleep: { prepare: { type: 'uniform', min: 1.425, max: 1.575 } } },
        devices: [{ workers: 2, service: { type: 'fixed', value: 0.02 } }],
        arrivals: [{ atS: 0, jobs: 1, partitions: 600, kind: 'sleep' }],
        pacerOptions: { priorPrepareLimit: 12 },
      },
      'test',
    );
    const rows = SEEDS.map((seed) => {
      let pacer: Pacer | undefined;
      let letGo = NaN;
      const paced = simulate(s, {
        seed,
        pacer: (o) => (pacer = createPacer('stoker', o)),
        onStep: (e) => {
          if (Number.isNaN(letGo) && pacer?.state().terms['prepareLimit'] === undefined) letGo = e.time / 1000;
        },
      });
      return { letGo, ratio: paced.simulatedMs / simulate(s, { seed, pacer: (o) => createPacer('unpaced', o) }).simulatedMs };
    });
    console.log(`remembered limit 12: let go at ${rows.map((r) => r.letGo.toFixed(1)).join(' ')} s; run time ÷ unpaced's ${rows.map((r) => r.ratio.toFixed(2)).join(' ')}`);
    expect(Math.max(...rows.map((r) => r.letGo))).toBeLessThanOrEqual(20);
  });
});

describe('preparation contention: a knee under a stream of arrivals', () => {
  it('prep-knee-arrivals: each job dispatched as it comes, the queue empty between arrivals — the limiter still takes over (≥ 95 % of the best fixed cap over the second half of the window, ≤ 1.25 × the knee preparing there, a quarter of unpaced’s memory at most)', () => {
    // Taking over waited for half a latency of slower preparations with work queued throughout;
    // here a job's partitions leave the queue the moment they arrive, every wait started again at
    // the next event, and the pacer ran away with unpaced (1,300 preparing, 1.3 TB at the peak).
    // The wait runs on while the queue is empty; only the take-over itself needs work queued.
    const s = scenario('prep-knee-arrivals');
    const caps = [20, 24, 28].map((cap) => ({ cap, perSec: mean(SEEDS.map((seed) => prepRun({ ...s, maxPreparing: cap }, 'unpaced', seed, 'window').perSec)) }));
    const best = Math.max(...caps.map((c) => c.perSec));
    const late = SEEDS.map((seed) => prepRun(s, 'stoker', seed, 'second half'));
    const ratio = mean(late.map((r) => r.perSec / best));
    const peak = mean(late.map((r) => r.peak));
    const memory = (pacer: string) => mean(SEEDS.map((seed) => simulate(s, { seed, pacer: (o) => createPacer(pacer, o) }).metrics.peakMemoryBytes / 1024 ** 3));
    const [stoker, unpaced] = [memory('stoker'), memory('unpaced')];
    console.log(
      `prep-knee-arrivals: fixed caps ${caps.map((c) => `${c.cap}: ${c.perSec.toFixed(3)}/s`).join(', ')}; stoker over the window's second half ${ratio.toFixed(3)} of the best (min ${Math.min(...late.map((r) => r.perSec / best)).toFixed(3)}), peak preparing ${peak.toFixed(1)} on average (each ${late.map((r) => r.peak).join(' ')}); peak memory ${stoker.toFixed(0)} GiB on average (unpaced ${unpaced.toFixed(0)} GiB)`,
    );
    expect(caps[1]?.perSec).toBe(best);
    expect(ratio).toBeGreaterThanOrEqual(0.95);
    expect(peak).toBeLessThanOrEqual(1.25 * 24);
    expect(stoker).toBeLessThanOrEqual(0.25 * unpaced);
  });
});

describe('preparation contention: a soft knee', () => {
  it('prep-soft-knee: no plateau, throughput rising slowly past the knee: the limiter does not walk down the slope (≥ 95 % of the best fixed cap over the second half of the steady window)', () => {
    const s = scenario('prep-soft-knee');
    // The sweep, to 2.5 × 24 (0.99 of the limit there): unpaced under each cap over the window.
    const caps = [24, 32, 40, 48, 60].map((cap) => ({ cap, perSec: mean(SEEDS.map((seed) => prepRun({ ...s, maxPreparing: cap }, 'unpaced', seed, 'window').perSec)) }));
    const best = Math.max(...caps.map((c) => c.perSec));
    const knee = (caps.find((c) => c.perSec >= 0.99 * best) as { cap: number }).cap;
    const late = SEEDS.map((seed) => prepRun(s, 'stoker', seed, 'second half'));
    const ratio = mean(late.map((r) => r.perSec / best));
    const peak = mean(late.map((r) => r.peak));
    console.log(
      `prep-soft-knee: fixed caps ${caps.map((c) => `${c.cap}: ${c.perSec.toFixed(3)}/s`).join(', ')}; knee ${knee}; stoker over the window's second half ${ratio.toFixed(3)} of the best (min ${Math.min(...late.map((r) => r.perSec / best)).toFixed(3)}), peak preparing ${peak.toFixed(1)} (each ${late.map((r) => r.peak).join(' ')})`,
    );
    // Judged against the last cap accepted, each step down the slope finished "as much" within the
    // noise and the small losses added up (0.942 here); against every cap measured above, they cannot.
    expect(ratio).toBeGreaterThanOrEqual(0.95);
    expect(peak).toBeLessThanOrEqual(1.25 * knee);
  });
});

describe('preparation contention: a steep knee', () => {
  it('past 24 each preparation slows as (n / 24)²: the limiter takes over before the first fill reaches the memory budget (≥ 93 % of the best fixed cap over the second half of the window, ≥ 70 % over the whole)', () => {
    // prep-knee's stages with a steeper knee: twice the knee in flight finish half as much. The
    // first fill (λ·L at the devices' 1.67/s, 130 or more) crawls: its completions come one a
    // minute, too few to show a latency, and the memory budget (200) filled before the limiter
    // took over (0.43 of the best fixed cap over the second half; runs that reached 200 took an
    // hour to drain). The ages of those in flight show it, and the pacer looks at them in time.
    const base = scenario('prep-knee');
    const s = parseScenario({ ...base, kinds: { proof: { ...base.kinds['proof'], contention: Array.from({ length: 400 }, (_, i) => Math.max(1, ((i + 1) / 24) ** 2)) } } }, 'steep knee');
    const caps = [20, 24, 28].map((cap) => ({ cap, perSec: mean(SEEDS.map((seed) => prepRun({ ...s, maxPreparing: cap }, 'unpaced', seed, 'window').perSec)) }));
    const best = Math.max(...caps.map((c) => c.perSec));
    const late = SEEDS.map((seed) => prepRun(s, 'stoker', seed, 'second half'));
    const whole = SEEDS.map((seed) => prepRun(s, 'stoker', seed, 'window'));
    const ratios = late.map((r) => r.perSec / best);
    console.log(
      `steep knee: fixed caps ${caps.map((c) => `${c.cap}: ${c.perSec.toFixed(3)}/s`).join(', ')}; stoker over the window's second half ${mean(ratios).toFixed(3)} of the best (min ${Math.min(...ratios).toFixed(3)}), peak preparing ${late.map((r) => r.peak).join(' ')}; over the whole window ${mean(whole.map((r) => r.perSec / best)).toFixed(3)}`,
    );
    expect(caps[1]?.perSec).toBe(best);
    expect(mean(ratios)).toBeGreaterThanOrEqual(0.93);
    // (0.916 before the collapse line: taken over sooner, on a smaller pipeline, two seeds start
    // at a cap of 11–12 and climb back to the knee by probes within the window, 0.859.)
    expect(Math.min(...ratios)).toBeGreaterThanOrEqual(0.85);
    expect(Math.max(...late.map((r) => r.peak))).toBeLessThanOrEqual(1.25 * 24);
    expect(mean(whole.map((r) => r.perSec / best))).toBeGreaterThanOrEqual(0.7);
  });
});

describe('preparation contention: a knee the first fill runs through, under a stream of arrivals', () => {
  it('past 4 at once each 15 s preparation slows as (n / 4)^1.3; Poisson arrivals and a burst: the limiter takes over when what finishes collapses (stoker ≥ 1.5 × unpaced’s speed on average over 10 seeds, ≥ 1.2 on each, ≤ 0.15 × its peak memory)', () => {
    // From random scenario 40 of `bench --random 200`, seed 2. The first latencies are contended
    // already, few finish while hundreds prepare, and the ages stay young as arrivals are
    // dispatched behind them: on 6 seeds of 10 nothing took over (0.68–0.86 of unpaced's speed,
    // 1.27 on average, 0.32 × its peak memory); on what finishes, 1.79 (min 1.30), 0.08.
    const GiB = 1024 ** 3;
    const s = parseScenario(
      {
        name: 'collapse',
        targetWaiting: 6,
        kinds: { proof: { prepare: { type: 'fixed', value: 15 }, memory: { prepareBytes: GiB, deviceBytes: GiB / 4 }, contention: Array.from({ length: 1024 }, (_, i) => Math.max(1, ((i + 1) / 4) ** 1.3)) } },
        devices: [
          { count: 2, workers: 4, service: { type: 'fixed', value: 1 } },
          { workers: 4, service: { type: 'uniform', min: 3.5, max: 6.5 } },
        ],
        arrivals: [
          { poisson: { ratePerS: 0.014, untilS: 3200 }, partitions: 7, kind: 'proof' },
          { poisson: { ratePerS: 0.022, untilS: 3000 }, partitions: 3, kind: 'proof' },
          { poisson: { ratePerS: 0.035, untilS: 2400 }, partitions: 16, kind: 'proof' },
          { atS: 600, jobs: 27, partitions: 19, kind: 'proof' },
        ],
      },
      'collapse',
    );
    const runs = SEEDS.map((seed) => {
      const stoker = simulate(s, { seed, pacer: (o) => createPacer('stoker', o) });
      const unpaced = simulate(s, { seed, pacer: (o) => createPacer('unpaced', o) });
      expect(stoker.endedBy).toBe('done');
      return { speed: unpaced.simulatedMs / stoker.simulatedMs, memory: stoker.metrics.peakMemoryBytes / unpaced.metrics.peakMemoryBytes };
    });
    console.log(`collapse: stoker / unpaced speed ${mean(runs.map((r) => r.speed)).toFixed(3)} (each ${runs.map((r) => r.speed.toFixed(2)).join(' ')}), peak memory ${mean(runs.map((r) => r.memory)).toFixed(3)} of unpaced's`);
    expect(mean(runs.map((r) => r.speed))).toBeGreaterThanOrEqual(1.5);
    expect(Math.min(...runs.map((r) => r.speed))).toBeGreaterThanOrEqual(1.2);
    expect(mean(runs.map((r) => r.memory))).toBeLessThanOrEqual(0.15);
  });
});

describe('preparation contention: two kinds in alternating blocks', () => {
  it('past a knee of 8, a quick kind (15–25 s) and a slow one (45–75 s) in turn: each cap is measured in each kind’s own latency (≥ 0.6 of the best fixed cap over 10 seeds; 0.46 with the latencies of the mix)', () => {
    const contention = Array.from({ length: 400 }, (_, i) => Math.max(1, ((i + 1) / 8) ** 1.5));
    const memory = { prepareBytes: 2 ** 30, deviceBytes: 2 ** 28 };
    const s = parseScenario({
      name: 'mixed-knee',
      kinds: { quick: { prepare: { type: 'uniform', min: 15, max: 25 }, contention, memory }, slow: { prepare: { type: 'uniform', min: 45, max: 75 }, contention, memory } },
      devices: [{ workers: 2, service: { type: 'fixed', value: 1 } }],
      arrivals: Array.from({ length: 12 }, (_, b) => ({ atS: b * 400, jobs: 6, partitions: 10, kind: b % 2 === 0 ? 'quick' : 'slow', everyS: 20 })),
    });
    const capped = (cap: number) => mean(SEEDS.map((seed) => throughput2({ ...s, maxPreparing: cap }, 'unpaced', seed)));
    const best = Math.max(...[6, 8, 10].map(capped));
    const stoker = SEEDS.map((seed) => throughput2(s, 'stoker', seed) / best);
    const unpaced = mean(SEEDS.map((seed) => throughput2(s, 'unpaced', seed))) / best;
    console.log(`mixed kinds past a knee: stoker ${mean(stoker).toFixed(3)} of the best fixed cap (min ${Math.min(...stoker).toFixed(3)}), unpaced ${unpaced.toFixed(3)}`);
    expect(mean(stoker)).toBeGreaterThanOrEqual(0.6);
    expect(Math.min(...stoker)).toBeGreaterThanOrEqual(0.55);
    expect(unpaced).toBeLessThan(0.2);
  });
});

describe('preparation latencies with a heavy tail and no contention', () => {
  it('lognormal σ 1 (the mean 1.65 × the median) and nothing slows with concurrency: the limiter lets go of the caps it takes on the quick ones’ floor (stoker ≥ 0.94 of unpaced’s throughput on average over 10 seeds, ≥ 0.7 on each)', () => {
    // prep-knee's stages without the knee. The quick preparations finish first, so the floor and
    // the ages read a slowdown that is only the slow ones still running: the limiter took over in
    // the first minute and held 9–38 preparing for good (0.28 of unpaced's throughput on average).
    // Capped at no more than were preparing behind the floor, the preparations were no quicker: it
    // lets go, and the floor stays at what the cap measured (0.786). The lines widened with the
    // spread (FLOOR_Z: a floor read low by the estimate's noise) take over less often (0.860).
    // Where the first cap was above those behind the floor (seeds 3 and 10), it stayed: the step
    // down from it finished in proportion, no quicker, and the probes above, PROBE × each, could not
    // be told from the noise (0.436 and 0.246): that step now puts the cap on trial, its probes
    // doubled (0.819 and 0.733; 0.955 on average).
    const base = scenario('prep-knee');
    const s = parseScenario({ ...base, kinds: { proof: { ...base.kinds['proof'], prepare: { type: 'lognormal', median: 30, sigma: 1 }, contention: [1] } } }, 'heavy-tailed preparation');
    const ratios = SEEDS.map((seed) => throughput2(s, 'stoker', seed) / throughput2(s, 'unpaced', seed));
    console.log(`heavy-tailed preparation, no contention: stoker / unpaced throughput ${mean(ratios).toFixed(3)} (each ${ratios.map((r) => r.toFixed(3)).join(' ')})`);
    expect(mean(ratios)).toBeGreaterThanOrEqual(0.94);
    expect(Math.min(...ratios)).toBeGreaterThanOrEqual(0.7);
  });
});

describe('slower modes and kinds, and no contention: the limiter does not take over', () => {
  const GiB = 1024 ** 3;
  const memory = { prepareBytes: GiB, deviceBytes: GiB / 4 };
  /** Over 10 seeds, unpaced's time to finish all the work ÷ stoker's, and the observations at which the stoker pacer held a preparation cap. */
  const runs = (s: ReturnType<typeof parseScenario>) =>
    SEEDS.map((seed) => {
      let pacer: Pacer | undefined;
      let capped = 0;
      const stoker = simulate(s, {
        seed,
        pacer: (o) => (pacer = createPacer('stoker', o)),
        onStep: () => {
          if (pacer?.state().terms['prepareLimit'] !== undefined) capped++;
        },
      });
      const unpaced = simulate(s, { seed, pacer: (o) => createPacer('unpaced', o) });
      return { speed: unpaced.simulatedMs / stoker.simulatedMs, capped };
    });

  it('two modes (four in five quick, the fifth 7 × slower): the quick ones still finish as quickly, so the slow ones’ ages are no contention (no cap on any of 10 seeds; stoker ≥ 0.65 of unpaced’s speed on each)', () => {
    // The quick ones set the floor, the slow ones' ages read 7 × it; before, a cap of 1 was taken
    // on 1–2 seeds of 10 of each pattern (0.27–0.37 of unpaced's speed there). (What stoker still
    // loses to unpaced here is the cold start: these runs are a few latencies long.)
    const twoModes = (jobs: number, partitions: number, everyS: number, workers: number, quick: number) =>
      parseScenario(
        {
          name: 'two-modes',
          targetWaiting: 2,
          kinds: { job: { prepare: { type: 'empirical', values: [...Array<number>(8).fill(quick), 7 * quick, 7 * quick] }, memory } },
          devices: [{ workers, service: { type: 'uniform', min: 2, max: 4 } }],
          arrivals: [{ atS: 0, jobs, partitions, kind: 'job', everyS }],
        },
        'two modes',
      );
    for (const s of [twoModes(30, 3, 5, 1, 10), twoModes(20, 5, 10, 1, 15), twoModes(40, 3, 5, 2, 10)]) {
      const r = runs(s);
      console.log(`two modes: stoker / unpaced speed ${r.map((x) => x.speed.toFixed(2)).join(' ')}; observations capped ${r.map((x) => x.capped).join(' ')}`);
      expect(r.map((x) => x.capped)).toEqual(SEEDS.map(() => 0));
      expect(Math.min(...r.map((x) => x.speed))).toBeGreaterThanOrEqual(0.65);
    }
  });

  it('a 4–7 s kind in bursts beside a 27 s / 125 s kind: the mix is no contention (stoker ≥ 0.95 of unpaced’s speed on each of 10 seeds)', () => {
    // The latency estimate mixes the kinds: as the short kind's bursts end it reads several times
    // its floor while the number preparing barely grew (ELASTICITY_MAX). Before: held at 9–12
    // preparing on some seeds while the queue grew (0.55 of unpaced's speed).
    const s = parseScenario(
      {
        name: 'mixed-latencies',
        targetWaiting: 6,
        kinds: { short: { prepare: { type: 'uniform', min: 4, max: 7 }, memory }, long: { prepare: { type: 'empirical', values: [27, 27, 27, 27, 27, 27, 27, 27, 125, 125] }, memory } },
        devices: [{ count: 2, workers: 3, service: { type: 'lognormal', median: 0.7, sigma: 0.9 } }],
        arrivals: [
          { atS: 0, jobs: 20, partitions: 18, kind: 'short', everyS: 50 },
          { poisson: { ratePerS: 0.025, untilS: 1200 }, partitions: 15, kind: 'long' },
        ],
      },
      'mixed latencies',
    );
    const r = runs(s);
    console.log(`mixed latencies: stoker / unpaced speed ${r.map((x) => x.speed.toFixed(2)).join(' ')}; observations capped ${r.map((x) => x.capped).join(' ')}`);
    expect(Math.min(...r.map((x) => x.speed))).toBeGreaterThanOrEqual(0.95);
  });

  it('a slower kind beside a quick one, nothing contending: no cap below the floor’s own concurrency (each of 10 seeds ends within 1.3 × unpaced’s time; held at 1–7 preparing, one ran 5.3 ×)', () => {
    // A user trial's embedding service, in small: a tokeniser kind of 0.2–3 s and an image kind of
    // 2–5 s, jobs of 30 partitions, devices far quicker than either; nothing contends. The image
    // block prepared 60 at once and drained; its latencies then read 2 × the floor at 5 × the
    // floor's concurrency (`explained`), though only as many were preparing as behind the floor —
    // and the cap was taken at 2 of 12. Fewer than that many preparing, a cap can only be taken on
    // the mix: taken over only above it. (On four seeds a cap is still taken, with 65–72
    // preparing, on a floor the tokeniser's first quick ones set: survivorship, not the mix.)
    const s = parseScenario(
      {
        name: 'tokens-and-images',
        targetWaiting: 2,
        kinds: { tok: { prepare: { type: 'uniform', min: 0.2, max: 3 }, memory }, img: { prepare: { type: 'uniform', min: 2, max: 5 }, memory } },
        devices: [{ workers: 2, service: { type: 'uniform', min: 0.03, max: 0.07 } }],
        arrivals: [
          { atS: 0, jobs: 1, partitions: 30, kind: 'tok' },
          { atS: 3, jobs: 2, partitions: 30, kind: 'img' },
          { atS: 10, jobs: 3, partitions: 30, kind: 'tok' },
          { poisson: { ratePerS: 0.2, untilS: 120 }, partitions: 30, kind: 'tok' },
          { poisson: { ratePerS: 0.2, untilS: 120 }, partitions: 20, kind: 'img' },
        ],
      },
      'tokens and images',
    );
    const r = runs(s);
    console.log(`tokens and images: stoker / unpaced speed ${r.map((x) => x.speed.toFixed(2)).join(' ')}; observations capped ${r.map((x) => x.capped).join(' ')}`);
    expect(Math.min(...r.map((x) => x.speed))).toBeGreaterThanOrEqual(1 / 1.3);
  });
});

describe('the limiters across idle periods, and kinds on separate devices', () => {
  // prep-knee's stages: a first batch, idle, then a second batch of 100 jobs at 20,000 s.
  const second = (first: number, seed: number) => {
    const arrivals = [{ atS: 20_000, jobs: 100, partitions: 10, kind: 'proof', priority: 'normal' as const, everyS: 0 }];
    if (first > 0) arrivals.unshift({ atS: 0, jobs: first, partitions: 10, kind: 'proof', priority: 'normal', everyS: 0 });
    let peak = 0;
    let end = 0;
    simulate({ ...scenario('prep-knee'), arrivals }, {
      seed,
      pacer: (o) => createPacer('stoker', o),
      onStep: (e, _c, snap) => {
        if (e.time < 20_000_000) return;
        peak = Math.max(peak, snap.preparing);
        if (snap.backlog + snap.preparing + snap.waiting + snap.onDevice === 0) end = e.time;
      },
    });
    return { peak, seconds: (end - 20_000_000) / 1000 };
  };

  it('a burst after idle starts from the preparation limit the last busy period learned', () => {
    for (const seed of [1, 2, 3]) {
      const cold = second(0, seed);
      // 25 jobs: the limiter takes over and is still climbing down when the batch runs out; 60: it has settled.
      for (const first of [25, 60]) {
        const warm = second(first, seed);
        console.log(`seed ${seed}, ${first} jobs before: second batch peak preparing ${warm.peak}, ${warm.seconds.toFixed(0)} s (cold: ${cold.peak}, ${cold.seconds.toFixed(0)} s)`);
        // Capped where the first batch left the limiter (settled near the knee, or still climbing
        // down), not run away: cold, the second batch's first fill peaks at 98–128 before the
        // collapse line takes over (at the memory budget's 200 before it); warm, at 27–41.
        expect(warm.peak).toBeLessThanOrEqual(0.4 * cold.peak);
        expect(warm.seconds).toBeLessThan(cold.seconds);
      }
    }
  });

  it('a short burst of heavy-tailed preparations, then other kinds: a cap the first burst took and never measured does not starve the second (stoker ≥ 0.7 of unpaced’s throughput on average over 10 seeds)', () => {
    // 50 one-partition jobs (lognormal σ 1, median 10 s) took the limiter over on their quick
    // ones' floor and ended before it had measured its cap; 300 s later 400 partitions of two
    // other kinds (30 s and 2 s) met that cap of 5: 0.33 of unpaced's throughput on average.
    // Now the cap is timed from its first preparation and proved wrong from 8 of them.
    const GiB = 1024 ** 3;
    const memory = (g: number) => ({ prepareBytes: g * GiB, deviceBytes: 0.25 * GiB });
    const s = parseScenario(
      {
        name: 'bursts-after-idle',
        description: 'a burst of heavy-tailed one-partition jobs, then two other kinds',
        targetWaiting: 4,
        kinds: {
          quick: { prepare: { type: 'lognormal', median: 10, sigma: 1 }, memory: memory(4) },
          slow: { prepare: { type: 'fixed', value: 30 }, memory: memory(1) },
          short: { prepare: { type: 'uniform', min: 1.6, max: 2.4 }, memory: memory(4) },
        },
        devices: [{ workers: 2, service: { type: 'lognormal', median: 1, sigma: 0.7 }, contention: [1, 1.2] }],
        arrivals: [
          { atS: 0, jobs: 50, partitions: 1, kind: 'quick' },
          { atS: 300, jobs: 20, partitions: 10, kind: 'slow' },
          { atS: 300, jobs: 20, partitions: 10, kind: 'short' },
        ],
      },
      'bursts after idle',
    );
    const perSec = (pacer: string, seed: number) => simulate(s, { seed, pacer: (o) => createPacer(pacer, o) }).metrics.itemsPerSec as number;
    const ratios = SEEDS.map((seed) => perSec('stoker', seed) / perSec('unpaced', seed));
    console.log(`bursts after idle: stoker / unpaced throughput ${mean(ratios).toFixed(3)} (each ${ratios.map((r) => r.toFixed(2)).join(' ')})`);
    expect(mean(ratios)).toBeGreaterThanOrEqual(0.7);
  });

  it('kinds on separate devices (each device names its kind): every device is planned for, not only the next kind’s', () => {
    const s = parseScenario({
      name: 'apart',
      targetWaiting: 4,
      kinds: { a: { prepare: { type: 'uniform', min: 20, max: 30 } }, b: { prepare: { type: 'uniform', min: 20, max: 30 } } },
      devices: [
        { workers: 2, service: { type: 'uniform', min: 0.2, max: 0.3 }, kinds: ['a'] },
        { workers: 2, service: { type: 'uniform', min: 3, max: 5 }, kinds: ['b'] },
      ],
      arrivals: Array.from({ length: 40 }, (_, i) => ({ atS: i * 0.001, partitions: i % 2 ? 10 : 160, kind: i % 2 ? 'b' : 'a' })),
    });
    const tp = SEEDS.map((seed) => simulate(s, { seed, pacer: (o) => createPacer('stoker', o) }).metrics.throughputRatio as number);
    console.log(`kinds apart: stoker throughput mean ${mean(tp).toFixed(4)}`);
    expect(mean(tp)).toBeGreaterThanOrEqual(0.97);
  });

  it('two devices of a kind each, their jobs submitted together (a user trial): each device at its own pace, not the slower one’s', () => {
    // Jobs of the two kinds alternate in the queue; the pacer holding a block of one kind back held
    // the other device's work behind it: both ran at the slower one's pace (0.953 of unpaced's throughput).
    const s = parseScenario({
      name: 'two-devices',
      targetWaiting: 4,
      kinds: { a: { prepare: { type: 'uniform', min: 0.02, max: 0.025 } }, b: { prepare: { type: 'uniform', min: 0.02, max: 0.025 } } },
      devices: [
        { workers: 2, service: { type: 'fixed', value: 0.08 }, kinds: ['a'] },
        { workers: 2, service: { type: 'fixed', value: 0.1 }, kinds: ['b'] },
      ],
      arrivals: Array.from({ length: 60 }, (_, i) => ({ atS: i * 0.005, partitions: 20, kind: i % 2 ? 'b' : 'a' })),
    });
    const runs = SEEDS.map((seed) => {
      const own = simulate(s, { seed, pacer: (o) => createPacer('stoker', o) }).metrics;
      const unpaced = simulate(s, { seed, pacer: (o) => createPacer('unpaced', o) }).metrics;
      return { ratio: (own.itemsPerSec as number) / (unpaced.itemsPerSec as number), waiting: own.waitingMean as number };
    });
    console.log(`two devices, a kind each: stoker ÷ unpaced throughput ${mean(runs.map((r) => r.ratio)).toFixed(4)}, waiting ${mean(runs.map((r) => r.waiting)).toFixed(1)}`);
    expect(mean(runs.map((r) => r.ratio))).toBeGreaterThanOrEqual(0.98);
    expect(mean(runs.map((r) => r.waiting))).toBeLessThanOrEqual(10);
  });

  it('three GPUs of a kind each, 1 ×, ½ × and ¼ × as fast, preparations of 0.75–2.5 s, a burst (a prover trial): the fast one gets what it needs on the way', () => {
    // One item per worker past the held head kept the fast GPU 0.81 busy: it needs its workers'
    // worth of a preparation latency (0.75 s ÷ 0.1 s: 7.5) on the way. 0.838 of unpaced's speed.
    const kinds = { A: [0.5, 1, 64, 0.1], B: [1, 2, 192, 0.125], C: [2, 3, 512, 0.1] } as const;
    const blocks = [...Array.from({ length: 6 }, () => ['A', 'B', 'C']).flat(), 'A', 'B', 'A', 'B', 'A', 'A', 'A', 'A'];
    const s = parseScenario({
      name: 'three-gpus',
      targetWaiting: 4,
      kinds: Object.fromEntries(Object.entries(kinds).map(([k, [min, max, mib, svc]]) => [k, { prepare: { type: 'uniform', min, max }, memory: { prepareBytes: mib * 2 ** 20, deviceBytes: (mib / 4) * 2 ** 20 }, service: { type: 'fixed', value: svc } }])),
      devices: (['A', 'B', 'C'] as const).map((k, i) => ({ workers: 1, speed: 1 / 2 ** i, service: { type: 'fixed', value: 0.1 }, kinds: [k] })),
      arrivals: blocks.map((kind) => ({ atS: 0, partitions: kind === 'A' ? 20 : kind === 'B' ? 10 : 8, kind })),
    });
    const runs = SEEDS.map((seed) => {
      const own = simulate(s, { seed, pacer: (o) => createPacer('stoker', o) });
      const unpaced = simulate(s, { seed, pacer: (o) => createPacer('unpaced', o) });
      return { speed: unpaced.simulatedMs / own.simulatedMs, memory: own.metrics.peakMemoryBytes / unpaced.metrics.peakMemoryBytes };
    });
    console.log(`three GPUs, a kind each: stoker speed ${mean(runs.map((r) => r.speed)).toFixed(3)} of unpaced's (min ${Math.min(...runs.map((r) => r.speed)).toFixed(3)}), peak memory ${mean(runs.map((r) => r.memory)).toFixed(3)} of unpaced's`);
    expect(mean(runs.map((r) => r.speed))).toBeGreaterThanOrEqual(0.95);
    expect(Math.max(...runs.map((r) => r.memory))).toBeLessThanOrEqual(0.25);
  });
});

describe('device concurrency: the best k', () => {
  it('device-thrash: 4 workers, 2 at once finish the most; throughput ≥ 0.98 of the best-k capacity (all 4 give 0.66)', () => {
    const rows = SEEDS.map((seed) => {
      let pacer: ReturnType<typeof createPacer> | undefined;
      // The limit held longest (event-weighted), from the first minute on: it lets go when idle.
      const held = new Map<string, number>();
      const r = simulate(scenario('device-thrash'), {
        seed,
        pacer: (o) => (pacer = createPacer('stoker', o)),
        onStep: (e) => {
          if (e.time < 60_000) return;
          const key = String(pacer?.state().devices?.[0]?.workerLimit ?? null);
          held.set(key, (held.get(key) ?? 0) + 1);
        },
      });
      const limit = [...held].sort((x, y) => y[1] - x[1])[0]?.[0];
      return { tp: r.metrics.throughputRatio as number, limit };
    });
    const unpaced = throughput('device-thrash', 'unpaced', 1);
    console.log(`device-thrash: stoker throughput mean ${mean(rows.map((r) => r.tp)).toFixed(4)}, min ${Math.min(...rows.map((r) => r.tp)).toFixed(4)} of the best-k capacity (unpaced, all workers: ${unpaced.toFixed(3)}); worker limit held longest ${rows.map((r) => r.limit).join(' ')}`);
    expect(mean(rows.map((r) => r.tp))).toBeGreaterThanOrEqual(0.98);
    for (const r of rows) expect(r.limit).toBe('2');
  });

  it('never limits the workers on the other built-in scenarios', () => {
    for (const [name, s] of SCENARIOS) {
      if (name === 'device-thrash' || name === 'seed-day') continue;
      let pacer: ReturnType<typeof createPacer> | undefined;
      const limited = new Set<string>();
      simulate(s, { pacer: (o) => (pacer = createPacer('stoker', o)), onStep: () => pacer?.state().devices?.forEach((d, i) => typeof d.workerLimit === 'number' && limited.add(`${name} device ${i}`)) });
      expect([...limited]).toEqual([]);
    }
  });
});

describe('the measurement self-check', () => {
  it('lock-busy: 2 workers declared, one served at a time, busy time of its own step only — the pacer plans with the observed rate (1/s, not 2/s)', () => {
    const ratios = SEEDS.map((seed) => {
      let pacer: ReturnType<typeof createPacer> | undefined;
      const r = simulate(scenario('lock-busy'), { seed, pacer: (o) => (pacer = createPacer('stoker', o)) });
      expect(pacer?.state().devices?.[0]?.trusted).toBe('observed');
      expect(r.metrics.throughputRatio).toBeGreaterThanOrEqual(0.99);
      return (pacer?.state().ratePerSec as number) / 1;
    });
    console.log(`lock-busy: planned rate / true capacity over 10 seeds: ${ratios.map((r) => r.toFixed(3)).join(' ')}`);
    for (const r of ratios) expect(Math.abs(r - 1)).toBeLessThanOrEqual(0.1);
  });

  it('does not fire on any other built-in scenario', () => {
    for (const [name, s] of SCENARIOS) {
      if (name === 'lock-busy' || name === 'seed-day') continue;
      let pacer: ReturnType<typeof createPacer> | undefined;
      const fired = new Set<string>();
      simulate(s, { pacer: (o) => (pacer = createPacer('stoker', o)), onStep: () => pacer?.state().devices?.forEach((d, i) => d.trusted === 'observed' && fired.add(`${name} device ${i}`)) });
      expect([...fired]).toEqual([]);
    }
  });
});

describe('remembered rates (priors)', () => {
  // burst-after-idle's burst alone, on a pacer that has measured nothing (cold) or starts from priors.
  const burst = parseScenario(
    {
      name: 'burst-cold',
      description: 'burst-after-idle without the first job',
      targetWaiting: 6,
      kinds: { proof: { prepare: { type: 'uniform', min: 30, max: 50 }, memory: { prepareBytes: 2 ** 30, deviceBytes: 128 * 2 ** 20 } } },
      devices: [{ workers: 2, service: { type: 'fixed', value: 1 }, contention: [1, 1.2] }],
      arrivals: [{ atS: 0, jobs: 10, partitions: 10, kind: 'proof' }],
    },
    'burst-cold',
  );
  // What a server remembers from such a run: 1.2 s per item with both workers busy, 40 s ± 5.8 s of preparation.
  const priors = { priorDeviceServiceMs: [1200], priorLatencyMs: 40_000, priorLatencySdMs: 20_000 / Math.sqrt(12) };

  it('a burst on a pacer started from priors finishes like one on a warm pacer, not like a cold one', () => {
    for (const seed of [1, 2, 3]) {
      const p99 = (s: typeof burst, o = {}) => simulate(s, { seed, pacer: (x) => createPacer('stoker', { ...x, ...o }) }).metrics.jobLatencyP99Ms as number;
      const warm = p99(scenario('burst-after-idle'));
      const cold = p99(burst);
      const primed = p99(burst, priors);
      console.log(`seed ${seed}: burst p99 warm ${(warm / 1000).toFixed(1)} s, cold ${(cold / 1000).toFixed(1)} s, from priors ${(primed / 1000).toFixed(1)} s`);
      expect(primed).toBeLessThanOrEqual(1.05 * warm);
      expect(cold).toBeGreaterThan(1.2 * warm);
    }
  });

  it('mixed-kinds from each kind’s remembered device time: no cold start for the second kind either', () => {
    // The window the single-kind rule gives (first arrival + two passes), not the later one that
    // waits for every kind to be seen: with priors there is nothing to wait for.
    const early = { ...scenario('mixed-kinds'), steady: { fromS: 110, toS: 890 } };
    const remembered = { priorKindServiceMs: { heavy: [4800], light: [1200] }, priorLatencyMs: 40_000, priorLatencySdMs: 20_000 / Math.sqrt(12) };
    const run = (o: object) => SEEDS.map((seed) => simulate(early, { seed, pacer: (x) => createPacer('stoker', { ...x, ...o }) }).metrics.throughputRatio as number);
    const cold = run({});
    const primed = run(remembered);
    console.log(`mixed-kinds from 110 s: throughput cold ${mean(cold).toFixed(4)}, from the kinds' priors ${mean(primed).toFixed(4)} (min ${Math.min(...primed).toFixed(4)})`);
    expect(mean(primed)).toBeGreaterThanOrEqual(0.98);
    expect(mean(cold)).toBeLessThan(mean(primed) - 0.02);
  });
});

import { Rng } from './random.js';
import type { ScenarioInput } from './scenario.js';

type DistInput = ScenarioInput['kinds'][string]['prepare'];

const GiB = 1024 ** 3;
/** Long enough that no run reaches its end (past it the last factor would hold: a plateau in latency, not in throughput). */
const CONTENTION_LENGTH = 1024;

/**
 * A random scenario of the family `stoker bench --random` draws from, the `index`-th for `seed`
 * (the same pair gives the same scenario). Its parts, each drawn independently:
 * - 1–3 kinds. Each prepares in a mean of 5–50 s, by one of four laws: uniform ±30 %, lognormal
 *   (σ 0.2–1.2), fixed, or bimodal (10–50 % of them 3–8 × slower than the rest); 1 GiB while it
 *   prepares, 256 MiB on the device. Every kind after the first has, half the time, its own device
 *   time (a mean of 0.5–6 s).
 * - 40 % of the time the machine has a preparation knee, the same for every kind: past n₀ (2–24)
 *   concurrent preparations each slows as (n ÷ n₀)^a, a 1–1.5 (a plateau to a falling throughput).
 * - 1–2 device groups of 1–2 devices, 1–4 workers each, a device time of 0.5–5 s by the same laws;
 *   40 % of the time the workers slow each other (each busy one adds 0–30 %).
 * - 1–4 arrivals, the first at 0: a batch of 1–40 jobs of 1–20 partitions (at once or spaced
 *   1–60 s), or 30 % of the time Poisson at 0.005–0.05 jobs/s for 10–60 minutes.
 * - 20 % of the time a cap of 4–64 preparations, 30 % of the time a waiting target of 1–10.
 */
export function randomScenario(seed: number, index: number): ScenarioInput {
  const rng = new Rng(seed, index);
  const between = (lo: number, hi: number) => lo + (hi - lo) * rng.uniform();
  const int = (lo: number, hi: number) => Math.floor(between(lo, hi + 1));
  const chance = (p: number) => rng.uniform() < p;
  const dist = (mean: number): DistInput => {
    const law = rng.uniform();
    if (law < 0.3) return { type: 'uniform', min: 0.7 * mean, max: 1.3 * mean };
    if (law < 0.6) {
      const sigma = between(0.2, 1.2);
      return { type: 'lognormal', median: mean * Math.exp((-sigma * sigma) / 2), sigma };
    }
    if (law < 0.8) return { type: 'fixed', value: mean };
    const slowShare = int(1, 5) / 10;
    const slower = between(3, 8);
    const quick = mean / (1 - slowShare + slowShare * slower);
    return { type: 'empirical', values: Array.from({ length: 10 }, (_, i) => (i < slowShare * 10 ? quick * slower : quick)) };
  };
  let contention: number[] | undefined;
  if (chance(0.4)) {
    const knee = int(2, 24);
    const a = between(1, 1.5);
    contention = Array.from({ length: CONTENTION_LENGTH }, (_, i) => Math.max(1, ((i + 1) / knee) ** a));
  }
  const kinds: ScenarioInput['kinds'] = {};
  const names: string[] = [];
  const kindCount = int(1, 3);
  for (let k = 0; k < kindCount; k++) {
    const name = `k${k}`;
    names.push(name);
    kinds[name] = {
      prepare: dist(between(5, 50)),
      memory: { prepareBytes: GiB, deviceBytes: GiB / 4 },
      ...(contention ? { contention } : {}),
      ...(k > 0 && chance(0.5) ? { service: dist(between(0.5, 6)) } : {}),
    };
  }
  const devices: ScenarioInput['devices'] = [];
  for (let g = int(1, 2); g > 0; g--) {
    const workers = int(1, 4);
    const slowdown = chance(0.4) ? between(0, 0.3) : 0;
    devices.push({ count: int(1, 2), workers, service: dist(between(0.5, 5)), ...(slowdown > 0 ? { contention: Array.from({ length: workers }, (_, i) => 1 + i * slowdown) } : {}) });
  }
  const arrivals: ScenarioInput['arrivals'] = [];
  for (let a = int(1, 4); a > 0; a--) {
    const kind = names[int(0, kindCount - 1)] as string;
    if (chance(0.3)) arrivals.push({ poisson: { ratePerS: between(0.005, 0.05), untilS: between(600, 3600) }, partitions: int(1, 16), kind });
    else arrivals.push({ atS: arrivals.length === 0 ? 0 : between(0, 3000), jobs: int(1, 40), partitions: int(1, 20), kind, ...(chance(0.5) ? { everyS: between(1, 60) } : {}) });
  }
  return {
    name: `random-${seed}-${index}`,
    description: `random scenario ${index} of family seed ${seed} (stoker bench --random)`,
    kinds,
    devices,
    arrivals,
    ...(chance(0.2) ? { maxPreparing: int(4, 64) } : {}),
    ...(chance(0.3) ? { targetWaiting: int(1, 10) } : {}),
  };
}

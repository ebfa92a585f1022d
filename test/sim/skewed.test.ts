/**
 * Unbiased estimates on skewed service (issue 12, item 6): on bimodal and heavy-tailed device
 * times the stoker pacer's rate estimate, averaged over the steady part of a run, must be within
 * 2 % of the true saturated rate, over 10 seeds. The figures are printed (the README quotes them).
 */
import { describe, expect, it } from 'vitest';
import { createPacer } from '../../src/core/index.js';
import { parseScenario, simulate, type ScenarioInput } from '../../src/sim/index.js';

const scenario = (name: string, service: ScenarioInput['devices'][number]['service']): ScenarioInput => ({
  name,
  description: `seed stages with ${name} device times, 100 jobs × 10`,
  targetWaiting: 6,
  kinds: { proof: { prepare: { type: 'uniform', min: 30, max: 50 } } },
  devices: [{ workers: 2, service, contention: [1, 1.2] }],
  arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
});

// Both workers busy: each item takes 1.2 × its own time, so the saturated rate is 2 / (1.2 · mean).
const cases = [
  { s: scenario('bimodal', { type: 'empirical', values: [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 3, 3] }), meanS: 1 },
  { s: scenario('heavy-tailed', { type: 'lognormal', median: 0.6, sigma: 1 }), meanS: 0.6 * Math.exp(0.5) },
];

describe('the stoker pacer on skewed service', () => {
  for (const { s, meanS } of cases) {
    it(`${s.name}: the mean rate estimate is within 2 % of the truth over 10 seeds`, () => {
      const truth = 2 / (1.2 * meanS);
      const ratios: number[] = [];
      for (let seed = 1; seed <= 10; seed++) {
        let pacer: ReturnType<typeof createPacer> | undefined;
        let sum = 0;
        let n = 0;
        simulate(parseScenario(s, s.name), {
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
        ratios.push(sum / n / truth);
      }
      const mean = ratios.reduce((a, b) => a + b, 0) / ratios.length;
      console.log(`${s.name}: estimate / true rate over 10 seeds: mean ${mean.toFixed(4)}, each ${ratios.map((r) => r.toFixed(3)).join(' ')}`);
      expect(Math.abs(mean - 1)).toBeLessThanOrEqual(0.02);
    });
  }
});

/**
 * Liveness by construction: whatever the devices report — busy times of 0, tiny and noisy
 * samples, instant preparations — no built-in pacer holds dispatch forever while work is queued.
 * fast-check draws small scenarios (seeded: the same cases every run) and the simulator runs each
 * with every built-in pacer; every job must end.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createPacer, PACER_NAMES } from '../../src/core/index.js';
import { parseScenario } from '../../src/sim/scenario.js';
import { simulate } from '../../src/sim/simulator.js';

const seconds = (v: number) => ({ type: 'fixed', value: v });
const service = fc.oneof(
  fc.constant(seconds(0)),
  fc.constant(seconds(1e-7)),
  fc.double({ min: 1e-6, max: 0.05, noNaN: true }).map(seconds),
  fc.record({ median: fc.double({ min: 1e-7, max: 1e-3, noNaN: true }), sigma: fc.double({ min: 0.1, max: 2, noNaN: true }) }).map((l) => ({ type: 'lognormal', ...l })),
  fc.constant({ type: 'empirical', values: [0, 0, 1e-6, 0.002] }),
);
const prepare = fc.oneof(fc.constant(seconds(0)), fc.double({ min: 0, max: 2, noNaN: true }).map(seconds), fc.record({ min: fc.constant(0), max: fc.double({ min: 0.001, max: 3, noNaN: true }) }).map((u) => ({ type: 'uniform', ...u })));

const scenario = fc.record({
  pacer: fc.constantFrom(...PACER_NAMES),
  workers: fc.integer({ min: 1, max: 3 }),
  devices: fc.integer({ min: 1, max: 2 }),
  service,
  prepare,
  jobs: fc.integer({ min: 1, max: 4 }),
  partitions: fc.integer({ min: 1, max: 8 }),
  target: fc.double({ min: 0.5, max: 8, noNaN: true }),
  seed: fc.integer({ min: 1, max: 1_000_000 }),
});

describe('liveness: no pacer stalls on zero, tiny or noisy busy times', () => {
  it('every job ends, for every built-in pacer', () => {
    fc.assert(
      fc.property(scenario, (c) => {
        const s = parseScenario({
          name: 'liveness',
          seed: c.seed,
          targetWaiting: c.target,
          kinds: { k: { prepare: c.prepare, memory: { prepareBytes: 1, deviceBytes: 1 } } },
          devices: [{ count: c.devices, workers: c.workers, service: c.service }],
          arrivals: [{ atS: 0, jobs: c.jobs, partitions: c.partitions, kind: 'k' }],
        });
        const r = simulate(s, { pacer: (o) => createPacer(c.pacer, o) });
        expect(r.unfinishedJobs, JSON.stringify(c)).toBe(0);
        expect(r.metrics.jobsDone).toBe(c.jobs);
      }),
      { seed: 20261201, numRuns: 500 },
    );
  });
});

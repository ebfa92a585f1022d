/**
 * Liveness by construction: whatever the devices report — busy times of 0, tiny and noisy
 * samples, instant preparations — no built-in pacer holds dispatch forever while work is queued.
 * fast-check draws small scenarios (seeded: the same cases every run) and the simulator runs each
 * with every built-in pacer; every job must end.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createPacer, PACER_NAMES, type Pacer } from '../../src/core/index.js';
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

describe('a pacer that puts off every dispatch', () => {
  it('ends the run as stalled after an hour of simulated time with work queued and nothing in flight, saying why (it ran to the horizon: millions of events, and "raise horizonS")', () => {
    // A user trial's first interval pacer: "the next dispatch is now + interval", asked again at each wake.
    const later: Pacer = { name: 'later', observe() {}, nextDispatchAt: (s) => s.now + 100, onDispatch() {}, state: () => ({ mode: 'steady', ratePerSec: null, intervalMs: 100, terms: {} }) };
    const s = parseScenario({ name: 'x', seed: 1, kinds: { a: { prepare: seconds(1) } }, devices: [{ workers: 1, service: seconds(1) }], arrivals: [{ atS: 0, partitions: 1, kind: 'a' }] });
    const r = simulate(s, { pacer: () => later });
    expect(r.endedBy).toBe('stalled');
    expect(r.stall).toContain('the pacer put off every dispatch for 60 min of simulated time (36001 wakes) with 1 partitions queued, none in flight and nothing more to arrive');
    expect(r.simulatedMs).toBeCloseTo(3_600_000, -3);
    // A pacer that waits, then dispatches, runs to the end.
    const slow: Pacer = { ...later, name: 'slow', nextDispatchAt: () => 600_000 };
    expect(simulate(s, { pacer: () => slow }).endedBy).toBe('done');
  });

  it('lets runs with long quiet spells between bursts end as before (a review: the check kept its clock across them, and ended fast-noisy/gated-interval at 3603 s of 8998)', () => {
    // Jobs two hours apart whose preparations wait for a batch; an interval pacer from the last dispatch.
    const s = parseScenario({ name: 'x', seed: 1, kinds: { a: { prepare: seconds(1), prepareBatch: { maxItems: 8, maxWaitS: 10, fixed: seconds(1) } } }, devices: [{ workers: 1, service: seconds(1) }], arrivals: [0, 7200, 14400].map((atS) => ({ atS, partitions: 2, kind: 'a' })) });
    for (const name of PACER_NAMES) expect(simulate(s, { pacer: (o) => createPacer(name, o) }).endedBy, name).toBe('done');
    let last = -Infinity;
    const interval: Pacer = { name: 'interval', observe() {}, nextDispatchAt: () => last + 1000, onDispatch: (snap) => void (last = snap.now), state: () => ({ mode: 'steady', ratePerSec: 1, intervalMs: 1000, terms: {} }) };
    const t = parseScenario({ name: 'y', seed: 1, kinds: { a: { prepare: seconds(1) } }, devices: [{ workers: 1, service: seconds(1) }], arrivals: [0, 0.1, 7200, 7200.1].map((atS) => ({ atS, partitions: 1, kind: 'a' })) });
    expect(simulate(t, { pacer: () => interval }).endedBy).toBe('done');
  });
});

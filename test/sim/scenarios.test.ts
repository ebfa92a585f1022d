import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createPacer, PACER_NAMES } from '../../src/core/index.js';
import { GAIN_SWEEP_SERVICE_S, SCENARIOS, simulate, type SimResult } from '../../src/sim/index.js';
import { parseScenario } from '../../src/sim/scenario.js';

/** The bounds for the `stoker` pacer, one test per built-in scenario (deterministic: fixed seeds). */

const cache = new Map<string, SimResult>();
function run(name: string, pacer = 'stoker'): SimResult {
  const key = `${name}/${pacer}`;
  let r = cache.get(key);
  if (!r) {
    const s = SCENARIOS.get(name);
    if (!s) throw new Error(`no scenario ${name}`);
    r = simulate(s, { pacer: (o) => createPacer(pacer, o) });
    cache.set(key, r);
  }
  return r;
}

/** Every job ended exactly once and no byte stayed reserved. */
function expectClean(r: SimResult): void {
  const m = r.metrics;
  expect(r.unfinishedJobs).toBe(0);
  expect(m.jobsDone + m.jobsFailed + m.jobsCancelled).toBe(r.jobsSubmitted);
  expect(new Set(r.failures.map((f) => f.job)).size).toBe(r.failures.length);
  expect(m.leakedBytes).toBe(0);
}

const SEED_LATENCY_MS = 40_000;
const SEED_SERVICE_MS = 1_000;

describe('built-in scenarios with the stoker pacer', () => {
  it('seed: throughput ≥ 0.99, waiting within 6 ± 1.5, inventory ratio ≤ 1.15', () => {
    const m = run('seed').metrics;
    expect(m.throughputRatio).toBeGreaterThanOrEqual(0.99);
    expect(m.waitingMean).toBeGreaterThanOrEqual(4.5);
    expect(m.waitingMean).toBeLessThanOrEqual(7.5);
    expect(m.inventoryRatio).toBeLessThanOrEqual(1.15);
    expectClean(run('seed'));
  });

  it.each(GAIN_SWEEP_SERVICE_S.map((s) => [s]))('gain-sweep-%s: waiting std ≤ 0.5 × target and throughput ≥ 0.98', (s) => {
    const r = run(`gain-sweep-${s}`);
    expect(r.metrics.waitingStd).toBeLessThanOrEqual(0.5 * 4);
    expect(r.metrics.throughputRatio).toBeGreaterThanOrEqual(0.98);
    expectClean(r);
  });

  it('slowdown: the rate estimate settles within 10 completions and the pacer adds no inventory', () => {
    const m = run('slowdown').metrics;
    expect(m.settleCompletions).not.toBeNull();
    expect(m.settleCompletions).toBeLessThanOrEqual(10);
    expect(m.inventoryAtChange).not.toBeNull();
    expect(m.inventoryMaxAfterChange).toBeLessThanOrEqual(m.inventoryAtChange as number);
    expectClean(run('slowdown'));
  });

  it('slowdown: a pacer whose estimate never comes within 5 % of the new capacity has no settleCompletions (it read every completion since the change)', () => {
    const s = SCENARIOS.get('slowdown');
    if (!s) throw new Error('no slowdown scenario');
    // Dispatches at 1/s, believes 5/s throughout: 6 × the capacity after the slowdown.
    const wrong = () => {
      let sent = 0;
      return { name: 'wrong', observe: () => undefined, nextDispatchAt: () => sent * 1000, onDispatch: () => void sent++, state: () => ({ mode: 'steady' as const, ratePerSec: 5, intervalMs: 1000, terms: {} }) };
    };
    expect(simulate(s, { pacer: wrong }).metrics.settleCompletions).toBeNull();
  });

  it('speedup: settles within 10 completions; occupancy ≥ 0.95 again within 1.5 × the preparation latency', () => {
    const m = run('speedup').metrics;
    expect(m.settleCompletions).not.toBeNull();
    expect(m.settleCompletions).toBeLessThanOrEqual(10);
    expect(m.rampMs).not.toBeNull();
    expect(m.rampMs).toBeLessThanOrEqual(1.5 * SEED_LATENCY_MS);
    expectClean(run('speedup'));
  });

  it('noisy-service and fast-noisy: occupancy ≥ 0.97 with noisy service times; fast-noisy keeps waiting near its target', () => {
    const noisy = run('noisy-service');
    expect(noisy.metrics.occupancy).toBeGreaterThanOrEqual(0.97);
    expectClean(noisy);
    const fast = run('fast-noisy');
    expect(fast.metrics.occupancy).toBeGreaterThanOrEqual(0.97);
    expect(fast.metrics.waitingMean).toBeGreaterThanOrEqual(2.5);
    expect(fast.metrics.waitingMean).toBeLessThanOrEqual(5.5);
    expectClean(fast);
  });

  it('burst-after-idle: ramp ≤ 1.25 × (preparation latency + service time)', () => {
    const m = run('burst-after-idle').metrics;
    expect(m.rampMs).not.toBeNull();
    expect(m.rampMs).toBeLessThanOrEqual(1.25 * (SEED_LATENCY_MS + SEED_SERVICE_MS));
    expectClean(run('burst-after-idle'));
  });

  it('failure: the two failing jobs fail once with a clear reason, the others finish', () => {
    const r = run('failure');
    expectClean(r);
    expect(r.metrics.jobsFailed).toBe(2);
    expect(r.metrics.jobsDone).toBe(8);
    const byJob = Object.fromEntries(r.failures.map((f) => [f.job, f]));
    expect(byJob['job-3']?.code).toBe('E_PREPARE_FAILED');
    expect(byJob['job-3']?.reason).toMatch(/partition 5 failed in preparation/);
    expect(byJob['job-7']?.code).toBe('E_DEVICE_FAILED');
    expect(byJob['job-7']?.reason).toMatch(/partition 2 failed on device 0/);
  });

  it('oversize: the job larger than the budget fails at once, the others finish', () => {
    const r = run('oversize');
    expectClean(r);
    expect(r.metrics.jobsFailed).toBe(1);
    expect(r.metrics.jobsDone).toBe(9);
    const f = r.failures[0];
    expect(f?.job).toBe('job-2');
    expect(f?.code).toBe('E_OVERSIZE');
    expect(f?.reason).toMatch(/raise budgetBytes or split the job/);
    expect(r.metrics.peakMemoryBytes).toBeLessThanOrEqual(100 * 1024 ** 3);
  });

  it('cancel: the cancelled job ends once as cancelled, its memory is freed, the others finish', () => {
    const r = run('cancel');
    expectClean(r);
    expect(r.metrics.jobsCancelled).toBe(1);
    expect(r.metrics.jobsDone).toBe(9);
    expect(r.failures).toEqual([expect.objectContaining({ job: 'job-1', state: 'cancelled', code: 'E_CANCELLED' })]);
  });

  it('priority: the critical job starts preparing within one dispatch interval of its arrival', () => {
    const r = run('priority');
    expectClean(r);
    expect(r.metrics.jobsDone).toBe(13);
    const start = r.firstStartMs['job-12'];
    expect(start).toBeDefined();
    // One dispatch interval at the measured service rate: 1.2 s per item over 2 workers.
    expect((start as number) - 60_000).toBeGreaterThanOrEqual(0);
    expect((start as number) - 60_000).toBeLessThanOrEqual(600);
    // It overtook normal partitions that were queued before it.
    const later = Object.entries(r.firstStartMs).filter(([job, t]) => job !== 'job-12' && t > (start as number));
    expect(later.length).toBeGreaterThan(0);
  });

  it('worker-loss: every job finishes with one worker for ten minutes', () => {
    const r = run('worker-loss');
    expectClean(r);
    expect(r.metrics.jobsDone).toBe(120);
  });

  it('budget-bound and field-testbed: the budget is never exceeded and every job finishes', () => {
    for (const [name, budget] of [
      ['budget-bound', 6 * 14 * 1024 ** 3],
      ['field-testbed', 384 * 1024 ** 3],
    ] as const) {
      const r = run(name);
      expectClean(r);
      expect(r.metrics.jobsDone).toBe(20);
      expect(r.metrics.peakMemoryBytes).toBeLessThanOrEqual(budget);
    }
    // The budget really binds in budget-bound: six partitions of 14 GiB in flight at the peak.
    expect(run('budget-bound').metrics.peakMemoryBytes).toBeGreaterThan(5 * 14 * 1024 ** 3);
  });

  it('jitter and gaps: every job finishes, nothing leaks', () => {
    expectClean(run('jitter'));
    expectClean(run('gaps'));
    expect(run('gaps').metrics.jobsDone).toBe(25);
  });
});

describe('every pacer on the failure scenarios', () => {
  it.each(['classic', 'unpaced', 'window', 'burst', 'interval-pi', 'gated-interval'])('%s ends every job exactly once without leaking', (pacer) => {
    for (const name of ['failure', 'oversize', 'cancel', 'worker-loss']) expectClean(run(name, pacer));
  });
});

describe('a device step that takes no measurable time (busy time 0)', () => {
  // Reported as busy 0, a service estimate of 0 once made the stoker pacer's rate 0 and held
  // dispatch for good with work queued (0 of 5 jobs done).
  const zero = parseScenario({
    name: 'zero-service',
    seed: 1,
    targetWaiting: 4,
    kinds: { k: { prepare: { type: 'fixed', value: 1 }, memory: { prepareBytes: 1, deviceBytes: 1 } } },
    devices: [{ count: 1, workers: 2, service: { type: 'fixed', value: 0 } }],
    arrivals: [{ atS: 0, jobs: 5, partitions: 10, kind: 'k' }],
  });
  it.each(PACER_NAMES)('%s finishes every job', (pacer) => {
    const r = simulate(zero, { pacer: (o) => createPacer(pacer, o) });
    expectClean(r);
    expect(r.metrics.jobsDone).toBe(5);
  });
});

describe('examples/three-proof-kinds.json (the README quotes these figures)', () => {
  it('stoker at a target of 4 finishes 0.967 of the capacity over 5 seeds, as unpaced (0.967), each job done', () => {
    const s = parseScenario(JSON.parse(readFileSync(new URL('../../examples/three-proof-kinds.json', import.meta.url), 'utf8')) as unknown);
    const over = (pacer: string) => {
      const runs = [0, 1, 2, 3, 4].map((i) => simulate(s, { seed: s.seed + i, pacer: (o) => createPacer(pacer, o) }));
      for (const r of runs) expect(r.metrics.jobsDone).toBe(r.jobsSubmitted);
      return runs.reduce((a, r) => a + (r.metrics.throughputRatio as number), 0) / runs.length;
    };
    expect(over('stoker')).toBeCloseTo(0.967, 3);
    expect(over('unpaced')).toBeCloseTo(0.967, 3);
  });
});

describe('devices that run different kinds', () => {
  // A GPU device for "gpu" jobs and a CPU device for "cpu" ones; after a few cpu jobs only gpu jobs
  // arrive. The CPU device's rate serves none of them: counted, it made the stoker pacer keep ~10×
  // the waiting target (42 waiting, 145 GiB peak, against 2.7 and 33 GiB now).
  const twoDevices = parseScenario(JSON.parse(readFileSync(new URL('../../examples/two-devices.json', import.meta.url), 'utf8')) as unknown);

  it('the stoker pacer plans for the devices that have work: waiting near the target, the GPU as busy as unpaced keeps it', () => {
    const stoker = simulate(twoDevices, { pacer: (o) => createPacer('stoker', o) });
    const unpaced = simulate(twoDevices, { pacer: (o) => createPacer('unpaced', o) });
    expectClean(stoker);
    expect(stoker.metrics.jobsDone).toBe(42);
    expect(stoker.metrics.waitingMean).toBeLessThanOrEqual(2 * twoDevices.targetWaiting);
    expect(stoker.metrics.peakMemoryBytes).toBeLessThanOrEqual(0.15 * unpaced.metrics.peakMemoryBytes);
    expect(stoker.metrics.jobLatencyP50Ms as number).toBeLessThanOrEqual(1.05 * (unpaced.metrics.jobLatencyP50Ms as number));
  });

  it('refuses kinds no device runs, and devices naming unknown kinds', () => {
    const base = { name: 'x', seed: 1, targetWaiting: 1, kinds: { a: { prepare: { type: 'fixed', value: 1 }, memory: { prepareBytes: 1, deviceBytes: 1 } }, b: { prepare: { type: 'fixed', value: 1 }, memory: { prepareBytes: 1, deviceBytes: 1 } } }, arrivals: [{ atS: 0, jobs: 1, partitions: 1, kind: 'a' }] };
    expect(() => parseScenario({ ...base, devices: [{ workers: 1, service: { type: 'fixed', value: 1 }, kinds: ['a', 'z'] }] })).toThrow(/devices\[0\]\.kinds: unknown kind "z"[\s\S]*kinds\.b: no device runs it/);
  });
});

describe('faults and cancels name jobs that arrive', () => {
  const base = { name: 'x', seed: 1, kinds: { a: { prepare: { type: 'fixed', value: 1 } } }, devices: [{ workers: 1, service: { type: 'fixed', value: 1 } }], arrivals: [{ atS: 0, jobs: 3, partitions: 2, kind: 'a' }] };
  const run = (over: object) => simulate(parseScenario({ ...base, ...over }), { pacer: (o) => createPacer('unpaced', o) });

  it('a misspelt job, a partition past the job’s, a cancel of no job: refused before the run, each named', () => {
    expect(() => run({ faults: [{ job: 'job-9', partition: 0, stage: 'device' }, { job: 'job-1', partition: 2, stage: 'prepare' }], events: [{ type: 'cancel', atS: 1, job: 'job-42' }] })).toThrow(
      /faults\[0\]\.job: no job "job-9" arrives in this scenario \(its jobs are job-0 … job-2\)\n {2}faults\[1\]\.partition: job "job-1" has 2 partitions \(0 … 1\)\n {2}events\[0\]\.job: no job "job-42"/,
    );
  });

  it('a cancel before its job arrives: refused (it cancelled nothing, without a word); at the arrival itself it cancels', () => {
    const later = { arrivals: [{ atS: 0, jobs: 1, partitions: 2, kind: 'a' }, { atS: 100, jobs: 1, partitions: 2, kind: 'a' }] };
    expect(() => run({ ...later, events: [{ type: 'cancel', atS: 1, job: 'job-1' }] })).toThrow('events[0].atS: job "job-1" arrives at 100 s, after this cancel at 1 s, which would cancel nothing: cancel it at 100 s or later');
    const atArrival = run({ ...later, events: [{ type: 'cancel', atS: 100, job: 'job-1' }] });
    expect([atArrival.metrics.jobsDone, atArrival.metrics.jobsCancelled]).toEqual([1, 1]);
  });

  it('ones that exist run as before (the fault fails its job)', () => {
    const r = run({ faults: [{ job: 'job-2', partition: 1, stage: 'device' }] });
    expect(r.metrics.jobsDone).toBe(2);
    expect(r.failures.map((f) => f.job)).toEqual(['job-2']);
  });
});

describe('arrivals and sizes a run could not honour', () => {
  // A user trial: jobs after the horizon vanished without a word (endedBy "done"), 10^9 jobs grew
  // a run to 3.7 GB with no output, 20,000 devices took 86 s for 42 events, a Poisson stream
  // ending before it began made no job, and 2,000,000 partitions failed only when the job came.
  const base = { name: 'x', seed: 1, kinds: { a: { prepare: { type: 'fixed', value: 1 } } }, devices: [{ workers: 1, service: { type: 'fixed', value: 1 } }] };
  const parse = (over: object) => () => parseScenario({ ...base, ...over });

  it('refuses each before the run, naming the field and what to change', () => {
    expect(parse({ horizonS: 100, arrivals: [{ atS: 500, jobs: 5, partitions: 1, kind: 'a' }] })).toThrow('arrivals[0]: its last job arrives at 500 s past horizonS (100 s): those after it would never arrive; raise horizonS or move the arrival');
    // A byte count that is a number but not a whole one, or past 2^53 − 1: said as that (it read "must be a number of bytes").
    expect(parse({ kinds: { a: { prepare: { type: 'fixed', value: 1 }, memory: { prepareBytes: 1.5, deviceBytes: 1e18 } } }, arrivals: [{ atS: 0, partitions: 1, kind: 'a' }] })).toThrow(
      'kinds.a.memory.prepareBytes: prepareBytes must be a whole number of bytes, at most 2^53 − 1 (9007199254740991), e.g. 429496729600 for 400 GiB\n  kinds.a.memory.deviceBytes: deviceBytes must be a whole number of bytes',
    );
    // At the horizon itself: submitted as the run ends, never run.
    expect(parse({ horizonS: 100, arrivals: [{ atS: 100, partitions: 1, kind: 'a' }] })).toThrow('arrivals[0]: atS 100 s is at horizonS (100 s): it would never run; raise horizonS or move the arrival');
    expect(parse({ horizonS: 100, arrivals: [{ atS: 50, jobs: 10, everyS: 10, partitions: 1, kind: 'a' }] })).toThrow('its last job arrives at 140 s past horizonS (100 s)');
    expect(parse({ horizonS: 100, arrivals: [{ poisson: { ratePerS: 1, untilS: 200 }, partitions: 1, kind: 'a' }] })).toThrow('arrivals[0].poisson.untilS: 200 s is past horizonS (100 s)');
    expect(parse({ arrivals: [{ poisson: { ratePerS: 1, fromS: 100, untilS: 50 }, partitions: 1, kind: 'a' }] })).toThrow('untilS must be > fromS (no job would arrive)');
    expect(parse({ arrivals: [{ atS: 0, jobs: 1e9, partitions: 1, kind: 'a' }] })).toThrow('arrivals: about 1.00e+9 partitions in all; the simulator holds at most 2e+6');
    expect(parse({ devices: [{ count: 1000, workers: 4096, service: { type: 'fixed', value: 1 } }], arrivals: [{ atS: 0, partitions: 1, kind: 'a' }] })).toThrow('devices: 4096000 workers in all (count × workers summed); the simulator runs at most 65536');
    expect(parse({ arrivals: [{ atS: 0, partitions: 2e6, kind: 'a' }] })).toThrow('arrivals[0].partitions: partitions must be ≤ 1000000');
    expect(parse({ devices: [{ count: 20000, workers: 1, service: { type: 'fixed', value: 1 } }], arrivals: [{ atS: 0, partitions: 1, kind: 'a' }] })).toThrow('devices: 20000 devices in all (the counts summed); the simulator runs at most 1024');
  });

  it('takes the last job just before the horizon', () => {
    expect(parse({ horizonS: 100, arrivals: [{ atS: 99.999, partitions: 1, kind: 'a' }] })).not.toThrow();
  });
});

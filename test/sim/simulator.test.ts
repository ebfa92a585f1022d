import { describe, expect, it } from 'vitest';
import { createPacer, TimelineRecorder } from '../../src/core/index.js';
import { parseScenario, planArrivals, Rng, SCENARIOS, ScenarioError, simulate, steadyWindow, type ScenarioInput } from '../../src/sim/index.js';

const seed = SCENARIOS.get('seed');
if (!seed) throw new Error('no seed scenario');
const stoker = (o: Record<string, unknown>) => createPacer('stoker', o);

function json(r: ReturnType<typeof simulate>): string {
  return JSON.stringify({ ...r, series: r.series });
}

describe('determinism', () => {
  it('the same scenario and seed give byte-identical results', () => {
    expect(json(simulate(seed, { pacer: stoker }))).toBe(json(simulate(seed, { pacer: stoker })));
  });

  it('another seed gives other draws', () => {
    const a = simulate(seed, { pacer: stoker });
    const b = simulate(seed, { pacer: stoker, seed: 7 });
    expect(b.seed).toBe(7);
    expect(b.metrics.jobLatencyP50Ms).not.toBe(a.metrics.jobLatencyP50Ms);
  });

  it('every pacer meets the same preparation draws (common random numbers)', () => {
    // Two pacers that dispatch at very different times: each partition still takes the
    // preparation latency and device time its own stream draws, so a comparison of pacers
    // compares decisions, not luck.
    const jitter = SCENARIOS.get('jitter');
    if (!jitter) throw new Error('no jitter scenario');
    const times = (pacer: string) => {
      const timeline = new TimelineRecorder({ maxSpans: 100_000 });
      simulate(jitter, { pacer: (o) => createPacer(pacer, o), timeline });
      return new Map(timeline.spans().map((sp) => [`${sp.kind} ${sp.jobId}#${sp.partition}`, (sp.end as number) - sp.start]));
    };
    const a = times('unpaced');
    const b = times('window');
    expect(a.size).toBeGreaterThan(100);
    expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
    // (Device spans depend on what runs beside them — the device slows with both workers busy —
    // so only preparations, which do not contend here, must match to the last digit.)
    const prep = [...a].filter(([k]) => k.startsWith('prepare'));
    expect(new Set(prep.map(([, ms]) => ms)).size).toBeGreaterThan(50); // lognormal: they differ
    for (const [k, ms] of prep) expect(b.get(k), k).toBeCloseTo(ms, 9);
    // Streams are per item: the same (seed, item) draws the same, another item differently.
    expect(new Rng(1, 5).uniform()).toBe(new Rng(1, 5).uniform());
    expect(new Rng(1, 5).uniform()).not.toBe(new Rng(1, 6).uniform());
  });
});

describe('measures', () => {
  it('a ramp reference whose bin boundaries round back below themselves (39.025… ms) still ends', () => {
    // (r0 + 1000) − r0 is just under 1000 for this r0: the ramp bins once looped forever on it.
    const r0 = 0.039025426999413526;
    expect(Math.floor((r0 * 1000 + 1000 - r0 * 1000) / 1000)).toBe(0);
    const s = parseScenario({
      name: 'ramp-rounding',
      rampFromS: r0,
      kinds: { proof: { prepare: { type: 'fixed', value: 3 } } },
      devices: [{ workers: 2, service: { type: 'fixed', value: 1 } }],
      arrivals: [{ atS: 0, jobs: 2, partitions: 10, kind: 'proof' }],
    });
    const r = simulate(s, { pacer: stoker });
    expect(r.metrics.jobsDone).toBe(2);
  });
});

describe('Rng', () => {
  it('is uniform on [0, 1) and normal with mean 0 and sd 1', () => {
    const rng = new Rng(42);
    let sum = 0;
    let sq = 0;
    let min = 1;
    let max = 0;
    const n = 20_000;
    for (let i = 0; i < n; i++) {
      const u = rng.uniform();
      min = Math.min(min, u);
      max = Math.max(max, u);
      const z = rng.normal();
      sum += z;
      sq += z * z;
    }
    expect(min).toBeGreaterThanOrEqual(0);
    expect(max).toBeLessThan(1);
    expect(Math.abs(sum / n)).toBeLessThan(0.03);
    expect(Math.abs(sq / n - 1)).toBeLessThan(0.05);
  });
});

describe('arrivals and the steady window', () => {
  it('expands batches and Poisson arrivals into ordered job ids', () => {
    const s = parseScenario({
      name: 't',
      kinds: { k: { prepare: { type: 'fixed', value: 1 } } },
      devices: [{ workers: 1, service: { type: 'fixed', value: 1 } }],
      arrivals: [
        { atS: 10, jobs: 2, partitions: 1, kind: 'k', everyS: 5 },
        { poisson: { ratePerS: 1, untilS: 30 }, partitions: 2, kind: 'k' },
      ],
    });
    const jobs = planArrivals(s, 1);
    expect(jobs.map((j) => j.spec.id)).toEqual(jobs.map((_, i) => `job-${i}`));
    const times = jobs.map((j) => j.atMs);
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    expect(times).toContain(10_000);
    expect(times).toContain(15_000);
    // About 30 Poisson arrivals in 30 s at 1/s.
    expect(jobs.length - 2).toBeGreaterThan(15);
    expect(jobs.length - 2).toBeLessThan(50);
  });

  it('the seed window starts after two passes through the pipeline and ends before the drain', () => {
    const jobs = planArrivals(seed, 1);
    const w = steadyWindow(seed, jobs, 2 / 1200);
    expect(w.fromMs).toBe(2 * (50_000 + 1_000));
    // Ideal drain: 40 s latency + 400 items at 1/0.6 s = 280 s, less the 50 s p99 latency.
    expect(w.toMs).toBeCloseTo(230_000, -3);
  });

  it('where kinds differ on the device, it starts two passes after the devices could reach each kind, a high-priority kind first', () => {
    const kind = (value: number, service: number) => ({ prepare: { type: 'fixed', value }, service: { type: 'fixed', value: service } }) as const;
    const input = (priority: 'high' | 'normal') => ({
      name: 'blocks',
      kinds: { heavy: kind(10, 2), light: kind(10, 1) },
      devices: [{ workers: 1, service: { type: 'fixed', value: 1 } }],
      arrivals: [
        { atS: 0, jobs: 10, partitions: 10, kind: 'heavy' },
        { atS: 0, jobs: 10, partitions: 10, kind: 'light', priority },
      ],
    });
    const window = (priority: 'high' | 'normal') => {
      const s = parseScenario(input(priority));
      return steadyWindow(s, planArrivals(s, 1), 1 / 1000);
    };
    // Behind 100 heavy items (200 s of device time), light is first reached at 200 s…
    expect(window('normal').fromMs).toBe(200_000 + 2 * (10_000 + 2_000));
    // …but a high-priority light goes first, and heavy is reached behind it (100 s).
    expect(window('high').fromMs).toBe(100_000 + 2 * (10_000 + 2_000));
  });

  it('a device service of 0 beside kinds that each give their own counts work in the kinds’ time (the window was empty, or the ratio NaN)', () => {
    const input = (deviceS: number, batch: boolean): ScenarioInput => ({
      name: 'placeholder',
      kinds: { k: { prepare: { type: 'fixed', value: 1 }, service: { type: 'fixed', value: 1 } } },
      devices: [{ workers: 1, service: { type: 'fixed', value: deviceS }, ...(batch ? { batch: { maxItems: 4, maxWaitS: 0, fixed: { type: 'fixed', value: 0.1 } } } : {}) }],
      arrivals: [{ atS: 0, jobs: 20, partitions: 10, kind: 'k' }],
    });
    for (const batch of [false, true]) {
      const [zero, one] = [0, 1].map((deviceS) => simulate(parseScenario(input(deviceS, batch)), { pacer: () => createPacer('unpaced') }));
      // The device's own service time is read by no kind: the same run, the same measures, as with 1 s.
      expect(zero?.window, String(batch)).toEqual(one?.window);
      expect(zero?.window.toMs).toBeGreaterThan(zero?.window.fromMs as number);
      expect(zero?.metrics.throughputRatio).toBe(one?.metrics.throughputRatio);
      expect(Number.isFinite(zero?.metrics.throughputRatio)).toBe(true);
    }
  });

  it('a speed event at 0 s is the devices’ speed from the start: the window and the ratio as with that speed on the device (the ratio read 1.33)', () => {
    const input = (speed: 'device' | 'event', device?: number): ScenarioInput => ({
      name: 'speed-at-0',
      kinds: { proof: { prepare: { type: 'uniform', min: 2, max: 4 } } },
      devices: [{ count: 2, workers: 2, service: { type: 'fixed', value: 0.2 }, ...(speed === 'device' ? { speed: 0.5 } : {}) }],
      arrivals: [{ atS: 0, jobs: 60, partitions: 10, kind: 'proof' }],
      events: speed === 'event' ? [{ type: 'speed', atS: 0, speed: 0.5, ...(device === undefined ? {} : { device }) }] : [],
    });
    const run = (s: ScenarioInput) => simulate(parseScenario(s), { pacer: () => createPacer('unpaced') });
    const onDevice = run(input('device'));
    const atZero = run(input('event'));
    expect(atZero.window).toEqual(onDevice.window);
    expect(atZero.metrics.throughputRatio).toBe(onDevice.metrics.throughputRatio);
    expect(atZero.lastEndMs).toBe(onDevice.lastEndMs);
    // One device of the two slowed at 0 s: the capacity is 1.5 devices' worth from the start.
    expect(run(input('event', 1)).metrics.throughputRatio).toBeLessThan(1.05);
  });
});

describe('fluid contention', () => {
  const preparedAt = (scenario: ScenarioInput) => {
    const times: Record<string, number> = {};
    simulate(parseScenario(scenario), {
      pacer: (o) => createPacer('unpaced', o),
      onStep: (e, cmds) => {
        if (e.type === 'prepared') for (const c of cmds) if (c.type === 'startDevice') times[c.item.jobId] = e.time;
      },
    });
    return times;
  };

  it('a preparation in flight slows down when another starts and speeds up when it ends (kinds.*.contention)', () => {
    // 10 s alone, ×2 with two at once. A starts at 0; B at 5 s: A's last 5 s take 10 s (done at
    // 15 s), then B runs alone: 5 s of its work done by then, 5 s more (done at 20 s).
    const times = preparedAt({
      name: 'two',
      kinds: { k: { prepare: { type: 'fixed', value: 10 }, contention: [1, 2] } },
      devices: [{ workers: 2, service: { type: 'fixed', value: 0.001 } }],
      arrivals: [
        { atS: 0, partitions: 1, kind: 'k' },
        { atS: 5, partitions: 1, kind: 'k' },
      ],
    });
    expect(times['job-0']).toBeCloseTo(15_000, 6);
    expect(times['job-1']).toBeCloseTo(20_000, 6);
  });

  it('a kind’s own service time overrides the device’s for its items, and the throughput ratio weighs the mix', () => {
    const s = parseScenario({
      name: 'mix',
      kinds: { light: { prepare: { type: 'fixed', value: 1 } }, heavy: { prepare: { type: 'fixed', value: 1 }, service: { type: 'fixed', value: 4 } } },
      devices: [{ workers: 1, service: { type: 'fixed', value: 1 } }],
      arrivals: [
        { atS: 0, jobs: 20, partitions: 10, kind: 'heavy' },
        { atS: 0, jobs: 20, partitions: 10, kind: 'light' },
      ],
    });
    const r = simulate(s, { pacer: (o) => createPacer('unpaced', o) });
    // One worker, never idle: every second of device time is capacity used, heavy or light.
    expect(r.metrics.throughputRatio).toBeCloseTo(1, 2);
    expect(r.simulatedMs).toBeCloseTo(1000 + 200 * 4000 + 200 * 1000, -1);
  });

  it('measures that count items (inventoryRatio, burstMax, the capacity series) read the same whether a kind or its device carries the service time', () => {
    const base = {
      name: 'same',
      kinds: { proof: { prepare: { type: 'uniform', min: 45, max: 60 }, memory: { prepareBytes: 15 * 2 ** 30, deviceBytes: 2 ** 30 } } },
      devices: [{ count: 2, workers: 2, service: { type: 'fixed', value: 3 }, contention: [1, 1.3] }],
      arrivals: [{ atS: 0, jobs: 20, partitions: 10, kind: 'proof' }],
    } as const;
    const onKind = parseScenario({ ...base, kinds: { proof: { ...base.kinds.proof, service: { type: 'fixed', value: 6 } } } });
    const onDevice = parseScenario({ ...base, devices: [{ ...base.devices[0], service: { type: 'fixed', value: 6 } }] });
    for (const pacer of ['stoker', 'classic']) {
      const [k, d] = [onKind, onDevice].map((s) => simulate(s, { pacer: (o) => createPacer(pacer, o) }));
      expect(k?.metrics.itemsPerSec).toBe(d?.metrics.itemsPerSec);
      expect([k?.metrics.inventoryRatio, k?.metrics.burstMax, k?.series.capacity]).toEqual([d?.metrics.inventoryRatio, d?.metrics.burstMax, d?.series.capacity]);
    }
  });
});

describe('scenario validation', () => {
  const valid: ScenarioInput = {
    name: 'ok',
    kinds: { k: { prepare: { type: 'uniform', min: 1, max: 2 } } },
    devices: [{ workers: 2, service: { type: 'fixed', value: 1 } }],
    arrivals: [{ atS: 0, jobs: 1, partitions: 1, kind: 'k' }],
  };

  it('accepts a minimal scenario and fills in the documented defaults', () => {
    const s = parseScenario(valid);
    expect(s.seed).toBe(1);
    expect(s.targetWaiting).toBe(4);
    expect(s.devices[0]?.count).toBe(1);
    expect(s.devices[0]?.contention).toEqual([1]);
    expect(s.budgetBytes).toBeUndefined();
  });

  const cases: [string, unknown, RegExp][] = [
    ['workers 0', { ...valid, devices: [{ workers: 0, service: { type: 'fixed', value: 1 } }] }, /devices\[0\]\.workers: workers must be ≥ 1/],
    ['unknown distribution', { ...valid, kinds: { k: { prepare: { type: 'gauss', mean: 1 } } } }, /kinds\.k\.prepare\.type: type must be one of fixed, uniform, lognormal, empirical/],
    ['uniform max < min', { ...valid, kinds: { k: { prepare: { type: 'uniform', min: 5, max: 2 } } } }, /kinds\.k\.prepare\.max: max must be ≥ min/],
    ['misspelt field', { ...valid, devices: [{ workers: 1, servise: { type: 'fixed', value: 1 } }] }, /devices\[0\]: unknown field\(s\) "servise" \(did you mean "service"\?\): remove them or check the spelling/],
    ['a misspelt top-level field', { ...valid, targetWating: 2 }, /\(root\): unknown field\(s\) "targetWating" \(did you mean "targetWaiting"\?\)/],
    // Held against the fields of that object, not every name at any depth ("foo" read "did you mean job?"), and a field of another form said as such ("atS" beside poisson read "did you mean toS?").
    ['an unknown top-level field', { ...valid, foo: 1 }, /\(root\): unknown field\(s\) "foo": remove them/],
    ['two arrival forms mixed', { ...valid, arrivals: [{ atS: 0, poisson: { ratePerS: 1, untilS: 10 }, partitions: 1, kind: 'k' }] }, /arrivals\[0\]: unknown field\(s\) "atS" \(a field of another form of this object: do not mix the forms\)/],
    ['a worker event on a one-device scenario naming device 1', { ...valid, events: [{ type: 'workerLost', atS: 1, device: 1, worker: 0 }] }, /events\[0\]\.device: there is 1 device \(0\)$/m],
    ['unknown kind in arrivals', { ...valid, arrivals: [{ atS: 0, partitions: 1, kind: 'nope' }] }, /arrivals\[0\]\.kind: unknown kind "nope"; define it under "kinds"/],
    ['worker out of range', { ...valid, events: [{ type: 'workerLost', atS: 1, worker: 5 }] }, /events\[0\]\.worker: device 0 has 2 workers/],
    ['negative budget', { ...valid, budgetBytes: -1 }, /budgetBytes: budgetBytes must be ≥ 0/],
    ['no devices', { ...valid, devices: [] }, /devices: list at least one device group/],
    ['a missing required field', { name: 'x', kinds: valid.kinds, devices: valid.devices }, /^ {2}arrivals: missing: this field is required \(array\)$/m],
    ['a batch arrival with an unknown priority', { ...valid, arrivals: [{ atS: 0, partitions: 1, kind: 'k', priority: 'urgent' }] }, /^ {2}arrivals\[0\]\.priority: priority must be one of critical, high, normal, low$/m],
    ['a Poisson arrival with a bad rate', { ...valid, arrivals: [{ poisson: { ratePerS: -1, untilS: 10 }, partitions: 1, kind: 'k' }] }, /^ {2}arrivals\[0\]\.poisson\.ratePerS: ratePerS must be > 0$/m],
  ];
  it('lists every wrong field at once: an unknown arrival kind beside the schema’s problems', () => {
    const input = { ...valid, targetWaiting: -1, arrivals: [{ atS: 0, partitions: 1, kind: 'nope', priority: 'urgent' }] };
    expect(() => parseScenario(input, 'my.json')).toThrow(/targetWaiting: targetWaiting must be ≥ 0\n {2}arrivals\[0\]\.priority: priority must be one of .*\n {2}arrivals\[0\]\.kind: unknown kind "nope"/);
  });
  it.each(cases)('rejects %s with the field path and the fix', (_name, input, message) => {
    expect(() => parseScenario(input, 'my.json')).toThrow(ScenarioError);
    expect(() => parseScenario(input, 'my.json')).toThrow(message);
    expect(() => parseScenario(input, 'my.json')).toThrow(/^my\.json is invalid:/);
  });

  it('a worker returns only once lost, and is lost only while it works (in time order, not file order)', () => {
    const events = (list: unknown[]) => () => parseScenario({ ...valid, events: list });
    expect(events([{ type: 'workerReturned', atS: 5, device: 0, worker: 1 }])).toThrow('events[0]: worker 1 of device 0 returns at 5 s but was not lost before (a workerLost of it comes first)');
    expect(events([{ type: 'workerLost', atS: 5, device: 0, worker: 1 }, { type: 'workerLost', atS: 9, device: 0, worker: 1 }])).toThrow('events[1]: worker 1 of device 0 is lost at 9 s while lost already (events[0]): a workerReturned of it comes between');
    expect(events([{ type: 'workerReturned', atS: 9, device: 0, worker: 1 }, { type: 'workerLost', atS: 5, device: 0, worker: 1 }, { type: 'workerLost', atS: 20, device: 0, worker: 0 }])).not.toThrow();
  });

  it('every built-in scenario is valid and has a one-line description', () => {
    for (const s of SCENARIOS.values()) {
      expect(s.description.length).toBeGreaterThan(10);
      expect(s.description).not.toContain('\n');
    }
  });
});

describe('the README', () => {
  it('shows a scenario file that validates and runs', async () => {
    const { readFileSync } = await import('node:fs');
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const block = /```json\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBeDefined();
    const s = parseScenario(JSON.parse(block as string), 'README example');
    expect(s.name).toBe('my-prover');
    const r = simulate({ ...s, arrivals: s.arrivals.slice(0, 1) }, { pacer: stoker });
    expect(r.metrics.jobsDone + r.metrics.jobsFailed + r.metrics.jobsCancelled).toBe(r.jobsSubmitted);
  });
});

describe('deadlines and priority classes in a scenario', () => {
  // A user's mix: bulk low jobs, critical ones with a deadline they meet, a normal one with a deadline it cannot.
  const mix: ScenarioInput = {
    name: 'deadline-mix',
    targetWaiting: 4,
    kinds: { proof: { prepare: { type: 'fixed', value: 2 }, memory: { prepareBytes: 1, deviceBytes: 1 } } },
    devices: [{ workers: 1, service: { type: 'fixed', value: 1 } }],
    arrivals: [
      { atS: 0, jobs: 5, partitions: 10, kind: 'proof', priority: 'low' },
      { atS: 5, jobs: 2, everyS: 5, partitions: 2, kind: 'proof', priority: 'critical', deadlineS: 8 },
      { atS: 6, partitions: 5, kind: 'proof', priority: 'normal', deadlineS: 3 },
    ],
  };

  it('arrivals[].deadlineS gives each job a deadline after it arrives: one not done by then fails E_DEADLINE (the schema refused the field)', () => {
    const s = parseScenario(mix);
    expect(planArrivals(s, s.seed).map((j) => [j.spec.id, j.spec.priority, j.spec.deadline])).toEqual([
      ['job-0', 'low', undefined],
      ['job-1', 'low', undefined],
      ['job-2', 'low', undefined],
      ['job-3', 'low', undefined],
      ['job-4', 'low', undefined],
      ['job-5', 'critical', 13_000],
      ['job-6', 'normal', 9_000],
      ['job-7', 'critical', 18_000],
    ]);
    const r = simulate(s, { pacer: stoker });
    expect(r.failures).toEqual([{ job: 'job-6', state: 'failed', code: 'E_DEADLINE', reason: 'job job-6 missed its deadline (at 9000 ms on the driver\'s clock)' }]);
    expect(r.metrics.jobsDone).toBe(7);
    expect(() => parseScenario({ ...mix, arrivals: [{ atS: 0, partitions: 1, kind: 'proof', deadlineS: 0 }] })).toThrow(/deadlineS must be > 0/);
  });

  it('byPriority gives each class that arrives its jobs done and latency, critical first (a class had no row of its own)', () => {
    const r = simulate(parseScenario(mix), { pacer: stoker });
    expect(r.byPriority.map((p) => [p.priority, p.jobsDone])).toEqual([
      ['critical', 2],
      ['normal', 0],
      ['low', 5],
    ]);
    const critical = r.byPriority[0]?.jobLatencyP99Ms as number;
    const low = r.byPriority[2]?.jobLatencyP50Ms as number;
    // The critical jobs overtake the bulk: one preparation and their device steps, well under the low jobs' latency.
    expect(critical).toBeLessThan(8_000);
    expect(low).toBeGreaterThan(critical * 4);
    // One class only: its latency is the metrics' own (the JSON record leaves the rows out).
    expect(simulate(seed, { pacer: stoker }).byPriority.map((p) => p.priority)).toEqual(['normal']);
  });
});

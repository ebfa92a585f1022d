/**
 * The fitter against the simulator: a known scenario is simulated with a timeline (the same
 * recorder a real run uses), the run is fitted back, and the fit recovers the scenario's
 * parameters within stated tolerances — preparation latency alone, its slowdown with concurrent
 * preparations, the device's workers, service time and slowdown with busy workers, the arrivals
 * and the memory. Both sides are deterministic (seeded), so the tolerances hold exactly as run.
 */
import { describe, expect, it } from 'vitest';
import { createPacer, TimelineRecorder } from '../../src/core/index.js';
import { fitRun, PlanError, type RecordedRun } from '../../src/plan/fit.js';
import { configLines, type PlanRow } from '../../src/plan/sweep.js';
import { parseScenario, simulate } from '../../src/sim/index.js';
import { fromChromeTrace, toChromeTrace } from '../../src/report/chrome-trace.js';

const MiB = 2 ** 20;
/** Preparations slow by 1.2× with 2 at once, 1.5× with 3, 1.8× with 4 or more; the device 1.3× with both workers busy. */
const known = parseScenario({
  name: 'known',
  targetWaiting: 4,
  kinds: { proof: { prepare: { type: 'lognormal', median: 2, sigma: 0.2 }, contention: [1, 1.2, 1.5, 1.8], memory: { prepareBytes: 64 * MiB, deviceBytes: 8 * MiB } } },
  devices: [{ workers: 2, service: { type: 'lognormal', median: 1, sigma: 0.1 }, contention: [1, 1.3] }],
  // One-partition jobs at about 40 % of the device's capacity: preparations run alone and a few at
  // once (a fit can only see the levels a run reached).
  arrivals: [{ poisson: { ratePerS: 0.6, untilS: 1800 }, partitions: 1, kind: 'proof' }],
});

function recorded(seed = 1): { run: RecordedRun; jobs: number } {
  const timeline = new TimelineRecorder({ maxSpans: 100_000 });
  const r = simulate(known, { seed, timeline, pacer: (o) => createPacer('stoker', o) });
  return { run: { lanes: timeline.lanes(), spans: timeline.spans(), jobs: timeline.jobs() }, jobs: r.jobsSubmitted };
}

const near = (got: number, want: number, tol: number) => expect(Math.abs(got / want - 1), `${got} vs ${want}`).toBeLessThanOrEqual(tol);

describe('fitting a scenario from a recorded run', () => {
  it('recovers preparation and device times, their slowdowns, the workers, the arrivals and the memory', () => {
    const { run, jobs } = recorded();
    const { scenario, fit } = fitRun(run, 'refit');
    const k = fit.kinds['proof'];
    if (!k) throw new Error('no fit for kind proof');
    const d = fit.devices[0];
    if (!d) throw new Error('no fit for device 0');
    console.log(
      `fit: preparation alone ${k.prepare.baseMedianS.toFixed(2)} s (true 2), contention ${k.prepare.contention.map((x) => x.toFixed(2)).join(' ')} (true 1 1.2 1.5 1.8), from ${k.prepare.samples} samples; device alone ${d.service.baseMedianS.toFixed(3)} s (true 1), contention ${d.service.contention.map((x) => x.toFixed(2)).join(' ')} (true 1 1.3), ${d.workers} workers`,
    );
    // Medians of lognormal times are the medians given; within 5 % and 3 %.
    near(k.prepare.baseMedianS, 2, 0.05);
    near(d.service.baseMedianS, 1, 0.03);
    expect(d.workers).toBe(2);
    // The slowdowns at the levels the run reached, within 8 % (spans straddle levels: the fit corrects for it, not exactly).
    const c = k.prepare.contention;
    expect(c.length).toBeGreaterThanOrEqual(3);
    [1, 1.2, 1.5, 1.8].slice(0, c.length).forEach((want, i) => near(c[i] as number, want, 0.08));
    near(d.service.contention[1] as number, 1.3, 0.05);
    expect(fit.jobs).toBe(jobs);
    expect(scenario.arrivals).toHaveLength(jobs);
    expect(scenario.kinds?.['proof']?.memory).toEqual({ prepareBytes: 64 * MiB, deviceBytes: 8 * MiB });
    // The fitted scenario is a valid one and replays the run's arrivals: simulated with its own
    // draws it finishes the same jobs, the devices as busy (occupancy within 3 %).
    const refit = parseScenario(scenario, 'the fitted scenario');
    const a = simulate(known, { seed: 1, pacer: (o) => createPacer('stoker', o) });
    const b = simulate(refit, { seed: 7, pacer: (o) => createPacer('stoker', o) });
    expect(b.metrics.jobsDone).toBe(a.metrics.jobsDone);
    near(b.metrics.occupancy as number, a.metrics.occupancy as number, 0.03);
  });

  it('reads no slowdown where preparations share nothing but a cap keeps three running (a user: ×1.35 at three, each read 15 % slower alone), from the spans\' starts', () => {
    // Three at most (threads × concurrency 1), nearly always three: a preparation that ran at two
    // throughout is one short enough to fit in a dip, and binned by the levels they ran at the
    // short ones read as quicker at two.
    const capped = parseScenario({
      name: 'capped',
      targetWaiting: 4,
      maxPreparing: 3,
      kinds: { tok: { prepare: { type: 'uniform', min: 0.02, max: 0.08 }, memory: { prepareBytes: 64 * MiB, deviceBytes: 16 * MiB } } },
      devices: [{ workers: 2, service: { type: 'uniform', min: 0.01, max: 0.03 }, contention: [1, 1.6] }],
      arrivals: [{ poisson: { ratePerS: 5, untilS: 300 }, partitions: 4, kind: 'tok' }],
    });
    for (const seed of [1, 2, 3]) {
      const timeline = new TimelineRecorder({ maxSpans: 100_000 });
      simulate(capped, { seed, timeline, pacer: (o) => createPacer('stoker', o) });
      const p = fitRun({ lanes: timeline.lanes(), spans: timeline.spans(), jobs: timeline.jobs() }, 'refit').fit.kinds['tok']?.prepare;
      if (!p) throw new Error('no fit for kind tok');
      expect(p.contention).toEqual([1]);
      // (The levels alone read ×1.9–2.3 at three and each preparation 0.028–0.031 s alone.)
      expect(p.unconfirmed?.factor).toBeGreaterThan(1.5);
      near(p.baseMedianS, 0.05, 0.05);
    }
  });

  it('reads the same run back from its Chrome trace', () => {
    const { run } = recorded();
    const trace = JSON.parse(JSON.stringify(toChromeTrace({ lanes: run.lanes, spans: run.spans, samples: [], jobs: run.jobs, title: 't', now: 0, originMs: 0 })));
    const back = fromChromeTrace(trace);
    const direct = fitRun(run).fit;
    const viaTrace = fitRun(back).fit;
    // Times round to µs in a trace.
    near(viaTrace.kinds['proof']?.prepare.baseMedianS as number, direct.kinds['proof']?.prepare.baseMedianS as number, 1e-6);
    expect(viaTrace.devices.map((d) => d.workers)).toEqual(direct.devices.map((d) => d.workers));
    expect(viaTrace.jobs).toBe(direct.jobs);
  });

  it('keeps the devices’ names from a server’s trace: the config lines name its table (they said [device] for the [devices.gpu] that ran every step)', () => {
    const { run } = recorded();
    const trace = JSON.parse(JSON.stringify(toChromeTrace({ lanes: run.lanes, spans: run.spans, samples: [], jobs: run.jobs, title: 't', now: 0, deviceNames: ['gpu'] })));
    const names = (trace.traceEvents as { ph: string; name: string; args?: { name?: string } }[]).filter((e) => e.ph === 'M' && e.name === 'thread_name').map((e) => e.args?.name);
    expect(names).toContain('device 0 (gpu) / worker 1');
    const back = fromChromeTrace(trace);
    expect(back.deviceNames).toEqual({ 0: 'gpu' });
    const { scenario, fit } = fitRun(back);
    expect(fit.devices[0]?.name).toBe('gpu');
    const lines = configLines({ pacer: 'stoker', targetWaiting: 8, budgetBytes: null, maxPreparing: null, workers: [1] } as PlanRow, parseScenario(scenario, 'fitted'));
    expect(lines).toContain('[devices.gpu]');
    expect(lines).not.toContain('[device]');
    expect(lines.slice(lines.indexOf('[devices.gpu]'))).toEqual(['[devices.gpu]', 'workers = 1']);
    // A name with a dot (a server allows it) is a quoted key.
    const dotted = parseScenario({ ...scenario, devices: scenario.devices.map((d) => ({ ...d, name: 'gpu.0' })) }, 'dotted');
    expect(configLines({ pacer: 'stoker', targetWaiting: 8, budgetBytes: null, maxPreparing: null, workers: [1] } as PlanRow, dotted)).toContain('[devices."gpu.0"]');
  });

  it('keeps the run’s memory budget, the machine’s memory, from its trace (a plan had swept budgets past it), and notes where none was recorded', () => {
    const { run } = recorded();
    const traced = (budgetBytes?: number) => fromChromeTrace(JSON.parse(JSON.stringify(toChromeTrace({ lanes: run.lanes, spans: run.spans, samples: [], jobs: run.jobs, title: 't', now: 0, ...(budgetBytes === undefined ? {} : { budgetBytes }) }))));
    const withBudget = fitRun(traced(512 * MiB));
    expect(withBudget.scenario.budgetBytes).toBe(512 * MiB);
    expect(withBudget.fit.notes.join('\n')).not.toMatch(/no memory budget/);
    for (const none of [undefined, Infinity]) {
      const without = fitRun(traced(none));
      expect(without.scenario.budgetBytes).toBeUndefined();
      expect(without.fit.notes).toContainEqual(expect.stringMatching(/^the run recorded no memory budget: .*stoker plan --budget-bytes/));
    }
  });

  it('refuses a run too short to fit, or one without job records, saying what to do', () => {
    const { run } = recorded();
    const short = { ...run, spans: run.spans.slice(0, 8) };
    expect(() => fitRun(short)).toThrow(PlanError);
    expect(() => fitRun(short)).toThrow(/a fit needs at least 10 of each: record a longer run/);
    expect(() => fitRun({ ...run, jobs: [] })).toThrow(/no job records/);
    expect(() => fromChromeTrace({ events: [] })).toThrow(/no traceEvents array/);
  });

  it('a rare kind does not stop the fit: with a few finished it is fitted from those, with none it is left out, each noted', () => {
    // The run with two more kinds: "rare" with 2 finished preparations (copies of two proof
    // spans, their jobs renamed), "lost" with a job whose preparation never finished.
    const { run } = recorded();
    const proofs = run.spans.filter((s) => s.kind === 'prepare' && s.outcome === 'done').slice(0, 2);
    const rareJobs = proofs.map((s, i) => ({ ...(run.jobs.find((j) => j.id === s.jobId) as RecordedRun['jobs'][number]), id: `rare-${i}`, kind: 'rare' }));
    const rareSpans = proofs.map((s, i) => ({ ...s, jobId: `rare-${i}` }));
    const lost = { ...(run.jobs[0] as RecordedRun['jobs'][number]), id: 'lost-0', kind: 'lost' };
    const { scenario, fit } = fitRun({ ...run, jobs: [...run.jobs, ...rareJobs, lost], spans: [...run.spans, ...rareSpans] });
    expect(Object.keys(scenario.kinds).sort()).toEqual(['proof', 'rare']);
    expect(scenario.arrivals.filter((a) => a.kind === 'rare')).toHaveLength(2);
    expect(scenario.arrivals.some((a) => a.kind === 'lost')).toBe(false);
    expect(fit.notes).toEqual(expect.arrayContaining(['kind rare: 2 finished preparations, under 10: its preparation time is those few', 'kind lost: no finished preparation: left out of the scenario, with its 1 job']));
    expect(() => parseScenario(scenario)).not.toThrow();
  });
});

describe('a kind whose jobs differ in memory per partition', () => {
  it('is fitted as one kind per size, each with its own memory, preparation and device time and arrivals (it was fitted with the first job\'s memory)', () => {
    // Two kinds in the simulator (a 64 MiB and a 1 GiB partition, the big one 3 × slower on the
    // device), recorded under one name: what a proving service with sectors of two sizes records.
    const GiB = 2 ** 30;
    const two = parseScenario({
      name: 'two-sizes',
      kinds: {
        small: { prepare: { type: 'uniform', min: 1, max: 2 }, memory: { prepareBytes: 64 * MiB, deviceBytes: 8 * MiB } },
        big: { prepare: { type: 'uniform', min: 3, max: 5 }, service: { type: 'fixed', value: 3 }, memory: { prepareBytes: GiB, deviceBytes: GiB / 4 } },
      },
      devices: [{ workers: 2, service: { type: 'fixed', value: 1 } }],
      arrivals: [
        { poisson: { ratePerS: 0.3, untilS: 600 }, partitions: 1, kind: 'small' },
        { poisson: { ratePerS: 0.1, untilS: 600 }, partitions: 1, kind: 'big' },
      ],
    });
    const timeline = new TimelineRecorder({ maxSpans: 100_000 });
    simulate(two, { seed: 1, timeline, pacer: (o) => createPacer('stoker', o) });
    const run: RecordedRun = { lanes: timeline.lanes(), spans: timeline.spans(), jobs: timeline.jobs().map((j) => ({ ...j, kind: 'sector' })) };
    const { scenario, fit } = fitRun(run, 'refit');
    expect(Object.keys(fit.kinds).sort()).toEqual(['sector 0.0625/0.00781 GiB', 'sector 1/0.25 GiB']);
    expect(fit.notes.join('\n')).toMatch(/kind sector: jobs differ in memory per partition: fitted as 2 kinds, one per size/);
    const small = fit.kinds['sector 0.0625/0.00781 GiB'];
    const big = fit.kinds['sector 1/0.25 GiB'];
    expect(big?.prepareBytes).toBe(GiB);
    expect(small?.prepareBytes).toBe(64 * MiB);
    // (Device steps deflated to one busy worker: the device's own 1 s, and 3 s for the big.)
    near(big?.service?.baseMedianS ?? NaN, 3, 0.15);
    near(small?.service?.baseMedianS ?? NaN, 1, 0.15);
    expect((big?.prepare.medianS ?? 0) > 2 * (small?.prepare.medianS ?? 0)).toBe(true);
    // The scenario parses, and its arrivals are of both sizes.
    const parsed = parseScenario(scenario, 'the fitted scenario');
    expect(new Set(parsed.arrivals.map((a) => ('kind' in a ? a.kind : '')))).toEqual(new Set(['sector 0.0625/0.00781 GiB', 'sector 1/0.25 GiB']));
  });

  it('keeps which kinds each device ran where devices ran only some (the replay ran any kind anywhere, and the config lines had one [device])', () => {
    const pinned = parseScenario({
      name: 'pinned',
      kinds: {
        small: { prepare: { type: 'uniform', min: 1, max: 2 }, memory: { prepareBytes: 64 * MiB, deviceBytes: 8 * MiB } },
        large: { prepare: { type: 'uniform', min: 2, max: 3 }, memory: { prepareBytes: 128 * MiB, deviceBytes: 16 * MiB } },
      },
      devices: [
        { workers: 2, kinds: ['small'], service: { type: 'fixed', value: 0.5 } },
        { workers: 1, kinds: ['large'], service: { type: 'fixed', value: 0.7 } },
      ],
      arrivals: [
        { poisson: { ratePerS: 0.5, untilS: 400 }, partitions: 2, kind: 'small' },
        { poisson: { ratePerS: 0.3, untilS: 400 }, partitions: 2, kind: 'large' },
      ],
    });
    const timeline = new TimelineRecorder({ maxSpans: 100_000 });
    simulate(pinned, { seed: 1, timeline, pacer: (o) => createPacer('stoker', o) });
    const { scenario, fit } = fitRun({ lanes: timeline.lanes(), spans: timeline.spans(), jobs: timeline.jobs() }, 'refit');
    expect(scenario.devices?.map((d) => d.kinds)).toEqual([['small'], ['large']]);
    expect(fit.notes).toContain('device 0 ran only kind small: fitted as running only it');
    // The config lines: a device each, and the kind off the first named to its own.
    const parsed = parseScenario(scenario, 'the fitted scenario');
    const lines = configLines({ pacer: 'stoker', targetWaiting: 4, budgetBytes: null, maxPreparing: null, workers: [2, 1] } as PlanRow, parsed);
    expect(lines).toEqual(expect.arrayContaining(['[device]', 'workers = 2', '[devices.group1]', 'workers = 1', '[kinds.large]', 'device = "group1"']));
    // One device running both: no kinds.
    const one = fitRun(recorded().run, 'one');
    expect(one.scenario.devices?.[0]?.kinds).toBeUndefined();
  });
});

describe('a batched run', () => {
  // Batches on the device (a launch of 0.2 s + 0.05 s per item, up to 8) and in preparation (a
  // setup of 0.5 s + 1 s per item, up to 4): jobs of 1 to 6 partitions make batches of every size.
  const batched = parseScenario({
    name: 'batched',
    targetWaiting: 8,
    kinds: { embed: { prepare: { type: 'lognormal', median: 1, sigma: 0.1 }, prepareBatch: { maxItems: 4, maxWaitS: 0.5, fixed: { type: 'fixed', value: 0.5 } }, memory: { prepareBytes: 4 * MiB, deviceBytes: MiB } } },
    devices: [{ workers: 1, service: { type: 'lognormal', median: 0.05, sigma: 0.1 }, batch: { maxItems: 8, maxWaitS: 0.02, fixed: { type: 'fixed', value: 0.2 } } }],
    arrivals: [1, 2, 3, 4, 5, 6].map((partitions) => ({ poisson: { ratePerS: 0.15, untilS: 900 }, partitions, kind: 'embed' })),
  });
  const timeline = new TimelineRecorder({ maxSpans: 100_000 });
  const original = simulate(batched, { seed: 3, timeline, pacer: (o) => createPacer('stoker', o) });
  const trace = (settings: boolean) =>
    fromChromeTrace(JSON.parse(JSON.stringify(toChromeTrace({ lanes: timeline.lanes(), spans: timeline.spans(), samples: [], jobs: timeline.jobs(), title: 't', now: 0, originMs: 0, ...(settings ? { deviceBatches: [{ maxItems: 8, maxWaitMs: 20 }], prepareBatches: { embed: { maxItems: 4, maxWaitMs: 500 } } } : {}) }))));

  it('is fitted with its fixed and per-item parts and the settings its trace recorded (a batched run was refused)', () => {
    const { scenario, fit } = fitRun(trace(true));
    const d = fit.devices[0]?.batch;
    const k = fit.kinds['embed']?.prepareBatch;
    if (!d || !k) throw new Error('no batch fit');
    console.log(`batched fit: device ${d.batches} batches of ${d.meanItems.toFixed(2)}, fixed ${d.fixedS.toFixed(3)} s (true 0.2), per item ${d.perItemMedianS.toFixed(4)} s (true 0.05); preparation ${k.batches} batches of ${k.meanItems.toFixed(2)}, fixed ${k.fixedS.toFixed(3)} s (true 0.5), per item ${k.perItemMedianS.toFixed(3)} s (true 1)`);
    expect(d.meanItems).toBeGreaterThan(1.5);
    expect(k.meanItems).toBeGreaterThan(1.5);
    near(d.fixedS, 0.2, 0.02);
    near(d.perItemMedianS, 0.05, 0.02);
    near(k.fixedS, 0.5, 0.05);
    near(k.perItemMedianS, 1, 0.05);
    expect({ d: [d.maxItems, d.maxWaitS, d.recorded], k: [k.maxItems, k.maxWaitS, k.recorded] }).toEqual({ d: [8, 0.02, true], k: [4, 0.5, true] });
    // The fitted scenario replays the run: the same jobs done, the device as busy (within 5 %).
    const refit = parseScenario(scenario, 'the fitted scenario');
    expect(refit.devices[0]?.batch?.maxItems).toBe(8);
    expect(refit.kinds['embed']?.prepareBatch?.maxItems).toBe(4);
    const replay = simulate(refit, { seed: 7, pacer: (o) => createPacer('stoker', o) });
    expect(replay.metrics.jobsDone).toBe(original.metrics.jobsDone);
    near(replay.metrics.occupancy as number, original.metrics.occupancy as number, 0.05);
  });

  it('a fixed part that varies (a launch is not always as quick) is fitted at its mean, not at the quickest batch', () => {
    // The launch lognormal, median 0.2 s, σ 0.3: mean 0.209 s. Capped at the quickest batch, the
    // fit read 138 ms + 19 ms an item on batch-infer-60 (200 ms + 10 ms): the capacity 40 % low.
    const varying = parseScenario({ ...batched, name: 'varying', devices: [{ workers: 1, service: { type: 'lognormal', median: 0.05, sigma: 0.1 }, batch: { maxItems: 8, maxWaitS: 0.02, fixed: { type: 'lognormal', median: 0.2, sigma: 0.3 } } }] });
    const t = new TimelineRecorder({ maxSpans: 100_000 });
    simulate(varying, { seed: 5, timeline: t, pacer: (o) => createPacer('stoker', o) });
    const d = fitRun({ lanes: t.lanes(), spans: t.spans(), jobs: t.jobs(), deviceBatches: [{ maxItems: 8, maxWaitMs: 20 }], prepareBatches: { embed: { maxItems: 4, maxWaitMs: 500 } } }).fit.devices[0]?.batch;
    if (!d) throw new Error('no device batch fit');
    console.log(`varying launch: fixed ${d.fixedS.toFixed(3)} s (mean 0.209), per item ${d.perItemMedianS.toFixed(4)} s (true 0.05)`);
    near(d.fixedS, 0.2 * Math.exp(0.045), 0.08);
    near(d.perItemMedianS, 0.05, 0.15);
  });

  it('where (nearly) every batch had one size, fits it as per-item time alone and says which way a replay errs (one batch of another size set the fixed part alone)', () => {
    // One-partition jobs at a light load: the device's batches are nearly all of one item.
    const light = parseScenario({ ...batched, name: 'light', arrivals: [{ poisson: { ratePerS: 0.05, untilS: 1200 }, partitions: 1, kind: 'embed' }] });
    const t = new TimelineRecorder({ maxSpans: 100_000 });
    simulate(light, { seed: 4, timeline: t, pacer: (o) => createPacer('stoker', o) });
    const { fit } = fitRun({ lanes: t.lanes(), spans: t.spans(), jobs: t.jobs(), deviceBatches: [{ maxItems: 8, maxWaitMs: 20 }], prepareBatches: { embed: { maxItems: 4, maxWaitMs: 500 } } });
    const d = fit.devices[0]?.batch;
    if (!d) throw new Error('no device batch fit');
    expect(d.fixedS).toBe(0);
    // Per item, the whole batch of one: launch and item, 0.25 s.
    near(d.perItemMedianS, 0.25, 0.05);
    expect(fit.notes).toContainEqual(expect.stringMatching(/^device 0: (every batch had 1 item|all but \d+ of its \d+ batches had 1 item): its fixed part cannot be told from its per-item time.*larger batches replay slower than they would run/));
  });

  it('a kind fitted as one per memory size keeps the batch setting the run recorded for its kind', () => {
    const run = trace(true);
    // Every other job twice the memory per partition: two kinds, each batched as "embed" was.
    const jobs = run.jobs.map((j, i) => (i % 2 ? { ...j, prepareBytes: 2 * j.prepareBytes } : j));
    const { fit } = fitRun({ ...run, jobs });
    const split = Object.entries(fit.kinds);
    expect(split).toHaveLength(2);
    for (const [, k] of split) expect([k.prepareBatch?.maxItems, k.prepareBatch?.maxWaitS, k.prepareBatch?.recorded]).toEqual([4, 0.5, true]);
    expect(fit.notes.filter((n) => /did not record its batch setting/.test(n))).toEqual([]);
  });

  it('without recorded settings takes the largest batch seen, no wait, and says so', () => {
    const { fit } = fitRun(trace(false));
    expect(fit.devices[0]?.batch?.recorded).toBe(false);
    expect(fit.devices[0]?.batch?.maxWaitS).toBe(0);
    expect(fit.devices[0]?.batch?.maxItems).toBeLessThanOrEqual(8);
    expect(fit.notes).toContainEqual(expect.stringMatching(/^device 0: the run did not record its batch setting .*largest batch seen/));
    expect(fit.notes).toContainEqual(expect.stringMatching(/^kind embed's preparation: the run did not record its batch setting/));
  });
});

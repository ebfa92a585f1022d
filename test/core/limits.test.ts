/**
 * `gradient` and `vegas` (src/core/pacers/limits.ts): Netflix concurrency-limits' Gradient2Limit
 * and VegasLimit on the in-flight window, exactly. A partition may be dispatched while fewer than
 * ⌊limit⌋ are in flight (preparing + waiting + on a device); each device completion is a sample
 * whose RTT is the time since the oldest outstanding dispatch, with the in-flight count recorded
 * at that dispatch. Every expected number below is worked out by hand from the library's rules.
 */
import { describe, expect, it } from 'vitest';
import { createPacer, type Pacer, type PacerOptions, type PacerSnapshot } from '../../src/core/index.js';
import { expectStokerError, snapshot } from './helpers.js';

const at = (over: Partial<PacerSnapshot>): PacerSnapshot => snapshot({ backlog: 100, ...over });
const terms = (p: Pacer) => p.state().terms;

/**
 * Feeds one sample at a time: a dispatch with `inflight` in flight after it, then its completion
 * `rtt` ms later (nothing else outstanding). Returns the terms after the sample.
 */
function sampler(p: Pacer) {
  let t = 0;
  let done = 0;
  return (rtt: number, inflight: number) => {
    p.onDispatch(at({ now: t, preparing: inflight }));
    t += rtt;
    done++;
    p.observe(at({ now: t, preparing: inflight - 1, deviceCompletions: done }));
    return terms(p);
  };
}

function pacer(name: 'gradient' | 'vegas', options: PacerOptions = {}) {
  const p = createPacer(name, options);
  return { p, sample: sampler(p) };
}

describe('the in-flight window (gradient and vegas alike)', () => {
  it.each([
    ['gradient', { limit: 20, rttMs: 0, longRttMs: 0 }],
    ['vegas', { limit: 20, rttNoLoadMs: 0 }],
  ])('%s starts idle with the limit 20, no RTT yet, and no estimate of rate or interval', (name, initial) => {
    const p = createPacer(name);
    expect(p.name).toBe(name);
    expect(p.state()).toEqual({ mode: 'idle', ratePerSec: null, intervalMs: null, terms: initial });
  });

  it('dispatches while preparing + waiting + on a device is below ⌊limit⌋, else waits for an event', () => {
    const p = createPacer('gradient');
    expect(p.nextDispatchAt(at({ now: 5, preparing: 5, waiting: 5, onDevice: 9 }))).toBe(5); // 19
    expect(p.nextDispatchAt(at({ now: 5, preparing: 5, waiting: 5, onDevice: 10 }))).toBe(Infinity); // 20
    expect(p.nextDispatchAt(at({ now: 5, preparing: 10, waiting: 10, onDevice: 0 }))).toBe(Infinity); // 20
    // A sample at the limit (RTT = the long RTT): 0.8·20 + 0.2·(20 + 4) = 20.8; the window is ⌊20.8⌋ = 20.
    sampler(p)(1000, 20);
    expect(terms(p)['limit']).toBeCloseTo(20.8, 12);
    expect(p.nextDispatchAt(at({ now: 7, preparing: 19 }))).toBe(7);
    expect(p.nextDispatchAt(at({ now: 7, preparing: 20 }))).toBe(Infinity);
  });

  it('reports idle with no backlog, steady with one', () => {
    const p = createPacer('vegas');
    p.observe(at({ now: 0, backlog: 3 }));
    expect(p.state().mode).toBe('steady');
    p.observe(at({ now: 1, backlog: 0 }));
    expect(p.state().mode).toBe('idle');
  });

  it('samples the RTT from the oldest outstanding dispatch, one sample per completion', () => {
    const p = createPacer('gradient');
    p.onDispatch(at({ now: 0, preparing: 1 }));
    p.onDispatch(at({ now: 100, preparing: 2 }));
    p.onDispatch(at({ now: 250, preparing: 3 }));
    p.observe(at({ now: 1000, preparing: 2, deviceCompletions: 1 })); // 1000 − 0
    expect(terms(p)).toEqual({ limit: 20, rttMs: 1000, longRttMs: 1000 });
    p.observe(at({ now: 1600, preparing: 0, deviceCompletions: 3 })); // two: 1600 − 100 = 1500, then 1600 − 250 = 1350
    expect(terms(p)['rttMs']).toBe(1350);
    expect(terms(p)['longRttMs']).toBeCloseTo((1000 + 1500 + 1350) / 3, 9);
  });

  it('counts a completion in its dispatch’s own instant as 1 µs, not 0 (the algorithms divide by the RTT)', () => {
    const { p, sample } = pacer('gradient');
    expect(sample(0, 20)).toEqual({ limit: 20.8, rttMs: 1e-3, longRttMs: 1e-3 });
    expect(p.nextDispatchAt(at({ now: 0, preparing: 19 }))).toBe(0);
  });

  it('ignores completions of dispatches it never saw, and counts later completions from there', () => {
    const p = createPacer('gradient');
    p.observe(at({ now: 0, deviceCompletions: 2 })); // nothing outstanding: no sample
    expect(terms(p)['rttMs']).toBe(0);
    p.onDispatch(at({ now: 100, preparing: 1 }));
    p.observe(at({ now: 400, deviceCompletions: 3 }));
    expect(terms(p)['rttMs']).toBe(300);
    p.onDispatch(at({ now: 500, preparing: 1 }));
    p.onDispatch(at({ now: 600, preparing: 2 }));
    p.observe(at({ now: 1000, preparing: 1, deviceCompletions: 4 })); // one completion: the dispatch at 500
    expect(terms(p)['rttMs']).toBe(500);
    p.observe(at({ now: 1100, preparing: 0, deviceCompletions: 5 })); // then the one at 600
    expect(terms(p)['rttMs']).toBe(500);
  });

  it('drops the oldest outstanding dispatches once fewer are in flight (cancelled or failed: they never complete)', () => {
    const p = createPacer('gradient');
    p.onDispatch(at({ now: 0, preparing: 1 }));
    p.onDispatch(at({ now: 100, preparing: 2 }));
    p.onDispatch(at({ now: 200, preparing: 3 }));
    p.observe(at({ now: 300, preparing: 1, waiting: 1 })); // 2 in flight, no completion: the dispatch at 0 leaves
    p.observe(at({ now: 1000, onDevice: 1, deviceCompletions: 1 }));
    expect(terms(p)['rttMs']).toBe(900); // 1000 − 100
    p.observe(at({ now: 1100, deviceCompletions: 2 }));
    expect(terms(p)['rttMs']).toBe(900); // 1100 − 200
  });

  it('counts everything in flight (preparing, waiting, on a device) before dropping any outstanding dispatch', () => {
    const p = createPacer('gradient');
    p.onDispatch(at({ now: 0, preparing: 1 }));
    p.onDispatch(at({ now: 100, preparing: 2 }));
    p.onDispatch(at({ now: 200, preparing: 3 }));
    p.observe(at({ now: 300, preparing: 1, onDevice: 2 })); // all 3 still in flight: none dropped
    p.observe(at({ now: 1000, preparing: 1, onDevice: 1, deviceCompletions: 1 }));
    expect(terms(p)['rttMs']).toBe(1000); // 1000 − 0
  });

  it('never moves the window back to dispatches already sampled, with more in flight than it saw dispatched', () => {
    const p = createPacer('gradient');
    p.onDispatch(at({ now: 0, preparing: 1 }));
    p.observe(at({ now: 100, preparing: 2, deviceCompletions: 1 })); // 2 in flight it never saw dispatched
    expect(terms(p)['rttMs']).toBe(100);
    p.onDispatch(at({ now: 200, preparing: 3 }));
    p.observe(at({ now: 250, preparing: 2, deviceCompletions: 1 })); // one of those cancelled: 2 in flight, 1 outstanding
    p.observe(at({ now: 1000, preparing: 1, deviceCompletions: 2 }));
    expect(terms(p)['rttMs']).toBe(800); // 1000 − 200, not 1000 − 0 again
  });

  it('keeps pairing completions with their dispatches over a long run (past its compaction of the window)', () => {
    const { sample } = pacer('gradient');
    // 1500 samples, one outstanding at a time, RTT 10 + (i mod 7) ms: each sample's RTT is its own.
    const rtts = Array.from({ length: 1500 }, (_, i) => sample(10 + (i % 7), 1)['rttMs']);
    expect(rtts).toEqual(Array.from({ length: 1500 }, (_, i) => 10 + (i % 7)));
  });
});

describe('gradient: Gradient2Limit', () => {
  it('leaves the limit alone below half the limit in flight (9 of 20), moves it from half (10)', () => {
    expect(pacer('gradient').sample(1000, 9)['limit']).toBe(20);
    expect(pacer('gradient').sample(1000, 10)['limit']).toBeCloseTo(20.8, 12);
    // The in-flight count at the dispatch is preparing + waiting + on a device.
    const p = createPacer('gradient');
    p.onDispatch(at({ now: 0, preparing: 4, waiting: 3, onDevice: 3 }));
    p.observe(at({ now: 1000, preparing: 4, waiting: 3, onDevice: 2, deviceCompletions: 1 }));
    expect(terms(p)['limit']).toBeCloseTo(20.8, 12);
  });

  it('scales by the gradient tolerance·long ÷ RTT when it is within [0.5, 1]', () => {
    // RTTs 100 (app-limited) then 400: long RTT (plain mean) 250, gradient 1.5·250 ÷ 400 = 0.9375;
    // 20·0.9375 + 4 = 22.75, smoothed 0.8·20 + 0.2·22.75 = 20.55.
    const { sample } = pacer('gradient');
    sample(100, 1);
    expect(sample(400, 20)).toMatchObject({ rttMs: 400, longRttMs: 250 });
    const q = pacer('gradient', { minLimit: 1, queueSize: 0 });
    q.sample(100, 1);
    // Without the queue allowance: 20·0.9375 = 18.75, smoothed 16 + 3.75 = 19.75 (above minLimit 1).
    expect(q.sample(400, 20)['limit']).toBeCloseTo(19.75, 12);
    const r = pacer('gradient');
    r.sample(100, 1);
    expect(r.sample(400, 20)['limit']).toBeCloseTo(20.55, 12);
  });

  it('never cuts by more than half (gradient floor 0.5), and keeps the limit within [minLimit, maxLimit]', () => {
    // RTTs 100, 100, 100, then 10 000: long 10 300 ÷ 4 = 2575, 1.5·2575 ÷ 10 000 = 0.386 → 0.5;
    // 20·0.5 + 4 = 14, smoothed 16 + 2.8 = 18.8.
    const low = pacer('gradient', { minLimit: 1 });
    for (let i = 0; i < 3; i++) low.sample(100, 1);
    expect(low.sample(10_000, 20)).toEqual({ limit: 18.8, rttMs: 10_000, longRttMs: 2575 });
    // The same with the default minLimit 20: held at 20.
    const floor = pacer('gradient');
    for (let i = 0; i < 3; i++) floor.sample(100, 1);
    expect(floor.sample(10_000, 20)['limit']).toBe(20);
    // At the default maxLimit 200: 0.8·200 + 0.2·204 = 200.8 → 200; with maxLimit 30 from 30: 30.8 → 30.
    expect(pacer('gradient', { initialLimit: 200 }).sample(100, 100)['limit']).toBe(200);
    expect(pacer('gradient', { initialLimit: 30, maxLimit: 30 }).sample(100, 15)['limit']).toBe(30);
    expect(pacer('gradient', { initialLimit: 30, maxLimit: 31 }).sample(100, 15)['limit']).toBeCloseTo(30.8, 12);
  });

  it('reads initialLimit, smoothing, queueSize and rttTolerance from the options', () => {
    expect(terms(createPacer('gradient', { initialLimit: 7 }))['limit']).toBe(7);
    // smoothing 1: the new limit itself, 20 + 4.
    expect(pacer('gradient', { smoothing: 1 }).sample(100, 20)['limit']).toBe(24);
    // queueSize 10: 0.8·20 + 0.2·30 = 22.
    expect(pacer('gradient', { queueSize: 10 }).sample(100, 20)['limit']).toBeCloseTo(22, 12);
    // rttTolerance 1, RTTs 100 then 300: long 200, gradient 200 ÷ 300 = ⅔; 20·⅔ + 4 = 17.33, smoothed 16 + 3.4667 = 19.4667.
    const tol = pacer('gradient', { rttTolerance: 1, minLimit: 1 });
    tol.sample(100, 1);
    expect(tol.sample(300, 20)['limit']).toBeCloseTo(16 + 0.2 * ((20 * 2) / 3 + 4), 12);
  });

  it('rejects options below their minimum', () => {
    expectStokerError(() => createPacer('gradient', { initialLimit: 0 }), 'E_INVALID_OPTION', /initialLimit/);
    expectStokerError(() => createPacer('gradient', { minLimit: 0.5 }), 'E_INVALID_OPTION', /minLimit/);
    expectStokerError(() => createPacer('gradient', { maxLimit: 0 }), 'E_INVALID_OPTION', /maxLimit/);
    expectStokerError(() => createPacer('gradient', { rttTolerance: 0.9 }), 'E_INVALID_OPTION', /rttTolerance/);
    expectStokerError(() => createPacer('gradient', { smoothing: -0.1 }), 'E_INVALID_OPTION', /smoothing/);
    expectStokerError(() => createPacer('gradient', { queueSize: -1 }), 'E_INVALID_OPTION', /queueSize/);
  });

  it('long RTT: a plain mean over the first 10 samples, then an EMA with factor 2 ÷ 601', () => {
    const { sample } = pacer('gradient');
    for (let i = 0; i < 9; i++) sample(100, 1);
    expect(sample(200, 1)['longRttMs']).toBe(110); // (9·100 + 200) ÷ 10
    // 110·599/601 + 701·2/601 = (65 890 + 1402) ÷ 601 = 111.967…, not the mean (1100 + 701) ÷ 11.
    expect(sample(701, 1)['longRttMs']).toBeCloseTo((110 * 599 + 701 * 2) / 601, 9);
  });

  it('cuts the long RTT by 5 % when it is more than twice the RTT (not at exactly twice)', () => {
    const twice = pacer('gradient');
    twice.sample(300, 1);
    expect(twice.sample(100, 1)['longRttMs']).toBe(200); // (300 + 100) ÷ 2 = 200 = 2 × 100
    twice.sample(50, 1);
    // (300 + 100 + 50) ÷ 3 = 150 = 3 × 50: × 0.95 = 142.5.
    expect(terms(twice.p)['longRttMs']).toBeCloseTo(142.5, 9);
    // After the warm-up the cut stays in the EMA: 10 × 1000, then 100: 1000·599/601 + 100·2/601 = 997.005, × 0.95.
    const { sample } = pacer('gradient');
    for (let i = 0; i < 10; i++) sample(1000, 1);
    const cut = ((1000 * 599 + 100 * 2) / 601) * 0.95;
    expect(sample(100, 1)['longRttMs']).toBeCloseTo(cut, 9);
    // And the next sample (1000) smooths from the cut value: cut·599/601 + 1000·2/601.
    expect(sample(1000, 1)['longRttMs']).toBeCloseTo((cut * 599 + 1000 * 2) / 601, 9);
  });
});

describe('vegas: VegasLimit', () => {
  /** A vegas pacer whose no-load RTT is 100 ms (its first sample). */
  const withNoLoad = (options: PacerOptions = {}) => {
    const v = pacer('vegas', options);
    expect(v.sample(100, 1)).toEqual({ limit: options.initialLimit ?? 20, rttNoLoadMs: 100 });
    return v;
  };

  // Limit 20: log10 = 1, so threshold 1, α 3, β 6; queue = ⌈20·(1 − 100 ÷ RTT)⌉.
  it.each([
    [100, 0, 26], // no queue: + β = 6
    [104, 1, 26], // 0.77 → 1 ≤ threshold: + 6
    [110, 2, 21], // 1.82 → 2 < α: + log10 = 1
    [115, 3, 20], // 2.61 → 3: α ≤ queue ≤ β, unchanged
    [140, 6, 20], // 5.71 → 6: unchanged
    [150, 7, 19], // 6.67 → 7 > β: − 1
  ])('limit 20, RTT %i ms (queue %i): the limit becomes %i', (rtt, queue, limit) => {
    expect(Math.ceil(20 * (1 - 100 / rtt))).toBe(queue);
    const { sample } = withNoLoad();
    expect(sample(rtt, 20)).toEqual({ limit, rttNoLoadMs: 100 });
  });

  // Limit 100: log10 = 2, so threshold 2, α 6, β 12, steps of 2 (and + 12); queue = ⌈100·(1 − 100 ÷ RTT)⌉.
  it.each([
    [100, 0, 112],
    [102, 2, 112], // 1.96 → 2 ≤ threshold
    [103, 3, 102], // 2.91 → 3 < α
    [106, 6, 100], // 5.66 → 6: not below α
    [113, 12, 100], // 11.5 → 12: not above β
    [114, 13, 98], // 12.28 → 13 > β
  ])('limit 100, RTT %i ms (queue %i): the limit becomes %i', (rtt, queue, limit) => {
    expect(Math.ceil(100 * (1 - 100 / rtt))).toBe(queue);
    const { sample } = withNoLoad({ initialLimit: 100 });
    expect(sample(rtt, 50)['limit']).toBe(limit);
  });

  it('takes log10 as at least 1 below a limit of 10', () => {
    expect(withNoLoad({ initialLimit: 5 }).sample(100, 3)['limit']).toBe(11); // 5 + 6·1
  });

  it('leaves the limit alone while fewer than half the limit were in flight (no upward drift)', () => {
    expect(withNoLoad().sample(100, 9)['limit']).toBe(20); // 18 < 20
    expect(withNoLoad().sample(100, 10)['limit']).toBe(26); // 20 ≥ 20
    expect(withNoLoad().sample(200, 9)['limit']).toBe(20); // not down either
  });

  it('takes a faster RTT as the new no-load RTT, without moving the limit', () => {
    const { sample } = withNoLoad();
    expect(sample(80, 20)).toEqual({ limit: 20, rttNoLoadMs: 80 });
    expect(sample(80, 20)).toEqual({ limit: 26, rttNoLoadMs: 80 });
  });

  it('smooths the step by smoothing and caps it at maxLimit', () => {
    expect(withNoLoad({ smoothing: 0.5 }).sample(100, 20)['limit']).toBe(23); // 0.5·20 + 0.5·26
    expect(withNoLoad({ maxLimit: 22 }).sample(100, 20)['limit']).toBe(22);
    expect(withNoLoad({ maxLimit: 1000 }).sample(100, 20)['limit']).toBe(26);
    // The default maxLimit 1000: from 996 (log10 2), + 12 → 1000.
    expect(withNoLoad({ initialLimit: 996 }).sample(100, 500)['limit']).toBe(1000);
  });

  it('rejects options below their minimum', () => {
    expectStokerError(() => createPacer('vegas', { initialLimit: 0.5 }), 'E_INVALID_OPTION', /initialLimit/);
    expectStokerError(() => createPacer('vegas', { maxLimit: 0 }), 'E_INVALID_OPTION', /maxLimit/);
    expectStokerError(() => createPacer('vegas', { probeMultiplier: 0 }), 'E_INVALID_OPTION', /probeMultiplier/);
    expectStokerError(() => createPacer('vegas', { smoothing: -1 }), 'E_INVALID_OPTION', /smoothing/);
    expectStokerError(() => createPacer('vegas', { seed: -1 }), 'E_INVALID_OPTION', /seed/);
  });

  /**
   * Samples with RTTs 101, 102, … (each slower than the last, nothing near the limit): the no-load
   * RTT changes only at a probe, which takes that sample's RTT. Returns the sample numbers (from 1)
   * at which it changed: the first sample, then each probe.
   */
  const probes = (options: PacerOptions, n: number) => {
    const { sample } = pacer('vegas', options);
    const at: number[] = [];
    let noLoad = 0;
    for (let i = 1; i <= n; i++) {
      const t = sample(100 + i, 1);
      expect(t['limit']).toBe(20);
      if (t['rttNoLoadMs'] !== noLoad) at.push(i);
      noLoad = t['rttNoLoadMs'] as number;
    }
    return at;
  };

  it('probes the no-load RTT once jitter·probeMultiplier·limit samples have passed (jitter from xorshift32 of the seed)', () => {
    // Seed 1: xorshift32 (13, 17, 5) gives 270 369, then 67 634 689, then 2 647 435 461; the jitter
    // 0.5 + 0.5·x ÷ 2³² is 0.5000315, 0.5078737, 0.8082021. With the defaults (×30, limit 20) the
    // first probe comes once 300.019 samples have passed: at sample 301.
    expect(probes({}, 320)).toEqual([1, 301]);
    // probeMultiplier 1: after 10.0006, 10.157, 16.164 samples: at 11, 11 + 11 = 22, 22 + 17 = 39.
    expect(probes({ probeMultiplier: 1 }, 45)).toEqual([1, 11, 22, 39]);
    // Seed 0 (xorshift's fixed point) is taken as 1.
    expect(probes({ probeMultiplier: 1, seed: 0 }, 45)).toEqual([1, 11, 22, 39]);
    // Seed 7: 1 892 583, 470 389 255, 3 882 205 507: jitter 0.50022, 0.55476, 0.95195 → after 10.004, 11.095, 19.04.
    expect(probes({ probeMultiplier: 1, seed: 7 }, 45)).toEqual([1, 11, 23, 43]);
  });
});

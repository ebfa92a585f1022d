/**
 * What the stoker pacer measures of each device (src/core/pacers/stoker-device.ts), on hand-made
 * inputs: the batch fit a + b·n, the self-check of the measurement, the worker limit from the
 * busy-worker bins, and the small helpers. Every expected number is worked out by hand from the
 * algorithm the module's comments describe (shown where not obvious).
 */
import { describe, expect, it } from 'vitest';
import type { KindCounters, PacerSnapshot } from '../../src/core/index.js';
import {
  BATCH_FRESH,
  BATCH_MEMORY,
  BATCH_MIN,
  CHECK_MIN_COMPLETIONS,
  CHECK_SPAN,
  CHECK_TOLERANCE,
  CHECK_WINDOWS,
  K_FRESH,
  K_GAIN,
  K_MEMORY,
  K_MIN,
  MIN_SERVICE_MS,
  batchItemMs,
  busyOf,
  completionsOf,
  deviceMeanMs,
  isFresh,
  newFit,
  newService,
  observeBatches,
  observeConcurrency,
  selfCheck,
  type BatchFit,
  type DeviceEstimate,
  type ServiceEstimate,
} from '../../src/core/pacers/stoker-device.js';
import { snapshot } from './helpers.js';

type Counters = PacerSnapshot['devices'][number];

/** A device estimate as the stoker pacer's observe() first makes it (nothing measured), overridable. */
function estimate(over: Partial<DeviceEstimate> = {}): DeviceEstimate {
  return {
    sawSaturated: false,
    completions: 0,
    services: [],
    byBusy: [],
    concurrencySeen: 0,
    busyMsSeen: 0,
    limit: Infinity,
    probe: Infinity,
    occupancy: 0,
    lastBusy: 0,
    lastWorkers: 2,
    plannedWorkers: 2,
    plannedAt: 0,
    satMs: 0,
    satCompletions: 0,
    saturatedNow: false,
    spanMs: 0,
    spanCompletions: 0,
    checkStreak: 0,
    sinceWindow: 0,
    checkRatio: NaN,
    correction: 1,
    fit: null,
    kindFits: [],
    ...over,
  };
}

/** A fit with no batches seen yet, as newFit makes it. */
function emptyFit(maxItems = 8): BatchFit {
  return { maxItems, bins: [], batches: 0, items: 0, busyMs: 0, a: NaN, b: NaN };
}

/** Feeds a fit one batch per call (as the engine reports them): size and busy ms of each. */
function feedBatches(f: BatchFit, batches: [size: number, ms: number][]): void {
  for (const [size, ms] of batches) observeBatches(f, f.batches + 1, f.items + size, f.busyMs + ms);
}

describe('the constants the comments document', () => {
  it('has the documented values', () => {
    expect([CHECK_MIN_COMPLETIONS, CHECK_TOLERANCE, CHECK_WINDOWS, CHECK_SPAN]).toEqual([30, 0.1, 3, 2]);
    expect([K_MIN, K_MEMORY, K_FRESH, K_GAIN]).toEqual([5, 50, 500, 0.05]);
    expect([BATCH_MEMORY, BATCH_FRESH, BATCH_MIN, MIN_SERVICE_MS]).toEqual([50, 2000, 3, 1e-3]);
  });
});

describe('newService and newFit', () => {
  it('newService starts from the counters and the prior, with no noise and no self-check counts', () => {
    expect(newService(3, 40, 12)).toStrictEqual({ completions: 3, busyMs: 40, serviceMs: 12, variance: 0, varianceSlow: 0, varianceTail: 0, samples: 0, firstMean: 0, firstM2: 0, prior: true, lastBeyond: 0, satCompletions: 0, spanCompletions: 0 });
    expect(newService(0, 0, NaN).prior).toBe(false);
  });

  it('newFit starts from the device batch counters, with no bins and no fit', () => {
    const c: Counters = { workers: 1, busy: 0, completions: 7, busyMs: 123, batch: { maxItems: 8, batches: 4, items: 20 } };
    const f = newFit(c);
    expect(f).toStrictEqual({ maxItems: 8, bins: [], batches: 4, items: 20, busyMs: 123, a: NaN, b: NaN });
    // The first batch after it is measured against those counters: 1 batch, 6 items, 30 ms.
    observeBatches(f, 5, 26, 153);
    expect(f.bins[6]).toEqual({ ms: 30, n: 1, at: 5 });
  });
});

describe('completionsOf and busyOf', () => {
  const devices: Counters[] = [
    { workers: 1, busy: 0, completions: 11, busyMs: 110 },
    { workers: 1, busy: 0, completions: 22, busyMs: 220 },
  ];

  it('read the device counters when the snapshot lists no kinds', () => {
    const s = snapshot({ devices });
    expect(completionsOf(s, 0, 1)).toBe(22);
    expect(busyOf(s, 0, 1)).toBe(220);
    expect(completionsOf(s, 0, 0)).toBe(11);
    expect(busyOf(s, 0, 0)).toBe(110);
  });

  it("read kind k's own counters on device d when it lists kinds", () => {
    const kind = (name: string, completions: number[], busyMs: number[]): KindCounters => ({ name, devices: [0, 1], preparing: 0, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions, busyMs });
    const s = snapshot({ devices, kinds: [kind('a', [1, 2], [10, 20]), kind('b', [3, 4], [30, 40])] });
    expect(completionsOf(s, 1, 0)).toBe(3);
    expect(completionsOf(s, 0, 1)).toBe(2);
    expect(busyOf(s, 1, 1)).toBe(40);
    expect(busyOf(s, 0, 0)).toBe(10);
  });
});

describe('deviceMeanMs', () => {
  it('is the mean over the kinds measured on the device (serviceMs > 0)', () => {
    const svc = (ms: number): ServiceEstimate => newService(0, 0, ms);
    // 10 and 30 count; NaN (not measured) and 0 do not: (10 + 30) / 2.
    expect(deviceMeanMs(estimate({ services: [svc(NaN), svc(10), svc(0), svc(30)] }), 99)).toBe(20);
    expect(deviceMeanMs(estimate({ services: [svc(4)] }), 99)).toBe(4);
  });

  it('falls back when no kind is measured', () => {
    expect(deviceMeanMs(estimate(), 7)).toBe(7);
    expect(deviceMeanMs(estimate({ services: [newService(0, 0, NaN), newService(0, 0, 0)] }), 7)).toBe(7);
  });
});

describe('isFresh', () => {
  it('counts a bin from K_MIN samples on', () => {
    expect(isFresh({ ms: 1, sq: 1, n: K_MIN - 1, at: 0 }, 0)).toBe(false);
    expect(isFresh({ ms: 1, sq: 1, n: K_MIN, at: 0 }, 0)).toBe(true);
  });

  it('counts it while the device has completed at most K_FRESH items since its last sample', () => {
    expect(isFresh({ ms: 1, sq: 1, n: K_MIN, at: 100 }, 100 + K_FRESH)).toBe(true);
    expect(isFresh({ ms: 1, sq: 1, n: K_MIN, at: 100 }, 101 + K_FRESH)).toBe(false);
  });
});

describe('batchItemMs', () => {
  const fit = (a: number, b: number, maxItems = 4): BatchFit => ({ ...emptyFit(maxItems), a, b });

  it('is NaN on a device that does not batch, or has no fit yet', () => {
    expect(batchItemMs(estimate())).toBeNaN();
    expect(batchItemMs(estimate({ fit: fit(NaN, NaN) }))).toBeNaN();
  });

  it('is the time per item at full batches, (a + b·maxItems) / maxItems', () => {
    // (2 + 1·4) / 4.
    expect(batchItemMs(estimate({ fit: fit(2, 1) }))).toBe(1.5);
  });

  it("is never below MIN_SERVICE_MS", () => {
    expect(batchItemMs(estimate({ fit: fit(0, 0) }))).toBe(MIN_SERVICE_MS);
  });

  it("plans a kind with its own fit where it has one, else with the device's", () => {
    const d = estimate({ fit: fit(2, 1), kindFits: [fit(4, 2), fit(NaN, NaN)] });
    // Kind 0: (4 + 2·4) / 4 = 3; kind 1 (no fit yet), kind 2 (none), and no kind: the device's 1.5.
    expect(batchItemMs(d, 0)).toBe(3);
    expect(batchItemMs(d, 1)).toBe(1.5);
    expect(batchItemMs(d, 2)).toBe(1.5);
    expect(batchItemMs(d)).toBe(1.5);
    // With no kind named, the device's fit over every kind, even where kinds have their own.
    expect(batchItemMs(estimate({ fit: fit(2, 1), kindFits: [fit(4, 2), fit(8, 2)] }))).toBe(1.5);
    // A kind's own fit serves even before the device's has one.
    expect(batchItemMs(estimate({ fit: fit(NaN, NaN), kindFits: [fit(4, 2)] }), 0)).toBe(3);
  });
});

describe('observeBatches: busy time per batch fitted as a + b·n', () => {
  it('ignores an event with no new batch', () => {
    const f = emptyFit();
    observeBatches(f, 0, 5, 10);
    observeBatches(f, -1, 5, 10);
    expect(f).toStrictEqual(emptyFit());
  });

  it('fits a noise-free affine device exactly, from BATCH_MIN batches on', () => {
    // t(n) = 2 + 1.5·n: sizes 2, 4, 8 take 5, 8, 14 ms.
    const f = emptyFit();
    feedBatches(f, [
      [2, 5],
      [4, 8],
    ]);
    expect(f.a).toBeNaN();
    expect(f.b).toBeNaN();
    feedBatches(f, [[8, 14]]);
    expect(f.a).toBeCloseTo(2, 12);
    expect(f.b).toBeCloseTo(1.5, 12);
    expect(f).toMatchObject({ batches: 3, items: 14, busyMs: 27 });
    // Planned at full batches (maxItems 8): (2 + 1.5·8) / 8 = 1.75 ms per item.
    expect(batchItemMs(estimate({ fit: f }))).toBeCloseTo(1.75, 12);
  });

  it('weighs each bin by the batches it holds', () => {
    // Sizes 1, 2, 3 at 2, 4, 5 ms, size 3 twice: w = 4, Σn = 9, Σt = 16, Σn² = 23, Σnt = 40;
    // mean n 9/4, mean t 4, var n 23/4 − 81/16 = 11/16, cov 40/4 − 9 = 1:
    // b = 16/11, a = 4 − (16/11)(9/4) = 8/11. (Unweighted it would be b = 1.5, a = 2/3.)
    const f = emptyFit();
    feedBatches(f, [
      [1, 2],
      [2, 4],
      [3, 5],
      [3, 5],
    ]);
    expect(f.bins[3]).toEqual({ ms: 5, n: 2, at: 4 });
    expect(f.b).toBeCloseTo(16 / 11, 12);
    expect(f.a).toBeCloseTo(8 / 11, 12);
  });

  it('takes busy time as proportional to the size when only one size ran', () => {
    // 3 batches of 4 items at 10 ms: a = 0, b = 10 / 4.
    const f = emptyFit();
    feedBatches(f, [
      [4, 10],
      [4, 10],
      [4, 10],
    ]);
    expect(f.a).toBe(0);
    expect(f.b).toBe(2.5);
  });

  it('makes a negative slope a constant (the weighted mean time)', () => {
    // Sizes 2, 4, 4 at 10, 8, 8 ms: slower at fewer items; a = (10 + 16) / 3, b = 0.
    const f = emptyFit();
    feedBatches(f, [
      [2, 10],
      [4, 8],
      [4, 8],
    ]);
    expect(f.a).toBeCloseTo(26 / 3, 12);
    expect(f.b).toBe(0);
  });

  it('makes a negative fixed part a fit through the origin', () => {
    // Sizes 2, 4, 4 at 2, 8, 8 ms: least squares b = 3, a = 6 − 3·10/3 = −4 < 0;
    // through the origin b = Σnt / Σn² = (4 + 32 + 32) / (4 + 16 + 16) = 68/36 = 17/9, a = 0.
    const f = emptyFit();
    feedBatches(f, [
      [2, 2],
      [4, 8],
      [4, 8],
    ]);
    expect(f.a).toBe(0);
    expect(f.b).toBeCloseTo(17 / 9, 12);
  });

  it('reads several batches in one event as their mean size and time', () => {
    const f = emptyFit();
    // 2 batches, 7 items, 20 ms: size round(3.5) = 4, 10 ms each, counted twice.
    observeBatches(f, 2, 7, 20);
    expect(f.bins[4]).toEqual({ ms: 10, n: 2, at: 2 });
    expect(f.a).toBeNaN();
    feedBatches(f, [[4, 10]]);
    expect(f.bins[4]).toEqual({ ms: 10, n: 3, at: 3 });
    expect(f.a).toBe(0);
    expect(f.b).toBe(2.5);
  });

  it('keeps each bin the mean of its last BATCH_MEMORY batches', () => {
    const f = emptyFit();
    feedBatches(f, [
      [4, 8],
      [4, 16],
    ]);
    // The mean of 8 and 16.
    expect(f.bins[4]).toEqual({ ms: 12, n: 2, at: 2 });
    for (let i = 2; i < BATCH_MEMORY; i++) feedBatches(f, [[4, 12]]);
    expect(f.bins[4]).toEqual({ ms: 12, n: BATCH_MEMORY, at: BATCH_MEMORY });
    // One more at 62 ms: it replaces 1/50 of the bin, 12 + (62 − 12)/50 = 13.
    feedBatches(f, [[4, 62]]);
    expect(f.bins[4]).toEqual({ ms: 13, n: BATCH_MEMORY, at: BATCH_MEMORY + 1 });
    expect(f.b).toBe(13 / 4);
    // More than BATCH_MEMORY batches in one event: the bin is only those.
    observeBatches(f, f.batches + 60, f.items + 240, f.busyMs + 60 * 20);
    expect(f.bins[4]).toEqual({ ms: 20, n: BATCH_MEMORY, at: BATCH_MEMORY + 61 });
  });

  it('counts an empty batch as size 1 and a batch with no busy time as MIN_SERVICE_MS', () => {
    const f = emptyFit();
    observeBatches(f, 1, 0, 5);
    expect(f.bins[1]).toEqual({ ms: 5, n: 1, at: 1 });
    observeBatches(f, 2, 3, 5);
    expect(f.bins[3]).toEqual({ ms: MIN_SERVICE_MS, n: 1, at: 2 });
  });

  it('leaves out the bins not recent (older than BATCH_FRESH batches of the device)', () => {
    // Size 2 at 6 ms once, then size 4 at 8 ms: a = 4, b = 1 while the size-2 bin is recent.
    const f = emptyFit();
    feedBatches(f, [[2, 6]]);
    // BATCH_FRESH batches of size 4 in one event (batch 2001): the size-2 bin (at 1) is 2000 old, still recent.
    observeBatches(f, 1 + BATCH_FRESH, 2 + 4 * BATCH_FRESH, 6 + 8 * BATCH_FRESH);
    expect(f.a).toBeCloseTo(4, 9);
    expect(f.b).toBeCloseTo(1, 9);
    // One more: 2001 old, left out; size 4 alone, proportional: a = 0, b = 8 / 4.
    feedBatches(f, [[4, 8]]);
    expect(f.a).toBe(0);
    expect(f.b).toBe(2);
  });
});

/**
 * Drives selfCheck as the pacer's observe() does: one event at a time, the counters moved by the
 * event, then the estimates' completions caught up (they take the event's samples after the check).
 */
class CheckRig {
  readonly d: DeviceEstimate;
  readonly s: PacerSnapshot;
  calls = 0;

  constructor(workers: number, serviceMs: number[], over: Partial<DeviceEstimate> = {}) {
    const kinds: KindCounters[] =
      serviceMs.length > 1 ? serviceMs.map((_, k) => ({ name: `k${k}`, devices: [0], preparing: 0, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions: [0], busyMs: [0] })) : [];
    this.s = snapshot({ workers, waiting: 5, devices: [{ workers, busy: workers, completions: 0, busyMs: 0 }], kinds });
    this.d = estimate({ services: serviceMs.map((ms) => newService(0, 0, ms)), ...over });
  }

  get c(): Counters {
    return this.s.devices[0] as Counters;
  }

  /** One event: `dt` ms after the last, `dc` completions (of kind `kind`); the ratio if a window closed on it, else null. */
  step(dt: number, dc: number, o: { kind?: number; busy?: number; waiting?: number } = {}): number | null {
    this.calls++;
    this.c.completions += dc;
    if (this.s.kinds.length > 0) ((this.s.kinds[o.kind ?? 0] as KindCounters).completions[0] as number) += dc;
    this.c.busy = o.busy ?? this.c.workers;
    this.s.waiting = o.waiting ?? 5;
    const before = this.d.checkRatio;
    this.d.checkRatio = NaN;
    selfCheck(this.d, this.c, this.s, dt, dc, 0);
    const closed = Number.isNaN(this.d.checkRatio) ? null : this.d.checkRatio;
    if (closed === null) this.d.checkRatio = before;
    this.d.services.forEach((svc, k) => (svc.completions = completionsOf(this.s, k, 0)));
    return closed;
  }

  /** `n` completions `dt` ms apart: the windows closed, as [call, ratio]. */
  run(n: number, dt: number, o: { kind?: (i: number) => number } = {}): [number, number][] {
    const out: [number, number][] = [];
    for (let i = 0; i < n; i++) {
      const r = this.step(dt, 1, o.kind ? { kind: o.kind(i) } : {});
      if (r !== null) out.push([this.calls, r]);
    }
    return out;
  }
}

describe('selfCheck: the observed rate of a saturated device against the estimate', () => {
  it('reads a device that declares 2 workers and serves one at a time at half the estimate', () => {
    // Estimate 10 ms per item and 2 workers: 0.2 per ms expected; one completion each 10 ms observed.
    const r = new CheckRig(2, [10]);
    // The first completion opens the span; each 2·2 = 4 completions after it join the window,
    // which closes at 32 ≥ 30: the 33rd call. 32 items at 10 ms = 320 ms expected, 320 ms of 2
    // workers observed: 320 / (2·320) = 0.5.
    expect(r.run(33, 10)).toEqual([[33, 0.5]]);
    expect(r.d).toMatchObject({ checkRatio: 0.5, checkStreak: -1, correction: 1, satMs: 0, satCompletions: 0 });
    expect(r.d.services[0]?.satCompletions).toBe(0);
    // Windows 2 and 3 (32 completions each): the correction switches after CHECK_WINDOWS in a row.
    expect(r.run(32, 10)).toEqual([[65, 0.5]]);
    expect(r.d).toMatchObject({ checkStreak: -2, correction: 1 });
    expect(r.run(32, 10)).toEqual([[97, 0.5]]);
    expect(r.d).toMatchObject({ checkStreak: -3, correction: 0.5 });
    // A 4th window slower yet (one per 12.5 ms: 320 / (2·400) = 0.4): planned with the latest.
    expect(r.run(32, 12.5)).toEqual([[129, 0.4]]);
    expect(r.d).toMatchObject({ checkStreak: -4, correction: 0.4 });
    // A window that agrees (one per 5 ms: 320 / (2·160) = 1): back to the estimate.
    expect(r.run(32, 5)).toEqual([[161, 1]]);
    expect(r.d).toMatchObject({ checkRatio: 1, checkStreak: 0, correction: 1 });
  });

  it('plans with the busy time again after CHECK_STALE (10) windows’ worth of completions made short of work (occupancy under CHECK_STARVED, 0.9) with none judged', () => {
    const r = new CheckRig(2, [10]);
    r.run(97, 10);
    expect(r.d).toMatchObject({ checkStreak: -3, correction: 0.5, sinceWindow: 0 });
    // Fully occupied with nothing waiting (workers behind one lock each hold an item): no window, and the correction stays.
    r.d.occupancy = 1;
    for (let i = 0; i < 400; i++) r.step(10, 1, { waiting: 0 });
    expect(r.d).toMatchObject({ correction: 0.5, sinceWindow: 0 });
    // Short of work (occupancy 0.89, nothing waiting): 299 completions keep the correction, the 300th ends it.
    r.d.occupancy = 0.89;
    for (let i = 0; i < 299; i++) r.step(10, 1, { waiting: 0 });
    expect(r.d).toMatchObject({ correction: 0.5, sinceWindow: 299 });
    r.step(10, 1, { waiting: 0 });
    expect(r.d).toMatchObject({ correction: 1, checkStreak: 0 });
    // Saturated again and still slow: three windows switch it back.
    r.step(10, 1);
    r.run(96, 10);
    expect(r.d).toMatchObject({ checkStreak: -3, correction: 0.5 });
  });

  it('switches only after CHECK_WINDOWS windows off on the same side', () => {
    const r = new CheckRig(2, [10]);
    r.step(10, 1);
    // Slow (0.5), slow, fast (one per 2.5 ms: 320 / (2·80) = 2), slow, slow: never 3 in a row.
    expect(r.run(32, 10)).toEqual([[33, 0.5]]);
    expect(r.run(32, 10)).toEqual([[65, 0.5]]);
    expect(r.d.checkStreak).toBe(-2);
    expect(r.run(32, 2.5)).toEqual([[97, 2]]);
    expect(r.d).toMatchObject({ checkStreak: 1, correction: 1 });
    r.run(64, 10);
    expect(r.d).toMatchObject({ checkStreak: -2, correction: 1 });
    // A third slow one.
    r.run(32, 10);
    expect(r.d).toMatchObject({ checkStreak: -3, correction: 0.5 });
    // Once switched, a window off the other side does not switch back (only one that agrees does).
    expect(r.run(32, 2.5)).toEqual([[225, 2]]);
    expect(r.d).toMatchObject({ checkStreak: 1, correction: 0.5 });
  });

  it('counts a window within CHECK_TOLERANCE as agreeing', () => {
    const r = new CheckRig(2, [10]);
    r.step(10, 1);
    // One per 5.5 ms: 320 / (2·176) = 0.909…, within 10 %.
    const [[, ratio]] = r.run(32, 5.5) as [[number, number]];
    expect(ratio).toBeCloseTo(320 / 352, 12);
    expect(r.d).toMatchObject({ checkStreak: 0, correction: 1 });
    // One per 4.5 ms: 320 / 288 = 1.11…, beyond it.
    r.run(32, 4.5);
    expect(r.d.checkStreak).toBe(1);
  });

  it('times whole intervals between completions, from the completion after which the device is saturated', () => {
    const r = new CheckRig(2, [10]);
    // An arrival saturates the device (no completion): the span does not start there; the first
    // completion, 3 ms later, starts it; then one per 10 ms.
    expect(r.step(7, 0)).toBeNull();
    expect(r.d.saturatedNow).toBe(false);
    expect(r.step(3, 1)).toBeNull();
    expect(r.d.saturatedNow).toBe(true);
    expect(r.d.spanMs).toBe(0);
    expect(r.run(32, 10)).toEqual([[34, 0.5]]);
  });

  it('counts a span in chunks of CHECK_SPAN completions per worker', () => {
    const r = new CheckRig(2, [10]);
    r.step(10, 1);
    r.run(3, 10);
    expect(r.d).toMatchObject({ spanCompletions: 3, spanMs: 30, satCompletions: 0, satMs: 0 });
    expect(r.d.services[0]).toMatchObject({ spanCompletions: 3, satCompletions: 0 });
    r.run(1, 10);
    expect(r.d).toMatchObject({ spanCompletions: 0, spanMs: 0, satCompletions: 4, satMs: 40 });
    expect(r.d.services[0]).toMatchObject({ spanCompletions: 0, satCompletions: 4 });
  });

  it("drops a saturation shorter than a chunk: a starved device's brief saturations time nothing", () => {
    const r = new CheckRig(2, [10]);
    for (let i = 0; i < 40; i++) {
      // Saturated by a completion, one more completion, then short of work.
      r.step(10, 1);
      r.step(10, 1);
      r.step(10, 0, { waiting: 0 });
    }
    expect(r.d).toMatchObject({ satCompletions: 0, satMs: 0, spanCompletions: 0, spanMs: 0, saturatedNow: false, checkRatio: NaN });
    expect(r.d.services[0]?.spanCompletions).toBe(0);
    // Then a saturated stretch is read on its own: 32 completions, 0.5 as above.
    r.step(10, 1);
    expect(r.run(32, 10)).toEqual([[r.calls, 0.5]]);
  });

  it('is saturated only with every usable worker busy and items waiting', () => {
    const idle = new CheckRig(2, [10]);
    for (let i = 0; i < 100; i++) idle.step(10, 1, { busy: 1 });
    const dry = new CheckRig(2, [10]);
    for (let i = 0; i < 100; i++) dry.step(10, 1, { waiting: 0 });
    const none = new CheckRig(0, [10]);
    for (let i = 0; i < 100; i++) none.step(10, 1, { busy: 0 });
    for (const r of [idle, dry, none]) expect(r.d).toMatchObject({ saturatedNow: false, satCompletions: 0, checkRatio: NaN, checkStreak: 0 });
  });

  it('compares a device limited to fewer workers with what those give', () => {
    // Limit 1 of 2 workers, 1 busy: chunks of 2·1 completions; the window closes at exactly 30
    // (the 31st call). Estimate 10 ms, one per 10 ms: 300 / (1·300) = 1.
    const r = new CheckRig(2, [10], { limit: 1 });
    expect(r.step(10, 1, { busy: 1 })).toBeNull();
    const closed: [number, number][] = [];
    for (let i = 0; i < 30; i++) {
      const x = r.step(10, 1, { busy: 1 });
      if (x !== null) closed.push([r.calls, x]);
    }
    expect(closed).toEqual([[31, 1]]);
  });

  it('weighs each kind at its own estimate', () => {
    // Kinds at 10 and 30 ms, 1 worker, alternating, 25 ms each observed. Chunks of 2; the
    // window closes at 30 completions (15 of each), the 31st call: expected 15·10 + 15·30 = 600 ms,
    // observed 30·25 = 750 ms: 0.8.
    const r = new CheckRig(1, [10, 30]);
    r.step(25, 1, { kind: 1 });
    expect(r.run(30, 25, { kind: (i) => i % 2 })).toEqual([[31, 0.8]]);
    expect(r.d.services.map((s) => s.satCompletions)).toEqual([0, 0]);
  });

  it('leaves out a kind with no completions in the window, and waits for an estimate of one that has some', () => {
    // Kind 1: never completes, no estimate, and noisy: the window is kind 0's (0.5, at the 33rd call).
    const r = new CheckRig(2, [10, NaN]);
    (r.d.services[1] as ServiceEstimate).varianceSlow = 1;
    r.step(10, 1);
    expect(r.run(32, 10)).toEqual([[33, 0.5]]);
    // Kind 1 without an estimate completes in the window: no check (the window grows on).
    const w = new CheckRig(2, [10, NaN]);
    w.step(10, 1);
    expect(w.run(64, 10, { kind: (i) => i % 2 })).toEqual([]);
    expect(w.d.satCompletions).toBe(64);
    expect(w.d.services.map((s) => s.satCompletions)).toEqual([32, 32]);
    // Nor with an estimate of 0 (not measured: no prior).
    const z = new CheckRig(2, [10, 0]);
    z.step(10, 1);
    expect(z.run(64, 10, { kind: (i) => i % 2 })).toEqual([]);
    expect(z.d.satCompletions).toBe(64);
  });

  it('needs more completions on a noisy device: the window noise within a third of what it is to tell — CHECK_TOLERANCE, or the distance it reads where that is more', () => {
    // cv² 0.3, read 0.5: 9·0.3 / (0.5/3)² = 97.2 completions (at the tolerance, 2,430), so the window closes at the chunk reaching 100.
    const r = new CheckRig(2, [10]);
    (r.d.services[0] as ServiceEstimate).varianceSlow = 0.3;
    r.step(10, 1);
    expect(r.run(96, 10)).toEqual([]);
    expect(r.d.satCompletions).toBe(96);
    // 1000 ms expected, 1000 ms of 2 workers observed.
    expect(r.run(4, 10)).toEqual([[101, 0.5]]);
    // cv² 0.01, read 0.5: the floor, CHECK_MIN_COMPLETIONS (at the tolerance it would be 81).
    const quiet = new CheckRig(2, [10]);
    (quiet.d.services[0] as ServiceEstimate).varianceSlow = 0.01;
    quiet.step(10, 1);
    expect(quiet.run(32, 10)).toEqual([[33, 0.5]]);
  });

  it('reads nothing from a window with no time in it', () => {
    const r = new CheckRig(2, [10]);
    expect(r.run(100, 0)).toEqual([]);
    expect(r.d.satCompletions).toBe(96);
    expect(r.d.checkStreak).toBe(0);
  });

  it('does not check a batching device', () => {
    const r = new CheckRig(2, [10], { fit: emptyFit() });
    expect(r.run(100, 10)).toEqual([]);
    expect(r.d).toMatchObject({ saturatedNow: false, spanCompletions: 0, spanMs: 0, satCompletions: 0 });
  });
});

/** Drives observeConcurrency with one completion per event, as the engine reports them. */
class BusyRig {
  readonly d = estimate();
  readonly c: Counters;

  constructor(workers: number) {
    this.c = { workers, busy: workers, completions: 0, busyMs: 0, concurrencyTotal: 0 };
  }

  /** `times` completions, each of an item that ran `ms` with `k` workers busy; the limit and probe after each. */
  feed(k: number, ms: number, times = 1): [limit: number, probe: number][] {
    const out: [number, number][] = [];
    for (let i = 0; i < times; i++) {
      this.c.completions += 1;
      this.c.busyMs += ms;
      (this.c.concurrencyTotal as number) += k;
      observeConcurrency(this.d, this.c, 1);
      out.push([this.d.limit, this.d.probe]);
    }
    return out;
  }

  get limit(): number {
    return this.d.limit;
  }
}

describe('observeConcurrency: service time by busy workers, and the worker limit', () => {
  it('bins each sample by the workers busy while it ran (mean, mean square, count, when)', () => {
    const r = new BusyRig(4);
    r.feed(2, 10);
    r.feed(2, 20);
    expect(r.d.byBusy).toEqual([
      { ms: 0, sq: 0, n: 0, at: 0 },
      { ms: 15, sq: 250, n: 2, at: 2 },
      { ms: 0, sq: 0, n: 0, at: 0 },
      { ms: 0, sq: 0, n: 0, at: 0 },
    ]);
    expect(r.d).toMatchObject({ concurrencySeen: 4, busyMsSeen: 30 });
  });

  it('reads several completions as their mean, the busy count rounded and within 1..workers', () => {
    const r = new BusyRig(4);
    // 2 completions, concurrency 5 in all (2.5 each: 3), 30 ms: 15 ms each.
    Object.assign(r.c, { completions: 2, busyMs: 30, concurrencyTotal: 5 });
    observeConcurrency(r.d, r.c, 2);
    expect(r.d.byBusy[2]).toEqual({ ms: 15, sq: 225, n: 2, at: 2 });
    // No concurrency counted: 1 busy; more than the workers: all of them; no busy time: MIN_SERVICE_MS.
    Object.assign(r.c, { completions: 3, busyMs: 36 });
    observeConcurrency(r.d, r.c, 1);
    expect(r.d.byBusy[0]).toEqual({ ms: 6, sq: 36, n: 1, at: 3 });
    Object.assign(r.c, { completions: 4, concurrencyTotal: 15 });
    observeConcurrency(r.d, r.c, 1);
    expect(r.d.byBusy[3]).toEqual({ ms: MIN_SERVICE_MS, sq: MIN_SERVICE_MS * MIN_SERVICE_MS, n: 1, at: 4 });
  });

  it('keeps each bin the mean of its last K_MEMORY samples', () => {
    const r = new BusyRig(2);
    r.feed(2, 40, K_MEMORY);
    expect(r.d.byBusy[1]).toEqual({ ms: 40, sq: 1600, n: K_MEMORY, at: K_MEMORY });
    // One at 90: 40 + (90 − 40)/50 = 41; mean square 1600 + (8100 − 1600)/50 = 1730.
    r.feed(2, 90);
    expect(r.d.byBusy[1]).toEqual({ ms: 41, sq: 1730, n: K_MEMORY, at: K_MEMORY + 1 });
  });

  it('reads more than K_MEMORY completions in one event as the whole bin (their mean), never past it', () => {
    const r = new BusyRig(2);
    // 60 completions with 2 busy, 10 ms each: the bin is 10 ms (a weight of 60 ÷ 50 would overshoot to 12).
    Object.assign(r.c, { completions: 60, busyMs: 600, concurrencyTotal: 120 });
    observeConcurrency(r.d, r.c, 60);
    expect(r.d.byBusy[1]).toEqual({ ms: 10, sq: 100, n: K_MEMORY, at: 60 });
  });

  it('does nothing without the concurrency counter (a snapshot made by hand)', () => {
    const d = estimate({ concurrencySeen: 3, busyMsSeen: 7 });
    observeConcurrency(d, { workers: 2, busy: 2, completions: 1, busyMs: 17 }, 1);
    expect(d).toStrictEqual(estimate({ concurrencySeen: 3, busyMsSeen: 7 }));
  });

  it('keeps no bins on a one-worker device, but follows its counters', () => {
    const r = new BusyRig(1);
    r.feed(1, 10, 10);
    expect(r.d).toMatchObject({ byBusy: [], concurrencySeen: 10, busyMsSeen: 100, limit: Infinity });
  });

  it('limits a device whose 2 busy workers are faster than 4, and probes 1', () => {
    // 4 busy: 40 ms each (4/40 = 0.1 per ms); 2 busy: 10 ms each (2/10 = 0.2 per ms): gain 1 ≥ 0.05.
    // Noise-free: both bins count from K_MIN = 5 samples; the 1-busy bin is empty, so 1 is probed.
    const r = new BusyRig(4);
    const seen: [number, number][] = [];
    for (let i = 0; i < 5; i++) seen.push(...r.feed(4, 40), ...r.feed(2, 10));
    expect(seen.slice(0, 9).every(([l, p]) => l === Infinity && p === Infinity)).toBe(true);
    expect(seen[9]).toEqual([2, 1]);
    // 1 busy measured (and no better: 1/10 = 0.1 per ms): limit 2, no probe.
    r.feed(1, 10, 4);
    expect([r.limit, r.d.probe]).toEqual([2, 1]);
    r.feed(1, 10);
    expect([r.limit, r.d.probe]).toEqual([2, Infinity]);
  });

  it('chooses the k with the best throughput', () => {
    // All 4: 0.1 per ms; 1 busy at 8 ms: 0.125 (gain 0.25); 2 at 10 ms: 0.2 (1); 3 at 20 ms: 0.15 (0.5).
    // Each chosen when it is measured and beats the best so far (limited to 3, 2 is probed).
    const r = new BusyRig(4);
    r.feed(4, 40, 5);
    r.feed(1, 8, 5);
    expect([r.limit, r.d.probe]).toEqual([1, Infinity]);
    r.feed(3, 20, 5);
    expect([r.limit, r.d.probe]).toEqual([3, 2]);
    r.feed(2, 10, 5);
    expect([r.limit, r.d.probe]).toEqual([2, Infinity]);
  });

  it('needs a gain of K_GAIN', () => {
    // All 4 at 40 ms (0.1 per ms); 2 busy at 19.5 ms: 0.1026, a gain of 2.6 %: no limit.
    const r = new BusyRig(4);
    r.feed(4, 40, 5);
    r.feed(2, 19.5, 10);
    expect(r.limit).toBe(Infinity);
    // At 19 ms: 0.1053, 5.3 %: limited.
    const q = new BusyRig(4);
    q.feed(4, 40, 5);
    q.feed(2, 19, 5);
    expect([q.limit, q.d.probe]).toEqual([2, 1]);
  });

  it('needs two standard errors more on a noisy device', () => {
    // All 4 alternately 20 and 60 ms: mean 40, mean square 2000, cv² 2000/1600 − 1 = 0.25.
    // 2 busy at 12.8 ms: 2/12.8 = 0.15625 per ms against 0.1, a gain of 0.5625. The bar is
    // 0.05 + 2·√(0.25/n₂ + 0.25/10): n₂ = 5: 0.598, 6: 0.566 (not yet); 7: 0.543 (limited).
    const r = new BusyRig(4);
    for (let i = 0; i < 5; i++) {
      r.feed(4, 20);
      r.feed(4, 60);
    }
    expect(r.d.byBusy[3]?.ms).toBeCloseTo(40, 12);
    expect(r.d.byBusy[3]?.sq).toBeCloseTo(2000, 9);
    expect(r.feed(2, 12.8, 7)).toEqual([
      [Infinity, Infinity],
      [Infinity, Infinity],
      [Infinity, Infinity],
      [Infinity, Infinity],
      [Infinity, Infinity],
      [Infinity, Infinity],
      [2, 1],
    ]);
  });

  it("takes the noise from the noisiest recent bin, not one still short of K_MIN samples", () => {
    // As above with a quiet all-workers bin (40 ms) and 2 busy at 12.8 ms: limited at 5 samples,
    // in spite of a wildly noisy 3-busy bin with only 4 samples…
    const r = new BusyRig(4);
    r.feed(4, 40, 10);
    r.feed(3, 1);
    r.feed(3, 300, 3);
    r.feed(2, 12.8, 5);
    expect(r.limit).toBe(2);
    // …but not once that bin counts (a 5th sample: mean 1201/5, mean square 360001/5, cv² 0.248:
    // the bar 0.05 + 2·√(0.248/5 + 0.248/10) = 0.595 is above the gain 0.5625).
    const q = new BusyRig(4);
    q.feed(4, 40, 10);
    q.feed(3, 1);
    q.feed(3, 300, 4);
    q.feed(2, 12.8, 5);
    expect(q.limit).toBe(Infinity);
  });

  it('runs all workers again once the all-workers bin is stale, until it is measured anew', () => {
    const r = new BusyRig(4);
    r.feed(4, 40, 5);
    r.feed(1, 20, 5);
    r.feed(2, 10, 5);
    // Limit 2 (the 1-busy bin is recent and no better: no probe). The all bin's last sample: completion 5.
    expect([r.limit, r.d.probe]).toEqual([2, Infinity]);
    // Limited to 2, the device completes items at 2 busy; the all bin is recent up to completion 505.
    r.feed(2, 10, 505 - r.c.completions);
    expect(r.limit).toBe(2);
    r.feed(2, 10);
    expect([r.limit, r.d.probe]).toEqual([Infinity, Infinity]);
    expect(r.d.byBusy[3]?.n).toBe(0);
    // The device stopped thrashing: 4 busy now take 20 ms each (0.2 per ms). The new all bin counts
    // from its 5th sample; against it 2 busy (0.2 per ms) gain nothing: all workers stay.
    expect(r.feed(4, 20, 5)).toEqual(Array.from({ length: 5 }, () => [Infinity, Infinity]));
    expect(r.d.byBusy[3]).toMatchObject({ ms: 20, n: 5 });
  });

  it('chooses again once the all-workers bin is measured anew', () => {
    const r = new BusyRig(4);
    r.feed(4, 40, 5);
    r.feed(2, 10, 5);
    expect([r.limit, r.d.probe]).toEqual([2, 1]);
    // The probe at 1 is measured (0.05 per ms: worse), then 2 busy until the all bin is stale.
    r.feed(1, 20, 5);
    expect([r.limit, r.d.probe]).toEqual([2, Infinity]);
    r.feed(2, 10, 506 - r.c.completions);
    expect(r.limit).toBe(Infinity);
    // Still thrashing: 4 new samples at 40 ms do not count yet, the 5th does, and 2 is chosen again.
    expect(r.feed(4, 40, 5).map(([l]) => l)).toEqual([Infinity, Infinity, Infinity, Infinity, 2]);
  });
});

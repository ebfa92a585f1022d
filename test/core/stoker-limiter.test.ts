/**
 * The stoker pacer's preparation limiter (src/core/pacers/stoker-limiter.ts), driven alone:
 * `new PrepareLimit(prior)` and `update(snapshot, view)` with hand-made snapshots and pacer views,
 * every expected cap worked out by hand from the rules in the file's header comment.
 *
 * Throughout: two device workers and a waiting target of 2, so the pipeline fills once
 * 2 + 2 = 4 preparations are measured in the busy period, and taking over needs
 * 2 × (2 + 2) = 8 preparing and 8 measured. The devices are planned at λ = 1 item/ms; they are
 * starved while they drain less than STARVED × λ = 0.9.
 */
import { describe, expect, it } from 'vitest';
import type { PacerSnapshot } from '../../src/core/index.js';
import { PrepareLimit, type PacerView } from '../../src/core/pacers/stoker-limiter.js';
import { snapshot } from './helpers.js';

/** The busy period of the take-over scenes began at 1000 ms, with 100 preparations completed by then. */
const BUSY = 1000;
const FROM = 100;

/** One observation of a take-over scene (defaults: the standard overdue pipeline). */
interface Obs {
  now: number;
  /** Preparations in flight (default 80) and their mean age, ms (default 400). */
  preparing?: number;
  age?: number;
  backlog?: number;
  /** Preparations completed in this busy period (default 8), and before it (default FROM). */
  measured?: number;
  from?: number;
  /** The latency estimate (default 160 ms) and its second moment (default latency²: no spread). */
  latency?: number;
  latencySq?: number;
  /** The mean number preparing while the preparations behind the latency estimate ran (default 16; `filled` sets the floor at 8, early in the fill, so that a slower latency comes with twice the concurrency: contention can explain it). */
  concurrency?: number;
  /** The samples the latency estimate weighs (default 2 ÷ 0.03 − 1: a full smoothing window). */
  samples?: number;
  lambda?: number;
  draining?: number;
  busySince?: number;
  /** The snapshot's sum of preparation latencies, ms (default 0). */
  latencyTotal?: number;
  /** Per kind: its name's letter, how many are preparing, and how many of its preparations have finished (default: no kinds). */
  kinds?: { preparing: number; done: number }[];
}

const kindsOf = (kinds: { preparing: number; done: number }[]) => kinds.map((k, i) => ({ name: String.fromCharCode(97 + i), devices: [0], preparing: k.preparing, waiting: 0, onDevice: 0, prepareCompletions: k.done, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions: [k.done], busyMs: [0] }));

function observe(l: PrepareLimit, o: Obs): number {
  const preparing = o.preparing ?? 80;
  const latency = o.latency ?? 160;
  const view: PacerView = { lambda: o.lambda ?? 1, draining: o.draining ?? 0.5, latency, latencySq: o.latencySq ?? latency * latency, latencyConcurrency: o.concurrency ?? 16, latencySamples: o.samples ?? 2 / 0.03 - 1, busySince: o.busySince ?? BUSY, busyFromCompletions: o.from ?? FROM, target: 2 };
  l.update(snapshot({ now: o.now, backlog: o.backlog ?? 50, preparing, prepareCompletions: (o.from ?? FROM) + (o.measured ?? 8), preparingStartMsTotal: preparing * (o.now - (o.age ?? 400)), prepareLatencyMsTotal: o.latencyTotal ?? 0, kinds: kindsOf(o.kinds ?? []) }), view);
  return l.cap;
}

/** An observation of an empty pipeline: nothing queued, preparing, waiting or on a device. */
function idle(l: PrepareLimit, now: number): number {
  l.update(snapshot({ now, prepareCompletions: 500 }), { lambda: 1, draining: 0, latency: 160, latencySq: 160 * 160, latencyConcurrency: 20, latencySamples: 2 / 0.03 - 1, busySince: NaN, busyFromCompletions: 500, target: 2 });
  return l.cap;
}

/**
 * A limiter whose pipeline filled at 1200 ms: two latencies of 100 ms into the busy period, 8
 * measured: the floor is 100 ms, measured while 8 were preparing on average. (A latency of 100 is not 1.3 × that floor: no take-over yet.)
 */
function filled(fill: Partial<Obs> = {}): PrepareLimit {
  const l = new PrepareLimit(0);
  expect(observe(l, { now: BUSY + 200, latency: 100, age: 50, concurrency: 8, ...fill })).toBe(Infinity);
  return l;
}

/**
 * The standard overdue run: from 2000 ms the latency is 160 (1.6 × the floor of 100, under
 * 1.5 × 1.3 × 100 = 195), and the 80 preparing are on average 400 ms old where a steady
 * pipeline's would be E[L²] ÷ 2E[L] = 160² ÷ 320 = 80 ms (400 > 1.5 × 80 = 120: overdue). Half a
 * latency is 80 ms: it takes over at 2080, not at 2079. The caps after each observation.
 */
function overdueRun(l: PrepareLimit, over: Partial<Obs> = {}, times = [2000, 2079, 2080]): number[] {
  return times.map((now) => observe(l, { now, ...over }));
}

/**
 * The standard take-over: the ages imply a latency of 2 × 400 ÷ (1 + cv² = 1) = 800 ms, 8 × the
 * floor; what would finish as much at the floor is 80 × 100 ÷ 800 = 10 preparing.
 */
function engaged(): PrepareLimit {
  const l = filled();
  expect(overdueRun(l)).toEqual([Infinity, Infinity, 10]);
  return l;
}

/**
 * A limiter settled on `cap` at the start of a cycle of holds, its last probe above (the next
 * below): the fixture of the tests of holds and probes. (A remembered limit starts settled too,
 * but probes above after its first measurement.)
 */
function settledOn(cap: number): PrepareLimit {
  const l = new PrepareLimit(cap);
  l.state = { ...(l.state as NonNullable<PrepareLimit['state']>), side: 1, rest: 0 };
  return l;
}

/**
 * A pipeline under a limiter that holds a cap, its cumulative counters kept here. Its view is
 * constant (λ = 1, latency 100); the devices drain 0.5 (starved) unless told.
 */
class Pipe {
  now = 5000;
  done = 1000;
  preparingMs = 0;
  latencyMs = 0;
  latencySqMs = 0;
  constructor(readonly l: PrepareLimit) {}

  see(preparing: number, draining = 0.5, over: Partial<PacerSnapshot> = {}): number {
    this.l.update(
      snapshot({ now: this.now, backlog: 50, preparing, prepareCompletions: this.done, preparingMsTotal: this.preparingMs, prepareLatencyMsTotal: this.latencyMs, prepareLatencySqTotal: this.latencySqMs, preparingStartMsTotal: preparing * (this.now - 50), ...over }),
      { lambda: 1, draining, latency: 100, latencySq: 100 * 100, latencyConcurrency: 20, latencySamples: 2 / 0.03 - 1, busySince: 0, busyFromCompletions: 0, target: 2 },
    );
    return this.l.cap;
  }

  idle(): number {
    this.now += 10;
    this.l.update(snapshot({ now: this.now, prepareCompletions: this.done, preparingMsTotal: this.preparingMs, prepareLatencyMsTotal: this.latencyMs }), { lambda: 1, draining: 0, latency: 100, latencySq: 100 * 100, latencyConcurrency: 20, latencySamples: 2 / 0.03 - 1, busySince: NaN, busyFromCompletions: this.done, target: 2 });
    return this.l.cap;
  }

  /**
   * One whole measurement at the cap in force: the pipeline comes within it, `cap` completions
   * turn it over, then the timed ones (TIMED × cap, at least TIMED_MIN: max(30, 2 × cap)) finish
   * in 1000 ms with `meanPreparing` preparing on average and a mean latency of `latency` ms: by
   * Little's law a throughput of meanPreparing ÷ latency items/ms. The cap after it. `sd`: the
   * standard deviation of those latencies (0: none; the measurement's relative standard error is
   * sd ÷ latency ÷ √(n − 1)).
   */
  measure(meanPreparing: number, latency = 100, draining = 0.5, sd = 0): number {
    const cap = this.l.cap;
    // The first measurement after taking over (no best yet) flushes FIRST_FLUSH (2) turnovers.
    const flush = Number.isNaN(this.l.state?.best) ? 2 * cap : cap;
    this.see(cap);
    this.now += 100;
    this.done += flush;
    this.preparingMs += cap * 100;
    this.latencyMs += flush * latency;
    this.latencySqMs += flush * (latency * latency + sd * sd);
    this.see(cap);
    const n = Math.max(30, 2 * cap);
    this.time(n, 1000, meanPreparing, latency, sd);
    return this.see(cap, draining);
  }

  /** `n` more timed completions over `ms`, `meanPreparing` on average, latencies of mean `latency` and standard deviation `sd`. */
  time(n: number, ms: number, meanPreparing: number, latency: number, sd: number): void {
    this.now += ms;
    this.done += n;
    this.preparingMs += meanPreparing * ms;
    this.latencyMs += n * latency;
    this.latencySqMs += n * (latency * latency + sd * sd);
  }
}

describe('PrepareLimit: taking over', () => {
  it('takes over after half a latency of overdue preparations, at the cap that would finish as much at the floor latency (Little)', () => {
    const l = engaged();
    expect(l.state).toMatchObject({ cap: 10, engagedAt: 80, settled: false });
    expect(l.state?.best).toBeNaN();
    expect(l.state?.from).toBeNaN();
  });

  it('holds no cap by default, nor from a prior limit under 1', () => {
    for (const prior of [0, 0.99]) {
      const l = new PrepareLimit(prior);
      expect(l.cap).toBe(Infinity);
      expect(l.state).toBeNull();
    }
  });

  it('not while the devices drain STARVED × λ or more (0.9 of λ = 1: not starved; 0.89: starved)', () => {
    expect(overdueRun(filled(), { draining: 0.9 })).toEqual([Infinity, Infinity, Infinity]);
    expect(overdueRun(filled(), { draining: 0.89 })).toEqual([Infinity, Infinity, 10]);
    // With λ = 2 the line is at 1.8: draining 1.5 is starved (STARVED × λ, not STARVED ÷ λ = 0.45).
    expect(overdueRun(filled({ lambda: 2 }), { lambda: 2, draining: 1.5 })).toEqual([Infinity, Infinity, 10]);
  });

  it('not before two latencies into the busy period: the floor is measured only from then', () => {
    // Filled at 1199 (199 ms < 2 × 100 into the busy period): no floor. At 2000 the pipeline fills
    // with the latency at 160, the floor 160, and 160 is not 1.3 × 160: it never takes over.
    const early = new PrepareLimit(0);
    expect(observe(early, { now: BUSY + 199, latency: 100, age: 50 })).toBe(Infinity);
    expect(overdueRun(early)).toEqual([Infinity, Infinity, Infinity]);
    // At 1200, exactly two latencies: filled, the floor 100 (the standard take-over).
    const onTime = new PrepareLimit(0);
    expect(observe(onTime, { now: BUSY + 200, latency: 100, age: 50 })).toBe(Infinity);
    expect(overdueRun(onTime)).toEqual([Infinity, Infinity, 10]);
  });

  it('a latency seen before the fill is no floor', () => {
    // At 1100 (100 ms < 2 × 60 into the busy period) a latency of 60 is not yet the floor; the fill
    // at 1200 sets it at 100, and the take-over is the standard one (a floor of 60 would give 6).
    const l = new PrepareLimit(0);
    expect(observe(l, { now: BUSY + 100, latency: 60, age: 50 })).toBe(Infinity);
    expect(observe(l, { now: BUSY + 200, latency: 100, age: 50 })).toBe(Infinity);
    expect(overdueRun(l)).toEqual([Infinity, Infinity, 10]);
  });

  it('the floor is the lowest latency since the fill', () => {
    // After the fill (floor 100) the latency dips to 90: the floor is 90, the cap 80 × 90 ÷ 800 = 9.
    const l = filled();
    expect(observe(l, { now: BUSY + 300, latency: 90, age: 50 })).toBe(Infinity);
    expect(overdueRun(l)).toEqual([Infinity, Infinity, 9]);
  });

  it('once filled, the pipeline stays so for the busy period (a latency that grows does not unfill it)', () => {
    // Filled at 1200 with the floor 100; at 1300 the latency is 160 and only 300 ms < 2 × 160 have
    // passed since the busy period began: still filled. Ages 250 (> 1.5 × 80): overdue from 1300,
    // over at 1380; the ages imply 2 × 250 = 500 ms: cap ⌊80 × 100 ÷ 500⌋ = 16.
    const l = filled();
    expect(overdueRun(l, { age: 250 }, [1300, 1379, 1380])).toEqual([Infinity, Infinity, 16]);
  });

  it('needs workers + target preparations measured in the busy period to fill, and twice that to take over (ages under AGES_ALONE × the floor)', () => {
    // Ages 380, under AGES_ALONE (2 × 1.5 × 1.3 = 3.9) × 100 = 390: the ages alone are no evidence.
    // 3 measured at 1200: not filled; it fills at 2000 with the latency at 160: no take-over.
    expect(overdueRun(filled({ measured: 3 }), { age: 380 })).toEqual([Infinity, Infinity, Infinity]);
    // 4 measured at 1200: filled. Then 7 measured (< 8): no take-over; 8: the standard one (the
    // ages imply 760 ms: ⌊80 × 100 ÷ 760⌋ = 10).
    expect(overdueRun(filled({ measured: 4 }), { measured: 7, age: 380 })).toEqual([Infinity, Infinity, Infinity]);
    expect(overdueRun(filled({ measured: 4 }), { measured: 8, age: 380 })).toEqual([Infinity, Infinity, 10]);
  });

  it('with fewer measured, or not yet filled, when those in flight are AGES_ALONE (3.9) × older than the floor', () => {
    // Filled (floor 100), 7 measured: ages 391 > 390 take over alone; they imply 782 ms: ⌊80 × 100 ÷ 782⌋ = 10.
    expect(overdueRun(filled({ measured: 4 }), { measured: 7, age: 391 })).toEqual([Infinity, Infinity, 10]);
    // Not filled (3 measured at 1200, and still at 2000): held against the lowest latency measured
    // in the busy period (100), the same.
    expect(overdueRun(filled({ measured: 3 }), { measured: 3, age: 391 })).toEqual([Infinity, Infinity, 10]);
    // Not yet filled, 2 measured in all: the lowest latency counts from the EARLY_SAMPLES-th (3rd) only.
    expect(overdueRun(filled({ measured: 2, from: 0 }), { measured: 2, from: 0, age: 391 })).toEqual([Infinity, Infinity, Infinity]);
    // 2 in this busy period, 100 before it: the estimate rests on them all (one-partition jobs a
    // minute apart, each its own busy period, measured 36 s alone 17 times; then 561 at once past
    // a knee of 16: random scenario 122 of `bench --random 200`, seed 5, 1.11 → 2.90 of unpaced's speed).
    expect(overdueRun(filled({ measured: 2 }), { measured: 2, age: 391 })).toEqual([Infinity, Infinity, 10]);
    // One measured in all (latency 100, at 1100, 8 preparing) and none after it: the estimate
    // becomes the lowest measured once FIRST_ALONE (= AGES_ALONE, 3.9) latencies have passed (the
    // limiter asks to be woken then); ages 400 are then overdue, taken over half a latency on.
    const first = new PrepareLimit(0);
    const one = { measured: 1, from: 0, latency: 100, concurrency: 8 };
    expect(observe(first, { ...one, now: 1100, age: 50 })).toBe(Infinity);
    expect(first.checkAt).toBe(1100 + 390 + 1);
    expect(observe(first, { ...one, now: 1489, age: 389 })).toBe(Infinity);
    expect(overdueRun(first, one, [1491, 1540, 1541])).toEqual([Infinity, Infinity, 10]);
    // Nothing measured yet in the busy period (no latency known): nothing to hold them against.
    const fresh = new PrepareLimit(0);
    expect(overdueRun(fresh, { measured: 0, latency: 0, latencySq: 0, age: 5000 })).toEqual([Infinity, Infinity, Infinity]);
  });

  it('asks to be woken when time alone may decide it (checkAt): ages passing a line, half a latency overdue', () => {
    const l = filled({ measured: 4 });
    // 7 measured, ages 300 at 2000 (mean start 1700): the ages alone show it at 1700 + 390 (+ 1 ms).
    expect(observe(l, { now: 2000, measured: 7, age: 300 })).toBe(Infinity);
    expect(l.checkAt).toBe(2091);
    // At 2091 the ages are 391: overdue from then; half a latency (80 ms) later it takes over.
    expect(observe(l, { now: 2091, measured: 7, age: 391 })).toBe(Infinity);
    expect(l.checkAt).toBe(2171);
    expect(observe(l, { now: 2171, measured: 7, age: 471 })).toBe(Math.floor((80 * 100) / 942));
    expect(l.checkAt).toBe(Infinity);
    // Filled with 8 measured and the latency up (160), ages 100 are not yet overdue (> 1.5 × 80 =
    // 120): they will be at 1900 + 120 (+ 1 ms) if nothing happens.
    const m = filled();
    expect(observe(m, { now: 2000, age: 100 })).toBe(Infinity);
    expect(m.checkAt).toBe(2021);
    // Nothing queued: the ages are still timed (the wait runs on; only taking over needs work
    // queued): ages 100 at 2010 pass the line at 1910 + 120 (+ 1 ms).
    expect(observe(m, { now: 2010, age: 100, backlog: 0 })).toBe(Infinity);
    expect(m.checkAt).toBe(2031);
    // Overdue for half a latency with nothing queued: nothing to decide until work arrives (an event).
    const q = filled();
    expect(overdueRun(q, { backlog: 0 })).toEqual([Infinity, Infinity, Infinity]);
    expect(q.checkAt).toBe(Infinity);
  });

  it('not without work queued, then at the first observation with work queued', () => {
    const l = filled();
    expect(overdueRun(l, { backlog: 0 })).toEqual([Infinity, Infinity, Infinity]);
    expect(overdueRun(l, { backlog: 0 }, [2500])).toEqual([Infinity]);
    expect(overdueRun(l, { backlog: 1 }, [2501])).toEqual([10]);
    expect(overdueRun(filled(), { backlog: 1 })).toEqual([Infinity, Infinity, 10]);
  });

  it('not where more than UNKNOWN_MAX (half) of those preparing are of kinds with fewer than EARLY_SAMPLES (3) measured when the floor was set', () => {
    // The floor set while kind a had 8 preparations measured and kind b 2.
    const floorKinds = [
      { preparing: 40, done: 8 },
      { preparing: 40, done: 2 },
    ];
    // 41 of 80 preparing of kind b: a slower kind may be all the latency shows.
    expect(overdueRun(filled({ kinds: floorKinds }), { kinds: [{ preparing: 39, done: 20 }, { preparing: 41, done: 20 }] })).toEqual([Infinity, Infinity, Infinity]);
    // Half of them: taken over.
    expect(overdueRun(filled({ kinds: floorKinds }), { kinds: [{ preparing: 40, done: 20 }, { preparing: 40, done: 20 }] })).toEqual([Infinity, Infinity, 10]);
    // Unless those preparing are UNKNOWN_GROWTH (4) × as many as behind the floor (8) and their
    // ages UNKNOWN_GROWTH × the line AGES_ALONE × the floor (4 × 390): nothing says the new kind
    // is slower alone, but its preparations ran to 210 with none finished in 600 s past a knee
    // of 10 (random scenario 20 of `bench --random 200`, seed 3). Ages 1600 imply 3200 ms:
    // cap ⌊80 × 100 ÷ 3200⌋ = 2.
    const unknown = { kinds: [{ preparing: 39, done: 20 }, { preparing: 41, done: 20 }] };
    expect(overdueRun(filled({ kinds: floorKinds }), { ...unknown, age: 1560 })).toEqual([Infinity, Infinity, Infinity]);
    expect(overdueRun(filled({ kinds: floorKinds }), { ...unknown, age: 1600 })).toEqual([Infinity, Infinity, 2]);
    expect(overdueRun(filled({ kinds: floorKinds }), { ...unknown, age: 1600, preparing: 31 })).toEqual([Infinity, Infinity, Infinity]);
    // Kind b with 3 measured when the floor was set: known, taken over whatever the mix.
    expect(overdueRun(filled({ kinds: [floorKinds[0] as { preparing: number; done: number }, { preparing: 40, done: 3 }] }), { kinds: [{ preparing: 0, done: 20 }, { preparing: 80, done: 20 }] })).toEqual([Infinity, Infinity, 10]);
  });

  it('not where the slowdown is more than ELASTICITY_MAX (3) times as steep as the growth in concurrency since the floor (100 ms, measured at 8 preparing)', () => {
    // On the latency line alone (ages 250 under 3.9 × 100): 160 ÷ 100 = 1.6 at 9 preparing on
    // average behind the estimate: (9 ÷ 8)³ = 1.42 explains less; at 10, (10 ÷ 8)³ = 1.95 explains
    // it (the ages imply 500 ms: cap ⌊80 × 100 ÷ 500⌋ = 16).
    expect(overdueRun(filled(), { age: 250, concurrency: 9 }, [2000, 2079, 2080])).toEqual([Infinity, Infinity, Infinity]);
    expect(overdueRun(filled(), { age: 250, concurrency: 10 }, [2000, 2079, 2080])).toEqual([Infinity, Infinity, 16]);
    // On the ages alone (the estimate's concurrency that of the floor: no growth there): ages 400
    // imply 800 ms, 8 × the floor; 12 preparing explain (12 ÷ 8)³ = 3.4 of it, 20 explain 15.6 (cap ⌊20 × 100 ÷ 800⌋ = 2).
    expect(overdueRun(filled(), { preparing: 12, concurrency: 8 })).toEqual([Infinity, Infinity, Infinity]);
    expect(overdueRun(filled(), { preparing: 20, concurrency: 8 })).toEqual([Infinity, Infinity, 2]);
  });

  it('not where the quickest of the latest QUICK_SAMPLES (8) latencies, all measured since the floor was set and finished while those preparing ran, is under LATENCY_UP (1.3) × the quickest behind the floor: contention slows the quick ones too', () => {
    // The floor's observation finds 108 finished at 100 ms each (the quickest behind the floor:
    // 100); then `n` finish one by one at `latest` ms each from `from` + 1 on (ages 50: nothing
    // overdue yet), and the standard overdue run follows (ages 400: those preparing at its
    // take-over, 2080, started at 1680 on average).
    const scene = (latest: number, n = 8, from = 1700) => {
      const l = filled({ latencyTotal: 108 * 100 });
      for (let i = 1; i <= n; i++) observe(l, { now: from + i, age: 50, measured: 8 + i, latencyTotal: 108 * 100 + i * latest });
      return overdueRun(l, { measured: 8 + n, latencyTotal: 108 * 100 + n * latest });
    };
    expect(scene(129)).toEqual([Infinity, Infinity, Infinity]);
    expect(scene(130)).toEqual([Infinity, Infinity, 10]);
    // Seven since the floor: the eighth latest is the floor's own: no evidence either way.
    expect(scene(100, 7)).toEqual([Infinity, Infinity, 10]);
    // Quick ones that finished before those preparing now had started (on average) say nothing
    // of them: where nothing finished since, a new kind crawling past the knee (random scenario
    // 20 of `bench --random 200`, seed 3) ran to 210 preparing before the k0 quick ones aged out.
    expect(scene(100, 8, 1300)).toEqual([Infinity, Infinity, 10]);
  });

  it('not with fewer than 2 × (workers + target) preparing; with that many, a cap of at least 1', () => {
    expect(overdueRun(filled(), { preparing: 7 })).toEqual([Infinity, Infinity, Infinity]);
    // 8 preparing, ages 800 ms: they imply 1600 ms, 16 × the floor: ⌊8 ÷ 16⌋ = 0, at least 1 —
    // behind a floor measured while 6 were preparing.
    expect(overdueRun(filled({ concurrency: 6 }), { preparing: 8, age: 800 })).toEqual([Infinity, Infinity, 1]);
    // Behind a floor measured while 8 were: no more preparing now than then, so the latency
    // estimate's slowdown at 16 is not theirs (a slower kind's block that drained): no take-over.
    expect(overdueRun(filled(), { preparing: 8, age: 800 })).toEqual([Infinity, Infinity, Infinity]);
  });

  it('not unless the latency estimate is LATENCY_UP (1.3) × its floor (ages under AGES_ALONE × the floor)', () => {
    // Latency 129: ages 380 are overdue (> 1.5 × 129² ÷ 258 = 96.75), but 129 < 130.
    expect(overdueRun(filled(), { latency: 129, age: 380 })).toEqual([Infinity, Infinity, Infinity]);
    // Latency 130 = 1.3 × 100: overdue from 2000, over half a latency (65 ms) at 2065; the ages
    // imply 760 ms: cap 10.
    expect(overdueRun(filled(), { latency: 130, age: 380 }, [2000, 2064, 2065])).toEqual([Infinity, Infinity, 10]);
  });

  it('not with a floor of 0 (no reference)', () => {
    // The fill measures a latency of 0: whatever the later latency and ages, no take-over (a floor
    // of 0 would otherwise give a cap of 80 × 0 ÷ 800 → 1).
    expect(overdueRun(filled({ latency: 0, latencySq: 0 }))).toEqual([Infinity, Infinity, Infinity]);
  });

  it('overdue: a mean age over OVERDUE (1.5) × a steady pipeline’s E[L²] ÷ 2E[L]', () => {
    // 160² ÷ 320 = 80; 1.5 × 80 = 120. Ages 120: not over it.
    expect(overdueRun(filled(), { age: 120 })).toEqual([Infinity, Infinity, Infinity]);
    // Ages 121: over. They imply 242 ms: ⌊80 × 100 ÷ 242⌋ = ⌊33.06⌋ = 33.
    expect(overdueRun(filled(), { age: 121 })).toEqual([Infinity, Infinity, 33]);
  });

  it('overdue: or a latency OVERDUE × LATENCY_UP (1.95) × the floor, whatever the ages', () => {
    // Floor 80 (filled at 1200 = two latencies of 80 in): 1.5 × 1.3 × 80 = 156 (exact in binary
    // floating point). Ages 100 are under 1.5 × 156² ÷ 312 = 117: not overdue by age.
    // Latency 155: not overdue at all.
    expect(overdueRun(filled({ latency: 80 }), { latency: 155, age: 100 }, [2000, 2077, 2078, 2200])).toEqual([Infinity, Infinity, Infinity, Infinity]);
    // Latency 156: overdue from 2000, over half a latency (78 ms) at 2078. The ages imply 200 ms:
    // ⌊80 × 80 ÷ 200⌋ = 32.
    expect(overdueRun(filled({ latency: 80 }), { latency: 156, age: 100 }, [2000, 2077, 2078])).toEqual([Infinity, Infinity, 32]);
  });

  it('overdue for half a latency on end: a break starts the wait again', () => {
    // Overdue at 2000; at 2040 ages of 100 (≤ 120) are not; overdue again from 2050: not over at
    // 2129 (79 ms), over at 2130 (80 ms) — counted from 2000 it would have been over at 2080.
    const l = filled();
    expect(overdueRun(l, {}, [2000])).toEqual([Infinity]);
    expect(observe(l, { now: 2040, age: 100 })).toBe(Infinity);
    expect(overdueRun(l, {}, [2050, 2080, 2129, 2130])).toEqual([Infinity, Infinity, Infinity, 10]);
  });

  it('overdue for half a latency on end: a break in the other conditions starts the wait again too', () => {
    // As above, the break at 2040 being devices fed (draining 0.9 of λ) while the ages stay overdue.
    const l = filled();
    expect(overdueRun(l, {}, [2000])).toEqual([Infinity]);
    expect(observe(l, { now: 2040, draining: 0.9 })).toBe(Infinity);
    expect(overdueRun(l, {}, [2050, 2080, 2129, 2130])).toEqual([Infinity, Infinity, Infinity, 10]);
  });

  it('an empty queue is no break: under arrivals each dispatched as it comes, the wait runs on between them', () => {
    // Overdue from 2000; the queue empty at 2040 and 2079, one arrival queued at 2080: half a latency on end, it takes over.
    const l = filled();
    expect(overdueRun(l, {}, [2000])).toEqual([Infinity]);
    expect(overdueRun(l, { backlog: 0 }, [2040, 2079])).toEqual([Infinity, Infinity]);
    expect(overdueRun(l, { backlog: 1 }, [2080])).toEqual([10]);
  });

  it('takes at most half of those preparing', () => {
    // Floor 80, latency 156 (overdue by latency), ages 60: they imply 120 ms, and 80 ÷ 120 = 2/3
    // of the 80 preparing would finish as much; at most half: 40.
    expect(overdueRun(filled({ latency: 80 }), { latency: 156, age: 60 }, [2000, 2078])).toEqual([Infinity, 40]);
  });

  it('reads the latency the ages imply with the spread: mean age = E[L](1 + cv²) ÷ 2', () => {
    // E[L²] = 1.5 × 160² = 38400: cv² = 0.5. Steady mean age 38400 ÷ 320 = 120 (ages 400 > 180:
    // overdue). Implied latency 2 × 400 ÷ 1.5 = 533.3 ms; 81 preparing: ⌊81 × 100 ÷ 533.3⌋ = ⌊15.19⌋ = 15.
    expect(overdueRun(filled(), { preparing: 81, latencySq: 38400 })).toEqual([Infinity, Infinity, 15]);
    // E[L²] = 0.75 × 160² = 19200: cv² = −0.25 counts as 0 (steady age 60, ages 400 > 90: overdue).
    // Implied 800 ms: cap 10 (not ⌊80 × 100 ÷ 1066.7⌋ = 7).
    expect(overdueRun(filled(), { latencySq: 19200 })).toEqual([Infinity, Infinity, 10]);
  });

  it('where latencies spread, the latency line is at least 1 + FLOOR_Z (4) standard errors of the estimate above the floor', () => {
    // cv² = 1 (E[L²] = 2 × 160²), 16 samples: 1 + 4 × √(1 ÷ 16) = 2 × the floor. The ages (380,
    // under 3.9 × 100) are overdue (> 1.5 × 2 × 160² ÷ 320 = 240), but 160 < 200: no take-over.
    expect(overdueRun(filled(), { latencySq: 2 * 160 * 160, samples: 16, age: 380 })).toEqual([Infinity, Infinity, Infinity]);
    // 200 = 2 × the floor: it takes over half a latency on (100 ms); the ages imply 2 × 380 ÷ 2 =
    // 380 ms: ⌊80 × 100 ÷ 380⌋ = 21.
    expect(overdueRun(filled(), { latency: 200, latencySq: 2 * 200 * 200, samples: 16, age: 380 }, [2000, 2099, 2100])).toEqual([Infinity, Infinity, 21]);
    // With a full window's samples (65.7) the line is 1 + 4 × √(1 ÷ 65.7) = 1.49 × the floor: 160 is over it.
    expect(overdueRun(filled(), { latencySq: 2 * 160 * 160, age: 380 })).toEqual([Infinity, Infinity, 21]);
  });

  it('where latencies spread, the ages line scales with a steady pipeline’s mean age, E[L](1 + cv²) ÷ 2, where that is over E[L]', () => {
    // cv² = 3 (E[L²] = 4 × 160²): AGES_ALONE × 2 = 7.8 × the floor. 7 measured (too few for the
    // latency line): ages 391 no longer take over alone; 780 do not either, 781 do (overdue: over
    // 1.5 × 4 × 160² ÷ 320 = 480). They imply 2 × 781 ÷ 4 = 390.5 ms: ⌊80 × 100 ÷ 390.5⌋ = 20.
    const spread = { measured: 7, latencySq: 4 * 160 * 160 };
    expect(overdueRun(filled({ measured: 4 }), { ...spread, age: 391 })).toEqual([Infinity, Infinity, Infinity]);
    expect(overdueRun(filled({ measured: 4 }), { ...spread, age: 780 })).toEqual([Infinity, Infinity, Infinity]);
    expect(overdueRun(filled({ measured: 4 }), { ...spread, age: 781 })).toEqual([Infinity, Infinity, 20]);
    // cv² = 0.5: (1 + 0.5) ÷ 2 < 1, the line stays 3.9 × the floor (391 take over; they imply 2 × 391 ÷ 1.5 = 521.3 ms: ⌊15.3⌋ = 15).
    expect(overdueRun(filled({ measured: 4 }), { measured: 7, latencySq: 1.5 * 160 * 160, age: 391 })).toEqual([Infinity, Infinity, 15]);
  });

  it('at once where what finishes collapsed: of those of known kinds preparing a span (COLLAPSE_SPAN × the latency, at least 10 s) ago, at least `many`, fewer than COLLAPSE_SPAN ÷ COLLAPSE (2 ÷ 15.6) finished, with UNKNOWN_GROWTH (4) × the floor’s 8 preparing now', () => {
    // Filled at 1200 with kind a known (8 measured) and 8 of it preparing: a look then. The latency
    // 100 ms: a span of 10 s (COLLAPSE_SPAN_MIN_MS). No line is crossed (ages 50, latency at the
    // floor): only what finishes.
    const run = (kindsNow: { preparing: number; done: number }[], preparing = 80, times = [1300, 11199, 11200]) => {
      const l = filled({ kinds: [{ preparing: 8, done: 8 }] });
      return times.map((now) => observe(l, { now, latency: 100, age: 50, preparing, kinds: kindsNow }));
    };
    // None of those 8 finished in 10 s: taken over at 11200, at ⌊80 × min(½, 100 ÷ 100)⌋ = 40.
    expect(run([{ preparing: 80, done: 8 }])).toEqual([Infinity, Infinity, 40]);
    // Two finished: 2 × 15.6 ≥ 2 × 8, not collapsed.
    expect(run([{ preparing: 80, done: 10 }])).toEqual([Infinity, Infinity, Infinity]);
    // 31 preparing now, under 4 × 8.
    expect(run([{ preparing: 31, done: 8 }], 31)).toEqual([Infinity, Infinity, Infinity]);
    // Those preparing a span ago of a kind the floor never saw (b): a slower kind may be all it shows.
    const unknown = filled({ kinds: [{ preparing: 0, done: 8 }, { preparing: 8, done: 0 }] });
    expect([1300, 11200, 13700].map((now) => observe(unknown, { now, latency: 100, age: 50, kinds: [{ preparing: 0, done: 8 }, { preparing: 80, done: 0 }] }))).toEqual([Infinity, Infinity, Infinity]);
    // The floor's concurrency proves nothing of the floor here: no first measurement lets go on it.
    const l = filled({ kinds: [{ preparing: 8, done: 8 }] });
    [1300, 11199, 11200].forEach((now) => observe(l, { now, latency: 100, age: 50, kinds: [{ preparing: 80, done: 8 }] }));
    expect(l.state?.floorPreparing).toBeNaN();
    expect(l.state?.floorMs).toBe(100);
  });

  it('a cap that is not a number is no cap', () => {
    // E[L²] not a number: the ages say nothing (not overdue by age), the latency 200 ≥ 195 is
    // overdue; over half a latency at 2100 the cap would be NaN: none is taken.
    const l = filled();
    expect(overdueRun(l, { latency: 200, latencySq: NaN }, [2000, 2100])).toEqual([Infinity, Infinity]);
    expect(l.state).toBeNull();
  });
});

describe('PrepareLimit: a remembered prior limit', () => {
  it('starts settled there, holding it as its best (rounded to a whole number of preparations), its first measurement its last hold before a probe above', () => {
    const l = new PrepareLimit(20);
    expect(l.cap).toBe(20);
    expect(l.state).toMatchObject({ cap: 20, engagedAt: 20, best: 20, settled: true, rest: 2, side: -1 });
    expect(l.state?.from).toBeNaN();
    expect(new PrepareLimit(2.6).cap).toBe(3);
    expect(new PrepareLimit(1).cap).toBe(1);
  });

  it('measures the prior cap first, then probes above it at once (it does not climb down from it); two gains in a row with GAIN of the proportional one let it go', () => {
    // (It held two more measurements and probed below first: a remembered 12 that the work did not
    // need, with 1.5 s preparations, was let go 48 s into the run; 16.6 s so.)
    const p = new Pipe(new PrepareLimit(20));
    // x = 18 ÷ 100 = 0.18, its throughput; above at max(21, round(22.4)) = 22.
    expect(p.measure(18)).toBe(22);
    expect(p.l.state).toMatchObject({ settled: true, best: 20, side: 1, rest: 0 });
    expect(p.l.state?.bestX).toBeCloseTo(0.18, 12);
    // At 22: 0.198 = 1.1 × 0.18, over 1 + 2/3 × 0.1: one up; next max(23, round(24.64)) = 25.
    expect(p.measure(19.8)).toBe(25);
    expect(p.l.state).toMatchObject({ best: 22, ups: 1 });
    // At 25: 0.225 = 1.136 × 0.198, over 1 + 2/3 × (25/22 − 1) = 1.091: two in a row, at the remembered 20 or more: let go.
    expect(p.measure(22.5)).toBe(Infinity);
    expect(p.l.state).toBeNull();
    // Where the probe above gains less than EPS_UP, the remembered cap holds.
    const knee = new Pipe(new PrepareLimit(20));
    expect(knee.measure(18)).toBe(22);
    expect(knee.measure(18.5)).toBe(20);
    expect(knee.l.state).toMatchObject({ best: 20, ups: 0 });
  });
});

describe('PrepareLimit: measuring a cap', () => {
  it('from when the pipeline is within the cap: `cap` completions flush the old cap, the next TIMED × cap (40 at a cap of 20) are timed', () => {
    const p = new Pipe(settledOn(20));
    p.done = 50;
    expect(p.see(21)).toBe(20);
    expect(p.l.state?.from).toBeNaN();
    p.now = 100;
    p.see(20);
    expect(p.l.state).toMatchObject({ from: 100, mark: 50 });
    // 19 completions: not yet turned over; 20: turned over at 300, with the totals then.
    p.now = 200;
    p.done = 69;
    p.see(20);
    expect(p.l.state?.turnedAt).toBeNaN();
    p.now = 300;
    p.done = 70;
    p.preparingMs = 5000;
    p.latencyMs = 2000;
    p.see(20);
    expect(p.l.state).toMatchObject({ from: 100, turnedAt: 300, mark: 70, preparingMs: 5000, latencyMs: 2000 });
    // 39 timed: no measurement yet. 40, 1000 ms after the turnover, 18 preparing on average
    // (18 000 item-ms), latency 90 ms on average (3600 ms over 40): x = 18 ÷ 90 = 0.2 items/ms.
    p.now = 1299;
    p.done = 109;
    p.see(20);
    expect(p.l.state).toMatchObject({ turnedAt: 300, rest: 0 });
    p.now = 1300;
    p.done = 110;
    p.preparingMs = 5000 + 18_000;
    p.latencyMs = 2000 + 40 * 90;
    expect(p.see(20)).toBe(20);
    expect(p.l.state).toMatchObject({ rest: 1, mark: 110 });
    expect(p.l.state?.bestX).toBeCloseTo(0.2, 12);
    // The next measurement starts afresh: not yet within the cap.
    expect(p.l.state?.from).toBeNaN();
    expect(p.l.state?.turnedAt).toBeNaN();
  });

  it('times at least TIMED_MIN (30) completions at a small cap', () => {
    // Cap 10: the turnover is 10 completions, then 30 (not 2 × 10 = 20) are timed.
    const p = new Pipe(settledOn(10));
    p.see(10);
    p.done += 10;
    p.see(10);
    const turnedAt = p.l.state?.turnedAt;
    expect(turnedAt).toBe(p.now);
    p.now += 500;
    p.done += 29;
    p.preparingMs += 5000;
    p.latencyMs += 29 * 100;
    p.see(10);
    expect(p.l.state).toMatchObject({ turnedAt, rest: 0 });
    p.now += 500;
    p.done += 1;
    p.preparingMs += 5000;
    p.latencyMs += 100;
    p.see(10);
    // 10 000 item-ms over 1000 ms: 10 preparing; latency 100: x = 0.1.
    expect(p.l.state?.rest).toBe(1);
    expect(p.l.state?.bestX).toBeCloseTo(0.1, 12);
  });

  it('the first measurement after taking over flushes FIRST_FLUSH (2) turnovers', () => {
    // Cap 10: within it at 5000; 19 completions: not turned over; 20: turned over, then 30 timed.
    const p = new Pipe(engaged());
    p.see(10);
    p.done += 10;
    p.see(10);
    expect(p.l.state?.turnedAt).toBeNaN();
    p.done += 9;
    p.see(10);
    expect(p.l.state?.turnedAt).toBeNaN();
    p.now += 100;
    p.done += 1;
    p.see(10);
    expect(p.l.state?.turnedAt).toBe(p.now);
    p.time(8, 300, 10, 200, 0);
    expect(p.see(10)).toBe(10);
    p.time(22, 700, 10, 200, 0);
    expect(p.see(10)).toBe(7);
    expect(p.l.state?.bestX).toBeCloseTo(0.05, 12);
  });
});

describe('PrepareLimit: a measurement’s standard error', () => {
  it('goes on while its relative standard error is over SE_MAX (1.5 %), and takes it into the best’s', () => {
    // Cap 20: 40 timed latencies of mean 100 ms and standard deviation 12 ms: a standard error of
    // 12 ÷ 100 ÷ √39 = 1.92 %: not yet. At 64: 12 % ÷ √63 = 1.51 %: not yet. At 66: 12 % ÷ √65 = 1.49 %: measured.
    const p = new Pipe(settledOn(20));
    p.see(20);
    p.done += 20;
    p.see(20);
    p.time(40, 1000, 18, 100, 12);
    p.see(20);
    expect(p.l.state).toMatchObject({ rest: 0, mark: p.done - 40 });
    p.time(24, 600, 18, 100, 12);
    p.see(20);
    expect(p.l.state?.rest).toBe(0);
    p.time(2, 50, 18, 100, 12);
    p.see(20);
    expect(p.l.state?.rest).toBe(1);
    expect(p.l.state?.bestX).toBeCloseTo(0.18, 12);
    expect(p.l.state?.bestSe).toBeCloseTo(0.12 / Math.sqrt(65), 12);
  });

  it('for at most EXTEND (3) × its TIMED turnovers', () => {
    // Standard deviation 30 ms: 30 % ÷ √119 = 2.75 % at 120 = 3 × 2 × 20 timed: measured all the same.
    const p = new Pipe(settledOn(20));
    p.see(20);
    p.done += 20;
    p.see(20);
    p.time(119, 3000, 18, 100, 30);
    p.see(20);
    expect(p.l.state?.rest).toBe(0);
    p.time(1, 25, 18, 100, 30);
    p.see(20);
    expect(p.l.state?.rest).toBe(1);
    expect(p.l.state?.bestSe).toBeCloseTo(0.3 / Math.sqrt(119), 12);
  });

  it('a probe above is not timed on where NOISE_Z (1.5) of its standard errors fall short of EPS_UP more than the best', () => {
    // Best 20 at 0.16 (no spread), probing 22: 44 timed, standard deviation 20 ms at 100 ms: a
    // standard error of 20 % ÷ √43 = 3.05 %. The line is 1.05 × 0.16 = 0.168.
    const clear = probingAbove(16);
    // x = 0.2: 0.032 over the line, more than 1.5 × 3.05 % × 0.2 = 0.0092: measured, it moves up
    // (GAIN of the proportional gain: one up) to max(23, round(24.64)) = 25.
    expect(clear.measure(20, 100, 0.5, 20)).toBe(25);
    expect(clear.l.state).toMatchObject({ best: 22, ups: 1 });
    // x = 0.17: 0.002 over the line, within 1.5 × 3.05 % × 0.17 = 0.0078: timed on.
    const close = probingAbove(16);
    expect(close.measure(17, 100, 0.5, 20)).toBe(22);
    expect(close.l.state?.best).toBe(20);
    expect(close.l.state?.turnedAt).not.toBeNaN();
    // To EXTEND × TIMED turnovers of 22 = 132 timed (standard error 20 % ÷ √131 = 1.75 %): x = 0.17 ≥ 0.168: up.
    close.time(88, 2000, 17, 100, 20);
    expect(close.see(22)).toBe(25);
    expect(close.l.state?.bestSe).toBeCloseTo(0.2 / Math.sqrt(131), 12);
  });

  it('nor is a lower cap where NOISE_Z of its standard errors fall short of as much with both at SE_MAX', () => {
    // Best 10 at 0.05 (no spread); cap 7: 30 timed at 100 ms ± 20 ms, standard error 20 % ÷ √29 =
    // 3.71 %. The line: 0.05 × (1 − 0.02 − 1.5 × 1.5 %) = 0.047875. x = 0.04: 0.0079 under it, more
    // than 1.5 × 3.71 % × 0.04 = 0.0022: measured, less: ⌈7 × 0.05 ÷ 0.04 = 8.75⌉ = 9.
    const p = new Pipe(engaged());
    expect(p.measure(10, 200)).toBe(7);
    expect(p.measure(4, 100, 0.5, 20)).toBe(9);
    expect(p.l.state).toMatchObject({ settled: false, best: 10, below: 7 });
  });

  it('a small cap is timed for TIMED_MIN (30) and no more where EXTEND × TIMED turnovers are fewer', () => {
    // Cap 5: 30 timed (not 2 × 5), standard error 30 % ÷ √29 = 5.6 %, and 3 × 2 × 5 = 30 ≤ 30: measured.
    // (Held as a cap the limiter came to, not on trial as a remembered 5 is: see below.)
    const l = new PrepareLimit(5);
    Object.assign(l.state ?? {}, { trial: false, rest: 0, side: 1 });
    const p = new Pipe(l);
    expect(p.measure(4.5, 100, 0.5, 30)).toBe(5);
    expect(p.l.state?.rest).toBe(1);
    expect(p.l.state?.bestSe).toBeCloseTo(0.3 / Math.sqrt(29), 12);
  });

  it('the holds at the best: a running mean, each new measurement’s variance weighing a quarter', () => {
    // Two holds at 20, 40 timed each, standard errors 1.4 % (sd 8.743 ms) and 0.7 %: (1.4² + 0.7²)^½ ÷ 2 = 0.7826 %.
    const p = new Pipe(settledOn(20));
    p.measure(18, 100, 0.5, 1.4 * Math.sqrt(39));
    expect(p.l.state?.bestSe).toBeCloseTo(0.014, 12);
    p.measure(20, 100, 0.5, 0.7 * Math.sqrt(39));
    expect(p.l.state?.bestX).toBeCloseTo(0.19, 12);
    expect(p.l.state?.bestSe).toBeCloseTo(Math.hypot(0.014, 0.007) / 2, 12);
  });

  it('a lower cap finishes as much unless it is less by more than EPS and NOISE_Z (1.5) standard errors of the difference; a step down as much only within the noise measures the cap above again', () => {
    // Cap 10: 30 timed at 200 ms ± 15 ms: x = 0.05, standard error 7.5 % ÷ √29 = 1.3927 %. Cap 7:
    // 30 timed at 100 ms ± 7.5 ms: the same. As much down to 0.05 × (1 − 0.02 − 1.5 × √2 × 1.3927 %) = 0.047523.
    // x = 0.0476: as much (with EPS alone it would be less than 0.049; with one standard error,
    // than 0.048015), but only within the noise (under 0.049): 10 is measured again first.
    const noisy = () => {
      const p = new Pipe(engaged());
      expect(p.measure(10, 200, 0.5, 15)).toBe(7);
      expect(p.measure(4.76, 100, 0.5, 7.5)).toBe(10);
      expect(p.l.state).toMatchObject({ settled: false, best: 10, recheck: { cap: 7 } });
      return p;
    };
    // Cap 10 again: 0.049; the running mean 0.0495, its standard error 1.3927 % ÷ √2 = 0.9848 %:
    // as much down to 0.0495 × (1 − 0.02 − 1.5 × (1.3927² + 0.9848²)^½ %) = 0.047244: 7 is the best, down to ⌊7 × 0.7⌋ = 4.
    const lower = noisy();
    expect(lower.measure(9.8, 200, 0.5, 15)).toBe(4);
    expect(lower.l.state).toMatchObject({ settled: false, best: 7, recheck: null });
    expect(lower.l.state?.measured.find((o) => o.cap === 10)?.x).toBeCloseTo(0.0495, 12);
    // Cap 10 again: 0.05; the mean 0.05: as much down to 0.047721 only: 7 finishes less, ⌈7 × 0.05 ÷ 0.0476 = 7.35⌉ = 8.
    const again = noisy();
    expect(again.measure(10, 200, 0.5, 15)).toBe(8);
    expect(again.l.state).toMatchObject({ settled: false, best: 10, below: 7, recheck: null });
    const less = new Pipe(engaged());
    less.measure(10, 200, 0.5, 15);
    // x = 0.0475: less: ⌈7 × 0.05 ÷ 0.0475 = 7.37⌉ = 8.
    expect(less.measure(4.75, 100, 0.5, 7.5)).toBe(8);
    expect(less.l.state).toMatchObject({ settled: false, best: 10, below: 7 });
  });
});

describe('PrepareLimit: letting go', () => {
  it('lets go when a measurement finds the devices fed STARVED × λ (0.9 of λ = 1) or more, not before it ends', () => {
    const p = new Pipe(settledOn(20));
    // Busy devices while the pipeline turns over: nothing is decided yet.
    expect(p.see(20, 1)).toBe(20);
    p.done += 20;
    expect(p.see(20, 1)).toBe(20);
    // 18 preparing on average, latency 20 ms: x = 0.9 items/ms — even with the devices' smoothed occupancy low at the end.
    p.time(40, 1000, 18, 20, 0);
    expect(p.see(20, 0.5)).toBe(Infinity);
    expect(p.l.state).toBeNull();
  });

  it('keeps the cap when the measurement finds the devices fed less (x = 0.89 λ), even with them busy at its end', () => {
    const p = new Pipe(settledOn(20));
    // 17.8 preparing at 20 ms: x = 0.89.
    expect(p.measure(17.8, 20, 1)).toBe(20);
    expect(p.l.state).not.toBeNull();
  });

  /** Taken over at a cap of 10 on a floor of 100 ms measured while 20 were preparing on average; its first measurement's mean latency `latency`. */
  /** Taken over at a cap of 10 on a floor of 100 ms measured at 20 preparing, its flush done: the timed preparations come next. */
  const flushed = (): Pipe => {
    const l = filled({ concurrency: 20 });
    expect(overdueRun(l, { concurrency: 20 })).toEqual([Infinity, Infinity, 10]);
    const p = new Pipe(l);
    p.see(10);
    p.done += 20;
    p.see(10);
    return p;
  };
  const firstMeasurement = (latency: number): Pipe => {
    const p = flushed();
    p.time(30, 1000, 10, latency, 0);
    p.see(10);
    return p;
  };

  it('lets go when the first measurement, at a cap no more than were preparing behind the floor, finds a latency LATENCY_UP (1.3) × the floor: no contention, a floor read low', () => {
    // 130 ms at 10 preparing where the floor was 100 ms at 20: fewer in flight are no quicker.
    const p = firstMeasurement(130);
    expect(p.l.cap).toBe(Infinity);
    expect(p.l.state).toBeNull();
    // The floor stays at least 130 for the busy period: the standard overdue scene (latency 160,
    // ages 400) no longer takes over: 160 < 1.3 × 130, and 400 < 3.9 × 130.
    expect(overdueRun(p.l, {}, [p.now + 100, p.now + 179, p.now + 180])).toEqual([Infinity, Infinity, Infinity]);
    // 129 ms: under the line, the measurement counts as any other (x = 10 ÷ 129; less than the floor's, no step judged yet: ⌊10 × 0.7⌋ = 7).
    expect(firstMeasurement(129).l.cap).toBe(7);
  });

  it('looks from EARLY_LOOK (8) timed preparations on, letting go where they are LATENCY_UP × the floor with NOISE_Z (1.5) standard errors to spare', () => {
    // 7 timed at 200 ms: too few to look; the 8th: 200 ≥ 1.3 × 100, no spread: it lets go.
    const p = flushed();
    p.time(7, 100, 10, 200, 0);
    expect(p.see(10)).toBe(10);
    p.time(1, 100, 10, 200, 0);
    expect(p.see(10)).toBe(Infinity);
    // 8 at a mean of 140 ms, sd 40: a standard error of 40 ÷ √7 ÷ 140 = 10.8 %, and
    // 140 × (1 − 1.5 × 0.108) = 117 < 130: it waits for the measurement's end — 30 timed, and
    // with a standard error over SE_MAX on to EXTEND × TIMED × 10 = 60 — where 140 ≥ 130 lets go.
    const q = flushed();
    q.time(8, 100, 10, 140, 40);
    expect(q.see(10)).toBe(10);
    q.time(51, 900, 10, 140, 40);
    expect(q.see(10)).toBe(10);
    q.time(1, 10, 10, 140, 40);
    expect(q.see(10)).toBe(Infinity);
  });

  it('a cap never measured, held over an idle pipeline, is timed from the first preparation after it (nothing ran at another cap)', () => {
    const l = filled({ concurrency: 20 });
    expect(overdueRun(l, { concurrency: 20 })).toEqual([Infinity, Infinity, 10]);
    const p = new Pipe(l);
    expect(p.idle()).toBe(10);
    // The next busy period starts empty: no flush. 8 completions at 200 ms prove the floor wrong.
    p.see(0);
    p.time(8, 400, 10, 200, 0);
    expect(p.see(10)).toBe(Infinity);
    // In flight when it came within the cap (1 preparing): 2 × 10 flush first, so 8 are not timed yet.
    const m = filled({ concurrency: 20 });
    overdueRun(m, { concurrency: 20 });
    const q = new Pipe(m);
    q.idle();
    q.see(1);
    q.time(8, 400, 10, 200, 0);
    expect(q.see(10)).toBe(10);
  });

  it('not where the cap is above the number preparing behind the floor (past a steep knee a cap can be too)', () => {
    // The floor measured while 8 were preparing (the default), the cap 10: a latency of 200 there is contention's.
    const p = new Pipe(engaged());
    p.see(10);
    p.done += 20;
    p.see(10);
    p.time(8, 300, 10, 200, 0);
    expect(p.see(10)).toBe(10);
    p.time(22, 700, 10, 200, 0);
    expect(p.see(10)).toBe(7);
  });
});

describe('PrepareLimit: climbing down', () => {
  it('steps down by STEP while a lower cap finishes as much within EPS of every cap above it; past the first that finishes less, splits the difference; settles on the best, probing PROBE × above it', () => {
    const p = new Pipe(engaged());
    // Cap 10: 10 preparing at 200 ms: x = 0.05. The first measured cap is the best so far: down to ⌊10 × 0.7⌋ = 7.
    expect(p.measure(10, 200)).toBe(7);
    expect(p.l.state).toMatchObject({ settled: false, best: 10, engagedAt: 80 });
    expect(p.l.state?.bestX).toBeCloseTo(0.05, 12);
    expect(p.l.state?.below).toBeNaN();
    // Cap 7: 4.9 preparing at 100 ms: x = 0.049 = (1 − 0.02) × 0.05, as much within EPS: down to ⌊7 × 0.7⌋ = 4.
    expect(p.measure(4.9, 100)).toBe(4);
    expect(p.l.state).toMatchObject({ settled: false, best: 7 });
    // Cap 4: 4 preparing at 84 ms: x = 0.0476 < 0.98 × 0.05 = 0.049: less. 7 > 1.12 × 4: what
    // would finish as much as the best in proportion, ⌈4 × 0.049 ÷ 0.0476 = 4.12⌉ = 5.
    expect(p.measure(4, 84)).toBe(5);
    expect(p.l.state).toMatchObject({ settled: false, best: 7, below: 4 });
    // Cap 5: x = 0.0485: as much as the best, 7 (over 0.98 × 0.049 = 0.04802), but 3 % less than 10
    // (under 0.049): less. Down a gentle slope the small losses do not add up. The geometric mean, round(√35 = 5.92) = 6.
    expect(p.measure(4.85, 100)).toBe(6);
    expect(p.l.state).toMatchObject({ settled: false, best: 7, below: 5 });
    // Cap 6: x = 0.049, as much as 10 and 7: the best. round(√30 = 5.48) = 5 is no cap between 5
    // and 6: settled on 6, probing above it at max(6 + 1, round(6 × 1.12 = 6.72)) = 7.
    expect(p.measure(4.9, 100)).toBe(7);
    expect(p.l.state).toMatchObject({ settled: true, side: -1, best: 6, ups: 0 });
    expect(p.l.state?.bestX).toBeCloseTo(0.049, 12);
  });

  it('past the first step that finishes less, the cap that would finish as much as the best in proportion to it (on a plateau, the knee)', () => {
    // A plateau past 6: x = 0.06 at caps 10 and 7, 0.01 per preparation below 6.
    const p = new Pipe(engaged());
    expect(p.measure(6, 100)).toBe(7);
    expect(p.measure(6, 100)).toBe(4);
    // Cap 4: x = 0.04, less: ⌈4 × 0.06 ÷ 0.04⌉ = 6 (the geometric mean would be round(√28) = 5).
    expect(p.measure(4, 100)).toBe(6);
    expect(p.l.state).toMatchObject({ settled: false, best: 7, below: 4 });
    expect(p.l.state?.belowX).toBeCloseTo(0.04, 12);
    // Cap 6: as much, the best; 6 > 1.12 × 4: now the geometric mean, round(√24 = 4.9) = 5.
    expect(p.measure(6, 100)).toBe(5);
    // Cap 5: x = 0.05, less; round(√30 = 5.48) = 5 is no cap between 5 and 6: settled on 6, probing 7.
    expect(p.measure(5, 100)).toBe(7);
    expect(p.l.state).toMatchObject({ settled: true, best: 6, below: 5 });
  });

  it('past the first step that finishes less: where the cap that would finish as much in proportion finishes less than the best too, there is no knee between (a gentle slope): settled on the best', () => {
    const p = new Pipe(engaged());
    expect(p.measure(10, 200)).toBe(7);
    // Cap 7: x = 0.048 < 0.049: less; 10 > 1.12 × 7 = 7.84: ⌈7 × 0.05 ÷ 0.048 = 7.29⌉ = 8.
    expect(p.measure(4.8, 100)).toBe(8);
    expect(p.l.state).toMatchObject({ settled: false, best: 10, below: 7, tries: 0 });
    // Cap 8: x = 0.0485 < 0.049: less than the best: settled on 10, probing max(11, round(11.2)) = 11.
    expect(p.measure(4.85, 100)).toBe(11);
    expect(p.l.state).toMatchObject({ settled: true, side: -1, best: 10, below: 8 });
  });

  it('a first step down no quicker than the first measurement, where the noise hides a PROBE × gain, puts the first cap on trial: probes doubled, two gains in proportion let go', () => {
    // Cap 10: x = 10 ÷ 200 = 0.05 (no spread). Cap 7: 7 preparing at 200 ms ± 50 ms: x = 0.035,
    // its standard error 25 % ÷ √29 = 4.64 %: less than as much (0.05 × (1 − 0.02 − 1.5 × 4.64 %)
    // = 0.0455), no quicker (200 ≥ 200 × (1 − 1.5 × 4.64 %)), and 1.5 × 4.64 % = 7 % of noise…
    // is under PROBE − 1 = 12 %: the step is judged as before (⌈7 × 0.05 ÷ 0.035⌉ = 10 is no cap
    // between: settled on 10, probing 11).
    const quiet = new Pipe(engaged());
    expect(quiet.measure(10, 200)).toBe(7);
    expect(quiet.measure(7, 200, 0.5, 50)).toBe(11);
    expect(quiet.l.state).toMatchObject({ settled: true, trial: false, best: 10 });
    // ± 100 ms: a standard error of 50 % ÷ √29 = 9.28 %, 1.5 × 9.28 % = 13.9 % of noise: on trial
    // from 10, probing 2 × 10 = 20.
    const p = new Pipe(engaged());
    expect(p.measure(10, 200)).toBe(7);
    expect(p.measure(7, 200, 0.5, 100)).toBe(20);
    expect(p.l.state).toMatchObject({ settled: true, trial: true, best: 10, engagedAt: 10, ups: 0 });
    // Cap 20: x = 0.1 ≥ 0.05 × (1 + ½ × (20 ÷ 10 − 1)) = 0.075: one up, probing 40; cap 40: x = 0.2
    // ≥ 0.05 × (1 + ½ × 3): two, at 2 × 10 or more: it lets go.
    expect(p.measure(20, 200)).toBe(40);
    expect(p.l.state).toMatchObject({ trial: true, best: 20, ups: 1 });
    expect(p.measure(40, 200)).toBe(Infinity);
    expect(p.l.state).toBeNull();
  });

  it('on such a trial, a doubled probe that does not gain in proportion has a knee below it: the next probe is the geometric mean, from the better of the two', () => {
    const more = new Pipe(engaged());
    expect(more.measure(10, 200)).toBe(7);
    expect(more.measure(7, 200, 0.5, 100)).toBe(20);
    // Cap 20: x = 0.06, over 1.05 × 0.05 but under 0.075: the best now, the trial over; round(√200 = 14.1) = 14.
    expect(more.measure(12, 200)).toBe(14);
    expect(more.l.state).toMatchObject({ settled: true, trial: false, best: 20, ups: 0 });
    const less = new Pipe(engaged());
    expect(less.measure(10, 200)).toBe(7);
    expect(less.measure(7, 200, 0.5, 100)).toBe(20);
    // Cap 20: x = 0.04, less than the best: still 10; the trial over; 14 next.
    expect(less.measure(8, 200)).toBe(14);
    expect(less.l.state).toMatchObject({ settled: true, trial: false, best: 10 });
  });

  it('settles where no cap lies between the best and the highest that finished less (or they are within PROBE), probing round(PROBE × best) above it', () => {
    // 10 (x = 0.05), then 7 less (x = 0.0465): ⌈7 × 0.05 ÷ 0.0465 = 7.53⌉ = 8, as much (x = 0.05):
    // the best; round(√56 = 7.48) = 7 is no cap between 7 and 8: settled on 8, probing max(9, round(8.96)) = 9.
    const p = new Pipe(engaged());
    expect(p.measure(10, 200)).toBe(7);
    expect(p.measure(4.65, 100)).toBe(8);
    expect(p.measure(5, 100)).toBe(9);
    expect(p.l.state).toMatchObject({ settled: true, best: 8, below: 7 });
  });

  it('at a cap of 1 there is nowhere lower: settled there, probing 1 + 1 = 2', () => {
    const l = filled({ concurrency: 6 });
    expect(overdueRun(l, { preparing: 8, age: 800 })).toEqual([Infinity, Infinity, 1]);
    const p = new Pipe(l);
    expect(p.measure(1)).toBe(2);
    expect(p.l.state).toMatchObject({ settled: true, best: 1, side: -1 });
    expect(p.l.state?.bestX).toBeCloseTo(0.01, 12);
  });

  it('a cap of 2 steps down to ⌊2 × 0.7⌋ = 1', () => {
    // 32 preparing, ages 800 (implied 1600 ms, 16 × the floor): cap ⌊32 ÷ 16⌋ = 2.
    const l = filled();
    expect(overdueRun(l, { preparing: 32, age: 800 })).toEqual([Infinity, Infinity, 2]);
    const p = new Pipe(l);
    expect(p.measure(2)).toBe(1);
    expect(p.l.state?.settled).toBe(false);
  });
});

/** A limiter settled on a prior 20 whose probe below failed, back on 20 measured at `bestMp` ÷ 100 and now probing above it at 22. */
function probingAbove(bestMp: number): Pipe {
  const p = new Pipe(settledOn(20));
  for (let i = 0; i < 3; i++) p.measure(18);
  expect(p.l.cap).toBe(18);
  // Below: 0.17 < 0.98 × 0.18: back to 20.
  expect(p.measure(17)).toBe(20);
  for (let i = 0; i < 2; i++) expect(p.measure(bestMp)).toBe(20);
  // The third hold: a probe on the other side than the last (below): above, max(21, round(22.4)) = 22.
  expect(p.measure(bestMp)).toBe(22);
  expect(p.l.state).toMatchObject({ best: 20, side: 1, rest: 0 });
  return p;
}

describe('PrepareLimit: settled on the best', () => {
  it('holds the best REST + 1 measurements, their running mean its throughput, then probes below (a prior’s last side is above)', () => {
    const p = new Pipe(settledOn(20));
    expect(p.measure(12)).toBe(20);
    expect(p.l.state?.rest).toBe(1);
    expect(p.l.state?.bestX).toBeCloseTo(0.12, 12);
    expect(p.measure(20)).toBe(20);
    // (0.12 + 0.2) ÷ 2 = 0.16.
    expect(p.l.state?.rest).toBe(2);
    expect(p.l.state?.bestX).toBeCloseTo(0.16, 12);
    // (0.16 + 0.18) ÷ 2 = 0.17; probing below at max(1, min(19, round(20 ÷ 1.12 = 17.86))) = 18.
    expect(p.measure(18)).toBe(18);
    expect(p.l.state).toMatchObject({ best: 20, side: -1, rest: 0 });
    expect(p.l.state?.bestX).toBeCloseTo(0.17, 12);
  });

  it('a probe below that finishes as much within EPS becomes the best, and the next probe is lower still', () => {
    const p = new Pipe(settledOn(20));
    for (let i = 0; i < 3; i++) p.measure(18);
    // Cap 18: x = 0.1764 = 0.98 × 0.18: the best; next below max(1, min(17, round(16.07))) = 16.
    expect(p.measure(17.64)).toBe(16);
    expect(p.l.state).toMatchObject({ best: 18, settled: true });
    expect(p.l.state?.bestX).toBeCloseTo(0.1764, 12);
  });

  it('a probe below that finishes less goes back to the best, measured there afresh', () => {
    const p = new Pipe(settledOn(20));
    for (let i = 0; i < 3; i++) p.measure(18);
    // Cap 18: x = 0.176 < 0.1764: back to 20.
    expect(p.measure(17.6)).toBe(20);
    expect(p.l.state).toMatchObject({ best: 20, rest: 0 });
    // Its first hold there replaces the throughput (0.16, not the mean with 0.18).
    expect(p.measure(16)).toBe(20);
    expect(p.l.state?.bestX).toBeCloseTo(0.16, 12);
  });

  it('a remembered limit under 8 is on trial: after its first measurement it probes above, doubling; two gains of half the proportional one, to twice it, let it go; a gain short of that ends the trial', () => {
    // (Held as before, a remembered 1 took three measurements before its first probe, each of 30 preparations.)
    const free = new Pipe(new PrepareLimit(2));
    expect(free.l.state).toMatchObject({ trial: true });
    expect(free.measure(1.8)).toBe(4);
    expect(free.measure(3.6)).toBe(8);
    expect(free.measure(7.2)).toBe(Infinity);
    expect(free.l.state).toBeNull();
    // At 2: 22 % more than at 1, under the trial's half-proportional 50 %: the trial ends; 2, being
    // 5 % more, is the best, and the next probe the usual step. (Its first measurement is its own,
    // not averaged with the nothing before it: it read half.)
    const knee = new Pipe(new PrepareLimit(1));
    expect(knee.measure(0.9)).toBe(2);
    expect(knee.l.state?.bestX).toBeCloseTo(0.009, 12);
    expect(knee.measure(1.1)).toBe(3);
    expect(knee.l.state).toMatchObject({ best: 2, trial: false, ups: 0 });
    // From 8 up its probes above are PROBE × a step, not doubled: max(9, round(8.96)) = 9.
    const eight = new Pipe(new PrepareLimit(8));
    expect(eight.l.state).toMatchObject({ trial: false });
    expect(eight.measure(7.2)).toBe(9);
  });

  it('a probe above moves up where it finishes EPS_UP (5 %) more', () => {
    // Best 20 at 0.16; cap 22: x = 0.168 = 1.05 × 0.16: the best; next above max(23, round(24.64)) = 25.
    const p = probingAbove(16);
    expect(p.measure(16.8)).toBe(25);
    expect(p.l.state).toMatchObject({ best: 22, ups: 0 });
    expect(p.l.state?.bestX).toBeCloseTo(0.168, 12);
  });

  it('a probe above that finishes less than EPS_UP more goes back to the best', () => {
    const p = probingAbove(16);
    // 0.167 < 0.168.
    expect(p.measure(16.7)).toBe(20);
    expect(p.l.state).toMatchObject({ best: 20, ups: 0 });
  });

  it('a probe below is judged against every cap measured above it, not only the best', () => {
    // Best 20 at 0.16; cap 22: x = 0.1632, 2 % more (under EPS_UP): back to 20, held three times, then below at 18.
    const p = probingAbove(16);
    expect(p.measure(16.32)).toBe(20);
    for (let i = 0; i < 2; i++) expect(p.measure(16)).toBe(20);
    expect(p.measure(16)).toBe(18);
    // Cap 18: x = 0.157, as much as 20 (over 0.98 × 0.16 = 0.1568) but less than 22 (under 0.98 × 0.1632 = 0.15994): back to 20.
    expect(p.measure(15.7)).toBe(20);
    expect(p.l.state).toMatchObject({ best: 20, side: -1 });
  });

  it('held, the best stays as much as every cap measured above it: less than one by more than EPS (and NOISE_Z standard errors), it moves up to the least cap above that is', () => {
    // Best 20 at 0.16; cap 22: x = 0.167, under 1.05 × 0.16: back to 20. Held again at 0.16:
    // under 0.98 × 0.167 = 0.16366: up to 22, the best at its 0.167, held there next.
    const p = probingAbove(16);
    expect(p.measure(16.7)).toBe(20);
    expect(p.measure(16)).toBe(22);
    expect(p.l.state).toMatchObject({ best: 22, rest: 0, ups: 0 });
    expect(p.l.state?.bestX).toBeCloseTo(0.167, 12);
    expect(p.measure(16.7)).toBe(22);
    expect(p.l.state?.rest).toBe(1);
  });

  it('a hold that finishes less than the best by more than EPS (the work or the machine changed) forgets the caps above', () => {
    // As above, but held at 0.12 < 0.98 × 0.16: 22's 0.167 is forgotten, not a reason to move up.
    const p = probingAbove(16);
    expect(p.measure(16.7)).toBe(20);
    expect(p.measure(12)).toBe(20);
    expect(p.l.state?.measured.map((o) => o.cap)).toEqual([20]);
    expect(p.l.state?.bestX).toBeCloseTo(0.12, 12);
  });

  it('lets go after two moves up in a row, to where it took over, each with GAIN of the proportional gain', () => {
    // Best 20 at 0.18. Cap 22: proportional would be × 1.1; 1 + 2/3 × 0.1 = 1.0667: x = 0.192 =
    // 1.0667 × 0.18 counts (one up). 22 is past where it took over (20), but one up is not two.
    const p = probingAbove(18);
    expect(p.measure(19.2)).toBe(25);
    expect(p.l.state).toMatchObject({ best: 22, ups: 1 });
    // Cap 25: 1 + 2/3 × (25/22 − 1) = 1.0909: x = 0.21 ≥ 1.0909 × 0.192 = 0.2095: two ups: no contention.
    expect(p.measure(21)).toBe(Infinity);
    expect(p.l.state).toBeNull();
  });

  it('a move up short of GAIN of the proportional gain does not count toward letting go', () => {
    const p = probingAbove(18);
    expect(p.measure(19.2)).toBe(25);
    // Cap 25: x = 0.205 ≥ 1.05 × 0.192 = 0.2016 but < 0.2095: moves up, not counted; max(26, round(28)) = 28.
    expect(p.measure(20.5)).toBe(28);
    expect(p.l.state).toMatchObject({ best: 25, ups: 0 });
  });

  it('moves up in a row below where it took over do not let go; reaching it does', () => {
    // Took over with 8 preparing at a cap of 1; throughput proportional to the cap (no contention).
    const l = filled({ concurrency: 6 });
    expect(overdueRun(l, { preparing: 8, age: 800 })).toEqual([Infinity, Infinity, 1]);
    const p = new Pipe(l);
    expect(p.measure(1)).toBe(2);
    // Each probe above: max(c + 1, round(1.12 c)); x = c ÷ 100.
    const caps = [2, 3, 4, 5, 6, 7, 8].map((c) => p.measure(c));
    expect(caps).toEqual([3, 4, 5, 6, 7, 8, Infinity]);
  });

  it('the moves up must be in a row: one short of GAIN in between starts the count again', () => {
    const l = filled({ concurrency: 6 });
    expect(overdueRun(l, { preparing: 8, age: 800 })).toEqual([Infinity, Infinity, 1]);
    const p = new Pipe(l);
    expect(p.measure(1)).toBe(2);
    for (const c of [2, 3, 4, 5, 6]) p.measure(c);
    expect(p.l.cap).toBe(7);
    // Cap 7: x = 0.065 ≥ 1.05 × 0.06 but < (1 + 2/3 × 1/6) × 0.06 = 0.0667: not counted.
    expect(p.measure(6.5)).toBe(8);
    expect(p.l.state?.ups).toBe(0);
    // Cap 8 (where it took over): x = 0.08 ≥ (1 + 2/3 × 1/7) × 0.065 = 0.0712: one up, not two: on to 9.
    expect(p.measure(8)).toBe(9);
    // Cap 9: x = 0.09 ≥ (1 + 2/3 × 1/8) × 0.08 = 0.0867: two: let go.
    expect(p.measure(9)).toBe(Infinity);
  });
});

describe('PrepareLimit: over an idle pipeline', () => {
  it('climbing down, it stays on the step it reached; the measurement starts again in the next busy period', () => {
    const p = new Pipe(engaged());
    p.see(10);
    // (The first measurement after taking over: FIRST_FLUSH × 10 completions turn it over.)
    p.done += 20;
    p.see(10);
    expect(p.l.state?.turnedAt).toBe(p.now);
    expect(p.idle()).toBe(10);
    expect(p.l.state).toMatchObject({ cap: 10, settled: false, engagedAt: 80 });
    expect(p.l.state?.from).toBeNaN();
    expect(p.l.state?.turnedAt).toBeNaN();
    // Busy again with more preparing than the cap: no measurement started.
    p.see(11);
    expect(p.l.state?.from).toBeNaN();
    expect(p.measure(10, 200)).toBe(7);
  });

  it('settled, it goes back to the best, which becomes where it took over (moves up from there let it go)', () => {
    const p = new Pipe(engaged());
    p.measure(10, 200);
    p.measure(4.9, 100);
    expect(p.measure(4, 84)).toBe(5);
    // Cap 5: x = 0.048 < 0.04802, less than the best too: settled on 7, probing 8.
    expect(p.measure(4.8)).toBe(8);
    // Probing 8 above the best 7, within it, when the pipeline empties.
    p.see(8);
    expect(p.idle()).toBe(7);
    expect(p.l.state).toMatchObject({ cap: 7, best: 7, engagedAt: 7, settled: true, rest: 0, ups: 0 });
    // Three holds at 7 (x = 0.049), then above: 8 (side −1 last: now +1).
    for (let i = 0; i < 2; i++) expect(p.measure(4.9)).toBe(7);
    expect(p.measure(4.9)).toBe(8);
    // Cap 8: x = 0.056 ≥ (1 + 2/3 × 1/7) × 0.049 = 0.0537: up to 9. Cap 9: x = 0.063 ≥
    // (1 + 2/3 × 1/8) × 0.056 = 0.0607: two, and 9 ≥ 7: let go.
    expect(p.measure(5.6)).toBe(9);
    expect(p.measure(6.3)).toBe(Infinity);
  });

  it('settled, its holds at the best start again: REST + 1 more before the next probe', () => {
    const p = new Pipe(settledOn(20));
    p.measure(18);
    p.measure(18);
    expect(p.l.state?.rest).toBe(2);
    p.see(20);
    p.idle();
    expect(p.l.state?.rest).toBe(0);
    expect(p.measure(18)).toBe(20);
    expect(p.measure(18)).toBe(20);
    expect(p.measure(18)).toBe(18);
  });

  it('a cap the pipeline never came within is kept as it is (nothing was measured at it)', () => {
    const p = new Pipe(settledOn(20));
    for (let i = 0; i < 3; i++) p.measure(18);
    // Probing 18 while 20 still prepare.
    expect(p.l.cap).toBe(18);
    const before = structuredClone(p.l.state);
    expect(p.idle()).toBe(18);
    expect(p.l.state).toEqual(before);
  });

  it('is not idle while anything is queued, preparing, waiting or on a device', () => {
    const p = new Pipe(settledOn(20));
    p.see(20);
    const from = p.l.state?.from;
    expect(from).toBe(p.now);
    p.now += 10;
    p.see(1, 0.5, { backlog: 1 });
    p.see(1, 0.5, { backlog: 0, waiting: 1 });
    p.see(0, 0.5, { backlog: 0, waiting: 1, onDevice: 1 });
    expect(p.l.state?.from).toBe(from);
  });

  it('without a cap, the next busy period has its own floor', () => {
    // Overdue at 2000 with the floor at 100; idle; the next busy period (from 3000) fills at 3300
    // with the latency at 150: its floor is 150, and 160 < 1.3 × 150 = 195: no take-over.
    const l = filled();
    expect(overdueRun(l, {}, [2000])).toEqual([Infinity]);
    expect(idle(l, 2010)).toBe(Infinity);
    expect(observe(l, { now: 3300, latency: 150, age: 50, busySince: 3000 })).toBe(Infinity);
    expect(overdueRun(l, { busySince: 3000 }, [3400, 3480, 3600])).toEqual([Infinity, Infinity, Infinity]);
  });

  it('without a cap, the next busy period fills anew: two latencies into it', () => {
    // The next busy period from 3000: at 3050 (50 ms in) a latency of 100 is not yet a floor; at
    // 3100…3300 (< 2 × 160 in) the pipeline has not filled: no take-over on the latency line,
    // and ages 380 are under AGES_ALONE × 100 = 390.
    const l = filled();
    expect(overdueRun(l, {}, [2000])).toEqual([Infinity]);
    expect(idle(l, 2010)).toBe(Infinity);
    expect(observe(l, { now: 3050, latency: 100, age: 50, busySince: 3000 })).toBe(Infinity);
    expect(overdueRun(l, { busySince: 3000, age: 380 }, [3100, 3180, 3300])).toEqual([Infinity, Infinity, Infinity]);
  });

  it('the next busy period holds the ages against the lowest latency of the last one until it measures its own (the knee belongs to the machine: it outlives an idle moment)', () => {
    // Nothing measured yet in the busy period from 3000 (no completions since it began): the ages
    // (400 > 3.9 × 100) are held against the floor of the last one; overdue from 3100, taken over
    // half a latency later, at 3180 (cap ⌊80 × 100 ÷ 800⌋ = 10). With a new kind crawling past
    // the knee, nothing finished for 600 s and nothing took over (random scenario 20 of
    // `bench --random 200`, seed 3: 1.00 → 1.32 of unpaced's speed).
    const l = filled();
    expect(idle(l, 2010)).toBe(Infinity);
    expect(overdueRun(l, { busySince: 3000, measured: 0 }, [3100, 3179, 3180])).toEqual([Infinity, Infinity, 10]);
  });
});

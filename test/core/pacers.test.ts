import { describe, expect, it } from 'vitest';
import {
  Engine,
  PACERS,
  PACER_NAMES,
  createBurstPacer,
  createPacer,
  createStokerPacer,
  createUnpacedPacer,
  createWindowPacer,
  numberOption,
  type Command,
  type ItemView,
  type JobSpec,
} from '../../src/core/index.js';
import { expectStokerError, ofType, prepared, snapshot } from './helpers.js';

const job = (id: string, partitions: number, extra: Partial<JobSpec> = {}): JobSpec => ({ id, kind: 'k', partitions, ...extra });

/** Tracks the items an engine dispatched so tests can send events about them. */
class Driver {
  readonly items: ItemView[] = [];
  constructor(readonly e: Engine) {}
  apply(event: Parameters<Engine['apply']>[0]): Command[] {
    const out = this.e.apply(event);
    for (const c of ofType(out, 'startPrepare')) this.items.push(c.item);
    return out;
  }
  prepare(time: number, i: number, latencyMs?: number): Command[] {
    const it = this.items[i]!;
    return this.apply({ type: 'prepared', time, item: it.id, attempt: it.attempt, ...(latencyMs === undefined ? {} : { latencyMs }) });
  }
  done(time: number, i: number, busyMs?: number): Command[] {
    const it = this.items[i]!;
    return this.apply({ type: 'deviceDone', time, item: it.id, attempt: it.attempt, ...(busyMs === undefined ? {} : { busyMs }) });
  }
}

describe('createPacer and the registry', () => {
  it('lists the built-in pacers', () => {
    expect(PACER_NAMES).toEqual(['stoker', 'classic', 'unpaced', 'window', 'burst', 'interval-pi', 'gradient', 'vegas', 'gated-interval']);
    for (const name of PACER_NAMES) expect(PACERS[name]!.describe.length).toBeGreaterThan(10);
  });

  it.each(PACER_NAMES)('createPacer(%j) returns a working pacer with that name', (name) => {
    const p = createPacer(name);
    expect(p.name).toBe(name);
    const s = snapshot({ backlog: 1 });
    p.observe(s);
    const at = p.nextDispatchAt(s);
    expect(typeof at).toBe('number');
    expect(Number.isNaN(at)).toBe(false);
    const st = p.state();
    expect(['bootstrap', 'steady', 'idle', 'blocked', 'hold']).toContain(st.mode);
    expect(typeof st.terms).toBe('object');
  });

  it.each(PACER_NAMES)('%s drives an engine through a job to completion', (name) => {
    // Every built-in pacer, given ticks at the times it asks for, gets all the work done.
    const d = new Driver(new Engine({ devices: [{ workers: 2 }], pacer: createPacer(name, { targetWaiting: 2 }) }));
    let wake = Infinity;
    const finished: string[] = [];
    const handle = (out: Command[]) => {
      for (const c of out) {
        if (c.type === 'wakeAt') wake = c.time;
        if (c.type === 'finishJob') finished.push(c.state);
      }
    };
    handle(d.apply({ type: 'submit', time: 0, job: job('a', 12) }));
    let t = 0;
    for (let step = 0; step < 500 && finished.length === 0; step++) {
      t = Math.max(t + 100, Number.isFinite(wake) ? wake : 0);
      handle(d.apply({ type: 'tick', time: t }));
      for (const it of [...d.items]) {
        if (it.state === 'preparing') handle(d.apply({ type: 'prepared', time: t, item: it.id, attempt: it.attempt }));
        else if (it.state === 'on-device') handle(d.apply({ type: 'deviceDone', time: t, item: it.id, attempt: it.attempt }));
      }
    }
    expect(finished).toEqual(['done']);
    expect(d.e.snapshot.deviceCompletions).toBe(12);
  });

  it('an unknown name throws E_UNKNOWN_PACER listing every name', () => {
    const err = expectStokerError(() => createPacer('turbo'), 'E_UNKNOWN_PACER', /"turbo"/);
    for (const name of PACER_NAMES) expect(err.message).toContain(name);
  });

  it.each(['toString', 'constructor', '__proto__', 'hasOwnProperty'])('an inherited property name (%s) is not a pacer', (name) => {
    expectStokerError(() => createPacer(name), 'E_UNKNOWN_PACER');
  });

  it.each(['stoker', 'classic', 'burst', 'interval-pi', 'gated-interval'])('%s rejects a bad targetWaiting with E_INVALID_OPTION', (name) => {
    expectStokerError(() => createPacer(name, { targetWaiting: -1 }), 'E_INVALID_OPTION', /targetWaiting.*-1/);
    expectStokerError(() => createPacer(name, { targetWaiting: 'x' as unknown as number }), 'E_INVALID_OPTION', /targetWaiting.*"x"/);
    expectStokerError(() => createPacer(name, { targetWaiting: NaN }), 'E_INVALID_OPTION', /targetWaiting/);
  });

  it('window rejects a window below 1; stoker rejects bad extras; PI rejects a negative gain', () => {
    expectStokerError(() => createPacer('window', { window: 0 }), 'E_INVALID_OPTION', /window.*≥ 1/);
    expectStokerError(() => createPacer('window', { window: '4' }), 'E_INVALID_OPTION', /window/);
    expectStokerError(() => createStokerPacer({ burst: 0.5 }), 'E_INVALID_OPTION', /burst/);
    expectStokerError(() => createStokerPacer({ bootstrapItems: 0 }), 'E_INVALID_OPTION', /bootstrapItems/);
    expectStokerError(() => createStokerPacer({ priorServiceMs: -5 }), 'E_INVALID_OPTION', /priorServiceMs/);
    expectStokerError(() => createPacer('classic', { kp: -0.1 }), 'E_INVALID_OPTION', /kp/);
  });

  it('numberOption returns the fallback when absent, the value when valid', () => {
    expect(numberOption<{ x?: number }>({}, 'x', 7)).toBe(7);
    expect(numberOption({ x: 0 }, 'x', 7)).toBe(0);
    expect(numberOption({ x: 2 }, 'x', 7, 2)).toBe(2);
    expectStokerError(() => numberOption({ x: 1 }, 'x', 7, 2), 'E_INVALID_OPTION', /x must be a number ≥ 2 \(got 1\)/);
  });
});

describe('baseline pacers', () => {
  it('unpaced always allows now', () => {
    const p = createUnpacedPacer();
    expect(p.nextDispatchAt(snapshot({ now: 123, preparing: 1000 }))).toBe(123);
    expect(p.state()).toEqual({ mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} });
  });

  it('window counts preparing + waiting + on-device against its window', () => {
    const p = createWindowPacer({ window: 3 });
    expect(p.nextDispatchAt(snapshot({ now: 5, preparing: 1, waiting: 1 }))).toBe(5);
    expect(p.nextDispatchAt(snapshot({ now: 5, preparing: 1, waiting: 1, onDevice: 1 }))).toBe(Infinity);
    expect(p.nextDispatchAt(snapshot({ now: 5, onDevice: 3 }))).toBe(Infinity);
    expect(p.nextDispatchAt(snapshot({ now: 5, backlog: 100 }))).toBe(5);
    expect(p.state().terms).toEqual({ window: 3 });
    expect(createWindowPacer().state().terms).toEqual({ window: 32 });
  });

  it('window respects its window inside the engine over a whole run', () => {
    const d = new Driver(new Engine({ devices: [{ workers: 2 }], pacer: createWindowPacer({ window: 3 }) }));
    let t = 0;
    d.apply({ type: 'submit', time: t, job: job('a', 20) });
    const inFlight = () => d.e.snapshot.preparing + d.e.snapshot.waiting + d.e.snapshot.onDevice;
    let peak = inFlight();
    for (let step = 0; step < 200 && d.e.activeJobs > 0; step++) {
      t += 10;
      const it = d.items.find((i) => i.state === 'preparing' || i.state === 'on-device')!;
      if (it.state === 'preparing') d.apply({ type: 'prepared', time: t, item: it.id, attempt: it.attempt });
      else d.apply({ type: 'deviceDone', time: t, item: it.id, attempt: it.attempt });
      peak = Math.max(peak, inFlight());
      expect(inFlight()).toBeLessThanOrEqual(3);
    }
    expect(peak).toBe(3);
    expect(d.e.activeJobs).toBe(0);
  });

  it('burst: target at start, then target − waiting on each completion', () => {
    const d = new Driver(new Engine({ devices: [{ workers: 1 }], pacer: createBurstPacer({ targetWaiting: 3 }) }));
    let out = d.apply({ type: 'submit', time: 0, job: job('a', 20) });
    expect(prepared(out)).toEqual(['a:0', 'a:1', 'a:2']); // empty pipeline: target at once
    expect(d.e.pacer.state().terms['allowance']).toBe(0);
    d.prepare(1, 0); // on device
    d.prepare(2, 1); // waiting
    out = d.prepare(3, 2); // waiting: 2
    expect(prepared(out)).toEqual([]); // no completion yet: nothing
    expect(d.e.snapshot.waiting).toBe(2);
    out = d.done(4, 0); // a:1 starts; waiting 1 → 3 − 1 = 2
    expect(prepared(out)).toEqual(['a:3', 'a:4']);
    d.prepare(5, 3);
    d.prepare(6, 4);
    expect(d.e.snapshot.waiting).toBe(3);
    out = d.done(7, 1); // a:2 starts; waiting 2 → 1 more
    expect(prepared(out)).toEqual(['a:5']);
    d.prepare(8, 5);
    d.prepare(8, 3); // stale (already waiting): ignored
    expect(d.e.snapshot.waiting).toBe(3);
    out = d.done(9, 2); // a:3 starts; waiting 2 → 1 more
    expect(prepared(out)).toEqual(['a:6']);
  });

  it('burst: a completion with the queue at or above target dispatches nothing', () => {
    const p = createBurstPacer({ targetWaiting: 2 });
    p.observe(snapshot({ now: 0, onDevice: 1, waiting: 5, deviceCompletions: 1, backlog: 10 }));
    expect(p.nextDispatchAt(snapshot({ now: 0 }))).toBe(Infinity);
    expect(p.state().terms['allowance']).toBe(0);
  });
});

/** Ticks the engine at each wake time it asks for, up to `until`; returns the dispatch times. */
function runTicks(d: Driver, until: number, firstWake: number): number[] {
  const times: number[] = [];
  let wake = firstWake;
  while (wake <= until) {
    const out = d.apply({ type: 'tick', time: wake });
    for (let i = 0; i < ofType(out, 'startPrepare').length; i++) times.push(wake);
    const w = ofType(out, 'wakeAt').at(-1);
    if (!w) break;
    wake = w.time;
  }
  return times;
}

describe('stoker pacer', () => {
  it('bootstrap: workers + target items, one per worker at a time, groups bootstrapSpacingMs apart; then waits until measured', () => {
    const d = new Driver(new Engine({ devices: [{ workers: 2 }], pacer: createStokerPacer({ targetWaiting: 3, bootstrapSpacingMs: 100 }) }));
    const out = d.apply({ type: 'submit', time: 1000, job: job('a', 20) });
    expect(prepared(out)).toEqual(['a:0', 'a:1']); // a group of one item per worker
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: 1100 }]);
    expect(d.e.pacer.state()).toMatchObject({ mode: 'bootstrap', ratePerSec: null, intervalMs: null });
    // An early tick dispatches nothing; the engine asks for the same timer again.
    expect(d.apply({ type: 'tick', time: 1050 })).toEqual([{ type: 'wakeAt', time: 1100 }]);
    const times = runTicks(d, 5000, 1100);
    expect(times).toEqual([1100, 1100, 1200]); // 5 = 2 workers + 3 target in all
    expect(d.items).toHaveLength(5);
    expect(d.apply({ type: 'tick', time: 6000 })).toEqual([]);
    expect(d.e.pacer.state().mode).toBe('bootstrap');
    expect(d.e.pacer.nextDispatchAt(d.e.snapshot)).toBe(Infinity);

    // Preparations alone do not measure the devices.
    d.prepare(6100, 0);
    d.prepare(6100, 1);
    d.prepare(6100, 2);
    expect(d.e.pacer.state().ratePerSec).toBeNull();
    expect(d.e.snapshot.dispatched).toBe(5);

    // The first device completion measures 500 ms per item: 2 workers → 4 items/s.
    d.done(6600, 0, 500);
    const st = d.e.pacer.state();
    expect(st.ratePerSec).toBeCloseTo(4, 10);
    expect(st.mode).toBe('steady');
    expect(d.e.snapshot.dispatched).toBeGreaterThan(5);
  });

  it('bootstrap with one worker: one item every bootstrapSpacingMs', () => {
    const d = new Driver(new Engine({ devices: [{ workers: 1 }], pacer: createStokerPacer({ targetWaiting: 2, bootstrapSpacingMs: 250 }) }));
    const out = d.apply({ type: 'submit', time: 0, job: job('a', 20) });
    expect(prepared(out)).toEqual(['a:0']);
    expect(runTicks(d, 10_000, ofType(out, 'wakeAt')[0]!.time)).toEqual([250, 500]);
    expect(d.items).toHaveLength(3);
  });

  it('bootstrapItems overrides the number of bootstrap items', () => {
    const d = new Driver(new Engine({ devices: [{ workers: 1 }], pacer: createStokerPacer({ bootstrapItems: 2, bootstrapSpacingMs: 10 }) }));
    const out = d.apply({ type: 'submit', time: 0, job: job('a', 20) });
    expect(runTicks(d, 1000, ofType(out, 'wakeAt')[0]!.time)).toEqual([10]);
    expect(d.items).toHaveLength(2);
  });

  it('with priorServiceMs the rate is known at once: ratePerSec = workers × 1000 / priorServiceMs', () => {
    const p = createStokerPacer({ priorServiceMs: 500 });
    p.observe(snapshot({ now: 0, workers: 2, backlog: 10 }));
    expect(p.state().ratePerSec).toBeCloseTo(4, 10);
    expect(p.state().mode).toBe('steady');

    const multi = createStokerPacer({ priorServiceMs: 250 });
    multi.observe(
      snapshot({
        now: 0,
        workers: 3,
        backlog: 10,
        devices: [
          { workers: 2, busy: 0, completions: 0, busyMs: 0 },
          { workers: 1, busy: 0, completions: 0, busyMs: 0 },
        ],
      }),
    );
    expect(multi.state().ratePerSec).toBeCloseTo(12, 10);
  });

  it('with a prior it skips the bootstrap ramp and paces from the start', () => {
    const d = new Driver(new Engine({ devices: [{ workers: 2 }], pacer: createStokerPacer({ priorServiceMs: 1000, targetWaiting: 2 }) }));
    const out = d.apply({ type: 'submit', time: 0, job: job('a', 50) });
    // Starts with its single token (no stored-up burst after idle), then follows its rate.
    expect(prepared(out)).toEqual(['a:0']);
    const st = d.e.pacer.state();
    expect(st.mode).toBe('steady');
    expect(st.ratePerSec).toBeCloseTo(2, 10);
    expect(st.intervalMs).not.toBeNull();
    const wake = ofType(out, 'wakeAt')[0]!.time;
    expect(wake).toBeGreaterThan(0);
    expect(wake).toBeLessThan(1000);
  });

  it('the first measured service time replaces the prior (it anchored the estimate: a remembered 1000 ms came down halfway per sample, a faster device underfed meanwhile)', () => {
    const p = createStokerPacer({ priorServiceMs: 1000, serviceSmoothing: 0.5 });
    const dev = (completions: number, busyMs: number) => [{ workers: 1, busy: 1, completions, busyMs }];
    p.observe(snapshot({ now: 0, workers: 1, onDevice: 1, backlog: 5, devices: dev(0, 0) }));
    expect(p.state().ratePerSec).toBeCloseTo(1, 10);
    // One completion of 200 ms: the estimate is 200 ms.
    p.observe(snapshot({ now: 100, workers: 1, onDevice: 1, backlog: 5, devices: dev(1, 200), deviceCompletions: 1, deviceBusyMs: 200 }));
    expect(p.state().ratePerSec).toBeCloseTo(1000 / 200, 10);
    // Two more at 200 ms each: still 200 ms.
    p.observe(snapshot({ now: 200, workers: 1, onDevice: 1, backlog: 5, devices: dev(3, 600), deviceCompletions: 3, deviceBusyMs: 600 }));
    expect(p.state().ratePerSec).toBeCloseTo(1000 / 200, 10);
  });

  it('state() modes: idle, blocked, bootstrap, steady, hold', () => {
    const idle = createStokerPacer();
    idle.observe(snapshot({ backlog: 0 }));
    expect(idle.state().mode).toBe('idle');

    const boot = createStokerPacer();
    boot.observe(snapshot({ backlog: 3 }));
    expect(boot.state().mode).toBe('bootstrap');

    const blocked = createStokerPacer({ priorServiceMs: 100 });
    blocked.observe(snapshot({ backlog: 3, budgetBlocked: true }));
    expect(blocked.state().mode).toBe('blocked');

    const capped = createStokerPacer({ priorServiceMs: 100 });
    capped.observe(snapshot({ backlog: 3, preparing: 2, preparingSteps: 2, maxPreparing: 2 }));
    expect(capped.state().mode).toBe('blocked');

    const steady = createStokerPacer({ priorServiceMs: 100 });
    steady.observe(snapshot({ backlog: 3 }));
    expect(steady.state().mode).toBe('steady');
    expect(steady.state().intervalMs).toBeGreaterThan(0);

    // Far more inventory than needed: the pacer holds (rate 0) and asks for no timer.
    const hold = createStokerPacer({ priorServiceMs: 1000 });
    const s = snapshot({ backlog: 3, waiting: 1000 });
    hold.observe(s);
    expect(hold.state().mode).toBe('hold');
    expect(hold.state().intervalMs).toBeNull();
    hold.onDispatch(s); // spends the initial token
    expect(hold.nextDispatchAt(s)).toBe(Infinity);
  });

  it('never dispatches faster than its token bucket allows (burst cap)', () => {
    const p = createStokerPacer({ priorServiceMs: 10, burst: 2 });
    let s = snapshot({ now: 0, backlog: 100 });
    p.observe(s);
    // A long quiet spell with work queued fills at most `burst` tokens.
    s = snapshot({ now: 60_000, backlog: 100 });
    p.observe(s);
    let n = 0;
    while (p.nextDispatchAt(s) <= s.now && n < 10) {
      p.onDispatch(s);
      n++;
    }
    expect(n).toBe(2);
    expect(p.state().terms['credit']).toBeLessThan(1);
  });

  /**
   * No prior; the whole bootstrap (1 worker + 1 target = 2 items) goes to a job that is then
   * cancelled before any device completion. Returns the driver and the commands of the cancel.
   */
  function withdrawnBootstrap(): { d: Driver; cancel: Command[] } {
    const d = new Driver(new Engine({ devices: [{ workers: 1 }], pacer: createStokerPacer({ targetWaiting: 1, bootstrapSpacingMs: 10 }) }));
    const out = d.apply({ type: 'submit', time: 0, job: job('first', 10) });
    runTicks(d, 1000, ofType(out, 'wakeAt')[0]!.time);
    const cancel = d.apply({ type: 'cancel', time: 2000, jobId: 'first' });
    return { d, cancel };
  }

  it('withdrawn bootstrap scenario: the bootstrap went out, was withdrawn, and nothing was measured', () => {
    const { d, cancel } = withdrawnBootstrap();
    expect(d.items.map((i) => `${i.jobId}:${i.partition}`)).toEqual(['first:0', 'first:1']);
    expect(ofType(cancel, 'abort')).toHaveLength(2);
    expect(d.items.map((i) => i.state)).toEqual(['cancelled', 'cancelled']);
    expect(d.e.snapshot).toMatchObject({ preparing: 0, waiting: 0, onDevice: 0, backlog: 0, dispatched: 2, deviceCompletions: 0 });
    expect(d.e.pacer.state()).toMatchObject({ mode: 'idle', ratePerSec: null });
  });

  it('restarts after a bootstrap whose items were all withdrawn: a new job is still dispatched', () => {
    const { d } = withdrawnBootstrap();
    // Nothing measured, nothing in flight: a new job gets a fresh bootstrap of 2 items, spaced as before.
    const out = d.apply({ type: 'submit', time: 3000, job: job('second', 3) });
    expect(prepared(out)).toEqual(['second:0']);
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: 3010 }]);
    expect(d.e.pacer.state().mode).toBe('bootstrap');
    expect(runTicks(d, 100_000, 3010)).toEqual([3010]);
    expect(d.items.filter((i) => i.jobId === 'second').map((i) => i.partition)).toEqual([0, 1]);
    // Then it waits for a measurement again, as a first bootstrap does.
    for (const t of [10_000, 100_000]) expect(prepared(d.apply({ type: 'tick', time: t }))).toEqual([]);
    expect(d.e.snapshot).toMatchObject({ backlog: 1, preparing: 2, dispatched: 4 });
    expect(d.e.pacer.nextDispatchAt(d.e.snapshot)).toBe(Infinity);
  });

  it('does not restart its bootstrap while a bootstrap item is still in flight: a withdrawn one is replaced, no more', () => {
    const d = new Driver(new Engine({ devices: [{ workers: 1 }], pacer: createStokerPacer({ targetWaiting: 1, bootstrapSpacingMs: 10 }) }));
    d.apply({ type: 'submit', time: 0, job: job('a', 1) });
    d.apply({ type: 'submit', time: 0, job: job('b', 5) });
    expect(runTicks(d, 1000, 10)).toEqual([10]);
    expect(d.items.map((i) => `${i.jobId}:${i.partition}`)).toEqual(['a:0', 'b:0']);
    // Half of the bootstrap is withdrawn; b:0 is still preparing, so no new bootstrap starts: b:1 takes a:0's place.
    expect(prepared(d.apply({ type: 'cancel', time: 2000, jobId: 'a' }))).toEqual(['b:1']);
    for (const t of [3000, 50_000]) expect(prepared(d.apply({ type: 'tick', time: t }))).toEqual([]);
    const b0 = d.items[1]!;
    d.prepare(50_100, 1);
    expect(b0.state).toBe('on-device');
    expect(prepared(d.apply({ type: 'tick', time: 60_000 }))).toEqual([]);
    expect(d.e.snapshot).toMatchObject({ dispatched: 3, backlog: 3, onDevice: 1 });
    expect(d.e.pacer.nextDispatchAt(d.e.snapshot)).toBe(Infinity);
    // Its completion measures the device (100 ms per item, 1 worker: 10 items/s) and pacing starts.
    d.done(60_100, 1, 100);
    expect(d.e.pacer.state().mode).not.toBe('bootstrap');
    expect(d.e.pacer.state().ratePerSec).toBeCloseTo(10, 10);
    expect(d.e.snapshot.dispatched).toBeGreaterThan(2);
  });
});

describe('PI pacers', () => {
  it('classic bootstraps `target` items, each after a 3 s sleep, then waits for the first completion and dispatches at once', () => {
    const d = new Driver(new Engine({ devices: [{ workers: 2 }], pacer: createPacer('classic', { targetWaiting: 4 }) }));
    const out = d.apply({ type: 'submit', time: 0, job: job('a', 10) });
    // The dispatcher's first loop sleeps 3 s before it dispatches.
    expect(prepared(out)).toEqual([]);
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: 3000 }]);
    expect(runTicks(d, 20_000, 3000)).toEqual([3000, 6000, 9000, 12000]);
    expect(d.e.pacer.state()).toMatchObject({ mode: 'bootstrap', ratePerSec: null });
    expect(d.e.pacer.nextDispatchAt(d.e.snapshot)).toBe(Infinity);
    d.prepare(13_000, 0);
    // The first completion gives the rate (1.5 s per partition, 2 workers) and a dispatch at once.
    expect(prepared(d.done(20_000, 0, 1500))).toEqual(['a:4']);
    expect(d.e.pacer.state().ratePerSec).toBeCloseTo(2 / 1.5, 12);
  });

  it('classic, step by step: EMAs updated at the loop top only; the steady interval; a completion re-arms the sleep (hand-computed)', () => {
    const p = createPacer('classic', { targetWaiting: 1 });
    const at = (over: Parameters<typeof snapshot>[0]) => snapshot({ workers: 2, backlog: 5, ...over });
    p.observe(at({ now: 0 })); // loop top: ema_waiting 0, integral 0.001; bootstrap sleep 3 s
    expect(p.nextDispatchAt(at({ now: 0 }))).toBe(3000);
    p.observe(at({ now: 3000 }));
    expect(p.nextDispatchAt(at({ now: 3000 }))).toBe(3000);
    p.onDispatch(at({ now: 3000 })); // bootstrap spent, rate unknown: integral 0.001 + 1 × 3 s = 3.001
    expect(p.nextDispatchAt(at({ now: 3000 }))).toBe(Infinity);
    // The first completion: 1.2 s per partition; ema_waiting 0.15 × 2 = 0.3; integral += 0.7 × 7 s.
    p.observe(at({ now: 10_000, waiting: 2, deviceCompletions: 1, deviceBusyMs: 1200 }));
    expect(p.state().terms).toMatchObject({ waitingEma: 0.3 });
    expect(p.state().terms['integral']).toBeCloseTo(7.901, 12);
    expect(p.nextDispatchAt(at({ now: 10_000 }))).toBe(10_000);
    // Loop top after the dispatch: ema_waiting 0.555, integral 7.901445; interval
    // (1.2 s / 2) / (1 + 0.5 × 0.445 + 0.001 × 7.901445) = 487.6 ms → 487.
    p.onDispatch(at({ now: 10_000, waiting: 2, deviceCompletions: 1, deviceBusyMs: 1200 }));
    expect(p.state().terms['waitingEma']).toBeCloseTo(0.555, 12);
    expect(p.state().intervalMs).toBe(487);
    expect(p.nextDispatchAt(at({ now: 10_000 }))).toBe(10_487);
    // An event that is not a completion changes nothing (no update off the loop top).
    p.observe(at({ now: 10_100, waiting: 9, deviceCompletions: 1, deviceBusyMs: 1200 }));
    expect(p.state().terms['waitingEma']).toBeCloseTo(0.555, 12);
    // A completion during the sleep restarts the loop: ema_waiting 0.15 × 6 + 0.85 × 0.555 = 1.37175,
    // integral 7.901445 − 0.37175 × 0.2 = 7.827095; interval 600 / (1 − 0.185875 + 0.007827095) → 729,
    // slept again from the completion.
    p.observe(at({ now: 10_200, waiting: 6, deviceCompletions: 2, deviceBusyMs: 2400 }));
    expect(p.state().terms['waitingEma']).toBeCloseTo(1.37175, 12);
    expect(p.state().terms['integral']).toBeCloseTo(7.827095, 12);
    expect(p.state().intervalMs).toBe(729);
    expect(p.nextDispatchAt(at({ now: 10_200 }))).toBe(10_929);
    expect(p.state()).toMatchObject({ mode: 'steady', ratePerSec: 2 / 1.2 });
  });

  it('classic re-bootstraps once the pipeline drained: every dispatch completed and ema_waiting < 1 — integral reset, spacing max(2 s, EMA / N)', () => {
    const p = createPacer('classic', { targetWaiting: 1 });
    const at = (over: Parameters<typeof snapshot>[0]) => snapshot({ workers: 2, backlog: 5, ...over });
    p.observe(at({ now: 0 }));
    p.observe(at({ now: 3000 }));
    p.onDispatch(at({ now: 3000 }));
    p.observe(at({ now: 10_000, waiting: 2, deviceCompletions: 1, deviceBusyMs: 1200 }));
    p.onDispatch(at({ now: 10_000, waiting: 2, deviceCompletions: 1, deviceBusyMs: 1200 }));
    // Both dispatched partitions done, ema_waiting 0.15 × 1 + 0.85 × 0.555 = 0.62175 < 1.
    p.observe(at({ now: 10_200, waiting: 1, deviceCompletions: 2, deviceBusyMs: 2400 }));
    expect(p.state()).toMatchObject({ mode: 'bootstrap', intervalMs: 2000, terms: { integral: 0, bootstrapRemaining: 1 } });
    expect(p.nextDispatchAt(at({ now: 10_200 }))).toBe(12_200);
    // During bootstrap a completion dispatches at once.
    p.observe(at({ now: 11_000, waiting: 1, deviceCompletions: 3, deviceBusyMs: 3600 }));
    expect(p.nextDispatchAt(at({ now: 11_000 }))).toBe(11_000);
  });

  it('classic keeps its steady interval within [50 ms, 60 s]', () => {
    const steadyInterval = (busyMs: number, waiting: number) => {
      const p = createPacer('classic', { targetWaiting: 1 });
      const at = (over: Parameters<typeof snapshot>[0]) => snapshot({ workers: 1, backlog: 5, ...over });
      p.observe(at({ now: 0 }));
      p.observe(at({ now: 3000 }));
      p.onDispatch(at({ now: 3000 }));
      p.observe(at({ now: 4000, waiting, deviceCompletions: 1, deviceBusyMs: busyMs }));
      p.onDispatch(at({ now: 4000, waiting, deviceCompletions: 1, deviceBusyMs: busyMs }));
      return p.state().intervalMs;
    };
    expect(steadyInterval(1, 5)).toBe(50);
    expect(steadyInterval(1_000_000, 100)).toBe(60_000);
  });

  it('interval-pi feeds on the time between completions, idle gaps included', () => {
    const p = createPacer('interval-pi');
    p.observe(snapshot({ now: 0, onDevice: 1, backlog: 5, deviceCompletions: 1, deviceBusyMs: 100 }));
    expect(p.state().ratePerSec).toBeNull(); // the first completion only starts the clock
    p.observe(snapshot({ now: 5000, onDevice: 1, backlog: 5, deviceCompletions: 2, deviceBusyMs: 200 }));
    expect(p.state().ratePerSec).toBeCloseTo(0.2, 10); // one per 5 s, though each took 100 ms
  });

  it('gated-interval ignores completions with nothing waiting', () => {
    const p = createPacer('gated-interval');
    p.observe(snapshot({ now: 0, onDevice: 1, backlog: 5, deviceCompletions: 1 }));
    p.observe(snapshot({ now: 5000, onDevice: 1, backlog: 5, deviceCompletions: 2, waiting: 0 }));
    expect(p.state().ratePerSec).toBeNull();
    p.observe(snapshot({ now: 6000, onDevice: 1, backlog: 5, deviceCompletions: 3, waiting: 2 }));
    expect(p.state().ratePerSec).toBeCloseTo(1, 10);
  });
});

describe('gradient and vegas (Netflix concurrency-limits on the in-flight window)', () => {
  /** Dispatches `n` at `t` (the window lets them in), in flight counted from `inFlight`. */
  const dispatch = (p: ReturnType<typeof createPacer>, t: number, n: number, inFlight: number) => {
    for (let i = 0; i < n; i++) {
      const s = snapshot({ now: t, backlog: 100, preparing: inFlight + i + 1 });
      expect(p.nextDispatchAt(snapshot({ now: t, backlog: 100, preparing: inFlight + i }))).toBe(t);
      p.onDispatch(s);
    }
  };

  it('gradient: the window stops at its limit; a sample near the limit moves it by Gradient2 (hand-computed)', () => {
    const p = createPacer('gradient');
    p.observe(snapshot({ now: 0, backlog: 100 }));
    dispatch(p, 0, 20, 0);
    expect(p.nextDispatchAt(snapshot({ now: 0, backlog: 100, preparing: 20 }))).toBe(Infinity);
    // The first completion, 1 s after its dispatch with 1 in flight then: far below limit/2, no change.
    p.observe(snapshot({ now: 1000, backlog: 100, preparing: 19, deviceCompletions: 1 }));
    expect(p.state().terms['limit']).toBe(20);
    // The 20th dispatch had 20 in flight: with RTT = the long RTT the gradient is min(1, 1.5) = 1,
    // the limit 20 × 1 + 4 = 24, smoothed: 0.8 × 20 + 0.2 × 24 = 20.8.
    const g = createPacer('gradient');
    g.observe(snapshot({ now: 0, backlog: 100 }));
    g.onDispatch(snapshot({ now: 0, backlog: 100, preparing: 20 }));
    g.observe(snapshot({ now: 1000, backlog: 100, preparing: 19, deviceCompletions: 1 }));
    expect(g.state().terms['limit']).toBeCloseTo(20.8, 12);
  });

  it('vegas: the first sample is the no-load RTT; twice it, with a queue of ⌈20 × ½⌉ = 10 > 6·log10(20), the limit drops by log10(20) = 1 (hand-computed)', () => {
    const p = createPacer('vegas');
    p.observe(snapshot({ now: 0, backlog: 100 }));
    p.onDispatch(snapshot({ now: 0, backlog: 100, preparing: 20 }));
    p.onDispatch(snapshot({ now: 0, backlog: 100, preparing: 20 }));
    p.observe(snapshot({ now: 1000, backlog: 100, preparing: 19, deviceCompletions: 1 }));
    expect(p.state().terms).toMatchObject({ limit: 20, rttNoLoadMs: 1000 });
    p.observe(snapshot({ now: 2000, backlog: 100, preparing: 18, deviceCompletions: 2 }));
    expect(p.state().terms['limit']).toBe(19);
  });
});

describe('stoker pacer: service-time estimate', () => {
  const dev = (completions: number, busyMs: number, busy: number) => [{ workers: 2, busy, completions, busyMs }];

  it('believes fast samples from a starved device until it has seen the device saturated (a slow warm-up sample must not stick)', () => {
    const p = createPacer('stoker', { targetWaiting: 2 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: dev(0, 0, 0) }));
    // First completion: 90 ms (warm-up), then fast 40 ms samples with one worker idle.
    p.observe(snapshot({ now: 100, backlog: 10, devices: dev(1, 90, 0) }));
    let busy = 90;
    for (let i = 2; i <= 12; i++) {
      busy += 40;
      p.observe(snapshot({ now: 100 + i * 50, backlog: 10, devices: dev(i, busy, 1) }));
    }
    // 2 workers ÷ ~40 ms: about 50 items/s (not the 22/s the warm-up sample implied).
    expect(p.state().ratePerSec).toBeGreaterThan(45);
  });

  it('once the device was seen saturated, fast samples from a starved device barely move the estimate', () => {
    const p = createPacer('stoker', { targetWaiting: 2 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: dev(0, 0, 2) }));
    let busy = 0;
    // Saturated: 60 ms per item with both workers busy.
    for (let i = 1; i <= 10; i++) {
      busy += 60;
      p.observe(snapshot({ now: i * 30, backlog: 10, devices: dev(i, busy, 2) }));
    }
    expect(p.state().ratePerSec).toBeCloseTo(2000 / 60, 1);
    // Starved: 40 ms per item with one worker idle (no contention).
    for (let i = 11; i <= 20; i++) {
      busy += 40;
      p.observe(snapshot({ now: i * 30, backlog: 10, devices: dev(i, busy, 1) }));
    }
    const rate = p.state().ratePerSec as number;
    expect(rate).toBeGreaterThan(2000 / 60);
    expect(rate).toBeLessThan(1.1 * (2000 / 60));
  });
});

describe('stoker pacer: kinds on the device', () => {
  const kindCounters = (name: string, completions: number, busyMs: number, inFlight = 0) => ({ name, devices: [0], preparing: inFlight, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions: [completions], busyMs: [busyMs] });

  it('estimates each kind’s service time on its own: blocks of heavy and light items do not drag one estimate between them', () => {
    const p = createPacer('stoker', { targetWaiting: 2 });
    let heavy = 0;
    let light = 0;
    let now = 0;
    // Saturated device (both workers busy); blocks of 10 heavy (400 ms) then 10 light (100 ms) items.
    for (let block = 0; block < 6; block++) {
      for (let i = 0; i < 10; i++) {
        now += 100;
        if (block % 2 === 0) heavy++;
        else light++;
        const kinds = [kindCounters('heavy', heavy, heavy * 400), kindCounters('light', light, light * 100)];
        p.observe(snapshot({ now, backlog: 10, nextKind: block % 2, devices: [{ workers: 2, busy: 2, completions: heavy + light, busyMs: heavy * 400 + light * 100 }], kinds }));
      }
    }
    expect(p.state().kinds).toEqual([
      { name: 'heavy', estimatedPerSec: 5 },
      { name: 'light', estimatedPerSec: 20 },
    ]);
    // The plan's rate is the next kind's; the capacity it states is of the mix completed, between the two kinds' (exactly: stoker-estimates.test.ts).
    expect(p.state().terms['planRatePerSec']).toBe(20);
    expect(p.state().ratePerSec).toBeGreaterThan(5);
    expect(p.state().ratePerSec).toBeLessThan(20);
  });

  it('counts the items of other kinds in flight by their device time: light items in preparation fill less of the plan for heavy ones', () => {
    // Plan for heavy items (400 ms each, 2 workers: 5/s) over a 10 s latency: about 54 in flight.
    const rateWith = (inFlight: 'heavy' | 'light') => {
      const p = createPacer('stoker', { targetWaiting: 2 });
      const kinds = [kindCounters('heavy', 1, 400, inFlight === 'heavy' ? 100 : 0), kindCounters('light', 1, 100, inFlight === 'light' ? 100 : 0)];
      const s = { backlog: 50, preparing: 100, nextKind: 0, prepareCompletions: 1, prepareLatencyMsTotal: 10_000, prepareLatencySqTotal: 1e8, devices: [{ workers: 2, busy: 2, completions: 2, busyMs: 500 }], kinds };
      p.observe(snapshot({ now: 0, ...s, devices: [{ workers: 2, busy: 2, completions: 0, busyMs: 0 }], kinds: kinds.map((k) => ({ ...k, completions: [0], busyMs: [0] })) }));
      p.observe(snapshot({ now: 1000, ...s }));
      return p.state().intervalMs;
    };
    // 100 heavy items overfill it: no dispatch. 100 light ones are worth 25 heavy: dispatch goes on.
    expect(rateWith('heavy')).toBeNull();
    expect(rateWith('light')).toBeGreaterThan(0);
  });

  it('never holds a kind that only an unmeasured device runs: it borrows what was measured elsewhere', () => {
    const e = new Engine({ devices: [{ workers: 1, kinds: ['a'] }, { workers: 1, kinds: ['b'] }], pacer: createStokerPacer({ targetWaiting: 1 }) });
    const d = new Driver(e);
    d.apply({ type: 'submit', time: 0, job: job('a1', 1, { kind: 'a' }) });
    d.prepare(10, 0);
    d.done(110, 0, 100);
    // Kind b: only device 1 runs it, and it has measured nothing. Its partitions are dispatched
    // on the engine's timer alone (no completion comes to restart a held pacer).
    let out = d.apply({ type: 'submit', time: 1000, job: job('b1', 3, { kind: 'b' }) });
    const started = prepared(out);
    for (let i = 0; i < 20 && started.length < 3; i++) {
      const wake = ofType(out, 'wakeAt').at(-1)?.time;
      expect(wake, 'a timer while b1 waits').toBeLessThan(Infinity);
      out = d.apply({ type: 'tick', time: wake as number });
      started.push(...prepared(out));
    }
    expect(started).toEqual(['b1:0', 'b1:1', 'b1:2']);
  });
});

describe('stoker pacer: bootstrap', () => {
  it('replaces a bootstrap item withdrawn before anything was measured (counted as sent, a cancel beside a preparation that never ended held dispatch for good)', () => {
    const e = new Engine({ devices: [{ workers: 2 }], pacer: createStokerPacer({ targetWaiting: 2 }) });
    const d = new Driver(e);
    // 2 device items + a target of 2: 4 bootstrap items, two of a job whose preparations never end.
    let started = prepared(d.apply({ type: 'submit', time: 0, job: job('hung', 2) }));
    started.push(...prepared(d.apply({ type: 'submit', time: 1, job: job('b', 2) })));
    for (let t = 100; t <= 10_000; t += 100) started.push(...prepared(d.apply({ type: 'tick', time: t })));
    expect(started).toEqual(['hung:0', 'hung:1', 'b:0', 'b:1']);
    d.apply({ type: 'cancel', time: 10_100, jobId: 'b' });
    started = prepared(d.apply({ type: 'submit', time: 10_200, job: job('c', 3) }));
    for (let t = 10_300; t <= 20_000; t += 100) started.push(...prepared(d.apply({ type: 'tick', time: t })));
    expect(started).toEqual(['c:0', 'c:1']);
  });
});

describe('stoker pacer: the preparation limiter', () => {
  it('starts from a remembered limit: no more than that many preparations at once, the next one when one ends', () => {
    const e = new Engine({ devices: [{ workers: 2 }], pacer: createStokerPacer({ targetWaiting: 2, priorServiceMs: 100, priorLatencyMs: 1000, priorPrepareLimit: 3 }) });
    const d = new Driver(e);
    let out = d.apply({ type: 'submit', time: 0, job: job('a', 20) });
    const started = prepared(out);
    for (let t = 1; t < 500; t += 50) started.push(...prepared(d.apply({ type: 'tick', time: t })));
    expect(started).toEqual(['a:0', 'a:1', 'a:2']);
    expect(e.pacer.state().terms['prepareLimit']).toBe(3);
    out = d.prepare(600, 0);
    expect(prepared(out).length).toBeLessThanOrEqual(1);
    expect(e.snapshot.preparing).toBeLessThanOrEqual(3);
  });

  it('rejects a limit that is not a number', () => {
    expectStokerError(() => createStokerPacer({ priorPrepareLimit: 'ten' as unknown as number }), 'E_INVALID_OPTION', /priorPrepareLimit must be a number/);
  });
});

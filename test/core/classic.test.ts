/**
 * The classic pacer (the field engine's DispatchPacer), driven step by step with hand-made
 * snapshots and a target other than 1, so that the normalised error (target − ema_waiting) / target
 * is not the plain difference. Every expected number is worked out by hand in the comments.
 */
import { describe, expect, it } from 'vitest';
import { createClassicPacer, type PacerSnapshot } from '../../src/core/index.js';
import { snapshot } from './helpers.js';

const at = (over: Partial<PacerSnapshot>) => snapshot({ workers: 2, backlog: 5, ...over });

/** Target 2, 2 workers: through the bootstrap (2 dispatches 3 s apart) to the first completion at t 10 s. */
function toFirstCompletion() {
  const p = createClassicPacer({ targetWaiting: 2 });
  p.observe(at({ now: 0 })); // loop top: ema 0, integral (2 − 0)/2 × 0.001 = 0.001; sleep 3 s
  p.observe(at({ now: 3000 }));
  p.onDispatch(at({ now: 3000 })); // integral 0.001 + 1 × 3 s = 3.001; sleep 3 s
  p.observe(at({ now: 6000 }));
  p.onDispatch(at({ now: 6000 })); // integral 6.001; bootstrap spent, rate unknown: wait
  // First completion: 800 ms on the device; ema_waiting 0.15 × 4 = 0.6; error (2 − 0.6)/2 = 0.7;
  // integral 6.001 + 0.7 × 4 s = 8.801.
  p.observe(at({ now: 10_000, waiting: 4, deviceCompletions: 1, deviceBusyMs: 800 }));
  return p;
}

describe('classic pacer: the normalised error (target − ema_waiting) / target', () => {
  it('at the first loop top: error 1, integral 0.001, multiplier 1 + 0.5 × 1 + 0.001 × 0.001', () => {
    const p = createClassicPacer({ targetWaiting: 2 });
    p.observe(at({ now: 0 }));
    expect(p.state()).toEqual({
      mode: 'bootstrap',
      ratePerSec: null,
      intervalMs: 3000,
      terms: { waitingEma: 0, integral: 0.001, multiplier: 1.500001, bootstrapRemaining: 2 },
    });
    expect(p.nextDispatchAt(at({ now: 0 }))).toBe(3000);
  });

  it('a waiting queue above the target makes the error negative: target 4, 40 waiting at the first loop top', () => {
    const p = createClassicPacer({ targetWaiting: 4 });
    // ema 0.15 × 40 = 6; error (4 − 6)/4 = −0.5; integral −0.5 × 0.001 = −0.0005;
    // multiplier 1 − 0.25 − 0.0000005 = 0.7499995.
    p.observe(at({ now: 0, waiting: 40 }));
    const t = p.state().terms;
    expect(t['waitingEma']).toBeCloseTo(6, 12);
    expect(t['integral']).toBeCloseTo(-0.0005, 15);
    expect(t['multiplier']).toBeCloseTo(0.7499995, 12);
  });

  it('through the bootstrap to the first completion: integral, rate and steady interval (hand-computed)', () => {
    const p = toFirstCompletion();
    expect(p.nextDispatchAt(at({ now: 10_000 }))).toBe(10_000); // the first completion dispatches at once
    const s = p.state();
    expect(s.mode).toBe('steady');
    expect(s.ratePerSec).toBeCloseTo(2 / 0.8, 12); // N / ema_device = 2.5 per second
    expect(s.terms['waitingEma']).toBeCloseTo(0.6, 12);
    expect(s.terms['integral']).toBeCloseTo(8.801, 12);
    expect(s.terms['multiplier']).toBeCloseTo(1.358801, 12); // 1 + 0.5 × 0.7 + 0.001 × 8.801
    // (0.8 s / 2) / 1.358801 = 294.377 ms → 294.
    expect(s.intervalMs).toBe(294);
  });

  it('the dispatch after it: a loop top 0 s later (dt floored at 1 ms), then one steady interval of sleep', () => {
    const p = toFirstCompletion();
    // ema 0.15 × 4 + 0.85 × 0.6 = 1.11; error (2 − 1.11)/2 = 0.445; integral 8.801 + 0.445 × 0.001 = 8.801445;
    // multiplier 1 + 0.2225 + 0.008801445 = 1.231301445; interval 400 / 1.231301445 = 324.86 → 324.
    p.onDispatch(at({ now: 10_000, waiting: 4, deviceCompletions: 1, deviceBusyMs: 800 }));
    const s = p.state();
    expect(s.terms['waitingEma']).toBeCloseTo(1.11, 12);
    expect(s.terms['integral']).toBeCloseTo(8.801445, 12);
    expect(s.terms['multiplier']).toBeCloseTo(1.231301445, 12);
    expect(s.intervalMs).toBe(324);
    expect(p.nextDispatchAt(at({ now: 10_000 }))).toBe(10_324);
    expect(p.nextDispatchAt(at({ now: 10_500 }))).toBe(10_500); // past the wake time: now
  });

  it('a completion during the steady sleep restarts the loop: device EMA α 0.2, the sleep again from the completion', () => {
    const p = toFirstCompletion();
    p.onDispatch(at({ now: 10_000, waiting: 4, deviceCompletions: 1, deviceBusyMs: 800 }));
    // 1 completion of 1000 ms: ema_device 0.2 × 1 + 0.8 × 0.8 = 0.84 s; ema_waiting 0.15 × 2 + 0.85 × 1.11 = 1.2435;
    // error (2 − 1.2435)/2 = 0.37825; integral 8.801445 + 0.37825 × 0.1 s = 8.83927;
    // multiplier 1 + 0.189125 + 0.00883927 = 1.19796427; interval 420 / 1.19796427 = 350.59 → 350.
    p.observe(at({ now: 10_100, waiting: 2, onDevice: 1, deviceCompletions: 2, deviceBusyMs: 1800 }));
    const s = p.state();
    expect(s.ratePerSec).toBeCloseTo(2 / 0.84, 12);
    expect(s.terms['waitingEma']).toBeCloseTo(1.2435, 12);
    expect(s.terms['integral']).toBeCloseTo(8.83927, 12);
    expect(s.terms['multiplier']).toBeCloseTo(1.19796427, 12);
    expect(s.intervalMs).toBe(350);
    expect(p.nextDispatchAt(at({ now: 10_100 }))).toBe(10_450);
  });

  it('several completions in one event give one sample: their busy time ÷ their number', () => {
    const p = toFirstCompletion();
    p.onDispatch(at({ now: 10_000, waiting: 4, deviceCompletions: 1, deviceBusyMs: 800 }));
    // 3 completions, 3000 ms between them: a sample of 1 s; ema_device 0.2 × 1 + 0.8 × 0.8 = 0.84.
    p.observe(at({ now: 10_100, waiting: 2, onDevice: 1, deviceCompletions: 4, deviceBusyMs: 3800 }));
    expect(p.state().ratePerSec).toBeCloseTo(2 / 0.84, 12);
  });
});

describe('classic pacer: phases and modes', () => {
  it('a completion that reports no busy time counts as 1 µs: the rate is known and the interval floors at 50 ms', () => {
    const p = createClassicPacer({ targetWaiting: 1 });
    p.observe(at({ now: 0 }));
    p.observe(at({ now: 3000 }));
    p.onDispatch(at({ now: 3000 }));
    expect(p.nextDispatchAt(at({ now: 3000 }))).toBe(Infinity);
    p.observe(at({ now: 4000, waiting: 3, deviceCompletions: 1, deviceBusyMs: 0 }));
    expect(p.state().ratePerSec).toBeCloseTo(2 / 1e-6, 3);
    expect(p.nextDispatchAt(at({ now: 4000 }))).toBe(4000);
    p.onDispatch(at({ now: 4000, waiting: 3, deviceCompletions: 1, deviceBusyMs: 0 }));
    expect(p.state().intervalMs).toBe(50);
  });

  it('a fractional target bootstraps ⌈target⌉ items', () => {
    const p = createClassicPacer({ targetWaiting: 2.5 });
    p.observe(at({ now: 0 }));
    expect(p.state().terms['bootstrapRemaining']).toBe(3);
    for (const t of [3000, 6000]) {
      p.observe(at({ now: t }));
      p.onDispatch(at({ now: t }));
    }
    expect(p.state().terms['bootstrapRemaining']).toBe(1);
    expect(p.nextDispatchAt(at({ now: 6000 }))).toBe(9000);
    p.observe(at({ now: 9000 }));
    p.onDispatch(at({ now: 9000 }));
    expect(p.state().terms['bootstrapRemaining']).toBe(0);
    expect(p.nextDispatchAt(at({ now: 9000 }))).toBe(Infinity);
    expect(p.state().intervalMs).toBe(3000); // no rate yet: the 3 s default
  });

  it('mode: idle with nothing queued, bootstrap while bootstrapping or waiting for the first completion, steady after', () => {
    const p = createClassicPacer({ targetWaiting: 1 });
    p.observe(at({ now: 0, backlog: 0 }));
    expect(p.state().mode).toBe('idle');
    p.observe(at({ now: 1000, backlog: 2 }));
    expect(p.state().mode).toBe('bootstrap');
    p.observe(at({ now: 3000, backlog: 2 }));
    p.onDispatch(at({ now: 3000, backlog: 1 }));
    expect(p.state().mode).toBe('bootstrap'); // waiting for the first completion
    p.observe(at({ now: 5000, backlog: 1, waiting: 1, deviceCompletions: 1, deviceBusyMs: 100 }));
    expect(p.state().mode).toBe('steady');
  });

  it('a sleep that ended before an event lets the next dispatch go at once', () => {
    const p = createClassicPacer({ targetWaiting: 1 });
    p.observe(at({ now: 0 }));
    expect(p.nextDispatchAt(at({ now: 2999 }))).toBe(3000);
    p.observe(at({ now: 2999 }));
    expect(p.nextDispatchAt(at({ now: 2999 }))).toBe(3000);
    p.observe(at({ now: 3500 }));
    expect(p.nextDispatchAt(at({ now: 3500 }))).toBe(3500);
  });

  it('waiting for the first completion with nothing in flight bootstraps again (its items were withdrawn)', () => {
    const p = createClassicPacer({ targetWaiting: 2 });
    p.observe(at({ now: 0 }));
    for (const t of [3000, 6000]) {
      p.observe(at({ now: t, preparing: t / 3000 - 1 }));
      p.onDispatch(at({ now: t, preparing: t / 3000 }));
    }
    expect(p.nextDispatchAt(at({ now: 6000 }))).toBe(Infinity);
    // Still one preparing, or items waiting or on a device: keep waiting.
    for (const inFlight of [{ preparing: 1 }, { waiting: 1, onDevice: 1 }, { preparing: 1, waiting: 1 }]) {
      p.observe(at({ now: 7000, ...inFlight }));
      expect(p.nextDispatchAt(at({ now: 7000 }))).toBe(Infinity);
    }
    // All withdrawn: a new bootstrap of 2, the first after 3 s.
    p.observe(at({ now: 8000 }));
    expect(p.state().terms['bootstrapRemaining']).toBe(2);
    expect(p.nextDispatchAt(at({ now: 8000 }))).toBe(11_000);
  });

  it('targetWaiting 0 does not pace: always now, no interval, no state change on dispatch', () => {
    const p = createClassicPacer({ targetWaiting: 0 });
    p.observe(at({ now: 0 }));
    expect(p.nextDispatchAt(at({ now: 0 }))).toBe(0);
    p.onDispatch(at({ now: 0 }));
    p.observe(at({ now: 10, waiting: 3, deviceCompletions: 1, deviceBusyMs: 100 }));
    expect(p.nextDispatchAt(at({ now: 10 }))).toBe(10);
    const s = p.state();
    expect(s.intervalMs).toBeNull();
    expect(s.ratePerSec).toBeNull();
    expect(s.terms['bootstrapRemaining']).toBe(0);
    // Nothing is measured or integrated without a target.
    expect(s.terms['waitingEma']).toBe(0);
    expect(s.terms['integral']).toBe(0);
  });

  it('targetWaiting 0: a completion before any dispatch updates nothing either', () => {
    const p = createClassicPacer({ targetWaiting: 0 });
    p.observe(at({ now: 0 }));
    p.observe(at({ now: 10, waiting: 3, onDevice: 1, deviceCompletions: 1, deviceBusyMs: 100 }));
    expect(p.state()).toMatchObject({ ratePerSec: null, intervalMs: null, terms: { waitingEma: 0, integral: 0, bootstrapRemaining: 1 } });
    expect(p.nextDispatchAt(at({ now: 10 }))).toBe(10);
  });

  it('the ki option weighs the integral: ki 0.1 at the first loop top gives 1 + 0.5 × 1 + 0.1 × 0.001', () => {
    const p = createClassicPacer({ targetWaiting: 2, ki: 0.1 });
    p.observe(at({ now: 0 }));
    expect(p.state().terms['multiplier']).toBeCloseTo(1.5001, 12);
  });

  it('a completion at or after the end of the steady sleep, with work queued, neither restarts the sleep nor updates', () => {
    const p = toFirstCompletion();
    p.onDispatch(at({ now: 10_000, waiting: 4, deviceCompletions: 1, deviceBusyMs: 800 })); // sleeps until 10 324
    // Exactly at the wake time: the loop had gone on to take an item (held only by memory now).
    p.observe(at({ now: 10_324, waiting: 1, onDevice: 1, deviceCompletions: 2, deviceBusyMs: 1600 }));
    expect(p.nextDispatchAt(at({ now: 10_324 }))).toBe(10_324);
    expect(p.state().terms['waitingEma']).toBeCloseTo(1.11, 12);
  });

  it('the re-bootstrap spacing is the per-worker device time when that exceeds 2 s', () => {
    // Target 1, 1 worker: bootstrap 1 at 3 s; the first completion at 10 s took 5 s.
    const p = createClassicPacer({ targetWaiting: 1 });
    const one = (over: Partial<PacerSnapshot>) => snapshot({ workers: 1, backlog: 5, ...over });
    p.observe(one({ now: 0 }));
    p.observe(one({ now: 3000 }));
    p.onDispatch(one({ now: 3000 }));
    p.observe(one({ now: 10_000, deviceCompletions: 1, deviceBusyMs: 5000 }));
    // The dispatch at 10 s: 2 dispatched, 1 completed: no re-bootstrap yet.
    p.onDispatch(one({ now: 10_000, deviceCompletions: 1, deviceBusyMs: 5000, preparing: 1 }));
    expect(p.state().terms['bootstrapRemaining']).toBe(0);
    // Its completion during the sleep: every dispatch completed, ema_waiting 0 < 1 → bootstrap 1,
    // spaced max(2 s, 5 s / 1) = 5 s from the completion.
    p.observe(one({ now: 12_000, deviceCompletions: 2, deviceBusyMs: 10_000 }));
    expect(p.state()).toMatchObject({ mode: 'bootstrap', intervalMs: 5000, terms: { integral: 0, bootstrapRemaining: 1 } });
    expect(p.nextDispatchAt(one({ now: 12_000 }))).toBe(17_000);
  });

  it('while its sleep is over and it waits for work (nothing queued) each completion updates the EMAs; while it waits for memory none does', () => {
    const p = toFirstCompletion(); // ready at 10 s, ema_waiting 0.6
    // Nothing queued: a completion updates (ema 0.15 × 0 + 0.85 × 0.6 = 0.51).
    p.observe(at({ now: 11_000, backlog: 0, waiting: 0, onDevice: 1, deviceCompletions: 2, deviceBusyMs: 1600 }));
    expect(p.state().terms['waitingEma']).toBeCloseTo(0.51, 12);
    // Work queued but not dispatched (the budget holds it): no update.
    p.observe(at({ now: 12_000, backlog: 3, waiting: 0, onDevice: 1, deviceCompletions: 3, deviceBusyMs: 2400 }));
    expect(p.state().terms['waitingEma']).toBeCloseTo(0.51, 12);
    expect(p.nextDispatchAt(at({ now: 12_000 }))).toBe(12_000);
  });
});

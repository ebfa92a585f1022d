/**
 * The PI baselines (`interval-pi`, `gated-interval`; src/core/pacers/pi.ts), exactly: per-event
 * EMAs (α 0.15 on waiting, 0.2 on the input), kp 0.5 and ki 0.001 per second of error, the
 * integral clamped to [−20, 100], the multiplier to [0.3, 3], the interval to [50 ms, 60 s],
 * 3 s between dispatches before the first sample and max(2 s, the input) once the pipeline runs
 * dry; otherwise interval = input ÷ multiplier, on an absolute schedule (last dispatch + interval).
 * Every expected number below is worked out by hand from those rules.
 */
import { describe, expect, it } from 'vitest';
import { createPacer, type Pacer, type PacerSnapshot } from '../../src/core/index.js';
import { expectStokerError, snapshot } from './helpers.js';

/** A snapshot with something in flight (not dry) and a backlog (steady), overridable. */
const at = (over: Partial<PacerSnapshot>): PacerSnapshot => snapshot({ onDevice: 1, backlog: 5, ...over });
const terms = (p: Pacer) => p.state().terms;

describe('PI baselines: before any sample', () => {
  it.each(['interval-pi', 'gated-interval'])('%s starts in bootstrap: no rate, 3 s interval, neutral terms, the first dispatch due at once', (name) => {
    const p = createPacer(name);
    expect(p.name).toBe(name);
    expect(p.state()).toEqual({ mode: 'bootstrap', ratePerSec: null, intervalMs: 3000, terms: { waitingEma: 0, integral: 0, multiplier: 1 } });
    // Never dispatched: −∞ + 3000.
    expect(p.nextDispatchAt(at({ now: 0 }))).toBe(-Infinity);
    // Then 3 s after each dispatch (absolute schedule), whatever the backlog, until a completion interval is measured.
    p.observe(at({ now: 100, waiting: 2 }));
    p.onDispatch(at({ now: 100 }));
    expect(p.state().mode).toBe('bootstrap');
    expect(p.nextDispatchAt(at({ now: 100 }))).toBe(3100);
  });
});

describe('PI baselines: the waiting EMA and the PI terms', () => {
  it('smooths waiting per event with α 0.15 (the first value taken as is) and sets the multiplier to 1 + kp·error', () => {
    const p = createPacer('interval-pi');
    // All at t = 0: no time passes, so the integral stays 0.
    p.observe(at({ now: 0, waiting: 4 })); // EMA 4, error 0
    expect(terms(p)).toEqual({ waitingEma: 4, integral: 0, multiplier: 1 });
    p.observe(at({ now: 0, waiting: 0 })); // EMA 0.15·0 + 0.85·4 = 3.4, error 0.6, multiplier 1.3
    expect(terms(p)['waitingEma']).toBeCloseTo(3.4, 12);
    expect(terms(p)['multiplier']).toBeCloseTo(1.3, 12);
    p.observe(at({ now: 0, waiting: 10 })); // EMA 1.5 + 0.85·3.4 = 4.39, error −0.39, multiplier 0.805
    expect(terms(p)['waitingEma']).toBeCloseTo(4.39, 12);
    expect(terms(p)['multiplier']).toBeCloseTo(0.805, 12);
    expect(terms(p)['integral']).toBe(0);
  });

  it('integrates the error per second since the last observation (none at the first) and adds ki·integral', () => {
    const p = createPacer('interval-pi', { ki: 0.1 });
    p.observe(at({ now: 1000, waiting: 2 })); // error 2, no elapsed time yet: multiplier 1 + 0.5·2 = 2
    expect(terms(p)).toEqual({ waitingEma: 2, integral: 0, multiplier: 2 });
    p.observe(at({ now: 3000, waiting: 2 })); // 2 s × 2 = 4: multiplier 2 + 0.1·4 = 2.4
    expect(terms(p)['integral']).toBeCloseTo(4, 12);
    expect(terms(p)['multiplier']).toBeCloseTo(2.4, 12);
    p.observe(at({ now: 3500, waiting: 2 })); // + 0.5 s × 2 = 5: multiplier 2.5
    expect(terms(p)['integral']).toBeCloseTo(5, 12);
    expect(terms(p)['multiplier']).toBeCloseTo(2.5, 12);
  });

  it('reads kp and ki from the options', () => {
    const p = createPacer('gated-interval', { kp: 0.1, ki: 0 });
    p.observe(at({ now: 0, waiting: 3 })); // error 1: 1 + 0.1
    expect(terms(p)['multiplier']).toBeCloseTo(1.1, 12);
    p.observe(at({ now: 10_000, waiting: 3 })); // integral 10, but ki 0
    expect(terms(p)['integral']).toBeCloseTo(10, 12);
    expect(terms(p)['multiplier']).toBeCloseTo(1.1, 12);
  });

  it('clamps the integral to [−20, 100] and the multiplier to [0.3, 3]', () => {
    const low = createPacer('interval-pi');
    low.observe(at({ now: 0, waiting: 0 })); // error 4: 1 + 2 = 3, at the cap
    low.observe(at({ now: 30_000, waiting: 0 })); // 4 × 30 s = 120 → 100; 1 + 2 + 0.1 = 3.1 → 3
    expect(terms(low)).toEqual({ waitingEma: 0, integral: 100, multiplier: 3 });
    const high = createPacer('interval-pi');
    high.observe(at({ now: 0, waiting: 24 })); // error −20
    high.observe(at({ now: 2000, waiting: 24 })); // −40 → −20; 1 − 10 − 0.02 → 0.3
    expect(terms(high)).toEqual({ waitingEma: 24, integral: -20, multiplier: 0.3 });
  });

  it('rejects a negative or non-numeric kp or ki', () => {
    expectStokerError(() => createPacer('interval-pi', { kp: -0.5 }), 'E_INVALID_OPTION', /kp/);
    expectStokerError(() => createPacer('gated-interval', { ki: 'fast' }), 'E_INVALID_OPTION', /ki/);
  });
});

describe('PI baselines: the input (time between device completions)', () => {
  it('interval-pi: the first completion starts the clock; each later one samples the time since the last ÷ the completions, EMA α 0.2', () => {
    // waiting = the target 4 throughout: error 0, multiplier 1, so the steady interval is the input itself.
    const p = createPacer('interval-pi');
    p.observe(at({ now: 1000, waiting: 4, deviceCompletions: 1 }));
    expect(p.state()).toMatchObject({ mode: 'bootstrap', ratePerSec: null, intervalMs: 3000 });
    p.observe(at({ now: 1400, waiting: 4, deviceCompletions: 1 })); // no completion: no sample, the clock stays at 1000
    expect(p.state()).toMatchObject({ mode: 'bootstrap', ratePerSec: null, intervalMs: 3000 });
    p.observe(at({ now: 2000, waiting: 4, deviceCompletions: 3 })); // (2000 − 1000) ÷ 2 = 500
    expect(p.state()).toMatchObject({ mode: 'steady', ratePerSec: 2, intervalMs: 500 });
    p.observe(at({ now: 3000, waiting: 4, deviceCompletions: 4 })); // sample 1000: 0.2·1000 + 0.8·500 = 600
    expect(p.state().intervalMs).toBeCloseTo(600, 9);
    expect(p.state().ratePerSec).toBeCloseTo(1000 / 600, 12);
    p.observe(at({ now: 3000, waiting: 4, deviceCompletions: 5 })); // a completion the same instant: sample 0, 0.8·600 = 480
    expect(p.state().intervalMs).toBeCloseTo(480, 9);
  });

  it('interval-pi counts idle gaps (nothing waiting); gated-interval skips those samples but restarts its clock at them', () => {
    const seq = [
      at({ now: 0, waiting: 4, deviceCompletions: 1 }),
      at({ now: 4000, waiting: 0, deviceCompletions: 2 }), // 4 s since the last completion, nothing waiting
      at({ now: 5000, waiting: 1, deviceCompletions: 3 }), // 1 s since the last
      at({ now: 9000, waiting: 0, deviceCompletions: 4 }), // 4 s, nothing waiting
    ];
    const rates = (name: string) => {
      const p = createPacer(name);
      return seq.map((s) => {
        p.observe(s);
        return p.state().ratePerSec;
      });
    };
    // interval-pi: 4000; 0.2·1000 + 0.8·4000 = 3400; 0.2·4000 + 0.8·3400 = 3520.
    const pi = rates('interval-pi');
    expect(pi.slice(0, 2)).toEqual([null, 0.25]);
    expect(pi[2]).toBeCloseTo(1000 / 3400, 12);
    expect(pi[3]).toBeCloseTo(1000 / 3520, 12);
    // gated-interval: only the 1 s sample (from the completion at 4000, not 0); the last leaves it alone.
    expect(rates('gated-interval')).toEqual([null, null, 1, 1]);
  });

  it('an input of 0 ms (completions in the same instant) gives no rate, and the interval its 50 ms floor', () => {
    const p = createPacer('interval-pi');
    p.observe(at({ now: 700, waiting: 4, deviceCompletions: 1 }));
    p.observe(at({ now: 700, waiting: 4, deviceCompletions: 2 }));
    expect(p.state()).toMatchObject({ mode: 'steady', ratePerSec: null, intervalMs: 50 });
  });
});

describe('PI baselines: mode and interval', () => {
  /** An interval-pi pacer with an input of `inputMs` (two completions that far apart), at waiting 4 (multiplier 1). */
  const measured = (inputMs: number) => {
    const p = createPacer('interval-pi');
    p.observe(at({ now: 0, waiting: 4, deviceCompletions: 1 }));
    p.observe(at({ now: inputMs, waiting: 4, deviceCompletions: 2 }));
    return p;
  };

  it('steady with a backlog, idle without one: interval = input ÷ multiplier, due that long after the last dispatch', () => {
    const p = createPacer('interval-pi');
    p.observe(at({ now: 0, waiting: 3, deviceCompletions: 1 })); // error 1
    p.observe(at({ now: 500, waiting: 3, deviceCompletions: 2 })); // input 500; integral 0.5: multiplier 1 + 0.5 + 0.0005
    const m = 1 + 0.5 * 1 + 0.001 * 0.5;
    expect(terms(p)['multiplier']).toBeCloseTo(m, 12);
    expect(p.state().mode).toBe('steady');
    expect(p.state().intervalMs).toBeCloseTo(500 / m, 9);
    p.onDispatch(at({ now: 600 }));
    expect(p.nextDispatchAt(at({ now: 600 }))).toBeCloseTo(600 + 500 / m, 9);
    p.observe(at({ now: 500, waiting: 3, deviceCompletions: 2, backlog: 0 }));
    expect(p.state().mode).toBe('idle');
    expect(p.state().intervalMs).toBeCloseTo(500 / m, 9);
  });

  it('once the pipeline runs dry (nothing preparing, waiting or on a device): bootstrap at max(2 s, the input)', () => {
    const dry = { preparing: 0, waiting: 0, onDevice: 0, deviceCompletions: 2 };
    const fast = measured(500);
    fast.observe(at({ now: 500, ...dry }));
    expect(fast.state()).toMatchObject({ mode: 'bootstrap', intervalMs: 2000, ratePerSec: 2 });
    const slow = measured(2500);
    slow.observe(at({ now: 2500, ...dry }));
    expect(slow.state()).toMatchObject({ mode: 'bootstrap', intervalMs: 2500 });
  });

  it.each([
    { preparing: 1, waiting: 1, onDevice: 0 },
    { preparing: 0, waiting: 1, onDevice: 1 },
    { preparing: 1, waiting: 0, onDevice: 0 },
    { preparing: 0, waiting: 0, onDevice: 1 },
  ])('is not dry with anything in flight: %o', (inFlight) => {
    const p = measured(500);
    p.observe(at({ now: 500, deviceCompletions: 2, ...inFlight }));
    expect(p.state().mode).toBe('steady');
  });

  it('keeps the steady interval within [50 ms, 60 s]', () => {
    // Input 60 ms, nothing waiting (error 4: multiplier 3): 20 ms → 50.
    const p = createPacer('interval-pi');
    p.observe(at({ now: 0, waiting: 0, deviceCompletions: 1 }));
    p.observe(at({ now: 60, waiting: 0, deviceCompletions: 2 }));
    expect(terms(p)['multiplier']).toBe(3);
    expect(p.state().intervalMs).toBe(50);
    // Input 100 s at multiplier 1 → 60 s.
    expect(measured(100_000).state().intervalMs).toBe(60_000);
  });
});

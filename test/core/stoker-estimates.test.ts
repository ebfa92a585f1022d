/**
 * The stoker pacer's estimates with exact values on hand-made snapshots: the preparation latency
 * (a running mean while samples are few, then per-sample smoothing; survivorship while the
 * pipeline fills; the safety margin), the service time per item (a first sample at once; news
 * beyond the noise weighed serviceSmoothing, a slower device slowerSmoothing, a starved device's
 * fast samples starvedWeight; within the noise a weight that keeps the inventory's noise within
 * half the target; skewed devices; several completions in one event), the waiting average, the
 * idle restart and state(). Defaults (STOKER_DEFAULTS): serviceSmoothing 0.3, slowerSmoothing
 * 0.5, starvedWeight 0.05, latencySmoothing 0.03, waitingTauMs 10 s, safetyZ 2.
 */
import { describe, expect, it } from 'vitest';
import { createStokerPacer, type PacerSnapshot } from '../../src/core/index.js';
import { snapshot } from './helpers.js';

type Dev = PacerSnapshot['devices'][number];
const dev = (completions: number, busyMs: number, busy = 2, workers = 2): Dev => ({ workers, busy, completions, busyMs });

/** A snapshot after `n` preparations whose latencies sum to `total` (and squares to `sq`). */
function prepSnap(now: number, n: number, total: number, sq: number, over: Partial<PacerSnapshot> = {}): PacerSnapshot {
  return snapshot({ now, prepareCompletions: n, prepareLatencyMsTotal: total, prepareLatencySqTotal: sq, ...over });
}

describe('stoker pacer: the preparation latency estimate', () => {
  it('is a running mean while samples are few (weight max(1 − 0.97^n, n ÷ all)), each event’s mean a sample', () => {
    const p = createStokerPacer({ priorServiceMs: 500 });
    p.observe(prepSnap(0, 0, 0, 0));
    expect(p.state().terms['latencyMs']).toBe(0);
    p.observe(prepSnap(1000, 1, 10_000, 1e8));
    expect(p.state().terms['latencyMs']).toBe(10_000);
    p.observe(prepSnap(2000, 2, 22_000, 1e8 + 1.44e8));
    expect(p.state().terms['latencyMs']).toBe(11_000); // weight ½
    // Two at once, 5000 ms each: weight max(1 − 0.97², 2 ÷ 4) = ½ → 11 000 + ½ (5000 − 11 000).
    p.observe(prepSnap(3000, 4, 32_000, 2.44e8 + 5e7));
    expect(p.state().terms['latencyMs']).toBe(8000);
  });

  it('from a remembered latency, moves by the per-sample weight only (1 − 0.97^n)', () => {
    const p = createStokerPacer({ priorServiceMs: 500, priorLatencyMs: 10_000 });
    p.observe(prepSnap(0, 0, 0, 0));
    expect(p.state().terms['latencyMs']).toBe(10_000);
    p.observe(prepSnap(1000, 1, 20_000, 4e8));
    expect(p.state().terms['latencyMs']).toBeCloseTo(10_300, 9);
    p.observe(prepSnap(2000, 3, 60_000, 12e8));
    // 10 300 + (1 − 0.97²)(20 000 − 10 300)
    expect(p.state().terms['latencyMs']).toBeCloseTo(10_300 + (1 - 0.97 ** 2) * 9700, 9);
  });

  it('ignores a shorter sample while the pipeline fills (two latencies from its busy start), not a longer one, nor one after', () => {
    const p = createStokerPacer({ priorServiceMs: 500, priorLatencyMs: 10_000 });
    p.observe(prepSnap(0, 0, 0, 0, { backlog: 10 }));
    p.observe(prepSnap(5000, 1, 4000, 1.6e7, { backlog: 10, preparing: 5 }));
    expect(p.state().terms['latencyMs']).toBe(10_000); // quick ones finish first: survivorship
    p.observe(prepSnap(6000, 2, 24_000, 4.16e8, { backlog: 10, preparing: 5 }));
    expect(p.state().terms['latencyMs']).toBeCloseTo(10_300, 9); // a longer one counts
    // 2 × 10 300 after the busy start, a short sample is news again.
    p.observe(prepSnap(20_600, 3, 28_000, 4.32e8, { backlog: 10, preparing: 5 }));
    expect(p.state().terms['latencyMs']).toBeCloseTo(10_300 + 0.03 * (4000 - 10_300), 9);
  });

  it('sizes its safety margin as safetyZ standard errors of the mean: σ ÷ √samples', () => {
    // λ = 2 ÷ 500 ms; latency 11 000 ± 1000 (second moment 1.22e8) over 2 samples: margin 2 · 1000 ÷ √2.
    const p = createStokerPacer({ priorServiceMs: 500, targetWaiting: 4 });
    p.observe(prepSnap(0, 1, 10_000, 1e8, { backlog: 1 }));
    p.observe(prepSnap(1, 2, 22_000, 2.44e8, { backlog: 1 }));
    const margin = (2 * 1000) / Math.sqrt(2);
    expect(p.state().terms['inventoryTarget']).toBeCloseTo(0.004 * (11_000 + margin) + 2 + 4, 9);
  });
});

describe('stoker pacer: the service time per item', () => {
  /** A pacer that measured `first` ms per item on 2 saturated workers (no prior). */
  function measured(first: number, options: Parameters<typeof createStokerPacer>[0] = {}) {
    const p = createStokerPacer({ targetWaiting: 2, ...options });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(1, first)] }));
    return p;
  }
  const serviceMs = (p: ReturnType<typeof createStokerPacer>) => 2000 / (p.state().ratePerSec as number);

  it('takes the first sample as it is', () => {
    expect(serviceMs(measured(80))).toBeCloseTo(80, 9);
    expect(measured(80).state().devices?.[0]?.estimatedPerSec).toBeCloseTo(25, 9);
  });

  it('on a quiet device weighs news of a faster device serviceSmoothing, of a slower one slowerSmoothing', () => {
    const faster = measured(100);
    faster.observe(snapshot({ now: 200, backlog: 10, devices: [dev(2, 180)] }));
    expect(serviceMs(faster)).toBeCloseTo(100 + 0.3 * (80 - 100), 9);
    const slower = measured(100);
    slower.observe(snapshot({ now: 200, backlog: 10, devices: [dev(2, 220)] }));
    expect(serviceMs(slower)).toBeCloseTo(100 + 0.5 * (120 - 100), 9);
    const tuned = measured(100, { serviceSmoothing: 0.1, slowerSmoothing: 0.2 });
    tuned.observe(snapshot({ now: 200, backlog: 10, devices: [dev(2, 220)] }));
    expect(serviceMs(tuned)).toBeCloseTo(104, 9);
  });

  it('weighs several completions in one event as that many samples: 1 − (1 − w)^n', () => {
    const p = measured(100);
    p.observe(snapshot({ now: 200, backlog: 10, devices: [dev(4, 100 + 3 * 80)] }));
    expect(serviceMs(p)).toBeCloseTo(100 + (1 - 0.7 ** 3) * (80 - 100), 9);
  });

  it('believes a step that reports no busy time as 1 µs, never 0 (a rate of 0 would hold dispatch for good)', () => {
    const p = measured(0);
    expect(serviceMs(p)).toBeCloseTo(1e-3, 12);
    expect(p.state().mode).toBe('steady');
  });

  it('once it saw the device saturated, weighs a starved device’s faster sample starvedWeight times less, not a slower one', () => {
    const fast = measured(60);
    fast.observe(snapshot({ now: 200, backlog: 10, devices: [dev(2, 100, 1)] }));
    expect(serviceMs(fast)).toBeCloseTo(60 + 0.3 * 0.05 * (40 - 60), 9);
    const slow = measured(60);
    slow.observe(snapshot({ now: 200, backlog: 10, devices: [dev(2, 150, 1)] }));
    expect(serviceMs(slow)).toBeCloseTo(60 + 0.5 * (90 - 60), 9);
    // Never seen saturated: the starved device's sample is all the evidence there is.
    const p = createStokerPacer({ targetWaiting: 2 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0, 1)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(1, 60, 1)] }));
    p.observe(snapshot({ now: 200, backlog: 10, devices: [dev(2, 100, 1)] }));
    expect(serviceMs(p)).toBeCloseTo(60 + 0.3 * (40 - 60), 9);
  });

  it('within the noise (2 %), weighs a sample min(serviceSmoothing, 2 ÷ (n² + 1)), n the inventory noise over half the target', () => {
    // Without a latency estimate the inventory does not depend on the service time: the full weight.
    const p = measured(100);
    p.observe(snapshot({ now: 200, backlog: 10, devices: [dev(2, 201)] }));
    expect(serviceMs(p)).toBeCloseTo(100 + 0.3 * 1, 9);
  });

  it('on a noisy device, one sample beyond the noise is not news; two in a row on the same side are', () => {
    // Samples of 110 and 90 in turn raise cv² to about 0.01 (past the quiet 0.0025): the noise is
    // 3 σ + 2 % ≈ 32 %. One sample of 200 is beyond it but not news: weighed as within the noise
    // (serviceSmoothing here, with no latency known). The second in a row is news of a slower
    // device: slowerSmoothing.
    const p = measured(100);
    let busy = 100;
    let n = 1;
    const step = (ms: number) => {
      busy += ms;
      n++;
      p.observe(snapshot({ now: 100 * n, backlog: 10, devices: [dev(n, busy)] }));
      return serviceMs(p);
    };
    for (let i = 0; i < 60; i++) step(i % 2 === 0 ? 110 : 90);
    const before = step(100);
    const once = step(200);
    expect(once).toBeCloseTo(before + 0.3 * (200 - before), 9);
    const twice = step(200);
    expect(twice).toBeCloseTo(once + 0.5 * (200 - once), 9);
    // A sample beyond the noise on the other side is, again, not news.
    const back = step(40);
    expect(back).toBeCloseTo(twice + 0.3 * (40 - twice), 9);
  });
});

describe('stoker pacer: the waiting average, the idle restart and its state', () => {
  it('smooths the waiting queue with the waitingTauMs time constant, from the target', () => {
    const p = createStokerPacer({ priorServiceMs: 500, targetWaiting: 4, waitingTauMs: 1000 });
    p.observe(snapshot({ now: 0, backlog: 5, waiting: 10 }));
    expect(p.state().terms['waitingAvg']).toBe(4);
    p.observe(snapshot({ now: 1000, backlog: 5, waiting: 10 }));
    expect(p.state().terms['waitingAvg']).toBeCloseTo(4 + (1 - Math.exp(-1)) * 6, 12);
  });

  it('restarts cleanly after idle: one token, whatever the idle spell', () => {
    const p = createStokerPacer({ priorServiceMs: 10, burst: 5 });
    p.observe(snapshot({ now: 0, backlog: 5 }));
    p.observe(snapshot({ now: 60_000, backlog: 5 }));
    expect(p.state().terms['credit']).toBe(5); // the bucket full after a minute with work
    p.observe(snapshot({ now: 61_000, backlog: 0 }));
    expect(p.state().terms['credit']).toBe(1);
    expect(p.state().mode).toBe('idle');
  });

  it('reports the kinds it plans for, the workers it limits and a batching device’s fit (null until made)', () => {
    const p = createStokerPacer({ priorServiceMs: 100 });
    p.observe(snapshot({ now: 0, backlog: 1, devices: [{ workers: 2, busy: 0, completions: 0, busyMs: 0, batch: { maxItems: 8, batches: 0, items: 0 } }] }));
    expect(p.state().devices).toEqual([{ estimatedPerSec: 20, observedRatio: null, trusted: 'estimate', workerLimit: null, batch: null }]);
    expect(p.state().kinds).toBeUndefined();
    expect(p.workerLimit?.(0)).toBe(Infinity);
    expect(p.workerLimit?.(3)).toBe(Infinity);
  });
});

describe('stoker pacer: the plan', () => {
  it('on batching devices plans a full batch per worker and the waiting target plus half a batch (or targetBatches batches)', () => {
    // λ = 2 ÷ 100 ms; no latency yet: J* = 2 workers × 8 + (4 + 8 ÷ 2) = 24; with targetBatches 2: 16 + 2 × 8 + 4 = 36.
    const batching = [{ workers: 2, busy: 0, completions: 0, busyMs: 0, batch: { maxItems: 8, batches: 0, items: 0 } }];
    const p = createStokerPacer({ priorServiceMs: 100, targetWaiting: 4 });
    p.observe(snapshot({ now: 0, backlog: 1, devices: batching }));
    expect(p.state().terms['inventoryTarget']).toBe(24);
    const q = createStokerPacer({ priorServiceMs: 100, targetWaiting: 4, targetBatches: 2 });
    q.observe(snapshot({ now: 0, backlog: 1, devices: batching }));
    expect(q.state().terms['inventoryTarget']).toBe(36);
    // A batching device no queued job can use does not set the batch the waiting target is made of.
    const r = createStokerPacer({ priorServiceMs: 100, targetWaiting: 4 });
    r.observe(snapshot({ now: 0, backlog: 1, devices: [{ ...dev(0, 0, 0, 1) }, { ...(batching[0] as Dev), eligible: false }] }));
    expect(r.state().terms['inventoryTarget']).toBe(1 + 16 + 4);
  });

  it('bootstraps the items the devices hold plus the waiting target when nothing is known', () => {
    const p = createStokerPacer({ targetWaiting: 4, bootstrapSpacingMs: 0 });
    const s = snapshot({ now: 0, backlog: 100, devices: [{ workers: 2, busy: 0, completions: 0, busyMs: 0, batch: { maxItems: 8, batches: 0, items: 0 } }] });
    p.observe(s);
    let sent = 0;
    while (p.nextDispatchAt(s) <= 0 && sent < 100) {
      p.onDispatch(s);
      sent++;
    }
    expect(sent).toBe(2 * 8 + 4 + 4);
  });

  it('plans for the workers alive within the last latency: a worker lost is planned away only one latency (plus margin) later', () => {
    const p = createStokerPacer({ priorServiceMs: 500, priorLatencyMs: 10_000 });
    const at = (now: number, workers: number) => {
      p.observe(snapshot({ now, backlog: 10, workers, devices: [dev(0, 0, 0, workers)] }));
      return p.state().ratePerSec;
    };
    expect(at(0, 2)).toBe(4);
    expect(at(1000, 1)).toBe(4);
    expect(at(10_000, 1)).toBe(4);
    expect(at(10_001, 1)).toBe(2);
    expect(at(10_002, 2)).toBe(4); // back: planned for at once
  });

  it('trims the inventory by the integral of the waiting error once settled for settleLatencies latencies, never at its rate cap', () => {
    // λ = 2 ÷ 500 ms, latency 1 s (no spread): J* = 4 + 2 + 4 + I; J = 10 in flight, so u = λ + I ÷ 1 s.
    // Occupancy and the waiting average follow at once (time constants of 1 ms). The cap is
    // max(λ, drained 1·λ + 0.2λ) = 1.2λ once the occupancy is known. The integral moves by
    // (target − waiting) clamped to ±4, × dt ÷ (4 × 1 s), once J* held within 25 % for 2 s.
    const run = (waiting: number, preparing: number) => {
      const p = createStokerPacer({ priorServiceMs: 500, priorLatencyMs: 1000, targetWaiting: 4, occupancyTauMs: 1, waitingTauMs: 1 });
      const out: number[] = [];
      for (let t = 0; t <= 9000; t += 1000) {
        p.observe(snapshot({ now: t, backlog: 10, waiting, preparing, onDevice: 2, devices: [dev(0, 0, 2)] }));
        out.push(p.state().terms['integral'] as number);
      }
      return out;
    };
    // Nothing waits: +1 at 3 s, which lifts u to 1.25λ, above the cap: no more integration (anti-windup).
    expect(run(0, 8)).toEqual([0, 0, 0, 1, 1, 1, 1, 1, 1, 1]);
    // Eight wait: −1 a second from 3 s while J* stays within 25 % of 10; at 7 it settles again
    // (from 6 s), −4 at 8 s (the clamp −target), and then u = 0 holds it there.
    expect(run(8, 0)).toEqual([0, 0, 0, -1, -2, -3, -3, -3, -4, -4]);
  });
});

describe('stoker pacer: kinds sharing devices', () => {
  const kind = (name: string, devices: number[], completions: number[], busyMs: number[]) => ({ name, devices, preparing: 0, waiting: 0, onDevice: 0, completions, busyMs });

  it('a kind unmeasured on a device borrows its time on the others, else the device’s other kinds, else all that was measured', () => {
    // Device 0 measured a at 100 ms, device 1 measured b at 400 ms; c is measured nowhere.
    const p = createStokerPacer({ targetWaiting: 2 });
    const devices = [dev(0, 0), dev(0, 0)];
    const at = (a: number, b: number) => [kind('a', [0, 1], [a, 0], [100 * a, 0]), kind('b', [0, 1], [0, b], [0, 400 * b]), kind('c', [0, 1], [0, 0], [0, 0])];
    p.observe(snapshot({ now: 0, backlog: 5, nextKind: 0, devices, kinds: at(0, 0) }));
    p.observe(snapshot({ now: 100, backlog: 5, nextKind: 0, devices: [dev(1, 100), dev(1, 400)], kinds: at(1, 1) }));
    // a: 2 ÷ 100 on device 0 and (borrowed) on device 1 → 40/s; b: 2 ÷ 400 twice → 10/s;
    // c: each device's mean over its kinds: 2 ÷ 100 + 2 ÷ 400 → 25/s.
    expect(p.state().kinds).toEqual([
      { name: 'a', estimatedPerSec: 40 },
      { name: 'b', estimatedPerSec: 10 },
      { name: 'c', estimatedPerSec: 25 },
    ]);
    expect(p.state().ratePerSec).toBe(40);
    // The engine names the next kind before it asks: the plan is then counted in c's items.
    p.nextDispatchAt(snapshot({ now: 100, backlog: 5, nextKind: 2, devices: [dev(1, 100), dev(1, 400)], kinds: at(1, 1) }));
    expect(p.state().ratePerSec).toBe(25);
  });

  it('where kinds run on different devices, plans one rate over every device with work, each at its mean over its kinds', () => {
    const p = createStokerPacer({ targetWaiting: 2 });
    const kinds = (a: number, b: number) => [kind('a', [0], [a, 0], [100 * a, 0]), kind('b', [1], [0, b], [0, 400 * b])];
    p.observe(snapshot({ now: 0, backlog: 5, nextKind: 0, devices: [dev(0, 0), dev(0, 0)], kinds: kinds(0, 0) }));
    p.observe(snapshot({ now: 100, backlog: 5, nextKind: 0, devices: [dev(1, 100), dev(1, 400)], kinds: kinds(1, 1) }));
    expect(p.state().ratePerSec).toBe(25);
    // Each kind's own rate is still its devices' alone.
    expect(p.state().kinds).toEqual([
      { name: 'a', estimatedPerSec: 20 },
      { name: 'b', estimatedPerSec: 5 },
    ]);
  });
});

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
import { newService, NOISE_SAMPLES } from '../../src/core/pacers/stoker-device.js';
import { KindPlan } from '../../src/core/pacers/stoker-rates.js';
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
  const N = NOISE_SAMPLES;
  /**
   * A pacer that measured `first` ms per item on 2 saturated workers (no prior): ten items in one
   * event (one that begins among the first NOISE_SAMPLES counts whole), so a quiet device, its
   * noise known, and a running mean's weight (1 ÷ 11 next) below serviceSmoothing.
   */
  const M = 10;
  function measured(first: number, options: Parameters<typeof createStokerPacer>[0] = {}) {
    const p = createStokerPacer({ targetWaiting: 2, ...options });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(M, M * first)] }));
    return p;
  }
  /** The counters of a pacer measured(first) after `n` more completions that took `ms` in all. */
  const then = (first: number, n: number, ms: number, busy = 2) => dev(M + n, M * first + ms, busy);
  const serviceMs = (p: ReturnType<typeof createStokerPacer>) => 2000 / (p.state().ratePerSec as number);

  it('takes the first sample as it is', () => {
    const p = createStokerPacer({ targetWaiting: 2 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(1, 80)] }));
    expect(serviceMs(p)).toBeCloseTo(80, 9);
    expect(p.state().devices?.[0]?.estimatedPerSec).toBeCloseTo(25, 9);
  });

  it('judges the skew by the noise with its tail, from its first two samples on and with the sample at hand', () => {
    // 100 on the saturated device, then 20 while it is starved: their sample variance, cv² =
    // Σ (x − x̄)² ÷ (n − 1) ÷ x̄² = 3200 ÷ 3600 = 0.89, is a skewed device's, so the 20 is neither
    // discounted as starved (weight 0.3 · 0.05 on a quiet device) nor is a long one news: each
    // weighs as in a running mean (with a latency of 100 s the noise asks for thousands).
    expect(N).toBe(2);
    const p = createStokerPacer({ targetWaiting: 2, priorLatencyMs: 100_000 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(1, 100)] }));
    expect(serviceMs(p)).toBeCloseTo(100, 9);
    p.observe(snapshot({ now: 200, backlog: 10, devices: [dev(2, 120, 1)] }));
    expect(serviceMs(p)).toBeCloseTo(60, 9);
    p.observe(snapshot({ now: 300, backlog: 10, devices: [dev(3, 420, 1)] }));
    expect(serviceMs(p)).toBeCloseTo(60 + (300 - 60) / 3, 9);
    // Two first samples that agree: a quiet device, the 20 discounted (the rules as ever).
    const q = createStokerPacer({ targetWaiting: 2, priorLatencyMs: 100_000 });
    q.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    q.observe(snapshot({ now: 100, backlog: 10, devices: [dev(2, 200)] }));
    q.observe(snapshot({ now: 200, backlog: 10, devices: [dev(3, 220, 1)] }));
    expect(serviceMs(q)).toBeCloseTo(100 + 0.3 * 0.05 * (20 - 100), 9);
  });

  it('takes a first long sample of a skewed device as one, not as news of a slower device', () => {
    // Ten samples of 50 (no noise), then one of 2000 (39 σ… of nothing): with it the noise with
    // its tail reads 25 ÷ 11 = 2.3 (clipped at TAIL_Z² · SKEWED_CV2, a running mean), a skewed
    // device, so it weighs as a sample within the noise (serviceSmoothing: the noise that sets
    // that weight is still ~0), not ½ as news of a slower device would.
    const p = createStokerPacer({ targetWaiting: 2, priorLatencyMs: 100_000 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(10, 500)] }));
    p.observe(snapshot({ now: 200, backlog: 10, devices: [dev(11, 2500)] }));
    expect(serviceMs(p)).toBeCloseTo(50 + 0.3 * (2000 - 50), 9);
    // A quiet device's slowdown early on (twice as slow) stays news: (1²) ÷ 11 is no skew.
    const q = createStokerPacer({ targetWaiting: 2, priorLatencyMs: 100_000 });
    q.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    q.observe(snapshot({ now: 100, backlog: 10, devices: [dev(10, 500)] }));
    q.observe(snapshot({ now: 200, backlog: 10, devices: [dev(11, 600)] }));
    expect(serviceMs(q)).toBeCloseTo(50 + 0.5 * 50, 9);
  });

  it('on a quiet device weighs news of a faster device serviceSmoothing, of a slower one slowerSmoothing', () => {
    const faster = measured(100);
    faster.observe(snapshot({ now: 200, backlog: 10, devices: [then(100, 1, 80)] }));
    expect(serviceMs(faster)).toBeCloseTo(100 + 0.3 * (80 - 100), 9);
    const slower = measured(100);
    slower.observe(snapshot({ now: 200, backlog: 10, devices: [then(100, 1, 120)] }));
    expect(serviceMs(slower)).toBeCloseTo(100 + 0.5 * (120 - 100), 9);
    const tuned = measured(100, { serviceSmoothing: 0.1, slowerSmoothing: 0.2 });
    tuned.observe(snapshot({ now: 200, backlog: 10, devices: [then(100, 1, 120)] }));
    expect(serviceMs(tuned)).toBeCloseTo(104, 9);
  });

  it('weighs several completions in one event as that many samples: 1 − (1 − w)^n', () => {
    const p = measured(100);
    p.observe(snapshot({ now: 200, backlog: 10, devices: [then(100, 3, 3 * 80)] }));
    expect(serviceMs(p)).toBeCloseTo(100 + (1 - 0.7 ** 3) * (80 - 100), 9);
  });

  it('believes a step that reports no busy time as 1 µs, never 0 (a rate of 0 would hold dispatch for good)', () => {
    const p = measured(0);
    expect(serviceMs(p)).toBeCloseTo(1e-3, 12);
    expect(p.state().mode).toBe('steady');
  });

  it('once it saw the device saturated, weighs a starved device’s faster sample starvedWeight times less, not a slower one', () => {
    const fast = measured(60);
    fast.observe(snapshot({ now: 200, backlog: 10, devices: [then(60, 1, 40, 1)] }));
    expect(serviceMs(fast)).toBeCloseTo(60 + 0.3 * 0.05 * (40 - 60), 9);
    const slow = measured(60);
    slow.observe(snapshot({ now: 200, backlog: 10, devices: [then(60, 1, 90, 1)] }));
    expect(serviceMs(slow)).toBeCloseTo(60 + 0.5 * (90 - 60), 9);
    // Never seen saturated: the starved device's sample is all the evidence there is.
    const p = createStokerPacer({ targetWaiting: 2 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0, 1)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(M, M * 60, 1)] }));
    p.observe(snapshot({ now: 200, backlog: 10, devices: [dev(M + 1, M * 60 + 40, 1)] }));
    expect(serviceMs(p)).toBeCloseTo(60 + 0.3 * (40 - 60), 9);
  });

  it('within the noise (2 %), weighs a sample min(serviceSmoothing, 2 ÷ (n² + 1)), n the inventory noise over half the target', () => {
    // Without a latency estimate the inventory does not depend on the service time: the full weight.
    const p = measured(100);
    p.observe(snapshot({ now: 200, backlog: 10, devices: [then(100, 1, 101)] }));
    expect(serviceMs(p)).toBeCloseTo(100 + 0.3 * 1, 9);
  });

  it('on a noisy device, one sample beyond the noise is not news; two in a row on the same side are', () => {
    // Samples of 110 and 90 in turn raise cv² to about 0.01 (past the quiet 0.0025): the noise is
    // 3 σ + 2 % ≈ 32 %. One sample of 200 is beyond it but not news: weighed as within the noise
    // (serviceSmoothing here, with no latency known). The second in a row is news of a slower
    // device: slowerSmoothing.
    const p = measured(100);
    let busy = M * 100;
    let n = M;
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
  const kind = (name: string, devices: number[], completions: number[], busyMs: number[]) => ({ name, devices, preparing: 0, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions, busyMs });

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
    expect(p.state().terms['planRatePerSec']).toBe(40);
    // The engine names the next kind before it asks: the plan is then counted in c's items.
    p.nextDispatchAt(snapshot({ now: 100, backlog: 5, nextKind: 2, devices: [dev(1, 100), dev(1, 400)], kinds: at(1, 1) }));
    expect(p.state().terms['planRatePerSec']).toBe(25);
  });

  it('under a budget, a kind measured nowhere borrows the quickest of the kinds its device measured; without one, their mean', () => {
    // One device measured a at 100 ms and b at 400 ms; c is measured nowhere. Under a budget c's
    // first items are paced as a's (2 ÷ 100 → 20/s), not at the mean (2 ÷ 250 → 8/s): an unknown
    // kind is planned as quick, so the items queued behind it are dispatched before the devices
    // run dry, and the budget bounds the first fill should it be heavy. Without one, the mean.
    const rates = (budgetTotalBytes: number) => {
      const p = createStokerPacer({ targetWaiting: 2 });
      const at = (a: number, b: number) => [kind('a', [0], [a], [100 * a]), kind('b', [0], [b], [400 * b]), kind('c', [0], [0], [0])];
      p.observe(snapshot({ now: 0, backlog: 5, nextKind: 2, devices: [dev(0, 0)], kinds: at(0, 0), budgetTotalBytes }));
      p.observe(snapshot({ now: 600, backlog: 5, nextKind: 2, devices: [dev(2, 500)], kinds: at(1, 1), budgetTotalBytes }));
      return p.state().kinds;
    };
    expect(rates(2 ** 30)).toEqual([
      { name: 'a', estimatedPerSec: 20 },
      { name: 'b', estimatedPerSec: 5 },
      { name: 'c', estimatedPerSec: 20 },
    ]);
    expect(rates(Infinity)?.[2]).toEqual({ name: 'c', estimatedPerSec: 8 });
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

describe('stoker pacer: its options and priors', () => {
  it('refuses per-device and per-kind priors that are not arrays of numbers ≥ 0, naming the option', () => {
    for (const bad of [5, [1, -1], [1, 'x'], [NaN]]) {
      expect(() => createStokerPacer({ priorDeviceServiceMs: bad as unknown as number[] })).toThrow(/priorDeviceServiceMs must be an array of numbers ≥ 0, one per device/);
    }
    for (const bad of [5, null, { a: 3 }, { a: [1, -2] }, { a: ['1'] }, { a: [1], b: [NaN] }]) {
      expect(() => createStokerPacer({ priorKindServiceMs: bad as unknown as Record<string, number[]> })).toThrow(/priorKindServiceMs must map kind names to arrays of numbers ≥ 0/);
    }
    expect(() => createStokerPacer({ priorDeviceServiceMs: [0, 100], priorKindServiceMs: { a: [0, 50] } })).not.toThrow();
  });

  it('knows a rate from a per-device prior alone (no bootstrap), the device’s own over the global one, a kind’s own over both', () => {
    const devices = [dev(0, 0, 0), dev(0, 0, 0)];
    const p = createStokerPacer({ priorServiceMs: 1000, priorDeviceServiceMs: [0, 100] });
    p.observe(snapshot({ now: 0, backlog: 1, devices }));
    // Device 0 at the global 1000 ms, device 1 at its own 100 ms: 2 + 20 items/s.
    expect(p.state().ratePerSec).toBe(22);
    expect(p.state().mode).toBe('steady');
    const only = createStokerPacer({ priorDeviceServiceMs: [0, 100] });
    only.observe(snapshot({ now: 0, backlog: 1, devices }));
    expect(only.state().ratePerSec).toBe(40); // device 0 borrows the 100 ms known on device 1
    expect(only.state().mode).toBe('steady');
    const none = createStokerPacer({ priorDeviceServiceMs: [0, 0] });
    none.observe(snapshot({ now: 0, backlog: 1, devices }));
    expect(none.state().mode).toBe('bootstrap');
    // Kind b has its own prior on device 0 (50 ms); a has none and takes the device's.
    const kinds = (['a', 'b'] as const).map((name) => ({ name, devices: [0, 1], preparing: 0, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions: [0, 0], busyMs: [0, 0] }));
    const byKind = createStokerPacer({ priorServiceMs: 1000, priorDeviceServiceMs: [0, 100], priorKindServiceMs: { b: [50, 0] } });
    byKind.observe(snapshot({ now: 0, backlog: 1, nextKind: 0, devices, kinds }));
    expect(byKind.state().kinds).toEqual([
      { name: 'a', estimatedPerSec: 22 },
      { name: 'b', estimatedPerSec: 60 },
    ]);
  });

  it('starts its latency second moment from a remembered mean and spread, and sizes the margin from a full window of samples', () => {
    // Prior 10 000 ± 1000; one sample of 12 000 (its square 1.44e8): weight 0.03.
    const p = createStokerPacer({ priorServiceMs: 500, priorLatencyMs: 10_000, priorLatencySdMs: 1000, targetWaiting: 4 });
    p.observe(prepSnap(0, 0, 0, 0, { backlog: 1 }));
    p.observe(prepSnap(1, 1, 12_000, 1.44e8, { backlog: 1 }));
    const mean = 10_000 + 0.03 * 2000;
    const sq = 1e8 + 1e6 + 0.03 * (1.44e8 - 1e8 - 1e6);
    const margin = (2 * Math.sqrt(sq - mean * mean)) / Math.sqrt(2 / 0.03 - 1);
    expect(p.state().terms['latencyMs']).toBeCloseTo(mean, 9);
    expect(p.state().terms['inventoryTarget']).toBeCloseTo(0.004 * (mean + margin) + 2 + 4, 9);
  });

  it('takes the mean square of several preparations in one event per preparation', () => {
    // 10 000 alone, then two of 8000 and 12 000 (mean 10 000, mean square 1.04e8) with weight
    // max(1 − 0.97², 2 ÷ 3): σ² = ⅔ (1.04e8 − 1e8), over 3 samples.
    const p = createStokerPacer({ priorServiceMs: 500, targetWaiting: 4 });
    p.observe(prepSnap(0, 1, 10_000, 1e8, { backlog: 1 }));
    p.observe(prepSnap(1, 3, 30_000, 1e8 + 6.4e7 + 1.44e8, { backlog: 1 }));
    const sd = Math.sqrt((2 / 3) * (1.04e8 - 1e8));
    expect(p.state().terms['inventoryTarget']).toBeCloseTo(0.004 * (10_000 + (2 * sd) / Math.sqrt(3)) + 2 + 4, 9);
  });
});

describe('stoker pacer: the rate cap and the waiting integral’s clamp', () => {
  it('caps the rate at what the devices drain (smoothed occupancy, occupancyTauMs) plus catchUp × λ, at least λ', () => {
    // λ = 2 ÷ 500 ms; both workers busy: the occupancy after 2 s of τ = 1 s is 1 − e^−2 = 0.865, so
    // the cap is (0.865 + 0.2) λ. Nothing is in flight, so the rate is the cap.
    const p = createStokerPacer({ priorServiceMs: 500, targetWaiting: 4, occupancyTauMs: 1000 });
    for (const t of [0, 1000]) p.observe(snapshot({ now: t, backlog: 10, devices: [dev(0, 0, 2)] }));
    expect(p.state().intervalMs).toBeCloseTo(1 / 0.004, 9); // (1 − e^−1) + 0.2 < 1: λ
    p.observe(snapshot({ now: 2000, backlog: 10, devices: [dev(0, 0, 2)] }));
    expect(p.state().intervalMs).toBeCloseTo(1 / ((1 - Math.exp(-2) + 0.2) * 0.004), 9);
  });

  it('with a skewed device, caps it at what the devices were seen to complete (smoothed over occupancyTauMs) plus catchUp × λ, where that is more', () => {
    // A skewed device (samples of 20 and 180 ms in turn, cv 0.8: a stock of some 40 items; λ ≈
    // 2 ÷ 100 ms, latency 30 s), 60 in flight (beyond the head start), busy throughout: λ by the
    // occupancy is about λ. Then 40 completions in one second (τ = 1 s): 0.04 per ms seen
    // drained, and the cap 0.04 + 0.2 λ, below u = λ + (J* − J) ÷ 7.5 s.
    const p = createStokerPacer({ targetWaiting: 4, priorLatencyMs: 30_000, occupancyTauMs: 1000 });
    let busy = 0;
    p.observe(snapshot({ now: 0, backlog: 10, preparing: 60, devices: [dev(0, 0)] }));
    for (let i = 1; i <= 400; i++) {
      busy += i % 2 === 0 ? 180 : 20;
      p.observe(snapshot({ now: i * 50, backlog: 10, preparing: 60, devices: [dev(i, busy)] }));
    }
    p.observe(snapshot({ now: 21_000, backlog: 10, preparing: 60, deviceCompletions: 40, devices: [dev(400, busy)] }));
    const lambda = (p.state().ratePerSec as number) / 1000;
    // (λ·L at λ less its doubt: one standard error of a rate from 400 samples of cv² ≈ 0.64, 4 %.)
    const doubt = p.state().terms['rateDoubt'] as number;
    expect(doubt).toBeGreaterThan(0.95);
    expect(doubt).toBeLessThan(0.97);
    expect((p.state().terms['inventoryTarget'] as number) - lambda * doubt * 30_000 - 6).toBeGreaterThan(30);
    expect(p.state().intervalMs).toBeCloseTo(1 / (0.04 + 0.2 * lambda), 9);
  });

  it('aims the waiting integral at the waiting target plus a skewed device’s stock: the stock’s waiting is no error', () => {
    // A skewed device (samples of 20 and 180 ms in turn, cv 0.8; latency 60 s) with a stock of over
    // 20 items; 10 waiting, below target + stock, integrates upward once settled (aimed at the
    // target alone it would integrate down: 10 is above 4); target + stock + 10 waiting, down.
    const integral = (waiting: number) => {
      const q = createStokerPacer({ targetWaiting: 4, priorLatencyMs: 60_000, occupancyTauMs: 1, waitingTauMs: 1, catchUp: 10, settleBand: 10 });
      let b = 0;
      for (let i = 0; i <= 400; i++) {
        b += i === 0 ? 0 : i % 2 === 0 ? 180 : 20;
        q.observe(snapshot({ now: i * 50, devices: [dev(i, b)] }));
      }
      const lambda = (q.state().ratePerSec as number) / 1000;
      const stock = (q.state().terms['inventoryTarget'] as number) - lambda * (q.state().terms['rateDoubt'] as number) * 60_000 - 2 - 4;
      const inFlight = Math.round((q.state().terms['inventoryTarget'] as number) - waiting - 2);
      for (let t = 20_000; t <= 400_000; t += 1000) q.observe(snapshot({ now: t, backlog: 10, waiting, preparing: inFlight, onDevice: 2, devices: [dev(400, b, 2)] }));
      return { stock, integral: q.state().terms['integral'] as number };
    };
    const low = integral(10);
    expect(low.stock).toBeGreaterThan(20);
    expect(low.integral).toBeGreaterThan(0);
    const high = integral(low.stock + 4 + 10);
    expect(high.integral).toBeLessThan(0);
  });

  it('holds the waiting integral within [−target, target + workers]', () => {
    // As in the integral test above, with room to move: a cap of 11λ (catchUp 10) and a settle band that never breaks.
    const p = createStokerPacer({ priorServiceMs: 500, priorLatencyMs: 1000, targetWaiting: 4, occupancyTauMs: 1, waitingTauMs: 1, catchUp: 10, settleBand: 10 });
    const out: number[] = [];
    for (let t = 0; t <= 10_000; t += 1000) {
      p.observe(snapshot({ now: t, backlog: 10, waiting: 0, preparing: 8, onDevice: 2, devices: [dev(0, 0, 2)] }));
      out.push(p.state().terms['integral'] as number);
    }
    expect(out).toEqual([0, 0, 0, 1, 2, 3, 4, 5, 6, 6, 6]);
  });
});

describe('stoker pacer: the weight of a sample within the noise', () => {
  it('is 2 ÷ (n² + 1) once the latency makes the estimate’s noise matter: n = λ_device · latency · cv ÷ (target ÷ 2)', () => {
    // 40 samples of 100 (no noise: the running-mean floor, 1 ÷ samples, is then under the weight),
    // then 110 (news of a slower device, weight ½: 105; cv² slow 0.005 · 9 · 0.0004), then 105.5,
    // within the noise: λ_device = 2 ÷ 105, latency 100 s, target 2.
    const N = Math.max(40, NOISE_SAMPLES);
    const p = createStokerPacer({ targetWaiting: 2, priorServiceMs: 100, priorLatencyMs: 100_000 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(N, N * 100)] }));
    p.observe(snapshot({ now: 200, backlog: 10, devices: [dev(N + 1, N * 100 + 110)] }));
    expect(2000 / (p.state().ratePerSec as number)).toBeCloseTo(105, 9);
    p.observe(snapshot({ now: 300, backlog: 10, devices: [dev(N + 2, N * 100 + 215.5)] }));
    const n = ((2 / 105) * 100_000 * Math.sqrt(0.005 * 9 * 0.0004)) / 1;
    const w = Math.min(0.3, 2 / (n * n + 1));
    expect(2000 / (p.state().ratePerSec as number)).toBeCloseTo(105 + w * 0.5, 9);
  });

  it('is never less than a running mean’s weight, 1 ÷ samples, unless the estimate started from a prior', () => {
    // As above, but measured from the start: 1 ÷ (N + 2) > 2 ÷ (n² + 1) = 0.030.
    const N = NOISE_SAMPLES;
    const p = createStokerPacer({ targetWaiting: 2, priorLatencyMs: 100_000 });
    p.observe(snapshot({ now: 0, backlog: 10, devices: [dev(0, 0)] }));
    p.observe(snapshot({ now: 100, backlog: 10, devices: [dev(N, N * 100)] }));
    p.observe(snapshot({ now: 200, backlog: 10, devices: [dev(N + 1, N * 100 + 110)] }));
    p.observe(snapshot({ now: 300, backlog: 10, devices: [dev(N + 2, N * 100 + 215.5)] }));
    expect(2000 / (p.state().ratePerSec as number)).toBeCloseTo(105 + 0.5 / (N + 2), 9);
  });
});

describe('stoker pacer: batching devices, skewed devices, worker limits', () => {
  it('plans a batching device at its fit’s time per item at full batches, each kind at its own fit', () => {
    // Kind a's batches take 1 + n ms, b's 3 + 2n; each kind runs batches of 4, 2 and 1. The
    // device's fit over all of them is 2 + 1.5n (the mean at each size): 8 ms a full batch of 4,
    // 2 ms an item, 2 workers → 1000 items/s. Kind a: 5 ÷ 4 ms → 1600/s; b: 11 ÷ 4 ms → 727.27/s.
    const p = createStokerPacer({ targetWaiting: 2 });
    const cost = { a: (n: number) => 1 + n, b: (n: number) => 3 + 2 * n };
    const count = { a: { n: 0, items: 0, busy: 0 }, b: { n: 0, items: 0, busy: 0 } };
    const snap = (now: number) => {
      const kinds = (['a', 'b'] as const).map((name) => ({ name, devices: [0], preparing: 0, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions: [count[name].items], busyMs: [count[name].busy], deviceBatches: { batches: [count[name].n], items: [count[name].items] } }));
      const all = { n: count.a.n + count.b.n, items: count.a.items + count.b.items, busy: count.a.busy + count.b.busy };
      return snapshot({ now, backlog: 10, nextKind: 0, devices: [{ workers: 2, busy: 2, completions: all.items, busyMs: all.busy, batch: { maxItems: 4, batches: all.n, items: all.items } }], kinds });
    };
    p.observe(snap(0));
    expect(p.state().devices?.[0]?.batch).toBeNull();
    let t = 0;
    for (const name of ['a', 'b'] as const) {
      for (const n of [4, 2, 1]) {
        count[name].n++;
        count[name].items += n;
        count[name].busy += cost[name](n);
        p.observe(snap((t += 10)));
      }
    }
    const d = p.state().devices?.[0];
    expect(d?.batch?.fixedMs).toBeCloseTo(2, 9);
    expect(d?.batch?.perItemMs).toBeCloseTo(1.5, 9);
    expect(d?.estimatedPerSec).toBeCloseTo(1000, 6);
    expect(p.state().kinds?.[0]?.estimatedPerSec).toBeCloseTo(1600, 6);
    expect(p.state().kinds?.[1]?.estimatedPerSec).toBeCloseTo(8000 / 11, 6);
    expect(p.state().terms['planRatePerSec']).toBeCloseTo(1600, 6);
  });

  it('holds a safety stock for a skewed device’s own spread: safetyZ · √(λ · latency · cv²), none on a steady one', () => {
    // Samples of 20 and 180 ms in turn (cv 0.8) on 2 saturated workers, nothing queued (no integral).
    const stock = (latencyMs: number, safetyZ: number, skewed: boolean) => {
      const p = createStokerPacer({ targetWaiting: 4, priorLatencyMs: latencyMs, safetyZ });
      let busy = 0;
      p.observe(snapshot({ now: 0, devices: [dev(0, 0)] }));
      for (let i = 1; i <= 400; i++) {
        busy += skewed ? (i % 2 === 0 ? 180 : 20) : 100;
        p.observe(snapshot({ now: i * 50, devices: [dev(i, busy)] }));
      }
      const lambda = (p.state().ratePerSec as number) / 1000;
      return { lambda, stock: (p.state().terms['inventoryTarget'] as number) - lambda * ((p.state().terms['rateDoubt'] as number | undefined) ?? 1) * latencyMs - 2 - 4 };
    };
    const base = stock(1000, 2, true);
    expect(stock(1000, 1, true).stock).toBeCloseTo(base.stock / 2, 9); // safetyZ
    expect(stock(1000, 2, false).stock).toBeCloseTo(0, 9);
    // The cv² it implies, (stock ÷ 2)² ÷ (λ · 1000 ms), is a skewed one (> 0.25) and about the
    // samples' own 0.64: deviations are taken from the estimate, which is off over the first
    // samples and then steps toward each sample by its weight (2 ÷ 65 here), so each reads a little
    // larger (0.74 after 400 samples, still a running mean of them all).
    const cv2 = (base.stock / 2) ** 2 / (base.lambda * 1000);
    expect(cv2).toBeGreaterThan(0.6);
    expect(cv2).toBeLessThanOrEqual(0.64 * 1.2);
  });

  it('judges the skew by the noise with its tail: rare long samples that the 3 σ clip would hide make a device skewed', () => {
    // 49 samples of 50 ms, then one of 2000, over and over (mean 89 ms, cv² 9.4). Clipped at 3 σ of
    // itself the noise would settle at 0.23 (not skewed: no stock, and each long sample news); the
    // noise with its tail (clipped at TAIL_Z σ) reads it whole: a stock of safetyZ · √(λ · L · cv²).
    const p = createStokerPacer({ targetWaiting: 4, priorLatencyMs: 10_000 });
    let busy = 0;
    p.observe(snapshot({ now: 0, devices: [dev(0, 0)] }));
    for (let i = 1; i <= 1000; i++) {
      busy += i % 50 === 0 ? 2000 : 50;
      p.observe(snapshot({ now: i * 50, devices: [dev(i, busy)] }));
    }
    const lambda = (p.state().ratePerSec as number) / 1000;
    const stock = (p.state().terms['inventoryTarget'] as number) - lambda * (p.state().terms['rateDoubt'] as number) * 10_000 - 2 - 4;
    const cv2 = (stock / 2) ** 2 / (lambda * 10_000);
    expect(cv2).toBeGreaterThan(3);
    expect(cv2).toBeLessThan(12);
    // The estimate is the mean, not dragged up by each long sample as news of a slower device.
    expect(2000 / (p.state().ratePerSec as number)).toBeGreaterThan(89 * 0.8);
    expect(2000 / (p.state().ratePerSec as number)).toBeLessThan(89 * 1.2);
  });

  it('gives a skewed device no head start: with 10 in flight the cap is max(λ, drain + catchUp × λ), not 4λ', () => {
    // The skewed device of the stock test (cv 0.8, λ = 2 ÷ 100 ms, latency 10 s, no spread): a stock
    // of 2 √(λ L cv²) ≈ 22.6 items. Nothing drains (the devices show no occupancy and no completions
    // after the first snapshot), so the cap is λ with 10 in flight as with 40: a λ read from a few
    // samples of a skewed device may be several times the truth, and 4λ of it over-fills for minutes.
    const rate = (inFlight: number) => {
      const p = createStokerPacer({ targetWaiting: 4, priorLatencyMs: 10_000, occupancyTauMs: 1 });
      let busy = 0;
      p.observe(snapshot({ now: 0, devices: [dev(0, 0, 0)] }));
      for (let i = 1; i <= 400; i++) {
        busy += i % 2 === 0 ? 180 : 20;
        p.observe(snapshot({ now: i * 50, devices: [dev(i, busy, 0)] }));
      }
      p.observe(snapshot({ now: 30_000, backlog: 10, preparing: inFlight, devices: [dev(400, busy, 0)] }));
      return { interval: p.state().intervalMs as number, lambda: (p.state().ratePerSec as number) / 1000 };
    };
    const few = rate(10);
    expect(few.interval).toBeCloseTo(1 / few.lambda, 9);
    const more = rate(40);
    expect(more.interval).toBeCloseTo(1 / more.lambda, 9);
  });

  it('plans λ·L of a skewed device at λ ÷ (1 + √(cv² ÷ n)) (one standard error of its rate), and a steady one at λ', () => {
    // Samples of 20 and 180 ms in turn (cv² 0.64): after n samples the factor is 1 ÷ (1 + √(cv² ÷ n)),
    // cv² the noise with its tail (it reads about the samples' own: see the stock test).
    const doubt = (n: number, skewed: boolean) => {
      const p = createStokerPacer({ targetWaiting: 4, priorLatencyMs: 10_000 });
      let busy = 0;
      p.observe(snapshot({ now: 0, devices: [dev(0, 0)] }));
      for (let i = 1; i <= n; i++) {
        busy += skewed ? (i % 2 === 0 ? 180 : 20) : 100;
        p.observe(snapshot({ now: i * 50, devices: [dev(i, busy)] }));
      }
      return p.state().terms['rateDoubt'];
    };
    // (Over the first samples the deviations are from an estimate still far off, and read larger.)
    expect(doubt(400, false)).toBeUndefined();
    const ds = [16, 100, 400].map((n) => doubt(n, true) as number);
    const cv2s = ds.map((d, i) => (1 / d - 1) ** 2 * ([16, 100, 400][i] as number));
    expect(ds[0]).toBeLessThan(ds[1] as number);
    expect(ds[1]).toBeLessThan(ds[2] as number);
    expect(ds[2]).toBeLessThan(1);
    for (const cv2 of cv2s) {
      expect(cv2).toBeGreaterThan(0.5);
      expect(cv2).toBeLessThan(1.2);
    }
    expect(cv2s[2]).toBeLessThan(0.64 * 1.2);
  });

  it('limits a thrashing device to its best number of busy workers, and learns afresh after idle', () => {
    // 4 workers: 40 ms an item with 4 busy, 10 ms with 2 busy (2 ÷ 10 beats 4 ÷ 40 by 100 %). After
    // K_MIN samples of each it runs 2, trying 1 until that is measured.
    const p = createStokerPacer({ priorServiceMs: 40 });
    let completions = 0;
    let busyMs = 0;
    let concurrency = 0;
    p.observe(snapshot({ now: 0, backlog: 10, devices: [{ workers: 4, busy: 4, completions: 0, busyMs: 0, concurrencyTotal: 0 }] }));
    const feed = (k: number, ms: number) => {
      completions++;
      busyMs += ms;
      concurrency += k;
      p.observe(snapshot({ now: completions * 10, backlog: 10, waiting: 1, devices: [{ workers: 4, busy: k, completions, busyMs, concurrencyTotal: concurrency }] }));
    };
    for (let i = 0; i < 5; i++) feed(4, 40);
    for (let i = 0; i < 4; i++) feed(2, 10);
    expect(p.workerLimit?.(0)).toBe(Infinity);
    feed(2, 10);
    expect(p.state().devices?.[0]?.workerLimit).toBe(2);
    expect(p.workerLimit?.(0)).toBe(1);
    // Nothing queued but items in flight: the limit stays.
    p.observe(snapshot({ now: 1000, backlog: 0, onDevice: 2, devices: [{ workers: 4, busy: 2, completions, busyMs, concurrencyTotal: concurrency }] }));
    expect(p.state().devices?.[0]?.workerLimit).toBe(2);
    // Idle: the next workload may not thrash.
    p.observe(snapshot({ now: 2000, backlog: 0, devices: [{ workers: 4, busy: 0, completions, busyMs, concurrencyTotal: concurrency }] }));
    expect(p.state().devices?.[0]?.workerLimit).toBeNull();
    expect(p.workerLimit?.(0)).toBe(Infinity);
  });
});

describe('stoker pacer: the plan across kinds, exactly', () => {
  const kindAt = (name: string, completions: number, busyMs: number, preparing = 0) => ({ name, devices: [0], preparing, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions: [completions], busyMs: [busyMs] });

  it('counts an item of another kind in flight as λ ÷ λ_k items of the kind planned in', () => {
    // heavy 400 ms (λ 5/s), light 100 ms (20/s), 2 workers, planned in heavy. 20 light items in
    // preparation count as 20 × ¼ = 5 heavy: J* = 2 + 2 = 4 (no latency yet), u = λ + (4 − 5) ÷ 1 s = 4/s.
    const plan = (preparingKind: 0 | 1) => {
      const p = createStokerPacer({ targetWaiting: 2 });
      const at = (c: number, pre: number) => [kindAt('heavy', c, 400 * c, preparingKind === 0 ? pre : 0), kindAt('light', c, 100 * c, preparingKind === 1 ? pre : 0)];
      p.observe(snapshot({ now: 0, nextKind: 0, devices: [dev(0, 0, 0)], kinds: at(0, 0) }));
      p.observe(snapshot({ now: 100, backlog: 5, preparing: 20, nextKind: 0, devices: [dev(2, 500, 0)], kinds: at(1, 20) }));
      return p.state();
    };
    expect(plan(1).intervalMs).toBeCloseTo(250, 9);
    expect(plan(1).terms['planRatePerSec']).toBe(5);
    expect(plan(0).mode).toBe('hold'); // 20 heavy overfill it
  });

  it('counts the completions of another kind by their device time too (what the devices drain, for the rate cap)', () => {
    // Planned in heavy (λ 5/s, light 20/s): 1 heavy and 8 light done since the last look are 1 + 8 × ¼ = 3 heavy.
    const plan = new KindPlan(2, NaN, NaN);
    const at = (heavy: number, light: number) => snapshot({ nextKind: 0, devices: [dev(heavy + light, 400 * heavy + 100 * light)], kinds: [kindAt('heavy', heavy, 400 * heavy), kindAt('light', light, 100 * light)] });
    const estimates = [{ sawSaturated: true, completions: 0, services: [newService(0, 0, 400), newService(0, 0, 100)], byBusy: [], concurrencySeen: 0, busyMsSeen: 0, limit: Infinity, probe: Infinity, occupancy: 1, lastBusy: 2, lastWorkers: 2, plannedWorkers: 2, plannedAt: 0, satMs: 0, satCompletions: 0, saturatedNow: false, spanMs: 0, spanCompletions: 0, checkStreak: 0, sinceWindow: 0, checkRatio: NaN, correction: 1, fit: null, kindFits: [] }];
    plan.estimate(at(0, 0), estimates);
    expect(plan.completedSince(at(0, 0))).toBe(0);
    expect(plan.completedSince(at(1, 8))).toBeCloseTo(3, 12);
    expect(plan.completedSince(at(1, 8))).toBe(0);
    // Without kinds: the devices' completions as they are.
    const one = new KindPlan(2, NaN, NaN);
    expect(one.completedSince(snapshot({ deviceCompletions: 7 }))).toBe(7);
    expect(one.completedSince(snapshot({ deviceCompletions: 9 }))).toBe(2);
  });

  it('states the capacity in partitions of the mix completed lately: 1 ÷ Σ share_k ÷ λ_k, whichever kind is next', () => {
    // heavy 400 ms (λ 5/s), light 100 ms (20/s), 2 workers. 1 heavy and 3 light done: 1 ÷ (¼ ÷ 5 + ¾ ÷ 20) = 11.43/s,
    // planned in heavy or in light alike (it was λ of the next kind: 5/s, then 20/s).
    const plan = new KindPlan(2, NaN, NaN);
    const at = (heavy: number, light: number, next: number) => snapshot({ nextKind: next, devices: [dev(heavy + light, 400 * heavy + 100 * light)], kinds: [kindAt('heavy', heavy, 400 * heavy), kindAt('light', light, 100 * light)] });
    const estimates = [{ sawSaturated: true, completions: 0, services: [newService(0, 0, 400), newService(0, 0, 100)], byBusy: [], concurrencySeen: 0, busyMsSeen: 0, limit: Infinity, probe: Infinity, occupancy: 1, lastBusy: 2, lastWorkers: 2, plannedWorkers: 2, plannedAt: 0, satMs: 0, satCompletions: 0, saturatedNow: false, spanMs: 0, spanCompletions: 0, checkStreak: 0, sinceWindow: 0, checkRatio: NaN, correction: 1, fit: null, kindFits: [] }];
    plan.estimate(at(0, 0, 0), estimates);
    plan.completedSince(at(0, 0, 0));
    // Nothing completed yet: the plan's own λ.
    expect(plan.mixRate() * 1000).toBeCloseTo(5, 12);
    plan.completedSince(at(1, 3, 0));
    expect(plan.mixRate() * 1000).toBeCloseTo(1 / (0.25 / 5 + 0.75 / 20), 9);
    plan.estimate(at(1, 3, 1), estimates);
    expect(plan.lambda * 1000).toBeCloseTo(20, 12);
    expect(plan.mixRate() * 1000).toBeCloseTo(1 / (0.25 / 5 + 0.75 / 20), 9);
  });

  it('keeps the kind it plans in while the next is unknown (−1 or out of range)', () => {
    const p = createStokerPacer({ targetWaiting: 2 });
    const kinds = [kindAt('heavy', 1, 400), kindAt('light', 1, 100)];
    p.observe(snapshot({ now: 0, nextKind: 1, devices: [dev(0, 0)], kinds: [kindAt('heavy', 0, 0), kindAt('light', 0, 0)] }));
    p.observe(snapshot({ now: 100, nextKind: 1, devices: [dev(2, 500)], kinds }));
    expect(p.state().terms['planRatePerSec']).toBe(20);
    p.observe(snapshot({ now: 200, nextKind: -1, devices: [dev(2, 500)], kinds }));
    expect(p.state().terms['planRatePerSec']).toBe(20);
    p.observe(snapshot({ now: 300, nextKind: 5, devices: [dev(2, 500)], kinds }));
    expect(p.state().terms['planRatePerSec']).toBe(20);
    p.observe(snapshot({ now: 400, nextKind: 0, devices: [dev(2, 500)], kinds }));
    expect(p.state().terms['planRatePerSec']).toBe(5);
  });

  it('leaves out a device no queued job can use', () => {
    const p = createStokerPacer({ priorServiceMs: 100 });
    p.observe(snapshot({ now: 0, backlog: 1, devices: [dev(0, 0, 0), { ...dev(0, 0, 0), eligible: false }] }));
    expect(p.state().ratePerSec).toBe(20);
  });
});

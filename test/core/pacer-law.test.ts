/**
 * The stoker pacer's control law with exact values on hand-made snapshots (DESIGN §3), so that a
 * change to any of its terms fails here and not only, if at all, in a simulation bound:
 *
 *   λ  = workers ÷ service time            = 2 ÷ 500 ms                      = 0.004 items/ms
 *   margin = safetyZ · σ ÷ √(2/w − 1)       = 2 · 1000 ÷ √(2/0.03 − 1)         = 246.81 ms
 *   J* = λ·(L + margin) + workers + target = 0.004 · 10 246.81 + 2 + 4       = 46.987 items
 *   u  = λ + (J* − J) ÷ max(1 s, fillFraction · L) = λ + (J* − J) ÷ 2500 ms
 *   cap: 4λ while J < headStart · σ · λ = 12 (a cold start), else max(λ, draining + catchUp·λ) = λ
 *
 * with a prior service time of 500 ms per item on 2 workers, a prior preparation latency of
 * 10 s ± 1 s, the default options, and a snapshot at t = 0 before any completion.
 */
import { describe, expect, it } from 'vitest';
import { createPacer, type PacerSnapshot } from '../../src/core/index.js';
import { snapshot } from './helpers.js';

const LAMBDA = 2 / 500;
const MARGIN = (2 * 1000) / Math.sqrt(2 / 0.03 - 1);
const TARGET = LAMBDA * (10_000 + MARGIN) + 2 + 4;

function pacerAt(inFlight: { preparing: number; waiting: number; onDevice: number }): { s: PacerSnapshot; p: ReturnType<typeof createPacer> } {
  const p = createPacer('stoker', { priorServiceMs: 500, priorLatencyMs: 10_000, priorLatencySdMs: 1000 });
  const s = snapshot({ backlog: 100, ...inFlight, preparingSteps: inFlight.preparing, devices: [{ workers: 2, busy: 2, completions: 0, busyMs: 0 }] });
  p.observe(s);
  return { s, p };
}

describe('stoker pacer: the control law, exactly', () => {
  it('plans the inventory by Little’s law: λ·(latency + its margin) + the workers + the waiting target', () => {
    const { p } = pacerAt({ preparing: 14, waiting: 4, onDevice: 2 });
    expect(MARGIN).toBeCloseTo(246.81, 2);
    expect(p.state().terms['inventoryTarget']).toBeCloseTo(TARGET, 9);
    expect(p.state().ratePerSec).toBeCloseTo(LAMBDA * 1000, 12);
  });

  it('dispatches at λ plus the inventory gap over the fill time, between 0 and its cap', () => {
    // J = 50 (above J* by 3.013): u = λ − 3.013 ÷ 2500 ms.
    const { p, s } = pacerAt({ preparing: 44, waiting: 4, onDevice: 2 });
    const u = LAMBDA + (TARGET - 50) / 2500;
    expect(p.state().intervalMs).toBeCloseTo(1 / u, 9);
    expect(p.nextDispatchAt(s)).toBe(0); // a whole credit at the start
    // After a dispatch (J = 51) the next comes one interval of the new rate later.
    p.onDispatch({ ...s, preparing: 45, preparingSteps: 45, dispatched: 1 });
    const u1 = LAMBDA + (TARGET - 51) / 2500;
    expect(p.nextDispatchAt({ ...s, preparing: 45, preparingSteps: 45, dispatched: 1 })).toBeCloseTo(1 / u1, 9);
  });

  it('caps the rate at λ once the pipeline holds a head start, at 4λ before it', () => {
    // J = 20 ≥ 12: u = λ + 26.99 ÷ 2500 would be 3.7λ; capped at λ.
    expect(pacerAt({ preparing: 14, waiting: 4, onDevice: 2 }).p.state().intervalMs).toBeCloseTo(1 / LAMBDA, 9);
    // J = 10 < 12 (cold): u = λ + 36.99 ÷ 2500 = 4.7λ; capped at 4λ.
    expect(pacerAt({ preparing: 4, waiting: 4, onDevice: 2 }).p.state().intervalMs).toBeCloseTo(1 / (4 * LAMBDA), 9);
  });

  it('holds once the inventory is so far above its target that the rate would be negative', () => {
    // J = 66: u = λ − 19.01 ÷ 2500 < 0.
    const { p, s } = pacerAt({ preparing: 60, waiting: 4, onDevice: 2 });
    expect(p.state().mode).toBe('hold');
    expect(p.state().intervalMs).toBeNull();
    p.onDispatch(s);
    expect(p.nextDispatchAt(s)).toBe(Infinity);
  });
});

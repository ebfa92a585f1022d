/**
 * The admission gate (src/server/admission.ts) on a manual clock and a given loop utilisation:
 * while the engine has work and the loop is over 75 % busy it cuts the submit rate, to 50/s at
 * least — and not below 1.25 × the rate jobs end: a server whose jobs end as fast as they come is
 * keeping up (a user's 100 requests/s waited up to 3.6 s for their 202s, held at 50/s).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AdmissionGate } from '../../dist/server/admission.js';

const gates: AdmissionGate[] = [];
afterEach(() => {
  for (const g of gates.splice(0)) g.close();
});

/** A gate whose loop is `used` busy, on a clock the test moves; submits and ends at the rates given, for `seconds`. */
function drive(submitsPerS: number, endsPerS: number, seconds: number, used = 0.9): AdmissionGate {
  let now = 0;
  const gate = new AdmissionGate(() => true, { now: () => now, used: () => used });
  gates.push(gate);
  // Every 10 ms: the submits and ends of those 10 ms.
  for (let t = 0; t < seconds * 100; t++) {
    now += 10;
    for (let i = 0; i < (submitsPerS * (t + 1)) / 100 - (submitsPerS * t) / 100; i++) void gate.enter();
    for (let i = 0; i < (endsPerS * (t + 1)) / 100 - (endsPerS * t) / 100; i++) gate.ended();
  }
  return gate;
}

describe('the admission gate', () => {
  it('holds a flood whose jobs do not end (they wait behind the running work) at 50 submits/s', () => {
    expect(drive(400, 0, 5).ratePerS).toBe(50);
  });

  it('admits as fast as jobs end, and a quarter more, however busy the loop', () => {
    const rate = drive(100, 100, 5).ratePerS;
    expect(rate).toBeGreaterThanOrEqual(1.2 * 100);
    expect(rate).toBeLessThanOrEqual(1.25 * 100);
  });

  it('does not hold submits back while the loop has room', () => {
    expect(drive(400, 0, 5, 0.5).ratePerS).toBe(Infinity);
  });
});

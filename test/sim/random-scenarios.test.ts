import { describe, expect, it } from 'vitest';
import { PACER_NAMES, createPacer } from '../../src/core/index.js';
import { randomScenario } from '../../src/sim/random-scenarios.js';
import { parseScenario } from '../../src/sim/scenario.js';
import { simulate } from '../../src/sim/simulator.js';

describe('randomScenario (stoker bench --random)', () => {
  it('gives the same scenario for the same seed and index, and another for another', () => {
    expect(randomScenario(4, 7)).toEqual(randomScenario(4, 7));
    expect(randomScenario(4, 7)).not.toEqual(randomScenario(4, 8));
    expect(randomScenario(4, 7)).not.toEqual(randomScenario(5, 7));
  });

  it('draws valid scenarios that cover the family: several kinds, knees, bimodal preparation, Poisson arrivals, caps', () => {
    const drawn = Array.from({ length: 200 }, (_, i) => randomScenario(1, i));
    for (const input of drawn) expect(() => parseScenario(input)).not.toThrow();
    const share = (f: (s: (typeof drawn)[number]) => boolean) => drawn.filter(f).length / drawn.length;
    const kinds = (s: (typeof drawn)[number]) => Object.values(s.kinds);
    expect(share((s) => kinds(s).length > 1)).toBeGreaterThan(0.4);
    expect(share((s) => kinds(s).some((k) => k.contention !== undefined))).toBeGreaterThan(0.25);
    expect(share((s) => kinds(s).some((k) => k.prepare.type === 'empirical'))).toBeGreaterThan(0.1);
    expect(share((s) => s.arrivals.some((a) => 'poisson' in a))).toBeGreaterThan(0.3);
    expect(share((s) => s.maxPreparing !== undefined)).toBeGreaterThan(0.1);
  });

  it('every built-in pacer finishes every job of 30 of them', () => {
    for (let i = 0; i < 30; i++) {
      const s = parseScenario(randomScenario(1, i));
      for (const name of PACER_NAMES) {
        const r = simulate(s, { seed: 1, pacer: (o) => createPacer(name, o) });
        expect({ scenario: s.name, pacer: name, unfinished: r.unfinishedJobs }).toEqual({ scenario: s.name, pacer: name, unfinished: 0 });
        expect(r.metrics.jobsDone).toBe(r.jobsSubmitted);
      }
    }
  });
});

import { performance } from 'node:perf_hooks';
import type { PacerFactory } from '../core/index.js';
import type { Scenario } from './scenario.js';
import { simulate } from './simulator.js';

export interface SpeedResult {
  scenario: string;
  pacer: string;
  /** Engine events processed per run. */
  events: number;
  /** Simulated time per run, hours. */
  simulatedHours: number;
  /** Wall-clock time of each run, ms (the first includes JIT warm-up). */
  runsMs: number[];
  /** Events per wall-clock second of the fastest and of the median run. */
  bestEventsPerSec: number;
  medianEventsPerSec: number;
  /** Wall-clock seconds per simulated day (median run). */
  secondsPerSimulatedDay: number;
}

/** Times `runs` simulations of one scenario with one pacer (wall clock; a benchmark, not a test). */
export function measureSpeed(scenario: Scenario, pacer: PacerFactory, runs = 5): SpeedResult {
  const runsMs: number[] = [];
  let events = 0;
  let simulatedMs = 0;
  let name = '';
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const r = simulate(scenario, { pacer });
    runsMs.push(performance.now() - t0);
    events = r.events;
    simulatedMs = r.simulatedMs;
    name = r.pacer;
  }
  const sorted = [...runsMs].sort((a, b) => a - b);
  const best = sorted[0] as number;
  const median = sorted[Math.floor(sorted.length / 2)] as number;
  return {
    scenario: scenario.name,
    pacer: name,
    events,
    simulatedHours: simulatedMs / 3_600_000,
    runsMs,
    bestEventsPerSec: (events / best) * 1000,
    medianEventsPerSec: (events / median) * 1000,
    secondsPerSimulatedDay: median / 1000 / (simulatedMs / 86_400_000),
  };
}

import { performance } from 'node:perf_hooks';
import type { PacerFactory } from '../core/index.js';
import { randomScenario } from '../sim/random-scenarios.js';
import { parseScenario, type ScenarioInput } from '../sim/scenario.js';
import { simulate, type SimResult } from '../sim/simulator.js';
import { toJson } from '../sim/report.js';
import { formatTable } from './table.js';

/** One pacer on one random scenario, against `unpaced` on the same one (same seed). */
interface Outcome {
  /** unpaced's time to finish all the work ÷ this pacer's: over 1, it finished sooner. */
  speed: number;
  /** Peak memory ÷ unpaced's. */
  memory: number;
  /** p99 job latency ÷ unpaced's. */
  latencyP99: number;
  unfinishedJobs: number;
}

const ratio = (x: number | null, y: number | null) => (x !== null && y !== null && y > 0 ? x / y : 1);

function outcome(r: SimResult, base: SimResult): Outcome {
  return { speed: base.simulatedMs / r.simulatedMs, memory: ratio(r.metrics.peakMemoryBytes, base.metrics.peakMemoryBytes), latencyP99: ratio(r.metrics.jobLatencyP99Ms, base.metrics.jobLatencyP99Ms), unfinishedJobs: r.unfinishedJobs };
}

const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const quantile = (sorted: readonly number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;

/**
 * `stoker bench --random N`: N scenarios drawn from randomScenario's family (seed `seed`), each
 * run under every pacer and under `unpaced`, the reference: per pacer the spread of its speed
 * (unpaced's time to finish all the work ÷ its own), its memory and p99 job latency against
 * unpaced's, and the scenarios where the first pacer did worst (to rerun: --json has each
 * scenario's input, for `stoker simulate`).
 */
export function randomBench(n: number, seed: number, factories: readonly PacerFactory[], names: readonly string[], json: boolean, io: { out: (s: string) => void; err: (s: string) => void }): void {
  const rows: { scenario: ScenarioInput; knee: boolean; outcomes: Record<string, Outcome> }[] = [];
  const unpaced = factories[names.indexOf('unpaced')] as PacerFactory;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const input = randomScenario(seed, i);
    const scenario = parseScenario(input);
    const base = simulate(scenario, { pacer: unpaced });
    const outcomes: Record<string, Outcome> = {};
    factories.forEach((f, k) => {
      outcomes[names[k] as string] = outcome(f === unpaced ? base : simulate(scenario, { pacer: f }), base);
    });
    rows.push({ scenario: input, knee: Object.values(input.kinds).some((k) => k.contention !== undefined), outcomes });
    if ((i + 1) % 10 === 0 || i + 1 === n) io.err(`[${i + 1}/${n}] random scenarios … ${Math.round(performance.now() - t0)} ms\n`);
  }
  const summary = names.map((pacer) => {
    const of = (key: keyof Outcome) => rows.map((r) => (r.outcomes[pacer] as Outcome)[key]).sort((a, b) => a - b);
    const speed = of('speed');
    const bySpeed = (knee: boolean) => {
      const xs = rows.filter((r) => r.knee === knee).map((r) => (r.outcomes[pacer] as Outcome).speed);
      return xs.length ? mean(xs) : null;
    };
    return { pacer, speedMean: mean(speed), speedMeanKnee: bySpeed(true), speedMeanNoKnee: bySpeed(false), speedP10: quantile(speed, 0.1), speedMin: speed[0] as number, slowerThan09: speed.filter((x) => x < 0.9).length, memoryMean: mean(of('memory')), latencyP99Mean: mean(of('latencyP99')), unfinishedJobs: of('unfinishedJobs').reduce((a, b) => a + b, 0) };
  });
  const first = names[0] as string;
  const worst = rows
    .map((r) => ({ name: r.scenario.name, outcomes: r.outcomes }))
    .sort((a, b) => (a.outcomes[first] as Outcome).speed - (b.outcomes[first] as Outcome).speed)
    .slice(0, 5);
  if (json) {
    io.out(toJson({ seed, scenarios: n, summary, rows }));
    return;
  }
  const f = (x: number | null) => (x === null ? '–' : x.toFixed(3));
  io.out(`${n} random scenarios (family seed ${seed}); speed = unpaced's time to finish all the work ÷ the pacer's (over 1: sooner), memory and p99 job latency ÷ unpaced's\n`);
  const knees = rows.filter((r) => r.knee).length;
  io.out(formatTable(['pacer', 'speed mean', 'p10', 'min', 'below 0.9', `with a knee (${knees})`, `without (${n - knees})`, 'peak memory mean', 'job p99 mean', 'unfinished jobs'], summary.map((s) => [s.pacer, f(s.speedMean), f(s.speedP10), f(s.speedMin), String(s.slowerThan09), f(s.speedMeanKnee), f(s.speedMeanNoKnee), f(s.memoryMean), f(s.latencyP99Mean), String(s.unfinishedJobs)])));
  io.out(`\nwhere ${first} was slowest (speed; the others' alongside):\n`);
  io.out(formatTable(['scenario', ...names], worst.map((w) => [w.name, ...names.map((p) => f((w.outcomes[p] as Outcome).speed))])));
}

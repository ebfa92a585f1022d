import { PRIORITIES, type JobSpec } from '../core/index.js';
import { Rng } from './random.js';
import { deviceGroups, itemWork, workUnitMs } from './devices.js';
import { meanMs, prepareHighMs, prepareStep, ScenarioError, type Scenario } from './scenario.js';

/** What a scenario gives before anything runs: its jobs in arrival order, and the window its steady measures use. */

/** A job of the scenario's arrivals, and when it arrives. */
export interface PlannedJob {
  atMs: number;
  spec: JobSpec;
}

/** Expands arrivals into concrete jobs (ids job-0, job-1, … in arrival order). */
export function planArrivals(s: Scenario, seed: number): PlannedJob[] {
  const rng = new Rng(seed, -1);
  const raw: { atMs: number; partitions: number; kind: string; priority: JobSpec['priority']; deadlineS: number | undefined }[] = [];
  for (const a of s.arrivals) {
    if ('poisson' in a) {
      const mean = 1000 / a.poisson.ratePerS;
      for (let t = a.poisson.fromS * 1000 + rng.exponential(mean); t < a.poisson.untilS * 1000; t += rng.exponential(mean)) {
        raw.push({ atMs: t, partitions: a.partitions, kind: a.kind, priority: a.priority, deadlineS: a.deadlineS });
      }
    } else {
      for (let j = 0; j < a.jobs; j++) raw.push({ atMs: (a.atS + j * a.everyS) * 1000, partitions: a.partitions, kind: a.kind, priority: a.priority, deadlineS: a.deadlineS });
    }
  }
  // Stable sort keeps file order among equal times.
  raw.sort((x, y) => x.atMs - y.atMs);
  return raw.map((r, i) => {
    const k = s.kinds[r.kind];
    const spec: JobSpec = { id: `job-${i}`, kind: r.kind, priority: r.priority, partitions: r.partitions };
    if (k) spec.memory = { prepareBytes: k.memory.prepareBytes, deviceBytes: k.memory.deviceBytes };
    if (r.deadlineS !== undefined) spec.deadline = r.atMs + r.deadlineS * 1000;
    return { atMs: r.atMs, spec };
  });
}

/**
 * Checks that the scenario's faults and cancel events name jobs (and partitions) of its arrivals
 * with this seed (Poisson arrivals draw their number): a misspelt id would inject nothing, and a
 * failure test would pass without testing anything.
 */
export function checkJobRefs(s: Scenario, jobs: readonly PlannedJob[], seed: number): void {
  if (s.faults.length === 0 && !s.events.some((e) => e.type === 'cancel')) return;
  const partitions = new Map(jobs.map((j) => [j.spec.id, j.spec.partitions]));
  const known = jobs.length === 0 ? 'it has none' : `its jobs are job-0 … job-${jobs.length - 1}${s.arrivals.some((a) => 'poisson' in a) ? ` with seed ${seed}` : ''}`;
  const problems: string[] = [];
  s.faults.forEach((f, i) => {
    const n = partitions.get(f.job);
    if (n === undefined) problems.push(`  faults[${i}].job: no job ${JSON.stringify(f.job)} arrives in this scenario (${known})`);
    else if (f.partition >= n) problems.push(`  faults[${i}].partition: job ${JSON.stringify(f.job)} has ${n} partitions (0 … ${n - 1})`);
  });
  const arrives = new Map<string, number>();
  for (const j of jobs) if (!arrives.has(j.spec.id)) arrives.set(j.spec.id, j.atMs);
  s.events.forEach((e, i) => {
    if (e.type !== 'cancel') return;
    const at = arrives.get(e.job);
    if (at === undefined) problems.push(`  events[${i}].job: no job ${JSON.stringify(e.job)} arrives in this scenario (${known})`);
    // (It cancelled nothing, without a word: the job ran to its end.)
    else if (e.atS * 1000 < at) problems.push(`  events[${i}].atS: job ${JSON.stringify(e.job)} arrives at ${at / 1000} s, after this cancel at ${e.atS} s, which would cancel nothing: cancel it at ${at / 1000} s or later`);
  });
  if (problems.length) throw new ScenarioError(`scenario ${s.name} is invalid:\n${problems.join('\n')}`);
}

/**
 * The steady window, the same rule for every pacer: from the first arrival + two passes through
 * the pipeline (2 × (p99 preparation latency + mean service time): a pacer that knows nothing
 * must see items complete once before it can fill the pipeline at the right rate), to the end
 * of an ideal fluid drain (every job prepared in the mean latency and served at full capacity)
 * minus the p99 latency (the drain goes no faster than the preparations can at their best
 * concurrency, where they contend). Where kinds differ in device time (kinds.<name>.service),
 * each kind is news to a pacer in the same way: the window starts two passes after the devices
 * could first reach each kind's first job (the jobs ahead of it in the queue — arrived no later,
 * with a higher priority or the same one and sooner — served at full capacity). Scenarios may set it. A scenario too short to have a steady state gets an empty
 * window, and the steady measures are null.
 */
export function steadyWindow(s: Scenario, jobs: PlannedJob[], capacity: number): { fromMs: number; toMs: number } {
  if (s.steady) return { fromMs: s.steady.fromS * 1000, toMs: s.steady.toS * 1000 };
  const kinds = Object.values(s.kinds);
  const high = Math.max(...kinds.map(prepareHighMs));
  const mean = meanPrepareMs(s, jobs);
  const service = Math.max(...s.devices.flatMap((d) => [d.service, ...kinds.flatMap((k) => (k.service ? [k.service] : []))].map((x) => (meanMs(x) + (d.batch ? meanMs(d.batch.fixed) : 0)) / d.speed)));
  const workOf = kindWork(s);
  let reach = jobs[0]?.atMs ?? 0;
  if (kinds.some((k) => k.service)) {
    // Ahead of a job in the queue: those that arrived no later with a higher priority, or the same one and sooner.
    const rank = (j: PlannedJob) => PRIORITIES.indexOf(j.spec.priority ?? 'normal');
    const seen = new Set<string>();
    jobs.forEach((first, i) => {
      if (seen.has(first.spec.kind)) return;
      seen.add(first.spec.kind);
      let ahead = 0;
      for (let k = 0; k < jobs.length; k++) {
        const j = jobs[k] as PlannedJob;
        if (j.atMs > first.atMs) break;
        if (rank(j) < rank(first) || (rank(j) === rank(first) && k < i)) ahead += j.spec.partitions * workOf(j.spec.kind);
      }
      reach = Math.max(reach, first.atMs, ahead / capacity);
    });
  }
  const from = reach + 2 * (high + service);
  // Where preparations contend, the drain goes no faster than they can at their best concurrency.
  // (Worked out once per kind, not once per job: a day's jobs are thousands.)
  const rates = new Map<string, number>();
  const rate = (kind: string) => {
    let r = rates.get(kind);
    if (r === undefined) rates.set(kind, (r = Math.min(capacity / workOf(kind), prepareCapacity(s.kinds[kind]))));
    return r;
  };
  let end = 0;
  for (const j of jobs) end = Math.max(end, j.atMs + mean) + j.spec.partitions / rate(j.spec.kind);
  return { fromMs: from, toMs: Math.max(from, end - high) };
}

/**
 * Preparation throughput of a kind at its best concurrency, items/ms: max over n steps of n ×
 * items per step ÷ (mean step latency × contention factor at n); Infinity when it still grows at
 * the end of the list.
 */
function prepareCapacity(k: Scenario['kinds'][string] | undefined): number {
  if (!k) return Infinity;
  const list = k.contention;
  let best = 0;
  let at = 0;
  list.forEach((f, i) => {
    if ((i + 1) / f > best) {
      best = (i + 1) / f;
      at = i;
    }
  });
  const step = prepareStep(k);
  return at === list.length - 1 ? Infinity : (best * step.items) / step.ms;
}

/** A kind's items take its share of work: its service time ÷ the device's, over the devices (1: the device's own). */
function kindWork(s: Scenario): (kind: string) => number {
  const groups = deviceGroups(s);
  return (kind: string) => {
    const own = s.kinds[kind]?.service;
    return groups.reduce((sum, g) => sum + itemWork(g, own, workUnitMs(g, s)), 0) / groups.length;
  };
}

/** The mean work of an item (see kindWork), weighted by the partitions of each kind: 1 where no kind has its own service time. */
export function meanWorkPerItem(s: Scenario, jobs: PlannedJob[]): number {
  const workOf = kindWork(s);
  let sum = 0;
  let n = 0;
  for (const j of jobs) {
    sum += workOf(j.spec.kind) * j.spec.partitions;
    n += j.spec.partitions;
  }
  return n > 0 ? sum / n : 1;
}

/** Mean base preparation latency, weighted by the partitions of each kind. */
export function meanPrepareMs(s: Scenario, jobs: PlannedJob[]): number {
  const stepMs = new Map(Object.entries(s.kinds).map(([name, k]) => [name, prepareStep(k).ms]));
  let sum = 0;
  let n = 0;
  for (const j of jobs) {
    const ms = stepMs.get(j.spec.kind);
    if (ms === undefined) continue;
    sum += ms * j.spec.partitions;
    n += j.spec.partitions;
  }
  return n > 0 ? sum / n : 0;
}


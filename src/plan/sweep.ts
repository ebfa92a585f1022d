/**
 * The sweep behind `stoker plan`: a scenario simulated across settings an operator controls
 * (target waiting, memory budget, preparation cap, device workers, pacer) over several seeds; the
 * frontier of what each costs (throughput vs peak memory vs p99 job latency), and the setting to
 * run: the least memory, then latency, that keeps throughput within 1 % of the best.
 */
import { createPacer, optionsRead, PACERS } from '../core/index.js';
import { parseScenario, simulate, type Scenario } from '../sim/index.js';
import { MAX_WORKERS } from '../sim/scenario.js';

export interface PlanSetting {
  pacer: string;
  targetWaiting: number;
  /** null: no budget. */
  budgetBytes: number | null;
  /** null: no cap. */
  maxPreparing: number | null;
  /** Workers per device, by device group (as the scenario lists them). */
  workers: number[];
}

export interface PlanRow extends PlanSetting {
  /** Per seed, the jobs that failed or were cancelled (sorted ids): those every setting loses are the scenario's own (its faults, its cancels). */
  failedJobs: string[][];
  /** Means over the seeds. itemsPerSec: items finished on the devices per second of the whole run (to its last job's end); the rest as the simulator's metrics. */
  itemsPerSec: number;
  throughputRatio: number | null;
  occupancy: number | null;
  waitingMean: number | null;
  peakMemoryBytes: number;
  jobLatencyP99Ms: number | null;
  /** Jobs still unfinished when the run ended (its horizon, or a stall), summed over the seeds. */
  cutOff: number;
  /** Runs (of the seeds) the horizon ended with jobs unfinished. */
  horizonRuns: number;
  /** Jobs this setting lost, summed over the seeds: cut off, or failed where some other setting did not (see {@link settle}; before it, every failure). */
  unfinished: number;
}

export interface GridOptions {
  pacers?: readonly string[];
  targets?: readonly number[];
}

/**
 * The settings to try: each pacer × target waiting (1, 2, 4, 8 by default; only the scenario's
 * for a pacer that does not read it) × budget (the
 * scenario's own — none where it sets none: a budget is the machine's memory, no setting may
 * exceed it — and ½ and ¾ of the peak memory the scenario's own setting reached with the first
 * pacer) × cap on preparations (none, the scenario's own, and the items the devices need in flight by Little's law,
 * ×1 and ×1.5: the throughput the scenario reaches with no budget and no cap × the slowest kind's
 * preparation latency) × workers (the scenario's; one fewer where it has more than one; one more
 * where the device's contention list says how it slows with that many busy — beyond the list the
 * simulator would hold its last factor, which is no measurement).
 */
export function planGrid(s: Scenario, base: { peakMemoryBytes: number; littleItems: number }, options: GridOptions = {}): PlanSetting[] {
  const pacers = [...new Set(options.pacers ?? ['stoker'])];
  const targets = options.targets ?? [1, 2, 4, 8];
  const own = s.budgetBytes ?? null;
  const budgets = [own, ...new Set(base.peakMemoryBytes > 0 ? [0.5, 0.75].map((f) => Math.round(base.peakMemoryBytes * f)).filter((b) => own === null || b < own) : [])];
  const caps = [...new Set([null, s.maxPreparing ?? null, ...[1, 1.5].map((f) => Math.max(1, Math.ceil(base.littleItems * f)))])];
  const workersNow = s.devices.map((d) => d.workers);
  const more = s.devices.map((d) => (d.contention.length > d.workers && d.workers < MAX_WORKERS ? d.workers + 1 : d.workers));
  // Fewer workers only where no scenario event names a worker that would then not exist.
  const highest = s.events.reduce((n, e) => (e.type === 'workerLost' || e.type === 'workerReturned' ? Math.max(n, e.worker) : n), -1);
  const fewer = workersNow.map((w) => Math.max(1, w - 1));
  const workerSets = [workersNow, ...(workersNow.some((w) => w > 1) && fewer.every((w) => w > highest) ? [fewer] : []), ...(more.some((w, i) => w !== workersNow[i]) ? [more] : [])];
  const out: PlanSetting[] = [];
  for (const pacer of pacers) {
    // A pacer that never reads the target (unpaced, window) runs the same whatever it is: once.
    const its = readsTarget(pacer) ? targets : [s.targetWaiting];
    for (const targetWaiting of its) for (const budgetBytes of budgets) for (const maxPreparing of caps) for (const workers of workerSets) out.push({ pacer, targetWaiting, budgetBytes, maxPreparing, workers });
  }
  return out;
}

/** Whether a built-in pacer reads targetWaiting (a name not built in: taken as reading it). */
function readsTarget(pacer: string): boolean {
  const entry = Object.hasOwn(PACERS, pacer) ? PACERS[pacer] : undefined;
  return !entry || optionsRead(entry.create, { targetWaiting: 4 }).has('targetWaiting');
}

/** The scenario with a setting applied (validated like a user's file). */
export function applySetting(s: Scenario, p: PlanSetting): Scenario {
  const rest: Partial<Scenario> = { ...s };
  delete rest.budgetBytes;
  delete rest.maxPreparing;
  return parseScenario(
    {
      ...rest,
      targetWaiting: p.targetWaiting,
      ...(p.budgetBytes === null ? {} : { budgetBytes: p.budgetBytes }),
      ...(p.maxPreparing === null ? {} : { maxPreparing: p.maxPreparing }),
      devices: s.devices.map((d, i) => ({ ...d, workers: p.workers[i] ?? d.workers })),
    },
    `${s.name} with a plan setting`,
  );
}

/** Simulates one setting over the seeds; the means of what the plan compares. */
export function runSetting(s: Scenario, p: PlanSetting, seeds: readonly number[]): PlanRow {
  const scenario = applySetting(s, p);
  const runs = seeds.map((seed) => simulate(scenario, { seed, pacer: (o) => createPacer(p.pacer, o) }));
  const mean = (xs: (number | null)[]) => (xs.some((x) => x === null) ? null : (xs as number[]).reduce((a, b) => a + b, 0) / xs.length);
  return {
    ...p,
    // Over the whole run, to its last job's end: a steady window's rate is over a window each
    // setting's own capacity places, so settings are not compared over the same work (one worker
    // read 2.02 items/s against two's 1.80 on a burst two finished 6 s sooner); and not to its last
    // event, which a scenario's events may hold past the end (worker-flap's run to 1770 s read the
    // same for settings that ended at 1199 and 1240 s).
    itemsPerSec: mean(runs.map((r) => (r.lastEndMs > 0 ? r.completions / (r.lastEndMs / 1000) : 0))) as number,
    throughputRatio: mean(runs.map((r) => r.metrics.throughputRatio)),
    occupancy: mean(runs.map((r) => r.metrics.occupancy)),
    waitingMean: mean(runs.map((r) => r.metrics.waitingMean)),
    peakMemoryBytes: mean(runs.map((r) => r.metrics.peakMemoryBytes)) as number,
    jobLatencyP99Ms: mean(runs.map((r) => r.metrics.jobLatencyP99Ms)),
    failedJobs: runs.map((r) => r.failures.map((f) => f.job).sort()),
    cutOff: runs.reduce((n, r) => n + r.unfinishedJobs, 0),
    horizonRuns: runs.filter((r) => r.endedBy === 'horizon').length,
    unfinished: runs.reduce((n, r) => n + r.unfinishedJobs + r.failures.length, 0),
  };
}

/**
 * Counts against each setting only what it loses itself: the jobs still unfinished at the horizon
 * and those that failed under it but not under every setting (a scenario's scripted faults and
 * cancels fail whatever the setting).
 */
export function settle(rows: readonly PlanRow[]): PlanRow[] {
  const seeds = rows[0]?.failedJobs.length ?? 0;
  const always: Set<string>[] = [];
  for (let i = 0; i < seeds; i++) {
    let common = new Set<string>(rows[0]?.failedJobs[i] ?? []);
    for (const r of rows) {
      const mine = new Set<string>(r.failedJobs[i] ?? []);
      common = new Set<string>([...common].filter((j) => mine.has(j)));
    }
    always.push(common);
  }
  return rows.map((r) => ({ ...r, unfinished: r.cutOff + r.failedJobs.reduce((n, jobs, i) => n + jobs.filter((j) => !(always[i] as Set<string>).has(j)).length, 0) }));
}

/** A setting's p99 job latency, ms; a run with no finished job ranks last. */
const p99 = (r: PlanRow): number => r.jobLatencyP99Ms ?? Infinity;

/** Differences in throughput and p99 latency smaller than this fraction are the seeds' noise, not a reason to keep a setting. */
const NOISE = 0.005;

/**
 * The settings no other beats on every count: none has as much throughput, no more peak memory
 * and no more p99 latency (within 0.5 % on latency: seed noise), and is better in one. Of settings that ran identically (a cap or budget that never bound), or within that noise
 * and 1 % of memory of one listed, the first stands for them. Sorted by peak memory.
 */
export function frontier(rows: readonly PlanRow[]): PlanRow[] {
  // Throughput counts exactly (so the best setting is never dropped, and dominance stays
  // transitive); latency within seed noise.
  const beats = (a: PlanRow, b: PlanRow) =>
    a.itemsPerSec >= b.itemsPerSec &&
    a.peakMemoryBytes <= b.peakMemoryBytes &&
    p99(a) <= p99(b) * (1 + NOISE) &&
    (a.itemsPerSec > b.itemsPerSec || a.peakMemoryBytes < b.peakMemoryBytes || p99(a) < p99(b) * (1 - NOISE));
  const same = (a: PlanRow, b: PlanRow) => a.itemsPerSec === b.itemsPerSec && a.peakMemoryBytes === b.peakMemoryBytes && a.jobLatencyP99Ms === b.jobLatencyP99Ms && a.waitingMean === b.waitingMean;
  const usable = rows.filter((r, i) => r.unfinished === 0 && !rows.slice(0, i).some((o) => o.unfinished === 0 && same(o, r)));
  const front = usable.filter((r) => !usable.some((o) => beats(o, r))).sort((a, b) => a.peakMemoryBytes - b.peakMemoryBytes || p99(a) - p99(b));
  // Settings within the noise of another (on all three counts) add nothing: of such a group the
  // simplest stands for it (as the recommendation would choose).
  const groups: PlanRow[][] = [];
  for (const r of front) {
    const g = groups.find((x) => close(x[0] as PlanRow, r));
    if (g) g.push(r);
    else groups.push([r]);
  }
  return groups.map((g) => [...g].sort(simpler)[0] as PlanRow);
}

/** Whether two settings did the same within seed noise: throughput and p99 latency within 0.5 %, peak memory within 1 %. */
export function close(a: PlanRow, b: PlanRow): boolean {
  const ratio = (x: number, y: number) => (x === y ? 0 : Math.abs(x / y - 1));
  return ratio(a.itemsPerSec, b.itemsPerSec) <= NOISE && ratio(p99(a), p99(b)) <= NOISE && ratio(a.peakMemoryBytes, b.peakMemoryBytes) <= 0.01;
}

/** Of settings that do as well, the simpler first: fewer workers, a smaller target, no cap, no budget. */
function simpler(a: PlanRow, b: PlanRow): number {
  const workers = (r: PlanRow) => r.workers.reduce((x, y) => x + y, 0);
  const unset = (v: number | null) => (v === null ? 0 : 1);
  return workers(a) - workers(b) || a.targetWaiting - b.targetWaiting || unset(a.maxPreparing) - unset(b.maxPreparing) || unset(a.budgetBytes) - unset(b.budgetBytes);
}

/**
 * The setting to run: among those that finish every job with throughput within 1 % of the best,
 * the least peak memory (within 1 %), then the least p99 latency (within seed noise), then the
 * fewest workers, the smallest target, no cap and no budget before one (the simplest of equals);
 * null when no setting finishes every job.
 */
export function recommend(rows: readonly PlanRow[]): PlanRow | null {
  const pool = nearBest(rows);
  if (pool.length === 0) return null;
  return [...leastLatency(leastMemory(pool))].sort(simpler)[0] ?? null;
}

/** The settings that finish every job within 1 % of the best throughput among them. */
function nearBest(rows: readonly PlanRow[]): PlanRow[] {
  const usable = rows.filter((r) => r.unfinished === 0);
  const best = Math.max(...usable.map((r) => r.itemsPerSec));
  return usable.filter((r) => r.itemsPerSec >= 0.99 * best);
}

/** Those of `pool` with the least peak memory, within 1 %. */
function leastMemory(pool: readonly PlanRow[]): PlanRow[] {
  const memory = Math.min(...pool.map((r) => r.peakMemoryBytes));
  return pool.filter((r) => r.peakMemoryBytes <= memory * 1.01);
}

/** Those of `pool` with the least p99 job latency, within seed noise. */
function leastLatency(pool: readonly PlanRow[]): PlanRow[] {
  const latency = Math.min(...pool.map(p99));
  return pool.filter((r) => p99(r) <= latency * (1 + NOISE));
}

/** How much quicker (p99 job latency) a setting at the recommendation's throughput must be before the plan names it beside the recommendation. */
const LATENCY_TRADE = 1.25;

/**
 * Beside the recommendation (chosen on memory first): the setting with the least p99 job latency
 * among those that finish every job within 1 % of the best throughput, where it is at least
 * LATENCY_TRADE × quicker — what the recommendation's memory costs in latency (on a service its
 * arrivals bound, where every setting finishes what arrives, a recommendation took 2.2 × the
 * least p99 latency to halve the memory). Null when no such setting is that much quicker.
 */
export function lowerLatency(rows: readonly PlanRow[], recommended: PlanRow): PlanRow | null {
  const pool = nearBest(rows);
  if (!(p99(recommended) > LATENCY_TRADE * Math.min(...pool.map(p99)))) return null;
  // Of those within noise of the least latency, the least memory, then the simplest.
  return [...leastMemory(leastLatency(pool))].sort(simpler)[0] ?? null;
}

/**
 * The recommended setting as `stoker serve` config lines. The preparation cap is the server's
 * preparation slots, `[prepare] threads × concurrency` (threads for CPU-bound preparations; a
 * preparation that awaits I/O can share a thread: raise concurrency and lower threads, keeping
 * the product). A server's kind runs on one device: devices that run every kind (no
 * `devices[].kinds`) are one server device with all their workers (each worker process learns its
 * index from STOKER_WORKER, to pin itself to its GPU); where groups run named kinds, each group is
 * a device — by its `devices[].name` where the scenario names them all apart, else the first
 * `[device]` and the others by their index (rename them to yours) — and each kind's `[kinds.NAME]
 * device` says which.
 */
export function configLines(r: PlanRow, s: Scenario): string[] {
  const lines = ['[engine]', `pacer = ${JSON.stringify(r.pacer)}`, `targetWaiting = ${r.targetWaiting}`, `budgetBytes = ${r.budgetBytes === null ? '"unlimited"' : r.budgetBytes}`];
  if (r.maxPreparing !== null) lines.push('[prepare]', `# at most ${r.maxPreparing} preparations at once: threads × concurrency = ${r.maxPreparing}`, `threads = ${r.maxPreparing}`, 'concurrency = 1');
  else lines.push(`# [prepare]: the recommendation caps no preparations (the pacer paces them): leave threads × concurrency as they are${s.maxPreparing ? ` (the run's cap: ${s.maxPreparing})` : ''}`);
  const workersOf = (i: number) => r.workers[i] as number;
  // A device's table: by its name where the scenario has one (fitted from a server's trace: a
  // plan said [device] for the service's [devices.gpu], which ran every step).
  // (A TOML bare key is letters, digits, _ and -: a name with a dot is quoted.)
  const table = (name: string) => (name === 'default' ? '[device]' : `[devices.${/^[A-Za-z0-9_-]+$/.test(name) ? name : JSON.stringify(name)}]`);
  const named = s.devices.every((d) => d.name !== undefined && d.count === 1) && new Set(s.devices.map((d) => d.name)).size === s.devices.length;
  const pinned = s.devices.some((d) => d.kinds);
  if (named && !pinned) {
    s.devices.forEach((d, i) => lines.push(table(d.name as string), `workers = ${workersOf(i)}`));
    return lines;
  }
  if (!pinned) {
    const total = s.devices.reduce((n, d, i) => n + d.count * workersOf(i), 0);
    const devices = s.devices.reduce((n, d) => n + d.count, 0);
    lines.push('[device]');
    if (devices > 1) {
      let from = 0;
      const ranges = s.devices.map((d, i) => {
        const n = d.count * workersOf(i);
        const at = `${d.count} device${d.count === 1 ? '' : 's'} × ${workersOf(i)} worker${workersOf(i) === 1 ? '' : 's'} (workers ${from}–${from + n - 1})`;
        from += n;
        return at;
      });
      lines.push(`# every kind runs on every device: ${ranges.join(', ')} as one device; a process worker reads its index from STOKER_WORKER to pin itself to its GPU`);
    }
    lines.push(`workers = ${total}`);
    return lines;
  }
  // Each group by its name where the scenario names them all apart (a trial's named groups lost
  // their [kinds.NAME] device lines, and one named among unnamed ones was called group1).
  const own = s.devices.map((d, i) => d.name ?? (i === 0 ? 'default' : `group${i}`));
  const apart = new Set(own).size === own.length;
  const name = (i: number) => (apart ? (own[i] as string) : i === 0 ? 'default' : `group${i}`);
  s.devices.forEach((d, i) => {
    const w = workersOf(i);
    lines.push(table(name(i)));
    if (d.count > 1) lines.push(`# ${d.count} devices × ${w} worker${w === 1 ? '' : 's'} each, as one device: a process worker reads its index (0–${d.count * w - 1}) from STOKER_WORKER; worker i on device ⌊i ÷ ${w}⌋`);
    lines.push(`workers = ${d.count * w}`);
  });
  for (const kind of Object.keys(s.kinds)) {
    const runs = s.devices.flatMap((d, i) => (!d.kinds || d.kinds.includes(kind) ? [i] : []));
    // (A TOML bare key is letters, digits, _ and -: a kind name with a dot is quoted.)
    const key = /^[A-Za-z0-9_-]+$/.test(kind) ? kind : JSON.stringify(kind);
    if (runs.length === 0 || (runs.length === 1 && name(runs[0] as number) === 'default')) continue;
    if (runs.length === 1) lines.push(`[kinds.${key}]`, `module = "./${kind}-kind.mjs"   # your module of kind ${kind}`, `device = ${JSON.stringify(name(runs[0] as number))}`);
    else lines.push(`# kind ${kind} runs on ${runs.map(name).join(', ')} in the scenario: a kind runs on one device in stoker serve — give it one ([kinds.${key}] device)`);
  }
  return lines;
}

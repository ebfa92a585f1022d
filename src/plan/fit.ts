/**
 * A scenario fitted from a recorded run (a timeline: what ran where, and the jobs submitted): per
 * kind the preparation latencies and how they grow with concurrent preparations, per device its
 * workers and service times and how they grow with busy workers, the arrivals as they came, and
 * each kind's memory. Distributions are empirical (the measured values, deflated by the contention
 * each one ran under), so the simulator replays the run's own spread.
 */
import type { BatchSetting, TimelineJob, TimelineLane, TimelineSpan } from '../core/index.js';
import type { ScenarioInput } from '../sim/index.js';

/** What a recorded run gives the fitter (a timeline, or a Chrome trace read back). */
export interface RecordedRun {
  lanes: readonly TimelineLane[];
  spans: readonly TimelineSpan[];
  jobs: readonly TimelineJob[];
  /** The run's memory budget, bytes (the machine's memory: no setting may go over it); null or absent: none recorded. */
  budgetBytes?: number | null;
  /** The run's cap on preparations at once; null or absent: none recorded. */
  maxPreparing?: number | null;
  /** The run's waiting target (its own setting, which the plan shows beside the others); null or absent: not recorded. */
  targetWaiting?: number | null;
  /** The devices' names by index, where the run recorded them (a server's trace). */
  deviceNames?: Readonly<Record<number, string>>;
  /** Each device's batching setting, where the run recorded it (null: one item per step). */
  deviceBatches?: readonly (BatchSetting | null)[];
  /** The kinds prepared in batches, and their setting, where the run recorded it. */
  prepareBatches?: Readonly<Record<string, BatchSetting>>;
}

/**
 * A batched stage's fit: a batch of n items took fixed + Σ (each item's own time) at one user (the
 * simulator's affine law), fitted by least squares on the batches' deflated times; the per-item
 * times are each batch's share past the fixed part.
 */
export interface BatchFit {
  /** The setting the scenario gets: recorded by the run, or (recorded: false) the largest batch seen and no wait. */
  maxItems: number;
  maxWaitS: number;
  recorded: boolean;
  batches: number;
  /** Mean items per batch. */
  meanItems: number;
  fixedS: number;
  /** The median per-item time past the fixed part, seconds. */
  perItemMedianS: number;
}

/** How one stage's time grows with concurrency: per level, the samples and their median (seconds). */
export interface ContentionBin {
  concurrency: number;
  samples: number;
  medianS: number;
  factor: number;
}

export interface StageFit {
  samples: number;
  /** Of the times as measured, seconds. */
  medianS: number;
  p90S: number;
  /** Of the times deflated to the lowest concurrency measured (what the scenario's distribution holds: below that level the fit knows no slowdown). */
  baseMedianS: number;
  bins: ContentionBin[];
  contention: number[];
  /**
   * A slowdown the levels the spans ran at suggested (`factor` at `level`) that the spans' starts
   * did not bear out — those that started with more running took no longer: taken as none.
   */
  unconfirmed?: { level: number; factor: number };
}

export interface FitReport {
  jobs: number;
  partitions: number;
  /** From the first job to the last span's end, seconds. */
  spanS: number;
  kinds: Record<string, { jobs: number; partitions: number; prepareBytes: number; deviceBytes: number; prepare: StageFit; prepareBatch?: BatchFit; service: StageFit | null }>;
  devices: { device: number; name?: string; workers: number; service: StageFit; batch?: BatchFit }[];
  notes: string[];
  /**
   * Whether the fitted scenario holds the whole run: every span is of a job the run recorded (a
   * window of a server's history begins amid older jobs) and no kind was left out — what a replay
   * of it can be held against.
   */
  wholeRun: boolean;
}

/** How the fit's note that the run recorded no memory budget begins. */
export const NO_BUDGET_NOTE = 'the run recorded no memory budget';

export class PlanError extends Error {
  override readonly name = 'PlanError';
}

/** Fewest samples a stage needs to be fitted; a contention level counts with at least MIN_BIN of them and MIN_BIN_SHARE of all (a few spans at the edges of a run mislead). */
const MIN_SAMPLES = 10;
const MIN_BIN = 20;
const MIN_BIN_SHARE = 0.02;
/** Values kept per empirical distribution (evenly spaced order statistics: the shape, not the order). */
const KEEP = 400;

/**
 * Fits a scenario to a recorded run. Throws a {@link PlanError} saying what is missing when the run
 * is too short (fewer than 10 finished preparations or device steps) or lacks job records.
 */
export function fitRun(run: RecordedRun, name = 'fitted'): { scenario: ScenarioInput; fit: FitReport } {
  if (run.jobs.length === 0) throw new PlanError('the run has no job records (a trace written before stoker recorded them, or an empty run): record the run again with this version');
  const notes: string[] = [];
  // A kind whose jobs need different memory per partition (a proving service's sectors of several
  // sizes, say) is fitted as one kind per size, each with its own preparation and device time and
  // its own arrivals: fitted as one, with the first job's memory, a mix of 8 and 32 GiB partitions
  // was planned as all 8 GiB.
  const jobs = splitBySize(run.jobs, notes);
  const originalKind = new Map(run.jobs.map((j) => [j.id, j.kind]));
  const kindOf = new Map(jobs.map((j) => [j.id, j]));
  const lanes = new Map(run.lanes.map((l) => [l.id, l]));
  const done = run.spans.filter((s) => s.outcome === 'done' && s.end !== null && kindOf.has(s.jobId));
  const prep = done.filter((s) => s.kind === 'prepare');
  const dev = done.filter((s) => s.kind === 'device');
  if (prep.length < MIN_SAMPLES || dev.length < MIN_SAMPLES) {
    throw new PlanError(`the run holds ${prep.length} finished preparations and ${dev.length} finished device steps; a fit needs at least ${MIN_SAMPLES} of each: record a longer run`);
  }
  // Preparation: concurrency over all preparations (they share the CPU whatever their kind).
  const prepLevel = levels(run.spans.filter((s) => s.kind === 'prepare'));
  // (Loops, not Math.min(...): a long run has more values than a call takes arguments.)
  let t0 = Infinity;
  for (const j of jobs) t0 = Math.min(t0, j.t);
  const kinds: FitReport['kinds'] = {};
  const scenarioKinds: NonNullable<ScenarioInput['kinds']> = {};
  const byKind = group(jobs, (j) => j.kind);
  // Device steps by device (the lane says which).
  const deviceOf = (s: TimelineSpan) => lanes.get(s.lane)?.device ?? 0;
  const devSpans = group(dev, (s) => String(deviceOf(s)));
  const deviceFits: FitReport['devices'] = [];
  const deflatedByDevice = new Map<number, { spans: TimelineSpan[]; base: number[]; fixedMs: number }>();
  for (const [d, spans] of [...devSpans.entries()].sort((a, b) => Number(a[0]) - Number(b[0]))) {
    const device = Number(d);
    const all = run.spans.filter((s) => s.kind === 'device' && deviceOf(s) === device);
    const workers = new Set(run.lanes.filter((l) => l.kind === 'device' && (l.device ?? 0) === device).map((l) => l.worker ?? 0)).size;
    const setting = run.deviceBatches?.[device] ?? null;
    const batched = setting !== null || spans.some((sp) => sp.items !== undefined);
    const kindOfSpan = (sp: TimelineSpan) => kindOf.get(sp.jobId)?.kind ?? '';
    // (A batch's time is relative to its kind's batches of its size: sizes would read as slowdown.)
    const f = stageFit(spans, levels(all), batched ? (sp) => `${kindOfSpan(sp)}/${sp.items ?? 1}` : kindOfSpan);
    const name = run.deviceNames?.[device];
    const label = `device ${device}${name === undefined ? '' : ` (${name})`}`;
    const b = batched ? batchFit(spans, f.base, kindOfSpan, setting, label, notes) : null;
    deviceFits.push({ device, ...(name === undefined ? {} : { name }), workers: Math.max(1, workers), service: f.fit, ...(b ? { batch: b.fit } : {}) });
    // (Batched: each batch's per-item time, what a kind's own device time and the device's are of.)
    deflatedByDevice.set(device, { spans, base: b ? b.perItem : f.base, fixedMs: b ? b.fixedMs : 0 });
  }
  if (deviceFits.length === 0) throw new PlanError('the run has no finished device step on any device lane');
  const several = byKind.size > 1;
  for (const [kind, ofKind] of byKind) {
    const ps = prep.filter((s) => kindOf.get(s.jobId)?.kind === kind);
    const first = ofKind[0] as TimelineJob;
    // A rare kind does not stop the fit of the others: with none finished it is left out (its
    // arrivals too), with a few its preparation is what those few took.
    if (ps.length === 0) {
      notes.push(`kind ${kind}: no finished preparation: left out of the scenario, with its ${ofKind.length} job${ofKind.length === 1 ? '' : 's'}`);
      continue;
    }
    if (ps.length < MIN_SAMPLES) notes.push(`kind ${kind}: ${ps.length} finished preparation${ps.length === 1 ? '' : 's'}, under ${MIN_SAMPLES}: its preparation time is those few`);
    // (A kind fitted as one per size is batched as the run's kind was: its setting is that kind's.)
    const batchKind = originalKind.get(first.id) ?? kind;
    // (Own keys only: a kind named "constructor" read Object.prototype's.)
    const setting = run.prepareBatches && Object.hasOwn(run.prepareBatches, batchKind) ? (run.prepareBatches[batchKind] as BatchSetting) : null;
    const batchedPrep = setting !== null || ps.some((sp) => sp.items !== undefined);
    const p = stageFit(ps, prepLevel, batchedPrep ? (sp) => String(sp.items ?? 1) : () => kind);
    const pb = batchedPrep ? batchFit(ps, p.base, () => kind, setting, `kind ${kind}'s preparation`, notes) : null;
    // A kind's own device time, where kinds differ: its deflated service samples over every device.
    let service: { fit: StageFit; base: number[] } | null = null;
    if (several) {
      const own = [...deflatedByDevice.values()].flatMap(({ spans, base }) => base.filter((_, i) => kindOf.get((spans[i] as TimelineSpan).jobId)?.kind === kind));
      if (own.length >= MIN_SAMPLES) service = { fit: summary(own, own, [], [1]), base: own };
      else notes.push(`kind ${kind}: ${own.length} device steps, too few for its own device time (it uses the device's)`);
    }
    const memory = { prepareBytes: first.prepareBytes, deviceBytes: first.deviceBytes };
    kinds[kind] = { jobs: ofKind.length, partitions: ofKind.reduce((n, j) => n + j.partitions, 0), ...memory, prepare: p.fit, ...(pb ? { prepareBatch: pb.fit } : {}), service: service?.fit ?? null };
    scenarioKinds[kind] = {
      prepare: empirical(pb ? pb.perItem : p.base),
      ...(pb ? { prepareBatch: batchOf(pb) } : {}),
      contention: p.fit.contention,
      memory,
      ...(service ? { service: empirical(service.base) } : {}),
    };
  }
  const pinned = pinnedKinds(deviceFits.map((d) => d.device), devSpans, (sp) => kindOf.get(sp.jobId)?.kind ?? '', Object.keys(scenarioKinds), notes);
  let end = -Infinity;
  for (const sp of done) end = Math.max(end, sp.end as number);
  const scenario: ScenarioInput = {
    name,
    description: `fitted from a recorded run: ${run.jobs.length} jobs, ${prep.length} preparations, ${dev.length} device steps over ${((end - t0) / 1000).toFixed(0)} s`,
    kinds: scenarioKinds,
    devices: deviceFits.map((d) => {
      const { base, fixedMs } = deflatedByDevice.get(d.device) as { base: number[]; fixedMs: number };
      const kinds = pinned.get(d.device);
      return {
        ...(d.name === undefined ? {} : { name: d.name }),
        workers: d.workers,
        service: empirical(base),
        contention: d.service.contention,
        ...(kinds ? { kinds } : {}),
        ...(d.batch ? { batch: batchOf({ fit: d.batch, fixedMs }) } : {}),
      };
    }),
    arrivals: [...jobs]
      .filter((j) => Object.hasOwn(scenarioKinds, j.kind))
      .sort((a, b) => a.t - b.t)
      .map((j) => ({ atS: (j.t - t0) / 1000, jobs: 1, partitions: j.partitions, kind: j.kind, priority: j.priority })),
    ...(run.budgetBytes ? { budgetBytes: run.budgetBytes } : {}),
    ...(run.maxPreparing ? { maxPreparing: run.maxPreparing } : {}),
    ...(typeof run.targetWaiting === 'number' ? { targetWaiting: run.targetWaiting } : {}),
  };
  if (!run.budgetBytes) notes.push(`${NO_BUDGET_NOTE}: the plan may recommend more memory than the machine has (stoker plan --budget-bytes gives it)`);
  const wholeRun = run.spans.every((sp) => kindOf.has(sp.jobId)) && Object.keys(kinds).length === byKind.size;
  const fit: FitReport = { jobs: run.jobs.length, partitions: run.jobs.reduce((n, j) => n + j.partitions, 0), spanS: (end - t0) / 1000, kinds, devices: deviceFits, notes, wholeRun };
  return { scenario, fit };
}

/**
 * A batched stage's affine law from its batches' times at one user (`base`, ms): a fixed part
 * common to every batch, and each batch's per-item time past it. The fixed part is the intercept
 * of time on items, fitted within each kind (kinds differ in their per-item time) that has
 * MIN_SAMPLES batches or more off its most common size, and averaged by batches (one batch of
 * another size among hundreds of one item set it alone, to anything); where no kind has, it
 * cannot be told from the per-item time, and the batch is fitted as per-item time alone (exact
 * at that size).
 */
function batchFit(spans: readonly TimelineSpan[], base: readonly number[], kindOf: (s: TimelineSpan) => string, setting: BatchSetting | null, what: string, notes: string[]): { fit: BatchFit; fixedMs: number; perItem: number[] } {
  const items = spans.map((sp) => sp.items ?? 1);
  let weighted = 0;
  let weight = 0;
  for (const members of group(
    spans.map((sp, i) => ({ k: kindOf(sp), i })),
    (x) => x.k,
  ).values()) {
    const n = members.map((m) => items[m.i] as number);
    const t = members.map((m) => base[m.i] as number);
    if (n.length - mostCommon(n).count < MIN_SAMPLES) continue;
    const mn = mean(n);
    const mt = mean(t);
    let sxx = 0;
    let sxy = 0;
    for (let j = 0; j < n.length; j++) {
      sxx += ((n[j] as number) - mn) ** 2;
      sxy += ((n[j] as number) - mn) * ((t[j] as number) - mt);
    }
    // (Time that does not grow with the items is all fixed.)
    const slope = Math.max(0, sxy / sxx);
    weighted += (mt - slope * mn) * members.length;
    weight += members.length;
  }
  let largest = 1;
  for (const n of items) largest = Math.max(largest, n);
  const maxItems = setting?.maxItems ?? largest;
  if (weight === 0) {
    const { value, count } = mostCommon(items);
    const most = count === items.length ? `every batch had ${value} item${value === 1 ? '' : 's'}` : `all but ${items.length - count} of its ${items.length} batches had ${value} item${value === 1 ? '' : 's'}`;
    // (Charged to each item, a fixed part makes larger batches replay slower than they run, smaller ones quicker.)
    const off = value < maxItems ? 'larger batches replay slower than they would run' : 'smaller batches replay quicker than they would run';
    notes.push(`${what}: ${most}: its fixed part cannot be told from its per-item time, so it is fitted as per-item time alone (exact at that size; ${off}: record a busier run to fit both)`);
  }
  // (Not capped at the quickest batch: where the fixed part itself varies, as a launch's does, the
  // quickest is below its mean, and the rest was charged to the items — 138 ms + 19 ms an item
  // fitted for 200 ms + 10 ms, the capacity read 40 % low.)
  const fixedMs = weight > 0 ? Math.max(0, weighted / weight) : 0;
  const perItem = base.map((t, i) => Math.max(0, t - fixedMs) / (items[i] as number));
  if (setting === null) notes.push(`${what}: the run did not record its batch setting (a trace of an older stoker): fitted with the largest batch seen, ${largest} items, as maxItems and no wait for more`);
  const fit: BatchFit = {
    maxItems,
    maxWaitS: (setting?.maxWaitMs ?? 0) / 1000,
    recorded: setting !== null,
    batches: spans.length,
    meanItems: mean(items),
    fixedS: fixedMs / 1000,
    perItemMedianS: median(perItem) / 1000,
  };
  return { fit, fixedMs, perItem };
}

/** The most common value and how many times it occurs (the smallest of equally common ones). */
function mostCommon(xs: readonly number[]): { value: number; count: number } {
  const counts = new Map<number, number>();
  for (const x of xs) counts.set(x, (counts.get(x) ?? 0) + 1);
  let value = NaN;
  let count = 0;
  for (const [x, c] of counts) if (c > count || (c === count && x < value)) [value, count] = [x, c];
  return { value, count };
}

/** A batch fit as the scenario's batch table. */
function batchOf(b: { fit: BatchFit; fixedMs: number }): { maxItems: number; maxWaitS: number; fixed: { type: 'fixed'; value: number } } {
  return { maxItems: b.fit.maxItems, maxWaitS: b.fit.maxWaitS, fixed: { type: 'fixed', value: b.fixedMs / 1000 } };
}

function mean(xs: readonly number[]): number {
  let sum = 0;
  for (const x of xs) sum += x;
  return xs.length ? sum / xs.length : NaN;
}

/** How long a span ran at each concurrency level (level → ms; each span counts itself). */
type Profile = (a: number, b: number) => Map<number, number>;

/** The concurrency over time of a set of spans, as a {@link Profile}. */
function levels(spans: readonly TimelineSpan[]): Profile {
  const edges: [number, number][] = [];
  for (const s of spans) {
    if (s.end === null) continue;
    edges.push([s.start, 1], [s.end, -1]);
  }
  // Ends before starts at one instant: a span that starts as another ends does not overlap it.
  edges.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  // The level from each distinct time on.
  const times: number[] = [];
  const level: number[] = [];
  let n = 0;
  for (const [t, d] of edges) {
    n += d;
    if (times.length && times[times.length - 1] === t) level[level.length - 1] = n;
    else {
      times.push(t);
      level.push(n);
    }
  }
  return (a, b) => {
    const out = new Map<number, number>();
    // The last change at or before a.
    let lo = 0;
    let hi = times.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((times[mid] as number) <= a) lo = mid;
      else hi = mid - 1;
    }
    for (let i = lo, from = a; from < b && i < times.length; i++) {
      const to = Math.min(b, (times[i + 1] as number | undefined) ?? b);
      if (to > from) out.set(Math.max(1, level[i] as number), (out.get(Math.max(1, level[i] as number)) ?? 0) + to - from);
      from = Math.max(from, to);
    }
    return out;
  };
}

/** A span measures a level when its concurrency stayed within this share of its lowest (or within one user). */
const STEADY = 0.25;
/** Rounds of correcting the bins' factors (each converges in a few), done only where the lowest level measured is at most DISCRETE users. */
const DISCRETE = 4;
const ROUNDS = 20;

/**
 * One stage's fit under the fluid model the simulator runs: a span that spent t_k ms with k users
 * did Σ t_k ÷ f_k ms of work at one user, and that work has one distribution whatever the
 * concurrency, relative to its kind's (`keyOf`). Spans are binned by their mean concurrency,
 * rounded; the bins with enough spans give the levels measured. Starting from each bin's median
 * time (relative to its kind's) over the lowest bin's, each
 * bin's factor is corrected until the median work of its spans equals the lowest bin's (spans
 * straddle levels, so raw medians would blur neighbouring levels), then made never to fall
 * (isotonic); factors below the lowest bin are 1, between bins interpolated, the last holding
 * beyond. Each span's time is then deflated to its work.
 */
function stageFit(spans: readonly TimelineSpan[], profile: Profile, keyOf: (s: TimelineSpan) => string): { fit: StageFit; base: number[] } {
  const ms = spans.map((s) => (s.end as number) - s.start);
  // Each span's time relative to its kind's median: kinds that differ in size would otherwise read
  // as slowdown where they ran at different concurrencies.
  const keys = spans.map(keyOf);
  const relative = (v: readonly number[]): number[] => {
    const med = new Map([...group(v.map((x, i) => ({ x, k: keys[i] as string })), (e) => e.k).entries()].map(([k, xs]) => [k, median(xs.map((e) => e.x))]));
    return v.map((x, i) => x / ((med.get(keys[i] as string) as number) || 1));
  };
  const rel = relative(ms);
  const profiles = spans.map((s) => profile(s.start, s.end as number));
  const conc = profiles.map((p, i) => {
    let area = 0;
    for (const [c, t] of p) area += c * t;
    return Math.max(1, Math.round((ms[i] as number) > 0 ? area / (ms[i] as number) : 1));
  });
  const least = Math.max(MIN_BIN, MIN_BIN_SHARE * spans.length);
  // Only spans that ran at a steady concurrency measure a level: while a pipeline fills or drains,
  // a long span sees more of the change than a short one, and its length would read as slowdown.
  const steady = profiles.map((p) => {
    let lo = Infinity;
    let hi = 0;
    for (const c of p.keys()) {
      lo = Math.min(lo, c);
      hi = Math.max(hi, c);
    }
    return hi - lo <= Math.max(1, STEADY * lo);
  });
  const bins = [...group(
    ms.flatMap((v, i) => (steady[i] ? [{ v, c: conc[i] as number, i }] : [])),
    (x) => String(x.c),
  ).entries()]
    .map(([c, xs]) => ({ concurrency: Number(c), members: xs.map((x) => x.i), medianMs: median(xs.map((x) => x.v)), factor: 1 }))
    .filter((b) => b.members.length >= least)
    .sort((a, b) => a.concurrency - b.concurrency);
  const ref = bins[0];
  const relMedian = (members: readonly number[], v: readonly number[]) => median(members.map((i) => v[i] as number));
  for (const b of bins) b.factor = ref ? relMedian(b.members, rel) / relMedian(ref.members, rel) : 1;
  /** Factors per level 1 … the top bin's from the bins' factors: 1 below the lowest bin, interpolated between bins, the last holding beyond. */
  const curve = (): number[] => {
    if (bins.length < 2 || !ref) return [1];
    const out: number[] = [];
    for (let k = 1; k <= (bins[bins.length - 1] as (typeof bins)[number]).concurrency; k++) {
      const below = [...bins].reverse().find((r) => r.concurrency <= k);
      const above = bins.find((r) => r.concurrency >= k);
      let f = 1;
      if (below && above && k >= ref.concurrency) f = above.concurrency === below.concurrency ? below.factor : below.factor + ((above.factor - below.factor) * (k - below.concurrency)) / (above.concurrency - below.concurrency);
      out.push(f);
    }
    return out;
  };
  const work = (f: number[]) =>
    profiles.map((p, i) => {
      let w = 0;
      for (const [c, t] of p) w += t / (f[Math.min(c, f.length) - 1] as number);
      return w > 0 ? w : (ms[i] as number);
    });
  // The corrections run on the bins' own factors; that slowdown never falls with concurrency is
  // imposed once, at the end (imposed in every round it would ratchet noise upwards). They matter
  // only where a level is a large step (one user to two); among many users a span's mean level
  // sums it up, and correcting between levels a few per cent apart feeds back on itself.
  let contention = curve();
  for (let round = 0; round < ROUNDS && bins.length > 1 && ref && ref.concurrency <= DISCRETE; round++) {
    const w = relative(work(contention));
    const m = relMedian(ref.members, w);
    for (const b of bins.slice(1)) b.factor *= relMedian(b.members, w) / m;
    contention = curve();
  }
  isotonic(bins);
  contention = curve();
  // The levels a span ran at depend on how long it ran (a short one fits in a dip of the level
  // where a long one does not), so binned by them the short ones can read as quicker at lower
  // levels where nothing slows. What it started at does not: the right slowdown leaves the spans'
  // work (their times deflated by it) the same whatever they started with. Where none leaves it
  // more so than the one fitted, there is none (a user's three threads that shared nothing read
  // ×1.35 at three, and the plan then counted each preparation 15 % slower alone).
  let unconfirmed: StageFit['unconfirmed'];
  if (contention.some((f) => f > 1)) {
    const starts = startLevels(spans, profile);
    if (startSpread(starts, rel, least) < startSpread(starts, relative(work(contention)), least)) {
      unconfirmed = { level: contention.length, factor: contention[contention.length - 1] as number };
      contention = [1];
    }
  }
  const base = work(contention);
  const factorAt = (c: number) => contention[Math.min(Math.max(c, 1), contention.length) - 1] as number;
  const binRows = bins.map((r) => ({ concurrency: r.concurrency, samples: r.members.length, medianS: r.medianMs / 1000, factor: factorAt(r.concurrency) }));
  return { fit: { ...summary(ms, base, binRows, contention), ...(unconfirmed ? { unconfirmed } : {}) }, base };
}

/** Each span's level just after it started (itself counted; ends before starts at one instant). */
function startLevels(spans: readonly TimelineSpan[], profile: Profile): number[] {
  return spans.map((s) => {
    let level = 1;
    let most = -1;
    for (const [c, t] of profile(s.start, Math.min(s.end as number, s.start + 1e-3))) {
      if (t > most) {
        most = t;
        level = c;
      }
    }
    return level;
  });
}

/**
 * How far the median of `values` (the spans' work, relative to their kind's) of the spans that
 * started at each level lies from all of theirs, in logs, weighted by the spans (levels with at
 * least `least` of them; 0 where fewer than two levels have as many).
 */
function startSpread(starts: readonly number[], values: readonly number[], least: number): number {
  const byLevel = group(
    values.map((v, i) => ({ v, c: starts[i] as number })),
    (x) => String(x.c),
  );
  const rows = [...byLevel.values()].filter((xs) => xs.length >= least);
  if (rows.length < 2) return 0;
  const all = Math.log(median(rows.flatMap((xs) => xs.map((x) => x.v))));
  let n = 0;
  let sum = 0;
  for (const xs of rows) {
    n += xs.length;
    sum += xs.length * Math.abs(Math.log(median(xs.map((x) => x.v))) - all);
  }
  return sum / n;
}

/**
 * Makes the bins' factors never fall with concurrency, at least 1 — the closest such sequence,
 * weighted by the bins' spans (pool adjacent violators): noise between levels averages out
 * instead of stepping up.
 */
function isotonic(bins: { factor: number; members: readonly number[] }[]): void {
  const blocks: { sum: number; w: number; n: number }[] = [];
  for (const b of bins) {
    blocks.push({ sum: b.factor * b.members.length, w: b.members.length, n: 1 });
    while (blocks.length > 1) {
      const last = blocks[blocks.length - 1] as (typeof blocks)[number];
      const prev = blocks[blocks.length - 2] as (typeof blocks)[number];
      if (prev.sum / prev.w <= last.sum / last.w) break;
      blocks.splice(blocks.length - 2, 2, { sum: prev.sum + last.sum, w: prev.w + last.w, n: prev.n + last.n });
    }
  }
  let i = 0;
  for (const blk of blocks) for (let j = 0; j < blk.n; j++) (bins[i++] as (typeof bins)[number]).factor = Math.max(1, blk.sum / blk.w);
}

function summary(ms: readonly number[], base: readonly number[], bins: ContentionBin[], contention: number[]): StageFit {
  const sorted = [...ms].sort((a, b) => a - b);
  return { samples: ms.length, medianS: median(ms) / 1000, p90S: (sorted[Math.min(sorted.length - 1, Math.floor(0.9 * sorted.length))] as number) / 1000, baseMedianS: median(base) / 1000, bins, contention };
}

/** An empirical distribution of durations (ms in, seconds out), at most KEEP evenly spaced order statistics. */
function empirical(ms: readonly number[]): { type: 'empirical'; values: number[] } {
  const sorted = [...ms].sort((a, b) => a - b);
  const n = Math.min(KEEP, sorted.length);
  const values = Array.from({ length: n }, (_, i) => (sorted[Math.floor(((i + 0.5) * sorted.length) / n)] as number) / 1000);
  return { type: 'empirical', values };
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

/**
 * The kinds each device runs, where the run shows devices that run only some (a server's
 * `[kinds.NAME] device` pins a kind to one): a kind with MIN_SAMPLES device steps or more runs
 * where it ran; one with fewer could run anywhere. Undefined for a device that runs every kind.
 * (Left out, the replay ran any kind on any device, and the recommended config had one
 * `[device]` for a service whose kinds each had their own.)
 */
function pinnedKinds(devices: readonly number[], spansBy: ReadonlyMap<string, TimelineSpan[]>, kindOf: (s: TimelineSpan) => string, kinds: readonly string[], notes: string[]): Map<number, string[]> {
  const out = new Map<number, string[]>();
  if (devices.length < 2 || kinds.length < 2) return out;
  const steps = new Map<string, Set<number>>();
  const count = new Map<string, number>();
  for (const d of devices) {
    for (const sp of spansBy.get(String(d)) ?? []) {
      const k = kindOf(sp);
      (steps.get(k) ?? steps.set(k, new Set()).get(k))?.add(d);
      count.set(k, (count.get(k) ?? 0) + 1);
    }
  }
  for (const d of devices) {
    const runs = kinds.filter((k) => (count.get(k) ?? 0) < MIN_SAMPLES || steps.get(k)?.has(d) === true);
    if (runs.length === kinds.length || runs.length === 0) continue;
    out.set(d, runs);
    notes.push(`device ${d} ran only kind${runs.length === 1 ? '' : 's'} ${runs.join(', ')}: fitted as running only ${runs.length === 1 ? 'it' : 'them'}`);
  }
  return out;
}

/** The jobs, each of a kind whose jobs differ in memory per partition renamed "kind prepare/device" (GiB): one kind per size. */
function splitBySize(jobs: readonly TimelineJob[], notes: string[]): TimelineJob[] {
  const size = (j: TimelineJob) => `${gib(j.prepareBytes)}/${gib(j.deviceBytes)} GiB`;
  const sizes = new Map([...group(jobs, (j) => j.kind)].map(([kind, of]) => [kind, new Set(of.map(size))]));
  for (const [kind, of] of sizes) if (of.size > 1) notes.push(`kind ${kind}: jobs differ in memory per partition: fitted as ${of.size} kinds, one per size (${[...of].map((x) => `${kind} ${x}`).join(', ')}), each with its own preparation and device time`);
  return jobs.map((j) => ((sizes.get(j.kind)?.size ?? 1) > 1 ? { ...j, kind: `${j.kind} ${size(j)}` } : j));
}

/** Bytes as GiB, to 3 significant digits (a size's name). */
function gib(bytes: number): string {
  return String(Number((bytes / 2 ** 30).toPrecision(3)));
}

function group<T>(xs: readonly T[], key: (x: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const x of xs) {
    const k = key(x);
    const list = out.get(k);
    if (list) list.push(x);
    else out.set(k, [x]);
  }
  return out;
}

import type { ReadonlySnapshot } from '../pacer.js';

/** What the stoker pacer measures of each device: its service time per kind, how that varies with the workers busy, a batching device's fit, and the self-check of the measurement. */

/** A service sample is beyond the noise past NOISE_Z σ, and never within NOISE_FLOOR (2 %) of the estimate. */
export const NOISE_Z = 3;
export const NOISE_FLOOR = 0.02;
/** Below this cv² (5 %) a device counts as quiet: one sample beyond the noise is news. */
export const QUIET_CV2 = 0.0025;
/** The shortest service time per item believed, ms (1 µs): below it, a sample says "fast", not how fast. */
export const MIN_SERVICE_MS = 1e-3;
/**
 * The measurement self-check: while a device stays saturated (every worker busy, items waiting)
 * its completion rate *is* its capacity. Over windows of at least CHECK_MIN_COMPLETIONS such
 * completions (more on a noisy device, so that the window's own noise stays within a third of
 * CHECK_TOLERANCE, or of how far off the window reads where that is more), the observed rate is
 * compared with the feed-forward one (workers ÷ busy time
 * per item); CHECK_WINDOWS windows in a row off by more than CHECK_TOLERANCE on the same side,
 * and the pacer plans with the observed rate (until a window agrees again).
 */
export const CHECK_MIN_COMPLETIONS = 30;
export const CHECK_TOLERANCE = 0.1;
export const CHECK_WINDOWS = 3;
export const CHECK_SPAN = 2;
/**
 * The observed rate is planned with only while the device is not kept short of work by it: after
 * CHECK_STALE windows' worth of completions (CHECK_STALE × CHECK_MIN_COMPLETIONS) made while its
 * smoothed occupancy was under CHECK_STARVED, with no window judged, the pacer plans with the busy
 * time again and the windows decide anew. Planned with a rate lower than the truth (the server's
 * own cores busy with a burst of submits slowed a window or three), the pipeline kept the device
 * short of work, it was never saturated, and no window would ever clear it: 0.6 of the device's
 * capacity until a restart. Where the device really is slower (workers behind one lock), planned
 * with its observed rate it stays occupied — each worker holds an item, one of them waiting on the
 * lock, so that nothing need wait for a device and no window may come — and the rate stays.
 */
export const CHECK_STALE = 10;
export const CHECK_STARVED = 0.9;

/** Weight of each saturated sample in the noise (cv²) estimate. */
export const VARIANCE_WEIGHT = 0.05;
/**
 * Weight of each sample in the slow noise estimate that sets the weight of samples within the
 * noise: were it the fast one, a long sample of a skewed distribution would raise it and so
 * lower the weight of the (mostly short) samples after it, biasing the estimate slow.
 */
export const SLOW_VARIANCE_WEIGHT = 0.005;
/**
 * Above this cv² (cv 0.5) a device counts as skewed: which samples complete while it is short of
 * work then depends on their length (a run of short items drains the queue), so discounting them
 * (starvedWeight) would discount short samples and bias the estimate slow; and news of a slower
 * device weighs as news of a faster one (a run of long items is not a slowdown). Judged by the
 * noise with its tail (ServiceEstimate.varianceTail), with the sample at hand: the first long
 * sample of a skewed device is not news of a slower one.
 */
export const SKEWED_CV2 = 0.25;
/**
 * Standard errors of a skewed device's rate estimate its latency share of the inventory target
 * doubts (KindPlan.skewAllowances). Reading the rate high over-fills the pipeline (the surplus arrives
 * a latency later and drains only as the estimate corrects: waiting and memory); reading it low by
 * the same amount starves nothing while the skewed stock lasts — and one standard error of λ·L,
 * λL·√(cv²/n), is at most √(λL·cv²), one of the stock's safetyZ σ of consumption, once the device
 * has taken n ≥ λL samples (a latency's worth).
 */
export const RATE_DOUBT_Z = 1;
/**
 * The noise with its tail (ServiceEstimate.varianceTail) starts as the sample variance of a
 * service estimate's first this many samples (over n − 1), then goes on as a running mean of
 * every sample. Judged by the noise that sets news — smoothed from 0, each sample clipped at 3 σ
 * of what was learned so far, from saturated samples only — a skewed device's noise grew at most
 * ×1.4 a saturated sample, and meanwhile the device counted as quiet: each long sample was news
 * of a slowdown (weight 0.5) and each short one taken while it starved weighed 1.5 %, so the
 * estimate stayed up to 2× slow, the device starved, and there were few saturated samples to
 * learn from (heavy-tail-service, seed 1: planned at half its rate for the first 100 s, the skew
 * still unknown at 190 s). Two are the fewest a variance needs.
 */
export const NOISE_SAMPLES = 2;
/**
 * The noise with its tail clips each sample at this many σ of itself (or of SKEWED_CV2, where that
 * is more), not at NOISE_Z: a heavy tail's variance is mostly in samples beyond 3 σ (lognormal σ 1:
 * cv² 1.72; clipped at 3 σ it settles at 0.78, at 10 σ at 1.53). The floor lets one long sample
 * make a device that looked quiet a skewed one (clipped at 10 σ of almost nothing it would count
 * for almost nothing), and no sample count for more than TAIL_Z² times a skewed device's noise.
 */
export const TAIL_Z = 10;

/**
 * Device concurrency: where N busy workers finish less in total than k < N (memory thrash on a
 * GPU), the device runs only the best k. Service time is binned by how many workers were busy
 * while an item ran (each bin the mean of its last K_MEMORY samples, counted from K_MIN, and only
 * while recent: K_FRESH); k is chosen when its throughput k ÷ time(k) beats all workers' by
 * K_GAIN plus two standard errors of the two means (a noisy device needs more samples to be
 * believed). Limited to k, it tries k − 1 until that is measured; once the all-workers bin is no
 * longer recent, all workers run again until it is (the device may have stopped thrashing); an
 * idle device learns afresh.
 */
export const K_MIN = 5;
export const K_MEMORY = 50;
/** A bin is recent while the device has completed at most this many items since its last sample. */
export const K_FRESH = 500;
export const K_GAIN = 0.05;

/**
 * Batches (DeviceCounters.batch): busy time per batch is binned by batch size n (each bin the
 * mean of its last BATCH_MEMORY batches, and only while recent: BATCH_FRESH batches of the
 * device), and fitted as a + b·n by least squares over the bins, each weighed by the batches it
 * holds — so the full batches a fed device mostly runs set the level, and the few smaller ones
 * (a start, a drain) keep the fixed part apart from the per-item part. From BATCH_MIN batches on;
 * with one size only, busy time is taken as proportional to it. The pacer plans with the time per
 * item at full batches, (a + b·maxItems) ÷ maxItems: what the device gives when it is fed enough
 * to fill them. (Planned at the sizes it happens to get, a pacer feeds a batching device exactly
 * what it drains at those sizes and never finds out it could do more: a batching device is busy
 * at any feed.)
 */
export const BATCH_MEMORY = 50;
export const BATCH_FRESH = 2000;
export const BATCH_MIN = 3;

/** The service time of one kind on one device, from that kind's busy-time counters there. */
export interface ServiceEstimate {
  completions: number;
  busyMs: number;
  /** Smoothed device time per item, ms; NaN until measured (or the prior). */
  serviceMs: number;
  /** Smoothed squared relative deviation of saturated samples from the estimate (cv²). */
  variance: number;
  /** The same, smoothed over many more samples (SLOW_VARIANCE_WEIGHT). */
  varianceSlow: number;
  /**
   * The noise with its tail: the first NOISE_SAMPLES' sample variance, then smoothed as
   * varianceSlow (a running mean over its first 1 ÷ SLOW_VARIANCE_WEIGHT samples), each sample
   * clipped only at TAIL_Z σ, from every sample — a starved device's too: judged quiet while it
   * starves, a skewed device would learn its noise from few samples, and slowly. (Contention
   * makes a starved device's samples faster by up to 1 − 1 ÷ contention: squared, 0.03 at 1.2,
   * 0.18 at 1.73 — below SKEWED_CV2 were every sample starved.) What the skew is judged by
   * (SKEWED_CV2) and the skewed stock sized from.
   */
  varianceTail: number;
  /** Samples taken (completions); the first NOISE_SAMPLES: their mean, ms, and sum of squared deviations, ms² (Welford). */
  samples: number;
  firstMean: number;
  firstM2: number;
  /** Whether the estimate is still a prior's (the first measured sample replaces it). */
  prior: boolean;
  /** Whether the last sample was beyond the noise: −1 faster, 1 slower, 0 within it. */
  lastBeyond: number;
  /** Completions in the self-check's current window, and in the saturated span not yet in it. */
  satCompletions: number;
  spanCompletions: number;
}

/** Service time with k workers busy: mean and mean square of its samples, ms, how many it holds, the device's completions at its last. */
export interface BusyBin {
  ms: number;
  sq: number;
  n: number;
  at: number;
}

export interface DeviceEstimate {
  /** Whether a sample was ever taken with every worker busy (evidence of the saturated speed). */
  sawSaturated: boolean;
  completions: number;
  /** Per kind (by the snapshot's kind index; one entry when the snapshot lists no kinds). */
  services: ServiceEstimate[];
  /**
   * Device concurrency (K_*): service time by how many workers were busy (index k − 1), the
   * counters last seen, and the most workers to run at once (Infinity: all).
   */
  byBusy: BusyBin[];
  concurrencySeen: number;
  busyMsSeen: number;
  limit: number;
  /** A lower limit tried for a while (Infinity: none). */
  probe: number;
  /** Smoothed fraction of this device's workers that are busy. */
  occupancy: number;
  lastBusy: number;
  lastWorkers: number;
  /**
   * The workers the pipeline is planned for: the most alive within the last preparation latency.
   * A worker lost and back within less than one latency would otherwise make the pacer shed the
   * inventory it needs again when the worker is back — one latency after it could have it.
   */
  plannedWorkers: number;
  /** When the alive count was last at plannedWorkers. */
  plannedAt: number;
  /** The self-check (CHECK_*): saturated time and completions in the current window (and per kind), whether a saturated span is open. */
  satMs: number;
  satCompletions: number;
  saturatedNow: boolean;
  /** The saturated span not yet in the window (see CHECK_SPAN). */
  spanMs: number;
  spanCompletions: number;
  /** Windows in a row off the same side (signed), the last window's observed ÷ estimated rate, the factor planned with. */
  checkStreak: number;
  /** Completions made while the device was short of work since the last window was judged (see CHECK_STALE). */
  sinceWindow: number;
  checkRatio: number;
  correction: number;
  /** A batching device's fit of busy time per batch (see BATCH_*); null on one that runs single items. */
  fit: BatchFit | null;
  /** On a batching device, per kind (snapshot index): its own fit, from its own batches (a batch is of one kind). */
  kindFits: (BatchFit | undefined)[];
}

/** A batching device's busy time per batch by its size (see BATCH_*), the counters last seen, and the fit a + b·n (NaN until made). */
export interface BatchFit {
  readonly maxItems: number;
  /** By batch size n: mean busy ms of its last batches, how many it holds (≤ BATCH_MEMORY), the device's batch count at its last. */
  bins: ({ ms: number; n: number; at: number } | undefined)[];
  batches: number;
  items: number;
  busyMs: number;
  a: number;
  b: number;
}

/**
 * The weight n samples take together in an estimate that gives each `weight`: 1 − (1 − weight)ⁿ.
 * (Most events bring one sample, and x¹ is x exactly: that case needs no Math.pow.)
 */
export function samplesWeight(weight: number, n: number): number {
  const keep = 1 - weight;
  return 1 - (n === 1 ? keep : Math.pow(keep, n));
}

export function newFit(c: ReadonlySnapshot['devices'][number]): BatchFit {
  const b = c.batch as NonNullable<typeof c.batch>;
  return { maxItems: b.maxItems, bins: [], batches: b.batches, items: b.items, busyMs: c.busyMs, a: NaN, b: NaN };
}

/**
 * Takes new batches into a fit's bins and refits (see BATCH_*): a device's (all its batches) or
 * one kind's on it, from the cumulative batches, their items and their busy ms.
 */
export function observeBatches(f: BatchFit, batches: number, items: number, busyMs: number): void {
  const db = batches - f.batches;
  if (db <= 0) return;
  // One batch per event, as the engine reports them: its size and busy time exactly (several: their means).
  const size = Math.max(1, Math.round((items - f.items) / db));
  const ms = Math.max(MIN_SERVICE_MS, (busyMs - f.busyMs) / db);
  f.batches = batches;
  f.items = items;
  f.busyMs = busyMs;
  const bin = (f.bins[size] ??= { ms, n: 0, at: 0 });
  bin.n = Math.min(BATCH_MEMORY, bin.n + db);
  bin.ms += (Math.min(db, bin.n) / bin.n) * (ms - bin.ms);
  bin.at = batches;
  // Weighted least squares of busy time on size over the recent bins.
  let w = 0;
  let sn = 0;
  let st = 0;
  let snn = 0;
  let snt = 0;
  f.bins.forEach((x, n) => {
    if (!x || batches - x.at > BATCH_FRESH) return;
    w += x.n;
    sn += x.n * n;
    st += x.n * x.ms;
    snn += x.n * n * n;
    snt += x.n * n * x.ms;
  });
  if (w < BATCH_MIN) return;
  const n = sn / w;
  const t = st / w;
  const varN = snn / w - n * n;
  // One size only (or nearly): proportional. Neither part is negative: a negative fixed part is
  // a fit through the origin, a negative slope a constant.
  const slope = varN > 1e-9 ? (snt / w - n * t) / varN : t / n;
  if (slope < 0) {
    f.a = t;
    f.b = 0;
  } else if (t - slope * n < 0) {
    f.a = 0;
    f.b = snt / snn;
  } else {
    f.a = t - slope * n;
    f.b = slope;
  }
}

/**
 * A batching device's planned time per item: at full batches, from its fit — kind k's own where
 * it has one, else the device's over every kind (NaN: none yet, or it does not batch).
 */
export function batchItemMs(d: DeviceEstimate, k = -1): number {
  const own = k >= 0 ? d.kindFits[k] : undefined;
  const f = own && !Number.isNaN(own.a) ? own : d.fit;
  if (!f || Number.isNaN(f.a)) return NaN;
  const n = f.maxItems;
  return Math.max(MIN_SERVICE_MS, (f.a + f.b * n) / n);
}

/** The workers a device is planned for: its planned workers (see DeviceEstimate.plannedWorkers), within its worker limit. */
export function plannedWorkers(d: DeviceEstimate): number {
  return Math.min(d.plannedWorkers, d.limit);
}

/** Whether a bin counts: K_MIN samples, the last within K_FRESH of the device's completions (`now`). */
export function isFresh(b: BusyBin, now: number): boolean {
  return b.n >= K_MIN && now - b.at <= K_FRESH;
}

export function newService(completions: number, busyMs: number, serviceMs: number): ServiceEstimate {
  return { completions, busyMs, serviceMs, variance: 0, varianceSlow: 0, varianceTail: 0, samples: 0, firstMean: 0, firstM2: 0, prior: serviceMs > 0, lastBeyond: 0, satCompletions: 0, spanCompletions: 0 };
}

/** Kind k's completions on device d (a snapshot without kinds: the device's own). */
export function completionsOf(s: ReadonlySnapshot, k: number, d: number): number {
  return s.kinds.length > 0 ? ((s.kinds[k] as ReadonlySnapshot['kinds'][number]).completions[d] as number) : (s.devices[d] as ReadonlySnapshot['devices'][number]).completions;
}

export function busyOf(s: ReadonlySnapshot, k: number, d: number): number {
  return s.kinds.length > 0 ? ((s.kinds[k] as ReadonlySnapshot['kinds'][number]).busyMs[d] as number) : (s.devices[d] as ReadonlySnapshot['devices'][number]).busyMs;
}

/** A device's mean service time over the kinds measured on it, else `fallback`. */
export function deviceMeanMs(d: DeviceEstimate, fallback: number): number {
  let n = 0;
  let sum = 0;
  for (const svc of d.services) {
    if (svc.serviceMs > 0) {
      n++;
      sum += svc.serviceMs;
    }
  }
  return n > 0 ? sum / n : fallback;
}

/** The self-check of one device (see CHECK_*), before its estimates take this event's samples. */
export function selfCheck(d: DeviceEstimate, c: ReadonlySnapshot['devices'][number], s: ReadonlySnapshot, dt: number, dc: number, device: number): void {
  // A batching device's time per item follows its batch sizes, which the fit plans with; the
  // per-item estimates this check compares were measured at whatever sizes ran: no check.
  if (d.fit) return;
  // A span runs from a completion after which the device is saturated to the completion after
  // which it is not: whole intervals between completions (a span begun at an arrival would end
  // at the next completion, sooner than an interval on average, and read the device fast).
  // A span counts in chunks of CHECK_SPAN completions per worker: the brief saturations of a
  // starved device start in step (two items arriving together) and would time nothing.
  if (d.saturatedNow) {
    d.spanMs += dt;
    if (dc > 0) {
      d.spanCompletions += dc;
      for (let k = 0; k < d.services.length; k++) {
        const svc = d.services[k] as ServiceEstimate;
        svc.spanCompletions += Math.max(0, completionsOf(s, k, device) - svc.completions);
      }
    }
    if (d.spanCompletions >= CHECK_SPAN * Math.min(c.workers, d.limit)) {
      d.satMs += d.spanMs;
      d.satCompletions += d.spanCompletions;
      for (const svc of d.services) {
        svc.satCompletions += svc.spanCompletions;
        svc.spanCompletions = 0;
      }
      d.spanMs = d.spanCompletions = 0;
    }
  }
  if (d.occupancy < CHECK_STARVED) d.sinceWindow += dc;
  if (d.correction !== 1 && d.sinceWindow >= CHECK_STALE * CHECK_MIN_COMPLETIONS) {
    d.correction = 1;
    d.checkStreak = 0;
  }
  const usable = Math.min(c.workers, d.limit);
  const saturated = usable > 0 && c.busy >= usable && s.waiting > 0;
  if (!saturated) {
    d.saturatedNow = false;
    d.spanMs = d.spanCompletions = 0;
    for (const svc of d.services) svc.spanCompletions = 0;
  } else if (dc > 0) d.saturatedNow = true;
  if (d.satCompletions < CHECK_MIN_COMPLETIONS) return;
  // The window's expected busy time: its completions of each kind at that kind's estimate.
  let completions = 0;
  let expectedMs = 0;
  let variance = 0;
  for (const svc of d.services) {
    if (svc.satCompletions === 0) continue;
    if (!(svc.serviceMs > 0)) return;
    completions += svc.satCompletions;
    expectedMs += svc.satCompletions * svc.serviceMs;
    variance = Math.max(variance, svc.varianceSlow);
  }
  if (d.satMs <= 0) return;
  // Observed completions ÷ those the feed-forward (workers ÷ busy time per item) predicts.
  const ratio = expectedMs / (usable * d.satMs);
  // Enough completions that the window's noise stays within a third of what it is to tell: the
  // tolerance, or the distance it reads, where that is more (a device whose steps take
  // microseconds, its rate set by the server's own overhead, read 0.001 of its busy time's
  // rate: judged over the thousands of completions its noisy timings ask for a 10 % error, it
  // was trusted for 13 s while its whole 200,000-partition backlog was prepared).
  const tell = Math.max(CHECK_TOLERANCE, Math.abs(ratio - 1)) / 3;
  const need = Math.max(CHECK_MIN_COMPLETIONS, (9 * variance) / (tell * tell));
  if (completions < need) return;
  d.satMs = 0;
  d.satCompletions = 0;
  for (const svc of d.services) svc.satCompletions = 0;
  d.checkRatio = ratio;
  d.sinceWindow = 0;
  const side = Math.abs(ratio - 1) <= CHECK_TOLERANCE ? 0 : Math.sign(ratio - 1);
  d.checkStreak = side === 0 ? 0 : Math.sign(d.checkStreak) === side ? d.checkStreak + side : side;
  if (d.checkStreak === 0) d.correction = 1;
  else if (Math.abs(d.checkStreak) >= CHECK_WINDOWS) d.correction = ratio;
}

/**
 * Service time by the number of workers busy (from DeviceCounters.concurrencyTotal), and the
 * device's worker limit: the k whose throughput k ÷ time(k) beats all workers' by K_GAIN,
 * both measured over K_MIN samples at least (each bin the mean of its last K_MEMORY).
 */
export function observeConcurrency(d: DeviceEstimate, c: ReadonlySnapshot['devices'][number], dc: number): void {
  const total = c.concurrencyTotal;
  if (total === undefined) return;
  const k = Math.min(c.workers, Math.max(1, Math.round((total - d.concurrencySeen) / dc)));
  const sample = Math.max(MIN_SERVICE_MS, (c.busyMs - d.busyMsSeen) / dc);
  d.concurrencySeen = total;
  d.busyMsSeen = c.busyMs;
  if (c.workers < 2) return;
  while (d.byBusy.length < c.workers) d.byBusy.push({ ms: 0, sq: 0, n: 0, at: 0 });
  const bin = d.byBusy[k - 1] as BusyBin;
  bin.n = Math.min(bin.n + dc, K_MEMORY);
  // (More than K_MEMORY at once replace the bin: their mean is the mean of its last K_MEMORY.)
  const w = Math.min(dc, bin.n) / bin.n;
  bin.ms += w * (sample - bin.ms);
  bin.sq += w * (sample * sample - bin.sq);
  bin.at = c.completions;
  // Only recent bins compare (a bin from before a speed change would mislead: isFresh); without
  // a recent all-workers bin the limit stays as it is (the limited bin keeps itself recent, and
  // corrects the limit if the device changed).
  const now = c.completions;
  const all = d.byBusy[c.workers - 1] as BusyBin;
  if (!isFresh(all, now)) {
    // Limited for K_FRESH completions: all workers again until they are measured anew (the
    // device may have stopped thrashing), then the choice is made again.
    if (Number.isFinite(d.limit) || Number.isFinite(d.probe)) {
      d.limit = d.probe = Infinity;
      all.n = 0;
    }
    return;
  }
  // The standard errors use the noisiest bin's spread: which items finish while workers sit idle
  // depends on their length (a run of short ones drains the queue), so a bin can look steadier than the device is.
  let spread = 0;
  for (const b of d.byBusy) if (isFresh(b, now)) spread = Math.max(spread, b.sq / (b.ms * b.ms) - 1);
  const allX = c.workers / all.ms;
  let best = c.workers;
  let bestGain = 0;
  for (let j = 1; j < c.workers; j++) {
    const b = d.byBusy[j - 1] as BusyBin;
    if (!isFresh(b, now)) continue;
    const gain = j / b.ms / allX - 1;
    if (gain >= K_GAIN + 2 * Math.sqrt(spread / b.n + spread / all.n) && gain > bestGain) {
      best = j;
      bestGain = gain;
    }
  }
  d.limit = best < c.workers ? best : Infinity;
  // Limited to k, with nothing recent at k − 1: run k − 1 until its bin is (fewer might do better yet).
  d.probe = best < c.workers && best > 1 && !isFresh(d.byBusy[best - 2] as BusyBin, now) ? best - 1 : Infinity;
}

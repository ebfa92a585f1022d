import { StokerError } from '../errors.js';
import { numberOption, type KindCounters, type Pacer, type PacerMode, type PacerOptions, type PacerSnapshot, type PacerState } from '../pacer.js';

/**
 * Options of the `stoker` pacer (beyond {@link PacerOptions}); their defaults are
 * {@link STOKER_DEFAULTS}. Each has one job.
 *
 * Estimates
 * - `serviceSmoothing` — weight of each device completion in the busy-time-per-item estimate
 *   (after n completions an old value keeps (1 − w)^n of its weight) when the sample is news:
 *   beyond the device's measured noise (3 σ of its samples; on a noisy device, two samples in a
 *   row on the same side). A sample within the noise weighs less, so that the estimate's own noise
 *   moves the inventory by at most half the waiting target: min(w, 2 / (n + 1)) with
 *   n = (2 · λ_device · latency · cv / targetWaiting)².
 * - `slowerSmoothing` — the weight of news that the device is slower: it must shrink the
 *   inventory at once. (On a skewed device, cv > 0.5, there is no news, and no
 *   starved discount: see SKEWED_CV2.)
 * - `starvedWeight` — relative weight of a sample taken while the device had idle workers (once
 *   it has been seen saturated), unless it is news of a slower device: under contention an item
 *   runs faster on a starved device, so such a sample overstates the saturated rate.
 * - `latencySmoothing` — weight of each preparation completion in the latency estimate.
 * - `occupancyTauMs` — time constant of the smoothed device occupancy.
 * - `waitingTauMs` — time constant of the smoothed waiting queue (feedback input).
 *
 * Control
 * - `fillFraction` — the inventory gap closes with time constant fillFraction × latency.
 * - `safetyZ` — the inventory target uses the latency estimate plus safetyZ standard errors of it
 *   (σ ÷ √samples): safety stock against an estimate made from few samples.
 * - `catchUp` — the dispatch rate never exceeds max(λ, what the devices drain + catchUp × λ): an
 *   empty pipeline fills at the service rate (a faster fill only piles the surplus up one latency
 *   later), a running one closes a gap at up to catchUp × λ more than it drains.
 * - `headStart` — an emptied pipeline may take headStart × σ(latency) × λ items at up to 4λ
 *   first: the quickest preparations then cover the devices while slow ones still run.
 * - `integralFraction` — the waiting feedback integrates with time constant integralFraction ×
 *   latency, and only after the inventory target has held within `settleBand` for `settleLatencies`
 *   latencies (transients pass through the waiting queue one dead time later).
 * - `settleLatencies` — see integralFraction.
 * - `settleBand` — how far (a fraction) the inventory target may move and still count as the same
 *   regime; a speed change moves it far more, measurement noise less.
 * - `burst` — most dispatches back to back after a pause (token bucket size).
 * - `bootstrapItems` — items sent before anything is measured (no prior).
 * - `bootstrapSpacingMs` — they go in groups of one item per worker, so the devices can show
 *   their contended speed, groups this far apart.
 * - `targetBatches` — on devices that batch, the waiting target in batches (× the largest
 *   batch) instead of `targetWaiting` items.
 */
export interface StokerPacerOptions extends PacerOptions {
  serviceSmoothing?: number;
  slowerSmoothing?: number;
  headStart?: number;
  starvedWeight?: number;
  latencySmoothing?: number;
  occupancyTauMs?: number;
  waitingTauMs?: number;
  fillFraction?: number;
  integralFraction?: number;
  catchUp?: number;
  safetyZ?: number;
  settleLatencies?: number;
  settleBand?: number;
  burst?: number;
  bootstrapItems?: number;
  bootstrapSpacingMs?: number;
  targetBatches?: number;
}

/**
 * The stoker pacer's defaults, one place (the reasons are in {@link StokerPacerOptions}; the
 * built-in scenarios were tuned on them: `stoker bench`). `bootstrapItems` defaults to
 * workers + targetWaiting, known only from the snapshot.
 */
export const STOKER_DEFAULTS = {
  targetWaiting: 4,
  serviceSmoothing: 0.3,
  slowerSmoothing: 0.5,
  starvedWeight: 0.05,
  headStart: 3,
  latencySmoothing: 0.03,
  occupancyTauMs: 5_000,
  waitingTauMs: 10_000,
  fillFraction: 0.25,
  integralFraction: 4,
  settleLatencies: 2,
  settleBand: 0.25,
  safetyZ: 2,
  catchUp: 0.2,
  burst: 2,
  bootstrapSpacingMs: 1000,
} as const;

/** A service sample is beyond the noise past NOISE_Z σ, and never within NOISE_FLOOR (2 %) of the estimate. */
const NOISE_Z = 3;
const NOISE_FLOOR = 0.02;
/** Below this cv² (5 %) a device counts as quiet: one sample beyond the noise is news. */
const QUIET_CV2 = 0.0025;
/** The shortest service time per item believed, ms (1 µs): below it, a sample says "fast", not how fast. */
const MIN_SERVICE_MS = 1e-3;
/**
 * The measurement self-check: while a device stays saturated (every worker busy, items waiting)
 * its completion rate *is* its capacity. Over windows of at least CHECK_MIN_COMPLETIONS such
 * completions (more on a noisy device, so that the window's own noise stays within a third of
 * CHECK_TOLERANCE), the observed rate is compared with the feed-forward one (workers ÷ busy time
 * per item); CHECK_WINDOWS windows in a row off by more than CHECK_TOLERANCE on the same side,
 * and the pacer plans with the observed rate (until a window agrees again).
 */
const CHECK_MIN_COMPLETIONS = 30;
const CHECK_TOLERANCE = 0.1;
const CHECK_WINDOWS = 3;
const CHECK_SPAN = 2;

/** Weight of each saturated sample in the noise (cv²) estimate. */
const VARIANCE_WEIGHT = 0.05;
/**
 * Weight of each sample in the slow noise estimate that sets the weight of samples within the
 * noise: were it the fast one, a long sample of a skewed distribution would raise it and so
 * lower the weight of the (mostly short) samples after it, biasing the estimate slow.
 */
const SLOW_VARIANCE_WEIGHT = 0.005;
/**
 * Above this cv² (cv 0.5) a device counts as skewed: which samples complete while it is short of
 * work then depends on their length (a run of short items drains the queue), so discounting them
 * (starvedWeight) would discount short samples and bias the estimate slow; and news of a slower
 * device weighs as news of a faster one (a run of long items is not a slowdown).
 */
const SKEWED_CV2 = 0.25;

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
const K_MIN = 5;
const K_MEMORY = 50;
/** A bin is recent while the device has completed at most this many items since its last sample. */
const K_FRESH = 500;
const K_GAIN = 0.05;

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
const BATCH_MEMORY = 50;
const BATCH_FRESH = 2000;
const BATCH_MIN = 3;

/**
 * The preparation limiter. Where preparations slow each other down (shared cores, memory
 * bandwidth), sizing the inventory from the measured latency runs away: more in preparation →
 * longer latency → a larger inventory target, and past the knee less finishes. Latency samples
 * show it late (the quick preparations finish first, the rest crawl); the age of those in flight
 * shows it at once: in a steady pipeline their mean age is E[L²] ÷ 2E[L].
 *
 * It takes over when all of these hold: the devices are short of work (smoothed occupancy below
 * STARVED); the pipeline has filled (two latencies into the busy period, 2 × (workers + target)
 * preparations measured in it); work is queued; at least that many are preparing; the latency estimate is LATENCY_UP × its lowest since the fill; and the
 * preparations are on average OVERDUE × older than they should be, or the latency estimate
 * OVERDUE × LATENCY_UP × that lowest (once the pipeline sits at the memory budget, its ages are
 * steady again) — all for half a latency on end. It then caps the number preparing at what would
 * finish as much at that lowest latency (Little's law, with the latency the ages imply; at most
 * half), climbs down by STEP while a lower cap finishes as much (within EPS), and holds the best
 * cap — REST + 1 measurements — between probes PROBE × above and below it: it moves up where a
 * probe finishes EPS_UP more (more memory must buy more than a measurement's noise), down where
 * one finishes as much within EPS.
 *
 * A cap is measured over whole turnovers: once the pipeline is within it, the first `cap`
 * preparations flush what ran at the old cap, and the next TIMED × `cap` (at least TIMED_MIN)
 * give the throughput there by Little's law (mean number preparing ÷ mean latency: steadier than
 * counting completions, whose phase a cap change has bunched).
 *
 * It lets go when a measurement ends with the devices busy (preparation is not the bottleneck
 * then), and after two moves up in a row, to where it took over, that each finish GAIN of the
 * proportional gain more: that was no contention (a slower preparation, say). Over an idle
 * pipeline it stays, and the next busy period goes on from its cap (the knee is the machine's).
 */
const STARVED = 0.9;
const OVERDUE = 1.5;
const LATENCY_UP = 1.3;
const STEP = 0.7;
const EPS = 0.02;
const EPS_UP = 0.05;
const PROBE = 1.12;
const GAIN = 2 / 3;
const TIMED = 2;
const REST = 2;
const TIMED_MIN = 30;

interface PrepareLimiter {
  /** The cap in force, the number preparing when the limiter took over, the best cap measured and its throughput (items/ms). */
  cap: number;
  engagedAt: number;
  best: number;
  bestX: number;
  /** Climbing down (false) or settled on `best`; settled, the last probe's side (+1 above, −1 below). */
  settled: boolean;
  side: number;
  /** Moves up in a row with a nearly proportional gain; holds at the best since the last probe. */
  ups: number;
  rest: number;
  /**
   * The measurement: when the pipeline came within the cap, when its first turnover ended, and
   * the snapshot's completions, ∫ preparing dt and latency total then.
   */
  from: number;
  turnedAt: number;
  mark: number;
  preparingMs: number;
  latencyMs: number;
}

/** The service time of one kind on one device, from that kind's busy-time counters there. */
interface ServiceEstimate {
  completions: number;
  busyMs: number;
  /** Smoothed device time per item, ms; NaN until measured (or the prior). */
  serviceMs: number;
  /** Smoothed squared relative deviation of saturated samples from the estimate (cv²). */
  variance: number;
  /** The same, smoothed over many more samples (SLOW_VARIANCE_WEIGHT). */
  varianceSlow: number;
  /** Whether the last sample was beyond the noise: −1 faster, 1 slower, 0 within it. */
  lastBeyond: number;
  /** Completions in the self-check's current window, and in the saturated span not yet in it. */
  satCompletions: number;
  spanCompletions: number;
}

/** Service time with k workers busy: mean and mean square of its samples, ms, how many it holds, the device's completions at its last. */
interface BusyBin {
  ms: number;
  sq: number;
  n: number;
  at: number;
}

interface DeviceEstimate {
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
  checkRatio: number;
  correction: number;
  /** A batching device's fit of busy time per batch (see BATCH_*); null on one that runs single items. */
  fit: BatchFit | null;
  /** On a batching device, per kind (snapshot index): its own fit, from its own batches (a batch is of one kind). */
  kindFits: (BatchFit | undefined)[];
}

/** A batching device's busy time per batch by its size (see BATCH_*), the counters last seen, and the fit a + b·n (NaN until made). */
interface BatchFit {
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
 * Stoker's default pacer (DESIGN §3): inventory control with a measured feed-forward.
 *
 * - Service rate λ = Σ_d workers_d / busy-ms-per-item_d, from the busy-time accumulators.
 * - Inventory J = preparing + waiting + on-device. By Little's law the pipeline needs
 *   J* = λ·L + workers + target items (L: preparation latency, plus a safety margin for its
 *   estimation error and a slow integral that trims the mean waiting queue to target).
 * - Dispatch rate u = λ + (J* − J)/T, capped at max(λ, drain + catchUp·λ). J counts the items
 *   in preparation, so the controller sees its own dispatches at once: the 20–60 s of dead time
 *   that made the field engine's queue-only controller overshoot does not exist for it.
 * - u drives a token bucket (credit grows at u, capped at `burst`): an absolute schedule that
 *   events may shift but never re-arm.
 */
export function createStokerPacer(options: StokerPacerOptions = {}): Pacer {
  return new StokerPacer(options);
}

class StokerPacer implements Pacer {
  readonly name = 'stoker';
  // Options.
  private readonly target: number;
  private readonly prior: number;
  private readonly priorByDevice: readonly number[];
  private readonly priorByKind: Readonly<Record<string, readonly number[]>>;
  /** Whether the latency estimate started from a remembered one (priorLatencyMs). */
  private readonly latencyPrior: boolean;
  private readonly serviceW: number;
  private readonly starvedWeight: number;
  private readonly slowerWeight: number;
  private readonly headStart: number;
  private readonly latencyW: number;
  private readonly occTau: number;
  private readonly waitTau: number;
  private readonly fillFraction: number;
  private readonly integralFraction: number;
  private readonly settleLatencies: number;
  private readonly settleBand: number;
  private readonly safetyZ: number;
  private readonly catchUp: number;
  private readonly burst: number;
  private readonly bootstrapItems: number | undefined;
  private readonly bootstrapSpacing: number;
  private readonly targetBatches: number;
  /** The waiting target in items, and the items the devices hold when every worker runs (full batches where they batch). */
  private waitTarget: number;
  private deviceItems = 0;

  // Estimates.
  private devices: DeviceEstimate[] = [];
  /** The kinds seen (snapshot order), and λ_k for each, items/ms (estimateRates). */
  private readonly kindNames: string[] = [];
  private readonly kindRates: number[] = [];
  /** The kind the plan is counted in: the next to be dispatched (the last one while none is queued). */
  private ref = 0;
  /** Whether the kinds run on different devices (kindsApart), for how many kinds that was worked out. */
  private apart = false;
  private apartFor = -1;
  private last = NaN;
  private prepCompletions = 0;
  private prepLatencyTotal = 0;
  private prepLatencySq = 0;
  /** Smoothed preparation latency, ms (0 until measured), and its second moment, ms². */
  private latency = 0;
  private latencySq = 0;
  private waitingAvg: number;
  /** Whether any service time is known (measured or prior). */
  private hasEstimate: boolean;

  // Control.
  private integral = 0;
  private credit = 1;
  /** Dispatch rate u and its cap, items/ms. */
  private rate = 0;
  private maxRate = 0;
  private inventoryTarget = 0;
  /** First dispatch of the current busy period. */
  private busySince = NaN;
  /** Preparations completed when the busy period began. */
  private busyFromCompletions = 0;
  private sentInBootstrap = 0;
  private lastBootstrapAt = -Infinity;
  /** Since when the inventory target has stayed within settleBand of settledTarget. */
  private settledSince = NaN;
  private settledTarget = NaN;
  private mode: PacerMode = 'bootstrap';

  // Derived from the estimates, refreshed when they change.
  /** λ, items/ms, and λ weighted by device occupancy (what the devices drain now). */
  private lambda = 0;
  private draining = 0;
  /** σ of preparation latency and the safety margin on the latency, ms. */
  private spread = 0;
  private margin = 0;

  /** The preparation limiter (STARVED …), while it holds a cap. */
  private limiter: PrepareLimiter | null = null;
  /** The lowest latency estimate since the pipeline filled (this busy period); since when the limiter's conditions hold. */
  private latencyFloor = Infinity;
  private overdueSince = NaN;
  private filled = false;
  private prepLimit = Infinity;

  constructor(options: StokerPacerOptions) {
    const D = STOKER_DEFAULTS;
    this.target = numberOption(options, 'targetWaiting', D.targetWaiting);
    this.prior = numberOption(options, 'priorServiceMs', NaN);
    this.serviceW = numberOption(options, 'serviceSmoothing', D.serviceSmoothing);
    this.starvedWeight = numberOption(options, 'starvedWeight', D.starvedWeight);
    this.slowerWeight = numberOption(options, 'slowerSmoothing', D.slowerSmoothing);
    this.headStart = numberOption(options, 'headStart', D.headStart);
    this.latencyW = numberOption(options, 'latencySmoothing', D.latencySmoothing);
    this.occTau = numberOption(options, 'occupancyTauMs', D.occupancyTauMs, 1);
    this.waitTau = numberOption(options, 'waitingTauMs', D.waitingTauMs, 1);
    this.fillFraction = numberOption(options, 'fillFraction', D.fillFraction, 0.01);
    this.integralFraction = numberOption(options, 'integralFraction', D.integralFraction, 0.01);
    this.settleLatencies = numberOption(options, 'settleLatencies', D.settleLatencies);
    this.settleBand = numberOption(options, 'settleBand', D.settleBand);
    this.safetyZ = numberOption(options, 'safetyZ', D.safetyZ);
    this.catchUp = numberOption(options, 'catchUp', D.catchUp);
    this.burst = numberOption(options, 'burst', D.burst, 1);
    this.bootstrapItems = options['bootstrapItems'] === undefined ? undefined : numberOption(options, 'bootstrapItems', 0, 1);
    this.bootstrapSpacing = numberOption(options, 'bootstrapSpacingMs', D.bootstrapSpacingMs);
    this.targetBatches = numberOption(options, 'targetBatches', NaN);
    this.waitTarget = this.target;
    this.waitingAvg = this.target;
    const perDevice = options.priorDeviceServiceMs;
    if (perDevice !== undefined && (!Array.isArray(perDevice) || perDevice.some((v) => typeof v !== 'number' || !(v >= 0)))) {
      throw new StokerError('E_INVALID_OPTION', `pacer option priorDeviceServiceMs must be an array of numbers ≥ 0, one per device (got ${JSON.stringify(perDevice)})`);
    }
    this.priorByDevice = perDevice ?? [];
    const perKind = options.priorKindServiceMs;
    if (perKind !== undefined && (typeof perKind !== 'object' || perKind === null || Object.values(perKind).some((v) => !Array.isArray(v) || v.some((x) => typeof x !== 'number' || !(x >= 0))))) {
      throw new StokerError('E_INVALID_OPTION', `pacer option priorKindServiceMs must map kind names to arrays of numbers ≥ 0, one per device (got ${JSON.stringify(perKind)})`);
    }
    this.priorByKind = perKind ?? {};
    this.hasEstimate = this.prior > 0 || this.priorByDevice.some((v) => v > 0);
    // A remembered latency counts as a full window of samples: measured ones move it as they would
    // a warm estimate (the margin for its error is as small as after that many samples).
    this.latency = numberOption(options, 'priorLatencyMs', 0);
    const sd = numberOption(options, 'priorLatencySdMs', 0);
    this.latencyPrior = this.latency > 0;
    this.latencySq = this.latency * this.latency + sd * sd;
    this.spread = sd;
    this.margin = this.latencyPrior ? (this.safetyZ * sd) / Math.sqrt(2 / this.latencyW - 1) : 0;
    // A remembered preparation limit: the limiter starts there, settled (it lets go as usual).
    const limit = numberOption(options, 'priorPrepareLimit', 0, 0);
    if (limit >= 1) {
      const cap = Math.round(limit);
      this.limiter = { cap, engagedAt: cap, best: cap, bestX: 0, settled: true, side: 1, ups: 0, rest: 0, from: NaN, turnedAt: NaN, mark: 0, preparingMs: 0, latencyMs: 0 };
      this.prepLimit = cap;
    }
  }

  observe(s: PacerSnapshot): void {
    const dt = Number.isNaN(this.last) ? 0 : s.now - this.last;
    this.last = s.now;
    if (this.devices.length !== s.devices.length) {
      this.devices = s.devices.map((d) => ({ sawSaturated: false, completions: d.completions, services: [], byBusy: [], concurrencySeen: d.concurrencyTotal ?? 0, busyMsSeen: d.busyMs, limit: Infinity, probe: Infinity, occupancy: 0, lastBusy: d.busy, lastWorkers: d.workers, plannedWorkers: d.workers, plannedAt: s.now, satMs: 0, satCompletions: 0, saturatedNow: false, spanMs: 0, spanCompletions: 0, checkStreak: 0, checkRatio: NaN, correction: 1, fit: d.batch ? newFit(d) : null, kindFits: [] }));
    }
    this.observeDevices(s, dt);
    this.observeLatency(s);
    this.estimateRates(s);
    const work = s.backlog > 0;
    const inFlight = s.preparing + s.waiting + s.onDevice;
    // Nothing measured and nothing in flight (the bootstrap items were withdrawn): bootstrap again.
    if (!this.hasEstimate && inFlight === 0) this.sentInBootstrap = 0;
    this.limitPreparing(s);
    const saturated = s.budgetBlocked || s.preparingSteps >= s.maxPreparing || s.preparing >= this.prepLimit;
    if (dt > 0) this.waitingAvg += (1 - Math.exp(-dt / this.waitTau)) * (s.waiting - this.waitingAvg);
    this.feedback(s, dt, work && !saturated);
    if (work) {
      if (Number.isNaN(this.busySince)) {
        this.busySince = s.now;
        this.busyFromCompletions = s.prepareCompletions;
      }
      this.credit = Math.min(this.burst, this.credit + this.rate * dt);
    } else {
      // Idle: restart cleanly when work comes back (one item at once, no stored-up burst).
      if (inFlight === 0) {
        this.busySince = NaN;
        // The next workload may not thrash a device as this one did: its concurrency is learned anew.
        for (const d of this.devices) {
          if (d.byBusy.length === 0 && !Number.isFinite(d.limit)) continue;
          d.byBusy = [];
          d.limit = d.probe = Infinity;
        }
      }
      this.credit = 1;
    }
    this.recompute(s);
    this.mode = !work ? 'idle' : saturated ? 'blocked' : !this.hasEstimate ? 'bootstrap' : this.rate > 0 ? 'steady' : 'hold';
  }

  nextDispatchAt(s: PacerSnapshot): number {
    // The engine names the next item's kind just before it asks: plan in that kind's items.
    if (s.nextKind >= 0 && s.nextKind !== this.ref && s.nextKind < s.kinds.length) {
      this.estimateRates(s);
      this.recompute(s);
    }
    if (!this.hasEstimate) {
      const n = this.bootstrapItems ?? this.deviceItems + this.waitTarget;
      if (this.sentInBootstrap >= n) return Infinity;
      return this.sentInBootstrap % Math.max(1, this.deviceItems) === 0 ? Math.max(s.now, this.lastBootstrapAt + this.bootstrapSpacing) : s.now;
    }
    // At the preparation limit a preparation ends before the next may start (so one is in flight).
    if (s.preparing >= this.prepLimit) return Infinity;
    if (this.credit >= 1) return s.now;
    return this.rate > 0 ? s.now + (1 - this.credit) / this.rate : Infinity;
  }

  onDispatch(s: PacerSnapshot): void {
    if (!this.hasEstimate) {
      if (this.sentInBootstrap % Math.max(1, this.deviceItems) === 0) this.lastBootstrapAt = s.now;
      this.sentInBootstrap++;
      return;
    }
    this.credit -= 1;
    this.recompute(s);
  }

  state(): PacerState {
    const ref = this.ref;
    const st: PacerState = {
      mode: this.mode,
      ratePerSec: this.lambda > 0 ? this.lambda * 1000 : null,
      intervalMs: this.rate > 0 ? 1 / this.rate : null,
      terms: { latencyMs: this.latency, inventoryTarget: this.inventoryTarget, integral: this.integral, waitingAvg: this.waitingAvg, credit: this.credit, ...(Number.isFinite(this.prepLimit) ? { prepareLimit: this.prepLimit } : {}), ...(this.limiter && Number.isFinite(this.limiter.best) ? { prepareLimitBest: this.limiter.best } : {}) },
      devices: this.devices.map((d) => {
        const fitted = batchItemMs(d);
        const ms = fitted > 0 ? fitted : (d.services[ref]?.serviceMs ?? NaN);
        const out: NonNullable<PacerState['devices']>[number] = {
          estimatedPerSec: ms > 0 ? (Math.min(d.lastWorkers, d.limit) / ms) * 1000 : null,
          observedRatio: Number.isNaN(d.checkRatio) ? null : d.checkRatio,
          trusted: d.correction === 1 ? 'estimate' : 'observed',
          workerLimit: Number.isFinite(d.limit) ? d.limit : null,
        };
        if (d.fit) out.batch = Number.isNaN(d.fit.a) ? null : { fixedMs: d.fit.a, perItemMs: d.fit.b };
        return out;
      }),
    };
    if (this.kindNames.length > 0) st.kinds = this.kindNames.map((name, k) => ({ name, estimatedPerSec: (this.kindRates[k] ?? 0) > 0 ? (this.kindRates[k] as number) * 1000 : null }));
    return st;
  }

  /** The self-check of one device (see CHECK_*), before its estimates take this event's samples. */
  private selfCheck(d: DeviceEstimate, c: PacerSnapshot['devices'][number], s: PacerSnapshot, dt: number, dc: number, device: number): void {
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
    const need = Math.max(CHECK_MIN_COMPLETIONS, (9 * variance) / ((CHECK_TOLERANCE / 3) * (CHECK_TOLERANCE / 3)));
    if (completions < need || d.satMs <= 0) return;
    // Observed completions ÷ those the feed-forward (workers ÷ busy time per item) predicts.
    const ratio = expectedMs / (usable * d.satMs);
    d.satMs = 0;
    d.satCompletions = 0;
    for (const svc of d.services) svc.satCompletions = 0;
    d.checkRatio = ratio;
    const side = Math.abs(ratio - 1) <= CHECK_TOLERANCE ? 0 : Math.sign(ratio - 1);
    d.checkStreak = side === 0 ? 0 : Math.sign(d.checkStreak) === side ? d.checkStreak + side : side;
    if (d.checkStreak === 0) d.correction = 1;
    else if (Math.abs(d.checkStreak) >= CHECK_WINDOWS) d.correction = ratio;
  }

  /**
   * Service time per item of each kind on each device, from the busy-time accumulators (weighted
   * per completion), and each device's occupancy (smoothed in time).
   */
  private observeDevices(s: PacerSnapshot, dt: number): void {
    const occKeep = dt > 0 ? Math.exp(-dt / this.occTau) : 1;
    const kinds = Math.max(1, s.kinds.length);
    for (let k = this.kindNames.length; k < s.kinds.length; k++) this.kindNames.push((s.kinds[k] as KindCounters).name);
    for (let i = 0; i < this.devices.length; i++) {
      const d = this.devices[i] as DeviceEstimate;
      const c = s.devices[i] as PacerSnapshot['devices'][number];
      // A kind first seen starts from its prior on this device, else the device's, if any.
      while (d.services.length < kinds) {
        const k = d.services.length;
        const own = s.kinds[k] ? (this.priorByKind[(s.kinds[k] as KindCounters).name]?.[i] ?? 0) : 0;
        const prior = own > 0 ? own : (this.priorByDevice[i] ?? 0) > 0 ? (this.priorByDevice[i] as number) : this.prior;
        if (prior > 0) this.hasEstimate = true;
        d.services.push(newService(completionsOf(s, k, i), busyOf(s, k, i), prior));
      }
      const dc = c.completions - d.completions;
      this.selfCheck(d, c, s, dt, dc, i);
      if (d.fit && c.batch) {
        observeBatches(d.fit, c.batch.batches, c.batch.items, c.busyMs);
        for (let k = 0; k < s.kinds.length; k++) {
          const kc = s.kinds[k] as KindCounters;
          const byKind = kc.deviceBatches;
          if (!byKind) continue;
          const f = (d.kindFits[k] ??= { maxItems: d.fit.maxItems, bins: [], batches: byKind.batches[i] ?? 0, items: byKind.items[i] ?? 0, busyMs: kc.busyMs[i] ?? 0, a: NaN, b: NaN });
          observeBatches(f, byKind.batches[i] ?? 0, byKind.items[i] ?? 0, kc.busyMs[i] ?? 0);
        }
      }
      if (dc > 0) {
        const usable = Math.min(c.workers, d.limit);
        const saturated = c.busy >= usable;
        // (On a batching device the time per item follows the batch size, not the busy workers.)
        if (!d.fit) this.observeConcurrency(d, c, dc);
        if (saturated) d.sawSaturated = true;
        for (let k = 0; k < kinds; k++) {
          const svc = d.services[k] as ServiceEstimate;
          const completions = completionsOf(s, k, i);
          const dk = completions - svc.completions;
          if (dk <= 0) continue;
          const busyMs = busyOf(s, k, i);
          // A step that reports no busy time (a very fast one, or a workload that does not measure)
          // still takes some: a service time of 0 would make the rate 0 and hold dispatch for good.
          const sample = Math.max(MIN_SERVICE_MS, (busyMs - svc.busyMs) / dk);
          // A slower device is believed at once (memory first). Under contention an item runs
          // faster when its device is short of work, so once the device has been seen saturated, a
          // fast sample taken while workers sit idle overstates the saturated rate: it is weighed
          // less. Before that, fast samples are all the evidence there is (a first sample slowed
          // by warm-up must not keep the estimate low and the device starved).
          const skewed = svc.varianceSlow > SKEWED_CV2;
          const slower = sample > svc.serviceMs && !skewed;
          const starved = !saturated && d.sawSaturated && !skewed;
          // News is a sample beyond the noise: at once on a quiet device; on a noisy one only when the
          // previous sample was beyond it on the same side too (one outlier of a skewed distribution is not news).
          const dev = svc.serviceMs > 0 ? (sample - svc.serviceMs) / svc.serviceMs : 0;
          const beyond = Math.abs(dev) <= NOISE_Z * Math.sqrt(svc.variance / dk) + NOISE_FLOOR ? 0 : Math.sign(dev);
          const news = beyond !== 0 && !skewed && (svc.variance < QUIET_CV2 || svc.lastBeyond === beyond);
          svc.lastBeyond = beyond;
          let weight: number;
          if (news) weight = slower ? this.slowerWeight : starved ? this.serviceW * this.starvedWeight : this.serviceW;
          else weight = this.quietWeight(svc, usable) * (starved ? this.starvedWeight : 1);
          // The noise itself, from saturated samples, each clipped at 3 σ so a speed change barely moves it.
          if (!starved && svc.serviceMs > 0) {
            const clip = NOISE_Z * NOISE_Z * Math.max(svc.variance, NOISE_FLOOR * NOISE_FLOOR);
            svc.variance += VARIANCE_WEIGHT * (Math.min(dev * dev * dk, clip) - svc.variance);
            svc.varianceSlow += (1 - Math.pow(1 - SLOW_VARIANCE_WEIGHT, dk)) * (Math.min(dev * dev * dk, clip) - svc.varianceSlow);
          }
          const w = 1 - Math.pow(1 - weight, dk);
          svc.serviceMs = svc.serviceMs > 0 ? svc.serviceMs + w * (sample - svc.serviceMs) : sample;
          svc.completions = completions;
          svc.busyMs = busyMs;
        }
        this.hasEstimate = true;
        d.completions = c.completions;
      }
      if (dt > 0) {
        const held = d.lastWorkers > 0 ? d.lastBusy / d.lastWorkers : 0;
        d.occupancy += (1 - occKeep) * (held - d.occupancy);
      }
      d.lastBusy = c.busy;
      d.lastWorkers = c.workers;
      if (c.workers >= d.plannedWorkers || s.now - d.plannedAt > this.latency + this.margin) {
        d.plannedWorkers = c.workers;
        d.plannedAt = s.now;
      }
    }
  }

  /**
   * Service time by the number of workers busy (from DeviceCounters.concurrencyTotal), and the
   * device's worker limit: the k whose throughput k ÷ time(k) beats all workers' by K_GAIN,
   * both measured over K_MIN samples at least (each bin the mean of its last K_MEMORY).
   */
  private observeConcurrency(d: DeviceEstimate, c: PacerSnapshot['devices'][number], dc: number): void {
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
    bin.ms += (dc / bin.n) * (sample - bin.ms);
    bin.sq += (dc / bin.n) * (sample * sample - bin.sq);
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

  workerLimit(device: number): number {
    const d = this.devices[device];
    return d ? Math.min(d.limit, d.probe) : Infinity;
  }

  /**
   * Weight of a sample within the noise: an average over n samples, enough that the inventory
   * error the estimate's noise causes (λ_device · latency · cv / √n) stays within half the target.
   */
  private quietWeight(svc: ServiceEstimate, workers: number): number {
    const lambda = svc.serviceMs > 0 ? workers / svc.serviceMs : 0;
    const spread = (lambda * this.latency * Math.sqrt(svc.varianceSlow)) / (0.5 * this.target);
    return Math.min(this.serviceW, 2 / (spread * spread + 1));
  }

  /** Preparation latency (mean and second moment) from its accumulators, weighted per sample. */
  private observeLatency(s: PacerSnapshot): void {
    const dp = s.prepareCompletions - this.prepCompletions;
    if (dp <= 0) return;
    const sample = (s.prepareLatencyMsTotal - this.prepLatencyTotal) / dp;
    const sampleSq = (s.prepareLatencySqTotal - this.prepLatencySq) / dp;
    // Per sample, not per second (an idle hour says nothing new about latency), and never less
    // than a running mean's weight while few samples exist.
    const ema = 1 - Math.pow(1 - this.latencyW, dp);
    const w = this.latencyPrior ? ema : Math.max(ema, dp / s.prepareCompletions);
    // While a pipeline fills (two latencies from the start of a busy period) the quick
    // preparations finish first: a shorter sample then is survivorship, not news.
    const filling = s.now - this.busySince < 2 * this.latency;
    if (!(filling && sample < this.latency)) {
      this.latency += w * (sample - this.latency);
      this.latencySq += w * (sampleSq - this.latencySq);
    }
    this.prepCompletions = s.prepareCompletions;
    this.prepLatencyTotal = s.prepareLatencyMsTotal;
    this.prepLatencySq = s.prepareLatencySqTotal;
    // Safety stock for the error of the latency estimate: z standard errors of its mean.
    this.spread = Math.sqrt(Math.max(0, this.latencySq - this.latency * this.latency));
    const samples = this.latencyPrior ? 2 / this.latencyW - 1 : Math.min(this.prepCompletions, 2 / this.latencyW - 1);
    this.margin = (this.safetyZ * this.spread) / Math.sqrt(samples);
  }

  /** The preparation limit for now (see STARVED … TIMED_MIN): Infinity unless the limiter holds one. */
  private limitPreparing(s: PacerSnapshot): void {
    const starved = this.lambda > 0 && this.draining < STARVED * this.lambda;
    const lim = this.limiter;
    // Idle: the next busy period goes on from where this one left the limiter — settled, from
    // the best cap (the knee is the machine's; a workload that does not contend there lets it go
    // at its first measurement); still climbing down, from the step it had reached.
    if (s.backlog + s.preparing + s.waiting + s.onDevice === 0) {
      if (lim && !Number.isNaN(lim.from)) {
        if (lim.settled) this.hold({ ...lim, engagedAt: lim.best, rest: 0, ups: 0 }, lim.best, s);
        else this.hold(lim, lim.cap, s);
      }
      this.latencyFloor = Infinity;
      this.filled = false;
      this.overdueSince = NaN;
      return;
    }
    // Filled: two latencies into the busy period, with workers + target preparations measured in
    // it for the floor; to take over, twice that (the quickest finish first: fewer would be no
    // evidence of slower ones).
    const measured = s.prepareCompletions - this.busyFromCompletions;
    // (Once filled, it stays so for the busy period: a latency that grows as fast as time passes must not unfill it.)
    if (!this.filled) this.filled = s.now - this.busySince >= 2 * this.latency && measured >= s.workers + this.target;
    const filled = this.filled;
    if (filled && this.latency < this.latencyFloor) this.latencyFloor = this.latency;
    if (!lim) {
      // Work queued behind many preparations that take far longer than they did — more than the
      // devices and the target hold, and the latency up on its floor: not a drain's last,
      // slowest ones (nothing waits behind them), nor a small pipeline that a memory budget
      // refills in bursts (ages bunch, latency stays). The cheap tests first: this runs on every event.
      const many = 2 * (s.workers + this.target);
      if (!(starved && filled && s.backlog > 0 && s.preparing >= many && measured >= many && this.latencyFloor > 0 && this.latency >= LATENCY_UP * this.latencyFloor)) {
        this.overdueSince = NaN;
        return;
      }
      const expectedAge = this.latencySq / (2 * this.latency);
      const age = s.now - s.preparingStartMsTotal / s.preparing;
      const overdue = age > OVERDUE * expectedAge || this.latency >= OVERDUE * LATENCY_UP * this.latencyFloor;
      // … for half a latency on end: arrivals that refill a draining pipeline bunch its ages for a moment too.
      if (!overdue) this.overdueSince = NaN;
      else if (Number.isNaN(this.overdueSince)) this.overdueSince = s.now;
      if (overdue && s.now - this.overdueSince >= this.latency / 2) {
        // What would finish as much as now at the floor latency (Little's law, with the latency
        // the ages imply: mean age = E[L](1 + cv²) ÷ 2), at most half.
        const cv2 = this.latencySq / (this.latency * this.latency) - 1;
        const latencyNow = (2 * age) / (1 + Math.max(0, cv2));
        const cap = Math.max(1, Math.floor(s.preparing * Math.min(0.5, this.latencyFloor / latencyNow)));
        this.hold({ cap, engagedAt: s.preparing, best: NaN, bestX: 0, settled: false, side: -1, ups: 0, rest: 0, from: NaN, turnedAt: NaN, mark: 0, preparingMs: 0, latencyMs: 0 }, cap, s);
      }
      return;
    }
    // Within the cap: the first turnover starts; after it, the next ones are timed.
    if (Number.isNaN(lim.from)) {
      if (s.preparing <= lim.cap) {
        lim.from = s.now;
        lim.mark = s.prepareCompletions;
      }
      return;
    }
    if (s.prepareCompletions - lim.mark < (Number.isNaN(lim.turnedAt) ? lim.cap : Math.max(TIMED_MIN, TIMED * lim.cap))) return;
    if (Number.isNaN(lim.turnedAt)) {
      lim.turnedAt = s.now;
      lim.mark = s.prepareCompletions;
      lim.preparingMs = s.preparingMsTotal;
      lim.latencyMs = s.prepareLatencyMsTotal;
      return;
    }
    // Little's law over the timed turnovers: mean number preparing ÷ their mean latency (less
    // noisy than counting completions in a window, whose phase the cap change has bunched).
    const meanPreparing = (s.preparingMsTotal - lim.preparingMs) / Math.max(1, s.now - lim.turnedAt);
    const x = meanPreparing / ((s.prepareLatencyMsTotal - lim.latencyMs) / (s.prepareCompletions - lim.mark));
    if (!starved) {
      this.letGo();
      return;
    }
    const up = (c: number) => Math.max(c + 1, Math.round(c * PROBE));
    const down = (c: number) => Math.max(1, Math.min(c - 1, Math.round(c / PROBE)));
    if (!lim.settled) {
      // Climbing down: a lower cap that finishes as much is better (less memory, shorter latency).
      // (At a cap of 1 there is nowhere lower to go: settled there.)
      if (lim.cap === 1) this.hold({ ...lim, best: 1, bestX: x, settled: true, side: -1 }, up(1), s);
      else if (Number.isNaN(lim.best) || x >= lim.bestX * (1 - EPS)) this.hold({ ...lim, best: lim.cap, bestX: x }, Math.max(1, Math.floor(lim.cap * STEP)), s);
      else this.hold({ ...lim, settled: true, side: -1 }, up(lim.best), s);
    } else if (lim.cap === lim.best) {
      // Holding the best: its throughput measured again (a mean over the holds there); every
      // REST + 1 holds a probe, on the other side than the last.
      const rest = lim.rest + 1;
      const bestX = lim.rest > 0 ? (lim.bestX + x) / 2 : x;
      if (rest <= REST) this.hold({ ...lim, bestX, rest }, lim.best, s);
      else this.hold({ ...lim, bestX, side: -lim.side, rest: 0 }, -lim.side > 0 ? up(lim.best) : down(lim.best), s);
    } else if (lim.cap > lim.best) {
      if (x >= lim.bestX * (1 + EPS_UP)) {
        const ups = x >= lim.bestX * (1 + GAIN * (lim.cap / lim.best - 1)) ? lim.ups + 1 : 0;
        if (ups >= 2 && lim.cap >= lim.engagedAt) {
          this.letGo();
          return;
        }
        this.hold({ ...lim, best: lim.cap, bestX: x, ups }, up(lim.cap), s);
      } else this.hold({ ...lim, ups: 0 }, lim.best, s);
    } else if (x >= lim.bestX * (1 - EPS)) this.hold({ ...lim, best: lim.cap, bestX: x, ups: 0 }, down(lim.cap), s);
    else this.hold({ ...lim, ups: 0 }, lim.best, s);
  }

  private hold(lim: PrepareLimiter, cap: number, s: PacerSnapshot): void {
    // A cap that is not a number of preparations (a latency of 0 upstream, say) is no cap.
    if (!(cap >= 1 && Number.isFinite(cap))) {
      this.letGo();
      return;
    }
    this.limiter = { ...lim, cap, from: NaN, turnedAt: NaN, mark: s.prepareCompletions };
    this.prepLimit = cap;
    this.overdueSince = NaN;
  }

  private letGo(): void {
    this.limiter = null;
    this.prepLimit = Infinity;
    this.overdueSince = NaN;
  }

  /**
   * λ_k for each kind: the sum over the devices that run it of workers ÷ its service time there. A
   * kind not measured on a device borrows its mean service time on the others, else the device's
   * mean over its other kinds, else the mean of everything measured, else the prior (so once
   * anything is known, every device that runs the next kind has a rate: dispatch never holds for
   * want of one). The plan is made in items of the next kind to be
   * dispatched (λ = its λ_k); the others count by their device time (see recompute).
   */
  private estimateRates(s: PacerSnapshot): void {
    const kinds = Math.max(1, s.kinds.length);
    // Batching devices hold a batch per worker, and want a whole batch waiting when a worker
    // frees: the waiting target (or targetBatches batches) plus half a batch (the mean of the
    // queue's saw-tooth, which a full batch empties at each start).
    let items = 0;
    let largest = 1;
    for (const c of s.devices) {
      const n = c.batch ? c.batch.maxItems : 1;
      items += c.workers * n;
      if (c.eligible !== false) largest = Math.max(largest, n);
    }
    this.deviceItems = items;
    this.waitTarget = largest > 1 ? (this.targetBatches >= 0 ? this.targetBatches * largest : this.target) + largest / 2 : this.target;
    if (s.nextKind >= 0 && s.nextKind < kinds) this.ref = s.nextKind;
    else if (this.ref >= kinds) this.ref = 0;
    for (let k = 0; k < kinds; k++) {
      // The fallbacks, made only when a device has not measured this kind (-1: not yet made).
      let kindMs = -1;
      // (With one kind, a device that does not run it has no work: eligible says so.)
      const runsOn = s.kinds.length > 1 ? (s.kinds[k] as KindCounters).devices : null;
      let lambda = 0;
      let draining = 0;
      for (let i = 0; i < this.devices.length; i++) {
        if (runsOn && !runsOn.includes(i)) continue;
        const d = this.devices[i] as DeviceEstimate;
        const c = s.devices[i] as PacerSnapshot['devices'][number];
        // A device none of the jobs in the system can use (devices that name their kinds) serves none of the work.
        if (c.eligible === false) continue;
        let ms = batchItemMs(d, k);
        if (!(ms > 0)) ms = d.services[k]?.serviceMs ?? NaN;
        if (!(ms > 0)) {
          if (kindMs < 0) kindMs = this.meanServiceMs(k);
          ms = kindMs > 0 ? kindMs : deviceMeanMs(d, this.meanServiceMs(-1));
        }
        // Planned for the workers of the last latency (see plannedWorkers); what drains now is what is alive.
        const workers = Math.min(d.plannedWorkers, d.limit);
        if (ms > 0 && workers > 0) {
          // The self-check's factor: 1 unless saturated windows keep showing another capacity.
          lambda += (workers / ms) * d.correction;
          draining += (c.workers / ms) * d.correction * d.occupancy;
        }
      }
      this.kindRates[k] = lambda;
      if (k === this.ref) {
        this.lambda = lambda;
        this.draining = draining;
      }
    }
    // Kinds on different devices (devices that name their kinds): the next kind's devices are not
    // the only ones that drain, so one plan over every device with work, each at its mean service
    // time over its kinds (as with one kind), and no weighting by kind.
    if (this.kindsApart(s)) {
      let lambda = 0;
      let draining = 0;
      for (let i = 0; i < this.devices.length; i++) {
        const d = this.devices[i] as DeviceEstimate;
        const c = s.devices[i] as PacerSnapshot['devices'][number];
        if (c.eligible === false) continue;
        const fitted = batchItemMs(d);
        const ms = fitted > 0 ? fitted : deviceMeanMs(d, this.meanServiceMs(-1));
        const workers = Math.min(d.plannedWorkers, d.limit);
        if (ms > 0 && workers > 0) {
          lambda += (workers / ms) * d.correction;
          draining += (c.workers / ms) * d.correction * d.occupancy;
        }
      }
      this.lambda = lambda;
      this.draining = draining;
    }
  }

  /** Whether the kinds seen run on different sets of devices (cached: a kind's devices never change). */
  private kindsApart(s: PacerSnapshot): boolean {
    if (this.apartFor !== s.kinds.length) {
      this.apartFor = s.kinds.length;
      const first = s.kinds[0]?.devices;
      this.apart = s.kinds.some((k) => k.devices.length !== first?.length || k.devices.some((d, i) => d !== first[i]));
    }
    return this.apart;
  }

  /** The mean service time measured for kind k over the devices (k = −1: for any kind), else the prior (k = −1) or NaN. */
  private meanServiceMs(k: number): number {
    let n = 0;
    let sum = 0;
    for (const d of this.devices) {
      for (let j = 0; j < d.services.length; j++) {
        const ms = (d.services[j] as ServiceEstimate).serviceMs;
        if ((k < 0 || j === k) && ms > 0) {
          n++;
          sum += ms;
        }
      }
    }
    return n > 0 ? sum / n : k < 0 ? this.prior : NaN;
  }

  /**
   * The slow integral on the waiting queue. Transients (start-up, speed changes) pass through the
   * waiting queue one dead time later; integrating them would wind the trim up, so only a loop
   * that has held its inventory target within settleBand for settleLatencies latencies is integrated,
   * and never while idle, blocked or saturated (anti-windup).
   */
  private feedback(s: PacerSnapshot, dt: number, free: boolean): void {
    const inControl = free && this.hasEstimate && this.latency > 0 && this.rate > 0 && this.rate < this.maxRate;
    if (!inControl || !(Math.abs(this.inventoryTarget - this.settledTarget) <= this.settleBand * this.settledTarget)) {
      this.settledSince = s.now;
      this.settledTarget = this.inventoryTarget;
    } else if (dt > 0 && s.now - this.settledSince >= this.settleLatencies * this.latency) {
      const target = this.waitTarget;
      const error = Math.min(Math.max(target - this.waitingAvg, -target), target);
      this.integral += (error * dt) / (this.integralFraction * this.latency);
      this.integral = Math.min(Math.max(this.integral, -target), target + s.workers);
    }
  }

  /**
   * Safety stock for a skewed device's own variability (cv² > SKEWED_CV2): over one preparation
   * latency L the devices take λL items on average, with a standard deviation of √(λL·cv²) (a
   * renewal process) — more than the waiting target covers when cv is large, and the waiting
   * feedback cannot help (the queue's spread, not its mean, starves the device). The target holds
   * safetyZ of those more; on less noisy devices the waiting feedback trims the mean and this is 0.
   */
  private serviceStock(lambda: number, lat: number): number {
    let cv2 = 0;
    let rates = 0;
    for (const d of this.devices) {
      const svc = d.services[this.ref];
      // (A batching device's time per item spreads with the batch size, which is not noise.)
      if (!svc || !(svc.serviceMs > 0) || d.fit) continue;
      const r = Math.min(d.plannedWorkers, d.limit) / svc.serviceMs;
      rates += r;
      if (svc.varianceSlow > SKEWED_CV2) cv2 += r * svc.varianceSlow;
    }
    return rates > 0 && cv2 > 0 ? this.safetyZ * Math.sqrt((lambda * lat * cv2) / rates) : 0;
  }

  /** The dispatch rate u for the current inventory. */
  private recompute(s: PacerSnapshot): void {
    const lambda = this.lambda;
    if (!(lambda > 0)) {
      this.rate = 0;
      return;
    }
    // Preparation latency: measured, else (with a prior service time) the age of the current busy period.
    const lat = this.latency > 0 ? this.latency : Number.isFinite(this.busySince) ? s.now - this.busySince : 0;
    // Items of other kinds count by their device time, in items of the next kind (λ ÷ λ_k each).
    let inventory = s.preparing + s.waiting + s.onDevice;
    if (s.kinds.length > 1 && !this.apart) for (let k = 0; k < s.kinds.length; k++) {
      const kc = s.kinds[k] as KindCounters;
      const rate = this.kindRates[k] as number;
      if (k !== this.ref && rate > 0) inventory += (kc.preparing + kc.waiting + kc.onDevice) * (lambda / rate - 1);
    }
    // On the devices: an item per worker, a full batch per worker where they batch.
    let onDevices = 0;
    for (let i = 0; i < this.devices.length; i++) {
      const d = this.devices[i] as DeviceEstimate;
      onDevices += Math.min(d.plannedWorkers, d.limit) * (s.devices[i]?.batch?.maxItems ?? 1);
    }
    this.inventoryTarget = lambda * (lat + this.margin) + this.serviceStock(lambda, lat) + onDevices + this.waitTarget + this.integral;
    const u = lambda + (this.inventoryTarget - inventory) / Math.max(1000, this.fillFraction * lat);
    this.maxRate = inventory < this.headStart * this.spread * lambda ? 4 * lambda : Math.max(lambda, this.draining + this.catchUp * lambda);
    this.rate = Math.min(Math.max(u, 0), this.maxRate);
  }
}

function newFit(c: PacerSnapshot['devices'][number]): BatchFit {
  const b = c.batch as NonNullable<typeof c.batch>;
  return { maxItems: b.maxItems, bins: [], batches: b.batches, items: b.items, busyMs: c.busyMs, a: NaN, b: NaN };
}

/**
 * Takes new batches into a fit's bins and refits (see BATCH_*): a device's (all its batches) or
 * one kind's on it, from the cumulative batches, their items and their busy ms.
 */
function observeBatches(f: BatchFit, batches: number, items: number, busyMs: number): void {
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
function batchItemMs(d: DeviceEstimate, k = -1): number {
  const own = k >= 0 ? d.kindFits[k] : undefined;
  const f = own && !Number.isNaN(own.a) ? own : d.fit;
  if (!f || Number.isNaN(f.a)) return NaN;
  const n = f.maxItems;
  return Math.max(MIN_SERVICE_MS, (f.a + f.b * n) / n);
}

/** Whether a bin counts: K_MIN samples, the last within K_FRESH of the device's completions (`now`). */
function isFresh(b: BusyBin, now: number): boolean {
  return b.n >= K_MIN && now - b.at <= K_FRESH;
}

function newService(completions: number, busyMs: number, serviceMs: number): ServiceEstimate {
  return { completions, busyMs, serviceMs, variance: 0, varianceSlow: 0, lastBeyond: 0, satCompletions: 0, spanCompletions: 0 };
}

/** Kind k's completions on device d (a snapshot without kinds: the device's own). */
function completionsOf(s: PacerSnapshot, k: number, d: number): number {
  return s.kinds.length > 0 ? ((s.kinds[k] as KindCounters).completions[d] as number) : (s.devices[d] as PacerSnapshot['devices'][number]).completions;
}

function busyOf(s: PacerSnapshot, k: number, d: number): number {
  return s.kinds.length > 0 ? ((s.kinds[k] as KindCounters).busyMs[d] as number) : (s.devices[d] as PacerSnapshot['devices'][number]).busyMs;
}

/** A device's mean service time over the kinds measured on it, else `fallback`. */
function deviceMeanMs(d: DeviceEstimate, fallback: number): number {
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

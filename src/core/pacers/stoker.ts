import { StokerError } from '../errors.js';
import { numberOption, type Pacer, type PacerMode, type ReadonlySnapshot, type PacerState } from '../pacer.js';
import { batchItemMs, busyOf, completionsOf, deviceMeanMs, MIN_SERVICE_MS, newFit, newService, NOISE_FLOOR, NOISE_Z, observeBatches, observeConcurrency, plannedWorkers, NOISE_SAMPLES, QUIET_CV2, samplesWeight, selfCheck, SKEWED_CV2, SLOW_VARIANCE_WEIGHT, TAIL_Z, VARIANCE_WEIGHT, type DeviceEstimate, type ServiceEstimate } from './stoker-device.js';
import { PrepareLimit, type PacerView } from './stoker-limiter.js';
import { KindPlan } from './stoker-rates.js';
import { STOKER_DEFAULTS, type StokerPacerOptions } from './stoker-options.js';

export { STOKER_DEFAULTS, type StokerPacerOptions } from './stoker-options.js';

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

/** A device's service time as state() shows it: for the plan's kind, else (a device that does not run it) for the first kind it has measured; NaN: none. */
function shownServiceMs(d: DeviceEstimate, ref: number): number {
  const own = d.services[ref]?.serviceMs ?? 0;
  if (own > 0) return own;
  for (const v of d.services) if ((v?.serviceMs ?? 0) > 0) return (v as ServiceEstimate).serviceMs;
  return NaN;
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

  // Estimates.
  private devices: DeviceEstimate[] = [];
  /** The kinds seen (snapshot order), and the plan across them: λ_k of each, the kind planned in (stoker-rates.ts). */
  private readonly kindNames: string[] = [];
  private readonly plan: KindPlan;
  private last = NaN;
  private prepCompletions = 0;
  private prepLatencyTotal = 0;
  private prepLatencySq = 0;
  private prepConcurrency = 0;
  /** The mean number preparing while the preparations behind the latency estimate ran, smoothed as it is. */
  private latencyConcurrency = 0;
  /** The latency estimate's samples in effect: as many as measured, up to an average's over the smoothing (2 ÷ latencySmoothing − 1). */
  private latencySamples = 1;
  /** Each kind's smoothed preparation latency, ms (0 until measured), and the accumulators read at the last sample. */
  private readonly kindLatency: number[] = [];
  private readonly kindPrepSeen: number[] = [];
  private readonly kindLatencySeen: number[] = [];
  /** Smoothed preparation latency, ms (0 until measured), and its second moment, ms². */
  private latency = 0;
  private latencySq = 0;
  // (Initialised here, not only in the constructor: a field that starts undefined holds its
  // numbers boxed, and this one is written on every event.)
  private waitingAvg = 0;
  /** Whether any service time is known (measured or prior). */
  private hasEstimate: boolean;

  // Control.
  private integral = 0;
  private credit = 1;
  /** Dispatch rate u and its cap, items/ms. */
  private rate = 0;
  private maxRate = 0;
  private inventoryTarget = 0;
  /**
   * With kinds on the same devices: the inventory (in the plan's items) under which the devices run
   * dry before an item dispatched now is prepared — λ × the planned latency, and an item per
   * worker. Below it an item goes at once, not at the rate (capped at λ + catchUp × λ, a fill
   * takes latencies): dispatch follows the queue, and when a slower or heavier kind's turn comes
   * the inventory in its items drops at once, and the devices live meanwhile on what quicker
   * kinds left in flight. Blocks of kinds 0.4–2 s apart under a binding budget (zk-blocks in
   * test/sim/regimes.test.ts): 0.977 → 0.989 of unpaced's throughput over 10 seeds; mixed-kinds
   * 0.992 → 1.001 of capacity. Only while another kind than the plan's is queued or in flight, and
   * two planned latencies into the busy period: a fill from empty is the head start's (its λ, read
   * from the first samples, often reads high — on seed, peak memory 80 → 99 GiB, and so where one
   * item of another kind ran beside it, 57–63 dispatched back to back).
   */
  private starveBelow = 0;
  /**
   * The capacity the estimates give (items/ms), in all and per kind, where the plan has none — idle,
   * where devices name their kinds (no device has work, and the plan counts none), or a kind whose
   * devices have no work while others do: every device's for the kinds it runs (see believe). The
   * estimates stand, and state() reports them (an operator's capacity gauge read 0, and a kind's
   * series vanished, whenever the server went idle).
   */
  private believed = 0;
  private readonly believedByKind: number[] = [];
  /** First dispatch of the current busy period. */
  private busySince = NaN;
  /** Preparations completed when the busy period began. */
  private busyFromCompletions = 0;
  private sentInBootstrap = 0;
  private lastBootstrapAt = -Infinity;
  /** The items in flight at the last observation or dispatch (what a fall since says was lost). */
  private inFlightSeen = 0;
  /** Since when the inventory target has stayed within settleBand of settledTarget. */
  private settledSince = NaN;
  private settledTarget = NaN;
  private mode: PacerMode = 'bootstrap';
  /**
   * When the memory budget last held the head of the queue back, and the latency the plan was
   * last made for: within one such latency of it the budget, not the pacer, bounds what prepares
   * (see {@link budgetBound}).
   */
  private budgetBlockedAt = -Infinity;
  private planLatencyMs = 0;
  /** The items in flight when it held the queue back (the most since, while it binds): what the bypass refills to. */
  private budgetHeld = 0;

  // Derived from the estimates, refreshed when they change (λ and what drains: this.plan).
  /** σ of preparation latency and the safety margin on the latency, ms. */
  private spread = 0;
  private margin = 0;
  /** The devices' completions per ms, smoothed over occupancyTauMs (in items of the plan's kind). */
  private drained = 0;

  // The plan recompute made at `plannedAt` (NaN: none) besides the inventory target: the feed-forward
  // rate, the time the inventory error is closed over (ms), the inventory under which the head start
  // holds, and the rate cap past it. A dispatch moves only the inventory: at that instant they stand (rerate).
  private plannedAt = NaN;
  private feedForward = 0;
  private fillMs = 0;
  private head = 0;
  private cruiseRate = 0;

  /** The preparation limiter (stoker-limiter.ts), and what it reads of this pacer (updated before each call). */
  private readonly limit: PrepareLimit;
  private readonly view: PacerView = { lambda: 0, draining: 0, latency: 0, latencySq: 0, latencyConcurrency: 0, latencySamples: 1, busySince: NaN, busyFromCompletions: 0, target: 0 };

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
    this.plan = new KindPlan(this.target, this.targetBatches, this.prior);
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
    if (this.latencyPrior) this.latencySamples = 2 / this.latencyW - 1;
    this.margin = this.latencyPrior ? (this.safetyZ * sd) / Math.sqrt(this.latencySamples) : 0;
    // A remembered preparation limit: the limiter starts there, settled (it lets go as usual).
    this.limit = new PrepareLimit(numberOption(options, 'priorPrepareLimit', 0, 0));
  }

  observe(s: ReadonlySnapshot): void {
    const dt = Number.isNaN(this.last) ? 0 : s.now - this.last;
    if (this.devices.length !== s.devices.length) {
      this.devices = s.devices.map((d) => ({ sawSaturated: false, completions: d.completions, services: [], byBusy: [], concurrencySeen: d.concurrencyTotal ?? 0, busyMsSeen: d.busyMs, limit: Infinity, probe: Infinity, occupancy: 0, lastBusy: d.busy, lastWorkers: d.workers, plannedWorkers: d.workers, plannedAt: s.now, satMs: 0, satCompletions: 0, saturatedNow: false, spanMs: 0, spanCompletions: 0, checkStreak: 0, sinceWindow: 0, checkRatio: NaN, correction: 1, fit: d.batch ? newFit(d) : null, kindFits: [] }));
    }
    const first = Number.isNaN(this.last);
    this.last = s.now;
    // What the occupancy and the drained rate, both smoothed over occupancyTauMs, keep of the past.
    const keep = dt > 0 ? Math.exp(-dt / this.occTau) : 1;
    this.observeDevices(s, dt, keep);
    this.observeLatency(s);
    this.plan.estimate(s, this.devices);
    if (this.planMissesKind()) this.believe(s);
    // (The counters a pacer finds at its first snapshot were not drained in its time.)
    const done = this.plan.completedSince(s);
    this.drained = this.drained * keep + (first ? 0 : done / this.occTau);
    const work = s.backlog > 0;
    const inFlight = s.preparing + s.waiting + s.onDevice;
    // Nothing measured and nothing in flight (the bootstrap items were withdrawn): bootstrap again.
    // Some withdrawn (or failed) while others are in flight: those are replaced — counted as sent,
    // a cancel of the first items beside a preparation that never ended held dispatch for good.
    if (!this.hasEstimate && inFlight < this.inFlightSeen) this.sentInBootstrap = Math.max(0, this.sentInBootstrap - (this.inFlightSeen - inFlight));
    this.inFlightSeen = inFlight;
    if (!this.hasEstimate && inFlight === 0) this.sentInBootstrap = 0;
    // (Before the limiter reads it: at the first observation of a busy period the counters of the last one are not this one's.)
    if (work && Number.isNaN(this.busySince)) {
      this.busySince = s.now;
      this.busyFromCompletions = s.prepareCompletions;
    }
    const v = this.view;
    v.lambda = this.plan.lambda;
    v.draining = this.plan.draining;
    v.latency = this.latency;
    v.latencySq = this.latencySq;
    v.latencyConcurrency = this.latencyConcurrency;
    v.latencySamples = this.latencySamples;
    v.busySince = this.busySince;
    v.busyFromCompletions = this.busyFromCompletions;
    v.target = this.target;
    this.limit.update(s, v);
    // (A block the bypass itself ran into opens no new window: one opened by a brief block — the
    // first fill, a large item — would renew itself for as long as work is queued, and the pacer
    // would be unpaced for good: waiting 132 against 7 where one item filled the budget once.)
    if (s.budgetBlocked) {
      if (!this.budgetBound(s)) {
        this.budgetBlockedAt = s.now;
        this.budgetHeld = inFlight;
      } else this.budgetHeld = Math.max(this.budgetHeld, inFlight);
    }
    const saturated = s.budgetBlocked || s.preparingSteps >= s.maxPreparing || s.preparing >= this.limit.cap;
    if (dt > 0) this.waitingAvg += (1 - Math.exp(-dt / this.waitTau)) * (s.waiting - this.waitingAvg);
    // (While the budget binds, the waiting queue is the budget's bypass, not an error of the plan: no integral.)
    this.feedback(s, dt, work && !saturated && !this.budgetBound(s));
    if (work) {
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

  nextDispatchAt(s: ReadonlySnapshot): number {
    // The engine names the next item's kind just before it asks: plan in that kind's items.
    if (s.nextKind >= 0 && s.nextKind !== this.plan.ref && s.nextKind < s.kinds.length) {
      this.plan.estimate(s, this.devices);
      this.recompute(s);
    }
    if (!this.hasEstimate) {
      const n = this.bootstrapItems ?? this.plan.deviceItems + this.plan.waitTarget;
      if (this.sentInBootstrap >= n) return Infinity;
      return this.sentInBootstrap % Math.max(1, this.plan.deviceItems) === 0 ? Math.max(s.now, this.lastBootstrapAt + this.bootstrapSpacing) : s.now;
    }
    // At the preparation limit a preparation ends before the next may start (so one is in flight).
    if (s.preparing >= this.limit.cap) return Infinity;
    if (this.credit >= 1 || this.bypass(s) || this.starving(s, 0)) return s.now;
    return this.rate > 0 ? s.now + (1 - this.credit) / this.rate : Infinity;
  }

  /**
   * Whether the memory budget held the head of the queue back, while the pacer paced, within the
   * last planned latency: then the budget, not the pacer, bounds what prepares, and memory is at
   * the budget either way. What the pacer holds back by its rate then is what the devices need one
   * latency later — with kinds of different sizes, a heavy kind's block fills the budget and
   * prepares slowly, and only the items dispatched before it keep the devices busy meanwhile —
   * so the rate is bypassed (see {@link bypass}).
   */
  private budgetBound(s: ReadonlySnapshot): boolean {
    return s.now - this.budgetBlockedAt < this.planLatencyMs;
  }

  /**
   * While the budget binds (budgetBound), an item is dispatched at once, not at the rate, as long
   * as fewer are in flight than when the budget held the queue back, or the inventory is under its
   * target (a user trial's blocks of kinds of different sizes: 0.964 of unpaced's throughput over
   * 10 seeds, 0.977 with this). Not up to whatever the budget admits, as unpaced: an item that
   * filled the budget once, then freed it, let a flood of small ones in (waiting 113 against 8).
   */
  private bypass(s: ReadonlySnapshot): boolean {
    return this.budgetBound(s) && (s.preparing + s.waiting + s.onDevice < this.budgetHeld || this.plan.inventory(s) < this.inventoryTarget);
  }

  /** believed and believedByKind from every device's estimates, as the plan makes them but for devices with no work (the plan has none to count). */
  private believe(s: ReadonlySnapshot): void {
    let all = 0;
    for (let k = 0; k < Math.max(1, s.kinds.length); k++) {
      const runsOn = s.kinds[k]?.devices ?? null;
      let rate = 0;
      for (let i = 0; i < this.devices.length; i++) {
        if (runsOn && !runsOn.includes(i)) continue;
        const d = this.devices[i] as DeviceEstimate;
        let ms = batchItemMs(d, k);
        if (!(ms > 0)) ms = d.services[k]?.serviceMs ?? NaN;
        if (ms > 0) rate += (plannedWorkers(d) / ms) * d.correction;
      }
      // (0 where no worker is left: shown as none, not the last figure.)
      this.believedByKind[k] = rate;
      if (k === this.plan.ref) all = rate;
    }
    // Kinds on devices of their own: every device, each at its mean over the kinds it measured (as the plan counts them).
    if (this.plan.apart) {
      all = 0;
      for (const d of this.devices) {
        let ms = batchItemMs(d);
        if (!(ms > 0)) ms = deviceMeanMs(d, NaN);
        if (ms > 0) all += (plannedWorkers(d) / ms) * d.correction;
      }
    }
    this.believed = all;
  }

  /** Whether the plan has no rate for some kind (or none at all): believe() gives state() one from the estimates. */
  private planMissesKind(): boolean {
    if (!(this.plan.lambda > 0)) return true;
    for (let k = 0; k < this.kindNames.length; k++) if (!((this.plan.rates[k] ?? 0) > 0)) return true;
    return false;
  }

  /**
   * Whether a kind other than the plan's has partitions queued or in flight (a snapshot made by
   * hand, with no queued counts: any other kind): `s.kinds` is every kind ever submitted.
   */
  private otherKindLive(s: ReadonlySnapshot): boolean {
    for (let k = 0; k < s.kinds.length; k++) {
      if (k === this.plan.ref) continue;
      const c = s.kinds[k] as ReadonlySnapshot['kinds'][number];
      if ((c.queued ?? 1) + c.preparing + c.waiting + c.onDevice > 0) return true;
    }
    return false;
  }

  /** Whether the inventory, less `sent` items just dispatched, is under starveBelow (none with one kind: no inventory to count). */
  private starving(s: ReadonlySnapshot, sent: number): boolean {
    return this.starveBelow > 0 && this.plan.inventory(s) - sent < this.starveBelow;
  }

  /** When the preparation limiter may decide to take over with no event in between (PrepareLimit.checkAt). */
  observeAgainAt(): number {
    return this.limit.checkAt;
  }

  onDispatch(s: ReadonlySnapshot): void {
    this.inFlightSeen = s.preparing + s.waiting + s.onDevice;
    if (!this.hasEstimate) {
      if (this.sentInBootstrap % Math.max(1, this.plan.deviceItems) === 0) this.lastBootstrapAt = s.now;
      this.sentInBootstrap++;
      return;
    }
    // (Dispatched past the rate while the budget binds, or below starveBelow — counted with the item
    // just sent — no debt to pay back once it no longer does.)
    this.credit = this.budgetBound(s) || this.starving(s, 1) ? Math.max(0, this.credit - 1) : this.credit - 1;
    if (s.now === this.plannedAt) this.rerate(s);
    else this.recompute(s);
  }

  state(): PacerState {
    const ref = this.plan.ref;
    // The capacity, and the inventory target, in partitions of the mix the devices ran lately (see
    // KindPlan.mixRate): the plan counts in the next kind's items, and both swung with it between kinds.
    const lambda = this.plan.lambda;
    const mix = lambda > 0 ? this.plan.mixRate() : 0;
    const st: PacerState = {
      mode: this.mode,
      ratePerSec: mix > 0 ? mix * 1000 : this.believed > 0 ? this.believed * 1000 : null,
      intervalMs: this.rate > 0 ? 1 / this.rate : null,
      // (planRatePerSec: λ of the kind the plan counts in — the next to be dispatched —, what intervalMs is in items of.)
      terms: { latencyMs: this.latency, inventoryTarget: mix > 0 ? this.inventoryTarget * (mix / lambda) : this.inventoryTarget, planRatePerSec: lambda * 1000, waitingTarget: this.plan.waitTarget, integral: this.integral, waitingAvg: this.waitingAvg, credit: this.credit, ...(Number.isFinite(this.limit.cap) ? { prepareLimit: this.limit.cap } : {}), ...(this.limit.state && Number.isFinite(this.limit.state.best) ? { prepareLimitBest: this.limit.state.best } : {}), ...(this.plan.doubt < 1 ? { rateDoubt: this.plan.doubt } : {}) },
      devices: this.devices.map((d) => {
        const fitted = batchItemMs(d);
        const ms = fitted > 0 ? fitted : shownServiceMs(d, ref);
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
    if (this.kindNames.length > 0) {
      const rate = (k: number) => ((this.plan.rates[k] ?? 0) > 0 ? (this.plan.rates[k] as number) : (this.believedByKind[k] ?? 0));
      st.kinds = this.kindNames.map((name, k) => ({ name, estimatedPerSec: rate(k) > 0 ? rate(k) * 1000 : null }));
    }
    return st;
  }

  /**
   * Service time per item of each kind on each device, from the busy-time accumulators (weighted
   * per completion), and each device's occupancy (smoothed in time: `occKeep` of it kept over dt).
   */
  private observeDevices(s: ReadonlySnapshot, dt: number, occKeep: number): void {
    const kinds = Math.max(1, s.kinds.length);
    for (let k = this.kindNames.length; k < s.kinds.length; k++) this.kindNames.push((s.kinds[k] as ReadonlySnapshot['kinds'][number]).name);
    for (let i = 0; i < this.devices.length; i++) {
      const d = this.devices[i] as DeviceEstimate;
      const c = s.devices[i] as ReadonlySnapshot['devices'][number];
      // A kind first seen starts from its prior on this device, else the device's, if any.
      while (d.services.length < kinds) {
        const k = d.services.length;
        const own = s.kinds[k] ? (this.priorByKind[(s.kinds[k] as ReadonlySnapshot['kinds'][number]).name]?.[i] ?? 0) : 0;
        const prior = own > 0 ? own : (this.priorByDevice[i] ?? 0) > 0 ? (this.priorByDevice[i] as number) : this.prior;
        if (prior > 0) this.hasEstimate = true;
        d.services.push(newService(completionsOf(s, k, i), busyOf(s, k, i), prior));
      }
      const dc = c.completions - d.completions;
      selfCheck(d, c, s, dt, dc, i);
      if (d.fit && c.batch) {
        observeBatches(d.fit, c.batch.batches, c.batch.items, c.busyMs);
        for (let k = 0; k < s.kinds.length; k++) {
          const kc = s.kinds[k] as ReadonlySnapshot['kinds'][number];
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
        if (!d.fit) observeConcurrency(d, c, dc);
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
          this.serviceSample(svc, sample, dk, usable, !saturated && d.sawSaturated);
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
   * One service sample (`dk` completions at `sample` ms each, their mean). A slower device is
   * believed at once (memory first). Under contention an item runs faster when its device is
   * short of work, so once the device has been seen saturated, a fast sample taken while workers
   * sit idle (`starvedDevice`) overstates the saturated rate: it is weighed less. Before that, fast
   * samples are all the evidence there is (a first sample slowed by warm-up must not keep the
   * estimate low and the device starved). On a skewed device neither (see SKEWED_CV2), judged
   * with this sample: the first long sample of a skewed device is not news of a slower one.
   */
  private serviceSample(svc: ServiceEstimate, sample: number, dk: number, workers: number, starvedDevice: boolean): void {
    svc.samples += dk;
    // A prior (a remembered or configured service time) only starts the pacer without a bootstrap:
    // the first measured sample replaces it, as it would a cold estimate. (Held as an anchor, a
    // remembered 0.3 s against 0.2 s items came down over some 25 completions, the devices underfed
    // meanwhile: a restarted server ran its first jobs slower than a cold one.)
    if (svc.prior) {
      svc.prior = false;
      svc.serviceMs = NaN;
    }
    if (!(svc.serviceMs > 0)) {
      svc.serviceMs = sample;
      this.observeTail(svc, sample, dk, 0);
      return;
    }
    const dev = (sample - svc.serviceMs) / svc.serviceMs;
    this.observeTail(svc, sample, dk, dev);
    const skewed = svc.varianceTail > SKEWED_CV2;
    const slower = sample > svc.serviceMs && !skewed;
    const starved = starvedDevice && !skewed;
    // News is a sample beyond the noise: at once on a quiet device; on a noisy one only when the
    // previous sample was beyond it on the same side too (one outlier of a skewed distribution is not news).
    const beyond = Math.abs(dev) <= NOISE_Z * Math.sqrt(svc.variance / dk) + NOISE_FLOOR ? 0 : Math.sign(dev);
    const news = beyond !== 0 && !skewed && (svc.variance < QUIET_CV2 || svc.lastBeyond === beyond);
    svc.lastBeyond = beyond;
    let weight: number;
    if (news) weight = slower ? this.slowerWeight : starved ? this.serviceW * this.starvedWeight : this.serviceW;
    else {
      // Never less than a running mean's weight: an average over the samples
      // there are until the noise asks for more. (Smoothed at once over the many a skewed device's
      // noise asks for, the first samples' mean would hold for hundreds more, their error with it.)
      const quiet = this.quietWeight(svc, workers);
      weight = Math.max(quiet, dk / svc.samples) * (starved ? this.starvedWeight : 1);
    }
    // The noise itself, from saturated samples, each clipped at 3 σ so a speed change barely moves it.
    if (!starved) {
      const clip = NOISE_Z * NOISE_Z * Math.max(svc.variance, NOISE_FLOOR * NOISE_FLOOR);
      svc.variance += VARIANCE_WEIGHT * (Math.min(dev * dev * dk, clip) - svc.variance);
      svc.varianceSlow += samplesWeight(SLOW_VARIANCE_WEIGHT, dk) * (Math.min(dev * dev * dk, clip) - svc.varianceSlow);
    }
    svc.serviceMs += samplesWeight(weight, dk) * (sample - svc.serviceMs);
  }

  /**
   * The noise with its tail (ServiceEstimate.varianceTail) takes a sample, `dev` from the estimate:
   * over the first NOISE_SAMPLES (an event that begins among them counts whole) it is their sample
   * variance (Welford, several completions in one event as that many at their mean); then it is
   * smoothed as varianceSlow, but a running mean while that weighs more, each sample clipped at
   * TAIL_Z σ of it, or of a skewed device's noise where that is more (see TAIL_Z).
   */
  private observeTail(svc: ServiceEstimate, sample: number, dk: number, dev: number): void {
    if (svc.samples - dk < NOISE_SAMPLES) {
      const delta = sample - svc.firstMean;
      svc.firstMean += (dk / svc.samples) * delta;
      svc.firstM2 += dk * delta * (sample - svc.firstMean);
      const n = svc.samples;
      svc.varianceTail = n > 1 ? svc.firstM2 / (n - 1) / (svc.firstMean * svc.firstMean) : 0;
      return;
    }
    const weight = Math.max(samplesWeight(SLOW_VARIANCE_WEIGHT, dk), dk / svc.samples);
    const clip = TAIL_Z * TAIL_Z * Math.max(svc.varianceTail, SKEWED_CV2);
    svc.varianceTail += weight * (Math.min(dev * dev * dk, clip) - svc.varianceTail);
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
  private observeLatency(s: ReadonlySnapshot): void {
    const dp = s.prepareCompletions - this.prepCompletions;
    if (dp <= 0) return;
    const sample = (s.prepareLatencyMsTotal - this.prepLatencyTotal) / dp;
    const sampleSq = (s.prepareLatencySqTotal - this.prepLatencySq) / dp;
    const sampleConcurrency = (s.prepareConcurrencyTotal - this.prepConcurrency) / dp;
    // Per sample, not per second (an idle hour says nothing new about latency), and never less
    // than a running mean's weight while few samples exist.
    const ema = samplesWeight(this.latencyW, dp);
    const w = this.latencyPrior ? ema : Math.max(ema, dp / s.prepareCompletions);
    // While a pipeline fills (two latencies from the start of a busy period) the quick
    // preparations finish first: a shorter sample then is survivorship, not news.
    const filling = s.now - this.busySince < 2 * this.latency;
    if (!(filling && sample < this.latency)) {
      this.latency += w * (sample - this.latency);
      this.latencySq += w * (sampleSq - this.latencySq);
      this.latencyConcurrency += w * (sampleConcurrency - this.latencyConcurrency);
    }
    // Each kind's own, smoothed as the whole's (a running mean while it has few samples).
    if (s.kinds.length > 1) for (let k = 0; k < s.kinds.length; k++) {
      const kc = s.kinds[k] as ReadonlySnapshot['kinds'][number];
      const n = kc.prepareCompletions - (this.kindPrepSeen[k] ?? 0);
      if (n <= 0) continue;
      const own = (kc.prepareLatencyMsTotal - (this.kindLatencySeen[k] ?? 0)) / n;
      const was = this.kindLatency[k] ?? 0;
      // (While the pipeline fills, a shorter sample is survivorship, as for the whole: below.)
      const kindFilling = was > 0 && s.now - this.busySince < 2 * was && own < was;
      if (!kindFilling) this.kindLatency[k] = was + Math.max(samplesWeight(this.latencyW, n), n / kc.prepareCompletions) * (own - was);
      this.kindPrepSeen[k] = kc.prepareCompletions;
      this.kindLatencySeen[k] = kc.prepareLatencyMsTotal;
    }
    this.prepCompletions = s.prepareCompletions;
    this.prepConcurrency = s.prepareConcurrencyTotal;
    this.prepLatencyTotal = s.prepareLatencyMsTotal;
    this.prepLatencySq = s.prepareLatencySqTotal;
    // Safety stock for the error of the latency estimate: z standard errors of its mean.
    this.spread = Math.sqrt(Math.max(0, this.latencySq - this.latency * this.latency));
    this.latencySamples = this.latencyPrior ? 2 / this.latencyW - 1 : Math.min(this.prepCompletions, 2 / this.latencyW - 1);
    this.margin = (this.safetyZ * this.spread) / Math.sqrt(this.latencySamples);
  }

  /**
   * The slow integral on the waiting queue. Transients (start-up, speed changes) pass through the
   * waiting queue one dead time later; integrating them would wind the trim up, so only a loop
   * that has held its inventory target within settleBand for settleLatencies latencies is integrated,
   * and never while idle, blocked or saturated (anti-windup).
   */
  private feedback(s: ReadonlySnapshot, dt: number, free: boolean): void {
    const inControl = free && this.hasEstimate && this.latency > 0 && this.rate > 0 && this.rate < this.maxRate;
    if (!inControl || !(Math.abs(this.inventoryTarget - this.settledTarget) <= this.settleBand * this.settledTarget)) {
      this.settledSince = s.now;
      this.settledTarget = this.inventoryTarget;
    } else if (dt > 0 && s.now - this.settledSince >= this.settleLatencies * this.latency) {
      // The waiting queue a skewed device's stock is for (see KindPlan.skewAllowances) is no error.
      const target = this.plan.waitTarget;
      const error = Math.min(Math.max(target + this.plan.stock - this.waitingAvg, -target), target);
      this.integral += (error * dt) / (this.integralFraction * this.latency);
      this.integral = Math.min(Math.max(this.integral, -target), target + s.workers);
    }
  }

  /**
   * The latency the inventory plans for (`all`: the latency over every kind): with several kinds,
   * the slowest to prepare of the kinds still queued (one not yet measured: `all`). Dispatch follows
   * the queue's order, so when an item's turn comes the devices live on the work dispatched before
   * it for one latency of its own: planned at the mean over the kinds, a block of a quick kind
   * dispatched just in time left the devices idle while the slow kind behind it prepared (ZK
   * trial: a GPU 65 % busy with 100–200 partitions queued, 2 s against 0.4 s of preparation).
   */
  private planLatency(s: ReadonlySnapshot, all: number): number {
    // (Kinds on devices of their own: the plan covers every device at its mean, and so the mean
    // latency — the slow kind's would size a quick kind's device, and its memory, for it.)
    if (s.kinds.length < 2 || this.plan.apart) return all;
    let lat = 0;
    for (let k = 0; k < s.kinds.length; k++) {
      // (A snapshot made by hand, with no queued counts: every kind may come.)
      if ((s.kinds[k] as ReadonlySnapshot['kinds'][number]).queued === 0) continue;
      lat = Math.max(lat, (this.kindPrepSeen[k] ?? 0) > 0 ? (this.kindLatency[k] as number) : all);
    }
    return lat > 0 ? lat : all;
  }

  /** The plan from the estimates (the inventory target, the feed-forward, the caps), and the dispatch rate u for the current inventory. */
  private recompute(s: ReadonlySnapshot): void {
    const lambda = this.plan.lambda;
    if (!(lambda > 0)) {
      this.rate = 0;
      this.plannedAt = NaN;
      // (No rate, no plan: nothing for the budget's bypass to dispatch by either.)
      this.planLatencyMs = 0;
      this.starveBelow = 0;
      return;
    }
    // Preparation latency: measured, else (with a prior service time) the age of the current busy period.
    const lat = this.planLatency(s, this.latency > 0 ? this.latency : Number.isFinite(this.busySince) ? s.now - this.busySince : 0);
    this.planLatencyMs = lat;
    // On the devices: an item per worker, a full batch per worker where they batch.
    let onDevices = 0;
    for (let i = 0; i < this.devices.length; i++) {
      const d = this.devices[i] as DeviceEstimate;
      onDevices += plannedWorkers(d) * (s.devices[i]?.batch?.maxItems ?? 1);
    }
    this.plan.skewAllowances(this.devices, lambda, lat, this.safetyZ);
    const { stock, doubt } = this.plan;
    // The latency's share at λ less its doubt on a skewed device (KindPlan.skewAllowances): read from a
    // few samples, its rate reads high more often than not, and the surplus would arrive a latency later.
    this.inventoryTarget = lambda * doubt * (lat + this.margin) + stock + onDevices + this.plan.waitTarget + this.integral;
    this.starveBelow = !this.plan.apart && s.now - this.busySince >= 2 * lat && this.otherKindLive(s) ? lambda * doubt * lat + onDevices : 0;
    // What the devices drain: λ by their occupancy; with a skewed device (a stock), what they were
    // seen to complete where more — its run of short items takes more than λ, and what it took
    // must be replaced (capped at the estimate, the pipeline stays that much short, and the device
    // starves one latency later). (Elsewhere the two agree but for noise, and on a batching device
    // for its batches' bursts.)
    const drain = stock > 0 ? Math.max(this.plan.draining, this.drained) : this.plan.draining;
    // The feed-forward: λ; with a skewed device, what they drain. Its λ is the least known of the
    // plan (on heavy-tail-service, from the first samples, 1.3–3.4× the truth) and a starved device
    // drains less: fed at λ the surplus on top of the gap's own fill arrives a latency later.
    this.feedForward = stock > 0 ? drain : lambda;
    this.fillMs = Math.max(1000, this.fillFraction * lat);
    // The head start (at up to 4λ): none with a skewed device. It multiplies the error of a λ read
    // from a few samples by 4 — the over-fill it sent on heavy-tail-service arrived one latency
    // later and took minutes to drain (the waiting spread 14.4 → 13.2 without it, the device busy
    // 0.9987 → 0.9972); the stock fills at drain + catchUp · λ instead.
    this.head = this.headStart * this.spread * lambda;
    this.cruiseRate = Math.max(lambda, drain + this.catchUp * lambda);
    this.plannedAt = s.now;
    this.rerate(s);
  }

  /** The dispatch rate u for the current inventory, on the plan recompute made. */
  private rerate(s: ReadonlySnapshot): void {
    // Items of other kinds count by their device time, in items of the next kind (λ ÷ λ_k each).
    const inventory = this.plan.inventory(s);
    const u = this.feedForward + (this.inventoryTarget - inventory) / this.fillMs;
    this.maxRate = inventory < this.head && this.plan.stock === 0 ? 4 * this.plan.lambda : this.cruiseRate;
    this.rate = Math.min(Math.max(u, 0), this.maxRate);
  }
}


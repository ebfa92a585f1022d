import type { ReadonlySnapshot } from '../pacer.js';
import { batchItemMs, deviceMeanMs, plannedWorkers, RATE_DOUBT_Z, SKEWED_CV2, type DeviceEstimate, type ServiceEstimate } from './stoker-device.js';

/**
 * The quickest service time a device measured over its kinds, else `fallback`: what a kind
 * measured nowhere is planned at where a memory budget is set. Planned as quick, an unknown kind's
 * first items are dispatched at the rate a quick kind drains, and the items queued behind them
 * before the devices run dry (at the mean, a user trial's small kind in blocks with two heavier
 * ones was fed at a quarter of its rate, and the heavy block behind it started preparing after the
 * devices had emptied: 0.989 of unpaced's throughput under a binding budget, 0.995 this way). The
 * price, for a kind heavier than those known, is a larger first fill: bounded by the budget; with
 * none (a review: a 20 s kind after 0.1 s and 4 s ones, peak memory 74 → 130 GiB, waiting 2.3 →
 * 42) the mean is planned instead.
 */
function quickestMs(d: DeviceEstimate, fallback: number): number {
  let q = Infinity;
  for (const svc of d.services) if (svc.serviceMs > 0 && svc.serviceMs < q) q = svc.serviceMs;
  return q < Infinity ? q : fallback;
}

/** The device completions the stated capacity's mix of kinds is smoothed over (KindPlan.mixRate): a few blocks of partitions. */
const MIX_COMPLETIONS = 100;

/**
 * The stoker pacer's plan across kinds: the service rate λ_k of each kind over the devices that
 * run it, the kind the plan is counted in (the next to be dispatched), and the inventory in that
 * kind's items — an item of another kind counts by its device time — so that kinds whose device
 * time differs several-fold, arriving in blocks, do not make the plan chase each block.
 */
export class KindPlan {
  /** λ_k for each kind (snapshot order), items/ms. */
  readonly rates: number[] = [];
  /** The kind the plan is counted in: the next to be dispatched (the last one while none is queued). */
  ref = 0;
  /** λ of the plan's kind, items/ms, and λ weighted by device occupancy (what the devices drain now). */
  lambda = 0;
  draining = 0;
  /** The items the devices hold when every worker runs (full batches where they batch), and the waiting target in items. */
  deviceItems = 0;
  // (Initialised here, not only in the constructor: a field that starts undefined holds its
  // numbers boxed, and this one is written on every event.)
  waitTarget = 0;
  /** Whether the kinds run on different devices (kindsApart), for how many kinds that was worked out. */
  apart = false;
  private apartFor = -1;
  /** A skewed device's stock (items) and the doubt λ·L is planned at, from the last skewAllowances. */
  stock = 0;
  doubt = 1;
  /** Device completions of each kind (snapshot order; [0] without kinds) at the last completedSince. */
  private readonly seen: number[] = [];
  /** With several kinds, each one's share of the recent device completions (over about MIX_COMPLETIONS; not normalised): the mix mixRate counts in. */
  private readonly mix: number[] = [];
  /** Each kind's device completions in the last completedSince. */
  private readonly done: number[] = [];

  constructor(
    private readonly target: number,
    private readonly targetBatches: number,
    /** The configured prior service time, ms (NaN: none): the last fallback of a kind's rate. */
    private readonly prior: number,
  ) {
    this.waitTarget = target;
  }

  /** Items in flight (preparing, waiting, on a device), each of another kind counted as λ ÷ λ_k items of the plan's kind. */
  inventory(s: ReadonlySnapshot): number {
    let inventory = s.preparing + s.waiting + s.onDevice;
    if (s.kinds.length > 1 && !this.apart) for (let k = 0; k < s.kinds.length; k++) {
      const kc = s.kinds[k] as ReadonlySnapshot['kinds'][number];
      const rate = this.rates[k] as number;
      if (k !== this.ref && rate > 0) inventory += (kc.preparing + kc.waiting + kc.onDevice) * (this.lambda / rate - 1);
    }
    return inventory;
  }

  /**
   * The device completions since the last call, in items of the plan's kind (another kind's
   * counted by its device time, λ ÷ λ_k each, as in inventory).
   */
  completedSince(s: ReadonlySnapshot): number {
    if (s.kinds.length === 0) {
      const done = s.deviceCompletions - (this.seen[0] ?? 0);
      this.seen[0] = s.deviceCompletions;
      return done;
    }
    let items = 0;
    let all = 0;
    for (let k = 0; k < s.kinds.length; k++) {
      const completions = (s.kinds[k] as ReadonlySnapshot['kinds'][number]).completions;
      let total = 0;
      for (let i = 0; i < completions.length; i++) total += completions[i] as number;
      const done = total - (this.seen[k] ?? 0);
      this.seen[k] = total;
      this.done[k] = done;
      all += done;
      const rate = this.rates[k] as number;
      items += s.kinds.length > 1 && !this.apart && k !== this.ref && rate > 0 ? done * (this.lambda / rate) : done;
    }
    if (s.kinds.length > 1 && all > 0) {
      const keep = Math.pow(1 - 1 / MIX_COMPLETIONS, all);
      for (let k = 0; k < s.kinds.length; k++) this.mix[k] = (this.mix[k] ?? 0) * keep + ((1 - keep) * (this.done[k] as number)) / all;
    }
    return items;
  }

  /**
   * The devices' capacity in partitions of the mix of kinds they completed lately, items/ms: with
   * several kinds on the same devices, 1 ÷ Σ share_k ÷ λ_k — what the stated rate is (λ of the
   * plan's kind, the next to be dispatched, swung with it between the kinds' rates: 60/s and
   * 1,390/s a second apart, a user trial's capacity metric). λ where one kind runs, the kinds run
   * on devices of their own, or nothing is measured of the mix yet.
   */
  mixRate(): number {
    if (this.apart || this.mix.length < 2) return this.lambda;
    let shares = 0;
    let time = 0;
    for (let k = 0; k < this.mix.length; k++) {
      const share = this.mix[k] as number;
      const rate = this.rates[k] ?? 0;
      if (!(share > 0) || !(rate > 0)) continue;
      shares += share;
      time += share / rate;
    }
    return time > 0 ? shares / time : this.lambda;
  }

  /**
   * λ_k for each kind: the sum over the devices that run it of workers ÷ its service time there. A
   * kind not measured on a device borrows its mean service time on the others, else (quickestMs)
   * the quickest of the device's other kinds under a budget, their mean without one, else the mean
   * of everything measured, else the prior (so once
   * anything is known, every device that runs the next kind has a rate: dispatch never holds for
   * want of one). The plan is made in items of the next kind to be
   * dispatched (λ = its λ_k); the others count by their device time (see inventory).
   */
  estimate(s: ReadonlySnapshot, devices: readonly DeviceEstimate[]): void {
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
      const runsOn = s.kinds.length > 1 ? (s.kinds[k] as ReadonlySnapshot['kinds'][number]).devices : null;
      let lambda = 0;
      let draining = 0;
      for (let i = 0; i < devices.length; i++) {
        if (runsOn && !runsOn.includes(i)) continue;
        const d = devices[i] as DeviceEstimate;
        const c = s.devices[i] as ReadonlySnapshot['devices'][number];
        // A device none of the jobs in the system can use (devices that name their kinds) serves none of the work.
        if (c.eligible === false) continue;
        let ms = batchItemMs(d, k);
        if (!(ms > 0)) ms = d.services[k]?.serviceMs ?? NaN;
        if (!(ms > 0)) {
          if (kindMs < 0) kindMs = this.meanServiceMs(devices, k);
          ms = kindMs > 0 ? kindMs : Number.isFinite(s.budgetTotalBytes) ? quickestMs(d, this.meanServiceMs(devices, -1)) : deviceMeanMs(d, this.meanServiceMs(devices, -1));
        }
        // Planned for the workers of the last latency; what drains now is what is alive.
        const workers = plannedWorkers(d);
        if (ms > 0 && workers > 0) {
          // The self-check's factor: 1 unless saturated windows keep showing another capacity.
          lambda += (workers / ms) * d.correction;
          draining += (c.workers / ms) * d.correction * d.occupancy;
        }
      }
      this.rates[k] = lambda;
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
      for (let i = 0; i < devices.length; i++) {
        const d = devices[i] as DeviceEstimate;
        const c = s.devices[i] as ReadonlySnapshot['devices'][number];
        if (c.eligible === false) continue;
        const fitted = batchItemMs(d);
        const ms = fitted > 0 ? fitted : deviceMeanMs(d, this.meanServiceMs(devices, -1));
        const workers = plannedWorkers(d);
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
  private kindsApart(s: ReadonlySnapshot): boolean {
    if (this.apartFor !== s.kinds.length) {
      this.apartFor = s.kinds.length;
      const first = s.kinds[0]?.devices;
      this.apart = s.kinds.some((k) => k.devices.length !== first?.length || k.devices.some((d, i) => d !== first[i]));
    }
    return this.apart;
  }

  /** The mean service time measured for kind k over the devices (k = −1: for any kind), else the prior (k = −1) or NaN. */
  private meanServiceMs(devices: readonly DeviceEstimate[], k: number): number {
    let n = 0;
    let sum = 0;
    for (const d of devices) {
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
   * A skewed device's two allowances (cv² > SKEWED_CV2), from one pass over the devices that plan
   * the next kind; `stock` and `doubt` hold them until the next call.
   *
   * The stock, for its own variability: over one preparation latency L the devices take λL items
   * on average, with a standard deviation of √(λL·cv²) (a renewal process) — more than the waiting
   * target covers when cv is large, and the waiting feedback cannot help (the queue's spread, not
   * its mean, starves the device). The target holds safetyZ of those more; on less noisy devices
   * the waiting feedback trims the mean and this is 0. cv² is the noise with its tail
   * (ServiceEstimate.varianceTail): clipped at 3 σ, a heavy tail's reads less than half of itself
   * (lognormal σ 1: 0.78 of 1.72), and the stock 2/3 of its size.
   *
   * The doubt, the factor the latency's share of the inventory target (λ·L) is planned at:
   * 1 ÷ (1 + RATE_DOUBT_Z standard errors of λ). A skewed device's rate is the inverse of a mean
   * over n samples of cv², off by √(cv² ÷ n) of itself (one standard error) — on
   * heavy-tail-service its first 3–10 samples, taken while the device starved, read it 1.3–3.4×
   * high, and the surplus arrived one latency later and took minutes to drain. Both rate-weighted
   * over the devices; 0 and 1 where none is skewed.
   */
  skewAllowances(devices: readonly DeviceEstimate[], lambda: number, lat: number, safetyZ: number): void {
    let cv2 = 0;
    let err = 0;
    let rates = 0;
    for (const d of devices) {
      const svc = d.services[this.ref];
      // (A batching device's time per item spreads with the batch size, which is not noise.)
      if (!svc || !(svc.serviceMs > 0) || d.fit) continue;
      const r = plannedWorkers(d) / svc.serviceMs;
      rates += r;
      if (svc.varianceTail > SKEWED_CV2) {
        cv2 += r * svc.varianceTail;
        if (svc.samples > 0) err += r * Math.sqrt(svc.varianceTail / svc.samples);
      }
    }
    this.stock = rates > 0 && cv2 > 0 ? safetyZ * Math.sqrt((lambda * lat * cv2) / rates) : 0;
    this.doubt = rates > 0 ? 1 / (1 + (RATE_DOUBT_Z * err) / rates) : 1;
  }
}

import type { Command, Pacer, ReadonlySnapshot } from '../core/index.js';

/** The benchmark contract (DESIGN §4). Steady measures use the steady window; the rest the whole run. */
export interface Metrics {
  /**
   * Completions in the steady window ÷ (capacity integrated over it); an item of a kind with its
   * own device time counts for its share of work. Steady measures are null when the window is empty.
   */
  throughputRatio: number | null;
  /** Device completions per second (items, whatever their kind), steady window. */
  itemsPerSec: number | null;
  /** Mean items per batch of the batches finished in the steady window; null where no device batches (or none finished). */
  batchItemsMean: number | null;
  /** Mean busy workers ÷ alive workers, steady window. */
  occupancy: number | null;
  /** Worker-ms idle while work existed anywhere in the pipeline, steady window. */
  starvedMs: number | null;
  /** Items waiting for a device, time-weighted over the steady window. */
  waitingMean: number | null;
  waitingStd: number | null;
  waitingP95: number | null;
  waitingMax: number | null;
  /** Peak over the steady window of (preparing + waiting) ÷ (capacity × mean preparation latency + target). */
  inventoryRatio: number | null;
  /** Peak bytes reserved, whole run. */
  peakMemoryBytes: number;
  /** Submit-to-done latency of the jobs that finished, whole run. */
  jobLatencyP50Ms: number | null;
  jobLatencyP99Ms: number | null;
  /** Most dispatches within one service interval (1 ÷ initial capacity), whole run. */
  burstMax: number;
  /** Completions after the first speed change until the pacer's rate estimate stays within 5% of the new capacity (to the window's end); null when there is no change or no estimate. */
  settleCompletions: number | null;
  /** From the ramp reference time to the end of the first 10 s window with occupancy ≥ 0.95; null if never. */
  rampMs: number | null;
  /** Bytes still reserved when the run ended. */
  leakedBytes: number;
  jobsDone: number;
  jobsFailed: number;
  jobsCancelled: number;
  /** Preparing + waiting at the first speed change, and the most after it (null without a change). */
  inventoryAtChange: number | null;
  inventoryMaxAfterChange: number | null;
}

export interface Series {
  /** Bin width, ms; bin i covers [i·binMs, (i+1)·binMs). */
  binMs: number;
  time: number[];
  occupancy: number[];
  waiting: number[];
  inventory: number[];
  need: number[];
  dispatchRate: number[];
  capacity: number[];
  budgetUsed: number[];
  target: number;
}

export interface RecorderConfig {
  window: { fromMs: number; toMs: number };
  target: number;
  meanPrepareMs: number;
  /** Initial device capacity, items/ms of the devices' own service time (sets the burst interval). */
  capacity0: number;
  /**
   * The mix's mean work per item, in those units (1 unless kinds have their own service time):
   * capacity ÷ it is items/ms, what counts of items (inventory, dispatches) are held against.
   */
  workPerItem: number;
  rampFromMs: number;
  /** Time of the first speed change, or NaN. */
  changeAtMs: number;
}

/** What the driver measures besides the engine's snapshot, read at every step. */
export interface Meters {
  /** Device capacity now, items/ms. */
  capacity: number;
  /** Completions weighed by their kind's device time (what the throughput ratio counts). */
  work: number;
}

const MAX_BINS = 2000;
const RAMP_BIN = 1000;
const RAMP_WINDOW_BINS = 10;

/** One chart series: MAX_BINS zeros (the bins stay within it, coarsened as time goes on). */
function newBins(): Float64Array {
  return new Float64Array(MAX_BINS);
}

/** The p-th percentile of sorted values: the smallest with that share at or below it (null: none). */
export function percentileOf(sorted: ArrayLike<number>, p: number): number | null {
  return sorted.length ? (sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)] as number) : null;
}

/** Integrates the engine's state over time, event by event, into the measures and chart series. */
export class Recorder {
  private prev = NaN;
  // State held since `prev`.
  private busy = 0;
  /** Whether devices batch (known at the first step). */
  private batched: boolean | undefined;
  private workers = 0;
  private waiting = 0;
  private inventory = 0;
  private workExists = false;
  private cap = 0;
  /** The capacity in items/ms, and the inventory it needs (preparations in flight + the target): worked out once per change of `cap`, not at every step. */
  private itemCap = 0;
  private need = 0;
  private budgetUsed = 0;
  // Steady-window integrals.
  private windowMs = 0;
  private busyInt = 0;
  private workersInt = 0;
  private starved = 0;
  private capInt = 0;
  private waitingHist: number[] = [];
  private waitingMax = 0;
  private inventoryPeakRatio = 0;
  private windowCompletions = 0;
  private windowItems = 0;
  /** Batches and their items finished, all batching devices together: at the window's first step, and its last. */
  private batchesFrom: [number, number] | null = null;
  private batchesTo: [number, number] = [0, 0];
  // Whole run.
  private lastDispatched = 0;
  private lastCompletions = 0;
  /** Completions weighed by their kind's device time (the simulator's `work`). */
  private lastWork = 0;
  /** The dispatch times within the last burst interval: a ring (grown when full), from burstHead, burstCount of them. */
  private burst = new Float64Array(1024);
  private burstHead = 0;
  private burstCount = 0;
  private burstMax = 0;
  private readonly latencies: number[] = [];
  private done = 0;
  private failed = 0;
  private cancelled = 0;
  // Speed change.
  private afterChange = 0;
  private lastOutside = -1;
  private estimateSeen = false;
  private invAtChange: number | null = null;
  private invMaxAfter: number | null = null;
  // Ramp bins (1 s from the ramp reference).
  private readonly rampBusy: number[] = [];
  private readonly rampWorkers: number[] = [];
  // Chart bins.
  private binMs = 1000;
  /** Bins in use (each series' length); every series holds MAX_BINS, zeros past binCount. */
  private binCount = 0;
  private readonly bins = { busy: newBins(), workers: newBins(), waiting: newBins(), inventory: newBins(), need: newBins(), cap: newBins(), budget: newBins(), dispatches: newBins() };
  private readonly allBins = Object.values(this.bins);

  constructor(
    private readonly cfg: RecorderConfig,
    private readonly meters: Readonly<Meters>,
    private readonly pacer: Pacer,
  ) {
    this.setCap(0);
  }

  /** Call after every engine step with the state it left (the meters as they are after it). */
  step(s: ReadonlySnapshot): void {
    const now = s.now;
    const { capacity, work } = this.meters;
    if (!Number.isNaN(this.prev) && now > this.prev) this.integrate(this.prev, now);
    this.prev = now;
    const cfg = this.cfg;
    if (s.dispatched > this.lastDispatched) {
      const interval = cfg.workPerItem / cfg.capacity0;
      for (let i = this.lastDispatched; i < s.dispatched; i++) this.dispatchedAt(now, interval);
      (this.bins.dispatches[this.binAt(now)] as number) += s.dispatched - this.lastDispatched;
      this.lastDispatched = s.dispatched;
    }
    const dc = s.deviceCompletions - this.lastCompletions;
    if (dc > 0) {
      this.lastCompletions = s.deviceCompletions;
      if (now >= cfg.window.fromMs && now < cfg.window.toMs) {
        this.windowCompletions += work - this.lastWork;
        this.windowItems += dc;
      }
      this.lastWork = work;
      if (now >= cfg.changeAtMs && now < cfg.window.toMs) {
        this.afterChange += dc;
        const est = this.pacer.state().ratePerSec;
        if (est !== null) {
          this.estimateSeen = true;
          if (Math.abs(est / 1000 - capacity) > 0.05 * capacity) this.lastOutside = this.afterChange;
        }
      }
    }
    // Busy workers: the items on devices, unless devices batch (a batch holds one worker).
    this.batched ??= s.devices.some((d) => d.batch !== undefined);
    if (this.batched) {
      let busy = 0;
      let batches = 0;
      let items = 0;
      for (const d of s.devices) {
        busy += d.busy;
        batches += d.batch?.batches ?? 0;
        items += d.batch?.items ?? 0;
      }
      this.busy = busy;
      if (now >= cfg.window.fromMs && now < cfg.window.toMs) {
        this.batchesFrom ??= [batches, items];
        this.batchesTo = [batches, items];
      }
    } else this.busy = s.onDevice;
    this.workers = s.workers;
    this.waiting = s.waiting;
    this.inventory = s.preparing + s.waiting;
    this.workExists = s.backlog + s.preparing + s.waiting > 0;
    if (capacity !== this.cap) this.setCap(capacity);
    this.budgetUsed = s.budgetUsedBytes;
    if (now >= cfg.changeAtMs) {
      if (this.invAtChange === null) this.invAtChange = this.inventory;
      this.invMaxAfter = Math.max(this.invMaxAfter ?? 0, this.inventory);
    }
    if (now >= cfg.window.fromMs && now <= cfg.window.toMs) this.peakInventory();
  }

  jobEnded(cmd: Extract<Command, { type: 'finishJob' }>): void {
    if (cmd.state === 'done') {
      this.done++;
      this.latencies.push(cmd.timeMs);
    } else if (cmd.state === 'failed') this.failed++;
    else this.cancelled++;
  }

  private setCap(capacity: number): void {
    this.cap = capacity;
    this.itemCap = capacity / this.cfg.workPerItem;
    this.need = this.itemCap * this.cfg.meanPrepareMs + this.cfg.target;
  }

  /** A dispatch at `now`: the most within one burst interval (the times older than it leave the ring). */
  private dispatchedAt(now: number, interval: number): void {
    let ring = this.burst;
    if (this.burstCount === ring.length) {
      // Full: unrolled into one twice the size, oldest first.
      const grown = new Float64Array(ring.length * 2);
      grown.set(ring.subarray(this.burstHead));
      grown.set(ring.subarray(0, this.burstHead), ring.length - this.burstHead);
      this.burst = ring = grown;
      this.burstHead = 0;
    }
    const mask = ring.length - 1;
    ring[(this.burstHead + this.burstCount) & mask] = now;
    this.burstCount++;
    while (this.burstCount > 0 && (ring[this.burstHead] as number) <= now - interval) {
      this.burstHead = (this.burstHead + 1) & mask;
      this.burstCount--;
    }
    this.burstMax = Math.max(this.burstMax, this.burstCount);
  }

  private peakInventory(): void {
    const need = this.need;
    if (need > 0) this.inventoryPeakRatio = Math.max(this.inventoryPeakRatio, this.inventory / need);
  }

  private integrate(a: number, b: number): void {
    const { fromMs, toMs } = this.cfg.window;
    const lo = Math.max(a, fromMs);
    const hi = Math.min(b, toMs);
    if (hi > lo) {
      const dt = hi - lo;
      this.windowMs += dt;
      this.busyInt += this.busy * dt;
      this.workersInt += this.workers * dt;
      this.capInt += this.cap * dt;
      if (this.workExists) this.starved += (this.workers - this.busy) * dt;
      const w = this.waiting;
      while (this.waitingHist.length <= w) this.waitingHist.push(0);
      this.waitingHist[w] = (this.waitingHist[w] as number) + dt;
      if (w > this.waitingMax) this.waitingMax = w;
      if (a < fromMs) this.peakInventory();
    }
    // Ramp bins.
    const r0 = this.cfg.rampFromMs;
    if (b > r0) {
      for (let t = Math.max(a, r0); t < b; ) {
        let i = Math.floor((t - r0) / RAMP_BIN);
        // A boundary r0 + i·RAMP_BIN may round below itself when measured back from r0: move on.
        if (r0 + (i + 1) * RAMP_BIN <= t) i++;
        if (i >= 4 * 3600) break;
        const end = Math.min(b, r0 + (i + 1) * RAMP_BIN);
        while (this.rampBusy.length <= i) {
          this.rampBusy.push(0);
          this.rampWorkers.push(0);
        }
        this.rampBusy[i] = (this.rampBusy[i] as number) + this.busy * (end - t);
        this.rampWorkers[i] = (this.rampWorkers[i] as number) + this.workers * (end - t);
        t = end;
      }
    }
    // Chart bins.
    const bins = this.bins;
    const itemCap = this.itemCap;
    const need = this.need;
    for (let t = a; t < b; ) {
      const i = this.binAt(t);
      const end = Math.min(b, (i + 1) * this.binMs);
      const dt = end - t;
      (bins.busy[i] as number) += this.busy * dt;
      (bins.workers[i] as number) += this.workers * dt;
      (bins.waiting[i] as number) += this.waiting * dt;
      (bins.inventory[i] as number) += this.inventory * dt;
      (bins.need[i] as number) += need * dt;
      (bins.cap[i] as number) += itemCap * dt;
      (bins.budget[i] as number) += this.budgetUsed * dt;
      t = end;
    }
  }

  /** The chart bin of time t: coarsens the bins when t is past the last one, and grows every series to it. */
  private binAt(t: number): number {
    let i = Math.floor(t / this.binMs);
    if (i >= MAX_BINS) {
      this.coarsen(i);
      i = Math.floor(t / this.binMs);
    }
    if (i >= this.binCount) this.binCount = i + 1;
    return i;
  }

  /** Doubles the bin width until index i fits. */
  private coarsen(i: number): void {
    while (i >= MAX_BINS) {
      const n = this.binCount;
      const half = Math.ceil(n / 2);
      for (const arr of this.allBins) {
        for (let k = 0; k < n; k += 2) arr[k >> 1] = (arr[k] as number) + (k + 1 < n ? (arr[k + 1] as number) : 0);
        arr.fill(0, half, n);
      }
      this.binCount = half;
      this.binMs *= 2;
      i >>= 1;
    }
  }

  metrics(peakMemoryBytes: number, leakedBytes: number): Metrics {
    const hist = this.waitingHist;
    const total = hist.reduce((a, b) => a + b, 0);
    let mean = 0;
    for (let w = 0; w < hist.length; w++) mean += w * (hist[w] as number);
    mean = total > 0 ? mean / total : 0;
    let variance = 0;
    for (let w = 0; w < hist.length; w++) variance += (w - mean) * (w - mean) * (hist[w] as number);
    variance = total > 0 ? variance / total : 0;
    let p95 = 0;
    for (let w = 0, acc = 0; w < hist.length; w++) {
      acc += hist[w] as number;
      if (acc >= 0.95 * total) {
        p95 = w;
        break;
      }
    }
    // (A typed array sorts numbers natively: with a comparator, a day's 13,000 latencies took 2 % of the run.)
    const lat = Float64Array.from(this.latencies).sort();
    const pct = (p: number) => percentileOf(lat, p);
    const hasChange = !Number.isNaN(this.cfg.changeAtMs);
    const steady = this.windowMs > 0;
    return {
      throughputRatio: steady && this.capInt > 0 ? this.windowCompletions / this.capInt : null,
      itemsPerSec: steady ? this.windowItems / (this.windowMs / 1000) : null,
      batchItemsMean: steady && this.batchesFrom && this.batchesTo[0] > this.batchesFrom[0] ? (this.batchesTo[1] - this.batchesFrom[1]) / (this.batchesTo[0] - this.batchesFrom[0]) : null,
      occupancy: steady && this.workersInt > 0 ? this.busyInt / this.workersInt : null,
      starvedMs: steady ? this.starved : null,
      waitingMean: steady ? mean : null,
      waitingStd: steady ? Math.sqrt(variance) : null,
      waitingP95: steady ? p95 : null,
      waitingMax: steady ? this.waitingMax : null,
      inventoryRatio: steady ? this.inventoryPeakRatio : null,
      peakMemoryBytes,
      jobLatencyP50Ms: pct(0.5),
      jobLatencyP99Ms: pct(0.99),
      burstMax: this.burstMax,
      // (Outside at the last completion it saw: never settled — null, not every completion since.)
      settleCompletions: hasChange && this.estimateSeen && this.lastOutside < this.afterChange ? this.lastOutside + 1 : null,
      rampMs: this.ramp(),
      leakedBytes,
      jobsDone: this.done,
      jobsFailed: this.failed,
      jobsCancelled: this.cancelled,
      inventoryAtChange: hasChange ? this.invAtChange : null,
      inventoryMaxAfterChange: hasChange ? this.invMaxAfter : null,
    };
  }

  private ramp(): number | null {
    const n = RAMP_WINDOW_BINS;
    let busy = 0;
    let workers = 0;
    for (let i = 0; i < this.rampBusy.length; i++) {
      busy += this.rampBusy[i] as number;
      workers += this.rampWorkers[i] as number;
      if (i >= n) {
        busy -= this.rampBusy[i - n] as number;
        workers -= this.rampWorkers[i - n] as number;
      }
      if (i >= n - 1 && workers > 0 && busy >= 0.95 * workers) return (i + 1) * RAMP_BIN;
    }
    return null;
  }

  series(): Series {
    const b = this.bins;
    const n = this.binCount;
    const out: Series = { binMs: this.binMs, time: [], occupancy: [], waiting: [], inventory: [], need: [], dispatchRate: [], capacity: [], budgetUsed: [], target: this.cfg.target };
    for (let i = 0; i < n; i++) {
      const w = b.workers[i] ?? 0;
      out.time.push(i * this.binMs);
      out.occupancy.push(w > 0 ? (b.busy[i] ?? 0) / w : 0);
      out.waiting.push((b.waiting[i] ?? 0) / this.binMs);
      out.inventory.push((b.inventory[i] ?? 0) / this.binMs);
      out.need.push((b.need[i] ?? 0) / this.binMs);
      out.dispatchRate.push(((b.dispatches[i] ?? 0) / this.binMs) * 1000);
      out.capacity.push(((b.cap[i] ?? 0) / this.binMs) * 1000);
      out.budgetUsed.push((b.budget[i] ?? 0) / this.binMs);
    }
    return out;
  }
}

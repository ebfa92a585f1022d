import { numberOption, type Pacer, type PacerOptions, type ReadonlySnapshot, type PacerState } from '../pacer.js';

/**
 * The adaptive concurrency limits a user would reach for, from Netflix's concurrency-limits
 * (`Gradient2Limit`, `VegasLimit`), applied to the pipeline's in-flight window: a partition may
 * be dispatched while fewer than `limit` are in flight (preparing, waiting or on a device). Each
 * device completion is a sample: its RTT is the time since the oldest outstanding dispatch
 * (partitions complete about in dispatch order), with the in-flight count at that dispatch. The
 * algorithms and their defaults are the library's; only the sampling is ours.
 */
interface Limit {
  readonly limit: number;
  update(rttMs: number, inflight: number): void;
  terms(): Record<string, number>;
}

/** Log10RootIntFunction: max(1, ⌊log10 n⌋). */
const log10 = (n: number) => Math.max(1, Math.floor(Math.log10(Math.max(1, Math.floor(n)))));

/** ExpAvgMeasurement: a plain mean over the first `warmup` samples, then an EMA with factor 2 / (window + 1). */
class ExpAvg {
  value = 0;
  private sum = 0;
  private count = 0;
  constructor(
    private readonly window: number,
    private readonly warmup: number,
  ) {}
  add(sample: number): number {
    if (this.count < this.warmup) {
      this.count++;
      this.sum += sample;
      this.value = this.sum / this.count;
    } else {
      const f = 2 / (this.window + 1);
      this.value = this.value * (1 - f) + sample * f;
    }
    return this.value;
  }
}

/** Gradient2Limit with its defaults: initial 20, min 20, max 200, smoothing 0.2, queue size 4, long window 600, RTT tolerance 1.5. */
class Gradient2 implements Limit {
  limit: number;
  private readonly longRtt = new ExpAvg(600, 10);
  private lastRtt = 0;
  constructor(private readonly o: { initial: number; min: number; max: number; smoothing: number; queueSize: number; tolerance: number }) {
    this.limit = o.initial;
  }
  update(rtt: number, inflight: number): void {
    this.lastRtt = rtt;
    const longRtt = this.longRtt.add(rtt);
    // After a long stretch of high latency, bring the long RTT down faster than its smoothing would.
    if (longRtt / rtt > 2) this.longRtt.value *= 0.95;
    // Not close to the limit: the limit says nothing (application-limited).
    if (inflight < this.limit / 2) return;
    const gradient = Math.max(0.5, Math.min(1, (this.o.tolerance * longRtt) / rtt));
    let next = this.limit * gradient + this.o.queueSize;
    next = this.limit * (1 - this.o.smoothing) + next * this.o.smoothing;
    this.limit = Math.max(this.o.min, Math.min(this.o.max, next));
  }
  terms(): Record<string, number> {
    return { limit: this.limit, rttMs: this.lastRtt, longRttMs: this.longRtt.value };
  }
}

/** VegasLimit with its defaults: initial 20, max 1000, smoothing 1, α 3·log10, β 6·log10, threshold log10, ±log10 steps, probe every 30·limit samples. */
class Vegas implements Limit {
  limit: number;
  private rttNoLoad = 0;
  private probeCount = 0;
  private probeJitter: number;
  private rng: number;
  constructor(private readonly o: { initial: number; max: number; smoothing: number; probeMultiplier: number; seed: number }) {
    this.limit = o.initial;
    this.rng = o.seed >>> 0 || 1;
    this.probeJitter = this.jitter();
  }
  /** ThreadLocalRandom.nextDouble(0.5, 1), made deterministic (xorshift32 from the `seed` option). */
  private jitter(): number {
    this.rng ^= this.rng << 13;
    this.rng ^= this.rng >>> 17;
    this.rng ^= this.rng << 5;
    return 0.5 + 0.5 * ((this.rng >>> 0) / 2 ** 32);
  }
  update(rtt: number, inflight: number): void {
    this.probeCount++;
    if (this.probeJitter * this.o.probeMultiplier * this.limit <= this.probeCount) {
      // Probe: take this sample as the no-load RTT (it may have risen for good).
      this.probeJitter = this.jitter();
      this.probeCount = 0;
      this.rttNoLoad = rtt;
      return;
    }
    if (this.rttNoLoad === 0 || rtt < this.rttNoLoad) {
      this.rttNoLoad = rtt;
      return;
    }
    const queue = Math.ceil(this.limit * (1 - this.rttNoLoad / rtt));
    if (inflight * 2 < this.limit) return; // not close to the limit: no upward drift
    const lg = log10(this.limit);
    let next: number;
    if (queue <= lg) next = this.limit + 6 * lg;
    else if (queue < 3 * lg) next = this.limit + lg;
    else if (queue > 6 * lg) next = this.limit - lg;
    else return;
    next = Math.max(1, Math.min(this.o.max, next));
    this.limit = (1 - this.o.smoothing) * this.limit + this.o.smoothing * next;
  }
  terms(): Record<string, number> {
    return { limit: this.limit, rttNoLoadMs: this.rttNoLoad };
  }
}

class LimitPacer implements Pacer {
  /** Outstanding dispatches, oldest first: when, and how many were in flight then (itself included). */
  private readonly outstanding: { at: number; inflight: number }[] = [];
  private head = 0;
  private seen = 0;
  private idle = true;

  constructor(
    readonly name: string,
    private readonly algorithm: Limit,
  ) {}

  observe(s: ReadonlySnapshot): void {
    this.idle = s.backlog === 0;
    for (let n = s.deviceCompletions - this.seen; n > 0; n--) {
      const d = this.outstanding[this.head];
      if (!d) break;
      this.head++;
      this.algorithm.update(Math.max(1e-3, s.now - d.at), d.inflight);
    }
    this.seen = s.deviceCompletions;
    // Dispatches that will never complete (cancelled, failed, lost and prepared again) leave the window.
    const inFlight = s.preparing + s.waiting + s.onDevice;
    if (this.outstanding.length - this.head > inFlight) this.head = this.outstanding.length - inFlight;
    if (this.head > 1024 && this.head * 2 > this.outstanding.length) {
      this.outstanding.splice(0, this.head);
      this.head = 0;
    }
  }

  nextDispatchAt(s: ReadonlySnapshot): number {
    return s.preparing + s.waiting + s.onDevice < Math.floor(this.algorithm.limit) ? s.now : Infinity;
  }

  onDispatch(s: ReadonlySnapshot): void {
    this.outstanding.push({ at: s.now, inflight: s.preparing + s.waiting + s.onDevice });
  }

  state(): PacerState {
    return { mode: this.idle ? 'idle' : 'steady', ratePerSec: null, intervalMs: null, terms: this.algorithm.terms() };
  }
}

/** `gradient`: Gradient2Limit on the in-flight window. Options: initialLimit, minLimit, maxLimit, smoothing, queueSize, rttTolerance. */
export function createGradientPacer(options: PacerOptions & { initialLimit?: number; minLimit?: number; maxLimit?: number; smoothing?: number; queueSize?: number; rttTolerance?: number } = {}): Pacer {
  return new LimitPacer(
    'gradient',
    new Gradient2({
      initial: numberOption(options, 'initialLimit', 20, 1),
      min: numberOption(options, 'minLimit', 20, 1),
      max: numberOption(options, 'maxLimit', 200, 1),
      smoothing: numberOption(options, 'smoothing', 0.2),
      queueSize: numberOption(options, 'queueSize', 4),
      tolerance: numberOption(options, 'rttTolerance', 1.5, 1),
    }),
  );
}

/** `vegas`: VegasLimit on the in-flight window. Options: initialLimit, maxLimit, smoothing, probeMultiplier, seed (its probe jitter). */
export function createVegasPacer(options: PacerOptions & { initialLimit?: number; maxLimit?: number; smoothing?: number; probeMultiplier?: number; seed?: number } = {}): Pacer {
  return new LimitPacer(
    'vegas',
    new Vegas({
      initial: numberOption(options, 'initialLimit', 20, 1),
      max: numberOption(options, 'maxLimit', 1000, 1),
      smoothing: numberOption(options, 'smoothing', 1),
      probeMultiplier: numberOption(options, 'probeMultiplier', 30, 1),
      seed: numberOption(options, 'seed', 1),
    }),
  );
}

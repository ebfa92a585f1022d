/**
 * Admission pacing: a flood of submits must not starve the jobs already running. Submits, the
 * engine's completions and the device handoffs share one event loop; when submits take most of
 * it, every handoff waits behind them and the devices idle. While the engine has work, the gate
 * admits submits at a rate it adapts to the loop's utilisation (multiplicative decrease above
 * {@link HIGH}, increase below {@link LOW}; never below {@link MIN_RATE} nor the rate jobs end, see
 * {@link ENDS_FACTOR}); a client whose submit waits sends no other on that connection, so the
 * whole flood slows down. With nothing to run, submits pass at once.
 */
import { performance, type EventLoopUtilization } from 'node:perf_hooks';

/** Loop utilisation above which the admission rate is cut (execution needs the rest). */
const HIGH = 0.75;
/** Below it the rate grows again. */
const LOW = 0.6;
/** How often (ms) the rate is adapted to the utilisation of the last window. */
const WINDOW_MS = 100;
/** How often (ms) waiting submits are let in. */
const TICK_MS = 5;
/** The least admission rate (submits/s): a waiting submit is answered within seconds. */
const MIN_RATE = 50;
/**
 * Nor below this many times the rate jobs end (smoothed over about a second): a server whose jobs
 * end as fast as they come keeps up, and a lower rate only queues them — a user's 100 requests/s
 * of one small job each, the devices 73 % busy, waited up to 3.6 s for their 202s in bursts while
 * a loop kept busy by the jobs themselves (and another process on the cores) held them at 50/s.
 * A flood's jobs wait behind the work it would starve, so they do not raise it.
 */
const ENDS_FACTOR = 1.25;
/** The weight of a window's rate of ends in the smoothed one (windows of WINDOW_MS: about a second). */
const ENDS_WEIGHT = 0.1;

export class AdmissionGate {
  private readonly waiting: (() => void)[] = [];
  /** Submits per second while the engine has work (Infinity: not limited). */
  private rate = Infinity;
  private tokens = 0;
  private admittedInWindow = 0;
  private endedInWindow = 0;
  /** Jobs ended per second, smoothed (see ENDS_FACTOR). */
  private endRate = 0;
  private windowStart: number;
  private lastTick: number;
  private timer: NodeJS.Timeout | undefined;

  /**
   * `busy`: whether the engine has work a flood could starve; `loop`: the clock (ms) and the event
   * loop's utilisation since its last call (0–1) — the process's own by default, given by tests.
   */
  constructor(
    private readonly busy: () => boolean,
    private readonly loop: { now(): number; used(): number } = processLoop(),
  ) {
    this.windowStart = loop.now();
    this.lastTick = loop.now();
  }

  /** The admission rate now (submits/s; Infinity when not limited). */
  get ratePerS(): number {
    return this.rate;
  }

  /** Submits waiting to be let in. */
  get queued(): number {
    return this.waiting.length;
  }

  /** A job ended (see ENDS_FACTOR). */
  ended(): void {
    this.endedInWindow++;
  }

  /** Resolves when this submit may go on. */
  enter(): Promise<void> {
    this.adapt();
    if (this.waiting.length === 0 && (!this.busy() || this.rate === Infinity)) {
      this.admittedInWindow++;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.timer ??= setInterval(() => this.tick(), TICK_MS);
    });
  }

  /** Lets waiting submits in as the rate allows (all of them once the engine is idle). */
  private tick(): void {
    this.adapt();
    const now = this.loop.now();
    const free = !this.busy() || this.rate === Infinity;
    // A burst of at most two ticks' worth: the rate, not a backlog of tokens, bounds the loop's share.
    this.tokens = free ? Infinity : Math.min(this.tokens + (this.rate * (now - this.lastTick)) / 1000, Math.max(1, (this.rate * 2 * TICK_MS) / 1000));
    this.lastTick = now;
    while (this.waiting.length > 0 && this.tokens >= 1) {
      this.tokens--;
      this.admittedInWindow++;
      (this.waiting.shift() as () => void)();
    }
    if (this.waiting.length === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      this.tokens = 0;
    }
  }

  /** Once a window: cut the rate when the loop is too busy while the engine has work, raise it when not. */
  private adapt(): void {
    const now = this.loop.now();
    if (now - this.windowStart < WINDOW_MS) return;
    const used = this.loop.used();
    const admitted = (this.admittedInWindow * 1000) / (now - this.windowStart);
    this.endRate += ENDS_WEIGHT * ((this.endedInWindow * 1000) / (now - this.windowStart) - this.endRate);
    this.windowStart = now;
    this.admittedInWindow = 0;
    this.endedInWindow = 0;
    if (!this.busy()) this.rate = Infinity;
    else if (used > HIGH) this.rate = Math.max(MIN_RATE, ENDS_FACTOR * this.endRate, Math.min(this.rate, admitted) * 0.7);
    else if (used < LOW && this.rate !== Infinity) this.rate = this.waiting.length > 0 ? this.rate * 1.25 : Infinity;
  }

  /** Lets every waiting submit in (shutdown: they are answered at once). */
  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    for (const resolve of this.waiting.splice(0)) resolve();
  }
}

/** This process's clock and event loop utilisation (since the last call). */
function processLoop(): { now(): number; used(): number } {
  let elu: EventLoopUtilization = performance.eventLoopUtilization();
  return {
    now: () => performance.now(),
    used: () => {
      const used = performance.eventLoopUtilization(elu).utilization;
      elu = performance.eventLoopUtilization();
      return used;
    },
  };
}

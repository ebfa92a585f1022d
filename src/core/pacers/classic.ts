import { numberOption, type Pacer, type PacerMode, type ReadonlySnapshot, type PacerState } from '../pacer.js';
import type { PiOptions } from './pi.js';

const clamp = (v: number, lo: number, hi: number) => Math.min(Math.max(v, lo), hi);

/**
 * The field engine's dispatch pacer (curio `extern/cuzk/cuzk-core/src/engine.rs`, `DispatchPacer`
 * and the dispatcher loop around it), step for step, so that comparisons with "the field engine"
 * compare with what it does:
 *
 * - Its state changes only at the top of its dispatcher loop — after each dispatch, and when a
 *   device completion wakes it — and, while it waits for work, on each completion; not on every
 *   event. There it updates the per-partition device time EMA (α 0.2; the first sample taken as
 *   is; busy time per partition, not divided by workers), the waiting EMA (α 0.15, from 0) and the
 *   integral of the normalised error (target − EMA) / target over the seconds since the last
 *   update (≥ 1 ms), clamped to [−20, 100].
 * - Steady interval: (EMA / N) / clamp(1 + kp·e + ki·integral, 0.3, 3), e the normalised error,
 *   N the configured workers, clamped to [50 ms, 60 s], truncated to whole ms.
 * - Initial bootstrap: `target` dispatches, each after a 3 s sleep, a completion meanwhile
 *   dispatching at once; then it blocks until the first completion gives a rate, and dispatches
 *   at once.
 * - Steady state: each loop sleeps one interval and dispatches one item; a completion during the
 *   sleep restarts the loop (the sleep begins again, a whole interval).
 * - Re-bootstrap when the rate is known, no bootstrap is left, the waiting EMA is below 1 and
 *   every dispatched partition has completed on a device: `target` dispatches spaced
 *   max(2 s, EMA / N), the integral reset, the device time EMA kept.
 * - Once its sleep is over it takes the next item as soon as there is one and the memory budget
 *   grants it (while it waits for the budget it updates nothing).
 *
 * Two deviations keep it live (no pacer state may hold dispatch forever with work queued and
 * nothing in flight): a completion that reports no busy time counts as 1 µs (the field engine
 * skips such a sample, so where every step reports 0 it never leaves bootstrap), and a wait for
 * the first completion with nothing in flight (its bootstrap items withdrawn) bootstraps again.
 * A fractional target bootstraps ⌈target⌉ items (the field engine's target is a whole number).
 *
 * Options: `targetWaiting` (the field engine's `gpu_queue_target`; 0: no pacing), `kp` (0.5),
 * `ki` (0.001).
 */
export function createClassicPacer(options: PiOptions = {}): Pacer {
  return new ClassicPacer(options);
}

type Phase = 'sleep' | 'waitFirstCompletion' | 'ready';

class ClassicPacer implements Pacer {
  readonly name = 'classic';
  private readonly target: number;
  private readonly kp: number;
  private readonly ki: number;
  private started = false;
  /** The configured device workers (N), taken when the dispatcher starts. */
  private workers = 1;
  private emaWaiting = 0;
  /** EMA of device time per partition, seconds; 1.0 until the first sample. */
  private emaDeviceS = 1;
  private rateKnown = false;
  private prevCompletions = 0;
  private prevBusyMs = 0;
  private integral = 0;
  private lastUpdate = NaN;
  private bootstrapRemaining: number;
  private totalDispatched = 0;
  private phase: Phase = 'sleep';
  private wakeAt = Infinity;
  /** Device completions already seen by an event (to tell a completion from other events). */
  private seenCompletions = 0;
  private backlog = 0;

  constructor(options: PiOptions) {
    this.target = numberOption(options, 'targetWaiting', 4);
    this.kp = numberOption(options, 'kp', 0.5);
    this.ki = numberOption(options, 'ki', 0.001);
    this.bootstrapRemaining = this.bootstrapItems();
  }

  private bootstrapItems(): number {
    return Math.max(1, Math.ceil(this.target));
  }

  observe(s: ReadonlySnapshot): void {
    this.backlog = s.backlog;
    if (!this.started) {
      // The dispatcher starts with the first event.
      this.started = true;
      this.workers = Math.max(1, s.workers);
      this.seenCompletions = s.deviceCompletions;
      this.loopTop(s);
      return;
    }
    const completion = s.deviceCompletions > this.seenCompletions;
    this.seenCompletions = s.deviceCompletions;
    // Waiting for a first completion that can no longer come (see the deviations above).
    if (this.phase === 'waitFirstCompletion' && s.preparing + s.waiting + s.onDevice === 0 && this.target > 0) {
      this.bootstrapRemaining = this.bootstrapItems();
      this.loopTop(s);
    }
    // The sleep ended before this event: the loop went on to take an item.
    if (this.phase === 'sleep' && s.now >= this.wakeAt) this.phase = 'ready';
    if (!completion || this.target <= 0) return;
    if (this.phase === 'sleep') {
      if (this.bootstrapRemaining > 0) {
        // During bootstrap a completion updates the pacer and still dispatches.
        this.update(s);
        this.phase = 'ready';
      } else this.loopTop(s); // steady: `continue` — the loop starts again, and so does its sleep
    } else if (this.phase === 'waitFirstCompletion') {
      this.update(s);
      if (this.rateKnown) this.phase = 'ready';
    } else if (s.backlog === 0) this.update(s); // waiting for work (not while waiting for memory)
  }

  nextDispatchAt(s: ReadonlySnapshot): number {
    if (this.target <= 0 || this.phase === 'ready') return s.now;
    if (this.phase === 'waitFirstCompletion') return Infinity;
    return Math.max(s.now, this.wakeAt);
  }

  onDispatch(s: ReadonlySnapshot): void {
    if (this.bootstrapRemaining > 0) this.bootstrapRemaining--;
    this.totalDispatched++;
    if (this.target > 0) this.loopTop(s);
  }

  state(): PacerState {
    const inBootstrap = this.bootstrapRemaining > 0 || this.phase === 'waitFirstCompletion';
    const mode: PacerMode = this.backlog === 0 ? 'idle' : inBootstrap ? 'bootstrap' : 'steady';
    return {
      mode,
      ratePerSec: this.rateKnown ? this.workers / this.emaDeviceS : null,
      intervalMs: this.target > 0 ? this.intervalMs() : null,
      terms: { waitingEma: this.emaWaiting, integral: this.integral, multiplier: this.multiplier(), bootstrapRemaining: this.bootstrapRemaining },
    };
  }

  /** The top of the dispatcher loop: update, maybe re-bootstrap, then sleep (or wait for the first completion). */
  private loopTop(s: ReadonlySnapshot): void {
    if (this.target <= 0) return;
    this.update(s);
    if (this.rateKnown && this.bootstrapRemaining === 0 && this.emaWaiting < 1 && this.totalDispatched <= s.deviceCompletions) {
      this.bootstrapRemaining = this.bootstrapItems();
      this.integral = 0;
    }
    if (!this.rateKnown && this.bootstrapRemaining === 0) {
      this.phase = 'waitFirstCompletion';
      return;
    }
    this.phase = 'sleep';
    this.wakeAt = s.now + this.intervalMs();
  }

  /** DispatchPacer::update. */
  private update(s: ReadonlySnapshot): void {
    const newCompletions = s.deviceCompletions - this.prevCompletions;
    if (newCompletions > 0) {
      // A step that reports no busy time took at least 1 µs (see the deviations above).
      const sample = Math.max(1e-6, (s.deviceBusyMs - this.prevBusyMs) / newCompletions / 1000);
      this.emaDeviceS = this.rateKnown ? 0.2 * sample + 0.8 * this.emaDeviceS : sample;
      this.rateKnown = true;
      this.prevCompletions = s.deviceCompletions;
      this.prevBusyMs = s.deviceBusyMs;
    }
    this.emaWaiting = 0.15 * s.waiting + 0.85 * this.emaWaiting;
    const dt = Number.isNaN(this.lastUpdate) ? 0.001 : Math.max(0.001, (s.now - this.lastUpdate) / 1000);
    this.integral = clamp(this.integral + ((this.target - this.emaWaiting) / this.target) * dt, -20, 100);
    this.lastUpdate = s.now;
  }

  private multiplier(): number {
    const error = (this.target - this.emaWaiting) / this.target;
    return clamp(1 + this.kp * error + this.ki * this.integral, 0.3, 3);
  }

  /** DispatchPacer::interval, ms. */
  private intervalMs(): number {
    if (this.bootstrapRemaining > 0) return this.rateKnown ? Math.max(2, this.emaDeviceS / this.workers) * 1000 : 3000;
    if (!this.rateKnown) return 3000;
    return Math.floor(clamp(((this.emaDeviceS / this.workers) / this.multiplier()) * 1000, 50, 60_000));
  }
}

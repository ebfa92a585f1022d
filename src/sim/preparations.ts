import type { EventQueue, SimEvent } from './events.js';
import type { Rng } from './random.js';
import { factor, type Kind } from './scenario.js';

/** A partition in the simulator, from its job's arrival until it leaves the pipeline. */
export interface SimItem {
  rng: Rng;
  /** Scenario faults aimed at this partition. */
  failPrepare: boolean;
  failDevice: boolean;
  /** Its kind's index in the scenario's kinds (kindList, SimDevice.serviceOf, workOf). */
  kindIndex: number;
  /** Its job's index in the planned arrivals. */
  jobIndex: number;
  /** The item's preparation event, reused across attempts; pending while it is in the heap. */
  prepEv: SimEvent | null;
  /** Fluid preparation (see PrepFluid): work left in ms at rate 1. */
  prepRemaining: number;
  device: number;
  worker: number;
}

/**
 * The preparations in flight. Where some kind's contention is not all 1s they are a fluid, like
 * the devices: with k preparations in flight each one progresses at 1 ÷ factor(its kind's
 * contention, k), so a preparation already running slows down when more start (shared cores,
 * memory bandwidth) and speeds up when they finish. Otherwise a preparation's latency is what was
 * sampled when it started.
 */
export class PrepFluid {
  /** Preparation steps in flight (a batch is one). */
  preparing = 0;
  private readonly inPrep = new Set<SimItem>();
  private at = 0;
  private dirty = false;

  constructor(
    readonly fluid: boolean,
    private readonly kinds: readonly Kind[],
    private readonly events: EventQueue,
  ) {}

  /**
   * A preparation step starts at `now` with `baseMs` of work at rate 1 (a batch: `carrier`
   * stands for it); returns its latency at the concurrency now, from which its end is first timed.
   */
  start(carrier: SimItem, baseMs: number, now: number): number {
    if (this.fluid) this.advance(now);
    this.preparing++;
    if (this.fluid) {
      carrier.prepRemaining = baseMs;
      this.inPrep.add(carrier);
    }
    return baseMs * factor(this.contentionOf(carrier), this.preparing);
  }

  /** A preparation step ended or was withdrawn at `now`. */
  end(carrier: SimItem, now: number): void {
    if (this.fluid) {
      this.advance(now);
      this.inPrep.delete(carrier);
    }
    this.preparing--;
  }

  /** Re-times every preparation's end for the concurrency now, once per instant (like devices). */
  retimeTouched(now: number): void {
    if (!this.dirty) return;
    this.dirty = false;
    for (const it of this.inPrep) this.events.move(it.prepEv as SimEvent, now + it.prepRemaining * factor(this.contentionOf(it), this.preparing));
  }

  /** Brings every preparation's remaining work up to `now` at the concurrency it ran with. */
  private advance(now: number): void {
    const elapsed = now - this.at;
    if (elapsed > 0) for (const it of this.inPrep) it.prepRemaining = Math.max(0, it.prepRemaining - elapsed / factor(this.contentionOf(it), this.preparing));
    this.at = now;
    this.dirty = true;
  }

  private contentionOf(it: SimItem): number[] {
    return (this.kinds[it.kindIndex] as Kind).contention;
  }
}

import { performance } from 'node:perf_hooks';

/** Time and one timer: what the runtime needs from the outside world (injected in tests). */
export interface Clock {
  /** Milliseconds on a monotonic clock. */
  now(): number;
  /** Calls `fn` once, `ms` from now; returns a handle for cancel(). */
  schedule(fn: () => void, ms: number): unknown;
  cancel(handle: unknown): void;
}

/** The longest delay setTimeout takes; a longer one fires after 1 ms (with a TimeoutOverflowWarning). */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * The real clock: performance.now() and setTimeout (a pending timer keeps the process alive, as
 * pending jobs should). A delay over setTimeout's ~24.8 days is waited in hops: passed on whole,
 * a job deadline a month away made the runtime wake every millisecond until the job ended.
 */
export const systemClock: Clock = {
  now: () => performance.now(),
  schedule: (fn, ms) => {
    const at = performance.now() + Math.max(0, ms);
    const handle: { timer?: NodeJS.Timeout } = {};
    const arm = () => {
      const left = at - performance.now();
      handle.timer = left > MAX_TIMEOUT_MS ? setTimeout(arm, MAX_TIMEOUT_MS) : setTimeout(fn, Math.max(0, left));
    };
    arm();
    return handle;
  },
  cancel: (handle) => clearTimeout((handle as { timer?: NodeJS.Timeout }).timer),
};

/** A clock that only moves when told to: for deterministic tests of the runtime. */
export class ManualClock implements Clock {
  private t = 0;
  private seq = 0;
  private readonly timers = new Map<number, { at: number; fn: () => void }>();

  now(): number {
    return this.t;
  }

  schedule(fn: () => void, ms: number): unknown {
    const id = ++this.seq;
    this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return id;
  }

  cancel(handle: unknown): void {
    this.timers.delete(handle as number);
  }

  /** Moves time forward by `ms`, firing due timers in time order (each at its own time). */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const e of this.timers) if (e[1].at <= end && (!next || e[1].at < next[1].at)) next = e;
      if (!next) break;
      this.timers.delete(next[0]);
      this.t = next[1].at;
      next[1].fn();
    }
    this.t = end;
  }
}

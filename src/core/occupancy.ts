import type { Command, EngineEvent } from './types.js';

interface Running {
  device: number;
  worker: number;
  attempt: number;
  since: number;
}

/** Batches run under keys below any item id's. */
function batchKey(batch: number): number {
  return -1 - batch;
}

/**
 * Occupancy over a window: the busy time the workers' meters gained in it ÷ (its length ×
 * workers); 0 for an empty window or no workers. With {@link OccupancyMeter}'s readings it is at
 * most 1 by construction. The one formula behind every occupancy an operator sees (the demo's
 * progress and result, the cluster heartbeat, the history's samples); the simulator integrates
 * the same quantity exactly, busy workers × time ÷ live workers × time.
 */
export function windowOccupancy(busyMs: number, windowMs: number, workers: number): number {
  return windowMs > 0 && workers > 0 ? busyMs / (windowMs * workers) : 0;
}

/** All workers' busy ms together, from a `[device][worker]` reading. */
export function totalBusyMs(rows: readonly (readonly number[])[]): number {
  return rows.reduce((a, row) => row.reduce((b, v) => b + v, a), 0);
}

/**
 * Device busy time that is true in every window, for what operators see (progress lines,
 * metrics, the dashboard, history). Booking an item's busy time when it completes gives the whole
 * item to the window it ends in — occupancy above 1 there, below the truth before. This meter
 * counts the running part of items in flight too: a worker's busy time at `t` is the busy time of
 * its finished items plus `t − start` of the one it runs.
 *
 * A finished item is credited the device time the worker measured (the pacer's figure), but never
 * more than it was held (start to end, as the driver saw it): busy time means occupied time. A
 * measure below the held time would make the running part already shown shrink back; each
 * worker's reading is kept monotone instead (never below what it read before), so the busy time
 * of any window between two readings is at most the window's length: occupancy ≤ 1 by
 * construction, without clamping a window.
 *
 * Fed like the {@link TimelineRecorder}: each engine step's event and commands.
 */
export class OccupancyMeter {
  private readonly running = new Map<number, Running>();
  private readonly done: number[][] = [];
  private readonly shown: number[][] = [];

  /** `workers[d]`: the number of workers of device d. */
  constructor(workers: readonly number[]) {
    for (const n of workers) {
      this.done.push(new Array<number>(n).fill(0));
      this.shown.push(new Array<number>(n).fill(0));
    }
  }

  /** Feeds one engine step: the event and the commands it returned. */
  record(event: EngineEvent, commands: readonly Command[]): void {
    const t = event.time;
    if (event.type === 'deviceDone' || event.type === 'deviceFailed') {
      const r = this.running.get(event.item);
      if (r && r.attempt === event.attempt) {
        const held = Math.max(0, t - r.since);
        const measured = event.type === 'deviceDone' && event.busyMs !== undefined ? event.busyMs : held;
        this.end(event.item, r, Math.min(held, measured));
      }
    } else if (event.type === 'batchDone' || event.type === 'batchFailed') {
      const r = this.running.get(batchKey(event.batch));
      if (r) {
        const held = Math.max(0, t - r.since);
        this.end(batchKey(event.batch), r, Math.min(held, event.type === 'batchDone' && event.busyMs !== undefined ? event.busyMs : held));
      }
    } else if (event.type === 'workerLost') {
      for (const [id, r] of this.running) if (r.device === event.device && r.worker === event.worker) this.end(id, r, Math.max(0, t - r.since));
    }
    for (const c of commands) {
      if (c.type === 'startDevice') {
        const open = this.running.get(c.item.id);
        if (open) this.end(c.item.id, open, Math.max(0, t - open.since));
        this.running.set(c.item.id, { device: c.device, worker: c.worker, attempt: c.attempt, since: t });
      } else if (c.type === 'startBatch') {
        this.running.set(batchKey(c.batch), { device: c.device, worker: c.worker, attempt: 0, since: t });
      } else if (c.type === 'abort' && c.stage === 'on-device') {
        // A batch's worker is busy until its last item is withdrawn.
        const key = c.batch ? (c.batch.remaining === 0 ? batchKey(c.batch.id) : NaN) : c.item.id;
        const r = this.running.get(key);
        if (r) this.end(key, r, Math.max(0, t - r.since));
      }
    }
  }

  /** Busy ms of each worker of each device up to `now` (`[device][worker]`), monotone across calls with a non-decreasing `now`. */
  busyMs(now: number): number[][] {
    const out = this.done.map((row) => [...row]);
    for (const r of this.running.values()) {
      const row = out[r.device];
      if (row && r.worker < row.length) row[r.worker] = (row[r.worker] as number) + Math.max(0, now - r.since);
    }
    out.forEach((row, d) =>
      row.forEach((v, w) => {
        const shown = this.shown[d] as number[];
        if (v < (shown[w] as number)) row[w] = shown[w] as number;
        else shown[w] = v;
      }),
    );
    return out;
  }

  private end(item: number, r: Running, creditMs: number): void {
    this.running.delete(item);
    const row = this.done[r.device];
    if (row && r.worker < row.length) row[r.worker] = (row[r.worker] as number) + creditMs;
  }
}

/**
 * One step at a time on each device worker, in the order they come. The engine frees a worker
 * as soon as it withdraws its step (a device timeout, a cancel); the step itself settles a moment
 * later — a process ended, a request aborted — and the worker's next step waits for that, rather
 * than being refused as "already busy" (which spent the retry of the item that timed out, and
 * hid why it had failed).
 */
export class WorkerTurns {
  /** Per worker, when its latest step (taken or waiting) has settled. */
  private readonly ends = new Map<number, Promise<void>>();

  /** Runs `step` on `worker` once every step taken on it before has settled. */
  take<T>(worker: number, step: () => Promise<T>): Promise<T> {
    const before = this.ends.get(worker);
    const run = before ? before.then(step) : step();
    const end = run.then(
      () => undefined,
      () => undefined,
    );
    this.ends.set(worker, end);
    void end.then(() => {
      if (this.ends.get(worker) === end) this.ends.delete(worker);
    });
    return run;
  }
}

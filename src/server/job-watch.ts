/**
 * The progress streams of watched jobs (`GET /v1/jobs/:id/events`). A watched job's view costs
 * O(its partitions): it is looked at on an engine step when the last look is PROGRESS_MS old, else
 * once more when it is (steps come thousands a second); a job's end is sent at once.
 */
import { performance } from 'node:perf_hooks';
import type { PartitionState } from '../core/index.js';
import type { JobView } from './api.js';
import { notFound } from './errors.js';
import { isFinal, progressEvents, type JobProgressEvent } from './progress.js';

/** How often at most (ms) a watched job's progress is looked at: 20 events a second at most. */
const PROGRESS_MS = 50;

type Listener = (e: JobProgressEvent) => void;

/** The watched jobs of one service, and the one pending look at them. */
export class JobWatch {
  /** Per watched job: its listeners and the partition states last sent. */
  private readonly watchers = new Map<string, { listeners: Set<Listener>; last: PartitionState[] }>();
  private timer: NodeJS.Timeout | undefined;
  private lookedAt = -Infinity;

  /** `view`: a job's view now, every partition's state in it (undefined: unknown). */
  constructor(private readonly view: (id: string) => JobView | undefined) {}

  /**
   * Streams one job's progress to `listener`: at once a `progress` event with every partition,
   * then one whenever partitions move, then `end` with the job's view (after which it is not
   * called again). Returns the unsubscribe function.
   * @throws {ServiceError} 404 for an unknown job.
   */
  watch(id: string, listener: Listener): () => void {
    const v = this.view(id);
    if (!v) throw notFound(id);
    const { events, states } = progressEvents(v, []);
    for (const e of events) listener(e);
    if (isFinal(v.state)) return () => {};
    let w = this.watchers.get(id);
    if (!w) this.watchers.set(id, (w = { listeners: new Set(), last: states }));
    w.listeners.add(listener);
    return () => {
      w.listeners.delete(listener);
      if (w.listeners.size === 0 && this.watchers.get(id) === w) this.watchers.delete(id);
    };
  }

  /** An engine step: the watched jobs are looked at now, or once PROGRESS_MS after the last look. */
  onStep(): void {
    if (this.watchers.size === 0 || this.timer) return;
    const wait = this.lookedAt + PROGRESS_MS - performance.now();
    if (wait <= 0) this.progressAll();
    else this.timer = setTimeout(() => this.progressAll(), wait);
  }

  /** Sends a watched job's partitions that moved since the last event, and its end. */
  progress(id: string): void {
    const w = this.watchers.get(id);
    const v = w && this.view(id);
    if (!w || !v) return;
    const { events, states } = progressEvents(v, w.last);
    w.last = states;
    if (isFinal(v.state)) this.watchers.delete(id);
    for (const e of events) for (const l of [...w.listeners]) l(e);
  }

  /**
   * Stops the pending look (shutdown). The cleared timer stays set on purpose: onStep then
   * schedules no more looks while the runtime drains.
   */
  close(): void {
    clearTimeout(this.timer);
  }

  private progressAll(): void {
    this.timer = undefined;
    this.lookedAt = performance.now();
    for (const id of [...this.watchers.keys()]) this.progress(id);
  }
}

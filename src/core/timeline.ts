import type { ReadonlySnapshot } from './pacer.js';
import type { Command, EngineEvent, ItemView, Priority } from './types.js';

/**
 * A timeline of what ran where, recorded from the engine's own steps (the event applied and the
 * commands it returned), so the simulator and the real-time runtime record it the same way. It
 * feeds the dashboard's waterfall and the Chrome trace export.
 */

/** A track: one preparation slot, or one device worker. */
export interface TimelineLane {
  id: number;
  kind: 'prepare' | 'device';
  /** "prepare 3", "device 0 / worker 1". */
  name: string;
  device?: number;
  worker?: number;
}

/** One partition on one lane, from start to end (driver clock, ms). */
export interface TimelineSpan {
  lane: number;
  kind: 'prepare' | 'device';
  jobId: string;
  partition: number;
  start: number;
  /** null while it runs. */
  end: number | null;
  /** How it ended: done, failed, or aborted (cancel, timeout, lost worker, shutdown); null while it runs. */
  outcome: 'done' | 'failed' | 'aborted' | null;
  /** A batch (on a device, or a preparation batch): how many items it started with (`jobId` and `partition` are its first item's). */
  items?: number;
  /** A batch: the jobs of its items, each once, in the batch's order (a batch is one span, named after its first item). */
  jobs?: string[];
}

/** A job as it was submitted: when, its kind, size, priority and memory per partition (what a fit of the run needs for arrivals). */
export interface TimelineJob {
  t: number;
  id: string;
  kind: string;
  partitions: number;
  priority: Priority;
  prepareBytes: number;
  deviceBytes: number;
}

/** A batching setting as a run had it (recorded beside its timeline for `stoker plan`): the most items in one batch, the longest wait for more, ms. */
export interface BatchSetting {
  maxItems: number;
  maxWaitMs: number;
}

/** The pipeline's levels at one moment. */
export interface TimelineSample {
  t: number;
  waiting: number;
  preparing: number;
  onDevice: number;
  /** preparing + waiting + on device. */
  inventory: number;
  /** Bytes reserved, and bytes held outside reservations (idle pooled buffers). */
  budgetUsedBytes: number;
  budgetHeldBytes: number;
}

export interface TimelineOptions {
  /** Finished spans kept (the oldest go first). @default 50000 */
  maxSpans?: number;
  /** Samples kept. @default 20000 */
  maxSamples?: number;
  /** Least time between two samples, ms. @default 250 */
  sampleEveryMs?: number;
}

interface Open {
  span: TimelineSpan;
  attempt: number;
}

/** Span keys of batches, apart from item ids (≥ 0) and from each other: device batches odd, preparation batches even. */
const batchKey = (id: number): number => -1 - 2 * id;
const prepBatchKey = (id: number): number => -2 - 2 * id;

/** Records spans and level samples from engine steps; bounded memory (oldest dropped first). */
export class TimelineRecorder {
  private readonly maxSpans: number;
  private readonly maxSamples: number;
  private readonly sampleEvery: number;
  private readonly laneList: TimelineLane[] = [];
  /** Preparation lanes: whether each is in use. */
  private readonly prepBusy: boolean[] = [];
  private readonly prepLanes: number[] = [];
  private readonly deviceLanes = new Map<string, number>();
  /** Open spans by item id (an item is in at most one stage at a time). */
  private readonly open = new Map<number, Open>();
  private finished: TimelineSpan[] = [];
  /** Jobs submitted, oldest first (bounded like the spans), and the ids among them. */
  private jobList: TimelineJob[] = [];
  private readonly jobIds = new Set<string>();
  private sampleList: TimelineSample[] = [];
  private lastSample = -Infinity;

  constructor(options: TimelineOptions = {}) {
    this.maxSpans = options.maxSpans ?? 50_000;
    this.maxSamples = options.maxSamples ?? 20_000;
    this.sampleEvery = options.sampleEveryMs ?? 250;
  }

  /** Feeds one engine step: the event, the commands it returned, and the snapshot after it. */
  record(event: EngineEvent, commands: readonly Command[], s: ReadonlySnapshot, heldBytes = 0): void {
    const t = event.time;
    switch (event.type) {
      case 'submit': {
        // (An identical resubmit of a job already recorded — a client's retry — is the same job.)
        const j = event.job;
        if (this.jobIds.has(j.id)) break;
        this.jobIds.add(j.id);
        this.jobList.push({ t, id: j.id, kind: j.kind, partitions: j.partitions, priority: j.priority ?? 'normal', prepareBytes: j.memory?.prepareBytes ?? 0, deviceBytes: j.memory?.deviceBytes ?? 0 });
        if (this.jobList.length > this.maxSpans * 1.25) {
          const drop = this.jobList.length - this.maxSpans;
          for (const old of this.jobList.slice(0, drop)) this.jobIds.delete(old.id);
          this.jobList = this.jobList.slice(drop);
        }
        break;
      }
      case 'prepared':
        this.close(event.item, event.attempt, 'prepare', t, 'done');
        break;
      case 'prepareFailed':
        this.close(event.item, event.attempt, 'prepare', t, 'failed');
        break;
      case 'deviceDone':
        this.close(event.item, event.attempt, 'device', t, 'done');
        break;
      case 'deviceFailed':
        this.close(event.item, event.attempt, 'device', t, 'failed');
        break;
      case 'batchDone':
        this.end(batchKey(event.batch), t, 'done');
        break;
      case 'batchFailed':
        this.end(batchKey(event.batch), t, 'failed');
        break;
      case 'prepareBatchDone':
        this.end(prepBatchKey(event.batch), t, 'done');
        break;
      case 'prepareBatchFailed':
        this.end(prepBatchKey(event.batch), t, 'failed');
        break;
      case 'workerLost': {
        const lane = this.deviceLanes.get(`${event.device}/${event.worker}`);
        for (const [id, o] of this.open) if (o.span.lane === lane) this.end(id, t, 'aborted');
        break;
      }
      default:
        break;
    }
    for (const c of commands) {
      if (c.type === 'startPrepare') this.start(c.item.id, c.attempt, 'prepare', this.prepLane(), c.item.jobId, c.item.partition, t);
      else if (c.type === 'startDevice') this.start(c.item.id, c.attempt, 'device', this.deviceLane(c.device, c.worker), c.item.jobId, c.item.partition, t);
      else if (c.type === 'startBatch') this.startBatch(batchKey(c.batch), c.items, 'device', this.deviceLane(c.device, c.worker), t);
      else if (c.type === 'startPrepareBatch') this.startBatch(prepBatchKey(c.batch), c.items, 'prepare', this.prepLane(), t);
      else if (c.type === 'abort') {
        const key = c.batch ? (c.batch.remaining === 0 ? (c.stage === 'preparing' ? prepBatchKey : batchKey)(c.batch.id) : NaN) : c.item.id;
        if (this.open.has(key)) this.end(key, t, 'aborted');
      }
    }
    // A sample is the levels after the last step at its time: several steps at one time (the
    // simulator's fixed preparation times end together) showed the first one's, an intermediate
    // state (waiting 0 where two waited until the next sample).
    const last = this.sampleList[this.sampleList.length - 1];
    if (last !== undefined && last.t === t) Object.assign(last, this.levels(s, heldBytes));
    else if (t - this.lastSample >= this.sampleEvery) {
      this.lastSample = t;
      this.sampleList.push({ t, ...this.levels(s, heldBytes) });
      if (this.sampleList.length > this.maxSamples * 1.25) this.sampleList = this.sampleList.slice(-this.maxSamples);
    }
  }

  private levels(s: ReadonlySnapshot, heldBytes: number): Omit<TimelineSample, 't'> {
    return { waiting: s.waiting, preparing: s.preparing, onDevice: s.onDevice, inventory: s.preparing + s.waiting + s.onDevice, budgetUsedBytes: s.budgetUsedBytes, budgetHeldBytes: heldBytes };
  }

  lanes(): TimelineLane[] {
    return this.laneList.map((l) => ({ ...l }));
  }

  /** Spans that ended at or after `since` (or still run), oldest start first. */
  spans(since = -Infinity): TimelineSpan[] {
    const out = this.finished.filter((sp) => (sp.end as number) >= since);
    for (const o of this.open.values()) out.push({ ...o.span });
    return out.sort((a, b) => a.start - b.start);
  }

  /** Jobs submitted at or after `since`, oldest first. */
  jobs(since = -Infinity): TimelineJob[] {
    return this.jobList.filter((j) => j.t >= since).map((j) => ({ ...j }));
  }

  /** Samples at or after `since`. */
  samples(since = -Infinity): TimelineSample[] {
    return this.sampleList.filter((x) => x.t >= since);
  }

  private prepLane(): number {
    let i = this.prepBusy.indexOf(false);
    if (i < 0) {
      i = this.prepBusy.length;
      this.prepBusy.push(false);
      const id = this.laneList.length;
      this.laneList.push({ id, kind: 'prepare', name: `prepare ${i}` });
      this.prepLanes.push(id);
    }
    this.prepBusy[i] = true;
    return this.prepLanes[i] as number;
  }

  private deviceLane(device: number, worker: number): number {
    const key = `${device}/${worker}`;
    let id = this.deviceLanes.get(key);
    if (id === undefined) {
      id = this.laneList.length;
      this.laneList.push({ id, kind: 'device', name: `device ${device} / worker ${worker}`, device, worker });
      this.deviceLanes.set(key, id);
    }
    return id;
  }

  private start(item: number, attempt: number, kind: 'prepare' | 'device', lane: number, jobId: string, partition: number, t: number): void {
    // A stage starts only after the previous one ended; a span still open here was ended without an event.
    if (this.open.has(item)) this.end(item, t, 'done');
    this.open.set(item, { attempt, span: { lane, kind, jobId, partition, start: t, end: null, outcome: null } });
  }

  /** One span per batch (under a key below any item id's), named after its first item, listing its jobs. */
  private startBatch(key: number, items: readonly ItemView[], kind: 'prepare' | 'device', lane: number, t: number): void {
    const first = items[0];
    if (!first) return;
    this.start(key, 0, kind, lane, first.jobId, first.partition, t);
    const span = (this.open.get(key) as { span: TimelineSpan }).span;
    span.items = items.length;
    span.jobs = [...new Set(items.map((it) => it.jobId))];
  }

  private close(item: number, attempt: number, kind: 'prepare' | 'device', t: number, outcome: 'done' | 'failed'): void {
    const o = this.open.get(item);
    // Stale events (an older attempt) do not end the current span.
    if (o && o.attempt === attempt && o.span.kind === kind) this.end(item, t, outcome);
  }

  private end(item: number, t: number, outcome: 'done' | 'failed' | 'aborted'): void {
    const o = this.open.get(item);
    if (!o) return;
    this.open.delete(item);
    o.span.end = t;
    o.span.outcome = outcome;
    if (o.span.kind === 'prepare') this.prepBusy[this.prepLanes.indexOf(o.span.lane)] = false;
    this.finished.push(o.span);
    if (this.finished.length > this.maxSpans * 1.25) this.finished = this.finished.slice(-this.maxSpans);
  }
}

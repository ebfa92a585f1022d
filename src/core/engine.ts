import { MemoryBudget } from './budget.js';
import { checkKeys, shown } from './checks.js';
import { StokerError } from './errors.js';
import { IndexedHeap, type HeapNode } from './heap.js';
import type { DeviceCounters, KindCounters, Pacer, PacerSnapshot, ReadonlySnapshot } from './pacer.js';
import { NumberMap } from './number-map.js';
import { KeyHeap, keyLess, MAX_PARTITIONS, type KeyedNode } from './queue.js';
import { PRIORITIES, type Command, type EngineEvent, type ItemFailure, type ItemView, type JobEnd, type JobSpec, type PartitionState, type Priority } from './types.js';

export interface DeviceSpec {
  /** Pipelined workers on this device (≥ 1). */
  workers: number;
  /** What failure reasons call it (a service config's device name); absent: its index. */
  name?: string;
  /**
   * The job kinds this device runs; absent: every kind. An item goes only to a device that runs
   * its kind (a waiting item of a busy device's kind does not hold up one for an idle device).
   */
  kinds?: readonly string[];
  /**
   * Batches: a free worker takes up to `maxItems` waiting items of one kind at once (in queue
   * order) and runs them as one step (`startBatch`), waiting up to `maxWaitMs` for more while
   * fewer are waiting and more of that kind are in preparation (0: takes what is there). A batch
   * reports its device time once. Absent: one item per step (`startDevice`).
   */
  batch?: BatchSpec;
}

export interface BatchSpec {
  /** Most items in one batch (≥ 1). */
  maxItems: number;
  /** Longest wait for a fuller batch, ms (≥ 0). @default 0 */
  maxWaitMs?: number;
}

/** What the engine knows of a job kind beyond its name. */
export interface KindSpec {
  /**
   * Preparation batches: up to `maxItems` queued items of this kind, in queue order, are prepared
   * together as one step (`startPrepareBatch`), with memory reserved for all of them at once. When
   * fewer are queued, the batch waits up to `maxWaitMs` (from when the pacer first let its oldest
   * item start) for more to arrive; it starts at once when the queue holds other work behind it (another kind,
   * or an item that must be prepared alone), which could not join it. A batch counts as one
   * preparation for `maxPreparing`. Absent: one item per step.
   */
  prepareBatch?: BatchSpec;
}

/** The fields each object given to the engine may have: any other is misspelt (read as absent, silently). */
const ENGINE_OPTIONS = ['devices', 'kinds', 'pacer', 'budgetBytes', 'maxPreparing', 'retries'] as const satisfies readonly (keyof EngineOptions)[];
const DEVICE_OPTIONS = ['workers', 'name', 'kinds', 'batch'] as const satisfies readonly (keyof DeviceSpec)[];
const JOB_FIELDS = ['id', 'kind', 'priority', 'partitions', 'memory', 'deadline', 'partitionNumbers'] as const satisfies readonly (keyof JobSpec)[];

export interface EngineOptions {
  /** The accelerators: one entry per device. */
  devices: DeviceSpec[];
  /** Kinds by name that need more than their name (preparation batches). @default {} */
  kinds?: Readonly<Record<string, KindSpec>>;
  /** The pacer that gates dispatch. */
  pacer: Pacer;
  /** Memory budget in bytes. @default Infinity */
  budgetBytes?: number;
  /** Cap on concurrent preparation steps (a preparation batch is one). @default Infinity */
  maxPreparing?: number;
  /**
   * How often a failed partition (in preparation or on a device) is prepared again before its
   * job fails. @default 0 — the core retries only what its driver asks for, so that a failure in a
   * simulation or a test is the failure given (the runtime and the service, which meet real,
   * often passing failures — a crashed worker, a full device — default to 1).
   */
  retries?: number;
}

interface Job extends HeapNode {
  readonly spec: Required<Pick<JobSpec, 'id' | 'kind' | 'priority' | 'partitions'>> & { memory: { prepareBytes: number; deviceBytes: number }; deadline: number; partitionNumbers: readonly number[] | null };
  readonly seq: number;
  /** Its priority's rank (RANK), looked up once rather than for every partition made. */
  readonly rank: number;
  readonly submittedAt: number;
  /** Bytes granted at dispatch: max(prepareBytes, deviceBytes). */
  readonly reservation: number;
  /**
   * Partitions are made lazily: those from `next` on exist only as this number (queued, never
   * dispatched), so a job of 10⁶ partitions costs O(1) until they are dispatched. The backlog
   * holds the job's partition `next − 1` (its frontier) while it waits, and the next one is made
   * when that one is dispatched; `liveHead` … `liveTail` lists the made partitions that have not
   * finished, in the order they were made (linked through Item.prevLive/nextLive: a list costs no
   * hash-table insert and delete per partition, as a map did).
   */
  next: number;
  liveHead: Item | null;
  liveTail: Item | null;
  /** Item ids are `firstId + partition`: dense in submission order, as if all were made at submit. */
  readonly firstId: number;
  remaining: number;
  /** This job's kind: its index in the snapshot's kinds, and its counters there. */
  readonly kindIndex: number;
  readonly kc: EngineKind;
}

/** A kind's counters as the engine keeps them: its queued count always there. */
type EngineKind = KindCounters & { queued: number };

interface Item extends ItemView, KeyedNode {
  readonly job: Job;
  state: PartitionState;
  attempt: number;
  /** Failures so far (each one retried while fewer than `retries`). */
  failures: number;
  reservedBytes: number;
  startedAt: number;
  /** The device's ∫ busy dt when the item started on it. */
  busyAtStart: number;
  /** ∫ preparing dt when its preparation started (snapshot.preparingMsTotal). */
  preparingAtStart: number;
  device: number;
  worker: number;
  /** The batch it runs in (on a batching device), else null. */
  batch: Batch | null;
  /** When it was last prepared (it waits for a batch from then). */
  waitingSince: number;
  /** Its batch failed without saying which item: it runs alone next time. */
  solo: boolean;
  /** The preparation batch it is prepared in, else null. */
  prepBatch: PrepBatch | null;
  /** Its preparation batch failed without saying which item: it is prepared alone next time. */
  prepSolo: boolean;
  /** Its neighbours in its job's list of live partitions (Job.liveHead). */
  prevLive: Item | null;
  nextLive: Item | null;
  /** Since when the pacer has let it start while it waits in a short preparation batch (Infinity: not waiting). */
  heldSince: number;
  /** Its view, for JSON.stringify (see itemJson). */
  toJSON(): ItemView;
}

/**
 * An item's view as JSON.stringify writes it: commands carry the engine's own item (no copy per
 * command), which links to its job and its neighbours — a driver that logged its commands as JSON
 * got "Converting circular structure to JSON".
 */
function itemJson(this: Item): ItemView {
  return { id: this.id, jobId: this.jobId, kind: this.kind, partition: this.partition, priority: this.priority, state: this.state, attempt: this.attempt, failures: this.failures, reservedBytes: this.reservedBytes };
}

/** Items prepared together as one step (a `startPrepareBatch`). */
interface PrepBatch {
  readonly id: number;
  /** Every item it started with; those still in it have `prepBatch` pointing here. */
  readonly items: readonly Item[];
  /** Items still in it. */
  live: number;
  readonly startedAt: number;
  /** Answered (prepareBatchDone, prepareBatchFailed): its step is over. */
  answered: boolean;
}

/** Items run together on one worker (a `startBatch`). */
interface Batch {
  readonly id: number;
  /** Every item it started with (its size); those still in it have `batch` pointing here. */
  readonly items: readonly Item[];
  /** Items still running in it. */
  live: number;
  readonly device: number;
  readonly worker: number;
  readonly startedAt: number;
  /** The device's ∫ busy dt at its start. */
  readonly busyAtStart: number;
  /** Answered (batchDone, batchFailed): an item of it withdrawn now has no step left to stop. */
  answered: boolean;
}

interface Worker {
  alive: boolean;
  item: Item | null;
  batch: Batch | null;
}

/** A live job as drivers and services see it. */
export interface JobStatus {
  id: string;
  kind: string;
  priority: Priority;
  seq: number;
  submittedAt: number;
  partitions: readonly PartitionState[];
}

const RANK: Record<Priority, number> = { critical: 0, high: 1, normal: 2, low: 3 };

/**
 * Every legal move of a partition: queued → preparing → waiting → on device → done; back to
 * queued to be prepared again (a retry, a batch that failed unexplained, a lost worker); failed or
 * cancelled from anywhere live (its job ended). Nothing leaves done, failed or cancelled.
 */
function legalMove(from: PartitionState, to: PartitionState): boolean {
  // A switch, not a table indexed by both names: that was a megamorphic keyed load twice per move.
  switch (to) {
    case 'preparing':
      return from === 'queued';
    case 'waiting':
      return from === 'preparing';
    case 'on-device':
      return from === 'waiting';
    case 'done':
      return from === 'on-device';
    case 'queued':
      return from === 'preparing' || from === 'on-device';
    case 'failed':
    case 'cancelled':
      return from === 'queued' || from === 'preparing' || from === 'waiting' || from === 'on-device';
  }
}

/**
 * The pipeline state machine: jobs → priority queue → pacer gate → budget → preparation →
 * waiting (key order) → device workers → done. Pure: no clock, no timers, no I/O. Feed it
 * {@link EngineEvent}s in time order; carry out the {@link Command}s it returns.
 */
export class Engine {
  /** The live counters (updated in place): the pacer reads them, and only the engine writes them. */
  private readonly counters: PacerSnapshot;
  readonly budget: MemoryBudget;
  readonly pacer: Pacer;
  readonly maxPreparing: number;
  readonly retries: number;

  private now = -Infinity;
  private seq = 0;
  private itemSeq = 0;
  private readonly jobs = new Map<string, Job>();
  private readonly items = new NumberMap<Item>();
  /**
   * Queued items in key order. Keys are unique by construction (a job's seq is its own, and each
   * of its partitions is made once), so this is a bare heap, not a PartitionQueue: that one's
   * table of keys, to refuse a duplicate, cost three look-ups per partition.
   */
  private readonly backlog = new KeyHeap<Item>();
  /** Prepared items in key order. */
  private readonly waitingQ = new KeyHeap<Item>();
  private readonly deadlines = new IndexedHeap<Job>((a, b) => a.spec.deadline < b.spec.deadline || (a.spec.deadline === b.spec.deadline && a.seq < b.seq));
  private readonly workers: Worker[][];
  /** What failure reasons call each device: its DeviceSpec.name quoted, else its index. */
  private readonly deviceNames: string[];
  /** Per device, the kinds it runs (null: every kind); null when no device names kinds. */
  private readonly deviceKinds: (ReadonlySet<string> | null)[] | null;
  /** Live jobs by kind (kept only where devices name kinds): which devices have work at all. */
  private readonly liveByKind = new Map<string, number>();
  /** Per device: ∫ busy workers dt up to busyAt (for DeviceCounters.concurrencyTotal). */
  private readonly busyIntegral: number[];
  private readonly busyAt: number[];
  /** Kinds by name: their index in the snapshot's kinds. */
  private readonly kindIndexes = new Map<string, number>();
  private wake = Infinity;
  /** The pacer's workerLimit, if it has one. */
  private readonly workerLimit: ((device: number) => number) | null;
  /** Set by a `drain` event: no more dispatches. */
  private draining = false;
  /** Per device, its batching (null: one item per step); null when no device batches. */
  private readonly batching: ({ maxItems: number; maxWaitMs: number } | null)[] | null;
  private readonly batches = new Map<number, Batch>();
  private batchSeq = 0;
  /** Per device: the kind (index) it holds a free worker for, for a fuller batch, in the current assignment pass (−1: none). */
  private readonly holding: number[];
  /** When the earliest held batch must start anyway (Infinity: none held). */
  private batchWake = Infinity;
  /** Preparation batching by kind name, as given; by kind index once a kind is seen (null: one item per step). */
  private readonly prepSpecs: ReadonlyMap<string, { maxItems: number; maxWaitMs: number }>;
  private readonly prepByKind: ({ maxItems: number; maxWaitMs: number } | null)[] = [];
  private readonly prepBatches = new Map<number, PrepBatch>();
  private prepBatchSeq = 0;

  /** The live counters, read-only: what telemetry (status, metrics, history, the simulator's measures) reads. */
  get snapshot(): ReadonlySnapshot {
    return this.counters;
  }

  constructor(options: EngineOptions) {
    if (typeof options !== 'object' || options === null) throw new StokerError('E_INVALID_OPTION', 'the Engine takes options: { devices: [{ workers: 2 }], pacer: createPacer(\'stoker\') }');
    checkKeys(options, ENGINE_OPTIONS, '', 'the Engine options', 'E_INVALID_OPTION');
    if (!Array.isArray(options.devices) || options.devices.length === 0) {
      throw new StokerError('E_INVALID_OPTION', 'devices must list at least one device, e.g. [{ workers: 2 }]');
    }
    const pacer = options.pacer as Partial<Pacer> | undefined;
    if (typeof pacer !== 'object' || pacer === null || typeof pacer.observe !== 'function' || typeof pacer.nextDispatchAt !== 'function' || typeof pacer.onDispatch !== 'function') {
      throw new StokerError('E_INVALID_OPTION', `pacer must be a pacer object (got ${pacer === undefined ? 'none' : shown(pacer)}): give one, e.g. createPacer('stoker'), or a checkedPacer of your own`);
    }
    options.devices.forEach((d, i) => {
      if (typeof d !== 'object' || d === null) throw new StokerError('E_INVALID_OPTION', `devices[${i}] must be an object such as { workers: 2 } (got ${shown(d)})`);
      checkKeys(d, DEVICE_OPTIONS, `devices[${i}].`, 'a device', 'E_INVALID_OPTION');
      if (!Number.isInteger(d.workers) || d.workers < 1) {
        throw new StokerError('E_INVALID_OPTION', `devices[${i}].workers must be an integer ≥ 1 (got ${shown(d.workers)})`);
      }
      if (d.kinds !== undefined && (!Array.isArray(d.kinds) || d.kinds.some((k) => typeof k !== 'string'))) {
        throw new StokerError('E_INVALID_OPTION', `devices[${i}].kinds must be an array of kind names, or absent for every kind`);
      }
      if (d.batch !== undefined) checkBatch(d.batch, `devices[${i}].batch`, '{ maxItems: 16, maxWaitMs: 5 }');
      if (d.name !== undefined && typeof d.name !== 'string') throw new StokerError('E_INVALID_OPTION', `devices[${i}].name must be a string (what failure reasons call the device), or absent`);
    });
    const kinds = options.kinds ?? {};
    if (typeof kinds !== 'object' || kinds === null || Array.isArray(kinds)) throw new StokerError('E_INVALID_OPTION', 'kinds must be an object of kind name → { prepareBatch }, or absent');
    const prepSpecs = new Map<string, { maxItems: number; maxWaitMs: number }>();
    for (const [name, k] of Object.entries(kinds)) {
      if (typeof k !== 'object' || k === null) throw new StokerError('E_INVALID_OPTION', `kinds.${name} must be an object such as { prepareBatch: { maxItems: 4, maxWaitMs: 10000 } }`);
      checkKeys(k, ['prepareBatch'], `kinds.${name}.`, 'a kind', 'E_INVALID_OPTION');
      if (k.prepareBatch === undefined) continue;
      checkBatch(k.prepareBatch, `kinds.${name}.prepareBatch`, '{ maxItems: 4, maxWaitMs: 10000 }');
      prepSpecs.set(name, { maxItems: k.prepareBatch.maxItems, maxWaitMs: k.prepareBatch.maxWaitMs ?? 0 });
    }
    this.prepSpecs = prepSpecs;
    this.batching = options.devices.some((d) => d.batch !== undefined) ? options.devices.map((d) => (d.batch ? { maxItems: d.batch.maxItems, maxWaitMs: d.batch.maxWaitMs ?? 0 } : null)) : null;
    this.holding = options.devices.map(() => -1);
    this.deviceKinds = options.devices.some((d) => d.kinds !== undefined) ? options.devices.map((d) => (d.kinds === undefined ? null : new Set(d.kinds))) : null;
    const maxPreparing = options.maxPreparing ?? Infinity;
    if (typeof maxPreparing !== 'number' || !(maxPreparing >= 1)) {
      throw new StokerError('E_INVALID_OPTION', `maxPreparing must be a number ≥ 1 or Infinity (got ${shown(maxPreparing)})`);
    }
    this.maxPreparing = maxPreparing;
    const retries = options.retries ?? 0;
    if (!Number.isInteger(retries) || retries < 0) {
      throw new StokerError('E_INVALID_OPTION', `retries must be an integer ≥ 0 (got ${shown(retries)})`);
    }
    this.retries = retries;
    this.pacer = options.pacer;
    this.workerLimit = typeof pacer.workerLimit === 'function' ? (d) => pacer.workerLimit?.(d) ?? Infinity : null;
    this.budget = new MemoryBudget(options.budgetBytes ?? Infinity);
    this.deviceNames = options.devices.map((d, i) => (d.name === undefined ? String(i) : JSON.stringify(d.name)));
    this.workers = options.devices.map((d) => Array.from({ length: d.workers }, () => ({ alive: true, item: null, batch: null })));
    const devices: DeviceCounters[] = options.devices.map((d) => ({
      workers: d.workers,
      busy: 0,
      completions: 0,
      busyMs: 0,
      concurrencyTotal: 0,
      ...(d.batch ? { batch: { maxItems: d.batch.maxItems, batches: 0, items: 0 } } : {}),
    }));
    this.busyIntegral = options.devices.map(() => 0);
    this.busyAt = options.devices.map(() => 0);
    this.counters = {
      now: 0,
      waiting: 0,
      preparing: 0,
      preparingSteps: 0,
      onDevice: 0,
      backlog: 0,
      workers: devices.reduce((n, d) => n + d.workers, 0),
      dispatched: 0,
      deviceCompletions: 0,
      deviceBusyMs: 0,
      devices,
      kinds: [],
      nextKind: -1,
      prepareCompletions: 0,
      prepareLatencyMsTotal: 0,
      prepareLatencySqTotal: 0,
      preparingStartMsTotal: 0,
      preparingMsTotal: 0,
      prepareConcurrencyTotal: 0,
      budgetBlocked: false,
      budgetUsedBytes: 0,
      budgetTotalBytes: this.budget.totalBytes,
      maxPreparing,
    };
  }

  /** Jobs that have not ended. */
  get activeJobs(): number {
    return this.jobs.size;
  }

  /** The time of the last event applied. */
  get time(): number {
    return this.now;
  }

  /**
   * Each device's workers: alive or lost, and the partition each one runs (null when idle; in a
   * batch, its first item still running, and `batch` the items still running in it; one alone,
   * `since`: when it started there).
   */
  workerStates(): { alive: boolean; item: { jobId: string; partition: number } | null; batch?: number; since?: number }[][] {
    return this.workers.map((ws) =>
      ws.map((w) => {
        const item = w.item ?? w.batch?.items.find((it) => it.batch === w.batch) ?? null;
        const state: { alive: boolean; item: { jobId: string; partition: number } | null; batch?: number; since?: number } = { alive: w.alive, item: item ? { jobId: item.jobId, partition: item.partition } : null };
        if (w.batch) state.batch = w.batch.live;
        // (When the item started on the worker, in the engine's time: a step that hangs shows by its age.)
        else if (w.item) state.since = w.item.startedAt;
        return state;
      }),
    );
  }

  /** Partitions of live jobs by kind and state (queued, preparing, waiting, on-device). */
  partitionsByKind(): Record<string, LiveCounts> {
    const out: Record<string, LiveCounts> = {};
    for (const job of this.jobs.values()) {
      const c = (out[job.spec.kind] ??= { queued: 0, preparing: 0, waiting: 0, 'on-device': 0 });
      countLive(job, c);
    }
    return out;
  }

  /**
   * A live job's status, or undefined once it has ended (the core forgets ended jobs). O(its
   * partitions): {@link jobCounts} is O(its partitions in flight).
   */
  job(id: string): JobStatus | undefined {
    const j = this.jobs.get(id);
    if (!j) return undefined;
    return { id: j.spec.id, kind: j.spec.kind, priority: j.spec.priority, seq: j.seq, submittedAt: j.submittedAt, partitions: this.jobStates(id, 0, j.spec.partitions) ?? [] };
  }

  /** A live job's partition states from `from` up to (not including) `to`: O(to − from). */
  jobStates(id: string, from: number, to: number): PartitionState[] | undefined {
    const j = this.jobs.get(id);
    if (!j) return undefined;
    const lo = Math.max(0, from);
    return Array.from({ length: Math.max(0, Math.min(to, j.spec.partitions) - lo) }, (_, i): PartitionState => {
      const p = lo + i;
      return p >= j.next ? 'queued' : (this.items.get(j.firstId + p)?.state ?? 'done');
    });
  }

  /** A live job's partitions by stage (done: finished in this engine), or undefined once it has ended. */
  jobCounts(id: string): (LiveCounts & { done: number }) | undefined {
    const j = this.jobs.get(id);
    if (!j) return undefined;
    const c = countLive(j, { queued: 0, preparing: 0, waiting: 0, 'on-device': 0 });
    return { ...c, done: j.spec.partitions - c.queued - c.preparing - c.waiting - c['on-device'] };
  }

  /**
   * Applies one event and returns the commands it causes. Throws StokerError on invalid input
   * (and then changes nothing). The engine reads the event during the call and keeps no reference.
   */
  apply(event: EngineEvent): Command[] {
    if (typeof event?.time !== 'number' || !Number.isFinite(event.time)) {
      throw new StokerError('E_INVALID_EVENT', `event.time must be a finite number of ms (got ${event === null || typeof event !== 'object' ? `an event of ${String(event)}` : shown(event.time)})`);
    }
    if (!(event.time >= this.now)) {
      throw new StokerError('E_TIME_BACKWARDS', `event time ${String(event.time)} is before the engine's time ${this.now}: feed events in time order`);
    }
    // Invalid input is rejected before anything changes, the clock included.
    const job = this.validate(event);
    const out: Command[] = [];
    if (this.counters.preparing > 0) this.counters.preparingMsTotal += this.counters.preparing * (event.time - this.now);
    this.now = event.time;
    this.counters.now = event.time;
    // A deadline that passed before this event ends its job first: a completion after it is too late.
    this.expireDeadlines(out);
    if (job) this.submit(job, out);
    else this.handle(event, out);
    this.expireDeadlines(out); // a job submitted with a deadline already past
    this.assignDevices(out);
    this.pacer.observe(this.counters);
    // (A pacer's limit on the workers to run at once may rise as it observes: a worker it frees
    // starts now, not at the next event.)
    if (this.workerLimit) this.assignDevices(out);
    const pacerWake = this.dispatch(out);
    // (Only while jobs are live: a pacer that always asks must not keep an idle engine ticking.)
    const look = this.jobs.size > 0 ? (this.pacer.observeAgainAt?.(this.counters) ?? Infinity) : Infinity;
    const next = Math.min(pacerWake, look > this.now ? look : Infinity, this.deadlines.peek()?.spec.deadline ?? Infinity, this.batchWake);
    if (next !== this.wake) {
      this.wake = next;
      out.push({ type: 'wakeAt', time: next });
    }
    return out;
  }

  /**
   * Checks an event against the current state; throws without changing anything. Returns the
   * normalized job of a submit that creates a job (undefined for an identical resubmit, a no-op).
   */
  private validate(event: EngineEvent): NormalJob | undefined {
    switch (event.type) {
      case 'submit': {
        const norm = normalizeJob(event.job);
        if (this.draining) throw new StokerError('E_INVALID_EVENT', `job ${JSON.stringify(norm.id)} came after a drain event: a draining engine starts nothing new, so it would wait for good; submit it to a new engine`);
        if (this.deviceKinds && !this.deviceKinds.some((k) => k === null || k.has(norm.kind))) {
          throw new StokerError('E_INVALID_JOB', `job.kind ${JSON.stringify(norm.kind)} runs on no device: give a device kinds that include it`);
        }
        const existing = this.jobs.get(norm.id);
        // A job whose deadline has passed by this event ends before it, so its id is free again.
        if (existing && !(existing.spec.deadline <= event.time)) {
          if (sameJob(existing.spec, norm)) return undefined;
          throw new StokerError('E_DUPLICATE_JOB', `job ${JSON.stringify(norm.id)} already exists with a different spec; use a new id, or resubmit the identical spec (a no-op)`);
        }
        return norm;
      }
      case 'workerLost':
      case 'workerReturned':
        this.worker(event.device, event.worker);
        return undefined;
      case 'memoryHeld':
        if (!(event.bytes >= 0) || !Number.isFinite(event.bytes)) throw new StokerError('E_INVALID_EVENT', `memoryHeld.bytes must be a finite number ≥ 0 (got ${shown(event.bytes)})`);
        return undefined;
      case 'batchDone':
        checkMeasure(event.busyMs, 'batchDone.busyMs');
        checkFailed(event.failed, 'batchDone', this.batches.get(event.batch)?.items, event.batch);
        this.checkBatchId(event.batch, 'batchDone', this.batchSeq);
        return undefined;
      case 'prepareBatchDone':
        checkMeasure(event.latencyMs, 'prepareBatchDone.latencyMs');
        checkFailed(event.failed, 'prepareBatchDone', this.prepBatches.get(event.batch)?.items, event.batch);
        this.checkBatchId(event.batch, 'prepareBatchDone', this.prepBatchSeq);
        return undefined;
      case 'prepared':
        this.checkItemEvent(event, 'prepare');
        checkMeasure(event.latencyMs, 'prepared.latencyMs');
        return undefined;
      case 'deviceDone':
        this.checkItemEvent(event, 'device');
        checkMeasure(event.busyMs, 'deviceDone.busyMs');
        return undefined;
      case 'prepareFailed':
      case 'deviceFailed':
        this.checkItemEvent(event, event.type === 'prepareFailed' ? 'prepare' : 'device');
        checkReason(event.reason, event.type);
        checkFinal(event.final, event.type);
        if (event.type === 'deviceFailed') checkWorkerLost(event.workerLost, event.type);
        return undefined;
      case 'prepareBatchFailed':
      case 'batchFailed':
        this.checkBatchId(event.batch, event.type, event.type === 'batchFailed' ? this.batchSeq : this.prepBatchSeq);
        checkReason(event.reason, event.type);
        checkFinal(event.final, event.type);
        if (event.type === 'batchFailed') checkWorkerLost(event.workerLost, event.type);
        return undefined;
      case 'cancel':
        if (typeof event.jobId !== 'string') throw new StokerError('E_INVALID_EVENT', `cancel.jobId must be the job's id, a string (got ${shown(event.jobId)})`);
        if (event.reason !== undefined && typeof event.reason !== 'string') throw new StokerError('E_INVALID_EVENT', `cancel.reason must be a string, or absent (got ${typeof event.reason})`);
        return undefined;
      case 'drain':
      case 'tick':
        return undefined;
      default:
        throw new StokerError('E_INVALID_EVENT', `unknown event type ${JSON.stringify((event as { type: unknown }).type)}: use one of submit, cancel, prepared, prepareFailed, prepareBatchDone, prepareBatchFailed, deviceDone, deviceFailed, batchDone, batchFailed, workerLost, workerReturned, memoryHeld, drain, tick`);
    }
  }

  /**
   * An item event's `item` and `attempt` (of its startPrepare, startDevice command). An item the
   * engine no longer holds, or at another attempt, is a stale event (cancelled, retried, lost) and
   * changes nothing; an id the engine never gave, an attempt it has not started, or a device's
   * answer at the attempt of the preparation under way is a driver's mistake, which would too, silently.
   */
  private checkItemEvent(event: { type: string; item: unknown; attempt: unknown }, stage: 'prepare' | 'device'): void {
    const { type, item: id, attempt } = event;
    checkItemId(id, type);
    if (!Number.isInteger(attempt) || (attempt as number) < 1) throw new StokerError('E_INVALID_EVENT', `${type}.attempt must be the attempt of its command (command.attempt, an integer ≥ 1; got ${shown(attempt)})`);
    if ((id as number) < 0 || (id as number) >= this.itemSeq) throw new StokerError('E_INVALID_EVENT', `${type}.item ${shown(id)} is no item this engine gave: answer with the item id of a start command (command.item.id)`);
    const item = this.items.get(id as number);
    if (!item) return;
    if ((attempt as number) > item.attempt) throw new StokerError('E_INVALID_EVENT', `${type} for item ${shown(id)} at attempt ${shown(attempt)}, which has not started (its latest is ${item.attempt}): answer with the attempt of its command`);
    if (attempt !== item.attempt) return;
    // (A queued item's latest attempt may have been either stage's.)
    const other = stage === 'device' ? item.state === 'preparing' || item.state === 'waiting' : item.state === 'on-device';
    if (other) throw new StokerError('E_INVALID_EVENT', `${type} for item ${shown(id)} at attempt ${shown(attempt)}, which was its ${stage === 'device' ? 'preparation' : 'device step'}: answer a startPrepare with prepared or prepareFailed, a startDevice with deviceDone or deviceFailed`);
  }

  /** A batch event's `batch`: a batch id the engine gave (one it no longer holds is a stale event). */
  private checkBatchId(batch: unknown, type: string, issued: number): void {
    if (!Number.isInteger(batch) || (batch as number) < 0 || (batch as number) >= issued) throw new StokerError('E_INVALID_EVENT', `${type}.batch ${shown(batch)} is no batch this engine gave: answer with the batch id of its command (command.batch)`);
  }

  private handle(event: EngineEvent, out: Command[]): void {
    switch (event.type) {
      case 'submit':
        break; // an identical resubmit of a live job: nothing to do
      case 'cancel': {
        const job = this.jobs.get(event.jobId);
        if (job) this.endJob(job, 'cancelled', 'E_CANCELLED', event.reason ?? 'cancelled on request', out);
        break;
      }
      case 'prepared':
        this.prepared(event.item, event.attempt, event.latencyMs);
        break;
      case 'prepareFailed': {
        const item = this.current(event.item, event.attempt, 'preparing');
        if (item && !item.prepBatch) this.failItem(item, 'E_PREPARE_FAILED', `partition ${partitionOf(item)} failed in preparation: ${event.reason}`, out, event.final === true);
        break;
      }
      case 'prepareBatchDone':
        this.prepareBatchDone(event.batch, event.latencyMs, event.failed, out);
        break;
      case 'prepareBatchFailed':
        this.prepareBatchFailed(event.batch, event.reason, event.final === true, out);
        break;
      case 'deviceDone':
        this.deviceDone(event.item, event.attempt, event.busyMs, out);
        break;
      case 'deviceFailed': {
        const item = this.current(event.item, event.attempt, 'on-device');
        if (item && !item.batch) {
          const { device, worker } = item;
          this.failItem(item, 'E_DEVICE_FAILED', `partition ${partitionOf(item)} failed on device ${this.deviceNames[item.device] as string}: ${event.reason}`, out, event.final === true);
          // (Before the dispatch at the end of this step: handed the next item, then lost, the worker's item was prepared again.)
          if (event.workerLost === true) this.workerLost(device, worker, out);
        }
        break;
      }
      case 'batchDone':
        this.batchDone(event.batch, event.busyMs, event.failed, out);
        break;
      case 'batchFailed': {
        const b = this.batches.get(event.batch);
        this.batchFailed(event.batch, event.reason, event.final === true, out);
        // (As deviceFailed's: before the dispatch at the end of this step.)
        if (b && event.workerLost === true) this.workerLost(b.device, b.worker, out);
        break;
      }
      case 'workerLost':
        this.workerLost(event.device, event.worker, out);
        break;
      case 'workerReturned': {
        const w = this.worker(event.device, event.worker);
        if (!w.alive) {
          w.alive = true;
          (this.counters.devices[event.device] as DeviceCounters).workers++;
          this.counters.workers++;
        }
        break;
      }
      case 'drain':
        this.draining = true;
        break;
      case 'memoryHeld':
        this.budget.setHeld(event.bytes);
        break;
      case 'tick':
        // The driver's timer fired (perhaps a little early): it has none pending now, so the
        // next wakeAt is sent even when its time is unchanged.
        this.wake = Infinity;
        break;
    }
  }

  private submit(norm: NormalJob, out: Command[]): void {
    const reservation = Math.max(norm.memory.prepareBytes, norm.memory.deviceBytes);
    const kindIndex = this.kindIndex(norm.kind);
    const job: Job = { spec: norm, seq: this.seq++, rank: RANK[norm.priority], submittedAt: this.now, reservation, next: 0, liveHead: null, liveTail: null, firstId: this.itemSeq, remaining: norm.partitions, kindIndex, kc: this.counters.kinds[kindIndex] as EngineKind, heapIndex: -1 };
    this.itemSeq += norm.partitions;
    this.jobs.set(norm.id, job);
    this.countKind(norm.kind, 1);
    this.counters.backlog += norm.partitions;
    job.kc.queued += norm.partitions;
    if (!this.budget.fits(reservation)) {
      this.endJob(job, 'failed', 'E_OVERSIZE', `each partition needs ${reservation} bytes but the whole memory budget is ${this.budget.totalBytes} bytes: raise budgetBytes or split the job into smaller partitions`, out);
      return;
    }
    this.backlog.push(this.makeNext(job));
    if (Number.isFinite(norm.deadline)) this.deadlines.push(job);
  }

  /** Makes the job's next partition, for the caller to queue (it was counted in the backlog at submit). */
  private makeNext(job: Job): Item {
    const partition = job.next++;
    const item: Item = {
      id: job.firstId + partition,
      job,
      jobId: job.spec.id,
      kind: job.spec.kind,
      partition,
      priority: job.spec.priority,
      rank: job.rank,
      seq: job.seq,
      state: 'queued',
      attempt: 0,
      failures: 0,
      reservedBytes: 0,
      startedAt: 0,
      busyAtStart: 0,
      preparingAtStart: 0,
      device: -1,
      worker: -1,
      batch: null,
      waitingSince: 0,
      solo: false,
      prepBatch: null,
      prepSolo: false,
      heldSince: Infinity,
      prevLive: job.liveTail,
      nextLive: null,
      heapIndex: -1,
      toJSON: itemJson,
    };
    if (job.liveTail) job.liveTail.nextLive = item;
    else job.liveHead = item;
    job.liveTail = item;
    this.items.set(item.id, item);
    return item;
  }

  /** The live item for an event, or undefined when the event is stale (cancelled, retried, lost). */
  private current(id: number, attempt: number, state: PartitionState): Item | undefined {
    const item = this.items.get(id);
    return item && item.state === state && item.attempt === attempt ? item : undefined;
  }

  private prepared(id: number, attempt: number, latencyMs: number | undefined): void {
    const item = this.current(id, attempt, 'preparing');
    if (!item || item.prepBatch) return;
    this.leavePreparing(item);
    this.toWaiting(item, latencyMs ?? this.now - item.startedAt);
  }

  /** An item leaves preparation (prepared, failed or withdrawn; its caller moves it on): its step, or its batch's. */
  private leavePreparing(item: Item): void {
    const s = this.counters;
    s.preparingStartMsTotal -= item.startedAt;
    const b = item.prepBatch;
    if (!b) s.preparingSteps--;
    else {
      item.prepBatch = null;
      // Every item withdrawn before the batch answered: the step is withdrawn.
      if (--b.live === 0 && !b.answered) {
        this.prepBatches.delete(b.id);
        s.preparingSteps--;
      }
    }
  }

  /** A prepared item joins the waiting queue; its preparation latency counts. */
  private toWaiting(item: Item, latency: number): void {
    const s = this.counters;
    s.prepareCompletions++;
    s.prepareLatencyMsTotal += latency;
    s.prepareLatencySqTotal += latency * latency;
    const kc = item.job.kc;
    kc.prepareCompletions++;
    kc.prepareLatencyMsTotal += latency;
    kc.prepareLatencySqTotal += latency * latency;
    // The mean number preparing while it ran (itself included: it leaves preparing below; those
    // preparing now where it took no time).
    const ran = this.now - item.startedAt;
    s.prepareConcurrencyTotal += ran > 0 ? (s.preparingMsTotal - item.preparingAtStart) / ran : s.preparing;
    this.move(item, 'waiting');
    item.waitingSince = this.now;
    this.waitingQ.push(item);
  }

  /**
   * Moves a partition to another state: the one place states change for made partitions, and the
   * counters with them (the backlog, preparing, waiting and on device, in all and per kind). A move
   * {@link legalMove} refuses is an engine bug, and throws.
   */
  private move(item: Item, to: PartitionState): void {
    const from = item.state;
    if (!legalMove(from, to)) throw new Error(`stoker engine bug: partition ${item.partition} of job ${item.jobId} cannot go from ${from} to ${to}`);
    this.count(item, from, -1);
    this.count(item, to, 1);
    item.state = to;
  }

  private count(item: Item, state: PartitionState, d: number): void {
    const s = this.counters;
    const kc = item.job.kc;
    switch (state) {
      case 'queued':
        s.backlog += d;
        kc.queued += d;
        break;
      case 'preparing':
        s.preparing += d;
        kc.preparing += d;
        break;
      case 'waiting':
        s.waiting += d;
        kc.waiting += d;
        break;
      case 'on-device':
        s.onDevice += d;
        kc.onDevice += d;
        break;
      default:
        break;
    }
  }

  /** A preparation batch answered: its step is over (events naming it again are stale). */
  private answerPrep(id: number): { b: PrepBatch; live: Item[] } | undefined {
    const b = this.prepBatches.get(id);
    if (!b) return undefined;
    b.answered = true;
    this.prepBatches.delete(id);
    this.counters.preparingSteps--;
    return { b, live: b.items.filter((it) => it.prepBatch === b) };
  }

  /** A preparation batch finished: its items prepared (all with its latency) except those named failed. */
  private prepareBatchDone(id: number, latencyMs: number | undefined, failed: readonly ItemFailure[] | undefined, out: Command[]): void {
    const a = this.answerPrep(id);
    if (!a) return;
    const { b, live } = a;
    const stats = (b.items[0] as Item).job.kc.prepareBatch as NonNullable<KindCounters['prepareBatch']>;
    stats.batches++;
    stats.items += b.items.length;
    const reasons = new Map((failed ?? []).map((f) => [f.item, f]));
    const latency = latencyMs ?? this.now - b.startedAt;
    // Prepared items first: a failure that ends a job must not withdraw its items that were prepared.
    for (const item of live) {
      if (reasons.has(item.id)) continue;
      this.leavePreparing(item);
      this.toWaiting(item, latency);
    }
    for (const item of live) {
      const f = reasons.get(item.id);
      if (f === undefined || item.prepBatch !== b) continue;
      this.failItem(item, 'E_PREPARE_FAILED', `partition ${partitionOf(item)} failed in preparation: ${f.reason}`, out, f.final === true);
    }
  }

  /**
   * A preparation batch failed without naming its items: one item alone fails as itself (at once
   * where `final`); with several, each is prepared again alone (its failure then is its own), no retry spent.
   */
  private prepareBatchFailed(id: number, reason: string, final: boolean, out: Command[]): void {
    const a = this.answerPrep(id);
    if (!a) return;
    for (const item of a.live) {
      if (item.prepBatch !== a.b) continue; // its job ended with an earlier item's failure
      if (a.b.items.length === 1) this.failItem(item, 'E_PREPARE_FAILED', `partition ${partitionOf(item)} failed in preparation: ${reason}`, out, final);
      else {
        item.prepSolo = true;
        this.leavePreparing(item);
        this.requeue(item);
      }
    }
  }

  private deviceDone(id: number, attempt: number, busyMs: number | undefined, out: Command[]): void {
    const item = this.current(id, attempt, 'on-device');
    if (!item || item.batch) return;
    this.countStep(item.device, item.job.kc, 1, busyMs ?? this.now - item.startedAt, item.startedAt, item.busyAtStart);
    this.leaveDevice(item);
    this.itemDone(item, out);
  }

  /**
   * Counts a device step that finished `done` items of kind `kc` in `ms` of device time: the
   * device's, the kind's and the totals, and how many workers were busy, on average, while it ran
   * (itself included) from `startedAt`, when the device's ∫ busy dt was `busyAtStart`.
   */
  private countStep(device: number, kc: KindCounters, done: number, ms: number, startedAt: number, busyAtStart: number): void {
    const s = this.counters;
    const dev = s.devices[device] as DeviceCounters;
    const run = this.now - startedAt;
    const concurrency = run > 0 ? (this.integrateBusy(device) - busyAtStart) / run : dev.busy;
    dev.completions += done;
    dev.busyMs += ms;
    dev.concurrencyTotal = (dev.concurrencyTotal ?? 0) + done * concurrency;
    (kc.completions[device] as number) += done;
    (kc.busyMs[device] as number) += ms;
    s.deviceCompletions += done;
    s.deviceBusyMs += ms;
  }

  /** An item off its device is done: its memory freed, its job told. */
  private itemDone(item: Item, out: Command[]): void {
    this.releaseAll(item);
    this.move(item, 'done');
    this.items.delete(item.id);
    const job = item.job;
    if (item.prevLive) item.prevLive.nextLive = item.nextLive;
    else job.liveHead = item.nextLive;
    if (item.nextLive) item.nextLive.prevLive = item.prevLive;
    else job.liveTail = item.prevLive;
    if (--job.remaining === 0) this.endJob(job, 'done', undefined, undefined, out);
  }

  /**
   * A batch finished: its busy time counts once for the device (and its kind), its items done
   * except those named failed (each failed as a device failure of its own). Items withdrawn
   * while it ran are already gone; a stale batch id is ignored.
   */
  private batchDone(id: number, busyMs: number | undefined, failed: readonly ItemFailure[] | undefined, out: Command[]): void {
    const b = this.batches.get(id);
    if (!b) return;
    b.answered = true;
    const stats = (this.counters.devices[b.device] as DeviceCounters).batch as NonNullable<DeviceCounters['batch']>;
    const reasons = new Map((failed ?? []).map((f) => [f.item, f]));
    const live = b.items.filter((it) => it.batch === b);
    const done = live.filter((it) => !reasons.has(it.id));
    stats.batches++;
    stats.items += b.items.length;
    const kc = (b.items[0] as Item).job.kc;
    const byKind = kc.deviceBatches as NonNullable<KindCounters['deviceBatches']>;
    byKind.batches[b.device] = (byKind.batches[b.device] as number) + 1;
    byKind.items[b.device] = (byKind.items[b.device] as number) + b.items.length;
    this.countStep(b.device, kc, done.length, busyMs ?? this.now - b.startedAt, b.startedAt, b.busyAtStart);
    // Done items first: a failure that ends a job must not withdraw its items that finished.
    for (const item of done) {
      this.leaveDevice(item);
      this.itemDone(item, out);
    }
    for (const item of live) {
      const f = reasons.get(item.id);
      if (f === undefined || item.batch !== b) continue;
      this.failItem(item, 'E_DEVICE_FAILED', `partition ${partitionOf(item)} failed on device ${this.deviceNames[b.device] as string}: ${f.reason}`, out, f.final === true);
    }
  }

  /**
   * A batch failed without naming its items: one item alone fails as itself; with several, each
   * is prepared again and runs alone (its failure then is its own), no retry spent.
   */
  private batchFailed(id: number, reason: string, final: boolean, out: Command[]): void {
    const b = this.batches.get(id);
    if (!b) return;
    b.answered = true;
    const live = b.items.filter((it) => it.batch === b);
    for (const item of live) {
      if (item.batch !== b) continue; // its job ended with an earlier item's failure
      if (b.items.length === 1) this.failItem(item, 'E_DEVICE_FAILED', `partition ${partitionOf(item)} failed on device ${this.deviceNames[b.device] as string}: ${reason}`, out, final);
      else {
        item.solo = true;
        this.leaveDevice(item);
        this.requeue(item);
      }
    }
  }

  private workerLost(device: number, worker: number, out: Command[]): void {
    const w = this.worker(device, worker);
    if (!w.alive) return;
    w.alive = false;
    (this.counters.devices[device] as DeviceCounters).workers--;
    this.counters.workers--;
    // The device had taken the prepared data (its bytes were released), so its items are prepared
    // again: back to the queue under their old keys, ahead of later work, with fresh reservations.
    const items = w.item ? [w.item] : w.batch ? w.batch.items.filter((it) => it.batch === w.batch) : [];
    for (const item of items) {
      this.abortOnDevice(item, `device ${this.deviceNames[device] as string} worker ${worker} lost`, out);
      this.requeue(item);
    }
  }

  /** Withdraws an item from its device with an abort command (that says what is left of its batch). */
  private abortOnDevice(item: Item, reason: string, out: Command[]): void {
    const cmd: Extract<Command, { type: 'abort' }> = { type: 'abort', item, stage: 'on-device', reason };
    const b = item.batch;
    out.push(cmd);
    this.leaveDevice(item);
    if (b && !b.answered) cmd.batch = { id: b.id, remaining: b.live };
  }

  /** Back to the queue under its old key (ahead of later work), its memory freed, to be prepared again. */
  private requeue(item: Item): void {
    this.releaseAll(item);
    this.move(item, 'queued');
    this.backlog.push(item);
  }

  private worker(device: number, worker: number): Worker {
    const ws = Number.isInteger(device) ? this.workers[device] : undefined;
    if (!ws) throw new StokerError('E_INVALID_EVENT', `no device ${shown(device)}: devices are numbered 0 to ${this.workers.length - 1}`);
    const w = Number.isInteger(worker) ? ws[worker] : undefined;
    if (!w) throw new StokerError('E_INVALID_EVENT', `no worker ${shown(worker)} on device ${device}: it has workers 0 to ${ws.length - 1}`);
    return w;
  }

  /** Takes an item off its device (its caller moves it on); its worker is free once it holds nothing (a batch: its last item). */
  private leaveDevice(item: Item): void {
    const w = (this.workers[item.device] as Worker[])[item.worker] as Worker;
    const b = item.batch;
    if (b) {
      item.batch = null;
      if (--b.live === 0) {
        w.batch = null;
        this.batches.delete(b.id);
      }
    } else w.item = null;
    if (!w.item && !w.batch) {
      this.integrateBusy(item.device);
      (this.counters.devices[item.device] as DeviceCounters).busy--;
    }
    item.device = -1;
    item.worker = -1;
  }

  private releaseAll(item: Item): void {
    if (item.reservedBytes > 0) {
      this.budget.release(item.reservedBytes);
      this.counters.budgetUsedBytes = this.budget.used;
      item.reservedBytes = 0;
    }
  }

  /** A partition failed: retried (prepared again) while it has retries left, else (or `final`: it would fail again) its job fails. */
  private failItem(item: Item, code: string, reason: string, out: Command[], final = false): void {
    if (!final && item.failures < this.retries) {
      item.failures++;
      if (item.state === 'preparing') this.leavePreparing(item);
      else this.leaveDevice(item);
      this.requeue(item);
      return;
    }
    const tries = item.failures > 0 ? ` (after ${item.failures + 1} attempts)` : '';
    this.endJob(item.job, 'failed', code, `job ${item.jobId}: ${reason}${tries}`, out);
  }

  /** Ends a job exactly once: withdraws its unfinished partitions wherever they are and frees their memory. */
  private endJob(job: Job, state: JobEnd, code: string | undefined, reason: string | undefined, out: Command[]): void {
    const s = this.counters;
    const itemEnd: PartitionState = state === 'cancelled' ? 'cancelled' : 'failed';
    if (state !== 'done') {
      s.backlog -= job.spec.partitions - job.next; // never made
      job.kc.queued -= job.spec.partitions - job.next;
      for (let item = job.liveHead; item; item = item.nextLive) {
        switch (item.state) {
          case 'queued':
            this.backlog.remove(item);
            break;
          case 'preparing': {
            const cmd: Extract<Command, { type: 'abort' }> = { type: 'abort', item, stage: 'preparing', reason: reason ?? state };
            const b = item.prepBatch;
            out.push(cmd);
            this.leavePreparing(item);
            if (b && !b.answered) cmd.batch = { id: b.id, remaining: b.live };
            break;
          }
          case 'waiting':
            out.push({ type: 'abort', item, stage: 'waiting', reason: reason ?? state });
            this.waitingQ.remove(item);
            break;
          case 'on-device':
            this.abortOnDevice(item, reason ?? state, out);
            break;
          default:
            continue;
        }
        this.releaseAll(item);
        this.move(item, itemEnd);
        this.items.delete(item.id);
      }
    }
    this.jobs.delete(job.spec.id);
    this.countKind(job.spec.kind, -1);
    this.deadlines.remove(job);
    const cmd: Command = { type: 'finishJob', jobId: job.spec.id, state, timeMs: this.now - job.submittedAt };
    if (code !== undefined) cmd.code = code;
    if (reason !== undefined) cmd.reason = reason;
    out.push(cmd);
  }

  private expireDeadlines(out: Command[]): void {
    for (let j = this.deadlines.peek(); j && j.spec.deadline <= this.now; j = this.deadlines.peek()) {
      this.endJob(j, 'failed', 'E_DEADLINE', `job ${j.spec.id} missed its deadline (at ${Math.round(j.spec.deadline as number)} ms on the driver's clock)`, out);
    }
  }

  /**
   * Devices take waiting items in key order, onto the least-loaded device with an idle worker
   * (that runs the item's kind, when devices name their kinds: then an item no idle device runs
   * is passed over, keeping its place, for the next one that fits).
   */
  private assignDevices(out: Command[]): void {
    this.batchWake = Infinity;
    if (this.waitingQ.size === 0) return;
    if (!this.deviceKinds && !this.batching) {
      for (let best = this.idleDeviceFor(null); best >= 0 && this.waitingQ.size > 0; best = this.idleDeviceFor(null)) this.startOnDevice(this.waitingQ.pop() as Item, best, out);
      return;
    }
    this.holding.fill(-1);
    const skipped: Item[] = [];
    while (this.waitingQ.size > 0 && this.idleDeviceFor(null) >= 0) {
      const item = this.waitingQ.pop() as Item;
      const best = this.idleDeviceFor(item.kind, item.job.kindIndex);
      const batch = best >= 0 ? this.batching?.[best] : null;
      if (best < 0) skipped.push(item);
      else if (batch) this.startBatch(item, best, batch, out);
      else this.startOnDevice(item, best, out);
    }
    for (const item of skipped) this.waitingQ.push(item);
  }

  /**
   * A batch for a free worker of `device`, led by `first`: the waiting items of its kind in key
   * order, up to maxItems. With fewer, while more of the kind are in preparation and the oldest
   * has waited less than maxWaitMs, the worker holds out (for this pass; the engine wakes at the
   * flush time). An item whose batch failed unexplained runs alone.
   */
  private startBatch(first: Item, device: number, spec: { maxItems: number; maxWaitMs: number }, out: Command[]): void {
    const items = [first];
    if (!first.solo && spec.maxItems > 1) {
      const passed: Item[] = [];
      while (items.length < spec.maxItems && this.waitingQ.size > 0) {
        const next = this.waitingQ.pop() as Item;
        if (next.job.kindIndex === first.job.kindIndex && !next.solo) items.push(next);
        else passed.push(next);
      }
      for (const item of passed) this.waitingQ.push(item);
      if (items.length < spec.maxItems && spec.maxWaitMs > 0 && first.job.kc.preparing > 0) {
        let oldest = Infinity;
        for (const item of items) oldest = Math.min(oldest, item.waitingSince);
        const flushAt = oldest + spec.maxWaitMs;
        if (flushAt > this.now) {
          for (const item of items) this.waitingQ.push(item);
          this.holding[device] = first.job.kindIndex;
          this.batchWake = Math.min(this.batchWake, flushAt);
          return;
        }
      }
    }
    const s = this.counters;
    const wi = this.freeWorker(device);
    const b: Batch = { id: this.batchSeq++, items, live: items.length, device, worker: wi, startedAt: this.now, busyAtStart: this.integrateBusy(device), answered: false };
    ((this.workers[device] as Worker[])[wi] as Worker).batch = b;
    this.batches.set(b.id, b);
    for (const item of items) {
      item.solo = false;
      item.batch = b;
      item.busyAtStart = b.busyAtStart;
      this.onDevice(item, device, wi);
    }
    (s.devices[device] as DeviceCounters).busy++;
    out.push({ type: 'startBatch', batch: b.id, items, device, worker: wi });
  }

  /** The index of `kind` in the snapshot's kinds, its counters made at its first job. */
  private kindIndex(kind: string): number {
    let i = this.kindIndexes.get(kind);
    if (i === undefined) {
      i = this.counters.kinds.length;
      this.kindIndexes.set(kind, i);
      const n = this.counters.devices.length;
      const devices: number[] = [];
      for (let d = 0; d < n; d++) if (!this.deviceKinds || (this.deviceKinds[d] ?? null) === null || (this.deviceKinds[d] as ReadonlySet<string>).has(kind)) devices.push(d);
      const prep = this.prepSpecs.get(kind) ?? null;
      this.prepByKind.push(prep);
      this.counters.kinds.push({
        name: kind,
        devices,
        queued: 0,
        preparing: 0,
        waiting: 0,
        onDevice: 0,
        prepareCompletions: 0,
        prepareLatencyMsTotal: 0,
        prepareLatencySqTotal: 0,
        completions: new Array<number>(n).fill(0),
        busyMs: new Array<number>(n).fill(0),
        ...(this.batching ? { deviceBatches: { batches: new Array<number>(n).fill(0), items: new Array<number>(n).fill(0) } } : {}),
        ...(prep ? { prepareBatch: { maxItems: prep.maxItems, batches: 0, items: 0 } } : {}),
      });
    }
    return i;
  }

  /** Counts a job of `kind` in or out, and marks which devices have work they can run (DeviceCounters.eligible). */
  private countKind(kind: string, delta: number): void {
    const dk = this.deviceKinds;
    if (!dk) return;
    const n = (this.liveByKind.get(kind) ?? 0) + delta;
    if (n > 0) this.liveByKind.set(kind, n);
    else this.liveByKind.delete(kind);
    dk.forEach((kinds, d) => {
      (this.counters.devices[d] as DeviceCounters).eligible = kinds === null ? this.liveByKind.size > 0 : [...kinds].some((k) => this.liveByKind.has(k));
    });
  }

  /**
   * The least-loaded device with an idle worker that runs `kind` (null: any kind), or −1; not one
   * that holds its worker for a fuller batch of that kind (`kindIndex`): another kind may use it.
   */
  private idleDeviceFor(kind: string | null, kindIndex = -1): number {
    const s = this.counters;
    let best = -1;
    let bestLoad = Infinity;
    for (let d = 0; d < this.workers.length; d++) {
      const c = s.devices[d] as DeviceCounters;
      // The cheap tests first: under load every worker is busy on most events, and then neither
      // the pacer's limit (never above the live workers) nor the device's kinds need asking.
      if (c.busy >= c.workers) continue;
      const load = c.busy / c.workers;
      if (!(load < bestLoad)) continue;
      const held = this.holding[d] as number;
      if (held >= 0 && kind !== null && held === kindIndex) continue;
      const kinds = this.deviceKinds?.[d] ?? null;
      if (kind !== null && kinds !== null && !kinds.has(kind)) continue;
      const limit = this.workerLimit ? this.workerLimit(d) : Infinity;
      // At least one worker, whatever the pacer says (NaN: no limit).
      const usable = limit >= 1 ? Math.min(c.workers, Math.floor(limit)) : Number.isNaN(limit) ? c.workers : 1;
      if (c.busy < usable) {
        best = d;
        bestLoad = load;
      }
    }
    return best;
  }

  /** Brings the device's ∫ busy dt up to now; returns it. */
  private integrateBusy(device: number): number {
    const busy = (this.counters.devices[device] as DeviceCounters).busy;
    const v = (this.busyIntegral[device] as number) + busy * (this.now - (this.busyAt[device] as number));
    this.busyIntegral[device] = v;
    this.busyAt[device] = this.now;
    return v;
  }

  /** A live worker of the device that runs nothing (the caller knows there is one). */
  private freeWorker(device: number): number {
    const ws = this.workers[device] as Worker[];
    let wi = 0;
    while (!(ws[wi] as Worker).alive || (ws[wi] as Worker).item !== null || (ws[wi] as Worker).batch !== null) wi++;
    return wi;
  }

  private startOnDevice(item: Item, device: number, out: Command[]): void {
    const s = this.counters;
    item.busyAtStart = this.integrateBusy(device);
    const wi = this.freeWorker(device);
    ((this.workers[device] as Worker[])[wi] as Worker).item = item;
    this.onDevice(item, device, wi);
    (s.devices[device] as DeviceCounters).busy++;
    out.push({ type: 'startDevice', item, attempt: item.attempt, device, worker: wi });
  }

  /** An item (off the waiting queue) starts on a device worker: a new attempt, only its device-phase bytes kept. */
  private onDevice(item: Item, device: number, worker: number): void {
    const s = this.counters;
    this.move(item, 'on-device');
    item.device = device;
    item.worker = worker;
    item.attempt++;
    item.startedAt = this.now;
    // Phase one of the reservation ends: the device has the data; keep only the device-phase bytes.
    const keep = item.job.spec.memory.deviceBytes;
    if (item.reservedBytes > keep) {
      this.budget.release(item.reservedBytes - keep);
      s.budgetUsedBytes = this.budget.used;
      item.reservedBytes = keep;
    }
  }

  /**
   * Pacer gate → head of the queue → budget grant → startPrepare (or, for a kind prepared in
   * batches, startPrepareBatch). Returns the time to be woken: the pacer's, or a held
   * preparation batch's flush time.
   */
  private dispatch(out: Command[]): number {
    const s = this.counters;
    s.budgetBlocked = false;
    if (this.draining) return Infinity;
    for (let head = this.backlog.peek(); head; head = this.backlog.peek()) {
      s.nextKind = head.job.kindIndex;
      if (s.preparingSteps >= this.maxPreparing) return Infinity;
      const at = this.pacer.nextDispatchAt(s);
      if (!(at <= this.now)) {
        if (this.deviceKinds && this.feedStarved(head, out)) continue;
        return Number.isNaN(at) ? Infinity : at;
      }
      const spec = this.prepByKind[head.job.kindIndex] ?? null;
      if (spec) {
        const batch = this.collectPrepBatch(head, spec);
        if (typeof batch === 'number') return batch;
        const b: PrepBatch = { id: this.prepBatchSeq++, items: batch, live: batch.length, startedAt: this.now, answered: false };
        this.prepBatches.set(b.id, b);
        for (const item of batch) {
          item.prepBatch = b;
          this.startPreparing(item);
        }
        s.preparingSteps++;
        out.push({ type: 'startPrepareBatch', batch: b.id, items: batch });
        // As many dispatches as items, at one instant.
        for (let i = 0; i < batch.length; i++) this.pacer.onDispatch(s);
        continue;
      }
      if (!this.budget.tryReserve(head.job.reservation)) {
        s.budgetBlocked = true;
        return Infinity;
      }
      this.take(head);
      this.startPreparing(head);
      s.preparingSteps++;
      out.push({ type: 'startPrepare', item: head, attempt: head.attempt });
      this.pacer.onDispatch(s);
    }
    s.nextKind = -1;
    return Infinity;
  }

  /**
   * The pacer holds the head of the queue back; where devices run named kinds, one that the
   * head's kind does not run may run short with little of its kinds preparing or waiting — the
   * queue's order alone keeps its work back (a 30 ms job for an idle HTTP device waited 5 s behind
   * 50 partitions for a busy process device; two devices of a kind each, their jobs submitted
   * together, both ran at the slower one's pace: 0.88 of their capacity). Such a device gets the
   * first queued items of its kinds, as the budget allows (a kind prepared in batches waits its
   * turn), while fewer of its kinds are preparing or waiting than its workers need on the way:
   * each worker one, and what it takes in one preparation latency of its queued kinds, as measured
   * (see feedAhead) — with the one a worker kept alone, a fast GPU behind a 0.75 s preparation
   * needing 7.5 ran at 0.81 of its time. Returns whether it dispatched one.
   */
  private feedStarved(head: Item, out: Command[]): boolean {
    const s = this.counters;
    const dk = this.deviceKinds as readonly (ReadonlySet<string> | null)[];
    const headKind = head.job.spec.kind;
    for (let d = 0; d < dk.length; d++) {
      const kinds = dk[d];
      const c = s.devices[d] as DeviceCounters;
      if (!kinds || kinds.has(headKind) || c.eligible === false) continue;
      // Fewer of its kinds on the way than it needs, and some queued (else no scan of the queue: this runs on every event).
      let coming = 0;
      let queued = 0;
      let ahead = 0;
      for (const name of kinds) {
        const k = this.kindIndexes.get(name);
        if (k === undefined) continue;
        const kc = s.kinds[k] as EngineKind;
        coming += kc.preparing + kc.waiting;
        queued += kc.queued;
        if (kc.queued > 0) ahead = Math.max(ahead, feedAhead(kc, d));
      }
      if (coming >= c.workers * (1 + ahead) || queued === 0) continue;
      let best: Item | undefined;
      for (const item of this.backlog.values()) if (kinds.has(item.job.spec.kind) && !this.prepByKind[item.job.kindIndex] && (!best || keyLess(item, best))) best = item;
      if (!best || !this.budget.tryReserve(best.job.reservation)) continue;
      s.nextKind = best.job.kindIndex;
      this.take(best);
      this.startPreparing(best);
      s.preparingSteps++;
      out.push({ type: 'startPrepare', item: best, attempt: best.attempt });
      this.pacer.onDispatch(s);
      return true;
    }
    return false;
  }

  /**
   * Takes an item off the backlog (still queued until it starts); the job's frontier leaving it
   * makes the job's next partition take its place — for the top, in one short sift (the job's
   * other queued items, requeued ones, sort before the frontier).
   */
  private take(item: Item): void {
    const job = item.job;
    const frontier = item.partition === job.next - 1 && job.next < job.spec.partitions;
    if (item === this.backlog.peek()) {
      if (frontier) this.backlog.replaceTop(this.makeNext(job));
      else this.backlog.pop();
      return;
    }
    this.backlog.remove(item);
    if (frontier) this.backlog.push(this.makeNext(job));
  }

  /** An item taken off the backlog, its memory granted, starts preparation (a new attempt). */
  private startPreparing(item: Item): void {
    const s = this.counters;
    s.budgetUsedBytes = this.budget.used;
    item.reservedBytes = item.job.reservation;
    item.prepSolo = false;
    item.heldSince = Infinity;
    this.move(item, 'preparing');
    item.attempt++;
    item.startedAt = this.now;
    item.preparingAtStart = s.preparingMsTotal;
    s.preparingStartMsTotal += this.now;
    s.dispatched++;
  }

  /**
   * The preparation batch `head` leads, taken off the backlog with its memory granted: the queued
   * items of its kind that follow it in queue order, up to maxItems (and what the whole budget
   * could ever hold at once), stopping at other work. With fewer, while nothing else is queued and
   * its oldest item has waited less than maxWaitMs since the pacer first let it start, it waits (its
   * items stay queued): returns the time to start it anyway. Returns Infinity while its memory is
   * not free.
   */
  private collectPrepBatch(head: Item, spec: { maxItems: number; maxWaitMs: number }): Item[] | number {
    const kind = head.job.kindIndex;
    const items: Item[] = [];
    let bytes = 0;
    // An item whose batch failed unexplained is prepared alone (a batch of one), at once.
    const most = head.prepSolo ? 1 : spec.maxItems;
    for (let it = this.backlog.peek(); it && items.length < most; it = this.backlog.peek()) {
      if (it.job.kindIndex !== kind || (it.prepSolo && it !== head) || bytes + it.job.reservation > this.budget.totalBytes) break;
      this.take(it);
      items.push(it);
      bytes += it.job.reservation;
    }
    let since = Infinity;
    for (const it of items) since = Math.min(since, (it.heldSince = Math.min(it.heldSince, this.now)));
    const flushAt = since + spec.maxWaitMs;
    const hold = items.length < most && this.backlog.size === 0 && flushAt > this.now;
    if (hold || !this.budget.tryReserve(bytes)) {
      for (const it of items) this.backlog.push(it);
      if (hold) return flushAt;
      this.counters.budgetBlocked = true;
      return Infinity;
    }
    return items;
  }
}

type NormalJob = Job['spec'];

type LiveCounts = Record<'queued' | 'preparing' | 'waiting' | 'on-device', number>;

/** Adds a job's unfinished partitions by stage to `c`: O(its partitions in flight). */
function countLive(job: Job, c: LiveCounts): LiveCounts {
  c.queued += job.spec.partitions - job.next;
  for (let item = job.liveHead; item; item = item.nextLive) if (item.state === 'queued' || item.state === 'preparing' || item.state === 'waiting' || item.state === 'on-device') c[item.state]++;
  return c;
}

/** Checks a batch spec (`where`: its option path, `example`: a valid one for the error). */
function checkBatch(b: BatchSpec, where: string, example: string): void {
  if (typeof b !== 'object' || b === null || !Number.isInteger(b.maxItems) || b.maxItems < 1) {
    throw new StokerError('E_INVALID_OPTION', `${where}.maxItems must be an integer ≥ 1 (got ${shown((b as Partial<BatchSpec> | null)?.maxItems)}), e.g. ${example}`);
  }
  checkKeys(b, ['maxItems', 'maxWaitMs'], `${where}.`, 'a batch', 'E_INVALID_OPTION');
  if (b.maxWaitMs !== undefined && !(typeof b.maxWaitMs === 'number' && b.maxWaitMs >= 0 && Number.isFinite(b.maxWaitMs))) {
    throw new StokerError('E_INVALID_OPTION', `${where}.maxWaitMs must be a finite number of ms ≥ 0 (got ${shown(b.maxWaitMs)})`);
  }
}

/**
 * An item event's `item`: the id of a command's item (`command.item.id`). An id the engine no
 * longer knows is a stale event (its item cancelled, retried or lost) and changes nothing; anything
 * but an integer is a driver's mistake (the item object itself, say), which would too, silently.
 */
function checkItemId(item: unknown, type: string): void {
  if (!Number.isInteger(item)) throw new StokerError('E_INVALID_EVENT', `${type}.item must be the item's id, an integer (command.item.id), not ${typeof item === 'object' ? 'an object' : JSON.stringify(item)}`);
}

/** A failure's `reason`: a string (one left out read "undefined" in the job's failure). */
function checkReason(reason: unknown, type: string): void {
  if (typeof reason !== 'string') throw new StokerError('E_INVALID_EVENT', `${type}.reason must be a string saying why (got ${shown(reason)})`);
}

/** A failure's `final`: true, false or absent. */
function checkWorkerLost(lost: unknown, type: string): void {
  if (lost !== undefined && typeof lost !== 'boolean') throw new StokerError('E_INVALID_EVENT', `${type}.workerLost must be true, false or absent (got ${shown(lost)})`);
}

function checkFinal(final: unknown, type: string): void {
  if (final !== undefined && typeof final !== 'boolean') throw new StokerError('E_INVALID_EVENT', `${type}.final must be true, false or absent (got ${shown(final)})`);
}

/** A measure a driver reports (a busy time, a latency): absent, or a finite number ≥ 0 (a negative or NaN one would corrupt every estimate made from it). */
function checkMeasure(ms: number | undefined, field: string): void {
  if (ms !== undefined && !(ms >= 0 && Number.isFinite(ms))) throw new StokerError('E_INVALID_EVENT', `${field} must be a finite number ≥ 0 in ms, or absent for the time the engine saw (got ${shown(ms)})`);
}

/** Checks a batch answer's `failed` list against the batch's items (when the batch is still known). */
function checkFailed(failed: unknown, type: string, items: readonly Item[] | undefined, batch: number): void {
  if (failed === undefined) return;
  if (!Array.isArray(failed)) throw new StokerError('E_INVALID_EVENT', `${type}.failed must be an array of { item, reason }, or absent when every item succeeded`);
  for (const f of failed as unknown[]) {
    const e = f as { item?: unknown; reason?: unknown; final?: unknown } | null;
    if (typeof e !== 'object' || e === null || typeof e.item !== 'number' || typeof e.reason !== 'string' || (e.final !== undefined && typeof e.final !== 'boolean')) throw new StokerError('E_INVALID_EVENT', `each ${type}.failed entry must be { item: <item id>, reason: <string>, final?: <boolean> }`);
    if (items && !items.some((it) => it.id === e.item)) throw new StokerError('E_INVALID_EVENT', `${type}.failed names item ${e.item}, which is not in batch ${batch}`);
  }
}

function invalid(field: string, problem: string): StokerError {
  return new StokerError('E_INVALID_JOB', `job.${field} ${problem}`);
}

function bytes(v: unknown, field: string): number {
  if (v === undefined) return 0;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw invalid(field, `must be a whole number of bytes ≥ 0 (got ${shown(v)})`);
  return v;
}

/** The job's own number of an item's partition (JobSpec.partitionNumbers), as failure reasons name it. */
function partitionOf(item: Item): number {
  return item.job.spec.partitionNumbers?.[item.partition] ?? item.partition;
}

/** Checks a job spec and fills in defaults; errors name the field and the fix. */
export function normalizeJob(spec: JobSpec): NormalJob {
  if (typeof spec !== 'object' || spec === null) throw new StokerError('E_INVALID_JOB', 'job must be an object with id, kind and partitions');
  checkKeys(spec, JOB_FIELDS, 'job.', 'a job', 'E_INVALID_JOB');
  if (spec.memory !== undefined && (typeof spec.memory !== 'object' || spec.memory === null)) throw invalid('memory', `must be { prepareBytes, deviceBytes }, or absent (got ${shown(spec.memory)})`);
  if (spec.memory) checkKeys(spec.memory, ['prepareBytes', 'deviceBytes'], 'job.memory.', 'job.memory', 'E_INVALID_JOB');
  if (typeof spec.id !== 'string' || spec.id.length === 0 || spec.id.length > 256) throw invalid('id', `must be a non-empty string of at most 256 characters (got ${shown(spec.id)})`);
  if (typeof spec.kind !== 'string' || spec.kind.length === 0) throw invalid('kind', `must be a non-empty string naming the workload (got ${shown(spec.kind)})`);
  const priority = spec.priority ?? 'normal';
  if (!PRIORITIES.includes(priority)) throw invalid('priority', `must be one of ${PRIORITIES.join(', ')} (got ${shown(spec.priority)})`);
  if (!Number.isInteger(spec.partitions) || spec.partitions < 1 || spec.partitions > MAX_PARTITIONS) {
    throw invalid('partitions', `must be an integer from 1 to ${MAX_PARTITIONS} (got ${shown(spec.partitions)})`);
  }
  const memory = { prepareBytes: bytes(spec.memory?.prepareBytes, 'memory.prepareBytes'), deviceBytes: bytes(spec.memory?.deviceBytes, 'memory.deviceBytes') };
  const deadline = spec.deadline ?? Infinity;
  if (typeof deadline !== 'number' || Number.isNaN(deadline)) throw invalid('deadline', `must be an absolute time in ms on the engine clock (got ${shown(spec.deadline)})`);
  const numbers = spec.partitionNumbers ?? null;
  if (numbers !== null && (!Array.isArray(numbers) || numbers.length !== spec.partitions || numbers.some((n) => !Number.isSafeInteger(n) || n < 0))) {
    throw invalid('partitionNumbers', `must be ${spec.partitions} whole numbers ≥ 0, the job's own number of each partition, or absent (got ${Array.isArray(numbers) ? `${numbers.length} entries` : shown(numbers)})`);
  }
  return { id: spec.id, kind: spec.kind, priority, partitions: spec.partitions, memory, deadline, partitionNumbers: numbers };
}

function sameJob(a: NormalJob, b: NormalJob): boolean {
  return (
    a.kind === b.kind &&
    a.priority === b.priority &&
    a.partitions === b.partitions &&
    a.memory.prepareBytes === b.memory.prepareBytes &&
    a.memory.deviceBytes === b.memory.deviceBytes &&
    a.deadline === b.deadline &&
    (a.partitionNumbers === b.partitionNumbers || (a.partitionNumbers !== null && b.partitionNumbers !== null && a.partitionNumbers.every((n, i) => n === b.partitionNumbers?.[i])))
  );
}

/** The most items per worker {@link feedAhead} gives a device (a busy time of microseconds — a rate the server's own overhead sets — would ask thousands). */
const FEED_AHEAD_MAX = 16;

/**
 * How many items of a kind a worker of device `d` takes in one preparation latency of the kind,
 * as measured (the kind's mean preparation latency ÷ its mean device time there; 0 before both
 * are measured), at most FEED_AHEAD_MAX: what a device's workers need on the way besides the one
 * each holds, by Little's law.
 */
function feedAhead(kc: EngineKind, d: number): number {
  const done = kc.completions[d] ?? 0;
  if (kc.prepareCompletions === 0 || done === 0) return 0;
  const latency = kc.prepareLatencyMsTotal / kc.prepareCompletions;
  const service = (kc.busyMs[d] ?? 0) / done;
  return service > 0 ? Math.min(latency / service, FEED_AHEAD_MAX) : FEED_AHEAD_MAX;
}

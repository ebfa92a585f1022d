import { shown } from './checks.js';
import { StokerError } from './errors.js';

/**
 * The pacer decides *when* the next item may start preparation. The engine calls
 * `observe` on every event, then asks `nextDispatchAt` and calls `onDispatch` after each
 * dispatch. A pacer never sees items, only counters; it never reads a clock (`now` is given).
 */

/** Per-device counters. `completions` and `busyMs` are cumulative: read them as deltas. */
export interface DeviceCounters {
  /** Workers currently alive on this device. */
  workers: number;
  /** Workers currently running an item. */
  busy: number;
  /** Items completed on this device. */
  completions: number;
  /** Sum of the device time the workers measured for those items, ms. */
  busyMs: number;
  /**
   * Sum over those items of how many of the device's workers were busy, on average, while each
   * ran (itself included): with busyMs, how service time grows with the workers in use. The
   * engine keeps it; absent in a snapshot made by hand.
   */
  concurrencyTotal?: number;
  /**
   * A device that runs batches (DeviceSpec.batch): its largest batch, and how many batches it
   * finished and how many items they started with (the engine reports one batch per event: with
   * `busyMs`, each batch's size and busy time, from which a pacer fits busy time over batch size).
   * Absent on a device that runs one item per step.
   */
  batch?: { readonly maxItems: number; batches: number; items: number };
  /**
   * False while no job in the system is of a kind this device runs (only where devices name
   * their kinds): its rate serves none of the work, so a pacer should not count it. Absent: true.
   */
  eligible?: boolean;
}

/**
 * Per job kind, in the order kinds were first submitted: where its items are, and what the
 * devices measured for it — a kind several times heavier on the device than another has its own
 * service time. Cumulative counters are read as deltas, like {@link DeviceCounters}.
 */
export interface KindCounters {
  readonly name: string;
  /** The devices that run this kind (by index; every device unless devices name their kinds). */
  readonly devices: readonly number[];
  /**
   * This kind's partitions queued, made or not (the snapshot's backlog, by kind): the kinds still to
   * be dispatched. The engine keeps it; absent in a snapshot made by hand (the stoker pacer then
   * takes every kind as still to come).
   */
  queued?: number;
  /** This kind's items in preparation, waiting for a device, and on a device. */
  preparing: number;
  waiting: number;
  onDevice: number;
  /** This kind's preparations completed so far, the sum of their latencies (ms) and of their squares (ms²): {@link PacerSnapshot}'s, for the kind alone. */
  prepareCompletions: number;
  prepareLatencyMsTotal: number;
  prepareLatencySqTotal: number;
  /** Per device (by index): this kind's completions there, and the device time measured for them, ms. */
  readonly completions: number[];
  readonly busyMs: number[];
  /**
   * Where some device batches: per device (by index), this kind's batches finished there and the
   * items they started with (a batch is of one kind: with busyMs, each kind's own fit of busy
   * time over batch size). Absent when no device batches.
   */
  readonly deviceBatches?: { readonly batches: number[]; readonly items: number[] };
  /**
   * A kind prepared in batches (EngineOptions.kinds.<name>.prepareBatch): its largest batch, and
   * how many preparation batches finished and how many items they started with. Absent on a
   * kind prepared one item per step.
   */
  prepareBatch?: { readonly maxItems: number; batches: number; items: number };
}

/**
 * What a pacer sees. The engine updates one object in place: read it during the call,
 * copy what you want to keep.
 */
export interface PacerSnapshot {
  /** Current time, ms. */
  now: number;
  /** Items prepared and waiting for a device. */
  waiting: number;
  /** Items in preparation. */
  preparing: number;
  /** Preparation steps running: an item prepared alone is one, a preparation batch of several items is one (what `maxPreparing` caps). */
  preparingSteps: number;
  /** Items running on a device. */
  onDevice: number;
  /** Items not yet dispatched (queued). */
  backlog: number;
  /** Device workers alive, all devices together. */
  workers: number;
  /** Items dispatched to preparation so far. */
  dispatched: number;
  /** Items completed on devices so far. */
  deviceCompletions: number;
  /** Cumulative device time of completed items, ms. */
  deviceBusyMs: number;
  /** Per device. */
  devices: DeviceCounters[];
  /** Per kind (see {@link KindCounters}); with a single kind its counters are the device ones. */
  kinds: KindCounters[];
  /** Index in `kinds` of the item the next dispatch would start, as of the last dispatch attempt; −1 when none was queued. */
  nextKind: number;
  /** Preparations completed so far. */
  prepareCompletions: number;
  /** Sum of their latencies, ms. */
  prepareLatencyMsTotal: number;
  /** Sum of their squared latencies, ms² (for the spread of preparation latency). */
  prepareLatencySqTotal: number;
  /** Sum of the start times of the items now in preparation, ms (mean age = now − this / preparing). */
  preparingStartMsTotal: number;
  /** ∫ preparing dt, ms: item-ms spent in preparation so far (its delta ÷ elapsed time is the mean number preparing). */
  preparingMsTotal: number;
  /**
   * Sum over the preparations completed so far of the mean number preparing while each ran (itself
   * included): its delta ÷ prepareCompletions' delta is the concurrency their latencies were measured at.
   */
  prepareConcurrencyTotal: number;
  /** True when the head of the queue is waiting for memory. */
  budgetBlocked: boolean;
  /** Bytes reserved now, and the whole budget. */
  budgetUsedBytes: number;
  budgetTotalBytes: number;
  /** Cap on concurrent preparation steps, `preparingSteps` (`Infinity` when none). */
  maxPreparing: number;
}

/** Read-only all the way down. */
export type DeepReadonly<T> = T extends (infer E)[] ? readonly DeepReadonly<E>[] : T extends object ? { readonly [K in keyof T]: DeepReadonly<T[K]> } : T;

/** A snapshot as telemetry reads it ({@link Engine.snapshot}): the engine's live counters, which only the engine writes. */
export type ReadonlySnapshot = DeepReadonly<PacerSnapshot>;

export type PacerMode = 'bootstrap' | 'steady' | 'idle' | 'blocked' | 'hold';

/** What a pacer reports about itself (for dashboards, metrics and the settle measure). */
export interface PacerState {
  mode: PacerMode;
  /** The device service rate the pacer believes in, items/s; null when it has no estimate. */
  ratePerSec: number | null;
  /** Current dispatch interval, ms; null when it dispatches on events rather than a schedule. */
  intervalMs: number | null;
  /** Any other terms worth showing (integral, inventory target, …). */
  terms: Record<string, number>;
  /**
   * Per device (by index), where the pacer checks its measurement: the feed-forward capacity
   * (items/s), the last saturated window's observed ÷ estimated rate (null before one), and which
   * of the two it plans with (`observed` once they kept disagreeing); the most workers it lets
   * run at once (null: all; see {@link Pacer.workerLimit}); and on a batching device its batch fit.
   */
  devices?: {
    estimatedPerSec: number | null;
    observedRatio: number | null;
    trusted: 'estimate' | 'observed';
    workerLimit?: number | null;
    /** A batching device's fitted busy time per batch of n items, fixedMs + perItemMs × n (null until fitted). */
    batch?: { fixedMs: number; perItemMs: number } | null;
  }[];
  /** Per job kind (snapshot order), the device capacity the pacer believes in for items of that kind, items/s. */
  kinds?: { name: string; estimatedPerSec: number | null }[];
}

export interface Pacer {
  readonly name: string;
  observe(s: ReadonlySnapshot): void;
  /**
   * Optional: the most workers of a device to run at once (the engine starts no item on it
   * while that many are busy; at least 1 is always used). For devices where fewer busy workers
   * finish more than all of them (memory thrash on a GPU). Absent: every live worker.
   */
  workerLimit?(device: number): number;
  /** Earliest time (ms) the next dispatch may happen; `Infinity` to wait for an event. */
  nextDispatchAt(s: ReadonlySnapshot): number;
  /**
   * Optional: a time (ms, after `s.now`) to observe again even if no event comes and nothing is
   * dispatched — while the memory budget blocks dispatch, say, when `nextDispatchAt` is not asked
   * for a time. For a decision that time alone can change (the age of the work in flight); return
   * Infinity when there is none. Asked only while jobs are live; Infinity or not after `s.now`: none.
   */
  observeAgainAt?(s: ReadonlySnapshot): number;
  onDispatch(s: ReadonlySnapshot): void;
  state(): PacerState;
}

/**
 * A pacer of the user's as the Runtime and a pacer module give it: `name` and `state()` may be left
 * out (checkedPacer fills them in and checks what the methods answer).
 */
export type UserPacer = Omit<Pacer, 'name' | 'state'> & { readonly name?: string; state?(): PacerState };

/** Options every pacer accepts; each pacer documents its own extras. */
export interface PacerOptions {
  /** Items the pacer aims to keep waiting for a device. @default 4 */
  targetWaiting?: number;
  /** A known device service time per item (ms, one worker's view), e.g. remembered from the last run. */
  priorServiceMs?: number;
  /** Known service times per device (ms, by device index; 0 or absent: unknown), over priorServiceMs. */
  priorDeviceServiceMs?: readonly number[];
  /** Known service times of a kind's items per device (ms, by kind name, then device index; 0: unknown), over the two above for that kind. */
  priorKindServiceMs?: Readonly<Record<string, readonly number[]>>;
  /** A known mean preparation latency (ms), e.g. remembered from the last run. */
  priorLatencyMs?: number;
  /** Its known standard deviation (ms). */
  priorLatencySdMs?: number;
  /** A known preparation limit (the most preparations worth running at once: where they stop finishing more), e.g. learned in the last run. */
  priorPrepareLimit?: number;
  [key: string]: unknown;
}

export type PacerFactory = (options: PacerOptions) => Pacer;

/** The option names a pacer's options type declares (not the index signature's any string): a misspelt name does not compile. */
export type DeclaredOption<O> = keyof { [K in keyof O as string extends K ? never : number extends K ? never : K]: O[K] } & string;

/** Reads a numeric option, checking it; names the option and the fix in the error. */
export function numberOption<O extends PacerOptions>(options: O, name: DeclaredOption<O>, fallback: number, min = 0): number {
  const v = options[name];
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !(v >= min)) {
    throw new StokerError('E_INVALID_OPTION', `pacer option ${name} must be a number ≥ ${min} (got ${shown(v)})`);
  }
  return v;
}

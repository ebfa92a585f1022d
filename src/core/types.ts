/**
 * The core's vocabulary: jobs, items (partitions), the events a driver feeds in and the
 * commands the engine hands back. Times are milliseconds on the driver's clock.
 */

/** Priority classes, most urgent first. */
export const PRIORITIES = ['critical', 'high', 'normal', 'low'] as const;
export type Priority = (typeof PRIORITIES)[number];

/** Memory one partition holds, in bytes. */
export interface PartitionMemory {
  /** Held from dispatch until a device takes the item (e.g. the prepared witness). @default 0 */
  prepareBytes: number;
  /** Held from device start until the item finishes (e.g. device-side buffers). @default 0 */
  deviceBytes: number;
}

export interface JobSpec {
  /** Unique among live jobs. Re-submitting an identical spec is a no-op; a different spec is an error. */
  id: string;
  /** Workload kind: selects the preparation and device code in the drivers. */
  kind: string;
  /** @default 'normal' */
  priority?: Priority;
  /** Number of partitions (items), 1 … 1,000,000. */
  partitions: number;
  /** Per-partition memory. @default { prepareBytes: 0, deviceBytes: 0 } */
  memory?: Partial<PartitionMemory>;
  /** Absolute time (ms, driver clock) after which the job fails with E_DEADLINE. */
  deadline?: number;
  /**
   * The job's own number of each of its partitions, where they are not 0 … partitions − 1 (a job
   * resumed with only the partitions it had left): failure reasons name these. Absent: the same.
   */
  partitionNumbers?: readonly number[];
}

export type PartitionState = 'queued' | 'preparing' | 'waiting' | 'on-device' | 'done' | 'failed' | 'cancelled';
export type JobEnd = 'done' | 'failed' | 'cancelled';

/** A read-only view of one partition, as commands carry it. */
export interface ItemView {
  /** Engine-wide unique item id. */
  readonly id: number;
  readonly jobId: string;
  readonly kind: string;
  readonly partition: number;
  readonly priority: Priority;
  readonly state: PartitionState;
  /** Increments on every start (preparation or device); events must echo it. */
  readonly attempt: number;
  /**
   * Its failures so far (a preparation's or a device step's; each one retried while fewer than
   * the engine's retries). The engine's views always have it (optional for views made by hand).
   */
  readonly failures?: number;
  /** Bytes currently reserved for this item. */
  readonly reservedBytes: number;
}

/** An item that failed in a batch (prepareBatchDone, batchDone): `final` as prepareFailed's. */
export interface ItemFailure {
  item: number;
  reason: string;
  final?: boolean;
}

/** Events a driver feeds into {@link Engine.apply}. Every event carries the driver's current time. */
export type EngineEvent =
  | { type: 'submit'; time: number; job: JobSpec }
  /** `reason`: why, as the job's end will say (default "cancelled on request"); the code is E_CANCELLED either way. */
  | { type: 'cancel'; time: number; jobId: string; reason?: string }
  | { type: 'prepared'; time: number; item: number; attempt: number; latencyMs?: number }
  /** `final`: trying again would fail the same way (a bad input, an output that cannot be stored): the job fails at once, without its retries. */
  | { type: 'prepareFailed'; time: number; item: number; attempt: number; reason: string; final?: boolean }
  /**
   * A preparation batch (a `startPrepareBatch` command) finished: its latency `latencyMs`, once for
   * the whole batch (default: the time since startPrepareBatch); `failed` names the items whose
   * preparation failed in it (the others are prepared), each `final` as prepareFailed's.
   */
  | { type: 'prepareBatchDone'; time: number; batch: number; latencyMs?: number; failed?: readonly ItemFailure[] }
  /**
   * A preparation batch failed without saying which items: with more than one, each is prepared
   * again alone once before it counts as failed; one alone fails, at once where `final` (as prepareFailed's).
   */
  | { type: 'prepareBatchFailed'; time: number; batch: number; reason: string; final?: boolean }
  /** `busyMs`: the device time the worker measured itself; defaults to the time since startDevice. */
  | { type: 'deviceDone'; time: number; item: number; attempt: number; busyMs?: number }
  /**
   * `final`: as prepareFailed's. `workerLost`: the worker that ran it is out of service from now
   * (as a `workerLost` event, before anything else is sent to it: a process device's worker whose
   * next process starts seconds from now), until a `workerReturned`.
   */
  | { type: 'deviceFailed'; time: number; item: number; attempt: number; reason: string; final?: boolean; workerLost?: boolean }
  /**
   * A batch (a `startBatch` command) finished: its device time `busyMs`, measured once for the
   * whole batch (default: the time since startBatch); `failed` names the items that failed in it
   * (the others are done), each `final` as prepareFailed's.
   */
  | { type: 'batchDone'; time: number; batch: number; busyMs?: number; failed?: readonly ItemFailure[] }
  /**
   * A batch failed and the device did not say which items: with more than one, each runs again
   * alone once before it counts as failed; one alone fails, at once where `final` (as prepareFailed's).
   * `workerLost`: as deviceFailed's.
   */
  | { type: 'batchFailed'; time: number; batch: number; reason: string; final?: boolean; workerLost?: boolean }
  | { type: 'workerLost'; time: number; device: number; worker: number }
  | { type: 'workerReturned'; time: number; device: number; worker: number }
  /**
   * Memory the driver holds outside any reservation — idle buffers kept for reuse — now `bytes`
   * in all: it counts against the budget, so the driver should free it when the budget blocks.
   */
  | { type: 'memoryHeld'; time: number; bytes: number }
  /** Start no more partitions (shutdown): those in flight still finish; queued ones stay queued until cancelled. */
  | { type: 'drain'; time: number }
  /** A timer the engine asked for with `wakeAt` fired (early or late ticks are harmless). */
  | { type: 'tick'; time: number };

/**
 * Commands the engine returns; the driver carries them out in order. `item` is a live view:
 * read it when the command is handled, copy what you keep.
 */
export type Command =
  /** Begin preparing this item; its reservation is already granted. */
  | { type: 'startPrepare'; item: ItemView; attempt: number }
  /**
   * Prepare these items, all of one kind, together as one step (kinds with `prepareBatch`); their
   * reservations are already granted. Answer with `prepareBatchDone` or `prepareBatchFailed`
   * naming `batch` (ids of their own, apart from device batches).
   */
  | { type: 'startPrepareBatch'; batch: number; items: readonly ItemView[] }
  /** Run this prepared item on the given device worker. */
  | { type: 'startDevice'; item: ItemView; attempt: number; device: number; worker: number }
  /**
   * Run these prepared items, all of one kind, as one batch on the given device worker (devices
   * with `batch`); answer with `batchDone` or `batchFailed` naming `batch`.
   */
  | { type: 'startBatch'; batch: number; items: readonly ItemView[]; device: number; worker: number }
  /**
   * Stop working on this item and drop its data; events about it will be ignored. An item of a
   * batch carries `batch`: the batch's id and how many of its items still run; at 0 the whole
   * batch step is withdrawn (stop it: its worker is free). At stage `preparing` that is a
   * preparation batch (`startPrepareBatch`), on a device a device batch (`startBatch`).
   */
  | { type: 'abort'; item: ItemView; stage: 'preparing' | 'waiting' | 'on-device'; reason: string; batch?: { id: number; remaining: number } }
  /** The job ended (exactly once per job): `timeMs` is how long it lived, from its submit to now (ms; not a clock time). */
  | { type: 'finishJob'; jobId: string; state: JobEnd; code?: string; reason?: string; timeMs: number }
  /**
   * Replace the pending timer: send a `tick` at this time (`Infinity`: no timer needed). A `tick`
   * event tells the engine that the timer fired, so after one the engine sends `wakeAt` again
   * whenever it still needs a timer (also when a timer fired early, before its time).
   */
  | { type: 'wakeAt'; time: number };

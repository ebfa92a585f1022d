import type { BatchSpec, Command, EngineEvent, KindSpec, PacerOptions, UserPacer, ReadonlySnapshot, PacerState, TimelineRecorder } from '../core/index.js';
import type { BufferPool } from './buffer-pool.js';
import type { Clock } from './clock.js';

/** The runtime's contract with the work it runs: the tasks a workload's stages get, what they answer, and the runtime's options and status. */

/** One partition as the stages see it. */
export interface PartitionTask<I> {
  jobId: string;
  kind: string;
  partition: number;
  /** The job's partition count. */
  partitions: number;
  /** The job's input, as given to submit(). */
  input: I;
  /** Fires when the engine withdraws the item (cancel, failure, timeout, shutdown). */
  signal: AbortSignal;
}

export interface DeviceTask<I, P> extends PartitionTask<I> {
  prepared: P;
  device: number;
  worker: number;
  /**
   * Call it when the device begins the step after waiting to be ready (a process or thread that
   * was starting, a model loading): the device timeout (`deviceTimeoutMs`) counts afresh from then,
   * and so does the step's wall time. Until then, that timeout bounds the wait. Called again (the
   * step begun afresh, as a step is sent again to a new thread), it counts from then again. Set by
   * the runtime.
   */
  begin?: () => void;
}

/**
 * What a pipeline runs: preparation (CPU), the device step (accelerator) and the job's finish.
 * Implementations decide where each runs (in process, worker threads, a GPU, a remote server).
 */
export interface Workload<I, P, O, R> {
  /** Prepares one partition. */
  prepare(task: PartitionTask<I>): Promise<P>;
  /**
   * Prepares a batch of partitions of one kind together as one step (kinds with `prepareBatch`):
   * one result per task, in order — `{ prepared }`, or `{ error }` for an item that failed alone.
   * A throw fails the whole batch: with several items, each is then prepared again alone.
   */
  prepareBatch?(tasks: PartitionTask<I>[]): Promise<PrepareResult<P>[]>;
  /**
   * Runs one prepared partition on a device worker. `busyMs` is the worker's own measure of the
   * time the item *occupied* it: from taking the item until it can take the next — lock waits and
   * a shared GPU included, idle time and work handed off after it is free excluded (the pacer's
   * rate is Σ workers ÷ busy time per item). Leave it out and the runtime uses the step's wall
   * time (from the call until the promise settles), which is that occupied time for a worker that
   * does nothing else. A value that is not a finite number ≥ 0 fails the step.
   */
  run(task: DeviceTask<I, P>): Promise<{ output: O; busyMs?: number }>;
  /**
   * Runs a batch of prepared partitions of one kind as one device step (devices with `batch`):
   * one result per task, in order — `{ output }`, or `{ error }` for an item that failed alone.
   * `busyMs` is the batch's busy time, once for all of them (left out: the step's wall time). A
   * throw fails the whole batch: with several items, each then runs again alone.
   */
  runBatch?(tasks: DeviceTask<I, P>[]): Promise<{ results: BatchResult<O>[]; busyMs?: number }>;
  /** Turns the outputs of every partition (in partition order) into the job's result. */
  finish(job: { jobId: string; input: I; outputs: O[] }): Promise<R> | R;
  /** Frees prepared data that will not reach a device (withdrawn) or has been consumed. */
  release?(prepared: P): void;
  /** Stops every thread and connection. */
  close?(): Promise<void>;
  /**
   * Where device workers can go out of service (a process device's worker whose processes keep
   * failing to start): the runtime calls this once, and takes `up: false` as the worker lost —
   * its item is withdrawn and prepared again for the others, none is sent to it — until `up: true`.
   */
  watchWorkers?(listener: (device: number, worker: number, up: boolean) => void): void;
  /**
   * Whether a device cannot be reached now (an HTTP endpoint that refuses connections). A drain
   * (`close(…, { drain: true })`) does not wait for work that only such devices could run: it
   * could not end before the timeout unless the device came back.
   */
  unreachable?(device: number): boolean;
  /** Workers per device, where the workload has devices of its own (a ThreadedWorkload's threads): a Runtime given other devices is refused. */
  readonly deviceWorkers?: readonly number[];
  /** Preparations the workload can run at once; the runtime dispatches no more than that. */
  readonly prepareSlots?: number;
  /**
   * The buffer pool prepared data lives in, if any: after every step the runtime frees its idle
   * buffers past the idle TTL (`trim()`), and past the room beside the budget's reservations
   * (`trimTo(room)`, which keeps those of the size checked out last for the next preparations;
   * without it, `trim(true)`). Idle buffers are not charged to the budget.
   */
  readonly pool?: Pick<BufferPool, 'stats' | 'trim'> & Partial<Pick<BufferPool, 'trimTo' | 'limitIdleTo'>>;
}

/** One item's result in a batch: its output, or why it alone failed (`retry: false`: it would fail again, its job fails at once). */
export type BatchResult<O> = { output: O } | { error: string; retry?: false };

/** One item's result in a preparation batch: its prepared data, or why it alone failed (`retry: false` as BatchResult's). */
export type PrepareResult<P> = { prepared: P } | { error: string; retry?: false };

export interface RuntimeOptions<I, P, O, R> {
  workload: Workload<I, P, O, R>;
  /**
   * One entry per device: its pipelined workers, its batching (the workload must have `runBatch`),
   * the kinds it runs (absent: every kind; an item goes only to a device that runs its kind) and
   * the name failure reasons call it by.
   */
  devices: { workers: number; batch?: BatchSpec; kinds?: readonly string[]; name?: string }[];
  /** Kinds by name that are prepared in batches (`{ prepareBatch: { maxItems, maxWaitMs } }`; the workload must have `prepareBatch`). */
  kinds?: Readonly<Record<string, KindSpec>>;
  /** A built-in pacer name or a pacer. @default 'stoker' */
  pacer?: string | UserPacer;
  /** Options for a pacer given by name. */
  pacerOptions?: PacerOptions;
  /** Memory budget in bytes. @default Infinity */
  budgetBytes?: number;
  /** Most concurrent preparation steps (a preparation batch is one). @default Infinity */
  maxPreparing?: number;
  /** A failed partition is prepared again this many times before its job fails. @default 1 (real failures often pass: a crashed worker, a full device; the bare engine's default is 0) */
  retries?: number;
  /** A device step running longer than this fails (and is retried). @default Infinity */
  deviceTimeoutMs?: number;
  /**
   * A preparation running longer than this fails (and is retried): its signal fires, and what it
   * returns later is dropped. One that ignores its signal keeps its place in the workload (a
   * preparation thread's) until it returns. A preparation batch is timed whole (set it for a full
   * batch): past it the batch fails and its items are prepared again alone. @default Infinity
   */
  prepareTimeoutMs?: number;
  /** @default the system clock */
  clock?: Clock;
  /** Records every engine step (what ran where, and the pipeline's levels) for a waterfall or a trace. */
  timeline?: TimelineRecorder;
  /** Called after every engine step with its event, the commands it returned (before they are carried out) and the engine's counters after it (as the simulator's onStep). */
  onStep?: (event: EngineEvent, commands: readonly Command[], snapshot: ReadonlySnapshot) => void;
  /**
   * Called for every step that failed (a preparation, a device step; each item of a failed
   * batch), after the engine has heard of it: whether the partition is tried again or its job
   * failed with it. A retried failure leaves no other trace: log or count them here.
   */
  onStepFailed?: (failure: StepFailure) => void;
}

/** A step that failed (RuntimeOptions.onStepFailed). */
export interface StepFailure {
  stage: 'prepare' | 'device';
  jobId: string;
  kind: string;
  /** The job's own number of the partition (JobSpec.partitionNumbers, else its index), as failure reasons name it. */
  partition: number;
  /** Which try of the partition failed: 1 its first, 2 its first retry, … (ItemView.failures + 1). */
  attempt: number;
  /** Where a device step ran. */
  device?: number;
  worker?: number;
  reason: string;
  /** The partition is prepared again (false: its job failed with this failure, or had already ended). */
  retried: boolean;
  /**
   * The failure counts against the partition's retries (false: its batch failed without naming
   * the item that failed, no try spent — a device batch's items are prepared again and run alone,
   * a preparation batch's are prepared again alone).
   */
  counted: boolean;
}

export interface RuntimeStatus {
  now: number;
  jobs: number;
  /** The engine's counters (on a failed runtime: as they were when it failed). */
  counters: ReadonlySnapshot;
  pacer: PacerState;
  closing: boolean;
  /** Set once the runtime has failed (E_RUNTIME_FAILED): why, as its jobs were told. */
  failed?: string;
}

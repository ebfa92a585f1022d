/**
 * Each item's work in flight for the runtime: starts the engine's preparations and device steps
 * (one item or a batch) on the workload, answers the engine once each settles, and aborts an
 * item's work when the engine withdraws it. The runtime keeps the engine, the jobs, its timer and
 * the budget's view of the buffer pool; it hands in the workload, the clock, the device timeout,
 * the jobs (read only) and two callbacks (apply an event, sync the pool) as a {@link FlightsHost}.
 */
import { StokerError, type EngineEvent, type ItemView } from '../core/index.js';
import type { Clock } from './clock.js';
import type { BatchResult, DeviceTask, PartitionTask, PrepareResult, Workload } from './workload.js';
import { noRetry, workerLostWith } from './no-retry.js';
import { shown } from '../core/checks.js';

/** What a step needs of its job: the input, the partition count, and where the outputs go. */
export interface FlightJob<I, O> {
  input: I;
  partitions: number;
  outputs: O[];
}

/** What the flights need of the runtime that drives them. */
export interface FlightsHost<I, P, O, R> {
  workload: Workload<I, P, O, R>;
  clock: Clock;
  /** A device step running longer than this fails (Infinity: never). */
  deviceTimeoutMs: number;
  /** A preparation running longer than this fails (Infinity: never). */
  prepareTimeoutMs: number;
  /** The runtime's jobs by id: an item whose job is not here is not started. */
  jobs: ReadonlyMap<string, FlightJob<I, O>>;
  /** Feeds the engine a step's answer and carries out the commands it returns. */
  apply(event: EngineEvent): void;
  /** Charges the pool's idle bytes to the budget (after prepared data was freed outside an engine step). */
  syncPool(): void;
  /** An item's step failed (told just before the engine hears of it). */
  stepFailed(item: ItemView, stage: 'prepare' | 'device', reason: string, where?: { device: number; worker: number }): void;
}

/** One item's step in flight: what aborts it, its prepared data, its device timeout. */
interface Flight<P> {
  controller: AbortController;
  /** Set (`hasPrepared`) once prepared: a prepare may resolve undefined (P = void), which is prepared data too. */
  prepared?: P;
  hasPrepared?: boolean;
  /** The device step has the prepared data: it frees it when run() settles, not before. */
  onDevice?: boolean;
  timer?: unknown;
  /** An item of a preparation batch left it (withdrawn): the batch's own timeout goes with its last one. */
  left?: () => void;
}

/** The runtime's items in flight, by item id, and the steps that carry them out. */
export class Flights<I, P, O, R> {
  private readonly flights = new Map<number, Flight<P>>();
  private readonly workload: Workload<I, P, O, R>;
  private readonly clock: Clock;
  private readonly deviceTimeoutMs: number;
  private readonly prepareTimeoutMs: number;
  private readonly jobs: ReadonlyMap<string, FlightJob<I, O>>;
  private readonly apply: (event: EngineEvent) => void;
  private readonly syncPool: () => void;
  private readonly stepFailed: FlightsHost<I, P, O, R>['stepFailed'];

  constructor(host: FlightsHost<I, P, O, R>) {
    this.workload = host.workload;
    this.clock = host.clock;
    this.deviceTimeoutMs = host.deviceTimeoutMs;
    this.prepareTimeoutMs = host.prepareTimeoutMs;
    this.jobs = host.jobs;
    this.apply = (event) => host.apply(event);
    this.syncPool = () => host.syncPool();
    this.stepFailed = (item, stage, reason, where) => host.stepFailed(item, stage, reason, where);
  }

  /** Stops and drops an item's work (the engine's `abort`): its step's signal fires with E_CANCELLED. */
  abort(id: number, reason: string): void {
    const f = this.flights.get(id);
    if (f) this.land(id, f, new StokerError('E_CANCELLED', reason));
  }

  /** Stops and drops all work in flight (the runtime failed: see Runtime's E_RUNTIME_FAILED). */
  abortAll(reason: string): void {
    for (const [id, f] of [...this.flights]) this.land(id, f, new StokerError('E_CANCELLED', reason));
  }

  /** Returns prepared data to the workload outside an engine step, then updates the budget's view of the pool. */
  private release(prepared: P): void {
    this.workload.release?.(prepared);
    this.syncPool();
  }

  /** Ends an item's flight: aborts its work; frees its prepared data unless a device step still holds it. */
  private land(id: number, f: Flight<P>, reason?: Error): void {
    this.flights.delete(id);
    if (f.timer !== undefined) this.clock.cancel(f.timer);
    if (reason) f.controller.abort(reason);
    f.left?.();
    if (f.hasPrepared && !f.onDevice) this.workload.release?.(f.prepared as P);
  }

  /** Prepares one item (the engine's `startPrepare`); answers `prepared` or `prepareFailed`. */
  startPrepare(item: ItemView, attempt: number): void {
    const job = this.jobs.get(item.jobId);
    if (!job) return;
    const f: Flight<P> = { controller: new AbortController() };
    this.flights.set(item.id, f);
    const started = this.clock.now();
    const task: PartitionTask<I> = { jobId: item.jobId, kind: item.kind, partition: item.partition, partitions: job.partitions, input: job.input, signal: f.controller.signal };
    if (Number.isFinite(this.prepareTimeoutMs)) {
      // Past it the preparation fails (its signal fires; what it returns later is dropped): a prepare that never settles held its job for good.
      f.timer = this.clock.schedule(() => {
        if (this.flights.get(item.id) !== f) return;
        const reason = prepareTimeoutReason('preparation', this.prepareTimeoutMs);
        this.land(item.id, f, new StokerError('E_PREPARE_FAILED', reason));
        this.stepFailed(item, 'prepare', reason);
        this.apply({ type: 'prepareFailed', time: this.clock.now(), item: item.id, attempt, reason });
      }, this.prepareTimeoutMs);
    }
    const settle = () => {
      if (f.timer !== undefined) this.clock.cancel(f.timer);
      f.timer = undefined;
    };
    settled(() => this.workload.prepare(task)).then(
      (prepared) => {
        if (this.flights.get(item.id) !== f || f.controller.signal.aborted) {
          this.release(prepared);
          return;
        }
        settle();
        f.prepared = prepared;
        f.hasPrepared = true;
        this.apply({ type: 'prepared', time: this.clock.now(), item: item.id, attempt, latencyMs: this.clock.now() - started });
      },
      (e: unknown) => {
        if (this.flights.get(item.id) !== f) return;
        settle();
        this.flights.delete(item.id);
        const reason = errorMessage(e);
        this.stepFailed(item, 'prepare', reason);
        this.apply({ type: 'prepareFailed', time: this.clock.now(), item: item.id, attempt, reason, ...(noRetry(e) ? { final: true } : {}) });
      },
    );
  }

  /**
   * Prepares a batch as one step. Each item has its own flight (a withdrawn item is aborted alone;
   * the engine withdraws the batch with its last one); the answer names the batch.
   */
  startPrepareBatch(batch: number, items: readonly ItemView[]): void {
    const prepareBatch = this.workload.prepareBatch as NonNullable<Workload<I, P, O, R>['prepareBatch']>;
    const entries: { item: ItemView; f: Flight<P> }[] = [];
    const tasks: PartitionTask<I>[] = [];
    /** Items whose job is not here (never expected): they fail alone, the rest are prepared. */
    const missing: { item: number; reason: string }[] = [];
    for (const item of items) {
      const job = this.jobs.get(item.jobId);
      if (!job) {
        missing.push({ item: item.id, reason: 'its job is not in this runtime' });
        continue;
      }
      const f: Flight<P> = { controller: new AbortController() };
      this.flights.set(item.id, f);
      entries.push({ item, f });
      tasks.push({ jobId: item.jobId, kind: item.kind, partition: item.partition, partitions: job.partitions, input: job.input, signal: f.controller.signal });
    }
    if (entries.length === 0) {
      // (Answered after the step that started it, as a preparation would be.)
      queueMicrotask(() => this.apply({ type: 'prepareBatchDone', time: this.clock.now(), batch, failed: missing }));
      return;
    }
    /** The items still in this batch (not withdrawn, not yet answered). */
    const live = () => entries.filter((e) => this.flights.get(e.item.id) === e.f && !e.f.controller.signal.aborted);
    /** Fails the items still in it (`abort`: their signals fire too, as a timeout's do; `final`: an error with retry: false). */
    const failed = (reason: string, abort = false, final = false) => {
      const still = live();
      for (const e of still) {
        this.flights.delete(e.item.id);
        if (abort) e.f.controller.abort(new StokerError('E_PREPARE_FAILED', reason));
        this.stepFailed(e.item, 'prepare', reason);
      }
      if (still.length > 0) this.apply({ type: 'prepareBatchFailed', time: this.clock.now(), batch, reason, ...(final ? { final } : {}) });
      else this.syncPool();
    };
    // Past the timeout the batch fails as a whole (its items are prepared again, alone); what it returns later is released.
    const timer = Number.isFinite(this.prepareTimeoutMs)
      ? this.clock.schedule(() => failed(prepareTimeoutReason('preparation batch', this.prepareTimeoutMs), true), this.prepareTimeoutMs)
      : undefined;
    // Every item withdrawn (its job cancelled, the runtime closed) from a batch that never answers: its timer goes too (it kept the process alive).
    if (timer !== undefined) for (const e of entries) e.f.left = () => live().length === 0 && this.clock.cancel(timer);
    const started = this.clock.now();
    settled(() => prepareBatch.call(this.workload, tasks)).then(
      (results) => {
        if (timer !== undefined) this.clock.cancel(timer);
        const ok = Array.isArray(results) && results.length === tasks.length;
        const wrong = ok ? results.findIndex((r) => typeof r !== 'object' || r === null || !('prepared' in r || 'error' in r)) : -1;
        if (!ok || wrong >= 0) {
          // Whatever was prepared is released: nothing of a malformed answer is used.
          if (Array.isArray(results)) for (const r of results) if (typeof r === 'object' && r !== null && 'prepared' in r) this.workload.release?.(r.prepared);
          if (!ok) return failed(`the preparation batch returned ${Array.isArray(results) ? results.length : 'no'} results for ${tasks.length} items: return one { prepared } or { error } per task, in order`);
          return failed(`the preparation batch's result ${wrong} is ${JSON.stringify(results[wrong]) ?? String(results[wrong])}: each result must be { prepared } or { error }`);
        }
        const still = new Set(live());
        const bad = [...missing];
        entries.forEach((e, i) => {
          const r = results[i] as PrepareResult<P>;
          if (!still.has(e)) {
            if ('prepared' in r) this.workload.release?.(r.prepared);
            return;
          }
          if ('prepared' in r) {
            e.f.prepared = r.prepared;
            e.f.hasPrepared = true;
          }
          else {
            this.flights.delete(e.item.id);
            this.stepFailed(e.item, 'prepare', String(r.error));
            bad.push({ item: e.item.id, reason: String(r.error), ...(noRetry(r) ? { final: true } : {}) });
          }
        });
        if (still.size === 0) return this.syncPool();
        this.apply({ type: 'prepareBatchDone', time: this.clock.now(), batch, latencyMs: this.clock.now() - started, ...(bad.length ? { failed: bad } : {}) });
      },
      (e: unknown) => {
        if (timer !== undefined) this.clock.cancel(timer);
        failed(errorMessage(e), false, noRetry(e));
      },
    );
  }

  /** Runs one prepared item on a device worker (the engine's `startDevice`); answers `deviceDone` or `deviceFailed` (also past deviceTimeoutMs). */
  startDevice(item: ItemView, attempt: number, device: number, worker: number): void {
    const job = this.jobs.get(item.jobId);
    const prev = this.flights.get(item.id);
    if (!job || !prev || !prev.hasPrepared) return;
    // The device takes the prepared data: a fresh flight for the device step.
    const prepared = prev.prepared as P;
    const f: Flight<P> = { controller: new AbortController(), prepared, onDevice: true };
    this.flights.set(item.id, f);
    const task: DeviceTask<I, P> = { jobId: item.jobId, kind: item.kind, partition: item.partition, partitions: job.partitions, input: job.input, prepared, device, worker, signal: f.controller.signal };
    const failed = (reason: string, final = false, workerLost = false) => {
      if (this.flights.get(item.id) !== f) return;
      this.land(item.id, f, new StokerError('E_DEVICE_FAILED', reason));
      this.stepFailed(item, 'device', reason, { device, worker });
      this.apply({ type: 'deviceFailed', time: this.clock.now(), item: item.id, attempt, reason, ...(final ? { final } : {}), ...(workerLost ? { workerLost } : {}) });
    };
    const timeout = () => failed(timeoutReason(this.deviceTimeoutMs, worker));
    if (Number.isFinite(this.deviceTimeoutMs)) f.timer = this.clock.schedule(timeout, this.deviceTimeoutMs);
    // The device step has consumed the prepared data, or given it up, once run() settles: only then
    // may it be reused — and before the engine hears of it, so the next preparation can reuse it.
    // (The budget hears of the freed buffer after the engine has released the item's reservation.)
    let started = this.clock.now();
    // The device began the step after waiting to be ready (a process or thread starting; or began it
    // again, sent afresh to a new thread after another's step ended the one it ran on): the step's
    // timeout and wall time count from now, not from the wait's start.
    task.begin = () => {
      if (this.flights.get(item.id) !== f) return;
      started = this.clock.now();
      if (f.timer !== undefined) {
        this.clock.cancel(f.timer);
        f.timer = this.clock.schedule(timeout, this.deviceTimeoutMs);
      }
    };
    settled(() => this.workload.run(task)).then(
      (r) => {
        this.workload.release?.(prepared);
        if (this.flights.get(item.id) !== f) return this.syncPool();
        // (An answer out of the contract is the workload's code, and would come again: no retry — a job failed "(after 2 attempts)" for it.)
        if (typeof r !== 'object' || r === null || !('output' in r)) {
          return failed(`the device step returned ${JSON.stringify(r) ?? String(r)}: run() must resolve to { output, busyMs? }`, true);
        }
        const { output, busyMs } = r;
        const busy = busyMs === undefined ? this.clock.now() - started : busyMs;
        if (typeof busy !== 'number' || !Number.isFinite(busy) || busy < 0) {
          return failed(`the device step returned busyMs = ${shown(busy)}: busyMs must be a finite number ≥ 0 (ms the item occupied the worker), or left out to use the step's wall time`, true);
        }
        this.land(item.id, f);
        job.outputs[item.partition] = output;
        this.apply({ type: 'deviceDone', time: this.clock.now(), item: item.id, attempt, busyMs: busy });
      },
      (e: unknown) => {
        this.workload.release?.(prepared);
        if (this.flights.get(item.id) !== f) return this.syncPool();
        failed(errorMessage(e), noRetry(e), workerLostWith(e));
      },
    );
  }

  /**
   * Runs a batch as one device step. Each item has its own flight (a withdrawn item is aborted
   * alone; the engine ends the batch when its last one goes); the answer names the batch.
   */
  startBatch(batch: number, items: readonly ItemView[], device: number, worker: number): void {
    const runBatch = this.workload.runBatch as NonNullable<Workload<I, P, O, R>['runBatch']>;
    // The device takes each item's prepared data: a fresh flight per item for the device step.
    const entries: { item: ItemView; f: Flight<P>; outputs: O[] }[] = [];
    const tasks: DeviceTask<I, P>[] = [];
    /** Items whose prepared data is not here (never expected): they fail alone, the rest run. */
    const missing: { item: number; reason: string }[] = [];
    for (const item of items) {
      const job = this.jobs.get(item.jobId);
      const prev = this.flights.get(item.id);
      if (!job || !prev || !prev.hasPrepared) {
        missing.push({ item: item.id, reason: 'its prepared data is not in this runtime' });
        continue;
      }
      const f: Flight<P> = { controller: new AbortController(), prepared: prev.prepared, onDevice: true };
      this.flights.set(item.id, f);
      entries.push({ item, f, outputs: job.outputs });
      tasks.push({ jobId: item.jobId, kind: item.kind, partition: item.partition, partitions: job.partitions, input: job.input, prepared: prev.prepared as P, device, worker, signal: f.controller.signal });
    }
    if (entries.length === 0) {
      // (Answered after the step that started it, as a device would.)
      queueMicrotask(() => this.apply({ type: 'batchDone', time: this.clock.now(), batch, busyMs: 0, failed: missing }));
      return;
    }
    /** The items still in this batch (not withdrawn, not yet answered). */
    const live = () => entries.filter((e) => this.flights.get(e.item.id) === e.f);
    const failed = (reason: string, final = false, workerLost = false) => {
      const still = live();
      for (const e of still) {
        this.land(e.item.id, e.f, new StokerError('E_DEVICE_FAILED', reason));
        this.stepFailed(e.item, 'device', reason, { device, worker });
      }
      if (still.length > 0) this.apply({ type: 'batchFailed', time: this.clock.now(), batch, reason, ...(final ? { final } : {}), ...(workerLost ? { workerLost } : {}) });
    };
    const timeout = () => failed(timeoutReason(this.deviceTimeoutMs, worker));
    let timer = Number.isFinite(this.deviceTimeoutMs) ? this.clock.schedule(timeout, this.deviceTimeoutMs) : undefined;
    let settledAlready = false;
    // As with one item: the prepared data is reusable once the step settles, before the engine hears of it.
    const settle = () => {
      settledAlready = true;
      if (timer !== undefined) this.clock.cancel(timer);
      for (const e of entries) this.workload.release?.(e.f.prepared as P);
    };
    let started = this.clock.now();
    // As with one item: once the device begins the batch (any task's begin()), its timeout and wall time count from then.
    const begin = () => {
      if (settledAlready || live().length === 0) return;
      started = this.clock.now();
      if (timer !== undefined) {
        this.clock.cancel(timer);
        timer = this.clock.schedule(timeout, this.deviceTimeoutMs);
      }
    };
    for (const t of tasks) t.begin = begin;
    settled(() => runBatch.call(this.workload, tasks)).then(
      (r) => {
        settle();
        if (live().length === 0) return this.syncPool();
        if (typeof r !== 'object' || r === null) return failed(`the batch step returned ${JSON.stringify(r) ?? String(r)}: runBatch() must resolve to { results, busyMs? }`);
        const { results, busyMs } = r;
        const busy = busyMs === undefined ? this.clock.now() - started : busyMs;
        if (typeof busy !== 'number' || !Number.isFinite(busy) || busy < 0) {
          return failed(`the batch step returned busyMs = ${shown(busy)}: busyMs must be a finite number ≥ 0 (ms the batch occupied the worker), or left out to use the step's wall time`);
        }
        if (!Array.isArray(results) || results.length !== tasks.length) {
          return failed(`the batch step returned ${Array.isArray(results) ? results.length : 'no'} results for ${tasks.length} items: return one { output } or { error } per task, in order`);
        }
        const wrong = results.findIndex((r) => typeof r !== 'object' || r === null || !('output' in r || 'error' in r));
        if (wrong >= 0) return failed(`the batch step's result ${wrong} is ${JSON.stringify(results[wrong]) ?? String(results[wrong])}: each result must be { output } or { error }`);
        const bad = [...missing];
        entries.forEach((e, i) => {
          if (this.flights.get(e.item.id) !== e.f) return;
          const r = results[i] as BatchResult<O>;
          if ('error' in r) {
            this.stepFailed(e.item, 'device', String(r.error), { device, worker });
            bad.push({ item: e.item.id, reason: String(r.error), ...(noRetry(r) ? { final: true } : {}) });
          } else e.outputs[e.item.partition] = r.output;
          this.land(e.item.id, e.f);
        });
        this.apply({ type: 'batchDone', time: this.clock.now(), batch, busyMs: busy, ...(bad.length ? { failed: bad } : {}) });
      },
      (e: unknown) => {
        settle();
        if (live().length === 0) return this.syncPool();
        failed(errorMessage(e), noRetry(e), workerLostWith(e));
      },
    );
  }
}

/**
 * A workload step's answer as a promise, whatever the step did: a plain value is resolved, a throw
 * rejected (a stage that was not async crashed the process, or left its job and its memory held for good).
 */
function settled<T>(step: () => T | Promise<T>): Promise<T> {
  return new Promise<T>((resolve) => resolve(step()));
}

/** Why a preparation (or a preparation batch) failed that did not answer in time: the timeout, named both ways it is set. */
function prepareTimeoutReason(what: string, ms: number): string {
  return `no ${what} within the preparation timeout, ${ms} ms (the runtime's prepareTimeoutMs; engine.prepareTimeoutS in a service config)`;
}

/** Why a device step failed that did not answer in time: the worker, and the timeout (named both ways it is set). */
function timeoutReason(ms: number, worker: number): string {
  return `worker ${worker}: no answer within the device timeout, ${ms} ms (the runtime's deviceTimeoutMs; engine.deviceTimeoutS in a service config)`;
}

/** An error's message, or the thrown value as a string. */
export function errorMessage(e: unknown): string {
  if (e instanceof Error) return e.message;
  // What piscina rejects with where a thread's value could not be sent back: an empty object.
  if (e !== null && typeof e === 'object' && Object.keys(e).length === 0) return 'its thread gave no reason (a prepared value that cannot be sent between threads, such as a function or a promise, fails so): return plain data — objects, arrays, numbers, strings, typed arrays';
  return String(e);
}

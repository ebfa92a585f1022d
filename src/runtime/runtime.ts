import { createPacer, Engine, OccupancyMeter, StokerError, type TimelineRecorder, type Command, type EngineEvent, type ItemView, type JobSpec } from '../core/index.js';
import { systemClock, type Clock } from './clock.js';
import type { BatchResult, DeviceTask, PartitionTask, PrepareResult, RuntimeOptions, RuntimeStatus, Workload } from './workload.js';

export type { BatchResult, DeviceTask, PartitionTask, PrepareResult, RuntimeOptions, RuntimeStatus, Workload } from './workload.js';

interface JobCtx<I, O, R> {
  input: I;
  partitions: number;
  outputs: O[];
  resolve: (r: R) => void;
  reject: (e: Error) => void;
}

interface Flight<P> {
  controller: AbortController;
  prepared?: P;
  /** The device step has the prepared data: it frees it when run() settles, not before. */
  onDevice?: boolean;
  timer?: unknown;
}

/**
 * The real-time driver of the core engine: the same state machine as the simulator, fed with
 * events from real preparations and devices, its single timer on a real (or injected) clock.
 */
export class Runtime<I, P, O, R> {
  readonly engine: Engine;
  /** Each worker's busy time including the running part of its item: true in every window (see OccupancyMeter). */
  private readonly occupancy: OccupancyMeter;
  private readonly clock: Clock;
  private readonly workload: Workload<I, P, O, R>;
  private readonly deviceTimeoutMs: number;
  private readonly timeline: TimelineRecorder | undefined;
  private readonly onStep: ((event: EngineEvent, commands: readonly Command[]) => void) | undefined;
  private readonly jobs = new Map<string, JobCtx<I, O, R>>();
  /** Jobs whose engine part has ended but whose finish() is still running. */
  private finishing = 0;
  private readonly flights = new Map<number, Flight<P>>();
  private timer: unknown = undefined;
  private closing = false;
  private closed: Promise<void> | undefined;
  private idleWaiters: (() => void)[] = [];
  /** Idle pooled bytes the engine's budget was last told about, and a guard against re-entry. */
  private heldBytes = 0;
  private syncingPool = false;
  /** While close() waits: checks after every event whether it may go on. */
  private settleWaiter: (() => void) | undefined;

  constructor(options: RuntimeOptions<I, P, O, R>) {
    this.workload = options.workload;
    this.clock = options.clock ?? systemClock;
    this.deviceTimeoutMs = options.deviceTimeoutMs ?? Infinity;
    this.timeline = options.timeline;
    this.onStep = options.onStep;
    if (!(this.deviceTimeoutMs > 0)) throw new StokerError('E_INVALID_OPTION', `deviceTimeoutMs must be > 0 (got ${String(options.deviceTimeoutMs)})`);
    const pacer = typeof options.pacer === 'object' ? options.pacer : createPacer(options.pacer ?? 'stoker', options.pacerOptions ?? {});
    if (options.devices.some((d) => d.batch) && typeof options.workload.runBatch !== 'function') {
      throw new StokerError('E_INVALID_OPTION', 'a device has batch, but the workload has no runBatch(tasks): give it one, or leave batch out');
    }
    const grouped = Object.entries(options.kinds ?? {}).find(([, k]) => k?.prepareBatch !== undefined);
    if (grouped && typeof options.workload.prepareBatch !== 'function') {
      throw new StokerError('E_INVALID_OPTION', `kinds.${grouped[0]} has prepareBatch, but the workload has no prepareBatch(tasks): give it one, or leave prepareBatch out`);
    }
    this.engine = new Engine({
      devices: options.devices,
      ...(options.kinds ? { kinds: options.kinds } : {}),
      pacer,
      budgetBytes: options.budgetBytes ?? Infinity,
      maxPreparing: Math.min(options.maxPreparing ?? Infinity, options.workload.prepareSlots ?? Infinity),
      retries: options.retries ?? 1,
    });
    this.occupancy = new OccupancyMeter(options.devices.map((d) => d.workers));
  }

  /** Busy ms of each device worker up to now (`[device][worker]`), the running part of items in flight included: the busy time of any window between two reads is at most its length. */
  workerBusyMs(at = this.clock.now()): number[][] {
    return this.occupancy.busyMs(at);
  }

  /** Current time on the runtime's clock (deadlines are absolute times on it). */
  now(): number {
    return this.clock.now();
  }

  /**
   * Submits a job; resolves with its result, rejects with a StokerError (code and reason) when it
   * fails or is cancelled. Invalid specs and duplicate ids reject at once.
   */
  submit(spec: JobSpec, input: I): Promise<R> {
    if (this.closing) return Promise.reject(new StokerError('E_CANCELLED', `job ${JSON.stringify(spec.id)} not accepted: the runtime is shutting down`));
    return new Promise<R>((resolve, reject) => {
      const existing = this.jobs.get(spec.id);
      try {
        this.apply({ type: 'submit', time: this.clock.now(), job: spec }, () => {
          if (!existing) this.jobs.set(spec.id, { input, partitions: spec.partitions, outputs: [], resolve, reject });
        });
      } catch (e) {
        reject(e as Error);
        return;
      }
      // An identical resubmit of a live job: answer this caller together with the first one.
      if (existing) {
        const first = { resolve: existing.resolve, reject: existing.reject };
        existing.resolve = (r) => (first.resolve(r), resolve(r));
        existing.reject = (e) => (first.reject(e), reject(e));
      }
    });
  }

  /** Cancels a job: its partitions are withdrawn wherever they are; its waiter gets E_CANCELLED. */
  cancel(jobId: string): void {
    this.apply({ type: 'cancel', time: this.clock.now(), jobId });
  }

  status(): RuntimeStatus {
    return { now: this.clock.now(), jobs: this.jobs.size, counters: this.engine.snapshot, pacer: this.engine.pacer.state(), closing: this.closing };
  }

  /** Resolves when every job has been answered (useful for demos and tests). */
  idle(): Promise<void> {
    if (this.jobs.size === 0 && this.finishing === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Stops accepting jobs, lets running jobs finish for up to `timeoutMs`, cancels the rest (their
   * waiters get E_CANCELLED), then closes the workload's threads. With `drain`, no partition
   * starts any more: only those in flight (preparing, waiting, on a device) finish within the
   * timeout — a service that will resume its jobs later stops sooner that way. Safe to call twice
   * (the first call's options hold).
   */
  close(timeoutMs = 10_000, options: { drain?: boolean } = {}): Promise<void> {
    this.closed ??= (async () => {
      this.closing = true;
      if (options.drain) this.apply({ type: 'drain', time: this.clock.now() });
      const settled = options.drain ? this.drained() : this.idle();
      await new Promise<void>((resolve) => {
        const t = this.clock.schedule(resolve, timeoutMs);
        void settled.then(() => {
          this.clock.cancel(t);
          resolve();
        });
      });
      this.settleWaiter = undefined;
      for (const id of [...this.jobs.keys()]) this.apply({ type: 'cancel', time: this.clock.now(), jobId: id });
      if (this.timer !== undefined) this.clock.cancel(this.timer);
      this.timer = undefined;
      await this.workload.close?.();
    })();
    return this.closed;
  }

  /** Resolves once no partition is preparing, waiting or on a device (checked after every event). */
  private drained(): Promise<void> {
    const s = this.engine.snapshot;
    const empty = () => s.preparing + s.waiting + s.onDevice === 0;
    if (empty()) return Promise.resolve();
    return new Promise((resolve) => {
      this.settleWaiter = () => {
        if (empty()) resolve();
      };
    });
  }

  /** Applies one event and carries out its commands. `before` runs after validation, before the commands. */
  private apply(event: EngineEvent, before?: () => void): void {
    const cmds = this.engine.apply(event);
    this.timeline?.record(event, cmds, this.engine.snapshot, this.engine.budget.held);
    this.occupancy.record(event, cmds);
    this.onStep?.(event, cmds);
    before?.();
    for (const c of cmds) this.carryOut(c);
    this.syncPool();
    this.settleWaiter?.();
  }

  /**
   * Charges the pool's idle bytes to the budget (memoryHeld); when the budget blocks while idle
   * buffers exist, frees them first: idle memory is a cache, never a reason to stall.
   */
  private syncPool(): void {
    const pool = this.workload.pool;
    if (!pool || this.syncingPool) return;
    this.syncingPool = true;
    try {
      // Telling the engine may dispatch, and a dispatch may take an idle buffer: until it settles.
      for (let round = 0; round < 4; round++) {
        if (this.engine.snapshot.budgetBlocked && pool.stats().idleBytes > 0) pool.trim(true);
        const idle = pool.stats().idleBytes;
        if (idle === this.heldBytes) break;
        this.heldBytes = idle;
        this.apply({ type: 'memoryHeld', time: this.clock.now(), bytes: idle });
      }
    } finally {
      this.syncingPool = false;
    }
  }

  /** Returns prepared data to the workload outside an engine step, then updates the budget's view of the pool. */
  private release(prepared: P): void {
    this.workload.release?.(prepared);
    this.syncPool();
  }

  private carryOut(c: Command): void {
    switch (c.type) {
      case 'startPrepare':
        this.startPrepare(c.item, c.attempt);
        break;
      case 'startPrepareBatch':
        this.startPrepareBatch(c.batch, c.items);
        break;
      case 'startDevice':
        this.startDevice(c.item, c.attempt, c.device, c.worker);
        break;
      case 'startBatch':
        this.startBatch(c.batch, c.items, c.device, c.worker);
        break;
      case 'abort': {
        const f = this.flights.get(c.item.id);
        if (f) this.land(c.item.id, f, new StokerError('E_CANCELLED', c.reason));
        break;
      }
      case 'finishJob':
        this.finishJob(c);
        break;
      case 'wakeAt':
        if (this.timer !== undefined) this.clock.cancel(this.timer);
        this.timer = Number.isFinite(c.time)
          ? this.clock.schedule(() => {
              this.timer = undefined;
              this.apply({ type: 'tick', time: this.clock.now() });
            }, c.time - this.clock.now())
          : undefined;
        break;
    }
  }

  /** Ends an item's flight: aborts its work; frees its prepared data unless a device step still holds it. */
  private land(id: number, f: Flight<P>, reason?: Error): void {
    this.flights.delete(id);
    if (f.timer !== undefined) this.clock.cancel(f.timer);
    if (reason) f.controller.abort(reason);
    if (f.prepared !== undefined && !f.onDevice) this.workload.release?.(f.prepared);
  }

  private startPrepare(item: ItemView, attempt: number): void {
    const job = this.jobs.get(item.jobId);
    if (!job) return;
    const f: Flight<P> = { controller: new AbortController() };
    this.flights.set(item.id, f);
    const started = this.clock.now();
    const task: PartitionTask<I> = { jobId: item.jobId, kind: item.kind, partition: item.partition, partitions: job.partitions, input: job.input, signal: f.controller.signal };
    this.workload.prepare(task).then(
      (prepared) => {
        if (this.flights.get(item.id) !== f || f.controller.signal.aborted) {
          this.release(prepared);
          return;
        }
        f.prepared = prepared;
        this.apply({ type: 'prepared', time: this.clock.now(), item: item.id, attempt, latencyMs: this.clock.now() - started });
      },
      (e: unknown) => {
        if (this.flights.get(item.id) !== f) return;
        this.flights.delete(item.id);
        this.apply({ type: 'prepareFailed', time: this.clock.now(), item: item.id, attempt, reason: message(e) });
      },
    );
  }

  /**
   * Prepares a batch as one step. Each item has its own flight (a withdrawn item is aborted alone;
   * the engine withdraws the batch with its last one); the answer names the batch.
   */
  private startPrepareBatch(batch: number, items: readonly ItemView[]): void {
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
    const failed = (reason: string) => {
      const still = live();
      for (const e of still) this.flights.delete(e.item.id);
      if (still.length > 0) this.apply({ type: 'prepareBatchFailed', time: this.clock.now(), batch, reason });
      else this.syncPool();
    };
    const started = this.clock.now();
    prepareBatch.call(this.workload, tasks).then(
      (results) => {
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
          if ('prepared' in r) e.f.prepared = r.prepared;
          else {
            this.flights.delete(e.item.id);
            bad.push({ item: e.item.id, reason: String(r.error) });
          }
        });
        if (still.size === 0) return this.syncPool();
        this.apply({ type: 'prepareBatchDone', time: this.clock.now(), batch, latencyMs: this.clock.now() - started, ...(bad.length ? { failed: bad } : {}) });
      },
      (e: unknown) => failed(message(e)),
    );
  }

  private startDevice(item: ItemView, attempt: number, device: number, worker: number): void {
    const job = this.jobs.get(item.jobId);
    const prev = this.flights.get(item.id);
    if (!job || !prev || prev.prepared === undefined) return;
    // The device takes the prepared data: a fresh flight for the device step.
    const prepared = prev.prepared;
    const f: Flight<P> = { controller: new AbortController(), prepared, onDevice: true };
    this.flights.set(item.id, f);
    const task: DeviceTask<I, P> = { jobId: item.jobId, kind: item.kind, partition: item.partition, partitions: job.partitions, input: job.input, prepared, device, worker, signal: f.controller.signal };
    const failed = (reason: string) => {
      if (this.flights.get(item.id) !== f) return;
      this.land(item.id, f, new StokerError('E_DEVICE_FAILED', reason));
      this.apply({ type: 'deviceFailed', time: this.clock.now(), item: item.id, attempt, reason });
    };
    if (Number.isFinite(this.deviceTimeoutMs)) {
      f.timer = this.clock.schedule(() => failed(`no answer within deviceTimeoutMs = ${this.deviceTimeoutMs} ms`), this.deviceTimeoutMs);
    }
    // The device step has consumed the prepared data, or given it up, once run() settles: only then
    // may it be reused — and before the engine hears of it, so the next preparation can reuse it.
    // (The budget hears of the freed buffer after the engine has released the item's reservation.)
    const started = this.clock.now();
    this.workload.run(task).then(
      ({ output, busyMs }) => {
        this.workload.release?.(prepared);
        if (this.flights.get(item.id) !== f) return this.syncPool();
        const busy = busyMs === undefined ? this.clock.now() - started : busyMs;
        if (typeof busy !== 'number' || !Number.isFinite(busy) || busy < 0) {
          return failed(`the device step returned busyMs = ${String(busy)}: busyMs must be a finite number ≥ 0 (ms the item occupied the worker), or left out to use the step's wall time`);
        }
        this.land(item.id, f);
        job.outputs[item.partition] = output;
        this.apply({ type: 'deviceDone', time: this.clock.now(), item: item.id, attempt, busyMs: busy });
      },
      (e: unknown) => {
        this.workload.release?.(prepared);
        if (this.flights.get(item.id) !== f) return this.syncPool();
        failed(message(e));
      },
    );
  }

  /**
   * Runs a batch as one device step. Each item has its own flight (a withdrawn item is aborted
   * alone; the engine ends the batch when its last one goes); the answer names the batch.
   */
  private startBatch(batch: number, items: readonly ItemView[], device: number, worker: number): void {
    const runBatch = this.workload.runBatch as NonNullable<Workload<I, P, O, R>['runBatch']>;
    // The device takes each item's prepared data: a fresh flight per item for the device step.
    const entries: { item: ItemView; f: Flight<P>; outputs: O[] }[] = [];
    const tasks: DeviceTask<I, P>[] = [];
    /** Items whose prepared data is not here (never expected): they fail alone, the rest run. */
    const missing: { item: number; reason: string }[] = [];
    for (const item of items) {
      const job = this.jobs.get(item.jobId);
      const prev = this.flights.get(item.id);
      if (!job || !prev || prev.prepared === undefined) {
        missing.push({ item: item.id, reason: 'its prepared data is not in this runtime' });
        continue;
      }
      const f: Flight<P> = { controller: new AbortController(), prepared: prev.prepared, onDevice: true };
      this.flights.set(item.id, f);
      entries.push({ item, f, outputs: job.outputs });
      tasks.push({ jobId: item.jobId, kind: item.kind, partition: item.partition, partitions: job.partitions, input: job.input, prepared: prev.prepared, device, worker, signal: f.controller.signal });
    }
    if (entries.length === 0) {
      // (Answered after the step that started it, as a device would.)
      queueMicrotask(() => this.apply({ type: 'batchDone', time: this.clock.now(), batch, busyMs: 0, failed: missing }));
      return;
    }
    /** The items still in this batch (not withdrawn, not yet answered). */
    const live = () => entries.filter((e) => this.flights.get(e.item.id) === e.f);
    const failed = (reason: string) => {
      const still = live();
      for (const e of still) this.land(e.item.id, e.f, new StokerError('E_DEVICE_FAILED', reason));
      if (still.length > 0) this.apply({ type: 'batchFailed', time: this.clock.now(), batch, reason });
    };
    const timer = Number.isFinite(this.deviceTimeoutMs) ? this.clock.schedule(() => failed(`no answer within deviceTimeoutMs = ${this.deviceTimeoutMs} ms`), this.deviceTimeoutMs) : undefined;
    // As with one item: the prepared data is reusable once the step settles, before the engine hears of it.
    const settle = () => {
      if (timer !== undefined) this.clock.cancel(timer);
      for (const e of entries) this.workload.release?.(e.f.prepared as P);
    };
    const started = this.clock.now();
    runBatch.call(this.workload, tasks).then(
      ({ results, busyMs }) => {
        settle();
        if (live().length === 0) return this.syncPool();
        const busy = busyMs === undefined ? this.clock.now() - started : busyMs;
        if (typeof busy !== 'number' || !Number.isFinite(busy) || busy < 0) {
          return failed(`the batch step returned busyMs = ${String(busy)}: busyMs must be a finite number ≥ 0 (ms the batch occupied the worker), or left out to use the step's wall time`);
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
          if ('error' in r) bad.push({ item: e.item.id, reason: String(r.error) });
          else e.outputs[e.item.partition] = r.output;
          this.land(e.item.id, e.f);
        });
        this.apply({ type: 'batchDone', time: this.clock.now(), batch, busyMs: busy, ...(bad.length ? { failed: bad } : {}) });
      },
      (e: unknown) => {
        settle();
        if (live().length === 0) return this.syncPool();
        failed(message(e));
      },
    );
  }

  private finishJob(c: Extract<Command, { type: 'finishJob' }>): void {
    const job = this.jobs.get(c.jobId);
    if (!job) return;
    this.jobs.delete(c.jobId);
    this.finishing++;
    const settle = () => {
      this.finishing--;
      if (this.jobs.size === 0 && this.finishing === 0) for (const w of this.idleWaiters.splice(0)) w();
    };
    if (c.state !== 'done') {
      job.reject(new StokerError((c.code ?? 'E_CANCELLED') as StokerError['code'], c.reason ?? c.state));
      settle();
      return;
    }
    Promise.resolve()
      .then(() => this.workload.finish({ jobId: c.jobId, input: job.input, outputs: job.outputs }))
      .then(job.resolve, (e: unknown) => job.reject(new StokerError('E_FINISH_FAILED', `job ${c.jobId}: finishing failed: ${message(e)}`)))
      .finally(settle);
  }
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

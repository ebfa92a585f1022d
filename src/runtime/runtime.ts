import { isDeepStrictEqual } from 'node:util';
import { checkedPacer, createPacer, Engine, PACER_NAMES, OccupancyMeter, StokerError, unknownPacerOptions, type DeviceSpec, type StokerErrorCode, type TimelineRecorder, type Command, type EngineEvent, type ItemView, type JobSpec, type PacerState } from '../core/index.js';
import { checkKeys, shown } from '../core/checks.js';
import { systemClock, type Clock } from './clock.js';
import { errorMessage, Flights, type FlightJob } from './flights.js';
import type { RuntimeOptions, RuntimeStatus, StepFailure, Workload } from './workload.js';

/** The Runtime's options: any other is misspelt (a `budgetbytes` was read as absent: no memory limit, silently). */
const RUNTIME_OPTIONS = ['workload', 'devices', 'kinds', 'pacer', 'pacerOptions', 'budgetBytes', 'maxPreparing', 'retries', 'deviceTimeoutMs', 'prepareTimeoutMs', 'clock', 'timeline', 'onStep', 'onStepFailed'] as const satisfies readonly (keyof RuntimeOptions<unknown, unknown, unknown, unknown>)[];

export type { BatchResult, DeviceTask, PartitionTask, PrepareResult, RuntimeOptions, RuntimeStatus, StepFailure, Workload } from './workload.js';

/** While a drain waits on work only unreachable devices could run, how often it looks whether they still are (ms). */
const DRAIN_LOOK_MS = 250;
/** The engine's refusals of an event before anything changed (a submit that is not a valid job, events out of order): the caller's error, not the runtime's. */
const REFUSED_UNCHANGED = new Set<StokerErrorCode>(['E_INVALID_JOB', 'E_DUPLICATE_JOB', 'E_DUPLICATE_KEY', 'E_OVERSIZE', 'E_INVALID_EVENT', 'E_TIME_BACKWARDS']);

interface JobCtx<I, O, R> extends FlightJob<I, O> {
  resolve: (r: R) => void;
  reject: (e: Error) => void;
  /** The job's own number of each partition (JobSpec.partitionNumbers), if given. */
  numbers?: readonly number[];
}

/**
 * The real-time driver of the core engine: the same state machine as the simulator, fed with
 * events from real preparations and devices, its single timer on a real (or injected) clock.
 */
export class Runtime<I = unknown, P = unknown, O = unknown, R = unknown> {
  readonly engine: Engine;
  /** Each worker's busy time including the running part of its item: true in every window (see OccupancyMeter). */
  private readonly occupancy: OccupancyMeter;
  private readonly clock: Clock;
  private readonly workload: Workload<I, P, O, R>;
  private readonly deviceTimeoutMs: number;
  private readonly timeline: TimelineRecorder | undefined;
  private readonly onStep: RuntimeOptions<unknown, unknown, unknown, unknown>['onStep'];
  private readonly onStepFailed: ((failure: StepFailure) => void) | undefined;
  /** The listeners that have thrown (each is warned of once). */
  private readonly warned = new Set<string>();
  /** Failures of the step being answered, told to onStepFailed once the engine has heard of them. */
  private readonly failures: (Omit<StepFailure, 'retried' | 'counted'> & { item: ItemView })[] = [];
  private readonly jobs = new Map<string, JobCtx<I, O, R>>();
  /** Jobs whose engine part has ended but whose finish() is still running. */
  private readonly finishing = new Map<JobCtx<I, O, R>, string>();
  /** Each item's work in flight: the preparations and device steps the engine started. */
  private readonly flights: Flights<I, P, O, R>;
  private timer: unknown = undefined;
  private closing = false;
  private closed: Promise<void> | undefined;
  private idleWaiters: (() => void)[] = [];
  /** When the pool's idle TTL was last applied (the runtime's clock, ms): at most once a second. */
  private trimmedAt = -Infinity;
  /** While close() waits: checks after every event whether it may go on. */
  private settleWaiter: (() => void) | undefined;
  /** The kinds prepared in batches (kinds.<name>.prepareBatch): the others need the workload's prepare. */
  private readonly batchedKinds: ReadonlySet<string>;
  /** Set when an engine step failed (a pacer that threw or answered out of contract): every job failed with it, and later ones do. */
  private failed: StokerError | undefined;
  /** The latest time an event had (the clock's): the next may not be earlier. */
  private clockSeen = -Infinity;
  /** Partitions still in flight when close() stopped waiting (see cutShort), and why. */
  private cutShortCount = 0;
  private cutShortWhy: 'timeout' | 'unreachable' | undefined;

  constructor(options: RuntimeOptions<I, P, O, R>) {
    checkKeys(options, RUNTIME_OPTIONS, '', 'the Runtime options', 'E_INVALID_OPTION');
    this.workload = options.workload;
    this.clock = options.clock ?? systemClock;
    this.deviceTimeoutMs = options.deviceTimeoutMs ?? Infinity;
    const prepareTimeoutMs = options.prepareTimeoutMs ?? Infinity;
    this.timeline = options.timeline;
    this.onStep = options.onStep;
    this.onStepFailed = options.onStepFailed;
    // (Each was taken as it was, and failed at its first use: a warning per listener, "this.clock.now is not a function".)
    for (const name of ['onStep', 'onStepFailed'] as const) {
      if (options[name] !== undefined && typeof options[name] !== 'function') throw new StokerError('E_INVALID_OPTION', `${name} must be a function (got ${shown(options[name])})`);
    }
    if (typeof this.clock?.now !== 'function' || typeof this.clock.schedule !== 'function' || typeof this.clock.cancel !== 'function') {
      throw new StokerError('E_INVALID_OPTION', 'clock must have now(), schedule(fn, ms) and cancel(handle): leave it out for the system clock, or give a ManualClock');
    }
    if (typeof options.pacer === 'object' && options.pacerOptions !== undefined) {
      throw new StokerError('E_INVALID_OPTION', 'pacerOptions are for a built-in pacer named by pacer: a pacer object of your own takes its options where it is made — leave pacerOptions out');
    }
    if (typeof this.deviceTimeoutMs !== 'number' || !(this.deviceTimeoutMs > 0)) throw new StokerError('E_INVALID_OPTION', `deviceTimeoutMs must be a number of ms > 0, or Infinity (got ${shown(options.deviceTimeoutMs)})`);
    if (typeof prepareTimeoutMs !== 'number' || !(prepareTimeoutMs > 0)) throw new StokerError('E_INVALID_OPTION', `prepareTimeoutMs must be a number of ms > 0, or Infinity (got ${shown(options.prepareTimeoutMs)})`);
    // (A module's default export passed as it is read "unknown pacer undefined".)
    if (typeof options.pacer === 'function') throw new StokerError('E_INVALID_OPTION', `pacer is a function — a pacer module's factory? Pass the pacer it makes, pacer: createPacer({ targetWaiting: 4, … }), or a built-in's name (${PACER_NAMES.join(', ')})`);
    // A pacer object of the caller's is checked as a module's is (a NaN from nextDispatchAt stalled every job silently; one without state() broke status()).
    const pacer =
      typeof options.pacer === 'object'
        ? checkedPacer(options.pacer, { origin: 'given to the Runtime', made: 'the pacer given to the Runtime is', fallbackName: 'custom', error: (message) => new StokerError('E_INVALID_OPTION', message) })
        : createPacer(options.pacer ?? 'stoker', options.pacerOptions ?? {});
    // A misspelt pacer option would change nothing, silently (stoker serve refuses it too).
    const [unknown] = typeof options.pacer === 'object' ? [] : unknownPacerOptions(options.pacer ?? 'stoker', options.pacerOptions ?? {});
    if (unknown) throw new StokerError('E_INVALID_OPTION', `pacerOptions.${unknown.option}: ${unknown.message}`);
    if (!options.workload) throw new StokerError('E_INVALID_OPTION', 'workload is missing: give the Runtime { workload: { prepare, run, finish }, devices, … } (a ThreadedWorkload, or an object of your own)');
    if (!Array.isArray(options.devices) || options.devices.length === 0) throw new StokerError('E_INVALID_OPTION', 'devices must list at least one device, e.g. [{ workers: 2 }]');
    if (typeof options.workload.run !== 'function' && options.devices.some((d) => !d?.batch)) {
      throw new StokerError('E_INVALID_OPTION', 'the workload has no run(task): give it one (a device without batch runs one item at a time through it)');
    }
    if (typeof options.workload.finish !== 'function') throw new StokerError('E_INVALID_OPTION', "the workload has no finish(job): give it one (it makes a job's result from its partitions' outputs)");
    if (options.devices.some((d) => d?.batch) && typeof options.workload.runBatch !== 'function') {
      throw new StokerError('E_INVALID_OPTION', 'a device has batch, but the workload has no runBatch(tasks): give it one, or leave batch out');
    }
    const grouped = Object.entries(options.kinds ?? {}).find(([, k]) => k?.prepareBatch !== undefined);
    if (grouped && typeof options.workload.prepareBatch !== 'function') {
      throw new StokerError('E_INVALID_OPTION', `kinds.${grouped[0]} has prepareBatch, but the workload has no prepareBatch(tasks): give it one, or leave prepareBatch out`);
    }
    this.batchedKinds = new Set(Object.entries(options.kinds ?? {}).filter(([, k]) => k?.prepareBatch !== undefined).map(([name]) => name));
    if (typeof options.workload.prepare !== 'function' && this.batchedKinds.size === 0) {
      throw new StokerError('E_INVALID_OPTION', 'the workload has no prepare(task): give it one (or prepareBatch(tasks) with kinds.<name>.prepareBatch for the kinds prepared in batches)');
    }
    // The engine's device fields (a service gives name and kinds too), and a ThreadedWorkload's own (its entries given as they are).
    options.devices.forEach((d, i) => checkKeys(d, ['workers', 'batch', 'name', 'kinds', 'kind', 'threadPerDevice'], `devices[${i}].`, 'a Runtime device', 'E_INVALID_OPTION'));
    // (Steps on workers the workload does not have failed one by one as they came: a user trial.)
    const own = options.workload.deviceWorkers;
    if (own && (own.length !== options.devices.length || own.some((w, i) => w !== options.devices[i]?.workers))) {
      const list = (ws: readonly unknown[]) => `[${ws.map((w) => `{ workers: ${String(w)} }`).join(', ')}]`;
      throw new StokerError('E_INVALID_OPTION', `devices ${list(options.devices.map((d) => d.workers))} are not the workload's own ${list(own)}: give the Runtime the same devices as the workload`);
    }
    this.engine = new Engine({
      devices: options.devices.map((d): DeviceSpec => {
        if (typeof d !== 'object' || d === null) return d;
        const { workers, batch, name, kinds } = d as DeviceSpec;
        return { workers, ...(batch === undefined ? {} : { batch }), ...(name === undefined ? {} : { name }), ...(kinds === undefined ? {} : { kinds }) };
      }),
      ...(options.kinds ? { kinds: options.kinds } : {}),
      pacer,
      budgetBytes: options.budgetBytes ?? Infinity,
      // (A maxPreparing that is no number is the engine's to refuse: Math.min would make "5" 5.)
      maxPreparing: typeof options.maxPreparing === 'number' || options.maxPreparing === undefined ? Math.min(options.maxPreparing ?? Infinity, options.workload.prepareSlots ?? Infinity) : options.maxPreparing,
      retries: options.retries ?? 1,
    });
    // A fresh buffer frees idle ones of other sizes past the room beside the reservations first (the reservations count it).
    const budget = this.engine.budget;
    this.workload.pool?.limitIdleTo?.(() => budget.totalBytes - budget.used);
    this.occupancy = new OccupancyMeter(options.devices.map((d) => d.workers));
    this.flights = new Flights({ workload: this.workload, clock: this.clock, deviceTimeoutMs: this.deviceTimeoutMs, prepareTimeoutMs, jobs: this.jobs, apply: (event) => this.apply(event), syncPool: () => this.syncPool(), stepFailed: (item, stage, reason, where) => this.stepFailed(item, stage, reason, where) });
    // A worker the workload takes out of service (a process device's whose processes keep failing
    // to start) is a lost worker to the engine, until it is back: its item goes to the others.
    this.workload.watchWorkers?.((device, worker, up) => this.apply({ type: up ? 'workerReturned' : 'workerLost', time: this.clock.now(), device, worker }));
    // The pacer sees its devices at once: started from remembered or configured rates, it shows
    // them before the first job (a restarted server read capacity 0 and "bootstrap" till then).
    this.apply({ type: 'tick', time: this.clock.now() });
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
    if (this.failed) return Promise.reject(this.failed);
    if (this.closing) return Promise.reject(new StokerError('E_CANCELLED', `job ${JSON.stringify(spec.id)} not accepted: the runtime is shutting down`));
    return new Promise<R>((resolve, reject) => {
      const existing = this.jobs.get(spec.id);
      if (typeof this.workload.prepare !== 'function' && !this.batchedKinds.has(spec.kind)) {
        reject(new StokerError('E_INVALID_JOB', `job ${JSON.stringify(spec.id)}: kind ${JSON.stringify(spec.kind)} is not prepared in batches (kinds.<name>.prepareBatch: ${[...this.batchedKinds].join(', ')}), and the workload has no prepare(task) for it`));
        return;
      }
      // A resubmit shares the live job's result only where it is the same job: its input too (the other input's result was given).
      if (existing && !isDeepStrictEqual(existing.input, input)) {
        reject(new StokerError('E_DUPLICATE_JOB', `job ${JSON.stringify(spec.id)} is live with another input: a resubmit shares the live job's result only with the same spec and input — give this job another id`));
        return;
      }
      try {
        this.apply({ type: 'submit', time: this.clock.now(), job: spec }, () => {
          if (!existing) this.jobs.set(spec.id, { input, partitions: spec.partitions, outputs: [], resolve, reject, ...(spec.partitionNumbers ? { numbers: spec.partitionNumbers } : {}) });
        });
      } catch (e) {
        reject(e as Error);
        return;
      }
      // (The runtime failed within this step after the live job was answered.)
      if (this.failed) {
        reject(this.failed);
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

  /** Cancels a job: its partitions are withdrawn wherever they are; its waiter gets E_CANCELLED. False where no live job has that id (ended, or never submitted). */
  cancel(jobId: string): boolean {
    const live = this.jobs.has(jobId);
    this.apply({ type: 'cancel', time: this.clock.now(), jobId });
    return live;
  }

  status(): RuntimeStatus {
    // A pacer whose state() goes out of contract has failed as one whose step did (E_RUNTIME_FAILED:
    // status() threw, and the jobs went on under it).
    if (!this.failed) {
      try {
        return { now: this.clock.now(), jobs: this.jobs.size, counters: this.engine.snapshot, pacer: this.engine.pacer.state(), closing: this.closing };
      } catch (e) {
        this.fail(e);
      }
    }
    // (A failed runtime's pacer may be what failed: its state is not asked again.)
    const pacer: PacerState = { mode: 'hold', ratePerSec: null, intervalMs: null, terms: {} };
    return { now: this.clock.now(), jobs: this.jobs.size, counters: this.engine.snapshot, pacer, closing: this.closing, failed: (this.failed as StokerError).message };
  }

  /** After close(): the partitions still in flight (preparing, waiting, on a device) when its timeout ran out and they were withdrawn; 0 where all ended in time. */
  get cutShort(): number {
    return this.cutShortCount;
  }

  /** After close() with partitions cut short: whether its timeout ran out, or only devices whose endpoints refuse connections could run them (it went on at once). */
  get cutShortBecause(): 'timeout' | 'unreachable' | undefined {
    return this.cutShortWhy;
  }

  /** Resolves when every job has been answered (useful for demos and tests). */
  idle(): Promise<void> {
    if (this.jobs.size === 0 && this.finishing.size === 0) return Promise.resolve();
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
      let timedOut = false;
      await new Promise<void>((resolve) => {
        const t = this.clock.schedule(() => {
          timedOut = true;
          resolve();
        }, timeoutMs);
        void settled.then(() => {
          this.clock.cancel(t);
          resolve();
        });
      });
      this.settleWaiter = undefined;
      const left = this.engine.snapshot;
      this.cutShortCount = this.failed === undefined ? left.preparing + left.waiting + left.onDevice : 0;
      // (Left before the timeout: only unreachable endpoints could run them — see stranded.)
      this.cutShortWhy = this.cutShortCount === 0 ? undefined : timedOut ? 'timeout' : 'unreachable';
      // Nothing starts while the jobs are cancelled one by one: each cancel freed room, and the next
      // job's partition was started (its prepare() called, its memory reserved) only to be withdrawn.
      if (!options.drain) this.apply({ type: 'drain', time: this.clock.now() });
      for (const id of [...this.jobs.keys()]) this.apply({ type: 'cancel', time: this.clock.now(), jobId: id, reason: 'the runtime closed before the job ended (close())' });
      // A finish() still running past the timeout: its waiter is answered now (what it returns later is dropped).
      for (const [job, id] of this.finishing) job.reject(new StokerError('E_CANCELLED', `job ${id}: the runtime closed while its finish() ran (close())`));
      if (this.timer !== undefined) this.clock.cancel(this.timer);
      this.timer = undefined;
      await this.workload.close?.();
    })();
    return this.closed;
  }

  /**
   * Resolves once no partition is preparing, waiting or on a device, and no job whose partitions
   * are all done is still in its finish() (checked after every event and every finish): a job whose
   * last partition ended during the drain was cancelled in its finish(), left to resume on the next
   * start — its latency the downtime's too.
   */
  private drained(): Promise<void> {
    const s = this.engine.snapshot;
    // (A failed runtime withdrew its work: the engine's counts are no longer kept.)
    const empty = () => this.failed !== undefined || (this.finishing.size === 0 && (s.preparing + s.waiting + s.onDevice === 0 || this.stranded()));
    if (empty()) return Promise.resolve();
    return new Promise((resolve) => {
      this.settleWaiter = () => {
        if (empty()) resolve();
      };
      // A device's reachability changes with no event: looked at again while the drain waits.
      if (this.workload.unreachable) {
        const look = () => {
          if (this.settleWaiter === undefined) return;
          if (empty()) resolve();
          else this.clock.schedule(look, DRAIN_LOOK_MS);
        };
        this.clock.schedule(look, DRAIN_LOOK_MS);
      }
    });
  }

  /**
   * Whether every partition in flight is of kinds whose every device is unreachable (an HTTP
   * endpoint that refuses connections): none of them can end, and a drain waiting for them waited
   * out the whole timeout (a trial: a model server stopped before the server, SIGTERM took the
   * full 30 s) — they run again on the next start either way.
   */
  private stranded(): boolean {
    const unreachable = this.workload.unreachable?.bind(this.workload);
    if (!unreachable) return false;
    const s = this.engine.snapshot;
    if (s.kinds.length === 0) return s.devices.every((_, d) => unreachable(d));
    return s.kinds.every((k) => k.preparing + k.waiting + k.onDevice === 0 || k.devices.every((d) => unreachable(d)));
  }

  /**
   * Applies one event and carries out its commands. `before` runs after validation, before the
   * commands. An event the engine refuses before anything changes (a submit that is not a valid
   * job) throws to its caller; a step that fails past that (a pacer of the caller's that throws, or
   * answers out of contract) leaves the engine's state unknown: the runtime fails — every job
   * rejects with E_RUNTIME_FAILED naming why, its work in flight is withdrawn, later submits reject
   * — rather than throw from a timer or a completion callback, which ended the process.
   */
  private apply(event: EngineEvent, before?: () => void): void {
    if (this.failed) {
      if (event.type === 'submit') throw this.failed;
      return;
    }
    // Every event's time is the clock's: one that went back (or NaN) is the clock's fault, not the event's.
    if (!(event.time >= this.clockSeen)) {
      this.fail(new Error(`the clock went ${Number.isNaN(event.time) ? 'NaN' : 'back'}: clock.now() returned ${event.time} after ${this.clockSeen} — give the Runtime a monotonic clock (ms that never decrease)`));
      if (event.type === 'submit') throw this.failed;
      return;
    }
    this.clockSeen = event.time;
    let cmds: Command[];
    try {
      cmds = this.engine.apply(event);
    } catch (e) {
      // A submit or cancel of the caller's that is refused is theirs to hear; a refused answer of a step is the runtime's failure (thrown from a step's callback, it went uncaught).
      if (e instanceof StokerError && REFUSED_UNCHANGED.has(e.code) && (event.type === 'submit' || event.type === 'cancel')) throw e;
      this.fail(e);
      if (event.type === 'submit') throw this.failed;
      return;
    }
    this.timeline?.record(event, cmds, this.engine.snapshot, this.workload.pool?.stats().idleBytes ?? 0);
    this.occupancy.record(event, cmds);
    if (this.onStep) this.listen('onStep', () => this.onStep?.(event, cmds, this.engine.snapshot));
    before?.();
    for (const c of cmds) this.carryOut(c);
    this.syncPool();
    this.tellFailures();
    this.settleWaiter?.();
  }

  /** Notes an item's failed step for onStepFailed (the engine hears of it next, in apply). */
  private stepFailed(item: ItemView, stage: 'prepare' | 'device', reason: string, where?: { device: number; worker: number }): void {
    if (!this.onStepFailed) return;
    const numbers = this.jobs.get(item.jobId)?.numbers;
    this.failures.push({ item, stage, jobId: item.jobId, kind: item.kind, partition: numbers?.[item.partition] ?? item.partition, attempt: (item.failures ?? 0) + 1, ...where, reason });
  }

  /** Tells onStepFailed of the failures the engine has just heard of: a partition whose job lives on is prepared again. */
  private tellFailures(): void {
    const tell = this.onStepFailed;
    if (!tell) return;
    // (jobStates of no partitions: O(1), whether the job lives.)
    for (let f = this.failures.shift(); f; f = this.failures.shift()) {
      const { item, ...rest } = f;
      const retried = this.engine.jobStates(f.jobId, 0, 0) !== undefined;
      // (The engine's item, live: a failure it counted is in its failures now.)
      const failure: StepFailure = { ...rest, retried, counted: !retried || (item.failures ?? 0) >= f.attempt };
      this.listen('onStepFailed', () => tell(failure));
    }
  }

  /**
   * Calls a listener of the caller's (onStep, onStepFailed). One that throws is its own bug, not
   * the jobs': they go on, and the first error of each is a process warning (thrown from a step's
   * answer, it ended the process, or stalled every job under an unhandledRejection handler).
   */
  private listen(name: 'onStep' | 'onStepFailed', call: () => void): void {
    try {
      call();
    } catch (e) {
      if (this.warned.has(name)) return;
      this.warned.add(name);
      process.emitWarning(`the Runtime's ${name} threw (${errorMessage(e)}); the jobs go on, and later errors of it are not said`, { code: 'STOKER_LISTENER_THREW' });
    }
  }

  /**
   * Bounds the pool's idle buffers, after every step: those past the pool's idle TTL are freed (at most once a second), and
   * those past the room beside the reservations, the longest idle first — but none of the size
   * checked out last: the next preparations of that size take them (so the pool holds no more of
   * it than were leased at once). Idle buffers are not charged to the budget: charged, they
   * blocked the next reservation, and freed to make room a SharedArrayBuffer's memory goes only once
   * every thread that saw it has collected it while the next preparation allocated afresh — a user
   * trial's server (a process device: each buffer back at its step's start while its handoff file
   * kept the partition's bytes reserved) grew to 4× its 200 MB budget that way.
   */
  private syncPool(): void {
    const pool = this.workload.pool;
    if (!pool) return;
    const now = this.clock.now();
    if (now - this.trimmedAt >= 1000) {
      this.trimmedAt = now;
      pool.trim();
    }
    const budget = this.engine.budget;
    const room = Math.max(0, budget.totalBytes - budget.used);
    if (pool.stats().idleBytes <= room) return;
    if (pool.trimTo) pool.trimTo(room);
    else pool.trim(true);
  }

  private carryOut(c: Command): void {
    switch (c.type) {
      case 'startPrepare':
        this.flights.startPrepare(c.item, c.attempt);
        break;
      case 'startPrepareBatch':
        this.flights.startPrepareBatch(c.batch, c.items);
        break;
      case 'startDevice':
        this.flights.startDevice(c.item, c.attempt, c.device, c.worker);
        break;
      case 'startBatch':
        this.flights.startBatch(c.batch, c.items, c.device, c.worker);
        break;
      case 'abort':
        this.flights.abort(c.item.id, c.reason);
        break;
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

  /** The runtime fails (see apply): every job rejects with why, the work in flight is withdrawn, the timer stops. */
  private fail(e: unknown): void {
    this.failed = new StokerError('E_RUNTIME_FAILED', `the runtime stopped: ${errorMessage(e)} — its jobs failed with it; fix the cause and start a new Runtime`);
    if (this.timer !== undefined) this.clock.cancel(this.timer);
    this.timer = undefined;
    this.flights.abortAll('the runtime stopped');
    const jobs = [...this.jobs.values()];
    this.jobs.clear();
    for (const job of jobs) job.reject(this.failed);
    if (this.finishing.size === 0) for (const w of this.idleWaiters.splice(0)) w();
    this.settleWaiter?.();
  }

  private finishJob(c: Extract<Command, { type: 'finishJob' }>): void {
    const job = this.jobs.get(c.jobId);
    if (!job) return;
    this.jobs.delete(c.jobId);
    this.finishing.set(job, c.jobId);
    const settle = () => {
      this.finishing.delete(job);
      if (this.jobs.size === 0 && this.finishing.size === 0) for (const w of this.idleWaiters.splice(0)) w();
      this.settleWaiter?.();
    };
    if (c.state !== 'done') {
      job.reject(new StokerError((c.code ?? 'E_CANCELLED') as StokerError['code'], c.reason ?? c.state));
      settle();
      return;
    }
    Promise.resolve()
      .then(() => this.workload.finish({ jobId: c.jobId, input: job.input, outputs: job.outputs }))
      .then(job.resolve, (e: unknown) => job.reject(new StokerError('E_FINISH_FAILED', `job ${c.jobId}: finishing failed: ${errorMessage(e)}`)))
      .finally(settle);
  }
}

import os from 'node:os';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { BroadcastChannel, Worker } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { BufferPool, type PooledBuffer } from './buffer-pool.js';
import type { DeviceTask, PartitionTask, PrepareResult, Workload } from './runtime.js';
import { rmSync } from 'node:fs';
import { batchSignal } from './batch-signal.js';
import type { BatchItemReply, CallStyle, DeviceReply, DeviceRequest, DeviceWorkerData, Handoff, PrepareItemReply, PrepareReply, PrepareRequest } from './threads/protocol.js';
import { errorMessage } from './flights.js';
import { failure } from './no-retry.js';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { StokerError } from '../core/index.js';
import { checkKeys, shown } from '../core/checks.js';

/** Where the stages run: the preparation pool and the device threads. */
export interface StageThreadsOptions {
  /** The devices: worker threads per device; `kind` and `threadPerDevice` override the options below for one device. */
  devices: { workers: number; kind?: string; threadPerDevice?: boolean }[];
  /** Preparation threads. @default available cores − 1, at least 1 */
  prepareThreads?: number;
  /**
   * Preparations one thread runs at once (more than 1 only helps when preparation awaits
   * something: I/O, a remote call, a simulated synthesis wait). @default 1
   */
  prepareConcurrency?: number;
  /** The buffer pool the prepared data lives in. @default a new pool without limits */
  pool?: BufferPool;
  /**
   * One thread per device, running all of its workers' steps concurrently, instead of one thread
   * per worker: for a device API that must not be opened from several threads at once (Mesa's
   * software GL under Dawn corrupts its heap that way). Ending a hung step then ends that
   * device's other step too; it is retried. @default false
   */
  threadPerDevice?: boolean;
  /** The device's kind, as kind modules see it (`ctx.deviceKind`). @default "cpu" */
  deviceKind?: string;
  /**
   * How long a withdrawn preparation (timed out, or its job cancelled or failed) may ignore its
   * ctx.signal before its thread is ended and replaced: long enough for one that checks the signal
   * between steps to see it, short enough that one that never ends gives its thread back soon
   * after its timeout. Other preparations running on that thread (prepareConcurrency over 1) run
   * again, alone. Infinity: never. @default 10000
   */
  withdrawnGraceMs?: number;
  /**
   * Called for a preparation that computed on its thread for HELD_THREAD_MS or more before its
   * `prepare` returned, where a thread runs several at once (prepareConcurrency over 1): the others
   * dispatched to that thread wait behind it, in dispatch order — a higher priority's too — and
   * their latencies count that queue. `module` is the prepare module's URL.
   */
  onThreadHeld?: (module: string, heldMs: number) => void;
}

/** A preparation that holds its thread this long before it returns computes there (see StageThreadsOptions.onThreadHeld). */
export const HELD_THREAD_MS = 100;

export interface ThreadedWorkloadOptions<I, O, R> extends StageThreadsOptions {
  /** URL (file:) of an ES module exporting `prepare(input, ctx)`; it runs in the preparation threads and writes into ctx.buffer. */
  prepareModule: string;
  /** URL (file:) of an ES module exporting `run(input, ctx)`; it runs in one thread per device worker and reads ctx.buffer. */
  deviceModule: string;
  /** Bytes of shared buffer a partition's preparation needs. */
  bufferBytes(input: I): number;
  /** Turns the device outputs into the job's result (main thread). */
  finish(job: { jobId: string; input: I; outputs: O[] }): R | Promise<R>;
}

/** Prepared data: a leased shared buffer (none when the partition asked for 0 bytes) plus whatever the preparation returned. */
export interface PreparedBuffer {
  buffer?: PooledBuffer;
  /** The bytes of `buffer` asked for (the buffer is a size class, at least that long). */
  bytes?: number;
  meta: unknown;
  /** The prepared bytes in a handoff file, for a process device (removed when the data is released), and how long writing it took. */
  file?: { path: string; bytes: number; writeMs: number };
}

/** A stage's call: which module, how it is called, and the partition. */
interface StageCall {
  module: string;
  style: CallStyle;
  input: unknown;
  jobId: string;
  partition: number;
  /** The job's partition count. */
  partitions: number;
  /** Fires when the partition is withdrawn. */
  signal: AbortSignal;
}

/** One preparation for the pool. */
export interface PrepareCall extends StageCall {
  /** Shared buffer bytes to lease for it (0: none). */
  bufferBytes: number;
  /** Large prepared bytes go to a file here (process devices). */
  handoff?: Handoff;
}

/** One device step: the prepared data and the worker that runs it. */
export interface RunCall extends StageCall {
  /** The job's kind (process and HTTP devices tell their worker). */
  kind?: string;
  prepared: PreparedBuffer;
  device: number;
  worker: number;
  /** Says the device began the step after waiting to be ready (DeviceTask.begin). */
  begin?: () => void;
}

/** Where device steps run: the device threads, a device's processes, or an HTTP endpoint. */
export interface DeviceRunner {
  run(call: RunCall): Promise<{ output: unknown; busyMs: number }>;
  /** A batch on one worker as one step (calls of one kind, one device and worker): a result per call, busy time once. */
  runBatch?(calls: RunCall[]): Promise<{ results: BatchItemReply[]; busyMs: number }>;
  /** Hears when a worker goes out of service and comes back (a process device's worker whose processes keep failing to start). */
  watchWorkers?(listener: (worker: number, up: boolean) => void): void;
  /** While no connection can be made to the device (an HTTP endpoint): why (an error code) and since when (ISO); else undefined. */
  unreachable?(): { code: string; since: string } | undefined;
  close(): Promise<void>;
}

interface Pending {
  slot: number;
  resolve: (o: unknown) => void;
  reject: (e: Error) => void;
  /** The step's calls' begin(): the thread had to start or load its module first. */
  begin: (() => void) | undefined;
  /** What was sent, and what withdraws it: to send it again to a fresh thread (see kill). */
  req: DeviceRequest;
  signal: AbortSignal;
}

/** A device thread: runs the steps of one worker slot, or of every slot of its device. */
interface DeviceThread {
  worker: Worker | null;
  device: number;
  /** The device's kind, as kind modules see it (ctx.deviceKind). */
  kind: string;
  pending: Map<number, Pending>;
}

interface Slot {
  thread: number;
  /** The id of the step this slot runs, or -1. */
  busy: number;
  /** Busy nanoseconds already accounted for this slot (the counter's last value the runtime saw). */
  seenNs: bigint;
}

/**
 * The threads the stages run on: a piscina pool for preparation and a thread per device worker
 * (or per device, see threadPerDevice), each loading whatever module a call names. Prepared data
 * lives in pooled SharedArrayBuffers, so it crosses threads without a copy. Device threads
 * publish busy time with Atomics; `run` reports the delta of that counter.
 */
export class StageThreads implements DeviceRunner {
  readonly pool: BufferPool;
  /** [busyNs, count] per device worker slot, shared with the device threads. */
  readonly counters: BigInt64Array;
  /** Preparations that can run at once; the runtime never dispatches more, so nothing queues inside piscina. */
  readonly prepareSlots: number;
  private readonly piscina: Piscina;
  /**
   * One thread, one preparation at a time, made when first needed (and kept): where a preparation thread
   * dies (a preparation that exits it or runs it out of memory takes every one running there
   * along), each of its preparations runs again here, alone, so that only the cause fails.
   */
  private isolation: Piscina | undefined;
  /** The isolation thread's queue: each preparation there waits for the one before it to settle. */
  private isolationTurn: Promise<void> = Promise.resolve();
  /** Preparation threads that ended (piscina's workerDestroy) in the pool, and in the isolation pool. */
  private threadDeaths = 0;
  private isolationDeaths = 0;
  private readonly slots: Slot[];
  private readonly threads: DeviceThread[];
  private readonly slotBase: number[];
  /** Withdrawn preparations are announced here (see prepare-worker.ts). */
  private readonly abortChannel: BroadcastChannel;
  private nextId = 0;
  private nextTask = 0;
  private closed = false;
  private lastTrim = performance.now();
  /** Terminations under way (close() waits for them). */
  private readonly killing = new Set<Promise<void>>();
  private readonly withdrawnGraceMs: number;
  private readonly onThreadHeld: StageThreadsOptions['onThreadHeld'];

  constructor(options: StageThreadsOptions) {
    this.pool = options.pool ?? new BufferPool();
    this.withdrawnGraceMs = options.withdrawnGraceMs ?? 10_000;
    // (setTimeout turns a delay it cannot hold — over 2³¹ − 1 ms, NaN, negative — into 1 ms: Infinity, "never", would end threads at once.)
    if (!(this.withdrawnGraceMs >= 0 && (this.withdrawnGraceMs <= 2 ** 31 - 1 || this.withdrawnGraceMs === Infinity))) {
      throw new RangeError(`withdrawnGraceMs: got ${this.withdrawnGraceMs}; use a number of ms from 0 to ${2 ** 31 - 1}, or Infinity to never end a thread`);
    }
    const threads = options.prepareThreads ?? Math.max(1, os.availableParallelism() - 1);
    const concurrency = options.prepareConcurrency ?? 1;
    this.prepareSlots = threads * concurrency;
    this.onThreadHeld = concurrency > 1 ? options.onThreadHeld : undefined;
    this.piscina = new Piscina({
      filename: new URL('./threads/prepare-worker.js', import.meta.url).href,
      minThreads: threads,
      maxThreads: threads,
      concurrentTasksPerWorker: concurrency,
      // 'sync' parks idle threads in Atomics.wait, which would stall a preparation that awaits (timers, I/O).
      atomics: 'disabled',
    });
    this.piscina.on('workerDestroy', () => this.threadDeaths++);
    this.abortChannel = new BroadcastChannel(`stoker-prepare-${randomUUID()}`);
    this.abortChannel.unref();
    this.slotBase = [];
    this.slots = [];
    this.threads = [];
    options.devices.forEach((d, device) => {
      this.slotBase.push(this.slots.length);
      const kind = d.kind ?? options.deviceKind ?? 'cpu';
      const perDevice = d.threadPerDevice ?? options.threadPerDevice;
      for (let w = 0; w < d.workers; w++) {
        if (w === 0 || !perDevice) this.threads.push({ worker: null, device, kind, pending: new Map() });
        this.slots.push({ thread: this.threads.length - 1, busy: -1, seenNs: 0n });
      }
    });
    this.counters = new BigInt64Array(new SharedArrayBuffer(this.slots.length * 2 * 8));
  }

  /**
   * A pooled buffer of `bytes`; one the machine cannot allocate fails its step saying so (it was
   * V8's bare "Array buffer allocation failed", naming neither the size nor where it came from) —
   * for good where its size class is more than the machine's memory, else retried (others may
   * give theirs back).
   */
  private checkout(bytes: number): PooledBuffer {
    try {
      return this.pool.checkout(bytes);
    } catch (e) {
      if (!(e instanceof RangeError)) throw e;
      const classBytes = this.pool.classOf(bytes);
      const never = classBytes > os.totalmem();
      throw failure(`the partition's shared buffer of ${bytes} bytes (a pooled buffer of ${classBytes}) could not be allocated (${e.message}): ${never ? "more than this machine's memory" : 'not now'} — its kind's buffer(input) (bufferBytes) asks for it: return fewer bytes, or split the work into more partitions`, never ? false : undefined);
    }
  }

  async prepare(call: PrepareCall): Promise<PreparedBuffer> {
    if (this.closed) throw new Error('the workload is closed');
    const buffer = call.bufferBytes > 0 ? this.checkout(call.bufferBytes) : undefined;
    const task = this.nextTask++;
    // Not piscina's own abort signal: it would give each abortable task a thread of its own
    // (concurrentTasksPerWorker would not apply). The thread's ctx.signal fires instead; a
    // preparation that ignores it runs on and the runtime drops its result — up to
    // withdrawnGraceMs, then its thread is ended (see withdrawal). The buffer is not reused before the thread is done with it.
    const w = this.withdrawal(task, call.signal);
    try {
      const req: PrepareRequest = {
        module: call.module,
        style: call.style,
        input: call.input,
        ctx: { jobId: call.jobId, partition: call.partition, partitions: call.partitions, ...(buffer ? { buffer: buffer.buffer } : {}) },
        task,
        abortChannel: this.abortChannel.name,
        owner: w.owner,
        bufferBytes: call.bufferBytes,
        ...(call.handoff ? { handoff: call.handoff } : {}),
      };
      const { meta, file, finalError, heldMs } = await this.prepareTask(req, call.signal);
      if (heldMs !== undefined && heldMs >= HELD_THREAD_MS) this.onThreadHeld?.(call.module, heldMs);
      if (finalError !== undefined) throw failure(finalError, false);
      if (file) {
        // The data lives in the file now: the buffer can serve the next preparation.
        if (buffer) this.pool.checkin(buffer);
        return { meta, file };
      }
      return buffer ? { buffer, bytes: call.bufferBytes, meta } : { meta };
    } catch (e) {
      if (buffer) this.pool.checkin(buffer);
      throw e;
    } finally {
      w.settled();
    }
  }

  /**
   * A task's withdrawal: when `signal` fires, the task's number goes out on the abort channel (its
   * ctx.signal fires in the thread); where the task has still not settled withdrawnGraceMs later, the
   * thread that runs it — it wrote its threadId into `owner` when it began — is ended: piscina
   * starts another, and the other preparations on it (concurrency over 1) run again alone (see
   * prepareTask). A preparation that never ends (a loop, a wait on nothing) held its thread for
   * good: two such with retries: 1 took a pool of two, and every later preparation of every kind
   * timed out. `settled()` once the task has.
   */
  private withdrawal(task: number, signal: AbortSignal): { owner: SharedArrayBuffer; settled(): void } {
    // Word 0: the thread that runs the task (0 until it begins); word 1: 1 once withdrawn — a task
    // that begins later (queued, or on a thread started after the announcement) sees it there.
    const owner = new SharedArrayBuffer(8);
    const words = new Int32Array(owner);
    let timer: NodeJS.Timeout | undefined;
    // Not begun when the grace ran out (still queued): looked at again a grace later.
    const check = () => {
      const threadId = Atomics.load(words, 0);
      if (threadId === 0) arm();
      else this.endThread(threadId);
    };
    const arm = () => {
      if (!Number.isFinite(this.withdrawnGraceMs)) return;
      timer = setTimeout(check, this.withdrawnGraceMs);
      timer.unref();
    };
    const withdraw = () => {
      Atomics.store(words, 1, 1);
      this.abortChannel.postMessage(task);
      arm();
    };
    signal.addEventListener('abort', withdraw, { once: true });
    return {
      owner,
      settled: () => {
        signal.removeEventListener('abort', withdraw);
        clearTimeout(timer);
      },
    };
  }

  /** Ends the preparation thread with this threadId, if the pool still has it. */
  private endThread(threadId: number): void {
    if (this.closed) return;
    const thread = this.piscina.threads.find((t) => t.threadId === threadId);
    if (!thread) return;
    void thread.terminate();
  }

  /**
   * A preparation batch (kind modules' prepareBatch) as one task on one preparation thread, each
   * call with its own buffer; withdrawn only when every call is. One result per call, in order.
   */
  async prepareBatch(calls: PrepareCall[]): Promise<PrepareResult<PreparedBuffer>[]> {
    if (this.closed) throw new Error('the workload is closed');
    const first = calls[0] as PrepareCall;
    const buffers: (PooledBuffer | undefined)[] = [];
    const task = this.nextTask++;
    const signal = batchSignal(calls);
    const w = this.withdrawal(task, signal);
    const ctx = (c: PrepareCall, i: number) => ({ jobId: c.jobId, partition: c.partition, partitions: c.partitions, ...(buffers[i] ? { buffer: (buffers[i] as PooledBuffer).buffer } : {}) });
    try {
      // (Inside the try: a checkout that throws gives back those taken before it.)
      for (const c of calls) buffers.push(c.bufferBytes > 0 ? this.checkout(c.bufferBytes) : undefined);
      const req: PrepareRequest = {
        module: first.module,
        style: first.style,
        input: first.input,
        ctx: ctx(first, 0),
        task,
        abortChannel: this.abortChannel.name,
        owner: w.owner,
        bufferBytes: first.bufferBytes,
        batch: calls.map((c, i) => ({ input: c.input, ctx: ctx(c, i), bufferBytes: c.bufferBytes })),
        ...(first.handoff ? { handoff: first.handoff } : {}),
      };
      // (A thread death under it is isolated as a single preparation's is: see prepareTask.)
      const reply = await this.prepareTask(req, signal);
      return (reply.batch as PrepareItemReply[]).map((r, i): PrepareResult<PreparedBuffer> => {
        const buffer = buffers[i];
        // A failed item's buffer, and one whose data went to a file, serve the next preparation.
        if ('error' in r || r.file) if (buffer) this.pool.checkin(buffer);
        if ('error' in r) return r.retry === false ? { error: r.error, retry: false } : { error: r.error };
        if (r.file) return { prepared: { meta: r.meta, file: r.file } };
        return { prepared: buffer ? { buffer, bytes: (calls[i] as PrepareCall).bufferBytes, meta: r.meta } : { meta: r.meta } };
      });
    } catch (e) {
      for (const b of buffers) if (b) this.pool.checkin(b);
      throw e;
    } finally {
      w.settled();
    }
  }

  run(call: RunCall): Promise<{ output: unknown; busyMs: number }> {
    return this.step([call], false);
  }

  /** A batch (kind modules' runBatch) as one step on the first call's worker; it is ended only when every call is withdrawn. */
  async runBatch(calls: RunCall[]): Promise<{ results: BatchItemReply[]; busyMs: number }> {
    const { output, busyMs } = await this.step(calls, true);
    return { results: output as BatchItemReply[], busyMs };
  }

  private step(calls: RunCall[], batch: boolean): Promise<{ output: unknown; busyMs: number }> {
    const call = calls[0] as RunCall;
    const signal = batchSignal(calls);
    if (this.closed) return Promise.reject(new Error('the workload is closed'));
    if (signal.aborted) return Promise.reject(new Error('aborted before the device step started'));
    const base = this.slotBase[call.device];
    const workers = (this.slotBase[call.device + 1] ?? this.slots.length) - (base ?? 0);
    if (base === undefined || !(call.worker >= 0 && call.worker < workers)) {
      return Promise.reject(new Error(`no device ${call.device} worker ${call.worker} in this ThreadedWorkload (its devices have ${this.slotBase.map((b, d) => (this.slotBase[d + 1] ?? this.slots.length) - b).join(', ')} workers): give the Runtime the same devices as the workload`));
    }
    const index = base + call.worker;
    const slot = this.slots[index] as Slot;
    if (slot.busy >= 0) return Promise.reject(new Error(`device ${call.device} worker ${call.worker} is already busy`));
    const thread = this.threads[slot.thread] as DeviceThread;
    const worker = (thread.worker ??= this.spawn(slot.thread));
    const id = this.nextId++;
    const req: DeviceRequest = {
      id,
      module: call.module,
      style: call.style,
      slot: index,
      worker: call.worker,
      input: call.input,
      ctx: threadCtx(call),
    };
    if (batch) req.batch = calls.map((c) => ({ input: c.input, ctx: threadCtx(c) }));
    return new Promise<unknown>((resolve, reject) => {
      slot.busy = id;
      thread.pending.set(id, { slot: index, resolve, reject, begin: call.begin, req, signal });
      // Aborted (cancel, timeout, shutdown) — for a batch, every item of it: the thread may be deep
      // in a kernel, so it is ended and respawned on next use.
      const abort = () => {
        if (slot.busy === id) void this.kill(slot.thread, new Error(`aborted: ${(signal.reason as Error | undefined)?.message ?? 'withdrawn'}`), id);
      };
      signal.addEventListener('abort', abort, { once: true });
      worker.postMessage(req);
    }).then((output) => {
      const busyNs = Atomics.load(this.counters, index * 2);
      const busyMs = Number(busyNs - slot.seenNs) / 1e6;
      slot.seenNs = busyNs;
      return { output, busyMs };
    });
  }

  /** Removes the handoff file, returns the buffer to the pool; at most once a second, idle buffers past the pool's TTL are freed. */
  release(prepared: PreparedBuffer): void {
    if (prepared.file) rmSync(prepared.file.path, { force: true });
    if (!prepared.buffer) return;
    this.pool.checkin(prepared.buffer);
    const now = performance.now();
    if (now - this.lastTrim >= 1000) {
      this.lastTrim = now;
      this.pool.trim();
    }
  }

  /** Ends every thread (also those still being terminated after an abort). Later prepare/run calls reject. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.threads.map((_, i) => this.kill(i, new Error('the workload is closed'), -1)));
    await Promise.all(this.killing);
    await this.piscina.destroy();
    await this.isolation?.destroy();
    this.abortChannel.close();
  }

  /**
   * One preparation on the pool; where its thread died under it — with other preparations, any of
   * which may be the cause — again alone on the isolation thread: an innocent one is prepared, and
   * the cause fails at once (retry: false) saying it ended its thread by itself (before, every preparation on the thread
   * failed, spending its retry, and a job failed with another's fault, naming a partition it
   * did not have).
   */
  private async prepareTask(req: PrepareRequest, signal: AbortSignal): Promise<PrepareReply> {
    const deaths = this.threadDeaths;
    try {
      return (await this.piscina.run(req)) as PrepareReply;
    } catch (e) {
      if (this.threadDeaths === deaths || !threadDeath(e) || signal.aborted || this.closed) throw e;
    }
    // One at a time, in order: a death while one runs is that one's.
    const turn = this.isolationTurn.then(() => this.alone(req, signal));
    this.isolationTurn = turn.then(
      () => undefined,
      () => undefined,
    );
    return turn;
  }

  /** A preparation on the isolation thread, by itself (its turn come): withdrawn, it ends that thread (piscina's own abort), and is not blamed. */
  private async alone(req: PrepareRequest, signal: AbortSignal): Promise<PrepareReply> {
    if (signal.aborted || this.closed) throw new Error('the partition was withdrawn');
    this.isolation ??= this.isolationPool();
    const deaths = this.isolationDeaths;
    try {
      return (await this.isolation.run(req, { signal })) as PrepareReply;
    } catch (e) {
      if (this.isolationDeaths === deaths || !threadDeath(e) || signal.aborted || this.closed) throw e;
      // Its own doing, alone: it would do it again (and take others along), so no retry.
      throw failure(`its preparation ended its thread when it ran alone: ${errorMessage(e)}`, false);
    }
  }

  private isolationPool(): Piscina {
    // (minThreads 1: with none, piscina starts no thread for the preparations queued behind one that ended it.)
    const p = new Piscina({ filename: new URL('./threads/prepare-worker.js', import.meta.url).href, minThreads: 1, maxThreads: 1, concurrentTasksPerWorker: 1, atomics: 'disabled' });
    p.on('workerDestroy', () => this.isolationDeaths++);
    return p;
  }

  /** Busy time and completions per device worker slot, from the shared counters. */
  deviceCounters(): { busyMs: number; count: number }[] {
    return this.slots.map((_, i) => ({ busyMs: Number(Atomics.load(this.counters, i * 2)) / 1e6, count: Number(Atomics.load(this.counters, i * 2 + 1)) }));
  }

  private spawn(index: number): Worker {
    const thread = this.threads[index] as DeviceThread;
    const data: DeviceWorkerData = { counters: this.counters.buffer as SharedArrayBuffer, device: thread.device, deviceKind: thread.kind };
    const w = new Worker(new URL('./threads/device-worker.js', import.meta.url), { workerData: data });
    const settle = (id: number): Pending | undefined => {
      const p = thread.pending.get(id);
      if (!p) return undefined;
      thread.pending.delete(id);
      (this.slots[p.slot] as Slot).busy = -1;
      return p;
    };
    w.on('message', (reply: DeviceReply) => {
      if ('begun' in reply) return thread.pending.get(reply.id)?.begin?.();
      const p = settle(reply.id);
      if (!p) return;
      if (reply.ok) p.resolve(reply.output);
      else p.reject(failure(reply.message, reply.retry));
    });
    const died = (why: string) => {
      if (thread.worker !== w) return;
      thread.worker = null;
      for (const id of [...thread.pending.keys()]) settle(id)?.reject(new Error(`device ${thread.device} thread died: ${why}`));
    };
    w.on('error', (e) => died(e.message));
    w.on('exit', (code) => died(`exit code ${code}`));
    return w;
  }

  /**
   * Ends a device thread for its step `culprit` (withdrawn: a timeout, a cancel), then fails that
   * step, and sends the others it ran (its device's other workers', where they share it: a WebGPU
   * device) to a fresh thread, from the start — they did nothing wrong: failed with it, each spent
   * a retry, and a job with none left failed for another's hung step. In that order: a step's
   * buffer goes back to the pool when the step settles, and a thread stuck in a native call could
   * still write into it until terminate() has returned.
   */
  private kill(index: number, why: Error, culprit: number): Promise<void> {
    const thread = this.threads[index] as DeviceThread;
    const w = thread.worker;
    const pending = [...thread.pending.entries()];
    thread.worker = null;
    thread.pending.clear();
    for (const [, p] of pending) (this.slots[p.slot] as Slot).busy = -1;
    const done = (async () => {
      if (w) await w.terminate();
      for (const [id, p] of pending) {
        const slot = this.slots[p.slot] as Slot;
        // Busy time of an abandoned step is not the next item's.
        slot.seenNs = Atomics.load(this.counters, p.slot * 2);
        if (id === culprit || p.signal.aborted || this.closed || slot.busy >= 0) p.reject(why);
        else this.resend(index, id, p);
      }
    })();
    this.killing.add(done);
    void done.finally(() => this.killing.delete(done));
    return done;
  }

  /** Sends a step again, as it was, to its device thread (started afresh): its begin() restarts its clock once the thread has loaded the module. */
  private resend(index: number, id: number, p: Pending): void {
    const thread = this.threads[index] as DeviceThread;
    const worker = (thread.worker ??= this.spawn(index));
    (this.slots[p.slot] as Slot).busy = id;
    thread.pending.set(id, p);
    worker.postMessage(p.req);
  }
}

/** What a device thread builds a step's ctx from. */
function threadCtx(call: RunCall): DeviceRequest['ctx'] {
  return { jobId: call.jobId, partition: call.partition, partitions: call.partitions, meta: call.prepared.meta, ...(call.prepared.buffer ? { buffer: call.prepared.buffer.buffer } : {}) };
}

/**
 * A workload whose two stages are ES modules run on {@link StageThreads}: `prepare(input, ctx)`
 * in the preparation pool, writing into a pooled shared buffer, and `run(input, ctx)` in a thread
 * per device worker, reading it (ctx.meta is what the preparation returned).
 */
export class ThreadedWorkload<I, O, R> implements Workload<I, PreparedBuffer, O, R> {
  readonly pool: BufferPool;
  /** [busyNs, count] per device worker slot, shared with the device threads. */
  readonly counters: BigInt64Array;
  /** Preparations that can run at once; the runtime never dispatches more, so nothing queues inside piscina. */
  readonly prepareSlots: number;
  /** Workers per device (a Runtime given other devices is refused). */
  readonly deviceWorkers: readonly number[];
  private readonly threads: StageThreads;

  constructor(private readonly options: ThreadedWorkloadOptions<I, O, R>) {
    checkWorkloadOptions(options);
    this.deviceWorkers = options.devices.map((d) => d.workers);
    this.threads = new StageThreads(options);
    this.pool = this.threads.pool;
    this.counters = this.threads.counters;
    this.prepareSlots = this.threads.prepareSlots;
  }

  prepare(task: PartitionTask<I>): Promise<PreparedBuffer> {
    const bytes = this.options.bufferBytes(task.input);
    // (NaN or a negative count was taken as 0: no buffer, and a module reading ctx.buffer made an
    // empty array — every job "done" with zeros.)
    if (!(Number.isSafeInteger(bytes) && bytes >= 0)) {
      return Promise.reject(failure(`bufferBytes(input) must return a whole number of bytes ≥ 0 (0: no buffer) (got ${shown(bytes)}); round it up with Math.ceil`, false));
    }
    return this.threads.prepare({ module: this.options.prepareModule, style: 'workload', input: task.input, jobId: task.jobId, partition: task.partition, partitions: task.partitions, bufferBytes: bytes, signal: task.signal });
  }

  async run(task: DeviceTask<I, PreparedBuffer>): Promise<{ output: O; busyMs: number }> {
    const { output, busyMs } = await this.threads.run({
      module: this.options.deviceModule,
      style: 'workload',
      input: task.input,
      jobId: task.jobId,
      partition: task.partition,
      partitions: task.partitions,
      prepared: task.prepared,
      device: task.device,
      worker: task.worker,
      signal: task.signal,
      ...(task.begin ? { begin: task.begin } : {}),
    });
    return { output: output as O, busyMs };
  }

  finish(job: { jobId: string; input: I; outputs: O[] }): R | Promise<R> {
    return this.options.finish(job);
  }

  release(prepared: PreparedBuffer): void {
    this.threads.release(prepared);
  }

  close(): Promise<void> {
    return this.threads.close();
  }

  /** Busy time and completions per device worker slot, from the shared counters. */
  deviceCounters(): { busyMs: number; count: number }[] {
    return this.threads.deviceCounters();
  }
}

/**
 * Whether a preparation's rejection is its thread's end (piscina: the thread exited, or ran out of
 * memory), not an error it threw.
 */
function threadDeath(e: unknown): boolean {
  const err = e as { message?: unknown; code?: unknown } | null;
  return err !== null && typeof err === 'object' && ((typeof err.message === 'string' && /^worker exited with code/.test(err.message)) || err.code === 'ERR_WORKER_OUT_OF_MEMORY');
}

/** The options a ThreadedWorkload reads: another (a misspelt prepareThread) is refused. */
const WORKLOAD_OPTIONS = ['prepareModule', 'deviceModule', 'bufferBytes', 'finish', 'devices', 'prepareThreads', 'prepareConcurrency', 'pool', 'threadPerDevice', 'deviceKind', 'withdrawnGraceMs', 'onThreadHeld'] as const satisfies readonly (keyof ThreadedWorkloadOptions<unknown, unknown, unknown>)[];

/**
 * Checks a ThreadedWorkload's options when it is made: each problem was seen only when jobs ran,
 * after their retries (a module path resolved against stoker's own folder, a module not there),
 * under another name (prepareConcurrency NaN as the Runtime's maxPreparing), or never (a misspelt
 * option, no devices).
 */
function checkWorkloadOptions(o: ThreadedWorkloadOptions<unknown, unknown, unknown>): void {
  const bad = (message: string): never => {
    throw new StokerError('E_INVALID_OPTION', `ThreadedWorkload: ${message}`);
  };
  if (o === null || typeof o !== 'object') bad(`its options must be an object (got ${shown(o)})`);
  checkKeys(o, WORKLOAD_OPTIONS, '', 'the ThreadedWorkload options', 'E_INVALID_OPTION');
  for (const name of ['prepareModule', 'deviceModule'] as const) {
    const v: unknown = o[name];
    const example = `new URL('./${name === 'prepareModule' ? 'prepare' : 'device'}.mjs', import.meta.url).href`;
    if (typeof v !== 'string' || !v.startsWith('file:')) bad(`${name} must be the file: URL of an ES module, e.g. ${example} (got ${shown(v)}; a path is resolved against stoker's own folder)`);
    let file = '';
    try {
      file = fileURLToPath(v as string);
    } catch {
      bad(`${name} ${shown(v)} is not a file: URL; e.g. ${example}`);
    }
    if (!existsSync(file)) bad(`${name}: no file ${file}`);
  }
  for (const name of ['bufferBytes', 'finish'] as const) if (typeof o[name] !== 'function') bad(`${name} must be a function (got ${shown(o[name])})`);
  if (o.onThreadHeld !== undefined && typeof o.onThreadHeld !== 'function') bad(`onThreadHeld must be a function (got ${shown(o.onThreadHeld)})`);
  if (!Array.isArray(o.devices) || o.devices.length === 0) bad(`devices must list at least one device, e.g. [{ workers: 2 }] (got ${shown(o.devices)})`);
  o.devices.forEach((d, i) => {
    if (d === null || typeof d !== 'object' || !(Number.isInteger(d.workers) && d.workers >= 1)) bad(`devices[${i}].workers must be a whole number ≥ 1 (got ${shown((d as { workers?: unknown } | null)?.workers)})`);
  });
  for (const name of ['prepareThreads', 'prepareConcurrency'] as const) {
    const v = o[name];
    if (v !== undefined && !(Number.isInteger(v) && v >= 1)) bad(`${name} must be a whole number ≥ 1 (got ${shown(v)})`);
  }
}

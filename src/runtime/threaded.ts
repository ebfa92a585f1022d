import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { BufferPool, type PooledBuffer } from './buffer-pool.js';
import type { DeviceTask, PartitionTask, Workload } from './runtime.js';
import type { DeviceReply, DeviceRequest, DeviceWorkerData, PrepareRequest } from './threads/protocol.js';

export interface ThreadedWorkloadOptions<I, O, R> {
  /** URL (file:) of an ES module exporting `prepare(input, ctx)`; it runs in the preparation threads and writes into ctx.buffer. */
  prepareModule: string;
  /** URL (file:) of an ES module exporting `run(input, ctx)`; it runs in one thread per device worker and reads ctx.buffer. */
  deviceModule: string;
  /** Bytes of shared buffer a partition's preparation needs. */
  bufferBytes(input: I): number;
  /** Turns the device outputs into the job's result (main thread). */
  finish(job: { jobId: string; input: I; outputs: O[] }): R | Promise<R>;
  /** The devices: worker threads per device. */
  devices: { workers: number }[];
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
}

/** Prepared data: a leased shared buffer plus whatever small metadata the preparation returned. */
export interface PreparedBuffer {
  buffer: PooledBuffer;
  meta: unknown;
}

interface Pending {
  slot: number;
  resolve: (o: unknown) => void;
  reject: (e: Error) => void;
}

/** A device thread: runs the steps of one worker slot, or of every slot of its device. */
interface DeviceThread {
  worker: Worker | null;
  device: number;
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
 * A workload that prepares on a piscina thread pool and runs each device worker in its own
 * thread (or each device in one, see threadPerDevice). Prepared data lives in pooled SharedArrayBuffers, so it crosses threads without a copy.
 * Device threads publish busy time with Atomics; `run` reports the delta of that counter.
 */
export class ThreadedWorkload<I, O, R> implements Workload<I, PreparedBuffer, O, R> {
  readonly pool: BufferPool;
  /** [busyNs, count] per device worker slot, shared with the device threads. */
  readonly counters: BigInt64Array;
  /** Preparations that can run at once; the runtime never dispatches more, so nothing queues inside piscina. */
  readonly prepareSlots: number;
  private readonly piscina: Piscina;
  private readonly slots: Slot[];
  private readonly threads: DeviceThread[];
  private readonly slotBase: number[];
  private nextId = 0;
  private closed = false;
  private lastTrim = performance.now();
  /** Terminations under way (close() waits for them). */
  private readonly killing = new Set<Promise<void>>();

  constructor(private readonly options: ThreadedWorkloadOptions<I, O, R>) {
    this.pool = options.pool ?? new BufferPool();
    const threads = options.prepareThreads ?? Math.max(1, os.availableParallelism() - 1);
    const concurrency = options.prepareConcurrency ?? 1;
    this.prepareSlots = threads * concurrency;
    this.piscina = new Piscina({
      filename: new URL('./threads/prepare-worker.js', import.meta.url).href,
      minThreads: threads,
      maxThreads: threads,
      concurrentTasksPerWorker: concurrency,
      // 'sync' parks idle threads in Atomics.wait, which would stall a preparation that awaits (timers, I/O).
      atomics: 'disabled',
    });
    this.slotBase = [];
    this.slots = [];
    this.threads = [];
    options.devices.forEach((d, device) => {
      this.slotBase.push(this.slots.length);
      for (let w = 0; w < d.workers; w++) {
        if (w === 0 || !options.threadPerDevice) this.threads.push({ worker: null, device, pending: new Map() });
        this.slots.push({ thread: this.threads.length - 1, busy: -1, seenNs: 0n });
      }
    });
    this.counters = new BigInt64Array(new SharedArrayBuffer(this.slots.length * 2 * 8));
  }

  async prepare(task: PartitionTask<I>): Promise<PreparedBuffer> {
    if (this.closed) throw new Error('the workload is closed');
    const buffer = this.pool.checkout(this.options.bufferBytes(task.input));
    try {
      const req: PrepareRequest = { module: this.options.prepareModule, input: task.input, ctx: { jobId: task.jobId, partition: task.partition, buffer: buffer.buffer } };
      // No abort signal to piscina: it would give each abortable task a thread of its own
      // (concurrentTasksPerWorker would not apply). A withdrawn preparation runs to its end and
      // the runtime drops its result; the buffer is not reused before the thread is done with it.
      const { meta } = (await this.piscina.run(req)) as { meta: unknown };
      return { buffer, meta };
    } catch (e) {
      this.pool.checkin(buffer);
      throw e;
    }
  }

  run(task: DeviceTask<I, PreparedBuffer>): Promise<{ output: O; busyMs: number }> {
    if (this.closed) return Promise.reject(new Error('the workload is closed'));
    if (task.signal.aborted) return Promise.reject(new Error('aborted before the device step started'));
    const index = (this.slotBase[task.device] ?? 0) + task.worker;
    const slot = this.slots[index] as Slot;
    if (slot.busy >= 0) return Promise.reject(new Error(`device ${task.device} worker ${task.worker} is already busy`));
    const thread = this.threads[slot.thread] as DeviceThread;
    const worker = (thread.worker ??= this.spawn(slot.thread));
    const id = this.nextId++;
    const req: DeviceRequest = { id, slot: index, worker: task.worker, input: task.input, ctx: { jobId: task.jobId, partition: task.partition, buffer: task.prepared.buffer.buffer, meta: task.prepared.meta } };
    return new Promise<unknown>((resolve, reject) => {
      slot.busy = id;
      thread.pending.set(id, { slot: index, resolve, reject });
      // Aborted (cancel, timeout, shutdown): the thread may be deep in a kernel, so it is ended and respawned on next use.
      const abort = () => {
        if (slot.busy === id) void this.kill(slot.thread, new Error(`aborted: ${(task.signal.reason as Error | undefined)?.message ?? 'withdrawn'}`));
      };
      task.signal.addEventListener('abort', abort, { once: true });
      worker.postMessage(req);
    }).then((output) => {
      const busyNs = Atomics.load(this.counters, index * 2);
      const busyMs = Number(busyNs - slot.seenNs) / 1e6;
      slot.seenNs = busyNs;
      return { output: output as O, busyMs };
    });
  }

  finish(job: { jobId: string; input: I; outputs: O[] }): R | Promise<R> {
    return this.options.finish(job);
  }

  /** Returns the buffer to the pool; at most once a second, idle buffers past the pool's TTL are freed. */
  release(prepared: PreparedBuffer): void {
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
    await Promise.all(this.threads.map((_, i) => this.kill(i, new Error('the workload is closed'))));
    await Promise.all(this.killing);
    await this.piscina.destroy();
  }

  /** Busy time and completions per device worker slot, from the shared counters. */
  deviceCounters(): { busyMs: number; count: number }[] {
    return this.slots.map((_, i) => ({ busyMs: Number(Atomics.load(this.counters, i * 2)) / 1e6, count: Number(Atomics.load(this.counters, i * 2 + 1)) }));
  }

  private spawn(index: number): Worker {
    const thread = this.threads[index] as DeviceThread;
    const data: DeviceWorkerData = { module: this.options.deviceModule, counters: this.counters.buffer as SharedArrayBuffer, device: thread.device };
    const w = new Worker(new URL('./threads/device-worker.js', import.meta.url), { workerData: data });
    const settle = (id: number): Pending | undefined => {
      const p = thread.pending.get(id);
      if (!p) return undefined;
      thread.pending.delete(id);
      (this.slots[p.slot] as Slot).busy = -1;
      return p;
    };
    w.on('message', (reply: DeviceReply) => {
      const p = settle(reply.id);
      if (!p) return;
      if (reply.ok) p.resolve(reply.output);
      else p.reject(new Error(reply.message));
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
   * Ends a device thread, then fails its pending steps. In that order: a step's buffer goes back
   * to the pool when the step settles, and a thread stuck in a native call could still write into
   * it until terminate() has returned.
   */
  private kill(index: number, why: Error): Promise<void> {
    const thread = this.threads[index] as DeviceThread;
    const w = thread.worker;
    const pending = [...thread.pending.values()];
    thread.worker = null;
    thread.pending.clear();
    for (const p of pending) (this.slots[p.slot] as Slot).busy = -1;
    const done = (async () => {
      if (w) await w.terminate();
      for (const p of pending) {
        const slot = this.slots[p.slot] as Slot;
        // Busy time of an abandoned step is not the next item's.
        slot.seenNs = Atomics.load(this.counters, p.slot * 2);
        p.reject(why);
      }
    })();
    this.killing.add(done);
    void done.finally(() => this.killing.delete(done));
    return done;
  }
}

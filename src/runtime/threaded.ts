import os from 'node:os';
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
}

/** Prepared data: a leased shared buffer plus whatever small metadata the preparation returned. */
export interface PreparedBuffer {
  buffer: PooledBuffer;
  meta: unknown;
}

interface Slot {
  worker: Worker | null;
  pending: { id: number; resolve: (o: unknown) => void; reject: (e: Error) => void } | null;
  /** Busy nanoseconds already accounted for this slot (the counter's last value the runtime saw). */
  seenNs: bigint;
}

/**
 * A workload that prepares on a piscina thread pool and runs each device worker in its own
 * thread. Prepared data lives in pooled SharedArrayBuffers, so it crosses threads without a copy.
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
  private readonly slotBase: number[];
  private nextId = 0;
  private closed = false;
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
    let n = 0;
    for (const d of options.devices) {
      this.slotBase.push(n);
      n += d.workers;
    }
    this.counters = new BigInt64Array(new SharedArrayBuffer(n * 2 * 8));
    this.slots = Array.from({ length: n }, () => ({ worker: null, pending: null, seenNs: 0n }));
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
    if (slot.pending) return Promise.reject(new Error(`device ${task.device} worker ${task.worker} is already busy`));
    const worker = (slot.worker ??= this.spawn(index, task.device, task.worker));
    const id = this.nextId++;
    const req: DeviceRequest = { id, input: task.input, ctx: { jobId: task.jobId, partition: task.partition, buffer: task.prepared.buffer.buffer, meta: task.prepared.meta } };
    return new Promise<unknown>((resolve, reject) => {
      slot.pending = { id, resolve, reject };
      // Aborted (cancel, timeout, shutdown): the thread may be deep in a kernel, so it is ended and respawned on next use.
      const abort = () => {
        if (slot.pending?.id === id) void this.kill(index, new Error(`aborted: ${(task.signal.reason as Error | undefined)?.message ?? 'withdrawn'}`));
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

  release(prepared: PreparedBuffer): void {
    this.pool.checkin(prepared.buffer);
  }

  /** Ends every thread (also those still being terminated after an abort). Later prepare/run calls reject. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.slots.map((_, i) => this.kill(i, new Error('the workload is closed'))));
    await Promise.all(this.killing);
    await this.piscina.destroy();
  }

  /** Busy time and completions per device worker slot, from the shared counters. */
  deviceCounters(): { busyMs: number; count: number }[] {
    return this.slots.map((_, i) => ({ busyMs: Number(Atomics.load(this.counters, i * 2)) / 1e6, count: Number(Atomics.load(this.counters, i * 2 + 1)) }));
  }

  private spawn(index: number, device: number, worker: number): Worker {
    const data: DeviceWorkerData = { module: this.options.deviceModule, counters: this.counters.buffer as SharedArrayBuffer, slot: index, device, worker };
    const w = new Worker(new URL('./threads/device-worker.js', import.meta.url), { workerData: data });
    const slot = this.slots[index] as Slot;
    w.on('message', (reply: DeviceReply) => {
      const p = slot.pending;
      if (!p || p.id !== reply.id) return;
      slot.pending = null;
      if (reply.ok) p.resolve(reply.output);
      else p.reject(new Error(reply.message));
    });
    const died = (why: string) => {
      if (slot.worker !== w) return;
      slot.worker = null;
      const p = slot.pending;
      slot.pending = null;
      p?.reject(new Error(`device ${device} worker ${worker} thread died: ${why}`));
    };
    w.on('error', (e) => died(e.message));
    w.on('exit', (code) => died(`exit code ${code}`));
    return w;
  }

  /**
   * Ends a slot's thread, then fails its pending step. In that order: the step's buffer goes back
   * to the pool when the step settles, and a thread stuck in a native call could still write into
   * it until terminate() has returned.
   */
  private kill(index: number, why: Error): Promise<void> {
    const slot = this.slots[index] as Slot;
    const w = slot.worker;
    const p = slot.pending;
    slot.worker = null;
    slot.pending = null;
    const done = (async () => {
      if (w) await w.terminate();
      // Busy time of an abandoned step is not the next item's.
      slot.seenNs = Atomics.load(this.counters, index * 2);
      p?.reject(why);
    })();
    this.killing.add(done);
    void done.finally(() => this.killing.delete(done));
    return done;
  }
}

/**
 * `stoker device-bench`: what a process device costs. (1) Handing a large prepared item to a
 * Python worker by file (the preparation thread writes the pooled buffer to a memory-backed
 * folder; the worker maps it) vs through the pipe (the server writes it into the worker's stdin;
 * the worker reads it in). (2) Items per second of a no-op process device vs a no-op thread device.
 * Wall-clock figures: they vary with the machine and its load.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { ProcessDevice } from './process-device.js';
import { Runtime, type Workload } from './runtime.js';
import { StageThreads, type DeviceRunner, type PreparedBuffer, type RunCall } from './threaded.js';

/** A Python worker that touches every page of the payload (one byte in 4096) and sums those bytes. */
const TOUCH = 'import stoker_worker\nstoker_worker.serve(lambda item: sum(item.payload[::4096]) if item.payload is not None else 0)\n';

export interface HandoffRow {
  how: 'file' | 'pipe';
  bytes: number;
  /** Writing the handoff file in the preparation thread (0 for the pipe). */
  writeMs: number;
  /** From sending the item until its result: the pipe transfer, or mapping the file, and touching every page. */
  runMs: number;
  totalMs: number;
}

export interface ItemsRow {
  device: 'process (python)' | 'thread';
  items: number;
  itemsPerSec: number;
  usPerItem: number;
}

const noSignal = new AbortController().signal;

function call(module: string, style: 'workload' | 'kind', prepared: PreparedBuffer, worker = 0): RunCall {
  return { kind: 'bench', module, style, input: null, jobId: 'bench', partition: 0, partitions: 1, prepared, device: 0, worker, signal: noSignal };
}

/** One large item handed over each way, `runs` times; the median run of each. */
export async function measureHandoff(bytes: number, runs = 3): Promise<HandoffRow[]> {
  const shm = fs.mkdtempSync(path.join(fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'stoker-bench-'));
  const threads = new StageThreads({ devices: [{ workers: 1 }], prepareThreads: 1 });
  const device = new ProcessDevice({ name: 'bench', workers: 1, command: 'python3', args: ['-c', TOUCH], maxFrameBytes: 2 ** 30 });
  const fill = new URL('./workloads/fill-prepare.js', import.meta.url).href;
  const rows: HandoffRow[] = [];
  try {
    for (const how of ['file', 'pipe'] as const) {
      const samples: HandoffRow[] = [];
      for (let r = 0; r < runs; r++) {
        const prepared = await threads.prepare({ module: fill, style: 'kind', input: null, jobId: 'bench', partition: 0, partitions: 1, bufferBytes: bytes, signal: noSignal, ...(how === 'file' ? { handoff: { dir: shm, minBytes: 0 } } : {}) });
        const writeMs = prepared.file?.writeMs ?? 0;
        const t0 = performance.now();
        await device.run(call('', 'kind', prepared));
        const runMs = performance.now() - t0;
        threads.release(prepared);
        samples.push({ how, bytes, writeMs, runMs, totalMs: writeMs + runMs });
      }
      rows.push(samples.sort((a, b) => a.totalMs - b.totalMs)[Math.floor(samples.length / 2)] as HandoffRow);
    }
  } finally {
    await device.close();
    await threads.close();
    fs.rmSync(shm, { recursive: true, force: true });
  }
  return rows;
}

/** `items` one-partition jobs through a Runtime whose device steps go to `device` (two workers), preparation in process. */
async function itemsThrough(device: DeviceRunner, module: string, style: 'workload' | 'kind', items: number): Promise<number> {
  const workload: Workload<null, PreparedBuffer, unknown, number> = {
    prepare: () => Promise.resolve({ meta: null }),
    run: (t) => device.run({ ...call(module, style, t.prepared, t.worker), signal: t.signal }),
    finish: (j) => j.outputs.length,
  };
  const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced' });
  // Warm up: the processes start, the thread loads its module.
  await Promise.all([0, 1, 2, 3].map((i) => rt.submit({ id: `w${i}`, kind: 'bench', partitions: 1 }, null)));
  const t0 = performance.now();
  await Promise.all(Array.from({ length: items / 10 }, (_, j) => rt.submit({ id: `j${j}`, kind: 'bench', partitions: 10 }, null)));
  const ms = performance.now() - t0;
  await rt.close();
  return ms;
}

/** Items per second of no-op device steps: two Python worker processes vs two device threads. */
export async function measureDeviceItems(items = 5000): Promise<ItemsRow[]> {
  const n = Math.max(10, Math.round(items / 10) * 10);
  const proc = new ProcessDevice({ name: 'bench', workers: 2, command: 'python3', args: ['-c', 'import stoker_worker\nstoker_worker.serve(lambda item: None)\n'] });
  const threads = new StageThreads({ devices: [{ workers: 2 }], prepareThreads: 1 });
  const row = (device: ItemsRow['device'], ms: number): ItemsRow => ({ device, items: n, itemsPerSec: (n / ms) * 1000, usPerItem: (ms * 1000) / n });
  try {
    const processMs = await itemsThrough(proc, '', 'kind', n);
    const threadMs = await itemsThrough(threads, new URL('./workloads/noop-device.js', import.meta.url).href, 'workload', n);
    return [row('process (python)', processMs), row('thread', threadMs)];
  } finally {
    await proc.close();
    await threads.close();
  }
}

/** What the device tests share: a Runtime whose device steps go to a DeviceRunner, and a failed job's error. */
import { expect } from 'vitest';
import { StokerError, type EngineEvent } from '../../src/core/index.js';
import { Runtime, type DeviceTask, type PartitionTask, type RuntimeOptions, type Workload } from '../../src/runtime/runtime.js';
import type { DeviceRunner, PreparedBuffer, RunCall } from '../../src/runtime/threaded.js';

/** The device call of a task (kind "k", no module: the device does the step). */
export function callOf<I>(t: DeviceTask<I, PreparedBuffer>): RunCall {
  return { kind: 'k', module: '', style: 'kind', input: t.input, jobId: t.jobId, partition: t.partition, partitions: t.partitions, prepared: t.prepared, device: t.device, worker: t.worker, signal: t.signal, ...(t.begin ? { begin: t.begin } : {}) };
}

/** A one-worker Runtime (pacer unpaced, no retries) whose device batches (up to `maxItems`) through the device's runBatch; closed with `close()`. */
export function batchingRuntimeOver<I>(device: DeviceRunner, prepare: (t: PartitionTask<I>) => Promise<PreparedBuffer>, maxItems: number, onStep?: RuntimeOptions<I, PreparedBuffer, unknown, unknown[]>['onStep'], retries = 0): Runtime<I, PreparedBuffer, unknown, unknown[]> {
  const runBatch = device.runBatch?.bind(device);
  if (!runBatch) throw new Error('the device does not run batches');
  const workload: Workload<I, PreparedBuffer, unknown, unknown[]> = {
    prepare,
    run: () => Promise.reject(new Error('a batching device runs batches')),
    runBatch: (tasks) => runBatch(tasks.map(callOf)),
    finish: (j) => j.outputs,
    close: () => device.close(),
  };
  return new Runtime({ workload, devices: [{ workers: 1, batch: { maxItems } }], pacer: 'unpaced', retries, ...(onStep ? { onStep } : {}) });
}

/** A one-device Runtime (pacer unpaced, budget 10,000 bytes) with in-process preparation; closed with `close()` (which closes the device too). */
export function runtimeOver<I>(device: DeviceRunner, prepare: (t: PartitionTask<I>) => Promise<PreparedBuffer>, options: { workers: number; retries?: number; deviceTimeoutMs?: number; onStep?: (event: EngineEvent) => void }): Runtime<I, PreparedBuffer, unknown, unknown[]> {
  const workload: Workload<I, PreparedBuffer, unknown, unknown[]> = {
    prepare,
    run: (t) => device.run(callOf(t)),
    finish: (j) => j.outputs,
    close: () => device.close(),
    watchWorkers: (listener) => device.watchWorkers?.((worker, up) => listener(0, worker, up)),
  };
  return new Runtime({ workload, devices: [{ workers: options.workers }], pacer: 'unpaced', budgetBytes: 10_000, retries: options.retries ?? 1, ...(options.deviceTimeoutMs ? { deviceTimeoutMs: options.deviceTimeoutMs } : {}), ...(options.onStep ? { onStep: options.onStep } : {}) });
}

/** A job of `partitions` partitions of 100 (preparing) / 10 (on the device) bytes. */
export const spec = (id: string, partitions = 1) => ({ id, kind: 'k', partitions, memory: { prepareBytes: 100, deviceBytes: 10 } });

/** The StokerError a job's promise rejects with. */
export async function failure(p: Promise<unknown>): Promise<StokerError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(StokerError);
  return e as StokerError;
}

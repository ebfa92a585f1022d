/** What the device tests share: a Runtime whose device steps go to a DeviceRunner, and a failed job's error. */
import { expect } from 'vitest';
import { StokerError } from '../../src/core/index.js';
import { Runtime, type PartitionTask, type Workload } from '../../src/runtime/runtime.js';
import type { DeviceRunner, PreparedBuffer } from '../../src/runtime/threaded.js';

/** A one-device Runtime (pacer unpaced, budget 10,000 bytes) with in-process preparation; closed with `close()` (which closes the device too). */
export function runtimeOver<I>(device: DeviceRunner, prepare: (t: PartitionTask<I>) => Promise<PreparedBuffer>, options: { workers: number; retries?: number; deviceTimeoutMs?: number }): Runtime<I, PreparedBuffer, unknown, unknown[]> {
  const workload: Workload<I, PreparedBuffer, unknown, unknown[]> = {
    prepare,
    run: (t) => device.run({ kind: 'k', module: '', style: 'kind', input: t.input, jobId: t.jobId, partition: t.partition, partitions: t.partitions, prepared: t.prepared, device: t.device, worker: t.worker, signal: t.signal }),
    finish: (j) => j.outputs,
    close: () => device.close(),
  };
  return new Runtime({ workload, devices: [{ workers: options.workers }], pacer: 'unpaced', budgetBytes: 10_000, retries: options.retries ?? 1, ...(options.deviceTimeoutMs ? { deviceTimeoutMs: options.deviceTimeoutMs } : {}) });
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

/**
 * A device thread: runs the steps sent to it (one at a time per worker slot) with the module each
 * request names (loaded once per thread, before the step's clock starts), times each device call
 * itself (not any queueing), and publishes busy nanoseconds and a count with Atomics into its
 * slot's shared counters, which the runtime reads as deltas (the field engine's accumulator).
 */
import { performance } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';
import { moduleLoader, type DeviceModule, type DeviceRequest, type DeviceReply, type DeviceWorkerData } from './protocol.js';

const init = workerData as DeviceWorkerData;
const counters = new BigInt64Array(init.counters);
const load = moduleLoader<DeviceModule>('device', 'run', (style) => (style === 'kind' ? 'run(prepared, ctx)' : 'run(input, ctx)'));
const port = parentPort;
if (!port) throw new Error('device-worker.js runs as a worker thread');

/** The step's call: a workload module's run(input, ctx with meta), or a kind module's run(prepared, ctx with input). */
function call(mod: DeviceModule, req: DeviceRequest): unknown {
  const { jobId, partition, partitions, buffer, meta } = req.ctx;
  const where = { device: init.device, worker: req.worker };
  if (req.style === 'workload') return mod.run(req.input, { jobId, partition, buffer: buffer as SharedArrayBuffer, meta, ...where });
  const ctx = { job: jobId, jobId, partition, partitions, input: req.input, deviceKind: init.deviceKind, ...where, ...(buffer ? { buffer } : {}) };
  return (mod.run as unknown as (prepared: unknown, c: typeof ctx) => unknown)(meta, ctx);
}

port.on('message', (req: DeviceRequest) => {
  void (async () => {
    let reply: DeviceReply;
    try {
      const m = load(req.module, req.style);
      const mod = m instanceof Promise ? await m : m;
      const t0 = performance.now();
      const output = await call(mod, req);
      const ns = BigInt(Math.round((performance.now() - t0) * 1e6));
      Atomics.add(counters, req.slot * 2, ns);
      Atomics.add(counters, req.slot * 2 + 1, 1n);
      reply = { id: req.id, ok: true, output };
    } catch (e) {
      reply = { id: req.id, ok: false, message: e instanceof Error ? e.message : String(e) };
    }
    port.postMessage(reply);
  })();
});

/**
 * A device thread: runs the steps sent to it with the workload's device module (one at a time
 * per worker slot), times each device call itself (not any queueing), and publishes busy
 * nanoseconds and a count with Atomics into its slot's shared counters, which the runtime reads
 * as deltas (the field engine's accumulator).
 */
import { performance } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';
import type { DeviceModule, DeviceRequest, DeviceReply, DeviceWorkerData } from './protocol.js';

const init = workerData as DeviceWorkerData;
const counters = new BigInt64Array(init.counters);
const mod = (await import(init.module)) as DeviceModule;
if (typeof mod.run !== 'function') throw new Error(`device module ${init.module} must export a function run(input, ctx)`);
const port = parentPort;
if (!port) throw new Error('device-worker.js runs as a worker thread');

port.on('message', (req: DeviceRequest) => {
  void (async () => {
    let reply: DeviceReply;
    try {
      const t0 = performance.now();
      const output = await mod.run(req.input, { ...req.ctx, device: init.device, worker: req.worker });
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

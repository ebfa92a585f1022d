/**
 * A device thread: runs the steps sent to it (one at a time per worker slot) with the module each
 * request names (loaded once per thread, before the step's clock starts), times each device call
 * itself (not any queueing), and publishes busy nanoseconds and a count with Atomics into its
 * slot's shared counters, which the runtime reads as deltas (the field engine's accumulator).
 */
import { performance } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';
import { moduleLoader, thrownValue, type BatchItemReply, type DeviceModule, type DeviceRequest, type DeviceReply, type DeviceWorkerData } from './protocol.js';
import { itemError, noRetry } from '../no-retry.js';

const init = workerData as DeviceWorkerData;
const counters = new BigInt64Array(init.counters);
const load = moduleLoader<DeviceModule>('device', 'run', (style) => (style === 'kind' ? 'run(prepared, ctx)' : 'run(input, ctx)'));
const loadBatch = moduleLoader<{ runBatch(prepared: unknown[], ctx: unknown[]): unknown }>('device', 'runBatch', () => 'runBatch(prepared[], ctx[])');
const port = parentPort;
if (!port) throw new Error('device-worker.js runs as a worker thread');

/** A kind module's ctx for one item of a step. */
function kindCtx(req: DeviceRequest, input: unknown, c: DeviceRequest['ctx']) {
  const { jobId, partition, partitions, buffer } = c;
  return { job: jobId, jobId, partition, partitions, input, deviceKind: init.deviceKind, device: init.device, worker: req.worker, ...(buffer ? { buffer } : {}) };
}

/** The step's call: a workload module's run(input, ctx with meta), or a kind module's run(prepared, ctx with input). */
function call(mod: DeviceModule, req: DeviceRequest): unknown {
  const { jobId, partition, partitions, buffer, meta } = req.ctx;
  if (req.style === 'workload') return mod.run(req.input, { jobId, partition, partitions, ...(buffer ? { buffer } : {}), meta, device: init.device, worker: req.worker });
  return (mod.run as unknown as (prepared: unknown, c: unknown) => unknown)(meta, kindCtx(req, req.input, req.ctx));
}

/** A batch's call: a kind module's runBatch(prepared[], ctx[]); one output per item, an Error in its place failing that item alone. */
async function callBatch(req: DeviceRequest, batch: NonNullable<DeviceRequest['batch']>): Promise<BatchItemReply[]> {
  const m = loadBatch(req.module, req.style);
  const mod = m instanceof Promise ? await m : m;
  const outputs = await mod.runBatch(
    batch.map((b) => b.ctx.meta),
    batch.map((b) => kindCtx(req, b.input, b.ctx)),
  );
  if (!Array.isArray(outputs) || outputs.length !== batch.length) {
    throw new Error(`runBatch returned ${Array.isArray(outputs) ? `${outputs.length} outputs` : typeof outputs} for ${batch.length} items: return an array with one output (or Error) per item, in order`);
  }
  return outputs.map((o: unknown) => (o instanceof Error ? itemError(o) : { output: o }));
}

port.on('message', (req: DeviceRequest) => {
  void (async () => {
    let reply: DeviceReply;
    try {
      // (The module is loaded before the step's clock starts; a step that waited for it says so,
      // and its device timeout counts from then.)
      const batch = req.batch;
      let loaded = false;
      if (batch) {
        const m = loadBatch(req.module, req.style);
        if (m instanceof Promise) {
          await m;
          loaded = true;
        }
      }
      const m = batch ? undefined : load(req.module, req.style);
      if (m instanceof Promise) loaded = true;
      const mod = m instanceof Promise ? await m : m;
      if (loaded) port.postMessage({ id: req.id, begun: true } satisfies DeviceReply);
      const t0 = performance.now();
      const output = batch ? await callBatch(req, batch) : await call(mod as DeviceModule, req);
      const ns = BigInt(Math.round((performance.now() - t0) * 1e6));
      Atomics.add(counters, req.slot * 2, ns);
      Atomics.add(counters, req.slot * 2 + 1, 1n);
      reply = { id: req.id, ok: true, output };
    } catch (e) {
      reply = { id: req.id, ok: false, message: e instanceof Error ? e.message : `the device step threw ${thrownValue(e)}, not an Error: throw new Error("why")`, ...(noRetry(e) ? { retry: false as const } : {}) };
    }
    try {
      port.postMessage(reply);
    } catch (e) {
      // An output a thread cannot send (a function, a promise…): its step fails saying so, for good
      // (the same step would return it again: it was retried), the thread lives on.
      port.postMessage({ id: req.id, ok: false, retry: false, message: `its output could not be sent from the device thread (${e instanceof Error ? e.message : String(e)}): return plain data — objects, arrays, numbers, strings, typed arrays` });
    }
  })();
});

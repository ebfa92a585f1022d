import { performance } from 'node:perf_hooks';
import { totalBusyMs, windowOccupancy, type ReadonlySnapshot, type PacerState } from '../core/index.js';
import { BufferPool } from './buffer-pool.js';
import { Runtime } from './runtime.js';
import { createNttProofWorkload, nttBufferBytes, type NttProofInput } from './workloads/ntt-proof.js';
import type { DemoOptions } from './demo-options.js';

export interface DemoSummary {
  pacer: string;
  seconds: number;
  jobsDone: number;
  jobsFailed: number;
  partitionsPerSec: number;
  /** Device busy time ÷ (workers × time), over the steady part (after the first 20 % of the arrival period); null where the run was too short to have one. */
  occupancy: number | null;
  /** The preparation cap the engine ran with (the workload's preparation slots, or --max-preparing); null: none. */
  maxPreparing: number | null;
  /** Time-weighted mean of items waiting for a device, same period. */
  waitingMean: number;
  /** Share of the same period with no partition queued (every one of the jobs in flight dispatched): near 1 with a low occupancy, the load — too few jobs in flight — held the devices idle, not the pacer. Null: no such period. */
  queueEmptyShare: number | null;
  /** Peak bytes held: pooled buffers (leased + idle) at their high-water mark. */
  peakPoolBytes: number;
  /** Peak bytes reserved by the engine's budget accounting. */
  peakReservedBytes: number;
  jobLatencyP50Ms: number | null;
  jobLatencyP99Ms: number | null;
  /** Buffer pool: fresh allocations vs reuses. */
  freshBuffers: number;
  reusedBuffers: number;
}

/**
 * What the demo's job loop runs on: the runtime directly ({@link runtimeBackend}), or a service
 * (the same jobs through `stoker serve`'s Service, so its dashboard can watch).
 */
export interface DemoBackend {
  /** Submits job number `j`; resolves when it is done, rejects when it fails. */
  submit(j: number): Promise<void>;
  /** The engine's live counters. */
  readonly snapshot: ReadonlySnapshot;
  pacerState(): PacerState;
  /** Busy time of all workers up to `at` (performance.now() ms), the running part of items in flight included: the busy time of a window between two calls is at most workers × its length. */
  busyMs(at: number): number;
  readonly pool: BufferPool;
  close(): Promise<void>;
}

/** The ntt-proof workload on the runtime. */
export function runtimeBackend(opts: DemoOptions): DemoBackend {
  const devices = [{ workers: opts.workers }];
  const pool = new BufferPool();
  const workload = createNttProofWorkload({ devices, device: opts.device, prepareThreads: 1, prepareConcurrency: opts.maxPreparing ?? 64, pool });
  const rt = new Runtime({ workload, devices, pacer: opts.pacer, pacerOptions: { ...opts.pacerOptions, targetWaiting: opts.targetWaiting }, budgetBytes: opts.budgetBytes ?? Infinity, timeline: opts.timeline });
  const input = (jobIndex: number): NttProofInput => ({ seed: opts.seed, jobIndex, logN: opts.logN, synthesisMs: opts.synthesisMs });
  const bytes = nttBufferBytes(input(0));
  // The device step reads the pooled buffer until it ends: the bytes stay held on the device.
  const memory = { prepareBytes: bytes, deviceBytes: bytes };
  return {
    submit: (j) => rt.submit({ id: `job-${j}`, kind: 'ntt-proof', partitions: opts.partitions, memory }, input(j)).then(() => undefined),
    snapshot: rt.engine.snapshot,
    pacerState: () => rt.engine.pacer.state(),
    busyMs: (at) => totalBusyMs(rt.workerBusyMs(at)),
    pool,
    close: () => rt.close(),
  };
}

/**
 * Runs the ntt-proof workload on real threads with one pacer: jobs arrive in a closed loop for
 * `seconds`, progress is printed as it goes, and a summary comes back when the last job is done.
 */
export async function runDemo(opts: DemoOptions, progress: (line: string) => void, backend: DemoBackend = runtimeBackend(opts)): Promise<DemoSummary> {
  const pool = backend.pool;
  const t0 = performance.now();
  const stopAt = t0 + opts.seconds * 1000;
  const steadyFrom = t0 + 0.2 * opts.seconds * 1000;
  const latencies: number[] = [];
  let done = 0;
  let failed = 0;
  let next = 0;
  const all: Promise<void>[] = [];

  const submit = () => {
    const j = next++;
    const started = performance.now();
    const p = backend.submit(j).then(
      () => {
        done++;
        latencies.push(performance.now() - started);
      },
      (e: unknown) => {
        failed++;
        progress(`job-${j} failed: ${e instanceof Error ? e.message : String(e)}`);
      },
    );
    all.push(
      p.then(() => {
        if (performance.now() < stopAt) submit();
      }),
    );
  };
  for (let i = 0; i < opts.jobsInFlight; i++) submit();

  // Sampling: occupancy from the workers' busy time (running items included), waiting from the engine.
  let peakReserved = 0;
  let waitingIntegral = 0;
  let emptyMs = 0;
  let sampledMs = 0;
  let busyAtSteady = 0;
  let steadyStart = NaN;
  let busyAtStop = NaN;
  let steadyEnd = NaN;
  let lastT = t0;
  let last = { busy: 0, dispatched: 0, done: 0, t: t0 };
  const sampler = setInterval(() => {
    const now = performance.now();
    const busyMs = () => backend.busyMs(now);
    const s = backend.snapshot;
    peakReserved = Math.max(peakReserved, s.budgetUsedBytes);
    if (now > stopAt && Number.isNaN(steadyEnd)) {
      steadyEnd = now;
      busyAtStop = busyMs();
    }
    if (now >= steadyFrom && now <= stopAt) {
      if (Number.isNaN(steadyStart)) {
        steadyStart = now;
        busyAtSteady = busyMs();
      } else {
        waitingIntegral += s.waiting * (now - lastT);
        if (s.backlog === 0) emptyMs += now - lastT;
        sampledMs += now - lastT;
      }
    }
    lastT = now;
    if (opts.progressMs > 0 && now - last.t >= opts.progressMs) {
      const busy = busyMs();
      const dt = now - last.t;
      const st = backend.pacerState();
      const stats = pool.stats();
      progress(
        `${((now - t0) / 1000).toFixed(0).padStart(4)} s  jobs ${String(done).padStart(4)}  occupancy ${windowOccupancy(busy - last.busy, dt, opts.workers).toFixed(2)}  ` +
          `waiting ${String(s.waiting).padStart(3)} (target ${opts.targetWaiting})  preparing ${String(s.preparing).padStart(3)}  ` +
          `dispatch ${(((s.dispatched - last.dispatched) / dt) * 1000).toFixed(1)}/s  capacity ${st.ratePerSec === null ? '–' : `${st.ratePerSec.toFixed(1)}/s`}  ` +
          `pool ${(stats.totalBytes / 2 ** 20).toFixed(0)} MiB  ${st.mode}`,
      );
      last = { busy, dispatched: s.dispatched, done, t: now };
    }
  }, 50);

  // The loop stops submitting at stopAt; wait for every job, then shut down.
  await new Promise<void>((resolve) => {
    const check = () => (performance.now() >= stopAt ? Promise.all(all).then(() => resolve()) : setTimeout(check, 100));
    check();
  });
  await Promise.all(all);
  clearInterval(sampler);
  // Every job done before the sampler's first tick past stopAt: the window closes now (it read no occupancy).
  if (Number.isNaN(steadyEnd) && !Number.isNaN(steadyStart)) {
    steadyEnd = performance.now();
    busyAtStop = backend.busyMs(steadyEnd);
  }
  const occupancy = Number.isNaN(steadyStart) || Number.isNaN(steadyEnd) ? null : windowOccupancy(busyAtStop - busyAtSteady, steadyEnd - steadyStart, opts.workers);
  const cap = backend.snapshot.maxPreparing;
  await backend.close();
  const sorted = [...latencies].sort((a, b) => a - b);
  const pct = (p: number) => (sorted.length ? (sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)] as number) : null);
  const stats = pool.stats();
  const elapsed = (performance.now() - t0) / 1000;
  return {
    pacer: opts.pacer,
    seconds: elapsed,
    jobsDone: done,
    jobsFailed: failed,
    partitionsPerSec: (done * opts.partitions) / elapsed,
    occupancy,
    maxPreparing: Number.isFinite(cap) ? cap : null,
    waitingMean: sampledMs > 0 ? waitingIntegral / sampledMs : 0,
    queueEmptyShare: sampledMs > 0 ? emptyMs / sampledMs : null,
    peakPoolBytes: stats.highWaterBytes,
    peakReservedBytes: peakReserved,
    jobLatencyP50Ms: pct(0.5),
    jobLatencyP99Ms: pct(0.99),
    freshBuffers: stats.fresh,
    reusedBuffers: stats.reused,
  };
}

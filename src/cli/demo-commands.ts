/**
 * The commands that run the real thing on this machine rather than the simulator: `stoker demo`
 * (the ntt-proof workload on real threads, pacer by pacer), `stoker device-bench` (what a process
 * device costs) and `stoker overhead` (the runtime's own cost per item); their flags and helpers.
 */
import { performance } from 'node:perf_hooks';
import { createPacer, TimelineRecorder } from '../core/index.js';
import { toJson } from '../sim/report.js';
import { runDemo, type DemoBackend, type DemoSummary } from '../runtime/demo.js';
import { DEMO_DEFAULTS, type DemoOptions } from '../runtime/demo-options.js';
import { serviceBackend } from '../server/demo-service.js';
import { measureOverhead } from '../runtime/overhead.js';
import { measureDeviceItems, measureHandoff } from '../runtime/device-bench.js';
import { requireOptional } from '../runtime/optional.js';
import { checkOutputFile, parseInteger, parseList, traceFiles, writeTrace } from './commands.js';
import { UsageError, type Io } from './io.js';
import { formatTable } from './table.js';

/** `stoker demo`'s flags, as commander gives them (numbers still strings: checked here). */
export interface DemoFlags {
  seconds: string;
  device: string;
  pacers: string;
  workers: string;
  logN: string;
  synthesisMs: string;
  partitions: string;
  jobsInFlight: string;
  target: string;
  budgetBytes?: string;
  maxPreparing?: string;
  seed: string;
  json?: boolean;
  quiet?: boolean;
  /** Chrome trace JSON of the real run, one file per pacer. */
  trace?: string;
  /** Run the jobs through a service and serve its dashboard while they run. */
  dashboard?: boolean;
  host: string;
  port: string;
}

/** Parses an integer option value that must be ≥ 1; the error names the option. */
function positive(option: string, value: string): number {
  const n = parseInteger(option, value);
  if (n < 1) throw new UsageError(`${option} must be ≥ 1 (got ${n})`);
  return n;
}

/** Runs the ntt-proof workload on real threads with each pacer in turn; progress on stderr, a summary table on stdout. */
export async function demoCommand(flags: DemoFlags, io: Io): Promise<void> {
  const logN = positive('--log-n', flags.logN);
  if (logN > 20) throw new UsageError(`--log-n must be ≤ 20 (got ${logN}): larger NTTs are beyond this demo`);
  if (flags.device !== 'cpu' && flags.device !== 'webgpu') throw new UsageError(`--device must be cpu or webgpu (got ${JSON.stringify(flags.device)})`);
  if (flags.device === 'webgpu') requireOptional('--device webgpu', ['webgpu']);
  const base: Omit<DemoOptions, 'pacer'> = {
    seconds: positive('--seconds', flags.seconds),
    device: flags.device,
    workers: positive('--workers', flags.workers),
    logN,
    synthesisMs: parseInteger('--synthesis-ms', flags.synthesisMs),
    partitions: positive('--partitions', flags.partitions),
    jobsInFlight: positive('--jobs-in-flight', flags.jobsInFlight),
    targetWaiting: parseInteger('--target', flags.target),
    ...(flags.budgetBytes === undefined ? {} : { budgetBytes: positive('--budget-bytes', flags.budgetBytes) }),
    ...(flags.maxPreparing === undefined ? {} : { maxPreparing: positive('--max-preparing', flags.maxPreparing) }),
    seed: parseInteger('--seed', flags.seed),
    progressMs: flags.quiet ? 0 : DEMO_DEFAULTS.progressMs,
  };
  if (base.synthesisMs < 0 || base.targetWaiting < 0) throw new UsageError('--synthesis-ms and --target must be ≥ 0');
  const pacers = parseList('--pacers', flags.pacers);
  // Fail before the first run, with createPacer's own error for a name it does not know.
  for (const p of pacers) createPacer(p);
  if (flags.trace !== undefined && flags.dashboard) throw new UsageError('--trace and --dashboard do not combine: with --dashboard, export a trace while it runs with `stoker trace export --server <url>`');
  const port = parseInteger('--port', flags.port);
  if (port < 0 || port > 65535) throw new UsageError(`--port must be 0–65535 (got ${port})`);
  if (flags.trace !== undefined) checkOutputFile('--trace', flags.trace);
  const files = flags.trace === undefined ? [] : traceFiles(flags.trace, pacers);
  const results: DemoSummary[] = [];
  for (const [i, pacer] of pacers.entries()) {
    io.err(`ntt-proof on ${base.workers} ${base.device === 'cpu' ? 'CPU' : 'WebGPU'} device workers, 2^${logN}-point NTTs, ${base.synthesisMs} ms synthesis wait, pacer ${pacer}, ${base.seconds} s\n`);
    const timeline = flags.trace === undefined ? undefined : new TimelineRecorder({ sampleEveryMs: 50 });
    const opts = { ...base, pacer, timeline };
    let backend: DemoBackend | undefined;
    if (flags.dashboard) {
      const served = await serviceBackend(opts, { host: flags.host, port });
      backend = served.backend;
      io.err(`dashboard: ${served.url}/ (while this run lasts)\n`);
    }
    const ran = await runDemo(opts, (line) => io.err(`${line}\n`), backend);
    results.push(ran);
    if (timeline) {
      const title = `ntt-proof demo — ${pacer} pacer (${base.workers} ${base.device} device workers, real time)`;
      // (The cap the run had, for `stoker plan` to replay: without it a plan replayed the run uncapped, 2.6× faster than it ran.)
      writeTrace(files[i] as string, title, timeline, performance.now(), { budgetBytes: base.budgetBytes, targetWaiting: base.targetWaiting, ...(ran.maxPreparing === null ? {} : { maxPreparing: ran.maxPreparing }) }, io);
    }
  }
  if (flags.json) {
    io.out(toJson(results));
    return;
  }
  const rows = results.map((r) => [
    r.pacer,
    `${r.jobsDone}/${r.jobsFailed}`,
    r.partitionsPerSec.toFixed(1),
    r.occupancy === null ? '–' : r.occupancy.toFixed(3),
    r.waitingMean.toFixed(1),
    mib(r.peakPoolBytes),
    mib(r.peakReservedBytes),
    r.jobLatencyP50Ms === null ? '–' : `${(r.jobLatencyP50Ms / 1000).toFixed(1)} s`,
    r.jobLatencyP99Ms === null ? '–' : `${(r.jobLatencyP99Ms / 1000).toFixed(1)} s`,
    `${r.freshBuffers}/${r.reusedBuffers}`,
  ]);
  io.out(formatTable(['pacer', 'jobs done/failed', 'partitions/s', 'occupancy', 'waiting', 'peak pool', 'peak reserved', 'latency p50', 'latency p99', 'buffers fresh/reused'], rows));
  // (A user read occupancy 0.03 as a bad result: it was 4 jobs of 4 partitions in flight.)
  for (const r of results) {
    if (r.occupancy !== null && r.occupancy < 0.8 && r.queueEmptyShare !== null && r.queueEmptyShare >= 0.5) {
      io.out(`note: ${r.pacer}: nothing was queued ${(r.queueEmptyShare * 100).toFixed(0)} % of the time, the devices ${(r.occupancy * 100).toFixed(0)} % busy: the load held them idle, not the pacer — at most --jobs-in-flight × --partitions = ${base.jobsInFlight * base.partitions} partitions in flight; raise --jobs-in-flight for a load that keeps them busy\n`);
    }
  }
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;

/** What a process device costs: a large item by file vs through the pipe; no-op items/s, process vs thread (wall clock). */
export async function deviceBenchCommand(flags: { bytes: string; items: string; json?: boolean }, io: Io): Promise<void> {
  const bytes = positive('--bytes', flags.bytes);
  const items = positive('--items', flags.items);
  if (bytes > 2 ** 30) throw new UsageError(`--bytes must be at most ${2 ** 30} (1 GiB), got ${bytes}`);
  io.err(`device-bench: handing one ${mib(bytes)} item to a Python worker, by file and through the pipe (3 runs each)\n`);
  const handoff = await measureHandoff(bytes);
  io.err(`device-bench: ${items} no-op items on 2 Python worker processes, then on 2 device threads\n`);
  const rate = await measureDeviceItems(items);
  if (flags.json) {
    io.out(toJson({ handoff, items: rate }));
    return;
  }
  const ms = (v: number) => `${v.toFixed(0)} ms`;
  io.out(formatTable(['handoff', 'bytes', 'write file', 'run (transfer + touch every page)', 'total'], handoff.map((r) => [r.how === 'file' ? 'by file (/dev/shm)' : 'through the pipe', mib(r.bytes), r.how === 'file' ? ms(r.writeMs) : '–', ms(r.runMs), ms(r.totalMs)])));
  io.out('\n');
  io.out(formatTable(['device', 'items', 'items/s', 'µs per item'], rate.map((r) => [r.device, String(r.items), Math.round(r.itemsPerSec).toLocaleString('en-US'), r.usPerItem.toFixed(1)])));
}

/** The runtime's own cost per item (a wall-clock benchmark). */
export async function overheadCommand(flags: { items: string; json?: boolean }, io: Io): Promise<void> {
  const items = positive('--items', flags.items);
  const rows = await measureOverhead(items, Math.min(items, 5_000));
  if (flags.json) {
    io.out(toJson(rows));
    return;
  }
  io.out(formatTable(['what', 'items', 'items/s', 'µs per item'], rows.map((r) => [r.what, String(r.items), Math.round(r.itemsPerSec).toLocaleString('en-US'), r.usPerItem.toFixed(1)])));
  if (!rows.some((r) => r.what.startsWith('p-queue'))) io.err('(p-queue is not installed: `npm install p-queue` to time it beside the runtime)\n');
}

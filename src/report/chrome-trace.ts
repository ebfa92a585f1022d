import { PRIORITIES, type BatchSetting, type Priority, type TimelineJob, type TimelineLane, type TimelineSample, type TimelineSpan } from '../core/index.js';

/**
 * Chrome trace event JSON (the format Perfetto and chrome://tracing open) from a timeline: one
 * track (tid) per preparation slot and per device worker, a complete event ("X") per partition
 * and stage, counter events ("C") for waiting, inventory and memory, and an instant event ("i")
 * per job submitted (its kind, size and memory: what `stoker plan` fits arrivals from). Times in
 * µs. {@link fromChromeTrace} reads one back.
 */

export interface ChromeTraceEvent {
  name: string;
  ph: 'X' | 'C' | 'M' | 'i';
  /** An instant event's scope ("p": the process). */
  s?: 'p';
  pid: number;
  tid?: number;
  ts?: number;
  dur?: number;
  cat?: string;
  args?: Record<string, unknown>;
}

export interface ChromeTrace {
  traceEvents: ChromeTraceEvent[];
  displayTimeUnit: 'ms';
  otherData: Record<string, string>;
}

export interface ChromeTraceInput {
  lanes: readonly TimelineLane[];
  spans: readonly TimelineSpan[];
  samples: readonly TimelineSample[];
  /** The jobs submitted. @default none */
  jobs?: readonly TimelineJob[];
  /** The trace's process name, e.g. "stoker demo (stoker pacer)". */
  title: string;
  /** Where a span still running ends in the trace (ms, the timeline's clock): usually now. */
  now: number;
  /** Subtracted from every time (ms), so the trace starts near 0. @default the earliest time */
  originMs?: number;
  /** The run's memory budget, bytes (recorded for `stoker plan`: the machine's memory); absent or Infinity: none. */
  budgetBytes?: number;
  /** The run's cap on preparations at once (recorded for `stoker plan`); absent or Infinity: none. */
  maxPreparing?: number;
  /** The run's waiting target (recorded for `stoker plan`: the run's own setting); absent: not recorded. */
  targetWaiting?: number;
  /** The devices' names by index (a server's: `default`, `gpu`…): in the device tracks' names, and for `stoker plan`'s config lines. */
  deviceNames?: readonly string[];
  /** Each device's batching (null: one item per step), recorded for `stoker plan` (a batch's size and wait are settings, not measures). */
  deviceBatches?: readonly (BatchSetting | null)[];
  /** The kinds prepared in batches, and how (recorded for `stoker plan`). */
  prepareBatches?: Readonly<Record<string, BatchSetting>>;
}

const PID = 1;
/** tid 0 is the counters' track; lanes follow. */
const tidOf = (lane: number) => lane + 1;
const us = (ms: number) => Math.round(ms * 1000);

export function toChromeTrace(input: ChromeTraceInput): ChromeTrace {
  // A loop, not Math.min(...): a long run has more spans than a call takes arguments.
  let earliest = Infinity;
  for (const s of input.spans) earliest = Math.min(earliest, s.start);
  for (const s of input.samples) earliest = Math.min(earliest, s.t);
  for (const j of input.jobs ?? []) earliest = Math.min(earliest, j.t);
  const origin = input.originMs ?? (earliest < Infinity ? earliest : input.now);
  const events: ChromeTraceEvent[] = [
    { name: 'process_name', ph: 'M', pid: PID, args: { name: input.title } },
    { name: 'thread_name', ph: 'M', pid: PID, tid: 0, args: { name: 'pipeline levels' } },
    { name: 'thread_sort_index', ph: 'M', pid: PID, tid: 0, args: { sort_index: 0 } },
  ];
  // Device workers first, then preparation slots.
  const order = [...input.lanes].sort((a, b) => (a.kind === b.kind ? a.id - b.id : a.kind === 'device' ? -1 : 1));
  order.forEach((lane, i) => {
    const device = lane.kind === 'device' ? input.deviceNames?.[lane.device ?? 0] : undefined;
    // ("device 1 (gpu) / worker 0": a trace named the devices by index where metrics name them.)
    const name = device === undefined ? lane.name : `device ${lane.device ?? 0} (${device}) / worker ${lane.worker ?? 0}`;
    events.push({ name: 'thread_name', ph: 'M', pid: PID, tid: tidOf(lane.id), args: { name } });
    events.push({ name: 'thread_sort_index', ph: 'M', pid: PID, tid: tidOf(lane.id), args: { sort_index: i + 1 } });
  });
  for (const s of input.spans) {
    const end = s.end ?? input.now;
    events.push({
      name: s.items === undefined ? `${s.jobId} #${s.partition}` : `batch of ${s.items}: ${(s.jobs ?? [s.jobId]).join(', ')}`,
      cat: s.kind,
      ph: 'X',
      pid: PID,
      tid: tidOf(s.lane),
      ts: us(s.start - origin),
      // From the rounded ends, so a span that starts where the previous one ended on its track never overlaps it.
      dur: Math.max(0, us(end - origin) - us(s.start - origin)),
      args: { job: s.jobId, partition: s.partition, outcome: s.outcome ?? 'running', ...(s.items === undefined ? {} : { items: s.items }), ...(s.jobs === undefined ? {} : { jobs: s.jobs }) },
    });
  }
  for (const j of input.jobs ?? []) {
    events.push({ name: `submit ${j.id}`, cat: 'job', ph: 'i', s: 'p', pid: PID, tid: 0, ts: us(j.t - origin), args: { id: j.id, kind: j.kind, partitions: j.partitions, priority: j.priority, prepareBytes: j.prepareBytes, deviceBytes: j.deviceBytes } });
  }
  for (const x of input.samples) {
    const ts = us(x.t - origin);
    events.push({ name: 'partitions', ph: 'C', pid: PID, tid: 0, ts, args: { waiting: x.waiting, preparing: x.preparing, onDevice: x.onDevice } });
    events.push({ name: 'inventory', ph: 'C', pid: PID, tid: 0, ts, args: { inventory: x.inventory } });
    events.push({ name: 'memory bytes', ph: 'C', pid: PID, tid: 0, ts, args: { reserved: x.budgetUsedBytes, idlePooled: x.budgetHeldBytes } });
  }
  const otherData: Record<string, string> = { generator: 'stoker', originMs: String(origin) };
  if (input.budgetBytes !== undefined && Number.isFinite(input.budgetBytes)) otherData['budgetBytes'] = String(input.budgetBytes);
  if (input.maxPreparing !== undefined && Number.isFinite(input.maxPreparing)) otherData['maxPreparing'] = String(input.maxPreparing);
  if (input.targetWaiting !== undefined && Number.isFinite(input.targetWaiting)) otherData['targetWaiting'] = String(input.targetWaiting);
  if (input.deviceBatches?.some((b) => b !== null)) otherData['deviceBatches'] = JSON.stringify(input.deviceBatches);
  if (input.prepareBatches && Object.keys(input.prepareBatches).length > 0) otherData['prepareBatches'] = JSON.stringify(input.prepareBatches);
  return { traceEvents: events, displayTimeUnit: 'ms', otherData };
}

/**
 * A Chrome trace written by {@link toChromeTrace} read back: its lanes (from the track names), its
 * spans and its jobs, in ms from the trace's start, and the run's memory budget and preparation
 * cap (null: none recorded). Throws an Error naming what is wrong when the JSON is not such a trace.
 */
export function fromChromeTrace(raw: unknown): {
  lanes: TimelineLane[];
  spans: TimelineSpan[];
  jobs: TimelineJob[];
  budgetBytes: number | null;
  maxPreparing: number | null;
  targetWaiting: number | null;
  deviceNames: Record<number, string>;
  deviceBatches: (BatchSetting | null)[];
  prepareBatches: Record<string, BatchSetting>;
} {
  const events = (raw as { traceEvents?: unknown } | null)?.traceEvents;
  if (!Array.isArray(events)) throw new Error('not a Chrome trace: it has no traceEvents array (write one with stoker demo --trace, stoker simulate --trace or stoker trace export)');
  const lanes: TimelineLane[] = [];
  const laneOf = new Map<number, number>();
  const deviceNames: Record<number, string> = {};
  for (const e of events as ChromeTraceEvent[]) {
    if (e?.ph !== 'M' || e.name !== 'thread_name' || typeof e.tid !== 'number' || e.tid === 0) continue;
    const name = String((e.args as { name?: unknown } | undefined)?.name ?? '');
    const dev = /^device (\d+)(?: \(([^)]*)\))? \/ worker (\d+)$/.exec(name);
    const id = lanes.length;
    laneOf.set(e.tid, id);
    if (dev?.[2] !== undefined) deviceNames[Number(dev[1])] = dev[2];
    lanes.push(dev ? { id, kind: 'device', name, device: Number(dev[1]), worker: Number(dev[3]) } : { id, kind: 'prepare', name });
  }
  const spans: TimelineSpan[] = [];
  const jobs: TimelineJob[] = [];
  const num = (v: unknown, what: string): number => {
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`not a stoker trace: ${what} is ${JSON.stringify(v)}, not a number`);
    return v;
  };
  for (const e of events as ChromeTraceEvent[]) {
    if (e?.ph === 'X' && (e.cat === 'prepare' || e.cat === 'device')) {
      const lane = laneOf.get(e.tid as number);
      if (lane === undefined) continue;
      const a = (e.args ?? {}) as { job?: unknown; partition?: unknown; outcome?: unknown; items?: unknown; jobs?: unknown };
      const start = num(e.ts, 'a span\'s ts') / 1000;
      const outcome = a.outcome === 'done' || a.outcome === 'failed' || a.outcome === 'aborted' ? a.outcome : null;
      spans.push({ lane, kind: e.cat, jobId: String(a.job), partition: num(a.partition, 'a span\'s partition'), start, end: outcome === null ? null : start + num(e.dur, 'a span\'s dur') / 1000, outcome, ...(typeof a.items === 'number' ? { items: a.items } : {}), ...(Array.isArray(a.jobs) ? { jobs: a.jobs.map(String) } : {}) });
    } else if (e?.ph === 'i' && e.cat === 'job') {
      const a = (e.args ?? {}) as Record<string, unknown>;
      const priority = PRIORITIES.includes(a['priority'] as Priority) ? (a['priority'] as Priority) : 'normal';
      jobs.push({ t: num(e.ts, 'a job\'s ts') / 1000, id: String(a['id']), kind: String(a['kind']), partitions: num(a['partitions'], 'a job\'s partitions'), priority, prepareBytes: num(a['prepareBytes'] ?? 0, 'a job\'s prepareBytes'), deviceBytes: num(a['deviceBytes'] ?? 0, 'a job\'s deviceBytes') });
    }
  }
  const other = (raw as { otherData?: { budgetBytes?: unknown; maxPreparing?: unknown; targetWaiting?: unknown; deviceBatches?: unknown; prepareBatches?: unknown } }).otherData;
  const budget = Number(other?.budgetBytes);
  const cap = Number(other?.maxPreparing);
  // (Number(undefined) is NaN: a trace without it records none.)
  const target = Number(other?.targetWaiting);
  const deviceBatches = readSettings(other?.deviceBatches, 'deviceBatches') ?? [];
  const prepareBatches = readSettings(other?.prepareBatches, 'prepareBatches') ?? {};
  if (!Array.isArray(deviceBatches)) throw new Error('not a stoker trace: otherData.deviceBatches is not a list');
  if (!isRecord(prepareBatches)) throw new Error('not a stoker trace: otherData.prepareBatches is not an object of kind → batch');
  return {
    lanes,
    spans,
    jobs,
    budgetBytes: Number.isFinite(budget) && budget > 0 ? budget : null,
    maxPreparing: Number.isInteger(cap) && cap >= 1 ? cap : null,
    targetWaiting: Number.isFinite(target) && target >= 0 ? target : null,
    deviceNames,
    deviceBatches: deviceBatches.map((b, i) => (b === null ? null : batchSetting(b, `deviceBatches[${i}]`))),
    prepareBatches: Object.fromEntries(Object.entries(prepareBatches).map(([k, b]) => [k, batchSetting(b, `prepareBatches.${k}`)])),
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A batching record of the trace's otherData (JSON in a string; absent: undefined). */
function readSettings(v: unknown, what: string): unknown {
  if (v === undefined) return undefined;
  try {
    return JSON.parse(String(v));
  } catch {
    throw new Error(`not a stoker trace: otherData.${what} is not JSON`);
  }
}

function batchSetting(v: unknown, what: string): BatchSetting {
  const b = v as { maxItems?: unknown; maxWaitMs?: unknown } | null;
  const maxItems = b?.maxItems;
  const maxWaitMs = b?.maxWaitMs;
  if (typeof maxItems !== 'number' || !Number.isSafeInteger(maxItems) || maxItems < 1 || typeof maxWaitMs !== 'number' || !Number.isFinite(maxWaitMs) || maxWaitMs < 0) {
    throw new Error(`not a stoker trace: otherData.${what} is ${JSON.stringify(v)}, not { maxItems: an integer ≥ 1, maxWaitMs: a finite number ≥ 0 }`);
  }
  return { maxItems, maxWaitMs };
}

import type { TimelineLane, TimelineSample, TimelineSpan } from '../core/index.js';

/**
 * Chrome trace event JSON (the format Perfetto and chrome://tracing open) from a timeline: one
 * track (tid) per preparation slot and per device worker, a complete event ("X") per partition
 * and stage, counter events ("C") for waiting, inventory and memory. Times in µs.
 */

export interface ChromeTraceEvent {
  name: string;
  ph: 'X' | 'C' | 'M';
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
  /** The trace's process name, e.g. "stoker demo (stoker pacer)". */
  title: string;
  /** Where a span still running ends in the trace (ms, the timeline's clock): usually now. */
  now: number;
  /** Subtracted from every time (ms), so the trace starts near 0. @default the earliest time */
  originMs?: number;
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
  const origin = input.originMs ?? (earliest < Infinity ? earliest : input.now);
  const events: ChromeTraceEvent[] = [
    { name: 'process_name', ph: 'M', pid: PID, args: { name: input.title } },
    { name: 'thread_name', ph: 'M', pid: PID, tid: 0, args: { name: 'pipeline levels' } },
    { name: 'thread_sort_index', ph: 'M', pid: PID, tid: 0, args: { sort_index: 0 } },
  ];
  // Device workers first, then preparation slots.
  const order = [...input.lanes].sort((a, b) => (a.kind === b.kind ? a.id - b.id : a.kind === 'device' ? -1 : 1));
  order.forEach((lane, i) => {
    events.push({ name: 'thread_name', ph: 'M', pid: PID, tid: tidOf(lane.id), args: { name: lane.name } });
    events.push({ name: 'thread_sort_index', ph: 'M', pid: PID, tid: tidOf(lane.id), args: { sort_index: i + 1 } });
  });
  for (const s of input.spans) {
    const end = s.end ?? input.now;
    events.push({
      name: `${s.jobId} #${s.partition}`,
      cat: s.kind,
      ph: 'X',
      pid: PID,
      tid: tidOf(s.lane),
      ts: us(s.start - origin),
      // From the rounded ends, so a span that starts where the previous one ended on its track never overlaps it.
      dur: Math.max(0, us(end - origin) - us(s.start - origin)),
      args: { job: s.jobId, partition: s.partition, outcome: s.outcome ?? 'running' },
    });
  }
  for (const x of input.samples) {
    const ts = us(x.t - origin);
    events.push({ name: 'partitions', ph: 'C', pid: PID, tid: 0, ts, args: { waiting: x.waiting, preparing: x.preparing, onDevice: x.onDevice } });
    events.push({ name: 'inventory', ph: 'C', pid: PID, tid: 0, ts, args: { inventory: x.inventory } });
    events.push({ name: 'memory bytes', ph: 'C', pid: PID, tid: 0, ts, args: { reserved: x.budgetUsedBytes, idlePooled: x.budgetHeldBytes } });
  }
  return { traceEvents: events, displayTimeUnit: 'ms', otherData: { generator: 'stoker', originMs: String(origin) } };
}

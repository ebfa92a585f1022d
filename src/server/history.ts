import { windowOccupancy, type Engine, type PacerState } from '../core/index.js';

type Ended = { done: number; failed: number; cancelled: number };
type Levels = { queued: number; preparing: number; waiting: number; onDevice: number };

/** What the service reads once per sample: cumulative counts and the levels now. */
export interface HistoryReading {
  /** Epoch ms. */
  t: number;
  /** Busy ms of each worker of each device so far, running items included (monotone: see OccupancyMeter). */
  workerBusyMs: number[][];
  /** Whether each worker is alive now. */
  workerAlive: boolean[][];
  /** Partitions dispatched to preparation and completed on a device, so far. */
  dispatched: number;
  completed: number;
  /** Per device: partitions completed so far, the device time measured for them (ms), and live workers now. */
  devices: { completions: number; busyMs: number; workers: number }[];
  /** Per kind: jobs ended so far, and their summed latency in seconds. */
  kinds: Record<string, { ended: Ended; jobSeconds: number; partitions: Levels }>;
  partitions: Levels;
  pacer: PacerState;
  waitingTarget: number;
  memory: { reservedBytes: number; idlePoolBytes: number; budgetBytes: number | null };
}

/** One sample of the server's history: the levels at `t` and the rates over the window before it. */
export interface HistorySample {
  /** Epoch ms: the end of the window. */
  t: number;
  /** The window's length in seconds (the time since the previous sample). */
  windowS: number;
  /** Per device: the mean occupancy of its live workers over the window (busy time ÷ time, ≤ 1); null with no live worker. */
  occupancy: (number | null)[];
  /** Per device, per worker: its occupancy over the window (0 for a lost worker). */
  workerOccupancy: number[][];
  /** Partitions dispatched to preparation / completed on a device per second, over the window. */
  dispatchedPerS: number;
  completedPerS: number;
  /**
   * Per device, over the window: partitions completed and the device time measured for them (s) —
   * live workers × completions ÷ busy is the device's measured capacity (partitions/s at full
   * occupancy; sum a few windows for a steadier figure) — and its live workers.
   */
  devices: { completions: number; busyS: number; workers: number }[];
  /** The pacer's measured device capacity (null until measured), the dispatch rate it aims at now (null: waits for events; 0 while idle), and its mode. */
  capacityPerS: number | null;
  pacerTargetPerS: number | null;
  pacerMode: string;
  partitions: Levels;
  waitingTarget: number;
  /** The pacer's smoothed waiting and inventory need (its inventory target: Little's law plus its integral), where it has them. */
  waitingAvg: number | null;
  need: number | null;
  memory: { reservedBytes: number; idlePoolBytes: number; budgetBytes: number | null };
  /** Jobs that ended in the window. */
  jobsEnded: Ended;
  /** Per kind: the partitions in each stage now, and the jobs that ended in the window with their summed latency. */
  kinds: Record<string, { partitions: Levels; jobsEnded: Ended; jobSeconds: number }>;
}

/** `GET /v1/history`: the samples of a recent window, oldest first. */
export interface HistoryView {
  /** The server's now, epoch ms. */
  now: number;
  /** Seconds between samples. */
  intervalS: number;
  /** The devices in the order of the samples' per-device arrays. */
  devices: { name: string; workers: number }[];
  samples: HistorySample[];
}

const round6 = (v: number) => Math.round(v * 1e6) / 1e6;
const finite = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/**
 * The server's recent history: one sample per interval, kept for `keepMs` — what the dashboard
 * draws when it opens (`GET /v1/history`), whatever happened before anyone looked. Rates are
 * over the real window between two readings, never extrapolated.
 */
export class History {
  private list: HistorySample[] = [];
  private last: HistoryReading | undefined;

  constructor(private readonly keepMs = 3_600_000) {}

  /** Takes a reading; from the second one on, adds a sample for the window since the previous one. */
  record(r: HistoryReading): void {
    const prev = this.last;
    this.last = r;
    if (!prev || r.t <= prev.t) return;
    const dtMs = r.t - prev.t;
    const dtS = dtMs / 1000;
    // Six decimals: what the sums of float milliseconds can tell apart (1 + 3e-15 is 1).
    const workerOccupancy = r.workerBusyMs.map((row, d) => row.map((busy, w) => (r.workerAlive[d]?.[w] ? round6(windowOccupancy(Math.max(0, busy - (prev.workerBusyMs[d]?.[w] ?? 0)), dtMs, 1)) : 0)));
    const occupancy = workerOccupancy.map((row, d) => {
      const live = row.filter((_, w) => r.workerAlive[d]?.[w]);
      return live.length === 0 ? null : round6(live.reduce((a, b) => a + b, 0) / live.length);
    });
    const jobsEnded: Ended = { done: 0, failed: 0, cancelled: 0 };
    const kinds: HistorySample['kinds'] = {};
    for (const [name, k] of Object.entries(r.kinds)) {
      const before = prev.kinds[name];
      const ended: Ended = { done: 0, failed: 0, cancelled: 0 };
      for (const st of ['done', 'failed', 'cancelled'] as const) {
        ended[st] = k.ended[st] - (before?.ended[st] ?? 0);
        jobsEnded[st] += ended[st];
      }
      kinds[name] = { partitions: { ...k.partitions }, jobsEnded: ended, jobSeconds: k.jobSeconds - (before?.jobSeconds ?? 0) };
    }
    const terms = r.pacer.terms ?? {};
    this.list.push({
      t: r.t,
      windowS: dtS,
      occupancy,
      workerOccupancy,
      dispatchedPerS: (r.dispatched - prev.dispatched) / dtS,
      completedPerS: (r.completed - prev.completed) / dtS,
      devices: r.devices.map((d, i) => ({ completions: d.completions - (prev.devices[i]?.completions ?? 0), busyS: (d.busyMs - (prev.devices[i]?.busyMs ?? 0)) / 1000, workers: d.workers })),
      capacityPerS: finite(r.pacer.ratePerSec),
      // (Idle, a pacer keeps the rate it last planned, and dispatches nothing at it: 0, as the metric says.)
      pacerTargetPerS: r.pacer.intervalMs === null ? null : r.pacer.mode === 'idle' ? 0 : 1000 / r.pacer.intervalMs,
      pacerMode: r.pacer.mode,
      partitions: { ...r.partitions },
      waitingTarget: r.waitingTarget,
      waitingAvg: finite(terms['waitingAvg']),
      need: finite(terms['inventoryTarget']),
      memory: { ...r.memory },
      jobsEnded,
      kinds,
    });
    const cut = r.t - this.keepMs;
    if (this.list.length > 64 && (this.list[32] as HistorySample).t < cut) this.list = this.list.filter((x) => x.t >= cut);
  }

  /** The samples at or after `since` (epoch ms), oldest first. */
  samples(since = -Infinity): HistorySample[] {
    let lo = 0;
    let hi = this.list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((this.list[mid] as HistorySample).t < since) lo = mid + 1;
      else hi = mid;
    }
    return this.list.slice(lo);
  }
}

/** Jobs ended since start, per kind: by state, and their summed latency (s); what the history and the metrics count ended jobs from. */
export class EndedJobs {
  private readonly byKind = new Map<string, { ended: Ended; jobSeconds: number }>();

  /** `kinds`: the loaded kinds, each counted from 0 (a kind that ends a job later is added then). */
  constructor(kinds: Iterable<string>) {
    for (const kind of kinds) this.entry(kind);
  }

  /** A job of `kind` ended in `state`, `seconds` after it was submitted. */
  add(kind: string, state: keyof Ended, seconds: number): void {
    const e = this.entry(kind);
    e.ended[state]++;
    e.jobSeconds += seconds;
  }

  /** By kind and state (every loaded kind, 0 included). */
  counts(): { kind: string; state: keyof Ended; count: number }[] {
    return [...this.byKind].flatMap(([kind, e]) => (['done', 'failed', 'cancelled'] as const).map((state) => ({ kind, state, count: e.ended[state] })));
  }

  /** A reading's per-kind part: the counts so far, and each kind's partitions by stage now. */
  reading(partitions: ReturnType<Engine['partitionsByKind']>): HistoryReading['kinds'] {
    const kinds: HistoryReading['kinds'] = {};
    for (const [name, e] of this.byKind) {
      const p = partitions[name];
      kinds[name] = { ended: { ...e.ended }, jobSeconds: e.jobSeconds, partitions: { queued: p?.queued ?? 0, preparing: p?.preparing ?? 0, waiting: p?.waiting ?? 0, onDevice: p?.['on-device'] ?? 0 } };
    }
    return kinds;
  }

  private entry(kind: string): { ended: Ended; jobSeconds: number } {
    let e = this.byKind.get(kind);
    if (!e) this.byKind.set(kind, (e = { ended: { done: 0, failed: 0, cancelled: 0 }, jobSeconds: 0 }));
    return e;
  }
}

/**
 * A reading of the engine now: its cumulative counts and levels, with the workers' busy time so
 * far (`workerBusyMs`, the running items included), the ended jobs by kind, and the waiting target.
 */
export function historyReading(engine: Engine, workerBusyMs: number[][], kinds: HistoryReading['kinds'], waitingTarget: number, idlePoolBytes: number): HistoryReading {
  const s = engine.snapshot;
  return {
    t: Date.now(),
    workerBusyMs,
    workerAlive: engine.workerStates().map((ws) => ws.map((w) => w.alive)),
    dispatched: s.dispatched,
    completed: s.deviceCompletions,
    devices: s.devices.map((d) => ({ completions: d.completions, busyMs: d.busyMs, workers: d.workers })),
    kinds,
    partitions: { queued: s.backlog, preparing: s.preparing, waiting: s.waiting, onDevice: s.onDevice },
    pacer: engine.pacer.state(),
    waitingTarget,
    memory: { reservedBytes: s.budgetUsedBytes, idlePoolBytes, budgetBytes: Number.isFinite(s.budgetTotalBytes) ? s.budgetTotalBytes : null },
  };
}

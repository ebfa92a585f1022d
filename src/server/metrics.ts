import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { PRIORITIES, type ReadonlySnapshot, type PacerState } from '../core/index.js';
import type { BufferPoolStats } from '../runtime/buffer-pool.js';
import type { ServeConfig } from './config.js';

/** The codes a job fails with ({@link ServiceMetrics} starts each kind's series of them at 0): a step that failed past its retries, a missed deadline, a finish that threw, a memory() or kind that failed at its start, partitions over the budget. */
const JOB_FAILURE_CODES = ['E_PREPARE_FAILED', 'E_DEVICE_FAILED', 'E_DEADLINE', 'E_FINISH_FAILED', 'E_KIND_FAILED', 'E_OVERSIZE'];
import type { JobState } from './journal.js';

const STAGES = ['queued', 'preparing', 'waiting', 'on-device'] as const;

/** What the metrics read when scraped (the Service is one): each only what it shows, none of it per journaled job. */
export interface MetricsSource {
  readonly config: Pick<ServeConfig, 'engine'>;
  readonly pool: { stats(): BufferPoolStats };
  /** The engine counters. */
  readonly counters: ReadonlySnapshot;
  /** The kinds this server runs. */
  kindNames(): string[];
  /** The devices' names, in engine order. */
  deviceNames(): string[];
  /** Jobs by kind and state (kept incrementally by the journal). */
  jobCounts(): { kind: string; state: JobState; count: number }[];
  /** Journal writes refused for a full journal (the disk, or journal.maxBytes) since the start. */
  journalFullRefusals(): number;
  /** Jobs ended since this server started, by kind and state. */
  endedCounts(): { kind: string; state: string; count: number }[];
  partitionsByKind(): Record<string, Record<(typeof STAGES)[number], number>>;
  workerStates(): { alive: boolean; item: unknown }[][];
  /** Busy ms of each worker so far, the running part of items in flight included. */
  workerBusyMs(): number[][];
  pacerState(): PacerState;
  /** Per device (engine order), whether no connection can be made to it now (an HTTP endpoint). */
  devicesUnreachable(): boolean[];
  /** Time the memory budget has held the head of the queue back since the start, ms (see {@link HeldTime}). */
  budgetBlockedMs(): number;
  /** Unfinished jobs held at the start (no module for their kind, an input refused, …), not running. */
  jobsOnHold(): number;
  /** The journal file's bytes in use and free. */
  journalSizes(): { used: number; free: number };
}

/**
 * How long a condition has held, summed over the engine's steps: it can change only at a step, so
 * the time from the step that set it to the one that cleared it (or to now) is the time it held.
 */
export class HeldTime {
  private ms = 0;
  private since = NaN;

  step(now: number, holds: boolean): void {
    if (holds === Number.isNaN(this.since)) {
      if (holds) this.since = now;
      else {
        this.ms += now - this.since;
        this.since = NaN;
      }
    }
  }

  totalMs(now: number): number {
    return this.ms + (Number.isNaN(this.since) ? 0 : now - this.since);
  }
}

/**
 * Bucket bounds in seconds: a geometric ladder 1 ms × 2^(k/4) up to `maxS` (four buckets per
 * doubling). histogram_quantile interpolates inside one bucket, so a quantile reads at most
 * 2^(1/4) − 1 ≈ 19 % off, from a 5 ms device step to hour-long synthesis.
 */
/** The waiting target the pacer holds: its own where it says it (`terms.waitingTarget`, the stoker pacer's), else the configured one. */
export function waitingTarget(state: PacerState, configured: number): number {
  const t = state.terms['waitingTarget'];
  return typeof t === 'number' && Number.isFinite(t) ? t : configured;
}

export function stageBuckets(maxS: number): number[] {
  const out: number[] = [];
  for (let k = 0; ; k++) {
    const b = Number((0.001 * 2 ** (k / 4)).toPrecision(4));
    out.push(b);
    if (b >= maxS) return out;
  }
}

/** A counter read from the source when scraped (its value is monotone there). */
function readCounter<L extends string>(registry: Registry, name: string, help: string, labelNames: readonly L[], read: () => { labels: Record<L, string>; value: number }[]): void {
  new Counter({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      for (const { labels, value } of read()) this.inc(labels as never, value);
    },
  });
}

/**
 * A gauge read at each scrape. `drop`: a series `read` no longer returns is gone (else it would
 * keep its last value: a worker limit released went on reading as held); an unlabelled one reads 0.
 */
function readGauge<L extends string>(registry: Registry, name: string, help: string, labelNames: readonly L[], read: () => { labels: Record<L, string>; value: number }[], drop = false): void {
  new Gauge({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      if (drop) this.reset();
      for (const { labels, value } of read()) this.set(labels as never, value);
    },
  });
}

/**
 * Prometheus metrics of a service (prom-client, one registry per service): names `stoker_*` in
 * base units, counters only for what only grows, every labelled series there from the start (at
 * 0: `increase()` sees the first event), none vanishing; plus prom-client's process metrics
 * (CPU, heap, event-loop lag). A scrape reads what the service keeps, never the journal.
 */
export class ServiceMetrics {
  readonly registry = new Registry();
  private readonly prepareSeconds: Histogram<'kind'>;
  private readonly deviceSeconds: Histogram<'kind'>;
  private readonly jobSeconds: Histogram<'kind' | 'state' | 'priority'>;
  private readonly jobFailures: Counter<'kind' | 'code'>;
  private readonly batchItems: Histogram<'device'>;
  private readonly prepareBatchItems: Histogram<'kind'>;
  private readonly stepFailures: Counter<'kind' | 'stage'>;
  private readonly deviceNames: () => string[];

  constructor(service: MetricsSource) {
    const r = this.registry;
    collectDefaultMetrics({ register: r });
    // Gauges that prom-client names like counters (promtool rejects them); CPU, memory, heap, GC and event-loop lag stay.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) r.removeSingleMetric(name);
    const devices = () => service.deviceNames();
    const one = (value: number) => [{ labels: {}, value }];
    readGauge(r, 'stoker_jobs', 'Jobs in the journal by kind and state (queued, running, done, failed, cancelled)', ['kind', 'state'], () => {
      const byKind = new Map<string, Map<string, number>>();
      for (const k of service.kindNames()) byKind.set(k, new Map());
      for (const c of service.jobCounts()) (byKind.get(c.kind) ?? byKind.set(c.kind, new Map()).get(c.kind))?.set(c.state, c.count);
      return [...byKind].flatMap(([kind, m]) => ['queued', 'running', 'done', 'failed', 'cancelled'].map((state) => ({ labels: { kind, state }, value: m.get(state) ?? 0 })));
    });
    // (Counted running in stoker_jobs, as their rows are: an alert on stuck jobs could not tell them apart.)
    readGauge(r, 'stoker_jobs_on_hold', 'Unfinished jobs the server holds rather than runs (their kind or input refused at the start: /v1/status and each job view say why); counted running in stoker_jobs', [], () => one(service.jobsOnHold()));
    readGauge(r, 'stoker_journal_bytes', "The journal file's bytes by state: used (jobs, results), free (purged, reused by new jobs: the file does not shrink); its write-ahead log not counted", ['state'], () => {
      const sizes = service.journalSizes();
      return [{ labels: { state: 'used' }, value: sizes.used }, { labels: { state: 'free' }, value: sizes.free }];
    });
    readGauge(r, 'stoker_partitions', 'Partitions of live jobs by kind and stage (queued, preparing, waiting, on-device)', ['kind', 'stage'], () => {
      const now = service.partitionsByKind();
      const kinds = new Set([...service.kindNames(), ...Object.keys(now)]);
      return [...kinds].flatMap((kind) => STAGES.map((stage) => ({ labels: { kind, stage }, value: now[kind]?.[stage] ?? 0 })));
    });
    readGauge(r, 'stoker_waiting_partitions', 'Prepared partitions waiting for a device', [], () => one(service.counters.waiting));
    // (The pacer's own where it says it: a batching device's is the target and half a batch more, which read as the configured target alone.)
    readGauge(r, 'stoker_waiting_target_partitions', "The pacer's target for partitions waiting for a device (with batching devices, the stoker pacer's: the target and half a batch)", [], () => one(waitingTarget(service.pacerState(), service.config.engine.targetWaiting)));
    readGauge(r, 'stoker_kind_estimated_capacity_per_second', "The device capacity the pacer believes in for partitions of each kind (all devices that run it), partitions/s: kinds several times heavier on the device get their own", ['kind'], () =>
      (service.pacerState().kinds ?? []).flatMap((k) => (k.estimatedPerSec === null ? [] : [{ labels: { kind: k.name }, value: k.estimatedPerSec }])),
      true,
    );
    readGauge(
      r,
      'stoker_pacer_prepare_limit_partitions',
      'The most preparations the pacer lets run at once, where it found that more stop finishing more (0 while it holds no limit)',
      [],
      () => {
        const limit = service.pacerState().terms['prepareLimit'];
        return limit === undefined ? [] : one(limit);
      },
      true,
    );
    readGauge(r, 'stoker_device_worker_limit', 'The most workers of a device the pacer lets run at once, where it found that fewer finish more than all of them (absent while all run)', ['device'], () =>
      (service.pacerState().devices ?? []).flatMap((d, i) => (typeof d.workerLimit === 'number' ? [{ labels: { device: devices()[i] ?? String(i) }, value: d.workerLimit }] : [])),
      true,
    );
    readGauge(r, 'stoker_device_workers', 'Live workers per device', ['device'], () =>
      service.workerStates().map((ws, d) => ({ labels: { device: devices()[d] ?? String(d) }, value: ws.filter((w) => w.alive).length })),
    );
    readGauge(r, 'stoker_device_unreachable', "1 while no connection can be made to the device (an HTTP device's endpoint: tried every 5 s), else 0", ['device'], () =>
      service.devicesUnreachable().map((down, d) => ({ labels: { device: devices()[d] ?? String(d) }, value: down ? 1 : 0 })),
    );
    readGauge(r, 'stoker_device_observed_capacity_ratio', "A device's completion rate while saturated ÷ the pacer's feed-forward capacity (workers ÷ busy time per item), from its last saturated window (1 before one); far from 1, the busy time or the worker count misleads (see the device.measurement event)", ['device'], () => {
      const checks = service.pacerState().devices;
      return devices().map((name, d) => ({ labels: { device: name }, value: checks?.[d]?.observedRatio ?? 1 }));
    });
    readGauge(r, 'stoker_device_worker_busy', 'Whether each device worker runs a partition now (1) or not (0); stoker_device_worker_busy_seconds_total gives occupancy', ['device', 'worker'], () =>
      service.workerStates().flatMap((ws, d) => ws.map((w, i) => ({ labels: { device: devices()[d] ?? String(d), worker: String(i) }, value: w.alive && w.item ? 1 : 0 }))),
    );
    readCounter(r, 'stoker_device_worker_busy_seconds_total', 'Time each worker was busy, the running part of its item included: rate() of it is that worker’s occupancy (≤ 1 in every window)', ['device', 'worker'], () =>
      service.workerBusyMs().flatMap((row, d) => row.map((ms, i) => ({ labels: { device: devices()[d] ?? String(d), worker: String(i) }, value: ms / 1000 }))),
    );
    readCounter(r, 'stoker_device_busy_seconds_total', "Device time the workers measured themselves for finished partitions, per device: the pacer's input, booked when each partition ends (for occupancy use stoker_device_worker_busy_seconds_total)", ['device'], () =>
      service.counters.devices.map((d, i) => ({ labels: { device: devices()[i] ?? String(i) }, value: d.busyMs / 1000 })),
    );
    readCounter(r, 'stoker_device_completed_partitions_total', 'Partitions completed per device: with stoker_device_busy_seconds_total, stoker_device_workers × rate(completed) ÷ rate(busy) is the device’s measured capacity', ['device'], () =>
      service.counters.devices.map((d, i) => ({ labels: { device: devices()[i] ?? String(i) }, value: d.completions })),
    );
    readGauge(r, 'stoker_pacer_capacity_partitions_per_second', "The pacer's estimate of the devices' capacity (0 until measured)", [], () => one(service.pacerState().ratePerSec ?? 0));
    readGauge(r, 'stoker_pacer_target_dispatch_partitions_per_second', 'The dispatch rate the pacer aims at now (0 while it waits for events, or has no work): a target; rate(stoker_dispatched_partitions_total) is what was dispatched', [], () => {
      const st = service.pacerState();
      // (Idle, a pacer keeps the rate it last planned: no work is dispatched at it.)
      return one(st.intervalMs === null || st.mode === 'idle' ? 0 : 1000 / st.intervalMs);
    });
    readCounter(r, 'stoker_journal_full_writes_total', 'Journal writes refused because the journal was full (its disk, or journal.maxBytes): submissions refused with 507, ends kept in memory until there is room; alert on any increase', [], () => one(service.journalFullRefusals()));
    readCounter(r, 'stoker_dispatched_partitions_total', 'Partitions dispatched to preparation', [], () => one(service.counters.dispatched));
    readCounter(r, 'stoker_completed_partitions_total', 'Partitions completed on a device', [], () => one(service.counters.deviceCompletions));
    readGauge(r, 'stoker_budget_used_bytes', 'Memory reserved by partitions in flight', [], () => one(service.counters.budgetUsedBytes));
    readGauge(r, 'stoker_budget_blocked', 'Whether the head of the queue waits for memory now (1) or not (0): the budget, not the pacer, holds dispatch', [], () => one(service.counters.budgetBlocked ? 1 : 0));
    readCounter(r, 'stoker_budget_blocked_seconds_total', 'Time the head of the queue has waited for memory: rate() of it is the share of time the budget, not the pacer, held dispatch back', [], () => one(service.budgetBlockedMs() / 1000));
    readGauge(r, 'stoker_budget_bytes', 'The memory budget (+Inf when unlimited)', [], () => one(service.counters.budgetTotalBytes));
    readGauge(r, 'stoker_pool_bytes', 'Shared buffer pool bytes by state (leased, idle)', ['state'], () => {
      const p = service.pool.stats();
      return [{ labels: { state: 'leased' }, value: p.leasedBytes }, { labels: { state: 'idle' }, value: p.idleBytes }];
    });
    readCounter(r, 'stoker_jobs_ended_total', 'Jobs ended since start, by kind and state', ['kind', 'state'], () => service.endedCounts().map((c) => ({ labels: { kind: c.kind, state: c.state }, value: c.count })));
    const stage = stageBuckets(3600);
    this.prepareSeconds = new Histogram({ name: 'stoker_prepare_seconds', help: 'Preparation latency per partition, by kind', labelNames: ['kind'], buckets: stage, registers: [r] });
    this.deviceSeconds = new Histogram({ name: 'stoker_device_seconds', help: 'Device time per partition as the worker measured it, by kind', labelNames: ['kind'], buckets: stage, registers: [r] });
    this.jobSeconds = new Histogram({ name: 'stoker_job_seconds', help: 'Job latency, submission to end, by kind, state and priority class', labelNames: ['kind', 'state', 'priority'], buckets: stageBuckets(6 * 3600), registers: [r] });
    // (A missed deadline and a failing device both counted as state="failed".)
    this.jobFailures = new Counter({ name: 'stoker_jobs_failed_total', help: 'Jobs failed since start, by kind and error code (E_DEADLINE, E_DEVICE_FAILED, …)', labelNames: ['kind', 'code'], registers: [r] });
    // Batches by size (batching devices): items per device step, 1 … 4096.
    this.batchItems = new Histogram({ name: 'stoker_device_batch_items', help: 'Items per batch on batching devices ([device.batch]), by device', labelNames: ['device'], buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], registers: [r] });
    // Preparation batches by size (kinds with [kinds.NAME.prepareBatch]): items per preparation step.
    this.prepareBatchItems = new Histogram({ name: 'stoker_prepare_batch_items', help: 'Items per preparation batch of kinds prepared in batches ([kinds.NAME.prepareBatch]), by kind', labelNames: ['kind'], buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], registers: [r] });
    this.stepFailures = new Counter({ name: 'stoker_step_failures_total', help: 'Failed steps (preparations, device steps; each item of a failed batch), by kind and stage (prepare, device): those retried included, which leave no other trace; alert on its rate', labelNames: ['kind', 'stage'], registers: [r] });
    this.deviceNames = devices;
    for (const kind of service.kindNames()) {
      for (const stage of ['prepare', 'device']) this.stepFailures.inc({ kind, stage }, 0);
      // (The codes a job of a loaded kind fails with: absent until its first, increase() missed that one.)
      for (const code of JOB_FAILURE_CODES) this.jobFailures.inc({ kind, code }, 0);
      this.prepareSeconds.zero({ kind });
      this.deviceSeconds.zero({ kind });
      // (With its priority label: zeroed without one, each kind's series stood at 0 beside the real
      // ones; every class's, or increase() missed the first critical job after a start.)
      for (const state of ['done', 'failed', 'cancelled']) for (const priority of PRIORITIES) this.jobSeconds.zero({ kind, state, priority });
    }
  }

  observeStage(stage: 'prepare' | 'device', kind: string, ms: number): void {
    (stage === 'prepare' ? this.prepareSeconds : this.deviceSeconds).observe({ kind }, ms / 1000);
  }

  /** A batch of `items` ran on device `device` (by index). */
  observeBatch(device: number, items: number): void {
    this.batchItems.observe({ device: this.deviceNames()[device] ?? String(device) }, items);
  }

  /** A preparation batch of `items` of `kind` finished its step. */
  observePrepareBatch(kind: string, items: number): void {
    this.prepareBatchItems.observe({ kind }, items);
  }

  stepFailed(kind: string, stage: 'prepare' | 'device'): void {
    this.stepFailures.inc({ kind, stage });
  }

  jobEnded(kind: string, state: string, priority: string, seconds: number, code: string | undefined): void {
    this.jobSeconds.observe({ kind, state, priority }, seconds);
    if (state === 'failed') this.jobFailures.inc({ kind, code: code ?? 'E_INTERNAL' });
  }
}

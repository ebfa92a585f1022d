import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Engine, PacerSnapshot, PacerState } from '../core/index.js';
import type { BufferPoolStats } from '../runtime/buffer-pool.js';
import type { ServeConfig } from './config.js';
import type { JobState } from './journal.js';

/** What the gauges read when scraped (the Service is one): each gauge only what it shows. */
export interface MetricsSource {
  readonly config: Pick<ServeConfig, 'engine'>;
  readonly pool: { stats(): BufferPoolStats };
  /** The engine counters. */
  readonly counters: PacerSnapshot;
  jobCounts(): { kind: string; state: JobState; count: number }[];
  partitionsByKind(): ReturnType<Engine['partitionsByKind']>;
  workerStates(): ReturnType<Engine['workerStates']>;
  pacerState(): PacerState;
}

/**
 * Prometheus metrics of a service (prom-client, one registry per service): names `stoker_*` in
 * base units. Gauges are read from the service when scraped; histograms and counters are fed as
 * partitions and jobs complete.
 */
export class ServiceMetrics {
  readonly registry = new Registry();
  private readonly prepareSeconds: Histogram;
  private readonly deviceSeconds: Histogram;
  private readonly jobSeconds: Histogram;
  private readonly jobsEnded: Counter<'kind' | 'state'>;
  private readonly workerBusy: Counter<'device' | 'worker'>;

  constructor(service: MetricsSource) {
    const r = [this.registry];
    // Each gauge reads only what it shows: a scrape must not build the whole status once per gauge.
    new Gauge({
      name: 'stoker_jobs',
      help: 'Jobs in the journal by kind and state (queued, running, done, failed, cancelled)',
      labelNames: ['kind', 'state'],
      registers: r,
      collect() {
        this.reset();
        for (const c of service.jobCounts()) this.set({ kind: c.kind, state: c.state }, c.count);
      },
    });
    new Gauge({
      name: 'stoker_partitions',
      help: 'Partitions of live jobs by kind and stage (queued, preparing, waiting, on-device)',
      labelNames: ['kind', 'stage'],
      registers: r,
      collect() {
        this.reset();
        for (const [kind, stages] of Object.entries(service.partitionsByKind())) for (const [stage, n] of Object.entries(stages)) this.set({ kind, stage }, n);
      },
    });
    new Gauge({
      name: 'stoker_waiting_partitions',
      help: 'Prepared partitions waiting for a device',
      registers: r,
      collect() {
        this.set(service.counters.waiting);
      },
    });
    new Gauge({
      name: 'stoker_waiting_target_partitions',
      help: "The pacer's target for partitions waiting for a device",
      registers: r,
      collect() {
        this.set(service.config.engine.targetWaiting);
      },
    });
    new Gauge({
      name: 'stoker_device_worker_busy_ratio',
      help: 'Whether each device worker is running a partition now (1) or not (0); see stoker_device_worker_busy_seconds_total for occupancy',
      labelNames: ['device', 'worker'],
      registers: r,
      collect() {
        this.reset();
        service.workerStates().forEach((workers, d) => workers.forEach((w, i) => this.set({ device: String(d), worker: String(i) }, w.alive && w.item ? 1 : 0)));
      },
    });
    new Gauge({
      name: 'stoker_device_busy_seconds_total',
      help: 'Device time the workers measured themselves, per device (rate() of it ÷ workers is occupancy)',
      labelNames: ['device'],
      registers: r,
      collect() {
        service.counters.devices.forEach((d, i) => this.set({ device: String(i) }, d.busyMs / 1000));
      },
    });
    new Gauge({
      name: 'stoker_capacity_partitions_per_second',
      help: "The pacer's measured device capacity (0 until measured)",
      registers: r,
      collect() {
        this.set(service.pacerState().ratePerSec ?? 0);
      },
    });
    new Gauge({
      name: 'stoker_dispatch_rate_partitions_per_second',
      help: "The pacer's current dispatch rate (0 when holding)",
      registers: r,
      collect() {
        const i = service.pacerState().intervalMs;
        this.set(i === null ? 0 : 1000 / i);
      },
    });
    new Gauge({
      name: 'stoker_dispatched_partitions_total',
      help: 'Partitions dispatched to preparation',
      registers: r,
      collect() {
        this.set(service.counters.dispatched);
      },
    });
    new Gauge({
      name: 'stoker_budget_used_bytes',
      help: 'Memory reserved by partitions in flight',
      registers: r,
      collect() {
        this.set(service.counters.budgetUsedBytes);
      },
    });
    new Gauge({
      name: 'stoker_budget_bytes',
      help: 'The memory budget (+Inf when unlimited)',
      registers: r,
      collect() {
        this.set(service.counters.budgetTotalBytes);
      },
    });
    new Gauge({
      name: 'stoker_pool_bytes',
      help: 'Shared buffer pool bytes by state (leased, idle)',
      labelNames: ['state'],
      registers: r,
      collect() {
        const p = service.pool.stats();
        this.set({ state: 'leased' }, p.leasedBytes);
        this.set({ state: 'idle' }, p.idleBytes);
      },
    });
    const buckets = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300];
    this.prepareSeconds = new Histogram({ name: 'stoker_prepare_seconds', help: 'Preparation latency per partition', buckets, registers: r });
    this.deviceSeconds = new Histogram({ name: 'stoker_device_seconds', help: 'Device time per partition, as the worker measured it', buckets, registers: r });
    this.jobSeconds = new Histogram({ name: 'stoker_job_seconds', help: 'Job latency, submission to end', labelNames: ['kind', 'state'], buckets: [...buckets, 1800, 3600], registers: r });
    this.workerBusy = new Counter({
      name: 'stoker_device_worker_busy_seconds_total',
      help: 'Device time each worker measured itself (rate() of it is that worker’s occupancy, 0–1)',
      labelNames: ['device', 'worker'],
      registers: r,
    });
    this.jobsEnded = new Counter({ name: 'stoker_jobs_ended_total', help: 'Jobs ended since start, by kind and state', labelNames: ['kind', 'state'], registers: r });
  }

  observeStage(stage: 'prepare' | 'device', ms: number, worker?: { device: number; worker: number }): void {
    (stage === 'prepare' ? this.prepareSeconds : this.deviceSeconds).observe(ms / 1000);
    if (worker) this.workerBusy.inc({ device: String(worker.device), worker: String(worker.worker) }, ms / 1000);
  }

  jobEnded(kind: string, state: string, seconds: number): void {
    this.jobsEnded.inc({ kind, state });
    this.jobSeconds.observe({ kind, state }, seconds);
  }
}

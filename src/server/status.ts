import type { Engine, ReadonlySnapshot, PacerState } from '../core/index.js';
import type { BufferPoolStats } from '../runtime/buffer-pool.js';
import type { StatusView } from './api.js';
import { deviceType, type DeviceConfig, type ServeConfig } from './config.js';
import type { JobState } from './journal.js';

/** What `GET /v1/status` is built from: the engine's counters, the workers' meters, the journal's counts, the service's settings. */
export interface StatusSources {
  snapshot: ReadonlySnapshot;
  /** Busy ms of each worker so far, running partitions included ([device][worker]). */
  workerBusyMs: number[][];
  workerStates: ReturnType<Engine['workerStates']>;
  jobCounts: Record<JobState, number>;
  /** Unfinished jobs this server leaves on hold (a kind not loaded, a partition over the whole budget). */
  onHold: number;
  byKind: ReturnType<Engine['partitionsByKind']>;
  uptimeS: number;
  closing: boolean;
  config: ServeConfig;
  /** The devices in engine order: "default", then each [devices.NAME]. */
  devices: readonly { name: string; config: DeviceConfig }[];
  /** Per device, why no step can reach it now (an HTTP endpoint no connection can be made to). */
  unreachable: readonly (string | undefined)[];
  /** A job's partition number for an engine partition (a resumed job runs only some of them). */
  jobPartition(jobId: string, enginePartition: number): number;
  pacer: { name: string } & PacerState;
  budget: { held: number; peak: number };
  pool: BufferPoolStats;
}

/** The whole engine as the API shows it: jobs, partitions per kind and stage, workers, pacer, budget, pool. */
export function buildStatus(src: StatusSources): StatusView {
  const s = src.snapshot;
  const workerBusy = src.workerBusyMs;
  const counts = src.jobCounts;
  return {
    time: new Date().toISOString(),
    uptimeS: src.uptimeS,
    closing: src.closing,
    jobs: { ...counts, pending: counts.queued + counts.running, onHold: src.onHold, maxPending: src.config.server.maxPendingJobs },
    partitions: {
      queued: s.backlog,
      preparing: s.preparing,
      waiting: s.waiting,
      onDevice: s.onDevice,
      inFlight: s.preparing + s.waiting + s.onDevice,
      // Preparation steps running (a preparation batch is one), and each batched kind's batches: its largest, how many finished, the items they started with.
      preparingSteps: s.preparingSteps,
      ...(s.kinds.some((k) => k.prepareBatch) ? { prepareBatches: Object.fromEntries(s.kinds.flatMap((k) => (k.prepareBatch ? [[k.name, { ...k.prepareBatch }]] : []))) } : {}),
      pending: s.backlog + s.preparing + s.waiting + s.onDevice,
      byKind: src.byKind,
      dispatched: s.dispatched,
      completed: s.deviceCompletions,
    },
    targetWaiting: src.config.engine.targetWaiting,
    devices: src.workerStates.map((workers, d) => {
      const c = s.devices[d];
      const busyMs = workerBusy[d] ?? [];
      const dc = src.devices[d]?.config;
      return {
        device: d,
        name: src.devices[d]?.name ?? String(d),
        kind: !dc ? 'cpu' : deviceType(dc) === 'thread' ? dc.kind : deviceType(dc),
        completions: c?.completions ?? 0,
        busyS: (c?.busyMs ?? 0) / 1000,
        ...(src.unreachable[d] ? { unreachable: src.unreachable[d] } : {}),
        // A batching device: its largest batch, the batches it finished and the items they started with.
        ...(c?.batch ? { batch: { maxItems: c.batch.maxItems, batches: c.batch.batches, items: c.batch.items } } : {}),
        workers: workers.map((w, i) => ({
          state: !w.alive ? 'lost' : w.item ? 'busy' : 'idle',
          job: w.item?.jobId ?? null,
          partition: w.item ? src.jobPartition(w.item.jobId, w.item.partition) : null,
          busyS: (busyMs[i] ?? 0) / 1000,
        })),
      };
    }),
    pacer: src.pacer,
    budget: { usedBytes: s.budgetUsedBytes, idlePoolBytes: src.budget.held, totalBytes: Number.isFinite(s.budgetTotalBytes) ? s.budgetTotalBytes : null, peakBytes: src.budget.peak, blocked: s.budgetBlocked },
    pool: src.pool,
  };
}

import { z } from 'zod';
import type { PartitionMemory } from '../core/index.js';
import type { BufferPool } from '../runtime/buffer-pool.js';
import type { DeviceTask, PartitionTask, Workload } from '../runtime/runtime.js';
import { createNttProofWorkload, nttBufferBytes, type NttProofInput } from '../runtime/workloads/ntt-proof.js';
import { MAX_NTT_LOG_N } from '../runtime/workloads/ntt.js';

/**
 * The job kinds a server runs. A kind validates its own `input` (zod), says how much memory a
 * partition holds, and brings the workload that prepares, runs and finishes its partitions.
 */
export interface KindDef {
  readonly name: string;
  readonly description: string;
  /** Validates and normalizes a job's `input` (defaults filled in). */
  readonly input: z.ZodType;
  memory(input: unknown): PartitionMemory;
  readonly workload: Workload<unknown, unknown, unknown, unknown>;
}

/** What the runtime carries for a job: the kind's input, and which partitions this run covers. */
export interface RoutedInput {
  kind: string;
  input: unknown;
  /** The job's partition count. */
  total: number;
  /** Engine partition i is the job's partition `partitions[i]` (a resumed job runs only its unfinished ones). */
  partitions: number[];
  /** Outputs of partitions finished before a restart, by partition. */
  recorded: Map<number, unknown>;
}

interface RoutedPrepared {
  kind: KindDef;
  prepared: unknown;
}

/** Hooks the router calls so the service can journal progress. */
export interface RouterHooks {
  /** A partition of the job starts preparing (the first call marks the job running). */
  started(jobId: string): void;
  /** A partition's device step returned this output. */
  partitionDone(jobId: string, partition: number, output: unknown): void;
  /** A stage's time: preparation latency, or the device time the worker measured (with the worker). */
  observe(stage: 'prepare' | 'device', ms: number, worker?: { device: number; worker: number }): void;
}

/**
 * One workload over many kinds: each call goes to the job's kind, with the engine's partition
 * index mapped to the job's own (so a resumed job prepares exactly its unfinished partitions).
 */
export class KindRouter implements Workload<RoutedInput, RoutedPrepared, unknown, unknown> {
  readonly prepareSlots: number;

  constructor(
    private readonly kinds: ReadonlyMap<string, KindDef>,
    private readonly hooks: RouterHooks,
    /** The buffer pool the kinds prepare into (its idle bytes count against the budget). */
    readonly pool?: BufferPool,
  ) {
    this.prepareSlots = Math.min(...[...kinds.values()].map((k) => k.workload.prepareSlots ?? Infinity));
  }

  private kind(name: string): KindDef {
    const k = this.kinds.get(name);
    if (!k) throw new Error(`unknown kind ${JSON.stringify(name)}`);
    return k;
  }

  async prepare(task: PartitionTask<RoutedInput>): Promise<RoutedPrepared> {
    const kind = this.kind(task.input.kind);
    this.hooks.started(task.jobId);
    const t0 = performance.now();
    const prepared = await kind.workload.prepare({ ...task, input: task.input.input, partition: realPartition(task) });
    this.hooks.observe('prepare', performance.now() - t0);
    return { kind, prepared };
  }

  async run(task: DeviceTask<RoutedInput, RoutedPrepared>): Promise<{ output: unknown; busyMs: number }> {
    const partition = realPartition(task);
    const r = await task.prepared.kind.workload.run({ ...task, input: task.input.input, partition, prepared: task.prepared.prepared });
    this.hooks.observe('device', r.busyMs, { device: task.device, worker: task.worker });
    this.hooks.partitionDone(task.jobId, partition, r.output);
    return r;
  }

  finish(job: { jobId: string; input: RoutedInput; outputs: unknown[] }): unknown {
    const { input } = job;
    const outputs = new Array<unknown>(input.total);
    for (const [p, o] of input.recorded) outputs[p] = o;
    job.outputs.forEach((o, i) => (outputs[input.partitions[i] as number] = o));
    return this.kind(input.kind).workload.finish({ jobId: job.jobId, input: input.input, outputs });
  }

  release(p: RoutedPrepared): void {
    p.kind.workload.release?.(p.prepared);
  }

  async close(): Promise<void> {
    await Promise.all([...this.kinds.values()].map((k) => k.workload.close?.()));
  }
}

function realPartition(task: PartitionTask<RoutedInput>): number {
  const p = task.input.partitions[task.partition];
  if (p === undefined) throw new Error(`partition ${task.partition} is outside the job's ${task.input.partitions.length} partitions`);
  return p;
}

const ms = (what: string, max: number) =>
  z
    .number({ error: `${what} must be a number of milliseconds` })
    .min(0, { error: `${what} must be ≥ 0` })
    .max(max, { error: `${what} must be ≤ ${max}` });

/** `sleep`: waits instead of computing (for trying the API, load and crash tests); its result is checkable. */
const SleepInput = z.strictObject({
  seed: z.number({ error: 'seed must be an integer' }).int({ error: 'seed must be an integer' }).min(0).max(1_000_000, { error: 'seed must be ≤ 1000000' }).default(0),
  prepareMs: ms('prepareMs', 600_000).default(10),
  deviceMs: ms('deviceMs', 60_000).default(1),
});
type SleepInput = z.infer<typeof SleepInput>;

/** The value partition p of a sleep job with this seed produces; the job's result is their sum. */
export function sleepOutput(seed: number, partition: number): number {
  return 2 * (seed * 31 + partition);
}

function wait(msToWait: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason as Error);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, msToWait);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason as Error);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function sleepKind(): KindDef {
  const workload: Workload<SleepInput, number, number, { partitions: number; total: number }> = {
    async prepare(task) {
      await wait(task.input.prepareMs, task.signal);
      return task.input.seed * 31 + task.partition;
    },
    async run(task) {
      const t0 = performance.now();
      await wait(task.input.deviceMs, task.signal);
      return { output: 2 * task.prepared, busyMs: performance.now() - t0 };
    },
    finish(job) {
      return { partitions: job.outputs.length, total: job.outputs.reduce((a, b) => a + b, 0) };
    },
  };
  return {
    name: 'sleep',
    description: 'waits prepareMs, then deviceMs on a device worker; result { partitions, total } with total = Σ 2·(31·seed + p)',
    input: SleepInput,
    memory: () => ({ prepareBytes: 0, deviceBytes: 0 }),
    workload: workload as Workload<unknown, unknown, unknown, unknown>,
  };
}

const NttInput = z.strictObject({
  seed: z.number({ error: 'seed must be an integer' }).int({ error: 'seed must be an integer' }).min(0).max(2 ** 31 - 1, { error: 'seed must be < 2^31' }).default(1),
  logN: z
    .number({ error: `logN must be an integer 4–${MAX_NTT_LOG_N}` })
    .int({ error: `logN must be an integer 4–${MAX_NTT_LOG_N}` })
    .min(4, { error: 'logN must be ≥ 4' })
    .max(MAX_NTT_LOG_N, { error: `logN must be ≤ ${MAX_NTT_LOG_N} (2^${MAX_NTT_LOG_N} coefficients per polynomial)` })
    .default(16),
  synthesisMs: ms('synthesisMs', 600_000).default(1000),
});

export interface BuiltInKindOptions {
  devices: { workers: number }[];
  device: 'cpu' | 'webgpu';
  prepareThreads: number;
  prepareConcurrency: number;
  pool: BufferPool;
}

function nttKind(o: BuiltInKindOptions): KindDef {
  const workload = createNttProofWorkload({ devices: o.devices, device: o.device, prepareThreads: o.prepareThreads, prepareConcurrency: o.prepareConcurrency, pool: o.pool });
  const toNtt = (input: unknown): NttProofInput => ({ ...(input as z.infer<typeof NttInput>), jobIndex: 0 });
  return {
    name: 'ntt-proof',
    description: 'BabyBear NTT proof partitions: seeded witness → forward NTTs and a product on the device → commitment, checked against a reference',
    input: NttInput,
    memory: (input) => {
      // The device step reads the pooled buffer until it ends: the bytes stay held on the device.
      const bytes = nttBufferBytes(toNtt(input));
      return { prepareBytes: bytes, deviceBytes: bytes };
    },
    workload: {
      prepare: (task) => workload.prepare({ ...task, input: toNtt(task.input) }),
      run: (task) => workload.run({ ...task, input: toNtt(task.input), prepared: task.prepared as never }),
      finish: (job) => workload.finish({ ...job, input: toNtt(job.input), outputs: job.outputs as never[] }),
      release: (p) => workload.release(p as never),
      close: () => workload.close(),
      prepareSlots: workload.prepareSlots,
    },
  };
}

/** The kinds `stoker serve` offers: `ntt-proof` (threads; the default demo workload) and `sleep`. */
export function builtInKinds(o: BuiltInKindOptions): Map<string, KindDef> {
  return new Map([nttKind(o), sleepKind()].map((k) => [k.name, k]));
}

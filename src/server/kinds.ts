import type { DeviceRunner, StageThreads, PreparedBuffer, RunCall } from '../runtime/threaded.js';
import type { Handoff } from '../runtime/threads/protocol.js';
import { asBytes } from '../runtime/bytes.js';
import type { BatchResult, DeviceTask, PartitionTask, PrepareResult, Workload } from '../runtime/runtime.js';
import { KindModuleError, loadKind, THREAD_DEVICE, type DeviceTypes, type LoadedKind } from './kind-module.js';

/** The kinds every server runs, kind modules like any other (src/kinds). */
export const BUILT_IN_KINDS: readonly { name: string; url: string }[] = [
  { name: 'ntt-proof', url: new URL('../kinds/ntt-proof.js', import.meta.url).href },
  { name: 'sleep', url: new URL('../kinds/sleep.js', import.meta.url).href },
];

/** A kind module to load: its file: URL, how to name it in messages, and the name the config gave it (if any). */
export interface KindSource {
  url: string;
  shown: string;
  /** `[kinds.NAME]` in the config: the module's `name` must be NAME. */
  name?: string;
  /** `[kinds.NAME] device`: the device that runs it (overrides the module's `device`). */
  device?: string;
  /** `[kinds.NAME.prepareBatch]`: its partitions are prepared in batches. */
  prepareBatch?: { maxItems: number; maxWaitMs: number };
}

/**
 * Loads the built-in kinds (when the "default" device is a thread device: theirs is a thread's
 * `run`) and the given modules, checking each at once: a module that fails to load or does not
 * fit its device, a name used twice, or a config name that differs from the module's own throws
 * a {@link KindModuleError} naming the module and the export.
 */
export async function loadKinds(sources: readonly KindSource[], devices: DeviceTypes = THREAD_DEVICE): Promise<Map<string, LoadedKind>> {
  const kinds = new Map<string, LoadedKind & { shown: string }>();
  const builtIn: KindSource[] = devices.get('default') === 'thread' ? BUILT_IN_KINDS.map((b) => ({ url: b.url, shown: `built-in ${b.name}` })) : [];
  for (const s of [...builtIn, ...sources]) {
    let kind: LoadedKind;
    try {
      kind = await loadKind(s.url, s.shown, devices, s.device);
    } catch (e) {
      // (The config's field, and what its relative path is taken from.)
      if (s.name !== undefined && e instanceof KindModuleError && e.exportName === undefined && e.problem.startsWith('file not found')) {
        throw new KindModuleError(s.shown, undefined, `file not found: fix [kinds.${s.name}] module (a relative path in a config file is taken from that file's folder; given any other way — loadConfig's values, the environment, a flag — from the working directory, loadConfig's cwd)`);
      }
      throw e;
    }
    if (s.name !== undefined && kind.name !== s.name) {
      throw new KindModuleError(s.shown, 'name', `is ${JSON.stringify(kind.name)} but the config calls it [kinds.${s.name}]: make the two the same`);
    }
    const clash = kinds.get(kind.name);
    if (clash) {
      // The same module twice (a [kinds.NAME] and a --kind of it) is a repetition, not a clash of names.
      const why = clash.url === kind.url ? `is given twice (as [kinds.${kind.name}] in the config and --kind, say): give it once` : `${JSON.stringify(kind.name)} is already the name of ${clash.shown}: give each kind its own name`;
      throw new KindModuleError(s.shown, 'name', why);
    }
    kinds.set(kind.name, { ...kind, shown: s.shown, prepareBatch: s.prepareBatch ?? null });
  }
  return kinds;
}

/** A kind as `GET /v1/kinds` lists it. */
export interface KindView {
  name: string;
  description: string;
  /** The input's JSON Schema (null: any JSON input). */
  input: object | null;
  /** Bytes per partition for the input `{}` with its defaults (null when `{}` is not a valid input). */
  memory: { prepareBytes: number; deviceBytes: number } | null;
  /** Whether the kind derives the partition count from the input (then `partitions` may be left out). */
  partitionsFromInput: boolean;
}

/** A loaded kind as `GET /v1/kinds` lists it. */
export function kindView(k: LoadedKind): KindView {
  const v = k.validate({});
  let memory: KindView['memory'] = null;
  try {
    if (v.ok) memory = k.memory(v.input);
  } catch {
    // A kind whose memory() needs more than the defaults: nothing to show.
  }
  return { name: k.name, description: k.description, input: k.schema, memory, partitionsFromInput: k.derivesPartitions };
}

/** What the runtime carries for a job: the kind's input, and which partitions this run covers. */
export interface RoutedInput {
  kind: string;
  input: unknown;
  /** The job's partition count. */
  total: number;
  /**
   * Engine partition i is the job's partition `partitions[i]` (a resumed job runs only its
   * unfinished ones); null: the run covers every partition, engine partition i is partition i.
   */
  partitions: readonly number[] | null;
  /** Outputs of partitions finished before a restart, by partition. */
  recorded: Map<number, unknown>;
}

/** Hooks the router calls so the service can journal progress. */
export interface RouterHooks {
  /** A partition of the job starts preparing (the first call marks the job running). */
  started(jobId: string): void;
  /** A partition's device step returned this output. */
  partitionDone(jobId: string, partition: number, output: unknown): void;
  /** A stage's time for a partition of a kind: preparation latency, or the device time the worker measured. */
  observe(stage: 'prepare' | 'device', kind: string, ms: number): void;
  /** A batch of `items` ran on `device` (batching devices). */
  batch?(device: number, items: number): void;
  /** A preparation batch of `items` of `kind` was prepared (kinds prepared in batches). */
  prepareBatch?(kind: string, items: number): void;
}

/** A Uint8Array for any bytes value (a view of the pooled shared buffer is copied: the buffer is reused); anything else as it is. */
export function normalizeBytes(v: unknown): unknown {
  return asBytes(v) ?? v;
}

/**
 * The one workload of a server, over many kinds: every kind's `prepare` runs in the shared
 * preparation pool and its `run` on the shared device threads, each thread importing the kind's
 * module; the engine's partition index is mapped to the job's own (a resumed job prepares exactly
 * its unfinished partitions).
 */
export class KindRouter implements Workload<RoutedInput, PreparedBuffer, unknown, unknown> {
  readonly prepareSlots: number;
  /** The buffer pool the kinds prepare into (its idle bytes count against the budget). */
  readonly pool: StageThreads['pool'];

  constructor(
    private readonly kinds: ReadonlyMap<string, LoadedKind>,
    /** The preparation pool (and, for thread devices, the device threads). */
    private readonly threads: StageThreads,
    /** Where each device's steps run (by the engine's device index): `threads`, a process device, an HTTP device. */
    private readonly devices: readonly DeviceRunner[],
    private readonly hooks: RouterHooks,
    /** Where a kind's large prepared data goes by file (its device is a process device), if anywhere. */
    private readonly handoffOf: (kind: LoadedKind) => Handoff | undefined = () => undefined,
  ) {
    this.prepareSlots = threads.prepareSlots;
    this.pool = threads.pool;
  }

  watchWorkers(listener: (device: number, worker: number, up: boolean) => void): void {
    this.devices.forEach((d, device) => d.watchWorkers?.((worker, up) => listener(device, worker, up)));
  }

  unreachable(device: number): boolean {
    return this.devices[device]?.unreachable?.() !== undefined;
  }

  kind(name: string): LoadedKind {
    const k = this.kinds.get(name);
    if (!k) throw new Error(`unknown kind ${JSON.stringify(name)}`);
    return k;
  }

  async prepare(task: PartitionTask<RoutedInput>): Promise<PreparedBuffer> {
    const { input } = task;
    const kind = this.kind(input.kind);
    this.hooks.started(task.jobId);
    const handoff = this.handoffOf(kind);
    const t0 = performance.now();
    const prepared = await this.threads.prepare({
      module: kind.url,
      style: 'kind',
      input: input.input,
      jobId: task.jobId,
      partition: realPartition(task),
      partitions: input.total,
      bufferBytes: kind.bufferBytes(input.input),
      signal: task.signal,
      ...(handoff ? { handoff } : {}),
    });
    this.hooks.observe('prepare', input.kind, performance.now() - t0);
    return prepared;
  }

  /** A preparation batch (one kind, `[kinds.NAME.prepareBatch]`) as one step: the kind's prepareBatch in one preparation thread. */
  async prepareBatch(tasks: PartitionTask<RoutedInput>[]): Promise<PrepareResult<PreparedBuffer>[]> {
    const first = tasks[0] as PartitionTask<RoutedInput>;
    const kind = this.kind(first.input.kind);
    for (const t of tasks) this.hooks.started(t.jobId);
    const handoff = this.handoffOf(kind);
    const t0 = performance.now();
    const results = await this.threads.prepareBatch(
      tasks.map((t) => ({
        module: kind.url,
        style: 'kind' as const,
        input: t.input.input,
        jobId: t.jobId,
        partition: realPartition(t),
        partitions: t.input.total,
        bufferBytes: kind.bufferBytes(t.input.input),
        signal: t.signal,
        ...(handoff ? { handoff } : {}),
      })),
    );
    // Each item's preparation latency is its batch's.
    const ms = performance.now() - t0;
    for (let i = 0; i < tasks.length; i++) this.hooks.observe('prepare', kind.name, ms);
    this.hooks.prepareBatch?.(kind.name, tasks.length);
    return results;
  }

  async run(task: DeviceTask<RoutedInput, PreparedBuffer>): Promise<{ output: unknown; busyMs: number }> {
    const r = await this.runner(task).run(this.call(task));
    const output = normalizeBytes(r.output);
    this.hooks.observe('device', task.input.kind, r.busyMs);
    this.hooks.partitionDone(task.jobId, realPartition(task), output);
    return { output, busyMs: r.busyMs };
  }

  /** A batching device's batch (one kind, one worker) as one step: the kind's runBatch on a thread device, a batch of item frames on a process device. */
  async runBatch(tasks: DeviceTask<RoutedInput, PreparedBuffer>[]): Promise<{ results: BatchResult<unknown>[]; busyMs: number }> {
    const first = tasks[0] as DeviceTask<RoutedInput, PreparedBuffer>;
    const device = this.runner(first);
    if (!device.runBatch) throw new Error(`device ${first.device} does not run batches`);
    const r = await device.runBatch(tasks.map((t) => this.call(t)));
    const results = r.results.map((x, i): BatchResult<unknown> => {
      if ('error' in x) return x;
      const t = tasks[i] as DeviceTask<RoutedInput, PreparedBuffer>;
      const output = normalizeBytes(x.output);
      // (An item withdrawn while its batch ran is not its job's any more.)
      if (!t.signal.aborted) this.hooks.partitionDone(t.jobId, realPartition(t), output);
      return { output };
    });
    // Device time per item: the batch's, shared by its items.
    for (let i = 0; i < tasks.length; i++) this.hooks.observe('device', first.input.kind, r.busyMs / tasks.length);
    this.hooks.batch?.(first.device, tasks.length);
    return { results, busyMs: r.busyMs };
  }

  private runner(task: DeviceTask<RoutedInput, PreparedBuffer>): DeviceRunner {
    const device = this.devices[task.device];
    if (!device) throw new Error(`no device ${task.device}`);
    return device;
  }

  private call(task: DeviceTask<RoutedInput, PreparedBuffer>): RunCall {
    const { input } = task;
    return {
      kind: input.kind,
      module: this.kind(input.kind).url,
      style: 'kind',
      input: input.input,
      jobId: task.jobId,
      partition: realPartition(task),
      partitions: input.total,
      prepared: task.prepared,
      device: task.device,
      worker: task.worker,
      signal: task.signal,
      ...(task.begin ? { begin: task.begin } : {}),
    };
  }

  async finish(job: { jobId: string; input: RoutedInput; outputs: unknown[] }): Promise<unknown> {
    const { input } = job;
    const outputs = new Array<unknown>(input.total);
    for (const [p, o] of input.recorded) outputs[p] = o;
    job.outputs.forEach((o, i) => (outputs[input.partitions === null ? i : (input.partitions[i] as number)] = o));
    return normalizeBytes(await this.kind(input.kind).finish(outputs, input.input, job.jobId));
  }

  release(p: PreparedBuffer): void {
    this.threads.release(p);
  }

  async close(): Promise<void> {
    await Promise.all([this.threads, ...new Set(this.devices.filter((d) => d !== this.threads))].map((d) => d.close()));
  }
}

function realPartition(task: PartitionTask<RoutedInput>): number {
  const run = task.input.partitions;
  const p = run === null ? (task.partition < task.input.total ? task.partition : undefined) : run[task.partition];
  if (p === undefined) throw new Error(`partition ${task.partition} is outside the job's ${run?.length ?? task.input.total} partitions`);
  return p;
}

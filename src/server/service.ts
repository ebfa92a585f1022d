import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { StokerError, TimelineRecorder, type Engine, type PacerState, type PartitionState } from '../core/index.js';
import { BufferPool } from '../runtime/buffer-pool.js';
import { Runtime } from '../runtime/runtime.js';
import { StageThreads } from '../runtime/threaded.js';
import type { Handoff } from '../runtime/threads/protocol.js';
import { toChromeTrace, type ChromeTrace } from '../report/chrome-trace.js';
import { jobView, SubmitBody, type JobView, type StatusView, type TimelineView } from './api.js';
import { deviceType, type DeviceConfig, type ServeConfig } from './config.js';
import { deviceRunner, handoffFolder } from './device-runners.js';
import { conflict, jobFinished, notFound, refusePastDeadline, ServiceError, shuttingDown, tooManyJobs } from './errors.js';
import { EventLog, type Replay } from './event-log.js';
import { GroupCommit, type WriteResult } from './group-commit.js';
import { AdmissionGate } from './admission.js';
import { History, type HistoryReading, type HistoryView } from './history.js';
import { Journal, JournalError, type JobState, type JournalJob, type JournalJobInput } from './journal.js';
import type { LoadedKind } from './kind-module.js';
import { KindRouter, type RoutedInput } from './kinds.js';
import { ServiceMetrics } from './metrics.js';
import { measuredPriors, readPriors, writePriors, type Priors } from './priors.js';
import { countPartitions, isFinal, LIST_STATES_MAX, progressEvents, STATES_PAGE_MAX, type JobProgressEvent, type PartitionCounts, type StatesPage } from './progress.js';
import { buildStatus } from './status.js';
import { checkedByKind, fieldIssues, invalid } from './submission.js';

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

/** One server-sent event. */
export interface ServiceEvent {
  type: 'job.submitted' | 'job.started' | 'job.partition' | 'job.done' | 'job.failed' | 'job.cancelled' | 'pacer' | 'device.measurement';
  time: string;
  [k: string]: unknown;
}

/** How often at most (ms) a watched job's progress is looked at: 20 events a second at most. */
const PROGRESS_MS = 50;

/** How often (ms) the measured rates are saved for the next start (and once more at close). */
const PRIORS_EVERY_MS = 10_000;

/** Resumed jobs whose partition numbering is remembered for the timeline after they end. */
const MAX_REMEMBERED_RUNS = 1000;

/**
 * The daemon's heart, without HTTP: the journal, the runtime and the kinds. Accepted jobs are
 * journaled before they are acknowledged; on open, unfinished jobs resume with their unfinished
 * partitions; each job ends exactly once in the journal.
 */
export class Service {
  /** Emits `event` (a ServiceEvent and its SSE id) and `close`. */
  readonly events = new EventEmitter();
  /** Every event numbered, the job events kept for clients that reconnect (`Last-Event-ID`). */
  readonly eventLog = new EventLog<ServiceEvent>();
  readonly metrics: ServiceMetrics;
  readonly pool = new BufferPool();
  readonly startedAt = Date.now();
  /** What ran where (a lane per preparation slot and device worker) and the levels: the dashboard's waterfall and the trace export. */
  readonly timeline = new TimelineRecorder();
  private readonly runtime: Runtime<RoutedInput, unknown, unknown, unknown>;
  private readonly router: KindRouter;
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly started = new Set<string>();
  /** Live jobs: the job's partition behind each engine partition of this run (null: the same partition). */
  private readonly runs = new Map<string, readonly number[] | null>();
  /** Resumed jobs (engine partition i is the job's partition run[i]): kept after the end for the timeline. */
  private readonly resumedRuns = new Map<string, number[]>();
  /** One sample a second of levels and rates, for `GET /v1/history` (the dashboard's charts on load). */
  readonly history = new History();
  /** Per kind: jobs ended since start by state, and their summed latency (s). */
  private readonly endedByKind = new Map<string, { ended: { done: number; failed: number; cancelled: number }; jobSeconds: number }>();
  private readonly historyTimer: NodeJS.Timeout;
  /** Per watched job (`GET /v1/jobs/:id/events`): its listeners and the partition states last sent. */
  private readonly watchers = new Map<string, { listeners: Set<(e: JobProgressEvent) => void>; last: PartitionState[] }>();
  private progressTimer: NodeJS.Timeout | undefined;
  private progressAt = -Infinity;
  private closing = false;
  private journalClosed = false;
  /**
   * Ends of jobs a full journal could not record yet, retried every second. Such a job stays
   * unfinished for readers until its end lands (then it is announced): an end announced before it
   * is durable would be announced again should a crash make the job run again. (Unless its end
   * is recorded elsewhere too — a cluster node's, in Redis: then readers see it from memory.)
   */
  private readonly unjournaled = new Map<string, { outcome: Outcome; at: number }>();
  private landTimer: NodeJS.Timeout | undefined;
  /** Journal writes asked for in one turn of the event loop, committed together on the next. */
  private readonly commits: GroupCommit;
  /** Submissions checked and waiting for their group commit (they count as pending). */
  private readonly admitting = { jobs: 0, partitions: 0 };
  /** Called with each finished partition's output (cluster mode shares them, so another node can resume the job). */
  onPartitionOutput: ((jobId: string, partition: number, output: unknown) => void) | undefined;
  /** Per device, what the pacer last planned with (the self-check; see checkMeasurement). */
  private readonly trusted: ('estimate' | 'observed')[] = [];
  /** Paces submissions while the engine has work (a flood must not starve it). */
  private readonly gate = new AdmissionGate(() => {
    const s = this.runtime.engine.snapshot;
    return s.backlog + s.preparing + s.waiting + s.onDevice > 0;
  });
  /** The devices by index, as the engine numbers them: [device] ("default"), then each [devices.NAME]. */
  private readonly devices: { name: string; config: DeviceConfig }[];
  /** Per device, a process device's handoff files: this server's own folder, emptied at start and at close. */
  private readonly handoffs: (Handoff | undefined)[];
  private readonly purgeTimer: NodeJS.Timeout;
  /** What the last run measured (the pacer started from it), and what this run measures, saved every PRIORS_EVERY_MS and at close. */
  private priors: Priors | undefined;
  private readonly priorsTimer: NodeJS.Timeout;
  /** Completions (device + preparation) counted at the last save of the priors. */
  private priorsSavedAt = 0;
  /** Where the pacer's starting rates came from, for the start line (undefined: it measures first). */
  readonly priorsNote: string | undefined;
  private readonly pacerTimer: NodeJS.Timeout;

  private constructor(
    readonly config: ServeConfig,
    private readonly journal: Journal,
    private readonly kinds: ReadonlyMap<string, LoadedKind>,
    private readonly endsRecordedElsewhere: boolean,
  ) {
    this.events.setMaxListeners(0);
    this.commits = new GroupCommit(journal);
    // Device 0 is [device] ("default"), then each [devices.NAME]; each runs the kinds that name it.
    this.devices = [['default', config.device] as const, ...Object.entries(config.devices ?? {})].map(([name, d]) => ({ name, config: d }));
    const several = this.devices.length > 1;
    const engineDevices = this.devices.map(({ name, config: d }) => ({
      workers: d.workers,
      ...(several ? { kinds: [...kinds.values()].filter((k) => k.device === name).map((k) => k.name) } : {}),
      ...(d.batch ? { batch: { maxItems: d.batch.maxItems, maxWaitMs: d.batch.maxWaitMs } } : {}),
    }));
    for (const name of kinds.keys()) this.endedByKind.set(name, { ended: { done: 0, failed: 0, cancelled: 0 }, jobSeconds: 0 });
    // Mesa reads EGL_PLATFORM from the process environment, which a worker thread's process.env
    // does not change: set it here, in the main thread, for WebGPU's software fallback.
    if (this.devices.some((d) => d.config.kind === 'webgpu' && deviceType(d.config) === 'thread')) process.env['EGL_PLATFORM'] ??= 'surfaceless';
    // Before any thread or process starts: a handoff folder that cannot be made is a config error.
    this.handoffs = this.devices.map(({ name, config: d }) => (d.process ? handoffFolder(d.process.handoffDir, name === 'default' ? config.dataDir : `${config.dataDir}#${name}`, d.process.handoffMinBytes, name === 'default' ? 'device' : `devices.${name}`) : undefined));
    const threads = new StageThreads({
      // Dawn on Mesa's software GL must not be driven from several threads at once.
      devices: this.devices.map(({ config: d }) => ({ workers: d.workers, kind: d.kind, threadPerDevice: d.kind === 'webgpu' })),
      prepareThreads: config.prepare.threads,
      prepareConcurrency: config.prepare.concurrency,
      pool: this.pool,
    });
    const runners = this.devices.map(({ name, config: d }) => deviceRunner(name, d, threads));
    this.metrics = new ServiceMetrics(this);
    const router = new KindRouter(kinds, threads, runners, {
      started: (jobId) => {
        if (this.started.has(jobId)) return;
        this.started.add(jobId);
        this.later(() => this.journal.markRunning(jobId), () => this.emit({ type: 'job.started', id: jobId }));
      },
      partitionDone: (jobId, partition, output) => {
        this.onPartitionOutput?.(jobId, partition, output);
        // On a full disk the output stays in memory only (after a crash that partition runs again).
        this.later(
          () => this.journal.recordPartition(jobId, partition, output),
          (recorded) => recorded && this.emit({ type: 'job.partition', id: jobId, partition }),
        );
      },
      observe: (stage, kind, ms) => this.metrics.observeStage(stage, kind, ms),
      batch: (device, items) => this.metrics.observeBatch(device, items),
      prepareBatch: (kind, items) => this.metrics.observePrepareBatch(kind, items),
    }, (kind) => this.handoffs[this.devices.findIndex((d) => d.name === kind.device)]);
    this.router = router;
    // The pacer starts from what the config says, else from what the last run measured.
    this.priors = readPriors(config.dataDir);
    const o = config.engine.pacerOptions;
    const priorDeviceServiceMs = this.devices.map((d) => d.config.priorServiceMs ?? this.priors?.devices[d.name]?.serviceMs ?? 0);
    // Each kind's own device time, where the config gives none for the device.
    const priorKindServiceMs = Object.fromEntries(Object.entries(this.priors?.kinds ?? {}).map(([kind, byDevice]) => [kind, this.devices.map((d) => (d.config.priorServiceMs === undefined ? (byDevice[d.name]?.serviceMs ?? 0) : 0))]));
    const remembered: { priorLatencyMs?: number; priorLatencySdMs?: number; priorPrepareLimit?: number } = {
      ...(o['priorLatencyMs'] === undefined && this.priors?.latencyMs !== undefined ? { priorLatencyMs: this.priors.latencyMs, ...(this.priors.latencySdMs === undefined ? {} : { priorLatencySdMs: this.priors.latencySdMs }) } : {}),
      ...(o['priorPrepareLimit'] === undefined && this.priors?.prepareLimit !== undefined ? { priorPrepareLimit: this.priors.prepareLimit } : {}),
    };
    if (priorDeviceServiceMs.some((v) => v > 0) || remembered.priorLatencyMs !== undefined || remembered.priorPrepareLimit !== undefined) {
      const said = this.devices.flatMap((d, i) => ((priorDeviceServiceMs[i] ?? 0) > 0 ? [`${d.name} ${((priorDeviceServiceMs[i] as number) / 1000).toFixed(3)} s per item`] : []));
      const kinds = Object.values(priorKindServiceMs).filter((ms) => ms.some((v) => v > 0)).length;
      if (kinds > 1) said.push(`each of ${kinds} kinds' own device time`);
      if (remembered.priorLatencyMs !== undefined) said.push(`preparation ${(remembered.priorLatencyMs / 1000).toFixed(1)} s`);
      if (remembered.priorPrepareLimit !== undefined) said.push(`at most ${remembered.priorPrepareLimit} preparations at once`);
      this.priorsNote = `the pacer starts from ${said.join(', ')} (${this.devices.some((d) => d.config.priorServiceMs !== undefined) ? 'the config, and ' : ''}what the last run measured: ${path.join(config.dataDir, 'stoker.priors.json')})`;
    }
    const grouped = [...kinds.values()].filter((k) => k.prepareBatch);
    this.runtime = new Runtime({
      workload: router,
      devices: engineDevices,
      ...(grouped.length ? { kinds: Object.fromEntries(grouped.map((k) => [k.name, { prepareBatch: k.prepareBatch as NonNullable<LoadedKind['prepareBatch']> }])) } : {}),
      pacer: config.engine.pacer,
      pacerOptions: { ...remembered, ...o, priorDeviceServiceMs, priorKindServiceMs, targetWaiting: config.engine.targetWaiting },
      budgetBytes: config.engine.budgetBytes,
      retries: config.engine.retries,
      deviceTimeoutMs: config.engine.deviceTimeoutS * 1000,
      timeline: this.timeline,
      // A watched job's view costs O(its partitions): looked at on an engine step when the last
      // look is PROGRESS_MS old, else once more when it is (steps come thousands a second);
      // a job's end is sent at once (announceEnd).
      onStep: () => {
        if (this.watchers.size === 0 || this.progressTimer) return;
        const wait = this.progressAt + PROGRESS_MS - performance.now();
        if (wait <= 0) this.progressAll();
        else this.progressTimer = setTimeout(() => this.progressAll(), wait);
      },
    });
    this.purgeTimer = setInterval(() => ignoreFull(() => this.journal.purgeFinished(config.server.resultTtlS * 1000)), 60_000).unref();
    this.pacerTimer = setInterval(() => {
      const st = this.runtime.engine.pacer.state();
      if (this.events.listenerCount('event') > 0) this.emit({ type: 'pacer', ...st });
      this.checkMeasurement(st);
    }, 1000).unref();
    this.history.record(this.reading());
    this.historyTimer = setInterval(() => this.history.record(this.reading()), 1000).unref();
    this.priorsTimer = setInterval(() => this.savePriors(), PRIORS_EVERY_MS).unref();
  }

  /** What a history sample is computed from: cumulative counts and the levels now. */
  private reading(): HistoryReading {
    const s = this.runtime.engine.snapshot;
    const byKind = this.partitionsByKind();
    const kinds: HistoryReading['kinds'] = {};
    for (const [name, e] of this.endedByKind) {
      const p = byKind[name];
      kinds[name] = { ended: { ...e.ended }, jobSeconds: e.jobSeconds, partitions: { queued: p?.queued ?? 0, preparing: p?.preparing ?? 0, waiting: p?.waiting ?? 0, onDevice: p?.['on-device'] ?? 0 } };
    }
    return {
      t: Date.now(),
      workerBusyMs: this.runtime.workerBusyMs(),
      workerAlive: this.workerStates().map((ws) => ws.map((w) => w.alive)),
      dispatched: s.dispatched,
      completed: s.deviceCompletions,
      devices: s.devices.map((d) => ({ completions: d.completions, busyMs: d.busyMs, workers: d.workers })),
      kinds,
      partitions: { queued: s.backlog, preparing: s.preparing, waiting: s.waiting, onDevice: s.onDevice },
      pacer: this.pacerState(),
      waitingTarget: this.config.engine.targetWaiting,
      memory: { reservedBytes: s.budgetUsedBytes, idlePoolBytes: this.runtime.engine.budget.held, budgetBytes: Number.isFinite(s.budgetTotalBytes) ? s.budgetTotalBytes : null },
    };
  }

  /** The history samples of the last `sinceMs` (see {@link History}). */
  historyView(sinceMs: number): HistoryView {
    const now = Date.now();
    return { now, intervalS: 1, devices: this.devices.map((d) => ({ name: d.name, workers: d.config.workers })), samples: this.history.samples(now - sinceMs) };
  }

  /**
   * Streams one job's progress to `listener`: at once a `progress` event with every partition,
   * then one whenever partitions move, then `end` with the job's view (after which it is not
   * called again). Returns the unsubscribe function.
   * @throws {ServiceError} 404 for an unknown job.
   */
  watchJob(id: string, listener: (e: JobProgressEvent) => void): () => void {
    const j = this.stored(id);
    if (!j) throw notFound(id);
    const { events, states } = progressEvents(this.view(j), []);
    for (const e of events) listener(e);
    if (isFinal(j.state)) return () => {};
    let w = this.watchers.get(id);
    if (!w) this.watchers.set(id, (w = { listeners: new Set(), last: states }));
    w.listeners.add(listener);
    return () => {
      w.listeners.delete(listener);
      if (w.listeners.size === 0 && this.watchers.get(id) === w) this.watchers.delete(id);
    };
  }

  /** Looks at every watched job (see onStep). */
  private progressAll(): void {
    this.progressTimer = undefined;
    this.progressAt = performance.now();
    for (const id of [...this.watchers.keys()]) this.progress(id);
  }

  /** Sends a watched job's partitions that moved since the last event, and its end. */
  private progress(id: string): void {
    const w = this.watchers.get(id);
    const j = w && this.stored(id);
    if (!w || !j) return;
    const { events, states } = progressEvents(this.view(j), w.last);
    w.last = states;
    if (isFinal(j.state)) this.watchers.delete(id);
    for (const e of events) for (const l of [...w.listeners]) l(e);
  }

  /** The events after `lastEventId` for a reconnecting client, or the gap it must know of. */
  replay(lastEventId: string): Replay<ServiceEvent> {
    return this.eventLog.since(lastEventId);
  }

  /** Jobs ended since this server started, by kind and state (every loaded kind, 0 included). */
  endedCounts(): { kind: string; state: 'done' | 'failed' | 'cancelled'; count: number }[] {
    return [...this.endedByKind].flatMap(([kind, e]) => (['done', 'failed', 'cancelled'] as const).map((state) => ({ kind, state, count: e.ended[state] })));
  }

  /** Opens the journal in `config.dataDir` and resumes its unfinished jobs, running the given kinds (see loadKinds). */
  /**
   * `endsRecordedElsewhere`: a job's end is made durable elsewhere too (a cluster node records it
   * in Redis), so an end a full journal cannot take is shown and announced from memory at once —
   * the cluster needs it to record the result — instead of keeping the job unfinished until it lands.
   */
  static open(config: ServeConfig, kinds: ReadonlyMap<string, LoadedKind>, options: { endsRecordedElsewhere?: boolean } = {}): Service {
    const journal = Journal.open(config.dataDir, config.journal ? { maxBytes: config.journal.maxBytes } : {});
    let service: Service;
    try {
      service = new Service(config, journal, kinds, options.endsRecordedElsewhere ?? false);
    } catch (e) {
      journal.close();
      throw e;
    }
    ignoreFull(() => journal.purgeFinished(config.server.resultTtlS * 1000));
    for (const job of journal.unfinished()) service.resume(job);
    return service;
  }

  /** The kinds this service runs, as loaded (module URLs, validators). */
  loadedKinds(): ReadonlyMap<string, LoadedKind> {
    return this.kinds;
  }

  /** The kinds this service runs. */
  kindList(): KindView[] {
    return [...this.kinds.values()].map((k) => {
      const v = k.validate({});
      let memory: KindView['memory'] = null;
      try {
        if (v.ok) memory = k.memory(v.input);
      } catch {
        // A kind whose memory() needs more than the defaults: nothing to show.
      }
      return { name: k.name, description: k.description, input: k.schema, memory, partitionsFromInput: k.derivesPartitions };
    });
  }

  /**
   * Bounds the backlog (a partition costs memory only once dispatched, but a backlog of millions
   * is a mistake): a job larger than server.maxPendingPartitions is refused (400: it never fits),
   * one that does not fit beside the pending ones gets 429.
   */
  private refuseTooManyPartitions(partitions: number): void {
    const max = this.config.server.maxPendingPartitions;
    if (partitions > max) throw new ServiceError(400, 'too-many-partitions', 'Too many partitions', `partitions is ${partitions}, more than server.maxPendingPartitions (${max}): split the job, or raise the limit`);
    const s = this.runtime.engine.snapshot;
    const pending = s.backlog + s.preparing + s.waiting + s.onDevice + this.admitting.partitions;
    if (pending + partitions > max) {
      throw new ServiceError(429, 'too-many-partitions', 'Too many pending partitions', `${pending} partitions are pending and this job has ${partitions}: more than server.maxPendingPartitions (${max}); retry after ${this.config.server.retryAfterS} s`, { retryAfterS: this.config.server.retryAfterS });
    }
  }

  /**
   * Validates, journals and starts a job; resolves once the job is durable. While the engine
   * has work, submissions are let in at a pace that leaves it the event loop (AdmissionGate);
   * those that arrive together are journaled in one group commit. Same id and body: the same job.
   */
  async submit(raw: unknown): Promise<{ job: JobView; created: boolean }> {
    await this.gate.enter();
    const checked = this.admission(raw);
    if ('answer' in checked) return checked.answer;
    const { record } = checked;
    this.admitting.jobs++;
    this.admitting.partitions += record.partitions;
    return new Promise((resolve, reject) => {
      this.commits.add({
        write: () => this.journal.insert(record),
        after: (r) => {
          this.admitting.jobs--;
          this.admitting.partitions -= record.partitions;
          if (r.ok) resolve(this.admitted(r.value));
          else reject(this.insertError(r.error, record.id));
        },
      });
    });
  }

  /**
   * {@link submit} in one synchronous step, its own commit: durable when this returns.
   * `recorded`: outputs of partitions finished elsewhere (a cluster job another node began):
   * only the other partitions run, and the kind's finish gets these outputs too.
   */
  submitNow(raw: unknown, recorded: ReadonlyMap<number, unknown> = new Map()): { job: JobView; created: boolean } {
    return this.insertNow(this.admission(raw), recorded);
  }

  /**
   * {@link submitNow} of a job another node accepted (cluster mode): its record as that node
   * journaled it, not a body to parse again. This node's own module for the kind still checks the
   * input and the partitions it derives from it (the accepting node may not run the kind, or ran
   * another version of it), as a submission here would.
   */
  submitRecord(record: JournalJobInput, recorded: ReadonlyMap<number, unknown> = new Map()): { job: JobView; created: boolean } {
    if (this.closing) throw shuttingDown();
    const kind = this.kinds.get(record.kind);
    if (!kind) throw invalid([{ path: 'kind', message: `kind ${JSON.stringify(record.kind)} is not loaded on this server: use one of ${[...this.kinds.keys()].join(', ')}` }]);
    return this.insertNow(this.admit({ ...record, ...checkedByKind(kind, record.input, record.partitions) }, true), recorded);
  }

  private insertNow(checked: ReturnType<Service['admit']>, recorded: ReadonlyMap<number, unknown>): { job: JobView; created: boolean } {
    if ('answer' in checked) return checked.answer;
    let inserted: { job: JournalJob; created: boolean };
    try {
      inserted = this.journal.insert(checked.record);
    } catch (e) {
      throw this.insertError(e, checked.record.id);
    }
    return this.admitted(inserted, recorded);
  }

  /** A submission's checks before it is journaled: the record to journal, or the answer for a job that exists. */
  private admission(raw: unknown): { record: JournalJobInput } | { answer: { job: JobView; created: boolean } } {
    if (this.closing) throw shuttingDown();
    const { record, explicitId } = this.parseSubmission(raw);
    return this.admit(record, explicitId);
  }

  /** The checks of a parsed submission: an existing job's answer (or 409), a past deadline, too many partitions or jobs pending. */
  private admit(record: JournalJobInput, explicitId: boolean): { record: JournalJobInput } | { answer: { job: JobView; created: boolean } } {
    if (explicitId) {
      const existing = this.stored(record.id);
      if (existing) {
        if (existing.bodyHash !== Journal.hash(record)) throw conflict(record.id);
        return { answer: { job: this.view(existing, LIST_STATES_MAX), created: false } };
      }
    }
    refusePastDeadline(record.deadline);
    this.refuseTooManyPartitions(record.partitions);
    if (this.journal.pending() + this.admitting.jobs >= this.config.server.maxPendingJobs) {
      throw tooManyJobs(this.config.server.maxPendingJobs, 'pending', this.config.server.retryAfterS);
    }
    return { record };
  }

  private insertError(e: unknown, id: string): unknown {
    if (e instanceof JournalError && e.code === 'E_JOURNAL_CONFLICT') return conflict(id);
    if (e instanceof JournalError && e.code === 'E_JOURNAL_FULL') {
      return new ServiceError(507, 'insufficient-storage', 'Insufficient storage', `the journal cannot take the job (${e.message}): nothing was accepted; retry once space is freed`, { retryAfterS: this.config.server.retryAfterS });
    }
    return e;
  }

  /** A journaled submission: a new job starts (unless shutdown began meanwhile: then it resumes on the next start). */
  private admitted(inserted: { job: JournalJob; created: boolean }, recorded: ReadonlyMap<number, unknown> = new Map()): { job: JobView; created: boolean } {
    const j = inserted.job;
    if (inserted.created) {
      this.emit({ type: 'job.submitted', id: j.id, kind: j.kind, partitions: j.partitions });
      if (!this.closing) this.startWith(j, new Map([...recorded].filter(([p]) => Number.isInteger(p) && p >= 0 && p < j.partitions)));
    }
    return { job: this.view(j, LIST_STATES_MAX), created: inserted.created };
  }

  /**
   * Validates a submission exactly as {@link submit} does (400 with every field's problem): the
   * job's record, with a generated id when none was given.
   */
  parseSubmission(raw: unknown, elsewhere?: { kind(name: string): LoadedKind | undefined; names(): string[] }): { record: JournalJobInput; explicitId: boolean } {
    const parsed = SubmitBody.safeParse(raw);
    if (!parsed.success) throw invalid(fieldIssues(parsed.error));
    const body = parsed.data;
    // A kind this service runs, or (cluster mode) one that other nodes run.
    const kind = this.kinds.get(body.kind) ?? elsewhere?.kind(body.kind);
    if (!kind) {
      const names = [...new Set([...this.kinds.keys(), ...(elsewhere?.names() ?? [])])];
      throw invalid([{ path: 'kind', message: `unknown kind ${JSON.stringify(body.kind)}: use one of ${names.join(', ')}` }]);
    }
    const { input, partitions } = checkedByKind(kind, body.input ?? {}, body.partitions);
    const deadline = body.deadline === undefined ? null : typeof body.deadline === 'number' ? body.deadline : Date.parse(body.deadline);
    const id = body.id ?? randomUUID();
    return { record: { id, kind: kind.name, priority: body.priority, partitions, input, deadline }, explicitId: body.id !== undefined };
  }

  /** The job, or undefined when unknown (or purged); `page`: which partitions' states to give (default the first 100,000). */
  job(id: string, page?: StatesPage): JobView | undefined {
    const j = this.stored(id);
    return j && this.view(j, Infinity, page);
  }

  /** Recently submitted jobs, newest first (at most `limit`; only those in `states` when given). */
  jobs(options: { limit?: number; states?: readonly JobState[] } = {}): JobView[] {
    return this.journal.list(options).map((j) => this.view(this.overlay(j), LIST_STATES_MAX));
  }

  /** The timeline of the last `sinceMs` (spans that ended in it or still run, samples in it), times in epoch ms. */
  timelineView(sinceMs: number, maxSpans = Infinity): TimelineView {
    const t = this.runtime.now();
    const epoch = (ms: number) => performance.timeOrigin + ms;
    let spans = this.timeline.spans(t - sinceMs);
    // Keep the newest when there are too many (spans come oldest start first).
    if (spans.length > maxSpans) spans = spans.slice(spans.length - maxSpans);
    return {
      now: epoch(t),
      lanes: this.timeline.lanes(),
      spans: spans.map((sp) => ({ ...sp, partition: this.jobPartition(sp.jobId, sp.partition), start: epoch(sp.start), end: sp.end === null ? null : epoch(sp.end) })),
      samples: this.timeline.samples(t - sinceMs).map((x) => ({ ...x, t: epoch(x.t) })),
    };
  }

  /** The last `sinceMs` as Chrome trace event JSON (opens in Perfetto and chrome://tracing). */
  trace(sinceMs: number): ChromeTrace {
    const v = this.timelineView(sinceMs);
    // The jobs submitted in the window, by their own partition numbering's size (what a plan fits arrivals from).
    const jobs = this.timeline.jobs(this.runtime.now() - sinceMs).map((j) => ({ ...j, t: performance.timeOrigin + j.t }));
    return toChromeTrace({ lanes: v.lanes, spans: v.spans, samples: v.samples, jobs, title: 'stoker serve', now: v.now });
  }

  /** Resolves with the job once it has ended, or after `waitMs` with its state then. */
  async wait(id: string, waitMs: number): Promise<JobView | undefined> {
    const first = this.job(id);
    if (!first || isFinal(first.state) || waitMs <= 0 || this.closing) return first;
    await new Promise<void>((resolve) => {
      let set = this.waiters.get(id);
      if (!set) this.waiters.set(id, (set = new Set()));
      const wake = () => {
        clearTimeout(t);
        set.delete(wake);
        if (set.size === 0 && this.waiters.get(id) === set) this.waiters.delete(id);
        resolve();
      };
      const t = setTimeout(wake, waitMs);
      set.add(wake);
    });
    return this.job(id);
  }

  /** Cancels a job: withdraws its partitions wherever they are. A finished job cannot be cancelled (409). */
  cancel(id: string): JobView {
    const j = this.stored(id);
    if (!j) throw notFound(id);
    if (j.state === 'cancelled') return this.view(j);
    if (isFinal(j.state)) throw jobFinished(id, j.state);
    this.runtime.cancel(id);
    // The runtime answers asynchronously; the journal records the end now so the reply is final.
    this.end(id, { state: 'cancelled', code: 'E_CANCELLED', reason: 'cancelled on request' });
    this.commits.flush();
    return this.view(this.stored(id) as JournalJob);
  }

  /** The whole engine: jobs, partitions per kind and stage, workers, pacer, budget, pool. */
  status(): StatusView {
    const engine = this.runtime.engine;
    return buildStatus({
      snapshot: engine.snapshot,
      workerBusyMs: this.runtime.workerBusyMs(),
      workerStates: this.workerStates(),
      jobCounts: this.journal.counts(),
      byKind: this.partitionsByKind(),
      uptimeS: (Date.now() - this.startedAt) / 1000,
      closing: this.closing,
      config: this.config,
      devices: this.devices,
      jobPartition: (id, p) => this.jobPartition(id, p),
      pacer: { name: engine.pacer.name, ...engine.pacer.state() },
      budget: { held: engine.budget.held, peak: engine.budget.peak },
      pool: this.pool.stats(),
    });
  }


  /** Partitions of live jobs by kind and stage (for status and metrics). */
  partitionsByKind(): ReturnType<Engine['partitionsByKind']> {
    return this.runtime.engine.partitionsByKind();
  }

  /** The kinds this service runs, by name (for metrics). */
  kindNames(): string[] {
    return [...this.kinds.keys()];
  }

  /** The devices' names in engine order: "default", then each [devices.NAME] (for metrics). */
  deviceNames(): string[] {
    return this.devices.map((d) => d.name);
  }

  /** Busy ms of each worker so far, the running part of items in flight included (for metrics). */
  workerBusyMs(at?: number): number[][] {
    return this.runtime.workerBusyMs(at);
  }

  /** Each device's workers: alive or lost, and what each runs (for status and metrics). */
  workerStates(): ReturnType<Engine['workerStates']> {
    return this.runtime.engine.workerStates();
  }

  /** The pacer's own account of itself: mode, measured rate, interval, terms. */
  pacerState(): PacerState {
    return this.runtime.engine.pacer.state();
  }

  /** Jobs in the journal by kind and state (for metrics). */
  jobCounts(): { kind: string; state: JobState; count: number }[] {
    return this.journal.countsByKind();
  }

  /** The engine counters (for metrics). */
  get counters() {
    return this.runtime.engine.snapshot;
  }

  /**
   * Shutdown: accepts nothing more, lets the partitions in flight finish for up to `timeoutMs`
   * (their outputs are journaled), leaves every unfinished job in the journal to resume on the
   * next start, answers every waiter, closes the threads and the journal.
   */
  async close(timeoutMs = this.config.server.shutdownTimeoutS * 1000, beforeJournalCloses?: () => Promise<void>): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    this.gate.close();
    clearInterval(this.priorsTimer);
    clearInterval(this.purgeTimer);
    clearInterval(this.pacerTimer);
    clearInterval(this.historyTimer);
    clearTimeout(this.progressTimer);
    await this.runtime.close(timeoutMs, { drain: true });
    this.commits.flush();
    // Ends the full disk kept from the journal get one more try; the rest resume on the next start.
    this.landEnds();
    clearInterval(this.landTimer);
    for (const set of this.waiters.values()) for (const wake of [...set]) wake();
    this.events.emit('close');
    for (const h of this.handoffs) if (h) fs.rmSync(h.dir, { recursive: true, force: true });
    await beforeJournalCloses?.();
    this.savePriors();
    this.commits.flush();
    this.journalClosed = true;
    this.journal.close();
  }

  private start(job: JournalJob, partitions: readonly number[] | null, recorded: Map<number, unknown>): void {
    const kind = this.kinds.get(job.kind);
    if (!kind) {
      // Journaled by a server that had this kind; this one was started without its module.
      this.end(job.id, { state: 'failed', code: 'E_UNKNOWN_KIND', reason: `kind ${JSON.stringify(job.kind)} is not loaded on this server: start it with --kind <module> (or [kinds.${job.kind}] in the config)` });
      return;
    }
    let memory: ReturnType<LoadedKind['memory']>;
    try {
      memory = kind.memory(job.input);
    } catch (e) {
      this.end(job.id, { state: 'failed', code: 'E_KIND_FAILED', reason: (e as Error).message });
      return;
    }
    const deadline = job.deadline === null ? undefined : this.runtime.now() + (job.deadline - Date.now());
    const routed: RoutedInput = { kind: job.kind, input: job.input, total: job.partitions, partitions, recorded };
    this.runs.set(job.id, partitions);
    const spec = { id: job.id, kind: job.kind, priority: job.priority, partitions: partitions?.length ?? job.partitions, memory, ...(deadline === undefined ? {} : { deadline }) };
    this.runtime.submit(spec, routed).then(
      (result) => this.end(job.id, { state: 'done', result }),
      (e: unknown) => {
        const code = e instanceof StokerError ? e.code : 'E_INTERNAL';
        const reason = e instanceof Error ? e.message : String(e);
        // A client's cancel is journaled by cancel() itself; a shutdown's is not the job's end:
        // the job stays unfinished and resumes on the next start.
        if (code === 'E_CANCELLED') return;
        // The engine names the deadline in its own clock: say it as the client gave it.
        const said = code === 'E_DEADLINE' && job.deadline !== null ? `job ${job.id} missed its deadline ${new Date(job.deadline).toISOString()}` : reason;
        this.end(job.id, { state: 'failed', code, reason: said });
      },
    );
  }

  /**
   * The pacer's measurement self-check, said once per change: a device whose completion rate
   * while saturated kept disagreeing with its feed-forward capacity (workers ÷ busy time per item)
   * gets a `device.measurement` event naming it, the two rates and the likely cause, and a line
   * on stderr; the pacer then plans with the observed rate.
   */
  private checkMeasurement(st: PacerState): void {
    st.devices?.forEach((d, i) => {
      const name = this.devices[i]?.name ?? String(i);
      if (this.trusted[i] === d.trusted) return;
      const first = this.trusted[i] === undefined;
      this.trusted[i] = d.trusted;
      if (first && d.trusted === 'estimate') return;
      const ratio = d.observedRatio ?? 1;
      const observedPerSec = d.estimatedPerSec === null ? null : d.estimatedPerSec * ratio;
      const cause =
        d.trusted === 'estimate'
          ? 'the observed rate agrees with the busy time again'
          : ratio < 1
            ? `it completes ${(1 / ratio).toFixed(2)}× slower than its ${this.devices[i]?.config.workers ?? '?'} workers' busy time says: the workers are not really concurrent (one GPU behind a lock?), or the busy time leaves out a wait (a lock, a queue) — report the time each item occupied its worker, or declare fewer workers`
            : `it completes ${ratio.toFixed(2)}× faster than its busy time says: the busy time counts more than the item occupied (a wait before it started?), or more workers run than declared`;
      const line = `device ${name}: ${d.trusted === 'observed' ? 'the pacer now plans with the observed rate' : 'the pacer plans with the busy time again'}: ${cause}`;
      process.stderr.write(`stoker serve: ${line}\n`);
      this.emit({ type: 'device.measurement', device: name, estimatedPerSec: d.estimatedPerSec, observedPerSec, trusted: d.trusted, reason: line });
    });
  }

  /** Saves what this run measured (over what it remembered) for the next start. */
  private savePriors(): void {
    const s = this.runtime.engine.snapshot;
    const measured = s.deviceCompletions + s.prepareCompletions;
    if (measured === this.priorsSavedAt) return; // nothing new since the last save
    const terms = this.runtime.engine.pacer.state().terms;
    // The best cap the limiter measured (the one in force may be a probe around it).
    this.priors = measuredPriors(s, this.devices.map((d) => d.name), this.priors, terms['prepareLimitBest'] ?? terms['prepareLimit']);
    if (writePriors(this.config.dataDir, this.priors)) this.priorsSavedAt = measured;
  }

  /** A job from the journal, unfinished at the last stop: its unfinished partitions start again. */
  private resume(job: JournalJob): void {
    const recorded = this.journal.partitionOutputs(job.id);
    ignoreFull(() => this.journal.markResumed(job.id));
    this.startWith(job, recorded);
  }

  /** Starts a job whose partitions in `recorded` already finished: only the others run. */
  private startWith(job: JournalJob, recorded: Map<number, unknown>): void {
    if (recorded.size === 0) return this.start(job, null, recorded);
    const left: number[] = [];
    for (let p = 0; p < job.partitions; p++) if (!recorded.has(p)) left.push(p);
    if (left.length > 0) {
      this.resumedRuns.set(job.id, left);
      if (this.resumedRuns.size > MAX_REMEMBERED_RUNS) this.resumedRuns.delete(this.resumedRuns.keys().next().value as string);
      this.start(job, left, recorded);
      return;
    }
    // Every partition finished before the stop: only the finish is left.
    Promise.resolve()
      .then(() => this.router.finish({ jobId: job.id, input: { kind: job.kind, input: job.input, total: job.partitions, partitions: [], recorded }, outputs: [] }))
      .then(
        (result) => this.end(job.id, { state: 'done', result }),
        (e: unknown) => this.end(job.id, { state: 'failed', code: 'E_FINISH_FAILED', reason: e instanceof Error ? e.message : String(e) }),
      );
  }

  /**
   * A journal write that can wait for the next group commit (the state it records is in memory
   * meanwhile); on a full disk it is skipped (see ignoreFull), `then` gets undefined.
   */
  private later<T>(write: () => T, then: (value: T | undefined) => void): void {
    if (this.journalClosed) return;
    this.commits.add({
      write,
      after: (r) => {
        if (!r.ok && !(r.error instanceof JournalError && r.error.code === 'E_JOURNAL_FULL')) throw r.error;
        then(r.ok ? r.value : undefined);
      },
    });
  }

  private end(id: string, outcome: Outcome): void {
    this.started.delete(id);
    this.runs.delete(id);
    // A finish that settles after shutdown closed the journal: the job stays unfinished there and
    // its finish runs again, from the recorded outputs, on the next start.
    if (this.journalClosed) return;
    this.commits.add({ write: () => this.journal.finish(id, outcome), after: (r) => this.ended(id, outcome, r) });
  }

  /** A job's end, once the group commit that journals it ran: announced, or kept for a full disk. */
  private ended(id: string, outcome: Outcome, r: WriteResult<boolean>): void {
    const job = this.journal.get(id);
    if (!r.ok) {
      const e = r.error;
      if (e instanceof JournalError && e.code === 'E_JOURNAL_FULL') {
        // The job has ended; the journal cannot say so yet: it stays unfinished, and its end is
        // retried until it lands, then announced (after a crash meanwhile, the job runs again).
        if (!job || isFinal(job.state) || this.unjournaled.has(id)) return;
        this.unjournaled.set(id, { outcome, at: Date.now() });
        this.landTimer ??= setInterval(() => this.landEnds(), 1000).unref();
        if (this.endsRecordedElsewhere) this.announceEnd(id, job.kind, job.submittedAt, Date.now(), outcome);
        return;
      }
      // A result the journal cannot hold (bytes nested in JSON, a BigInt…) is the kind's fault:
      // the job fails saying so (before, the error escaped and ended the process, on every restart).
      if (!(outcome.state === 'done' && e instanceof JournalError && e.code === 'E_JOURNAL_BAD_INPUT')) throw e;
      return this.end(id, { state: 'failed', code: 'E_FINISH_FAILED', reason: `job ${id}: its result cannot be stored: ${e.message}` });
    }
    if (r.value && job) this.announceEnd(id, job.kind, job.submittedAt, job.finishedAt ?? Date.now(), outcome);
  }

  private announceEnd(id: string, kind: string, submittedAt: number, finishedAt: number, outcome: Outcome): void {
    const seconds = (finishedAt - submittedAt) / 1000;
    let e = this.endedByKind.get(kind);
    if (!e) this.endedByKind.set(kind, (e = { ended: { done: 0, failed: 0, cancelled: 0 }, jobSeconds: 0 }));
    e.ended[outcome.state]++;
    e.jobSeconds += seconds;
    this.metrics.jobEnded(kind, outcome.state, seconds);
    this.progress(id);
    this.emit(outcome.state === 'done' ? { type: 'job.done', id } : { type: `job.${outcome.state}`, id, code: outcome.code, reason: outcome.reason });
    const set = this.waiters.get(id);
    if (set) for (const wake of [...set]) wake();
  }

  /** Tries to journal the ends a full disk kept out; those that land are announced, the moot forgotten. */
  private landEnds(): void {
    for (const [id, { outcome }] of this.unjournaled) {
      let landed = false;
      try {
        landed = this.journal.finish(id, outcome);
      } catch (e) {
        if (e instanceof JournalError && e.code === 'E_JOURNAL_FULL') return;
        if (!(e instanceof JournalError && e.code === 'E_JOURNAL_UNKNOWN_JOB')) throw e;
      }
      this.unjournaled.delete(id);
      const j = landed && !this.endsRecordedElsewhere ? this.journal.get(id) : undefined;
      if (j) this.announceEnd(id, j.kind, j.submittedAt, j.finishedAt ?? Date.now(), outcome);
    }
    if (this.unjournaled.size === 0 && this.landTimer) {
      clearInterval(this.landTimer);
      this.landTimer = undefined;
    }
  }

  /** The job as the journal has it (with an end a full disk kept out, where ends are recorded elsewhere too). */
  private stored(id: string): JournalJob | undefined {
    const j = this.journal.get(id);
    return j && this.overlay(j);
  }

  private overlay(j: JournalJob): JournalJob {
    const u = this.endsRecordedElsewhere ? this.unjournaled.get(j.id) : undefined;
    if (!u || isFinal(j.state)) return j;
    const o = u.outcome;
    return o.state === 'done' ? { ...j, state: 'done', finishedAt: u.at, result: o.result } : { ...j, state: o.state, finishedAt: u.at, errorCode: o.code, errorReason: o.reason };
  }

  /** The job's own partition behind an engine partition (they differ for a resumed job). */
  private jobPartition(jobId: string, enginePartition: number): number {
    const run = this.runs.get(jobId) ?? this.resumedRuns.get(jobId);
    return run?.[enginePartition] ?? enginePartition;
  }

  private emit(e: Omit<ServiceEvent, 'time'>): void {
    const logged = this.eventLog.add({ time: new Date().toISOString(), ...e } as ServiceEvent, e.type === 'pacer');
    this.events.emit('event', logged.event, logged.eventId);
  }

  /** The API's view of a job; `maxStates`: the most partitions whose states it lists (more: counts only). */
  private view(j: JournalJob, maxStates = Infinity, page: StatesPage = { from: 0, limit: STATES_PAGE_MAX }): JobView {
    let partitionStates: PartitionState[] | null = null;
    let partitionCounts: PartitionCounts | null = null;
    const run = this.runs.get(j.id);
    const counts = isFinal(j.state) || run === undefined ? undefined : this.runtime.engine.jobCounts(j.id);
    if (run !== undefined && counts) {
      // Partitions outside this run finished before a restart.
      partitionCounts = { ...countPartitions([]), ...counts, done: counts.done + j.partitions - (run?.length ?? j.partitions) };
      if (j.partitions <= maxStates) {
        const to = Math.min(j.partitions, page.from + page.limit);
        if (run === null) partitionStates = this.runtime.engine.jobStates(j.id, page.from, to) ?? null;
        else {
          // A resumed job: engine partition i is the job's partition run[i].
          const all = new Array<PartitionState>(j.partitions).fill('done');
          (this.runtime.engine.jobStates(j.id, 0, run.length) ?? []).forEach((st, i) => (all[run[i] as number] = st));
          partitionStates = all.slice(page.from, to);
        }
      }
    } else if (!isFinal(j.state)) {
      partitionCounts = { ...countPartitions([]), done: j.partitionsDone, queued: j.partitions - j.partitionsDone };
    }
    return jobView({
      record: j,
      state: j.state,
      submittedAt: j.submittedAt,
      startedAt: j.startedAt,
      finishedAt: j.finishedAt,
      partitionsDone: j.partitionsDone,
      partitionStates,
      partitionCounts,
      resumes: j.resumes,
      result: resultFields(j.result),
      error: j.errorCode === null ? null : { code: j.errorCode, reason: j.errorReason ?? '' },
    });
  }
}

/** How a job ends. */
type Outcome = { state: 'done'; result: unknown } | { state: 'failed' | 'cancelled'; code: string; reason: string };

/** Runs a journal write whose failure on a full disk can wait (the state it records is also in memory); undefined then. */
function ignoreFull<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch (e) {
    if (e instanceof JournalError && e.code === 'E_JOURNAL_FULL') return undefined;
    throw e;
  }
}

/** A result for a view: JSON as it is, bytes as base64 with `resultEncoding`. */
export function resultFields(result: unknown): { result: unknown; resultEncoding?: 'base64' } {
  if (result instanceof Uint8Array) return { result: Buffer.from(result.buffer, result.byteOffset, result.byteLength).toString('base64'), resultEncoding: 'base64' };
  return { result: result ?? null };
}

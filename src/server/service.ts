import fs from 'node:fs';
import path from 'node:path';
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { optionsRead, PACERS, TimelineRecorder, type Engine, type PacerState } from '../core/index.js';
import { BufferPool } from '../runtime/buffer-pool.js';
import { ProcessDevice } from '../runtime/process-device.js';
import { Runtime } from '../runtime/runtime.js';
import { StageThreads, type DeviceRunner } from '../runtime/threaded.js';
import type { Handoff } from '../runtime/threads/protocol.js';
import { toChromeTrace, type ChromeTrace } from '../report/chrome-trace.js';
import type { JobView, StatusView, TimelineView } from './api.js';
import { ConfigError, deviceType, type ServeConfig } from './config.js';
import { deviceField, deviceHandoffs, deviceRunner, engineDevices, serviceDevices, type ServiceDevice } from './device-runners.js';
import { jobFinished, notFound, quoted, ServiceError } from './errors.js';
import { EventLog, type Replay } from './event-log.js';
import { GroupCommit } from './group-commit.js';
import { EndedJobs, History, historyReading, type HistoryReading, type HistoryView } from './history.js';
import { Intake, type Submitted } from './intake.js';
import { JobRuns } from './job-runs.js';
import { JobWatch } from './job-watch.js';
import { ignoreFull, isJournalError, Journal, type JobState, type JournalJob, type JournalJobInput, type JournalOutcome } from './journal.js';
import { moduleHash, type LoadedKind } from './kind-module.js';
import { KindRouter, kindView, type KindView, type RoutedInput } from './kinds.js';
import { localJobView, ResultPieces, type ResultForm } from './local-view.js';
import { FailureLog } from './failure-log.js';
import { stderrLog, type ServerLog } from './log.js';
import { MeasurementCheck, slowPreparations, slowSteps, type SlowStep } from './measurement-check.js';
import { HeldTime, ServiceMetrics, waitingTarget } from './metrics.js';
import { PacerMemory } from './pacer-memory.js';
import { isFinal, LIST_STATES_MAX, type JobProgressEvent, type StatesPage } from './progress.js';
import { buildStatus } from './status.js';
import { redactUrl } from '../runtime/redact.js';
import { parseSubmission, type OtherKinds } from './submission.js';
import { Waiters } from './waiters.js';

/** One server-sent event. */
export interface ServiceEvent {
  type: 'job.submitted' | 'job.started' | 'job.partition' | 'step.failed' | 'job.done' | 'job.failed' | 'job.cancelled' | 'pacer' | 'device.measurement';
  time: string;
  [k: string]: unknown;
}

/** How often (ms) the measured rates are saved for the next start (and once more at close). */
const PRIORS_EVERY_MS = 10_000;

/**
 * The daemon's heart, without HTTP: the journal, the runtime and the kinds. Accepted jobs are
 * journaled before they are acknowledged ({@link Intake}); on open, unfinished jobs resume with
 * their unfinished partitions; each job ends exactly once in the journal ({@link JobRuns}).
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
  /** The journaled jobs on the runtime: started, resumed, ended. */
  private readonly runs: JobRuns;
  /** Submissions: checked, journaled, started. */
  private readonly intake: Intake;
  /** Those waiting for a job's end (`wait`). */
  private readonly waiters = new Waiters();
  /** The progress streams of watched jobs (`watchJob`). */
  private readonly watch = new JobWatch((id) => this.job(id));
  /** One sample a second of levels and rates, for `GET /v1/history` (the dashboard's charts on load). */
  readonly history = new History();
  /** Per kind: jobs ended since start by state, and their summed latency (s). */
  private readonly ended: EndedJobs;
  private readonly historyTimer: NodeJS.Timeout;
  private closing = false;
  /** While the memory budget holds the head of the queue back (stoker_budget_blocked_seconds_total). */
  private readonly budgetBlocked = new HeldTime();
  /** Journal writes asked for in one turn of the event loop, committed together on the next. */
  private readonly commits: GroupCommit;
  /** Called with each finished partition's output (cluster mode shares them, so another node can resume the job). */
  onPartitionOutput: ((jobId: string, partition: number, output: unknown) => void) | undefined;
  /** The devices by index, as the engine numbers them: [device] ("default"), then each [devices.NAME]. */
  private readonly devices: ServiceDevice[];
  /** Where each device's steps run (by device index). */
  private readonly runners: DeviceRunner[];
  /** Per device, a process device's handoff files: this server's own folder, emptied at start and at close. */
  private readonly handoffs: (Handoff | undefined)[];
  private readonly purgeTimer: NodeJS.Timeout;
  /** What the last run measured (the pacer started from it), and what this run measures, saved every PRIORS_EVERY_MS and at close. */
  private readonly memory: PacerMemory;
  private readonly priorsTimer: NodeJS.Timeout;
  private readonly pacerTimer: NodeJS.Timeout;

  private constructor(
    readonly config: ServeConfig,
    private readonly journal: Journal,
    private readonly kinds: ReadonlyMap<string, LoadedKind>,
    endsRecordedElsewhere: boolean,
    log: ServerLog,
  ) {
    this.events.setMaxListeners(0);
    this.commits = new GroupCommit(journal);
    // Device 0 is [device] ("default"), then each [devices.NAME]; each runs the kinds that name it.
    this.devices = serviceDevices(config);
    this.ended = new EndedJobs(kinds.keys());
    // Mesa reads EGL_PLATFORM from the process environment, which a worker thread's process.env
    // does not change: set it here, in the main thread, for WebGPU's software fallback.
    if (this.devices.some((d) => d.config.kind === 'webgpu' && deviceType(d.config) === 'thread')) process.env['EGL_PLATFORM'] ??= 'surfaceless';
    // Before any thread or process starts: a handoff folder that cannot be made is a config error.
    this.handoffs = deviceHandoffs(this.devices, config.dataDir);
    const threads = new StageThreads({
      // Dawn on Mesa's software GL must not be driven from several threads at once.
      devices: this.devices.map(({ config: d }) => ({ workers: d.workers, kind: d.kind, threadPerDevice: d.kind === 'webgpu' })),
      prepareThreads: config.prepare.threads,
      prepareConcurrency: config.prepare.concurrency,
      pool: this.pool,
      onThreadHeld: (module, heldMs) => {
        const kind = [...kinds.values()].find((k) => k.url === module);
        if (!kind || this.saidHeld.has(kind.name)) return;
        this.saidHeld.add(kind.name);
        log(
          `stoker serve: kind ${kind.name}'s prepare computed on its preparation thread for ${Math.round(heldMs)} ms before it returned: with [prepare] concurrency = ${config.prepare.concurrency}, the preparations dispatched to a thread queue behind each other there, in the order they were dispatched — a higher priority's too — and their latencies count the queue; give [prepare] concurrency = 1 (and threads = the cores to use), or make prepare await its work`,
        );
      },
    });
    const runners = this.devices.map(({ name, config: d }) => deviceRunner(name, d, threads, log));
    this.runners = runners;
    this.metrics = new ServiceMetrics(this);
    const router = this.routerOver(threads, runners);
    // The pacer starts from what the config says, else from what the last run measured.
    const pacer = PACERS[config.engine.pacer];
    this.memory = new PacerMemory(config.dataDir, this.devices, config.engine.pacerOptions, pacer && Object.hasOwn(PACERS, config.engine.pacer) ? optionsRead(pacer.create) : undefined);
    const grouped = [...kinds.values()].filter((k) => k.prepareBatch);
    const failures = new FailureLog(log);
    this.runtime = new Runtime({
      workload: router,
      devices: engineDevices(this.devices, kinds),
      ...(grouped.length ? { kinds: Object.fromEntries(grouped.map((k) => [k.name, { prepareBatch: k.prepareBatch as NonNullable<LoadedKind['prepareBatch']> }])) } : {}),
      pacer: config.engine.pacer,
      pacerOptions: { ...this.memory.pacerOptions, targetWaiting: config.engine.targetWaiting },
      budgetBytes: config.engine.budgetBytes,
      retries: config.engine.retries,
      deviceTimeoutMs: config.engine.deviceTimeoutS * 1000,
      prepareTimeoutMs: config.engine.prepareTimeoutS * 1000,
      timeline: this.timeline,
      onStep: (e, _, snapshot) => {
        this.budgetBlocked.step(e.time, snapshot.budgetBlocked);
        this.watch.onStep();
      },
      onStepFailed: (f) => {
        const device = f.device === undefined ? undefined : this.devices[f.device]?.name;
        this.metrics.stepFailed(f.kind, f.stage);
        failures.failed(f, device);
        this.emit({ type: 'step.failed', id: f.jobId, partition: f.partition, stage: f.stage, ...(device === undefined ? {} : { device, worker: f.worker }), attempt: f.attempt, reason: f.reason, retried: f.retried, counted: f.counted });
      },
    });
    const announce = (job: JournalJob, finishedAt: number, outcome: JournalOutcome) => this.announceEnd(job, finishedAt, outcome);
    this.runs = new JobRuns({ journal, commits: this.commits, kinds, runtime: this.runtime, router, endsRecordedElsewhere, emit: (e) => this.emit(e), announce, log });
    for (const [name, kind] of kinds) this.moduleHashes.set(name, fileHash(kind.url));
    for (const kind of kinds.values()) for (const note of kind.notes ?? []) log(`stoker serve: ${note}`);
    this.intake = new Intake({ server: config.server, journal, commits: this.commits, kinds, engine: this.runtime.engine, closing: () => this.closing, onHold: () => this.held.size, moduleHash: (kind) => this.moduleHashes.get(kind), stored: (id) => this.runs.stored(id), admitted: (inserted, recorded) => this.admitted(inserted, recorded) });
    this.purgeTimer = setInterval(() => ignoreFull(() => this.journal.purgeFinished(config.server.resultTtlS * 1000)), 60_000).unref();
    const slowNow = (st: PacerState, minMs?: number): SlowStep[] => {
      if (Number.isFinite(config.engine.deviceTimeoutS)) return [];
      // A worker's time per item on each device, from the pacer's estimate of the device's rate.
      const perItemMs = this.devices.map((d, i) => {
        const perSec = st.devices?.[i]?.estimatedPerSec ?? null;
        return perSec && perSec > 0 ? (d.config.workers / perSec) * 1000 : NaN;
      });
      return slowSteps(this.workerStates(), this.runtime.now(), perItemMs, minMs);
    };
    const measurement = new MeasurementCheck(this.devices, (e) => this.emit(e), log, () => slowNow(this.runtime.status().pacer, 10_000));
    const full = { said: 0, at: -Infinity, open: false };
    const slow = { said: false };
    /** The slow device steps said, by device/worker/job/partition (each once while it runs). */
    let slowSaid = new Set<string>();
    this.pacerTimer = setInterval(() => {
      failures.flush();
      const status = this.runtime.status();
      const st = status.pacer;
      if (this.events.listenerCount('event') > 0) this.emit({ type: 'pacer', ...st });
      measurement.check(st);
      if (!Number.isFinite(config.engine.prepareTimeoutS)) {
        const line = slowPreparations(status.counters, status.now, st.terms['latencyMs'] ?? 0);
        if (line !== undefined && !slow.said) log(`stoker serve: ${line}`);
        slow.said = line !== undefined;
      }
      const steps = slowNow(st);
      const saidNow = new Set<string>();
      for (const x of steps) {
        const key = `${x.device}/${x.worker}/${x.job}/${x.partition}`;
        saidNow.add(key);
        if (slowSaid.has(key)) continue;
        const name = this.devices[x.device]?.name ?? String(x.device);
        log(`stoker serve: device ${name} worker ${x.worker}: job ${x.job} partition ${this.runs.jobPartition(x.job, x.partition)} has run ${x.ageS.toFixed(0)} s on it${Number.isFinite(x.times) ? `, ${x.times.toFixed(0)} × the device's measured time per item` : ''}: a step that never ends holds its worker for good — set engine.deviceTimeoutS (none is set)`);
      }
      slowSaid = saidNow;
      // A full journal refuses submissions (507) and keeps ends in memory: said on stderr, at once and then once a minute while it lasts.
      // (Room back is seen without a write — a server /readyz showed not ready gets no submission to
      // say so — once the ends kept have landed: their retries are the better test.)
      if (this.journal.checkFile()) log(`stoker serve: ${this.journal.fullReason()}: submissions get 507 from now on, jobs already accepted go on — ${this.journal.fullFix()}`);
      if (this.runs.endsKept === 0) this.journal.checkRoom();
      const refused = this.journal.fullRefusals;
      if (refused > full.said && Date.now() - full.at >= 60_000) {
        log(`stoker serve: ${this.journal.fullReason()}: ${refused - full.said} journal writes refused (a submission it cannot write gets 507; jobs already accepted go on, their ends kept in memory until there is room) — ${this.journal.fullFix()}`);
        full.said = refused;
        full.at = Date.now();
        full.open = true;
      } else if (full.open && !this.journal.full) {
        // (Said once room is back: the next time it fills is said at once.)
        log(`stoker serve: the journal takes writes again (${refused} refused while it was full); submissions are accepted`);
        full.said = refused;
        full.at = -Infinity;
        full.open = false;
      }
    }, 1000).unref();
    this.history.record(this.reading());
    this.historyTimer = setInterval(() => this.history.record(this.reading()), 1000).unref();
    this.priorsTimer = setInterval(() => this.memory.save(this.runtime.engine), PRIORS_EVERY_MS).unref();
  }

  private waiting: string | undefined;
  /** The kinds whose prepare was said to compute on its thread (once each). */
  private readonly saidHeld = new Set<string>();
  /** Each kind's module content hash (undefined where its file cannot be read): journaled with each job accepted. */
  private readonly moduleHashes = new Map<string, string | undefined>();
  /** The jobs {@link resumeUnfinished} left on hold, and why (a cancel takes one out). */
  private readonly held = new Map<string, string>();
  /** Jobs {@link resumeUnfinished} started again. */
  resumed = 0;

  /** Where the pacer's starting rates came from, for the start line (undefined: it measures first). */
  get priorsNote(): string | undefined {
    return this.memory.note;
  }

  /** The one workload over every kind: its hooks journal a job's start and its partitions' outputs, and feed the metrics. */
  private routerOver(threads: StageThreads, runners: DeviceRunner[]): KindRouter {
    return new KindRouter(this.kinds, threads, runners, {
      started: (jobId) => this.runs.markStarted(jobId),
      partitionDone: (jobId, partition, output) => {
        // (First: an output the journal cannot hold fails its partition before anyone sees it.)
        this.runs.partitionDone(jobId, partition, output);
        this.onPartitionOutput?.(jobId, partition, output);
      },
      observe: (stage, kind, ms) => this.metrics.observeStage(stage, kind, ms),
      batch: (device, items) => this.metrics.observeBatch(device, items),
      prepareBatch: (kind, items) => this.metrics.observePrepareBatch(kind, items),
    }, (kind) => this.handoffs[this.devices.findIndex((d) => d.name === kind.device)]);
  }

  /** What a history sample is computed from: cumulative counts and the levels now. */
  private reading(): HistoryReading {
    const kinds = this.ended.reading(this.partitionsByKind());
    return historyReading(this.runtime.engine, this.runtime.workerBusyMs(), kinds, waitingTarget(this.pacerState(), this.config.engine.targetWaiting), this.pool.stats().idleBytes);
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
    return this.watch.watch(id, listener);
  }

  /** The events after `lastEventId` for a reconnecting client, or the gap it must know of. */
  replay(lastEventId: string): Replay<ServiceEvent> {
    return this.eventLog.since(lastEventId);
  }

  /** Jobs ended since this server started, by kind and state (every loaded kind, 0 included). */
  endedCounts(): { kind: string; state: 'done' | 'failed' | 'cancelled'; count: number }[] {
    return this.ended.counts();
  }

  /**
   * Opens the journal in `config.dataDir` and resumes its unfinished jobs, running the given kinds (see loadKinds).
   * `endsRecordedElsewhere`: a job's end is made durable elsewhere too (a cluster node records it
   * in Redis), so an end a full journal cannot take is shown and announced from memory at once —
   * the cluster needs it to record the result — instead of keeping the job unfinished until it lands.
   */
  static open(config: ServeConfig, kinds: ReadonlyMap<string, LoadedKind>, options: { endsRecordedElsewhere?: boolean; resume?: boolean; log?: ServerLog } = {}): Service {
    const journal = Journal.open(config.dataDir, config.journal ? { maxBytes: config.journal.maxBytes } : {});
    // (The journal's lock is this server's now: a copy in its data dir is one an earlier server died making or sending.)
    removeStaleBackups(config.dataDir, options.log ?? stderrLog);
    let service: Service;
    try {
      service = new Service(config, journal, kinds, options.endsRecordedElsewhere ?? false, options.log ?? stderrLog);
    } catch (e) {
      journal.close();
      throw e;
    }
    ignoreFull(() => journal.purgeFinished(config.server.resultTtlS * 1000));
    if (options.resume !== false) service.resumeUnfinished();
    return service;
  }

  /**
   * Starts again the jobs the journal holds unfinished (Service.open does, unless told `resume:
   * false`: once the devices are checked, say). Those this server cannot run are left as they are
   * — on hold, not failed: nothing accepted is lost to a start's configuration — for a start that
   * can: of a kind it has not loaded (a restart that forgot `--kind` failed them for good), whose
   * input another version of its module than the one that accepted it refuses, or whose
   * partitions each need more than the whole memory budget (one lowered since: they failed
   * E_OVERSIZE at once, and a budget put back did not bring them back). {@link waitingNote} says so,
   * and their views (`onHold`).
   */
  resumeUnfinished(): void {
    const unloaded = new Map<string, number>();
    const changed = new Map<string, number>();
    let refused = 0;
    let over = 0;
    let most = 0;
    const budget = this.runtime.engine.budget.totalBytes;
    const resumed: string[] = [];
    for (const job of this.journal.unfinished()) {
      const kind = this.kinds.get(job.kind);
      if (!kind) {
        unloaded.set(job.kind, (unloaded.get(job.kind) ?? 0) + 1);
        this.held.set(job.id, `its kind ${JSON.stringify(job.kind)} is not loaded on this server: it resumes on a start with its module (--kind FILE, or [kinds.${job.kind}] in the config); cancel it to end it`);
        continue;
      }
      // Accepted under another version of the module: its input as this one reads it — the defaults
      // of fields new since filled in, or refused (held: its prepare would run on an input it
      // refuses). (Only then: the stored input has the defaults filled in, which a schema with
      // if/then or not beside its defaults may refuse though it took the input as sent.)
      let input = job.input;
      const otherVersion = job.moduleHash !== null && job.moduleHash !== this.moduleHashes.get(job.kind);
      if (otherVersion) {
        const checked = kind.validate(job.input);
        if (!checked.ok) {
          refused++;
          this.held.set(job.id, `its input does not pass kind ${JSON.stringify(job.kind)}'s module as loaded now, a version other than the one that accepted it (${checked.issues.map((i) => `${i.path}: ${i.message}`).join('; ')}): it resumes on a start with a version of the module that takes it; cancel it to end it`);
          continue;
        }
        input = checked.input;
      }
      const need = partitionNeed(kind, input);
      if (need > budget) {
        over++;
        most = Math.max(most, need);
        this.held.set(job.id, `each of its partitions needs ${need} bytes, more than the whole memory budget, engine.budgetBytes = ${budget}: it resumes on a start with a budget of at least ${need}; cancel it to end it`);
        continue;
      }
      if (otherVersion) changed.set(job.kind, (changed.get(job.kind) ?? 0) + 1);
      this.runs.resume(input === job.input ? job : { ...job, input });
      resumed.push(job.id);
    }
    ignoreFull(() => this.journal.markResumed(resumed));
    this.resumed += resumed.length;
    const n = [...unloaded.values()].reduce((a, b) => a + b, 0);
    const notes = [
      ...(n === 0 ? [] : [`${n} unfinished job${n === 1 ? ' is' : 's are'} of ${unloaded.size === 1 ? 'a kind' : 'kinds'} this server has not loaded (${[...unloaded].map(([k, c]) => `${k}: ${c}`).join(', ')}): left as ${n === 1 ? 'it is' : 'they are'}, to resume once the server starts with ${unloaded.size === 1 ? 'its module' : 'their modules'} (--kind FILE, or [kinds.NAME] in the config); cancel ${n === 1 ? 'it' : 'them'} to end ${n === 1 ? 'it' : 'them'}`]),
      ...(refused === 0 ? [] : [`${refused} unfinished job${refused === 1 ? '' : 's'} accepted under another version of ${refused === 1 ? 'its' : 'their'} kind's module ha${refused === 1 ? 's' : 've'} an input the version loaded now refuses (its view says why): left as ${refused === 1 ? 'it is' : 'they are'}, to resume on a start with a version of the module that takes ${refused === 1 ? 'it' : 'them'}; cancel ${refused === 1 ? 'it' : 'them'} to end ${refused === 1 ? 'it' : 'them'}`]),
      ...[...changed].map(([k, c]) => `${c} unfinished job${c === 1 ? ' was' : 's were'} accepted under another version of kind ${k}'s module: ${c === 1 ? 'it resumes' : 'they resume'} with this one, the partitions done before keeping the outputs of the old (cancel and resubmit ${c === 1 ? 'it' : 'them'} to run ${c === 1 ? 'it' : 'them'} whole on this one)`),
      ...(over === 0 ? [] : [`${over} unfinished job${over === 1 ? '' : 's'} need${over === 1 ? 's' : ''} more memory per partition than the whole budget, engine.budgetBytes = ${budget} (up to ${most} bytes): left as ${over === 1 ? 'it is' : 'they are'}, to resume once the server starts with a budget of at least ${most}; cancel ${over === 1 ? 'it' : 'them'} to end ${over === 1 ? 'it' : 'them'}`]),
    ];
    this.waiting = notes.length ? notes.join('; ') : undefined;
  }

  /** Whether this start made its journal (none was in the data dir): the start line says so — a mistyped --data started afresh without a word. */
  get newJournal(): boolean {
    return this.journal.created;
  }

  /** The unfinished jobs this server leaves on hold, for the start line (undefined: none). */
  get waitingNote(): string | undefined {
    return this.waiting;
  }

  /**
   * The devices no kind runs on, said at start: their workers would stay idle without a word (a
   * user pasted `stoker plan`'s `[devices.gpu] workers = 2` where no kind said `device = "gpu"`:
   * a second, idle device started, and the workers meant for the kind never reached it).
   */
  get idleDevicesNote(): string | undefined {
    const idle = this.devices.filter((d) => ![...this.kinds.values()].some((k) => k.device === d.name));
    if (idle.length === 0) return undefined;
    const named = idle.map((d) => (d.name === 'default' ? '[device]' : `[devices.${d.name}]`));
    return `no kind runs on ${named.join(', ')} (${idle.map((d) => `${d.config.workers} worker${d.config.workers === 1 ? '' : 's'}`).join(', ')}): ${idle.length === 1 ? 'it stays' : 'they stay'} idle — name ${idle.length === 1 ? 'it' : 'one'} in a kind (\`[kinds.NAME] device = "${idle[0]?.name ?? ''}"\`), or leave ${idle.length === 1 ? 'it' : 'them'} out`;
  }

  /** The kinds this service runs, as loaded (module URLs, validators). */
  loadedKinds(): ReadonlyMap<string, LoadedKind> {
    return this.kinds;
  }

  /** The kinds this service runs. */
  kindList(): KindView[] {
    return [...this.kinds.values()].map(kindView);
  }

  /**
   * Validates, journals and starts a job; resolves once the job is durable. While the engine
   * has work, submissions are let in at a pace that leaves it the event loop (AdmissionGate);
   * those that arrive together are journaled in one group commit. Same id and body: the same job.
   */
  submit(raw: unknown): Promise<Submitted> {
    return this.intake.submit(raw);
  }

  /**
   * {@link submit} in one synchronous step, its own commit: durable when this returns.
   * `recorded`: outputs of partitions finished elsewhere (a cluster job another node began):
   * only the other partitions run, and the kind's finish gets these outputs too.
   */
  submitNow(raw: unknown, recorded: ReadonlyMap<number, unknown> = new Map()): Submitted {
    return this.intake.submitNow(raw, recorded);
  }

  /**
   * {@link submitNow} of a job another node accepted (cluster mode): its record as that node
   * journaled it, not a body to parse again. This node's own module for the kind still checks the
   * input and the partitions it derives from it (the accepting node may not run the kind, or ran
   * another version of it), as a submission here would.
   */
  submitRecord(record: JournalJobInput, recorded: ReadonlyMap<number, unknown> = new Map()): Submitted {
    return this.intake.submitRecord(record, recorded);
  }

  /** A journaled submission: a new job starts (unless shutdown began meanwhile: then it resumes on the next start). */
  private admitted(inserted: { job: JournalJob; created: boolean }, recorded: ReadonlyMap<number, unknown>): Submitted {
    const j = inserted.job;
    if (inserted.created) {
      this.emit({ type: 'job.submitted', id: j.id, kind: j.kind, partitions: j.partitions, priority: j.priority, deadline: j.deadline === null ? null : new Date(j.deadline).toISOString() });
      if (!this.closing) this.runs.startWith(j, new Map([...recorded].filter(([p]) => Number.isInteger(p) && p >= 0 && p < j.partitions)));
    }
    return { job: this.view(j, LIST_STATES_MAX), created: inserted.created };
  }

  /**
   * Validates a submission exactly as {@link submit} does (400 with every field's problem): the
   * job's record, with a generated id when none was given. `elsewhere`: the kinds other nodes run (cluster mode).
   */
  parseSubmission(raw: unknown, elsewhere?: OtherKinds): { record: JournalJobInput; explicitId: boolean } {
    return parseSubmission(raw, this.kinds, elsewhere);
  }

  /**
   * The job, or undefined when unknown (or purged); `page`: which partitions' states to give
   * (default the first 100,000). A result over VIEW_RESULT_MAX_BYTES is left out (read only by
   * its size) unless `full`.
   */
  job(id: string, page?: StatesPage, full: ResultForm = false): JobView | undefined {
    const stored = full ? this.journal.get(id) : this.journal.view(id);
    // (A result in pieces, read at once: wait() reads it a piece per turn.)
    const j = stored && this.runs.overlay(full && stored.resultBlob !== undefined ? withResult(stored, this.journal.readBlobNow(stored.resultBlob)) : stored);
    return j && this.view(j, Infinity, page, full);
  }

  /** {@link job} with its result whole, one journaled in pieces read a piece per turn of the event loop (a 100 MiB one read at once held it ~0.5 s). */
  private async jobWhole(id: string, form: ResultForm): Promise<JobView | undefined> {
    const stored = this.journal.get(id);
    if (stored?.resultBlob === undefined) return this.job(id, undefined, form);
    if (form === 'raw') {
      // (Bytes as they are: sent piece by piece, read from the journal as they go.)
      const blob = stored.resultBlob;
      const out: JobView = { ...this.view(this.runs.overlay(stored), Infinity, undefined, false), result: new ResultPieces(stored.resultBytes ?? 0, () => this.journal.blobPieces(blob)), resultEncoding: 'base64' };
      delete out.resultOmittedBytes;
      return out;
    }
    let bytes: Uint8Array;
    try {
      bytes = await this.journal.readBlob(stored.resultBlob);
    } catch (e) {
      // (Purged meanwhile: as the journal has it now.)
      if (isJournalError(e, 'E_JOURNAL_UNKNOWN_JOB')) return this.job(id, undefined, form);
      throw e;
    }
    return this.view(this.runs.overlay(withResult(stored, bytes)), Infinity, undefined, form);
  }

  /**
   * Recently submitted jobs, newest first (at most `limit`; only those in `states` when given),
   * each in the state its view shows. While a full journal keeps some starts (or, on a cluster
   * node, ends) out, a row's state is not its view's: such rows are left out where their views
   * are not asked for, and those whose views are are read besides (a started job was listed under
   * `state=queued`, its own view running). The rows read besides take their place by submission
   * time (the journal orders by insertion: the same but for jobs submitted in one millisecond).
   */
  jobs(options: { limit?: number; states?: readonly JobState[]; before?: string } = {}): JobView[] {
    const { states } = options;
    const shown = (j: JournalJob) => this.view(j, LIST_STATES_MAX);
    const kept = this.runs.startsUnrecorded;
    const ended = this.runs.endsShown();
    // A page from the job before which the last page ended (a list was the newest 1,000 at most: an audit could not read further).
    let beforeSeq: number | undefined;
    if (options.before !== undefined) {
      beforeSeq = this.journal.seqOf(options.before);
      if (beforeSeq === undefined) {
        throw new ServiceError(400, 'bad-query', 'Bad query', `before: no job ${quoted(options.before)} here (purged, or never submitted): give the id of the last job of the page before, as listed`);
      }
    }
    const paged = { ...options, ...(beforeSeq === undefined ? {} : { beforeSeq }) };
    if (states === undefined || (kept.size === 0 && ended.length === 0)) return this.journal.list(paged).map((j) => shown(this.runs.overlay(j)));
    const limit = options.limit ?? 50;
    const want = new Set(states);
    // Kept starts: queued rows, running views — apart where both or neither are asked for. Kept ends: read by their views.
    const moved = want.has('queued') !== want.has('running') ? [...kept.keys()] : [];
    // (A start still in the group commit reads running too: its row is left out where its view is not asked for.)
    const rows = this.journal.list({ ...paged, limit, except: [...moved, ...ended] }).map((j) => this.runs.overlay(j)).filter((v) => want.has(v.state));
    const onPage = (id: string) => beforeSeq === undefined || (this.journal.seqOf(id) ?? Infinity) < beforeSeq;
    const newest = want.has('running') ? [...kept].filter(([id]) => onPage(id)).sort((a, b) => b[1].submittedAt - a[1].submittedAt).slice(0, limit).map(([id]) => id) : [];
    const listed = new Set(rows.map((j) => j.id));
    const more = [...new Set([...newest, ...ended.filter(onPage)])].flatMap((id) => {
      const j = listed.has(id) ? undefined : this.journal.view(id);
      const v = j && this.runs.overlay(j);
      return v && want.has(v.state) ? [v] : [];
    });
    return (more.length === 0 ? rows : [...rows, ...more].sort((a, b) => b.submittedAt - a.submittedAt).slice(0, limit)).map(shown);
  }

  /**
   * Jobs by state as their views show them: the journal's counts, with the starts a full journal
   * kept out counted running (see {@link jobs}; the ends a cluster node keeps out are not).
   */
  private stateCounts(): Record<JobState, number> {
    const counts = this.journal.counts();
    const n = this.runs.startsUnrecorded.size;
    return n === 0 ? counts : { ...counts, queued: counts.queued - n, running: counts.running + n };
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
      spans: spans.map((sp) => ({ ...sp, partition: this.runs.jobPartition(sp.jobId, sp.partition), start: epoch(sp.start), end: sp.end === null ? null : epoch(sp.end) })),
      samples: this.timeline.samples(t - sinceMs).map((x) => ({ ...x, t: epoch(x.t) })),
    };
  }

  /** The last `sinceMs` as Chrome trace event JSON (opens in Perfetto and chrome://tracing). */
  /**
   * A consistent copy of the journal, made now in the data dir (`stoker.db.backup-…`, removed by
   * the caller once sent): a journal to start a server on. One at a time.
   * @throws {ServiceError} 409 while another is being made, 507 where the disk has no room for it.
   */
  async backup(): Promise<string> {
    if (this.backingUp) throw new ServiceError(409, 'backup-running', 'A backup is being made', 'another backup of this journal is being made: retry once it is done', { retryAfterS: this.config.server.retryAfterS });
    this.backingUp = true;
    const file = path.join(this.config.dataDir, `${BACKUP_PREFIX}${Date.now()}-${process.pid}`);
    try {
      await this.journal.backup(file);
      return file;
    } catch (e) {
      if (isJournalError(e, 'E_JOURNAL_FULL')) throw new ServiceError(507, 'insufficient-storage', 'Insufficient storage', e.message, { retryAfterS: this.config.server.retryAfterS });
      throw e;
    } finally {
      this.backingUp = false;
    }
  }

  private backingUp = false;

  trace(sinceMs: number): ChromeTrace {
    const v = this.timelineView(sinceMs);
    // The jobs submitted in the window, by their own partition numbering's size (what a plan fits arrivals from).
    const jobs = this.timeline.jobs(this.runtime.now() - sinceMs).map((j) => ({ ...j, t: performance.timeOrigin + j.t }));
    return toChromeTrace({
      lanes: v.lanes,
      spans: v.spans,
      samples: v.samples,
      jobs,
      title: 'stoker serve',
      now: v.now,
      budgetBytes: this.config.engine.budgetBytes,
      maxPreparing: this.runtime.engine.snapshot.maxPreparing,
      targetWaiting: this.config.engine.targetWaiting,
      deviceNames: this.devices.map((d) => d.name),
      // (Batch sizes and waits are settings: a plan of a batched run reads them here, not from what it saw.)
      deviceBatches: this.devices.map(({ config: d }) => (d.batch ? { maxItems: d.batch.maxItems, maxWaitMs: d.batch.maxWaitMs } : null)),
      prepareBatches: Object.fromEntries([...this.kinds.values()].flatMap((k) => (k.prepareBatch ? [[k.name, { maxItems: k.prepareBatch.maxItems, maxWaitMs: k.prepareBatch.maxWaitMs }]] : []))),
    });
  }

  /** Per device, whether no connection can be made to it now (an HTTP endpoint): for /metrics. */
  devicesUnreachable(): boolean[] {
    return this.runners.map((r) => r.unreachable?.() !== undefined);
  }

  /** Why this server should not be sent new jobs now (GET /readyz): none when it takes them. */
  notReady(): string[] {
    // (Public: no URL, which /v1/status gives.)
    const unreachable = this.runners.flatMap((r, d) => {
      const u = r.unreachable?.();
      return u ? [`device ${this.devices[d]?.name ?? d}: its endpoint is unreachable (${u.code}) since ${u.since}`] : [];
    });
    return [...(this.closing ? ['shutting down'] : []), ...(this.journal.full ? [`${this.journal.fullReason()}: a submission it cannot write gets 507`] : []), ...unreachable];
  }

  /** Resolves with the job, its result whole, once it has ended, or after `waitMs` with its state then; `raw`: a bytes result as a Uint8Array, not base64 (see ResultForm). */
  async wait(id: string, waitMs: number, raw = false): Promise<JobView | undefined> {
    const form: ResultForm = raw ? 'raw' : true;
    const first = await this.jobWhole(id, form);
    // (On hold: nothing here will end it, and a client that long-polls for its end learns why at once.)
    if (!first || isFinal(first.state) || waitMs <= 0 || this.closing || first.onHold !== undefined) return first;
    await this.waiters.wait(id, waitMs);
    return this.jobWhole(id, form);
  }

  /** Cancels a job: withdraws its partitions wherever they are. A finished job cannot be cancelled (409). */
  cancel(id: string): JobView {
    const j = this.runs.stored(id);
    if (!j) throw notFound(id);
    if (j.state === 'cancelled') return this.view(j);
    if (isFinal(j.state)) throw jobFinished(id, j.state);
    this.runtime.cancel(id);
    this.held.delete(id);
    // The runtime answers asynchronously; the journal records the end now so the reply is final.
    this.runs.end(id, { state: 'cancelled', code: 'E_CANCELLED', reason: 'cancelled on request' });
    this.commits.flush();
    return this.view(this.runs.stored(id) as JournalJob);
  }

  /** The whole engine: jobs, partitions per kind and stage, workers, pacer, budget, pool. */
  status(): StatusView {
    const engine = this.runtime.engine;
    return buildStatus({
      snapshot: engine.snapshot,
      workerBusyMs: this.runtime.workerBusyMs(),
      workerStates: this.workerStates(),
      jobCounts: this.stateCounts(),
      onHold: this.held.size,
      byKind: this.partitionsByKind(),
      uptimeS: (Date.now() - this.startedAt) / 1000,
      closing: this.closing,
      config: this.config,
      devices: this.devices,
      unreachable: this.runners.map((r, d) => {
        const u = r.unreachable?.();
        const http = this.devices[d]?.config.http;
        return u && http ? `${redactUrl(http.url)} is unreachable (${u.code}) since ${u.since}` : undefined;
      }),
      jobPartition: (id, p) => this.runs.jobPartition(id, p),
      pacer: { name: engine.pacer.name, ...this.runtime.status().pacer },
      budget: { held: this.pool.stats().idleBytes, peak: engine.budget.peak },
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
    // (Through the runtime: one that failed does not ask its pacer again.)
    return this.runtime.status().pacer;
  }

  /** Jobs by kind and state (for metrics), as {@link stateCounts} counts them. */
  jobCounts(): { kind: string; state: JobState; count: number }[] {
    const counts = this.journal.countsByKind();
    const started = new Map<string, number>();
    for (const { kind } of this.runs.startsUnrecorded.values()) started.set(kind, (started.get(kind) ?? 0) + 1);
    for (const c of counts) {
      const n = started.get(c.kind) ?? 0;
      if (c.state === 'queued') c.count -= n;
      else if (c.state === 'running') c.count += n;
    }
    return counts;
  }

  /** Time the budget has held the queue back since the start, ms (for metrics). */
  budgetBlockedMs(): number {
    return this.budgetBlocked.totalMs(this.runtime.now());
  }

  /** Unfinished jobs held at the start, not running (for metrics). */
  jobsOnHold(): number {
    return this.held.size;
  }

  /** The journal file's bytes in use and free (for metrics). */
  journalSizes(): { used: number; free: number } {
    return this.journal.sizes();
  }

  /** Journal writes refused for a full journal since the start (for metrics). */
  journalFullRefusals(): number {
    return this.journal.fullRefusals;
  }

  /** After close(): the partitions in flight when server.shutdownTimeoutS ran out, withdrawn to run again on the next start. */
  get cutShort(): number {
    return this.runtime.cutShort;
  }

  /** Why they were (see Runtime.cutShortBecause). */
  get cutShortBecause(): 'timeout' | 'unreachable' | undefined {
    return this.runtime.cutShortBecause;
  }

  /** The engine counters (for metrics). */
  get counters() {
    return this.runtime.engine.snapshot;
  }

  /**
   * Waits (up to `timeoutMs`: a device slow to start is not held against it) until each process
   * device has a process ready; one whose processes all keep ending before they are ready (a
   * wrong command, args or cwd: they end at once) is a ConfigError naming its command — at
   * start, not at the first job's first step.
   */
  async devicesStarted(timeoutMs = 5000): Promise<void> {
    const why = await Promise.all(this.runners.map((r) => (r instanceof ProcessDevice ? r.started(timeoutMs) : undefined)));
    const issues = this.devices.flatMap(({ name }, i) => {
      const w = why[i];
      if (w === undefined) return [];
      // Text where the ready frame was due: the program printed to stdout before the helper's serve() took it over.
      const fix = /not stoker frames/.test(w) ? 'print nothing to stdout before calling serve() (print to stderr, or after serve() starts: the helpers send it to stderr)' : 'check the command, args and cwd';
      // (Ended by stoker for want of its ready frame, not by itself: a trial's short readyTimeoutS read as a wrong command.)
      if (/\(readyTimeoutS\)/.test(w)) {
        return [{ source: 'configuration', path: `${deviceField(name)}.process.readyTimeoutS`, message: `its processes do not say ready in time, and are stopped (${w}): raise readyTimeoutS if the program takes longer to load, or check that it calls serve() (the helpers' serve() says ready)` }];
      }
      return [{ source: 'configuration', path: `${deviceField(name)}.process.command`, message: `its processes end before they are ready (${w}): ${fix}` }];
    });
    if (issues.length > 0) throw new ConfigError(issues);
  }

  /**
   * Shutdown: accepts nothing more, lets the partitions in flight finish for up to `timeoutMs`
   * (their outputs are journaled), leaves every unfinished job in the journal to resume on the
   * next start, answers every waiter, closes the threads and the journal.
   */
  async close(timeoutMs = this.config.server.shutdownTimeoutS * 1000, beforeJournalCloses?: () => Promise<void>): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    this.intake.close();
    clearInterval(this.priorsTimer);
    clearInterval(this.purgeTimer);
    clearInterval(this.pacerTimer);
    clearInterval(this.historyTimer);
    this.watch.close();
    await this.runtime.close(timeoutMs, { drain: true });
    await this.runs.settled();
    this.commits.flush();
    this.runs.landPending();
    this.waiters.wakeAll();
    this.events.emit('close');
    for (const h of this.handoffs) if (h) fs.rmSync(h.dir, { recursive: true, force: true });
    await beforeJournalCloses?.();
    this.memory.save(this.runtime.engine);
    this.commits.flush();
    this.runs.closeJournal();
  }

  /** A job's end, durable (or recorded elsewhere too): counted, sent to its watchers and its waiters, said. */
  private announceEnd(job: JournalJob, finishedAt: number, outcome: JournalOutcome): void {
    const seconds = (finishedAt - job.submittedAt) / 1000;
    this.ended.add(job.kind, outcome.state, seconds);
    this.metrics.jobEnded(job.kind, outcome.state, job.priority, seconds, outcome.state === 'done' ? undefined : outcome.code);
    this.watch.progress(job.id);
    this.emit(outcome.state === 'done' ? { type: 'job.done', id: job.id } : { type: `job.${outcome.state}`, id: job.id, code: outcome.code, reason: outcome.reason });
    this.waiters.wake(job.id);
    this.intake.ended();
  }

  private emit(e: Omit<ServiceEvent, 'time'>): void {
    // (Not kept for reconnecting clients: the pacer's, every second, and step failures, which a
    // failing device sends by the thousand — they would push out the job events; a metric counts them.)
    const logged = this.eventLog.add({ time: new Date().toISOString(), ...e } as ServiceEvent, e.type === 'pacer' || e.type === 'step.failed');
    this.events.emit('event', logged.event, logged.eventId);
  }

  /** The API's view of a job; `maxStates`: the most partitions whose states it lists (more: counts only). */
  private view(j: JournalJob, maxStates?: number, page?: StatesPage, full: ResultForm = false): JobView {
    // (As the journal will have it: started here before its write, a job read running with startedAt null — a submit's 202 among them.)
    const v = localJobView(this.runs.overlay(j), this.runtime.engine, this.runs.live(j.id), maxStates, page, this.runs.doneUnrecorded(j.id), full);
    const hold = this.held.get(j.id);
    return hold === undefined || isFinal(v.state) ? v : { ...v, onHold: hold };
  }
}

/** The larger of a partition's preparation and device bytes for this input (NaN where the kind's memory() throws: its run fails it, naming why). */
function partitionNeed(kind: LoadedKind, input: unknown): number {
  try {
    const m = kind.memory(input);
    return Math.max(m.prepareBytes, m.deviceBytes);
  } catch {
    return NaN;
  }
}

/** A kind module file's content hash, or undefined where it cannot be read. */
function fileHash(url: string): string | undefined {
  try {
    return moduleHash(url);
  } catch {
    return undefined;
  }
}

/** What a backup being made or sent is called in the data dir (GET /v1/backup), its time and pid after. */
const BACKUP_PREFIX = 'stoker.db.backup-';

/**
 * Removes the copies of the journal an earlier server left in the data dir, stopped while it made
 * or sent one (each as large as the journal, and nothing else would remove it), saying so.
 */
function removeStaleBackups(dataDir: string, log: ServerLog): void {
  let names: string[];
  try {
    names = fs.readdirSync(dataDir);
  } catch {
    return;
  }
  for (const name of names) {
    // (With its rollback journal: SQLite's backup writes the copy with one beside it, -journal, left by a kill.)
    if (!name.startsWith(BACKUP_PREFIX) || !/^\d+-\d+(-journal)?$/.test(name.slice(BACKUP_PREFIX.length))) continue;
    try {
      fs.rmSync(path.join(dataDir, name), { force: true });
      log(`stoker serve: removed ${name} from the data dir: ${name.endsWith('-journal') ? "the rollback journal of a copy of the journal" : 'a copy of the journal'} an earlier server was making or sending (GET /v1/backup) when it stopped`);
    } catch (e) {
      log(`stoker serve: could not remove ${name}, a copy of the journal an earlier server left in the data dir: ${(e as Error).message} — remove it by hand`);
    }
  }
}

/** A journaled job with its result in pieces read back whole. */
function withResult(j: JournalJob, result: Uint8Array): JournalJob {
  const whole: JournalJob = { ...j, result };
  delete whole.resultBlob;
  return whole;
}

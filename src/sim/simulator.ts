import { Engine, PRIORITIES, type Priority, type TimelineRecorder, type Command, type EngineEvent, type ItemView, type Pacer, type PacerOptions, type ReadonlySnapshot } from '../core/index.js';
import { buildDevices, capacityOf, DeviceFluid, deviceGroups, type SimDevice, type SimWorker } from './devices.js';
import { EventQueue, PREP, PREP_BATCH, type SimEvent } from './events.js';
import { percentileOf, Recorder, type Meters, type Metrics, type Series } from './metrics.js';
import { PrepFluid, type SimItem } from './preparations.js';
import { Rng } from './random.js';
import { deviceWorkers, sampleMs, type Dist, type Kind, type Scenario, type ScenarioEvent } from './scenario.js';
import { checkJobRefs, meanPrepareMs, meanWorkPerItem, planArrivals, steadyWindow, type PlannedJob } from './window.js';

export interface SimulateOptions {
  /** Creates the pacer; it receives the scenario's pacer options with targetWaiting filled in. */
  pacer: (options: PacerOptions) => Pacer;
  /** Overrides the scenario's seed. */
  seed?: number;
  /** Records every engine step (spans per preparation slot and device worker, level samples) in virtual time, ms. */
  timeline?: TimelineRecorder;
  /** Called after every engine step with its event and commands (virtual time is `event.time`): to drive meters as the runtime does. */
  onStep?: (event: EngineEvent, commands: readonly Command[], snapshot: ReadonlySnapshot) => void;
}

export interface JobFailure {
  job: string;
  state: 'failed' | 'cancelled';
  code: string;
  reason: string;
}

export interface SimResult {
  scenario: string;
  pacer: string;
  seed: number;
  /** The steady window, ms. */
  window: { fromMs: number; toMs: number };
  /** Engine events processed. */
  events: number;
  /** Items completed on devices, whole run. */
  completions: number;
  /** Simulated time at the end, ms (its last event: a scenario event may come after the last job ends). */
  simulatedMs: number;
  /** When the last job ended, ms (0: none did): the span of the work, where simulatedMs may run on through scenario events. */
  lastEndMs: number;
  metrics: Metrics;
  /** Jobs that failed or were cancelled, with their reasons. */
  failures: JobFailure[];
  /** Jobs submitted, and jobs still unfinished when the run ended (0 unless the horizon cut it short or it stalled: endedBy). */
  jobsSubmitted: number;
  unfinishedJobs: number;
  /**
   * Why the run ended: every job ended (`done`), the horizon came first (`horizon`), or nothing
   * more could happen with jobs unfinished (`stalled`: the pacer dispatched nothing more, or no
   * live device worker runs what was left).
   */
  endedBy: 'done' | 'horizon' | 'stalled';
  /** Where the pacer stalled the run (endedBy `stalled`) by putting off every dispatch for an hour of simulated time with work queued and nothing in flight: what it did. */
  stall?: string;
  /**
   * Per kind that arrives (in the scenario's order), its jobs done and their latency, submit to end (the
   * metrics' jobLatency*, kind by kind: a small kind held behind a heavy one shows here).
   */
  byKind: KindLatency[];
  /** The same per priority class that arrives (in the order critical, high, normal, low). */
  byPriority: PriorityLatency[];
  /** The first preparation start of each job, ms (for the priority scenario). */
  firstStartMs: Record<string, number>;
  series: Series;
}

/** Jobs done in a run and their latency percentiles, ms (null: none done). */
interface Latency {
  jobsDone: number;
  jobLatencyP50Ms: number | null;
  jobLatencyP99Ms: number | null;
}

/** One kind's jobs done in a run and their latency percentiles. */
export interface KindLatency extends Latency {
  kind: string;
}

/** One priority class's jobs done in a run and their latency percentiles. */
export interface PriorityLatency extends Latency {
  priority: Priority;
}

/**
 * How long, and over how many of its own wakes in a row, a pacer may put off every dispatch with
 * work queued, nothing in flight and nothing more to arrive before the run ends as stalled: an
 * hour of simulated time and a thousand wakes (a pacer that answers `now + delay` wakes 36,000
 * times an hour at 100 ms; one waiting for a batch or a long interval wakes once or twice).
 */
const STALL_MS = 3_600_000;
const STALL_WAKES = 1000;

/** Runs one scenario with one pacer in virtual time. Same scenario, seed and pacer → same result. */
export function simulate(s: Scenario, options: SimulateOptions): SimResult {
  return new Simulation(s, options).run();
}

/** Latency percentiles from done jobs' latencies (as the metrics take theirs). */
function latencyOf(ms: number[]): Latency {
  const sorted = Float64Array.from(ms).sort();
  return { jobsDone: sorted.length, jobLatencyP50Ms: percentileOf(sorted, 0.5), jobLatencyP99Ms: percentileOf(sorted, 0.99) };
}

/** The first preparation start of each job id (the earliest of its planned jobs, should ids repeat), from the starts by job index (NaN: none). */
function firstStarts(jobs: readonly PlannedJob[], startedAt: Float64Array): Record<string, number> {
  const out: Record<string, number> = {};
  jobs.forEach((job, i) => {
    const t = startedAt[i] as number;
    const id = job.spec.id;
    if (!Number.isNaN(t) && !(t >= (out[id] ?? Infinity))) out[id] = t;
  });
  return out;
}

/** A preparation batch in flight: the items still in it, those that will fail, and a carrier holding its event and fluid work (its first item's kind and stream). */
interface PrepBatch {
  carrier: SimItem;
  live: number[];
  failed: number[];
}

/**
 * One run: the engine driven in virtual time by the scenario's arrivals and events, its commands
 * carried out by simulated preparations and devices (each a fluid: see PrepFluid, DeviceFluid).
 */
class Simulation {
  private readonly seed: number;
  private readonly pacer: Pacer;
  private readonly engine: Engine;
  private readonly kindList: Kind[];
  private readonly kindIndex: Map<string, number>;
  private readonly jobs: PlannedJob[];
  /** Each kind's done jobs' latencies, ms (the scenario's kinds that arrive, in its order). */
  private readonly kindLatencies: Map<string, number[]>;
  private readonly priorityLatencies: Map<Priority, number[]>;
  private readonly window: { fromMs: number; toMs: number };
  private readonly recorder: Recorder;
  private readonly faults = new Map<string, { stage: 'prepare' | 'device'; partition: number }[]>();
  private readonly scenarioEvents: { e: ScenarioEvent; i: number }[];
  private readonly events = new EventQueue();
  private readonly devices: SimDevice[];
  private readonly fleet: DeviceFluid;
  private readonly prep: PrepFluid;
  /**
   * Items by engine item id (dense: ids are given in arrival order), made when one first starts
   * preparing (a queued partition holds no state, nor its random stream: a pacer that keeps a
   * long backlog kept tens of thousands of them alive, and the collector busy); undefined until
   * then, and once gone. Made at its full length up front: grown by a push per partition, it cost
   * more than a tenth of a day's run.
   */
  private readonly items: (SimItem | undefined)[];
  /** By item id: its planned job's index (set as its job arrives). */
  private readonly itemJob: Int32Array;
  private readonly prepBatches = new Map<number, PrepBatch>();
  private readonly failures: JobFailure[] = [];
  /** By planned job index: when a partition of it first started preparing (NaN: none yet). */
  private readonly startedAt: Float64Array;
  private readonly horizon: number;
  private nextJob = 0;
  private nextScenario = 0;
  /** The engine's timer: one pending tick, replaced by every wakeAt command. */
  private wakeAt = Infinity;
  private now = 0;
  private steps = 0;
  private lastEndMs = 0;
  /** The run ended with an event still to come after the horizon. */
  private pastHorizon = false;
  /**
   * The pacer's stall check: the wakes in a row with work queued, nothing in flight and nothing
   * more to arrive or happen (no other event between them), and when the first of them was.
   */
  private quietWakes = 0;
  private quietSince = 0;
  /** Why the pacer stalled the run (see SimResult.stall). */
  private stall: string | undefined;
  /** The capacity now and the work done, read by the recorder at every step. */
  private readonly meters: Meters = { capacity: 0, work: 0 };
  private nextItemId = 0;
  // The three most frequent events reuse one object each (the engine keeps no event past apply).
  private readonly preparedEvent = { type: 'prepared' as const, time: 0, item: 0, attempt: 0 };
  private readonly doneEvent = { type: 'deviceDone' as const, time: 0, item: 0, attempt: 0, busyMs: 0 };
  private readonly tickEvent = { type: 'tick' as const, time: 0 };

  private readonly timeline: TimelineRecorder | undefined;
  private readonly onStep: SimulateOptions['onStep'];

  constructor(
    private readonly s: Scenario,
    options: SimulateOptions,
  ) {
    this.timeline = options.timeline;
    this.onStep = options.onStep;
    this.seed = options.seed ?? s.seed;
    this.pacer = options.pacer({ ...s.pacerOptions, targetWaiting: s.targetWaiting });
    const groups = deviceGroups(s);
    this.kindIndex = new Map(Object.keys(s.kinds).map((name, i) => [name, i]));
    this.kindList = Object.values(s.kinds);
    this.devices = buildDevices(s);
    this.engine = new Engine({
      devices: deviceWorkers(s).map((workers, d) => {
        const g = groups[d] as Scenario['devices'][number];
        return { workers, ...(g.kinds ? { kinds: g.kinds } : {}), ...(g.batch ? { batch: { maxItems: g.batch.maxItems, maxWaitMs: g.batch.maxWaitS * 1000 } } : {}) };
      }),
      pacer: this.pacer,
      budgetBytes: s.budgetBytes ?? Infinity,
      maxPreparing: s.maxPreparing ?? Infinity,
      kinds: Object.fromEntries(Object.entries(s.kinds).flatMap(([name, k]) => (k.prepareBatch ? [[name, { prepareBatch: { maxItems: k.prepareBatch.maxItems, maxWaitMs: k.prepareBatch.maxWaitS * 1000 } }]] : []))),
    });
    this.jobs = planArrivals(s, this.seed);
    // (The kinds that arrive, in the scenario's order: one defined but never submitted has no row.)
    const arriving = new Set(this.jobs.map((j) => j.spec.kind));
    this.kindLatencies = new Map(Object.keys(s.kinds).filter((k) => arriving.has(k)).map((k) => [k, []]));
    const classes = new Set(this.jobs.map((j) => j.spec.priority ?? 'normal'));
    this.priorityLatencies = new Map(PRIORITIES.filter((p) => classes.has(p)).map((p) => [p, []]));
    checkJobRefs(s, this.jobs, this.seed);
    this.startedAt = new Float64Array(this.jobs.length).fill(NaN);
    const partitions = this.jobs.reduce((n, j) => n + j.spec.partitions, 0);
    this.itemJob = new Int32Array(partitions);
    this.items = new Array<SimItem | undefined>(partitions);
    // A speed event at 0 s is the devices' speed from the start, not a change: the window was placed,
    // and the throughput ratio counted, at the speed before it (a user trial's 0.5 at 0 s read 1.33).
    let atStart = s;
    if (s.events.some((e) => e.type === 'speed' && e.atS <= 0)) {
      for (const e of s.events) {
        if (e.type !== 'speed' || e.atS > 0) continue;
        this.devices.forEach((d, i) => {
          if (e.device === undefined || e.device === i) d.speed = e.speed;
        });
      }
      // (The window's passes through the pipeline at each group's slowest device so set.)
      let first = 0;
      atStart = { ...s, devices: s.devices.map((g) => ({ ...g, speed: Math.min(...this.devices.slice(first, (first += g.count)).map((d) => d.speed)) })) };
    }
    const capacity0 = capacityOf(this.devices);
    this.meters.capacity = capacity0;
    this.window = steadyWindow(atStart, this.jobs, capacity0);
    const speedEvents = s.events.filter((e) => e.type === 'speed' && e.atS > 0);
    const changeAtMs = speedEvents.length ? Math.min(...speedEvents.map((e) => e.atS * 1000)) : NaN;
    const lastBatch = this.jobs.length ? (this.jobs[this.jobs.length - 1] as PlannedJob).atMs : 0;
    const rampFromMs = s.rampFromS !== undefined ? s.rampFromS * 1000 : Number.isNaN(changeAtMs) ? lastBatch : Math.max(...speedEvents.map((e) => e.atS * 1000));
    this.recorder = new Recorder({ window: this.window, target: s.targetWaiting, meanPrepareMs: meanPrepareMs(s, this.jobs), capacity0, workPerItem: meanWorkPerItem(s, this.jobs), rampFromMs, changeAtMs }, this.meters, this.pacer);
    for (const f of s.faults) this.faults.set(f.job, [...(this.faults.get(f.job) ?? []), f]);
    this.scenarioEvents = s.events.map((e, i) => ({ e, i })).sort((x, y) => x.e.atS - y.e.atS || x.i - y.i);
    this.fleet = new DeviceFluid(this.devices, this.events);
    this.prep = new PrepFluid(
      this.kindList.some((k) => k.contention.some((f) => f !== 1)),
      this.kindList,
      this.events,
    );
    this.horizon = s.horizonS * 1000;
  }

  run(): SimResult {
    while (this.next()) {
      // (next() handled one event.)
    }
    // Its state() asked once more at the end: a user pacer's is checked at each call, and a run
    // reads it only where the scenario changes speed — one that went out of contract mid-run passed
    // here, then stopped a Runtime at its first status().
    this.pacer.state();
    const { engine, s, jobs, startedAt } = this;
    let firstStart: Record<string, number> | undefined;
    return {
      scenario: s.name,
      pacer: this.pacer.name,
      seed: this.seed,
      window: this.window,
      events: this.steps,
      completions: engine.snapshot.deviceCompletions,
      simulatedMs: this.now,
      lastEndMs: this.lastEndMs,
      metrics: this.recorder.metrics(engine.budget.peak, engine.budget.used),
      failures: this.failures,
      jobsSubmitted: this.jobs.length,
      unfinishedJobs: engine.activeJobs,
      endedBy: engine.activeJobs === 0 ? 'done' : this.pastHorizon ? 'horizon' : 'stalled',
      ...(this.stall === undefined ? {} : { stall: this.stall }),
      // Built when read (few readers; a day has thousands of jobs).
      get firstStartMs() {
        return (firstStart ??= firstStarts(jobs, startedAt));
      },
      series: this.recorder.series(),
      byKind: [...this.kindLatencies].map(([kind, ms]) => ({ kind, ...latencyOf(ms) })),
      byPriority: [...this.priorityLatencies].map(([priority, ms]) => ({ priority, ...latencyOf(ms) })),
    };
  }

  /** Handles the next event (arrivals first at equal times, then scenario events, the heap, the timer); false at the end. */
  private next(): boolean {
    this.fleet.retimeTouched(this.now);
    this.prep.retimeTouched(this.now);
    const job = this.jobs[this.nextJob];
    const scen = this.scenarioEvents[this.nextScenario];
    const top = this.events.peek();
    const jobAt = job ? job.atMs : Infinity;
    const scenAt = scen ? scen.e.atS * 1000 : Infinity;
    const topAt = top ? top.time : Infinity;
    const next = Math.min(jobAt, scenAt, topAt, this.wakeAt);
    if (!(next <= this.horizon)) {
      this.pastHorizon = next !== Infinity;
      return false;
    }
    this.now = next;
    if (jobAt === next) {
      this.arrive(job as PlannedJob, this.nextJob++);
    } else if (scenAt === next) {
      this.nextScenario++;
      this.scenarioEvent((scen as { e: ScenarioEvent }).e);
    } else if (topAt === next) {
      const ev = this.events.pop() as SimEvent;
      if (ev.kind === PREP_BATCH) this.prepBatchEnded(ev);
      else if (ev.kind === PREP) this.prepEnded(ev);
      else if ((this.devices[ev.a] as SimDevice).workers[ev.b]?.batch !== -1) this.batchEnded(ev);
      else this.deviceEnded(ev);
    } else {
      // The engine's timer fires.
      if (this.stalled()) return false;
      this.wakeAt = Infinity;
      this.tickEvent.time = this.now;
      this.apply(this.tickEvent);
      return true;
    }
    // (Anything but the pacer's own wake is progress: the stall check counts only an unbroken run of those.)
    this.quietWakes = 0;
    return true;
  }

  /**
   * Whether the pacer has put off every dispatch for STALL_WAKES of its wakes in a row and STALL_MS,
   * with work queued, nothing in flight and nothing more to arrive or happen: then nothing will ever happen but its own wakes (a pacer
   * answering `now + 1` each time it is asked ran millions of events and hung), and the run ends.
   */
  private stalled(): boolean {
    const s = this.engine.snapshot;
    const quiet = s.backlog > 0 && s.preparing + s.waiting + s.onDevice === 0 && this.nextScenario >= this.scenarioEvents.length && this.nextJob >= this.jobs.length;
    if (!quiet) {
      this.quietWakes = 0;
      return false;
    }
    if (this.quietWakes++ === 0) this.quietSince = this.now;
    if (this.quietWakes < STALL_WAKES || this.now - this.quietSince < STALL_MS) return false;
    this.stall = `the pacer put off every dispatch for ${STALL_MS / 60_000} min of simulated time (${this.quietWakes} wakes) with ${s.backlog} partitions queued, none in flight and nothing more to arrive (nextDispatchAt is asked again at each wake: return the time of the next dispatch, not now + a delay)`;
    return true;
  }

  private apply(e: EngineEvent): void {
    this.steps++;
    const { engine } = this;
    const cmds = engine.apply(e);
    this.timeline?.record(e, cmds, engine.snapshot, 0);
    this.onStep?.(e, cmds, engine.snapshot);
    this.carryOut(cmds);
    this.recorder.step(engine.snapshot);
  }

  /** A job arrives: its partitions take the next item ids (as the engine gives them). */
  private arrive(job: PlannedJob, jobIndex: number): void {
    for (let p = 0; p < job.spec.partitions; p++) this.itemJob[this.nextItemId++] = jobIndex;
    this.apply({ type: 'submit', time: this.now, job: job.spec });
  }

  /** An item about to start preparing, made the first time: its own random stream (by its id: the same draws whenever it starts) and its scenario faults. */
  private started(view: ItemView): SimItem {
    const made = this.items[view.id];
    if (made) return made;
    const id = view.id;
    const jobIndex = this.itemJob[id] as number;
    const spec = (this.jobs[jobIndex] as PlannedJob).spec;
    const jobFaults = this.faults.get(spec.id);
    const p = view.partition;
    const failPrepare = jobFaults?.some((f) => f.partition === p && f.stage === 'prepare') ?? false;
    const failDevice = jobFaults?.some((f) => f.partition === p && f.stage === 'device') ?? false;
    const it: SimItem = { rng: new Rng(this.seed, id), failPrepare, failDevice, kindIndex: this.kindIndex.get(spec.kind) ?? 0, jobIndex, prepEv: null, prepRemaining: 0, device: -1, worker: -1 };
    this.items[id] = it;
    return it;
  }

  private scenarioEvent(e: ScenarioEvent): void {
    const now = this.now;
    if (e.type === 'speed') {
      this.devices.forEach((d, i) => {
        if (e.device !== undefined && e.device !== i) return;
        this.fleet.advance(d, now);
        d.speed = e.speed;
        this.fleet.touch(d, i);
      });
      this.meters.capacity = capacityOf(this.devices);
      this.apply({ type: 'tick', time: now });
    } else if (e.type === 'workerLost' || e.type === 'workerReturned') {
      const w = (this.devices[e.device] as SimDevice).workers[e.worker] as SimWorker;
      w.alive = e.type === 'workerReturned';
      this.meters.capacity = capacityOf(this.devices);
      this.apply({ type: e.type, time: now, device: e.device, worker: e.worker });
    } else {
      this.apply({ type: 'cancel', time: now, jobId: e.job });
    }
  }

  private prepEnded(ev: SimEvent): void {
    this.prep.end(this.items[ev.a] as SimItem, this.now);
    const attempt = ev.b >> 1;
    if (ev.b & 1) {
      this.items[ev.a] = undefined;
      this.apply({ type: 'prepareFailed', time: this.now, item: ev.a, attempt, reason: 'simulated preparation failure' });
    } else {
      const e = this.preparedEvent;
      e.time = this.now;
      e.item = ev.a;
      e.attempt = attempt;
      this.apply(e);
    }
  }

  private prepBatchEnded(ev: SimEvent): void {
    const pb = this.prepBatches.get(ev.a) as PrepBatch;
    this.prepBatches.delete(ev.a);
    this.prep.end(pb.carrier, this.now);
    const failed = pb.failed.filter((id) => pb.live.includes(id));
    for (const id of failed) this.items[id] = undefined;
    const e: Extract<EngineEvent, { type: 'prepareBatchDone' }> = { type: 'prepareBatchDone', time: this.now, batch: ev.a };
    if (failed.length) e.failed = failed.map((item) => ({ item, reason: 'simulated preparation failure' }));
    this.apply(e);
  }

  private deviceEnded(ev: SimEvent): void {
    const d = this.devices[ev.a] as SimDevice;
    const w = d.workers[ev.b] as SimWorker;
    const item = w.item;
    const attempt = w.attempt;
    const fail = w.fail;
    const busyMs = d.ownBusy ? w.own : this.now - w.startedAt;
    this.fleet.release(d, ev.a, w, this.now);
    if (!fail) this.meters.work += d.workOf[(this.items[item] as SimItem).kindIndex] as number;
    this.items[item] = undefined;
    if (fail) this.apply({ type: 'deviceFailed', time: this.now, item, attempt, reason: 'simulated device error' });
    else {
      const e = this.doneEvent;
      e.time = this.now;
      e.item = item;
      e.attempt = attempt;
      e.busyMs = busyMs;
      this.apply(e);
    }
  }

  private batchEnded(ev: SimEvent): void {
    const d = this.devices[ev.a] as SimDevice;
    const w = d.workers[ev.b] as SimWorker;
    const batch = w.batch;
    const live = w.batchItems;
    const failed = w.batchFailed.filter((id) => live.includes(id));
    const busyMs = d.ownBusy ? w.own : this.now - w.startedAt;
    this.fleet.release(d, ev.a, w, this.now);
    for (const id of live) {
      if (!failed.includes(id)) this.meters.work += d.workOf[(this.items[id] as SimItem).kindIndex] as number;
      this.items[id] = undefined;
    }
    const e: Extract<EngineEvent, { type: 'batchDone' }> = { type: 'batchDone', time: this.now, batch, busyMs };
    if (failed.length) e.failed = failed.map((item) => ({ item, reason: 'simulated device error' }));
    this.apply(e);
  }

  private carryOut(cmds: Command[]): void {
    for (let k = 0; k < cmds.length; k++) {
      const c = cmds[k] as Command;
      switch (c.type) {
        case 'startPrepare':
          this.startPrepare(c);
          break;
        case 'startPrepareBatch':
          this.startPrepareBatch(c);
          break;
        case 'startDevice':
          this.startDevice(c);
          break;
        case 'startBatch':
          this.startBatch(c);
          break;
        case 'abort':
          this.abort(c);
          break;
        case 'finishJob':
          this.lastEndMs = this.now;
          this.recorder.jobEnded(c);
          if (c.state === 'done') {
            const spec = this.jobs[Number(c.jobId.slice(4))]?.spec;
            this.kindLatencies.get(spec?.kind ?? '')?.push(c.timeMs);
            this.priorityLatencies.get(spec?.priority ?? 'normal')?.push(c.timeMs);
          }
          if (c.state !== 'done') this.failures.push({ job: c.jobId, state: c.state, code: c.code ?? '', reason: c.reason ?? '' });
          break;
        case 'wakeAt':
          this.wakeAt = c.time;
          break;
      }
    }
  }

  private startPrepare(c: Extract<Command, { type: 'startPrepare' }>): void {
    const it = this.started(c.item);
    const kind = this.kindList[it.kindIndex] as Kind;
    const now = this.now;
    const latency = this.prep.start(it, sampleMs(kind.prepare, it.rng), now);
    const fail = (kind.prepareFailure > 0 && it.rng.uniform() < kind.prepareFailure) || it.failPrepare;
    const b = c.attempt * 2 + (fail ? 1 : 0);
    if (it.prepEv) {
      it.prepEv.b = b;
      this.events.schedule(it.prepEv, now + latency);
    } else it.prepEv = this.events.push(now + latency, PREP, c.item.id, b);
    this.markStarted(it, now);
  }

  /** Notes the first preparation start of the item's planned job. */
  private markStarted(it: SimItem, now: number): void {
    if (Number.isNaN(this.startedAt[it.jobIndex])) this.startedAt[it.jobIndex] = now;
  }

  private startPrepareBatch(c: Extract<Command, { type: 'startPrepareBatch' }>): void {
    const first = this.started(c.items[0] as ItemView);
    const kind = this.kindList[first.kindIndex] as Kind;
    // The fixed part draws from the first item's stream: the batch's draws depend only on its items.
    let base = sampleMs((kind.prepareBatch as { fixed: Dist }).fixed, first.rng);
    const live: number[] = [];
    const failed: number[] = [];
    for (const view of c.items) {
      const it = this.started(view);
      base += sampleMs(kind.prepare, it.rng);
      if ((kind.prepareFailure > 0 && it.rng.uniform() < kind.prepareFailure) || it.failPrepare) failed.push(view.id);
      live.push(view.id);
      this.markStarted(it, this.now);
    }
    const carrier: SimItem = { ...first, prepEv: null };
    const latency = this.prep.start(carrier, base, this.now);
    carrier.prepEv = this.events.push(this.now + latency, PREP_BATCH, c.batch);
    this.prepBatches.set(c.batch, { carrier, live, failed });
  }

  private startDevice(c: Extract<Command, { type: 'startDevice' }>): void {
    const it = this.items[c.item.id] as SimItem;
    const d = this.devices[c.device] as SimDevice;
    this.fleet.advance(d, this.now);
    const w = d.workers[c.worker] as SimWorker;
    const kind = this.kindList[it.kindIndex] as Kind;
    w.item = c.item.id;
    w.attempt = c.attempt;
    w.remaining = sampleMs(d.serviceOf[it.kindIndex] as Dist, it.rng);
    w.own = w.remaining / d.speed;
    w.startedAt = this.now;
    const p = kind?.deviceFailure ?? 0;
    w.fail = (p > 0 && it.rng.uniform() < p) || it.failDevice;
    it.device = c.device;
    it.worker = c.worker;
    d.busy++;
    this.fleet.touch(d, c.device);
  }

  private startBatch(c: Extract<Command, { type: 'startBatch' }>): void {
    const d = this.devices[c.device] as SimDevice;
    this.fleet.advance(d, this.now);
    const w = d.workers[c.worker] as SimWorker;
    const first = this.items[(c.items[0] as ItemView).id] as SimItem;
    // The fixed part draws from the first item's stream: the batch's draws depend only on its items.
    let ms = sampleMs((d.batch as { fixed: Dist }).fixed, first.rng);
    w.batchItems = [];
    w.batchFailed = [];
    for (const view of c.items) {
      const it = this.items[view.id] as SimItem;
      ms += sampleMs(d.serviceOf[it.kindIndex] as Dist, it.rng);
      const p = (this.kindList[it.kindIndex] as Kind).deviceFailure;
      if ((p > 0 && it.rng.uniform() < p) || it.failDevice) w.batchFailed.push(view.id);
      it.device = c.device;
      it.worker = c.worker;
      w.batchItems.push(view.id);
    }
    w.item = (c.items[0] as ItemView).id;
    w.batch = c.batch;
    w.remaining = ms;
    w.own = ms / d.speed;
    w.startedAt = this.now;
    w.fail = false;
    d.busy++;
    this.fleet.touch(d, c.device);
  }

  private abort(c: Extract<Command, { type: 'abort' }>): void {
    const it = this.items[c.item.id];
    if (!it) return;
    if (c.batch && c.stage === 'preparing') {
      // An item withdrawn from a preparation batch: the batch runs on; withdrawn whole, it ends.
      const pb = this.prepBatches.get(c.batch.id);
      if (pb) {
        pb.live = pb.live.filter((id) => id !== c.item.id);
        if (c.batch.remaining === 0) {
          this.events.remove(pb.carrier.prepEv as SimEvent);
          this.prep.end(pb.carrier, this.now);
          this.prepBatches.delete(c.batch.id);
        }
      }
    } else if (c.batch) {
      // An item withdrawn from a batch: the batch runs on; withdrawn whole, its worker is free.
      const d = this.devices[it.device] as SimDevice;
      const w = d.workers[it.worker] as SimWorker;
      if (w.batch === c.batch.id) {
        w.batchItems = w.batchItems.filter((id) => id !== c.item.id);
        if (c.batch.remaining === 0) this.fleet.release(d, it.device, w, this.now);
      }
    } else if (c.stage === 'preparing' && it.prepEv && this.events.remove(it.prepEv)) {
      this.prep.end(it, this.now);
    } else if (c.stage === 'on-device') {
      const d = this.devices[it.device] as SimDevice;
      const w = d.workers[it.worker] as SimWorker;
      if (w.item === c.item.id) this.fleet.release(d, it.device, w, this.now);
    }
    if (c.item.state === 'failed' || c.item.state === 'cancelled') this.items[c.item.id] = undefined;
  }
}

import { Engine, IndexedHeap, type TimelineRecorder, type Command, type EngineEvent, type HeapNode, type ItemView, type JobSpec, type Pacer, type PacerOptions, type PacerSnapshot } from '../core/index.js';
import { Recorder, type Metrics, type Series } from './metrics.js';
import { Rng } from './random.js';
import { deviceWorkers, factor, meanMs, prepareHighMs, prepareStep, sampleMs, type Dist, type Kind, type Scenario, type ScenarioEvent } from './scenario.js';

/**
 * Kinds of events in the simulator's heap. Arrivals and scenario events are already sorted and
 * are read from cursors, and the engine's single timer is a variable, so the heap holds only the
 * work in flight. At equal times: arrivals, then scenario events, then the heap, then the timer.
 */
const PREP = 1;
const DEV = 2;
/** A preparation batch's end: `a` its engine batch id. */
const PREP_BATCH = 3;

class SimEvent implements HeapNode {
  heapIndex = -1;
  constructor(
    public time: number,
    public seq: number,
    readonly kind: number,
    readonly a: number,
    public b: number,
  ) {}
}

interface SimWorker {
  alive: boolean;
  item: number;
  attempt: number;
  /** Work left, in ms of service at rate 1. */
  remaining: number;
  startedAt: number;
  /** The item's own service time at the device's speed when it started, ms (what a busyTime "own" device reports). */
  own: number;
  fail: boolean;
  ev: SimEvent | null;
  /** The engine's batch it runs (−1: a single item), the batch's items still in it, and those that will fail. */
  batch: number;
  batchItems: number[];
  batchFailed: number[];
}

interface SimDevice {
  speed: number;
  contention: number[];
  service: Dist;
  /** By kind index (SimItem.kindIndex): its service time on this device (kinds.<name>.service, else the device's). */
  serviceOf: Dist[];
  /** By kind index: its mean service time ÷ the device's own (the work an item of it counts for in the throughput ratio). */
  workOf: number[];
  /** Reports each item's own service time instead of the time it held its worker (scenario busyTime "own"). */
  ownBusy: boolean;
  /** Batches (scenario devices[].batch): the most items in one, and the fixed part of a batch's time. */
  batch: { maxItems: number; fixed: Dist } | null;
  workers: SimWorker[];
  busy: number;
  lastUpdate: number;
  /** Contention changed at this instant; completions not yet re-timed. */
  dirty: boolean;
}

interface SimItem {
  rng: Rng;
  /** Scenario faults aimed at this partition. */
  failPrepare: boolean;
  failDevice: boolean;
  /** Its kind's index in the scenario's kinds (kindList, SimDevice.serviceOf, workOf). */
  kindIndex: number;
  job: string;
  partition: number;
  /** The item's preparation event, reused across attempts; pending while it is in the heap. */
  prepEv: SimEvent | null;
  /** Fluid preparation (see prepFluid): work left in ms at rate 1. */
  prepRemaining: number;
  device: number;
  worker: number;
}

export interface SimulateOptions {
  /** Creates the pacer; it receives the scenario's pacer options with targetWaiting filled in. */
  pacer: (options: PacerOptions) => Pacer;
  /** Overrides the scenario's seed. */
  seed?: number;
  /** Records every engine step (spans per preparation slot and device worker, level samples) in virtual time, ms. */
  timeline?: TimelineRecorder;
  /** Called after every engine step with its event and commands (virtual time is `event.time`): to drive meters as the runtime does. */
  onStep?: (event: EngineEvent, commands: readonly Command[], snapshot: PacerSnapshot) => void;
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
  /** Simulated time at the end, ms. */
  simulatedMs: number;
  metrics: Metrics;
  /** Jobs that failed or were cancelled, with their reasons. */
  failures: JobFailure[];
  /** Jobs submitted, and jobs still unfinished when the run ended (0 unless the horizon cut it short). */
  jobsSubmitted: number;
  unfinishedJobs: number;
  /** The first preparation start of each job, ms (for the priority scenario). */
  firstStartMs: Record<string, number>;
  series: Series;
}

interface PlannedJob {
  atMs: number;
  spec: JobSpec;
}

/** Expands arrivals into concrete jobs (ids job-0, job-1, … in arrival order). */
export function planArrivals(s: Scenario, seed: number): PlannedJob[] {
  const rng = new Rng(seed, -1);
  const raw: { atMs: number; partitions: number; kind: string; priority: JobSpec['priority'] }[] = [];
  for (const a of s.arrivals) {
    if ('poisson' in a) {
      const mean = 1000 / a.poisson.ratePerS;
      for (let t = a.poisson.fromS * 1000 + rng.exponential(mean); t < a.poisson.untilS * 1000; t += rng.exponential(mean)) {
        raw.push({ atMs: t, partitions: a.partitions, kind: a.kind, priority: a.priority });
      }
    } else {
      for (let j = 0; j < a.jobs; j++) raw.push({ atMs: (a.atS + j * a.everyS) * 1000, partitions: a.partitions, kind: a.kind, priority: a.priority });
    }
  }
  // Stable sort keeps file order among equal times.
  raw.sort((x, y) => x.atMs - y.atMs);
  return raw.map((r, i) => {
    const k = s.kinds[r.kind];
    const spec: JobSpec = { id: `job-${i}`, kind: r.kind, priority: r.priority, partitions: r.partitions };
    if (k) spec.memory = { prepareBytes: k.memory.prepareBytes, deviceBytes: k.memory.deviceBytes };
    return { atMs: r.atMs, spec };
  });
}

/**
 * Device capacity of the whole fleet for the given speeds and live workers, in items/ms of each
 * device's own service time t: Σ max_k k·speed / (t·f(k)). An item of a kind with its own service
 * time counts for its share of work (workOf), so the throughput ratio weighs the mix.
 */
function capacityOf(devices: SimDevice[]): number {
  let total = 0;
  for (const d of devices) {
    const alive = d.workers.reduce((n, w) => n + (w.alive ? 1 : 0), 0);
    const unit = unitMs(d.service, d.batch);
    let best = 0;
    for (let k = 1; k <= alive; k++) best = Math.max(best, (k * d.speed) / (unit * factor(d.contention, k)));
    total += best;
  }
  return total;
}

/** Mean device time per item, ms: a batching device's at full batches (its fixed part shared by maxItems). */
export function unitMs(service: Dist, batch: { maxItems: number; fixed: Dist } | null | undefined): number {
  return batch ? (meanMs(batch.fixed) + batch.maxItems * meanMs(service)) / batch.maxItems : meanMs(service);
}

/**
 * The steady window, the same rule for every pacer: from the first arrival + two passes through
 * the pipeline (2 × (p99 preparation latency + mean service time): a pacer that knows nothing
 * must see items complete once before it can fill the pipeline at the right rate), to the end
 * of an ideal fluid drain (every job prepared in the mean latency and served at full capacity)
 * minus the p99 latency (the drain goes no faster than the preparations can at their best
 * concurrency, where they contend). Where kinds differ in device time (kinds.<name>.service),
 * each kind is news to a pacer in the same way: the window starts two passes after the devices
 * could first reach each kind's first job (the jobs that arrived before it served at full
 * capacity). Scenarios may set it. A scenario too short to have a steady state gets an empty
 * window, and the steady measures are null.
 */
export function steadyWindow(s: Scenario, jobs: PlannedJob[], capacity: number): { fromMs: number; toMs: number } {
  if (s.steady) return { fromMs: s.steady.fromS * 1000, toMs: s.steady.toS * 1000 };
  const kinds = Object.values(s.kinds);
  const high = Math.max(...kinds.map(prepareHighMs));
  const mean = meanPrepareMs(s, jobs);
  const service = Math.max(...s.devices.flatMap((d) => [d.service, ...kinds.flatMap((k) => (k.service ? [k.service] : []))].map((x) => (meanMs(x) + (d.batch ? meanMs(d.batch.fixed) : 0)) / d.speed)));
  // A kind's items take its share of work (its service time ÷ the device's, over the devices).
  const groups = s.devices.flatMap((g) => Array.from({ length: g.count }, () => g));
  const workOf = (kind: string) => {
    const own = s.kinds[kind]?.service;
    return own ? groups.reduce((sum, g) => sum + meanMs(own) / meanMs(g.service), 0) / groups.length : 1;
  };
  let reach = jobs[0]?.atMs ?? 0;
  const differ = kinds.some((k) => k.service);
  const seen = new Set<string>();
  let ahead = 0;
  for (const j of jobs) {
    if (differ && !seen.has(j.spec.kind)) {
      seen.add(j.spec.kind);
      reach = Math.max(reach, j.atMs, ahead / capacity);
    }
    ahead += j.spec.partitions * workOf(j.spec.kind);
  }
  const from = reach + 2 * (high + service);
  // Where preparations contend, the drain goes no faster than they can at their best concurrency.
  const rate = (kind: string) => Math.min(capacity / workOf(kind), prepareCapacity(s.kinds[kind]));
  let end = 0;
  for (const j of jobs) end = Math.max(end, j.atMs + mean) + j.spec.partitions / rate(j.spec.kind);
  return { fromMs: from, toMs: Math.max(from, end - high) };
}

/**
 * Preparation throughput of a kind at its best concurrency, items/ms: max over n steps of n ×
 * items per step ÷ (mean step latency × contention factor at n); Infinity when it still grows at
 * the end of the list.
 */
function prepareCapacity(k: Scenario['kinds'][string] | undefined): number {
  if (!k) return Infinity;
  const list = k.contention;
  let best = 0;
  let at = 0;
  list.forEach((f, i) => {
    if ((i + 1) / f > best) {
      best = (i + 1) / f;
      at = i;
    }
  });
  const step = prepareStep(k);
  return at === list.length - 1 ? Infinity : (best * step.items) / step.ms;
}

/** Mean base preparation latency, weighted by the partitions of each kind. */
function meanPrepareMs(s: Scenario, jobs: PlannedJob[]): number {
  let sum = 0;
  let n = 0;
  for (const j of jobs) {
    const k = s.kinds[j.spec.kind];
    if (!k) continue;
    sum += prepareStep(k).ms * j.spec.partitions;
    n += j.spec.partitions;
  }
  return n > 0 ? sum / n : 0;
}

/** Runs one scenario with one pacer in virtual time. Same scenario, seed and pacer → same result. */
export function simulate(s: Scenario, options: SimulateOptions): SimResult {
  const seed = options.seed ?? s.seed;
  const pacer = options.pacer({ ...s.pacerOptions, targetWaiting: s.targetWaiting });
  const workersPerDevice = deviceWorkers(s);
  const groups = s.devices.flatMap((g) => Array.from({ length: g.count }, () => g));
  const kindIndex = new Map(Object.keys(s.kinds).map((name, i) => [name, i]));
  const kindList = Object.values(s.kinds);
  const devices: SimDevice[] = groups.map((g) => ({
    speed: g.speed,
    contention: g.contention,
    service: g.service,
    serviceOf: Object.values(s.kinds).map((k) => k.service ?? g.service),
    workOf: Object.values(s.kinds).map((k) => (k.service ? meanMs(k.service) / meanMs(g.service) : 1)),
    ownBusy: g.busyTime === 'own',
    batch: g.batch ? { maxItems: g.batch.maxItems, fixed: g.batch.fixed } : null,
    busy: 0,
    lastUpdate: 0,
    dirty: false,
    workers: Array.from({ length: g.workers }, () => ({ alive: true, item: -1, attempt: 0, remaining: 0, startedAt: 0, own: 0, fail: false, ev: null, batch: -1, batchItems: [], batchFailed: [] })),
  }));
  const engine = new Engine({
    devices: workersPerDevice.map((workers, d) => {
      const g = groups[d] as Scenario['devices'][number];
      return { workers, ...(g.kinds ? { kinds: g.kinds } : {}), ...(g.batch ? { batch: { maxItems: g.batch.maxItems, maxWaitMs: g.batch.maxWaitS * 1000 } } : {}) };
    }),
    pacer,
    budgetBytes: s.budgetBytes ?? Infinity,
    maxPreparing: s.maxPreparing ?? Infinity,
    kinds: Object.fromEntries(Object.entries(s.kinds).flatMap(([name, k]) => (k.prepareBatch ? [[name, { prepareBatch: { maxItems: k.prepareBatch.maxItems, maxWaitMs: k.prepareBatch.maxWaitS * 1000 } }]] : []))),
  });
  const jobs = planArrivals(s, seed);
  const capacity0 = capacityOf(devices);
  const window = steadyWindow(s, jobs, capacity0);
  const speedEvents = s.events.filter((e) => e.type === 'speed');
  const changeAtMs = speedEvents.length ? Math.min(...speedEvents.map((e) => e.atS * 1000)) : NaN;
  const lastBatch = jobs.length ? (jobs[jobs.length - 1] as PlannedJob).atMs : 0;
  const rampFromMs = s.rampFromS !== undefined ? s.rampFromS * 1000 : Number.isNaN(changeAtMs) ? lastBatch : Math.max(...speedEvents.map((e) => e.atS * 1000));
  const recorder = new Recorder({ window, target: s.targetWaiting, meanPrepareMs: meanPrepareMs(s, jobs), capacity0, rampFromMs, changeAtMs });
  const faults = new Map<string, { stage: 'prepare' | 'device'; partition: number }[]>();
  for (const f of s.faults) faults.set(f.job, [...(faults.get(f.job) ?? []), f]);

  const heap = new IndexedHeap<SimEvent>((x, y) => x.time < y.time || (x.time === y.time && x.seq < y.seq));
  let seq = 0;
  const push = (time: number, kind: number, a = 0, b = 0): SimEvent => {
    const ev = new SimEvent(time, seq++, kind, a, b);
    heap.push(ev);
    return ev;
  };
  const scenarioEvents = s.events.map((e, i) => ({ e, i })).sort((x, y) => x.e.atS - y.e.atS || x.i - y.i);
  let nextJob = 0;
  let nextScenario = 0;
  /** The engine's timer: one pending tick, replaced by every wakeAt command. */
  let wakeAt = Infinity;
  /** Items by engine item id (dense: ids are given in arrival order); undefined once gone. */
  const items: (SimItem | undefined)[] = [];
  const failures: JobFailure[] = [];
  const firstStartMs: Record<string, number> = {};
  let preparing = 0;
  /**
   * Preparation contention as a fluid, like the devices': with k preparations in flight each one
   * progresses at 1 / factor(its kind's contention, k), so a preparation already running slows
   * down when more start (shared cores, memory bandwidth) and speeds up when they finish. Only
   * where some kind's contention is not all 1s (otherwise latency is what was sampled).
   */
  const prepFluid = Object.values(s.kinds).some((k) => k.contention.some((f) => f !== 1));
  const inPrep = new Set<SimItem>();
  /**
   * Preparation batches in flight by engine batch id: the items still in each, those that will
   * fail, and a carrier holding the batch's event and fluid work (its first item's kind and stream).
   */
  const prepBatches = new Map<number, { carrier: SimItem; live: number[]; failed: number[] }>();
  let prepAt = 0;
  let prepDirty = false;
  /** Brings every preparation's remaining work up to `now` at the concurrency it ran with. */
  const advancePrep = () => {
    const elapsed = now - prepAt;
    if (elapsed > 0) for (const it of inPrep) it.prepRemaining = Math.max(0, it.prepRemaining - elapsed / factor((kindList[it.kindIndex] as Kind).contention, preparing));
    prepAt = now;
    prepDirty = true;
  };
  /** Re-times every preparation's end for the concurrency now (once per instant, like devices). */
  const retimePrep = () => {
    prepDirty = false;
    for (const it of inPrep) {
      const ev = it.prepEv as SimEvent;
      const t = now + it.prepRemaining * factor((kindList[it.kindIndex] as Kind).contention, preparing);
      if (ev.time !== t) {
        heap.remove(ev);
        ev.time = t;
        ev.seq = seq++;
        heap.push(ev);
      }
    }
  };
  let now = 0;
  let events = 0;
  let capacity = capacity0;
  /** Completions weighed by their kind's device time (workOf): what the throughput ratio counts. */
  let work = 0;
  const horizon = s.horizonS * 1000;
  let nextItemId = 0;

  /** Brings a device's fluid model up to `now` (work done at the current contention). */
  const advance = (d: SimDevice) => {
    const elapsed = now - d.lastUpdate;
    if (elapsed > 0 && d.busy > 0) {
      const rate = d.speed / factor(d.contention, d.busy);
      for (const w of d.workers) if (w.item >= 0) w.remaining = Math.max(0, w.remaining - elapsed * rate);
    }
    d.lastUpdate = now;
  };
  /**
   * Marks a device whose contention changed; its completions are re-timed once all events at
   * this instant are handled (a finish and the next start at the same time cost one re-time).
   */
  const dirty: number[] = [];
  const reschedule = (d: SimDevice, index: number) => {
    if (!d.dirty) {
      d.dirty = true;
      dirty.push(index);
    }
  };
  /** Re-times every busy worker's completion for the device's current contention. */
  const retime = (index: number) => {
    const d = devices[index] as SimDevice;
    d.dirty = false;
    const rate = d.speed / factor(d.contention, d.busy);
    for (let wi = 0; wi < d.workers.length; wi++) {
      const w = d.workers[wi] as SimWorker;
      if (w.item < 0) continue;
      const t = now + w.remaining / rate;
      if (!w.ev) w.ev = push(t, DEV, index, wi);
      else if (w.ev.time !== t) {
        // Re-time the worker's pending completion in place (a fresh sequence number keeps ties deterministic).
        heap.remove(w.ev);
        w.ev.time = t;
        w.ev.seq = seq++;
        heap.push(w.ev);
      }
    }
  };
  const release = (d: SimDevice, di: number, w: SimWorker) => {
    advance(d);
    if (w.ev) heap.remove(w.ev);
    w.ev = null;
    w.item = -1;
    w.batch = -1;
    d.busy--;
    reschedule(d, di);
  };

  const carryOut = (cmds: Command[]) => {
    for (let k = 0; k < cmds.length; k++) {
      const c = cmds[k] as Command;
      switch (c.type) {
        case 'startPrepare': {
          const it = items[c.item.id] as SimItem;
          if (prepFluid) advancePrep();
          preparing++;
          const kind = kindList[it.kindIndex] as Kind;
          const base = sampleMs(kind.prepare, it.rng);
          const latency = base * factor(kind.contention, preparing);
          if (prepFluid) {
            it.prepRemaining = base;
            inPrep.add(it);
          }
          const fail = (kind.prepareFailure > 0 && it.rng.uniform() < kind.prepareFailure) || it.failPrepare;
          const b = c.attempt * 2 + (fail ? 1 : 0);
          if (it.prepEv) {
            it.prepEv.time = now + latency;
            it.prepEv.seq = seq++;
            it.prepEv.b = b;
            heap.push(it.prepEv);
          } else it.prepEv = push(now + latency, PREP, c.item.id, b);
          if (!(it.job in firstStartMs)) firstStartMs[it.job] = now;
          break;
        }
        case 'startPrepareBatch': {
          const first = items[(c.items[0] as ItemView).id] as SimItem;
          const kind = kindList[first.kindIndex] as Kind;
          if (prepFluid) advancePrep();
          preparing++;
          // The fixed part draws from the first item's stream: the batch's draws depend only on its items.
          let base = sampleMs((kind.prepareBatch as { fixed: Dist }).fixed, first.rng);
          const live: number[] = [];
          const failed: number[] = [];
          for (const view of c.items) {
            const it = items[view.id] as SimItem;
            base += sampleMs(kind.prepare, it.rng);
            if ((kind.prepareFailure > 0 && it.rng.uniform() < kind.prepareFailure) || it.failPrepare) failed.push(view.id);
            live.push(view.id);
            if (!(it.job in firstStartMs)) firstStartMs[it.job] = now;
          }
          const carrier: SimItem = { ...first, prepRemaining: base, prepEv: push(now + base * factor(kind.contention, preparing), PREP_BATCH, c.batch) };
          if (prepFluid) inPrep.add(carrier);
          prepBatches.set(c.batch, { carrier, live, failed });
          break;
        }
        case 'startDevice': {
          const it = items[c.item.id] as SimItem;
          const d = devices[c.device] as SimDevice;
          advance(d);
          const w = d.workers[c.worker] as SimWorker;
          const kind = kindList[it.kindIndex] as Kind;
          w.item = c.item.id;
          w.attempt = c.attempt;
          w.remaining = sampleMs(d.serviceOf[it.kindIndex] as Dist, it.rng);
          w.own = w.remaining / d.speed;
          w.startedAt = now;
          const p = kind?.deviceFailure ?? 0;
          w.fail = (p > 0 && it.rng.uniform() < p) || it.failDevice;
          it.device = c.device;
          it.worker = c.worker;
          d.busy++;
          reschedule(d, c.device);
          break;
        }
        case 'startBatch': {
          const d = devices[c.device] as SimDevice;
          advance(d);
          const w = d.workers[c.worker] as SimWorker;
          const first = items[(c.items[0] as ItemView).id] as SimItem;
          // The fixed part draws from the first item's stream: the batch's draws depend only on its items.
          let ms = sampleMs((d.batch as { fixed: Dist }).fixed, first.rng);
          w.batchItems = [];
          w.batchFailed = [];
          for (const view of c.items) {
            const it = items[view.id] as SimItem;
            ms += sampleMs(d.serviceOf[it.kindIndex] as Dist, it.rng);
            const p = (kindList[it.kindIndex] as Kind).deviceFailure;
            if ((p > 0 && it.rng.uniform() < p) || it.failDevice) w.batchFailed.push(view.id);
            it.device = c.device;
            it.worker = c.worker;
            w.batchItems.push(view.id);
          }
          w.item = (c.items[0] as ItemView).id;
          w.batch = c.batch;
          w.remaining = ms;
          w.own = ms / d.speed;
          w.startedAt = now;
          w.fail = false;
          d.busy++;
          reschedule(d, c.device);
          break;
        }
        case 'abort': {
          const it = items[c.item.id];
          if (!it) break;
          if (c.batch && c.stage === 'preparing') {
            // An item withdrawn from a preparation batch: the batch runs on; withdrawn whole, it ends.
            const pb = prepBatches.get(c.batch.id);
            if (pb) {
              pb.live = pb.live.filter((id) => id !== c.item.id);
              if (c.batch.remaining === 0) {
                heap.remove(pb.carrier.prepEv as SimEvent);
                if (prepFluid) {
                  advancePrep();
                  inPrep.delete(pb.carrier);
                }
                preparing--;
                prepBatches.delete(c.batch.id);
              }
            }
            if (c.item.state === 'failed' || c.item.state === 'cancelled') items[c.item.id] = undefined;
            break;
          }
          if (c.batch) {
            // An item withdrawn from a batch: the batch runs on; withdrawn whole, its worker is free.
            const d = devices[it.device] as SimDevice;
            const w = d.workers[it.worker] as SimWorker;
            if (w.batch === c.batch.id) {
              w.batchItems = w.batchItems.filter((id) => id !== c.item.id);
              if (c.batch.remaining === 0) release(d, it.device, w);
            }
            if (c.item.state === 'failed' || c.item.state === 'cancelled') items[c.item.id] = undefined;
            break;
          }
          if (c.stage === 'preparing' && it.prepEv && heap.remove(it.prepEv)) {
            if (prepFluid) {
              advancePrep();
              inPrep.delete(it);
            }
            preparing--;
          } else if (c.stage === 'on-device') {
            const d = devices[it.device] as SimDevice;
            const w = d.workers[it.worker] as SimWorker;
            if (w.item === c.item.id) release(d, it.device, w);
          }
          if (c.item.state === 'failed' || c.item.state === 'cancelled') items[c.item.id] = undefined;
          break;
        }
        case 'finishJob':
          recorder.jobEnded(c);
          if (c.state !== 'done') failures.push({ job: c.jobId, state: c.state, code: c.code ?? '', reason: c.reason ?? '' });
          break;
        case 'wakeAt':
          wakeAt = c.time;
          break;
      }
    }
  };

  // The three most frequent events reuse one object each (the engine keeps no event past apply).
  const preparedEvent = { type: 'prepared' as const, time: 0, item: 0, attempt: 0 };
  const doneEvent = { type: 'deviceDone' as const, time: 0, item: 0, attempt: 0, busyMs: 0 };
  const tickEvent = { type: 'tick' as const, time: 0 };
  const timeline = options.timeline;
  const apply = (e: EngineEvent) => {
    events++;
    const cmds = engine.apply(e);
    if (timeline) timeline.record(e, cmds, engine.snapshot, 0);
    options.onStep?.(e, cmds, engine.snapshot);
    carryOut(cmds);
    recorder.step(now, engine.snapshot, capacity, pacer, work);
  };

  /** A job arrives: its partitions get their own random streams and their scenario faults. */
  const arrive = (job: PlannedJob) => {
    const jobFaults = faults.get(job.spec.id);
    for (let p = 0; p < job.spec.partitions; p++) {
      const id = nextItemId++;
      const failPrepare = jobFaults?.some((f) => f.partition === p && f.stage === 'prepare') ?? false;
      const failDevice = jobFaults?.some((f) => f.partition === p && f.stage === 'device') ?? false;
      items[id] = { rng: new Rng(seed, id), failPrepare, failDevice, kindIndex: kindIndex.get(job.spec.kind) ?? 0, job: job.spec.id, partition: p, prepEv: null, prepRemaining: 0, device: -1, worker: -1 };
    }
    apply({ type: 'submit', time: now, job: job.spec });
  };

  const scenarioEvent = (e: ScenarioEvent) => {
    if (e.type === 'speed') {
      devices.forEach((d, i) => {
        if (e.device !== undefined && e.device !== i) return;
        advance(d);
        d.speed = e.speed;
        reschedule(d, i);
      });
      capacity = capacityOf(devices);
      apply({ type: 'tick', time: now });
    } else if (e.type === 'workerLost' || e.type === 'workerReturned') {
      const w = (devices[e.device] as SimDevice).workers[e.worker] as SimWorker;
      w.alive = e.type === 'workerReturned';
      capacity = capacityOf(devices);
      apply({ type: e.type, time: now, device: e.device, worker: e.worker });
    } else {
      apply({ type: 'cancel', time: now, jobId: e.job });
    }
  };

  for (;;) {
    while (dirty.length) retime(dirty.pop() as number);
    if (prepDirty) retimePrep();
    const job = jobs[nextJob];
    const scen = scenarioEvents[nextScenario];
    const top = heap.peek();
    const jobAt = job ? job.atMs : Infinity;
    const scenAt = scen ? scen.e.atS * 1000 : Infinity;
    const topAt = top ? top.time : Infinity;
    const next = Math.min(jobAt, scenAt, topAt, wakeAt);
    if (!(next <= horizon)) break;
    now = next;
    if (jobAt === next) {
      nextJob++;
      arrive(job as PlannedJob);
    } else if (scenAt === next) {
      nextScenario++;
      scenarioEvent((scen as { e: ScenarioEvent }).e);
    } else if (topAt === next) {
      const ev = heap.pop() as SimEvent;
      if (ev.kind === PREP_BATCH) {
        const pb = prepBatches.get(ev.a) as { carrier: SimItem; live: number[]; failed: number[] };
        prepBatches.delete(ev.a);
        if (prepFluid) {
          advancePrep();
          inPrep.delete(pb.carrier);
        }
        preparing--;
        const failed = pb.failed.filter((id) => pb.live.includes(id));
        for (const id of failed) items[id] = undefined;
        const e: Extract<EngineEvent, { type: 'prepareBatchDone' }> = { type: 'prepareBatchDone', time: now, batch: ev.a };
        if (failed.length) e.failed = failed.map((item) => ({ item, reason: 'simulated preparation failure' }));
        apply(e);
      } else if (ev.kind === PREP) {
        if (prepFluid) {
          advancePrep();
          inPrep.delete(items[ev.a] as SimItem);
        }
        preparing--;
        const attempt = ev.b >> 1;
        if (ev.b & 1) {
          items[ev.a] = undefined;
          apply({ type: 'prepareFailed', time: now, item: ev.a, attempt, reason: 'simulated preparation failure' });
        } else {
          preparedEvent.time = now;
          preparedEvent.item = ev.a;
          preparedEvent.attempt = attempt;
          apply(preparedEvent);
        }
      } else if ((devices[ev.a] as SimDevice).workers[ev.b]?.batch !== -1) {
        const d = devices[ev.a] as SimDevice;
        const w = d.workers[ev.b] as SimWorker;
        const batch = w.batch;
        const live = w.batchItems;
        const failed = w.batchFailed.filter((id) => live.includes(id));
        const busyMs = d.ownBusy ? w.own : now - w.startedAt;
        w.ev = null;
        release(d, ev.a, w);
        for (const id of live) {
          if (!failed.includes(id)) work += d.workOf[(items[id] as SimItem).kindIndex] as number;
          items[id] = undefined;
        }
        const e: Extract<EngineEvent, { type: 'batchDone' }> = { type: 'batchDone', time: now, batch, busyMs };
        if (failed.length) e.failed = failed.map((item) => ({ item, reason: 'simulated device error' }));
        apply(e);
      } else {
        const d = devices[ev.a] as SimDevice;
        const w = d.workers[ev.b] as SimWorker;
        const item = w.item;
        const attempt = w.attempt;
        const fail = w.fail;
        const busyMs = d.ownBusy ? w.own : now - w.startedAt;
        w.ev = null;
        release(d, ev.a, w);
        if (!fail) work += d.workOf[(items[item] as SimItem).kindIndex] as number;
        items[item] = undefined;
        if (fail) apply({ type: 'deviceFailed', time: now, item, attempt, reason: 'simulated device error' });
        else {
          doneEvent.time = now;
          doneEvent.item = item;
          doneEvent.attempt = attempt;
          doneEvent.busyMs = busyMs;
          apply(doneEvent);
        }
      }
    } else {
      // The engine's timer fires.
      wakeAt = Infinity;
      tickEvent.time = now;
      apply(tickEvent);
    }
  }
  return {
    scenario: s.name,
    pacer: pacer.name,
    seed,
    window,
    events,
    completions: engine.snapshot.deviceCompletions,
    simulatedMs: now,
    metrics: recorder.metrics(engine.budget.peak, engine.budget.used),
    failures,
    jobsSubmitted: jobs.length,
    unfinishedJobs: engine.activeJobs,
    firstStartMs,
    series: recorder.series(),
  };
}

/**
 * Property tests: random operation sequences against a small independent model of the engine,
 * checking the invariants after every step; and the PartitionQueue against a sorted array.
 * Seeded, so every run checks the same cases.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  Engine,
  PRIORITIES,
  PartitionQueue,
  createPacer,
  type Command,
  type EngineEvent,
  type ItemView,
  type KeyedNode,
  type Pacer,
  type Priority,
  type StokerErrorCode,
} from '../../src/core/index.js';

const RUNS = { seed: 42, numRuns: 200 } as const;
const RANK: Record<Priority, number> = { critical: 0, high: 1, normal: 2, low: 3 };

// ─── configuration and operations ────────────────────────────────────────────────────────────

type PacerChoice =
  | { kind: 'unpaced' }
  | { kind: 'window'; window: number }
  | { kind: 'burst'; target: number }
  | { kind: 'stoker'; prior: number; target: number }
  | { kind: 'classic' | 'interval-pi' | 'gated-interval' };

interface Config {
  devices: number[];
  budget: number;
  maxPreparing: number;
  pacer: PacerChoice;
}

interface JobGen {
  priority: Priority;
  partitions: number;
  prepareBytes: number;
  deviceBytes: number;
  deadlineIn: number | undefined;
}

type ItemOp = 'prepared' | 'prepareFailed' | 'deviceDone' | 'deviceFailed';

type Op =
  | { op: 'submit'; dt: number; job: JobGen }
  | { op: 'resubmit'; dt: number; pick: number }
  | { op: ItemOp; dt: number; pick: number; fresh: boolean; attemptDelta: number; measured: number | undefined }
  | { op: 'cancel'; dt: number; pick: number }
  | { op: 'workerLost' | 'workerReturned'; dt: number; device: number; worker: number }
  | { op: 'memoryHeld'; dt: number; bytes: number }
  | { op: 'tick'; dt: number };

const configArb: fc.Arbitrary<Config> = fc.record({
  devices: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 3 }),
  budget: fc.oneof(fc.constant(Infinity), fc.integer({ min: 200, max: 1200 })),
  maxPreparing: fc.oneof(fc.constant(Infinity), fc.integer({ min: 1, max: 4 })),
  pacer: fc.oneof(
    fc.constant<PacerChoice>({ kind: 'unpaced' }),
    fc.integer({ min: 1, max: 6 }).map((window): PacerChoice => ({ kind: 'window', window })),
    fc.record({ prior: fc.integer({ min: 20, max: 2000 }), target: fc.integer({ min: 0, max: 4 }) }).map((o): PacerChoice => ({ kind: 'stoker', ...o })),
    fc.integer({ min: 1, max: 4 }).map((target): PacerChoice => ({ kind: 'burst', target })),
    fc.constantFrom<PacerChoice>({ kind: 'classic' }, { kind: 'interval-pi' }, { kind: 'gated-interval' }),
  ),
});

const dt = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 200 }));

const jobArb: fc.Arbitrary<JobGen> = fc.record({
  priority: fc.constantFrom(...PRIORITIES),
  partitions: fc.integer({ min: 1, max: 5 }),
  prepareBytes: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 500 })),
  deviceBytes: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 500 })),
  deadlineIn: fc.option(fc.integer({ min: 0, max: 3000 }), { nil: undefined }),
});

const itemOp = (op: ItemOp): fc.Arbitrary<Op> =>
  fc.record({
    op: fc.constant(op),
    dt,
    pick: fc.nat(),
    fresh: fc.boolean().chain((b) => (b ? fc.constant(true) : fc.oneof(fc.constant(true), fc.constant(false)))),
    attemptDelta: fc.integer({ min: -1, max: 0 }),
    measured: fc.option(fc.integer({ min: 0, max: 500 }), { nil: undefined }),
  });

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ op: fc.constant('submit' as const), dt, job: jobArb }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('resubmit' as const), dt, pick: fc.nat() }) },
  { weight: 5, arbitrary: itemOp('prepared') },
  { weight: 5, arbitrary: itemOp('deviceDone') },
  { weight: 1, arbitrary: itemOp('prepareFailed') },
  { weight: 1, arbitrary: itemOp('deviceFailed') },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('cancel' as const), dt, pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constantFrom('workerLost' as const, 'workerReturned' as const), dt, device: fc.nat(), worker: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('tick' as const), dt }) },
  // Idle pooled memory the driver holds: it counts against the budget (sometimes more than is free).
  { weight: 1, arbitrary: fc.record({ op: fc.constant('memoryHeld' as const), dt, bytes: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 700 })) }) },
);

function makePacer(p: PacerChoice): Pacer {
  switch (p.kind) {
    case 'unpaced':
      return createPacer('unpaced');
    case 'window':
      return createPacer('window', { window: p.window });
    case 'burst':
      return createPacer('burst', { targetWaiting: p.target });
    case 'stoker':
      // With a prior, so it paces from the start; the bootstrap without one is tested in pacers.test.ts.
      return createPacer('stoker', { priorServiceMs: p.prior, targetWaiting: p.target });
    default:
      return createPacer(p.kind);
  }
}

// ─── the model ───────────────────────────────────────────────────────────────────────────────

interface MJob {
  id: string;
  spec: { id: string; kind: string; priority: Priority; partitions: number; memory: { prepareBytes: number; deviceBytes: number }; deadline?: number };
  seq: number;
  rank: number;
  reservation: number;
  deviceBytes: number;
  deadline: number;
  submittedAt: number;
  live: boolean;
  /** Partitions waiting for dispatch, ascending: never dispatched, or sent back by a lost worker. */
  queued: number[];
  remaining: number;
  finishes: number;
  items: MItem[];
}

interface MItem {
  id: number;
  job: MJob;
  partition: number;
  /** 'queued': its worker was lost; it waits in the backlog to be prepared again. */
  state: 'queued' | 'preparing' | 'waiting' | 'on-device' | 'done' | 'ended';
  attempt: number;
  device: number;
  worker: number;
  startedAt: number;
  /** How it ended when aborted: the item state its job's end implies. */
  endedAs: 'failed' | 'cancelled' | null;
  view: ItemView;
}

interface Expected {
  state: 'done' | 'failed' | 'cancelled';
  code: StokerErrorCode | undefined;
}

/** Cheap assertions for the hot loop (an `expect` per counter per step is slow). */
function check(cond: boolean, msg: string): void {
  if (!cond) throw new Error(msg);
}

function eq(actual: unknown, want: unknown, what: string): void {
  if (!Object.is(actual, want)) throw new Error(`${what}: got ${String(actual)}, want ${String(want)}`);
}

/** Times may be fractional (pacer wake-ups), so running sums can differ in the last bits. */
function expectNear(actual: number, want: number, what: string): void {
  check(Math.abs(actual - want) <= 1e-6 * Math.max(1, Math.abs(want)), `${what}: ${actual} vs ${want}`);
}

const keyOf = (j: MJob, partition: number) => ({ rank: j.rank, seq: j.seq, partition });

/** The key order, written out independently of the source's keyLess. */
function modelLess(a: { rank: number; seq: number; partition: number }, b: { rank: number; seq: number; partition: number }): boolean {
  return a.rank < b.rank || (a.rank === b.rank && (a.seq < b.seq || (a.seq === b.seq && a.partition < b.partition)));
}

class Harness {
  readonly e: Engine;
  readonly jobs: MJob[] = [];
  /** Every item ever dispatched, by id. */
  readonly items = new Map<number, MItem>();
  /** Items not yet done or ended. */
  readonly live = new Set<MItem>();
  /** Items that left `live` in the current step (checked once, then dropped). */
  retired: MItem[] = [];
  readonly workers: Array<Array<{ alive: boolean; item: MItem | null }>>;
  now = 0;
  wake = Infinity;
  seq = 0;
  dispatched = 0;
  /** Items sent back to the backlog by a lost worker (each is dispatched once more). */
  requeued = 0;
  /** Bytes the driver holds outside reservations (memoryHeld), and the most it held. */
  held = 0;
  heldMax = 0;
  prepareCompletions = 0;
  prepareLatency = 0;
  prepareLatencySq = 0;
  deviceCompletions = 0;
  deviceBusy = 0;
  readonly perDevice: Array<{ completions: number; busyMs: number }>;

  constructor(readonly cfg: Config) {
    this.e = new Engine({ devices: cfg.devices.map((workers) => ({ workers })), pacer: makePacer(cfg.pacer), budgetBytes: cfg.budget, maxPreparing: cfg.maxPreparing });
    this.workers = cfg.devices.map((n) => Array.from({ length: n }, () => ({ alive: true, item: null })));
    this.perDevice = cfg.devices.map(() => ({ completions: 0, busyMs: 0 }));
  }

  liveJobs(): MJob[] {
    return this.jobs.filter((j) => j.live);
  }

  itemsIn(state: MItem['state']): MItem[] {
    return [...this.live].filter((i) => i.state === state);
  }

  private retire(mi: MItem, state: 'done' | 'ended'): void {
    mi.state = state;
    this.live.delete(mi);
    this.retired.push(mi);
  }

  /** The head of the dispatch queue in the model: least (rank, seq, partition) over queued partitions. */
  head(): { job: MJob; partition: number } | undefined {
    let best: { job: MJob; partition: number } | undefined;
    for (const j of this.jobs) {
      if (!j.live || j.queued.length === 0) continue;
      const p = j.queued[0] as number;
      if (!best || modelLess(keyOf(j, p), keyOf(best.job, best.partition))) best = { job: j, partition: p };
    }
    return best;
  }

  /** Applies one operation (translated to an event against the current model) with all checks. */
  run(op: Op): void {
    const time = this.now + op.dt;
    switch (op.op) {
      case 'submit': {
        const g = op.job;
        const spec = {
          id: `j${this.jobs.length}`,
          // Two kinds, so the per-kind counters are checked against the totals.
          kind: this.jobs.length % 3 === 2 ? 'other' : 'k',
          priority: g.priority,
          partitions: g.partitions,
          memory: { prepareBytes: g.prepareBytes, deviceBytes: g.deviceBytes },
          ...(g.deadlineIn === undefined ? {} : { deadline: time + g.deadlineIn }),
        };
        this.step({ type: 'submit', time, job: spec });
        return;
      }
      case 'resubmit': {
        const live = this.liveJobs();
        if (live.length === 0) return this.step({ type: 'tick', time });
        const j = live[op.pick % live.length] as MJob;
        this.step({ type: 'submit', time, job: { ...j.spec, memory: { ...j.spec.memory } } });
        return;
      }
      case 'prepared':
      case 'prepareFailed':
      case 'deviceDone':
      case 'deviceFailed': {
        const stage = op.op === 'prepared' || op.op === 'prepareFailed' ? 'preparing' : 'on-device';
        const pool = op.fresh ? this.itemsIn(stage) : [...this.items.values()];
        if (pool.length === 0) return this.step({ type: 'tick', time });
        const it = pool[op.pick % pool.length] as MItem;
        // A stale one (an earlier attempt, or the item gone) is ignored; an attempt not started, or
        // of the other stage, is a driver's mistake the engine refuses: not sent (see engine.test.ts).
        let attempt = op.fresh ? it.attempt : it.attempt + op.attemptDelta;
        const device = stage === 'on-device';
        if (!op.fresh && attempt === it.attempt && it.state !== 'done' && it.state !== 'ended' && (device ? it.state === 'preparing' || it.state === 'waiting' : it.state === 'on-device')) attempt--;
        if (attempt < 1) return this.step({ type: 'tick', time });
        if (op.op === 'prepared') this.step({ type: 'prepared', time, item: it.id, attempt, ...(op.measured === undefined ? {} : { latencyMs: op.measured }) });
        else if (op.op === 'deviceDone') this.step({ type: 'deviceDone', time, item: it.id, attempt, ...(op.measured === undefined ? {} : { busyMs: op.measured }) });
        else this.step({ type: op.op, time, item: it.id, attempt, reason: 'random failure' });
        return;
      }
      case 'cancel': {
        if (this.jobs.length === 0) return this.step({ type: 'tick', time });
        const j = this.jobs[op.pick % this.jobs.length] as MJob;
        this.step({ type: 'cancel', time, jobId: j.id });
        return;
      }
      case 'workerLost':
      case 'workerReturned': {
        const device = op.device % this.cfg.devices.length;
        const worker = op.worker % (this.cfg.devices[device] as number);
        this.step({ type: op.op, time, device, worker });
        return;
      }
      case 'memoryHeld':
        this.step({ type: 'memoryHeld', time, bytes: op.bytes });
        return;
      case 'tick':
        this.step({ type: 'tick', time });
        return;
    }
  }

  /** Applies one event to the model and the engine, walks the commands, checks the invariants. */
  step(event: EngineEvent): void {
    const t = event.time;
    // Keyed by job, not id: a job that expires in this step may be resubmitted under its id.
    const expected = new Map<MJob, Expected>();
    let lost: MItem | null = null;
    let lostHandled = false;

    // 1. What the event should do, by the model. First, deadlines that have passed end their jobs
    // before the event is handled: for the event, those jobs and their items are gone.
    const expiring = new Set(this.jobs.filter((j) => j.live && j.deadline <= t));
    for (const j of expiring) expected.set(j, { state: 'failed', code: 'E_DEADLINE' });
    const current = (id: number, attempt: number, state: MItem['state']): MItem | undefined => {
      const it = this.items.get(id);
      return it && !expiring.has(it.job) && it.state === state && it.attempt === attempt ? it : undefined;
    };
    const liveJob = (id: string): MJob | undefined => this.jobs.find((j) => j.live && !expiring.has(j) && j.id === id);
    switch (event.type) {
      case 'submit': {
        const existing = liveJob(event.job.id);
        if (existing) break; // identical resubmit: a no-op
        const spec = event.job as MJob['spec'];
        const reservation = Math.max(spec.memory.prepareBytes, spec.memory.deviceBytes);
        const job: MJob = {
          id: spec.id,
          spec,
          seq: this.seq++,
          rank: RANK[spec.priority],
          reservation,
          deviceBytes: spec.memory.deviceBytes,
          deadline: spec.deadline ?? Infinity,
          submittedAt: t,
          live: true,
          queued: reservation > this.cfg.budget ? [] : Array.from({ length: spec.partitions }, (_, p) => p),
          remaining: spec.partitions,
          finishes: 0,
          items: [],
        };
        this.jobs.push(job);
        // Oversize fails it in the submit; else a deadline already past fails it right after.
        if (reservation > this.cfg.budget) expected.set(job, { state: 'failed', code: 'E_OVERSIZE' });
        else if (job.deadline <= t) expected.set(job, { state: 'failed', code: 'E_DEADLINE' });
        break;
      }
      case 'cancel': {
        const j = liveJob(event.jobId);
        if (j) expected.set(j, { state: 'cancelled', code: 'E_CANCELLED' });
        break;
      }
      case 'prepared': {
        const it = current(event.item, event.attempt, 'preparing');
        if (it) {
          it.state = 'waiting';
          this.prepareCompletions++;
          const latency = event.latencyMs ?? t - it.startedAt;
          this.prepareLatency += latency;
          this.prepareLatencySq += latency * latency;
        }
        break;
      }
      case 'prepareFailed': {
        const it = current(event.item, event.attempt, 'preparing');
        if (it) expected.set(it.job, { state: 'failed', code: 'E_PREPARE_FAILED' });
        break;
      }
      case 'deviceDone': {
        const it = current(event.item, event.attempt, 'on-device');
        if (it) {
          const ms = event.busyMs ?? t - it.startedAt;
          this.deviceCompletions++;
          this.deviceBusy += ms;
          const d = this.perDevice[it.device]!;
          d.completions++;
          d.busyMs += ms;
          this.workers[it.device]![it.worker]!.item = null;
          this.retire(it, 'done');
          if (--it.job.remaining === 0) expected.set(it.job, { state: 'done', code: undefined });
        }
        break;
      }
      case 'deviceFailed': {
        const it = current(event.item, event.attempt, 'on-device');
        if (it) expected.set(it.job, { state: 'failed', code: 'E_DEVICE_FAILED' });
        break;
      }
      case 'workerLost': {
        const w = this.workers[event.device]![event.worker]!;
        if (w.alive) {
          w.alive = false;
          // An item of an expiring job is withdrawn by the deadline, not sent back.
          lost = w.item && !expiring.has(w.item.job) ? w.item : null;
        }
        break;
      }
      case 'workerReturned': {
        this.workers[event.device]![event.worker]!.alive = true;
        break;
      }
      case 'tick':
        // The timer fired (early, on time or late): the driver holds none until the engine sends one.
        this.wake = Infinity;
        break;
      case 'memoryHeld':
        this.held = event.bytes;
        this.heldMax = Math.max(this.heldMax, event.bytes);
        break;
    }

    // 2. The engine.
    const out: Command[] = this.e.apply(event);
    this.now = t;

    // 3. Every command, in order, against the model.
    for (const c of out) {
      switch (c.type) {
        case 'abort': {
          const it = this.items.get(c.item.id);
          check(it !== undefined, 'abort of an unknown item');
          const mi = it as MItem;
          if (mi === lost && !lostHandled) {
            // Back to the backlog under its own key, with all of its memory released.
            eq(c.stage, 'on-device', 'c.stage');
            eq(mi.state, 'on-device', 'mi.state');
            check(/lost/.test(c.reason), `abort for a lost worker says why: ${c.reason}`);
            this.workers[mi.device]![mi.worker]!.item = null;
            mi.state = 'queued';
            mi.device = -1;
            mi.worker = -1;
            mi.job.queued.push(mi.partition);
            mi.job.queued.sort((a, b) => a - b);
            this.requeued++;
            lostHandled = true;
          } else {
            eq(expected.has(mi.job), true, `abort of ${mi.job.id}:${mi.partition}, whose job is not ending`);
            check(mi.state !== 'queued', `abort of ${mi.job.id}:${mi.partition}, which is queued (nothing to stop)`);
            eq(c.stage, mi.state, 'c.stage');
            if (mi.state === 'on-device') this.workers[mi.device]![mi.worker]!.item = null;
            this.retire(mi, 'ended');
            mi.endedAs = expected.get(mi.job)!.state === 'cancelled' ? 'cancelled' : 'failed';
          }
          break;
        }
        case 'finishJob': {
          const j = this.jobs.find((x) => x.live && x.id === c.jobId);
          check(j !== undefined, `finishJob for ${c.jobId}, which is not live`);
          const job = j as MJob;
          eq(job.finishes, 0, 'job.finishes');
          const want = expected.get(job);
          check(want !== undefined && want.state === c.state && want.code === c.code, `${job.id} finished ${c.state}/${String(c.code)}, expected ${JSON.stringify(want)}`);
          eq(c.timeMs, t - job.submittedAt, 'c.timeMs');
          expected.delete(job);
          job.finishes++;
          job.live = false;
          job.queued = [];
          // A partition sent back to the backlog by a lost worker ends there, without an abort.
          for (const it of job.items) {
            if (it.state !== 'queued') continue;
            check(c.state !== 'done', `${job.id} finished done with ${job.id}:${it.partition} queued`);
            this.retire(it, 'ended');
            it.endedAs = c.state === 'cancelled' ? 'cancelled' : 'failed';
          }
          for (const it of job.items) {
            check(it.state === 'done' || it.state === 'ended', `${job.id}:${it.partition} still ${it.state} when its job finished`);
          }
          if (c.state === 'done') check(job.items.length === job.spec.partitions && job.items.every((it) => it.state === 'done'), `${job.id} finished done with partitions not done`);
          break;
        }
        case 'startPrepare': {
          const h = this.head();
          check(h !== undefined, 'startPrepare with nothing queued');
          const { job, partition } = h as { job: MJob; partition: number };
          // Key order: the dispatched item is the least key queued at this moment.
          eq(`${c.item.jobId}:${c.item.partition}`, `${job.id}:${partition}`, 'startPrepare out of key order');
          eq(c.item.reservedBytes, job.reservation, 'c.item.reservedBytes');
          eq(c.item.priority, job.spec.priority, 'c.item.priority');
          job.queued.shift();
          this.dispatched++;
          const again = job.items.find((i) => i.partition === partition);
          if (again) {
            // Sent back by a lost worker: the same item, prepared again with the next attempt.
            eq(again.state, 'queued', 'state of a partition dispatched again');
            eq(c.item.id, again.id, 'item id of a partition dispatched again');
            eq(c.attempt, again.attempt + 1, 'c.attempt (dispatched again)');
            eq(c.item.attempt, c.attempt, 'c.item.attempt');
            again.state = 'preparing';
            again.attempt = c.attempt;
            again.startedAt = t;
            break;
          }
          eq(c.attempt, 1, 'c.attempt');
          eq(c.item.attempt, 1, 'c.item.attempt');
          eq(this.items.has(c.item.id), false, 'startPrepare of an item id already seen');
          const mi: MItem = { id: c.item.id, job, partition, state: 'preparing', attempt: 1, device: -1, worker: -1, startedAt: t, endedAs: null, view: c.item };
          job.items.push(mi);
          this.items.set(mi.id, mi);
          this.live.add(mi);
          break;
        }
        case 'startDevice': {
          const mi = this.items.get(c.item.id) as MItem;
          eq(mi.state, 'waiting', 'mi.state');
          // Devices take waiting items in key order.
          for (const other of this.itemsIn('waiting')) {
            eq(modelLess(keyOf(other.job, other.partition), keyOf(mi.job, mi.partition)), false, 'a waiting item with a smaller key was passed over');
          }
          eq(c.attempt, mi.attempt + 1, 'c.attempt');
          const w = this.workers[c.device]?.[c.worker];
          check(w !== undefined, 'startDevice on a worker that does not exist');
          eq(w!.alive, true, 'startDevice on a lost worker');
          check(w!.item === null, 'startDevice on a busy worker');
          w!.item = mi;
          mi.state = 'on-device';
          mi.attempt = c.attempt;
          mi.device = c.device;
          mi.worker = c.worker;
          mi.startedAt = t;
          break;
        }
        case 'wakeAt':
          check(c.time !== this.wake, 'wakeAt re-sent unchanged'); // only sent when it changes
          this.wake = c.time;
          break;
      }
    }
    check(expected.size === 0, `jobs that should have finished in this step: ${[...expected.keys()].map((j) => j.id).join(', ')}`);
    if (lost) eq(lostHandled, true, 'a lost worker’s item was not aborted');

    this.checkInvariants();
  }

  checkInvariants(): void {
    const e = this.e;
    const s = e.snapshot;
    const b = e.budget;
    // Memory: what is held counts against the budget (a grant never takes held bytes).
    eq(b.held, this.held, 'budget.held');
    eq(b.free, this.cfg.budget - b.used - this.held, 'budget.free');
    check(b.used <= this.cfg.budget, `budget used ${b.used} > ${this.cfg.budget}`);
    let expectedBytes = 0;
    let reservedViews = 0;
    for (const mi of [...this.live, ...this.retired]) {
      // Queued (sent back by a lost worker), done or ended: nothing.
      const want = mi.state === 'preparing' || mi.state === 'waiting' ? mi.job.reservation : mi.state === 'on-device' ? mi.job.deviceBytes : 0;
      eq(mi.view.reservedBytes, want, `reservedBytes of ${mi.job.id}:${mi.partition} (${mi.state})`);
      eq(mi.view.state, mi.state === 'ended' ? mi.endedAs : mi.state, 'item state');
      expectedBytes += want;
      reservedViews += mi.view.reservedBytes;
    }
    this.retired = [];
    eq(b.used, expectedBytes, 'budget.used vs the model');
    eq(b.used, reservedViews, 'budget.used vs the sum of reservedBytes');
    eq(s.budgetUsedBytes, b.used, 'snapshot.budgetUsedBytes');

    // Counters.
    const backlog = this.jobs.reduce((n, j) => n + (j.live ? j.queued.length : 0), 0);
    const preparing = this.itemsIn('preparing');
    eq(s.backlog, backlog, 's.backlog');
    for (const k of s.kinds) eq(k.queued ?? NaN, this.jobs.reduce((n, j) => n + (j.live && j.spec.kind === k.name ? j.queued.length : 0), 0), `kinds[${k.name}].queued`);
    eq(s.preparing, preparing.length, 's.preparing');
    eq(s.waiting, this.itemsIn('waiting').length, 's.waiting');
    eq(s.onDevice, this.itemsIn('on-device').length, 's.onDevice');
    eq(s.dispatched, this.dispatched, 's.dispatched');
    eq(s.prepareCompletions, this.prepareCompletions, 's.prepareCompletions');
    expectNear(s.prepareLatencyMsTotal, this.prepareLatency, 'prepareLatencyMsTotal');
    expectNear(s.prepareLatencySqTotal, this.prepareLatencySq, 'prepareLatencySqTotal');
    expectNear(s.preparingStartMsTotal, preparing.reduce((n, i) => n + i.startedAt, 0), 'preparingStartMsTotal');
    eq(s.deviceCompletions, this.deviceCompletions, 's.deviceCompletions');
    expectNear(s.deviceBusyMs, this.deviceBusy, 'deviceBusyMs');
    eq(e.activeJobs, this.liveJobs().length, 'e.activeJobs');
    const sum = (f: (k: (typeof s.kinds)[number]) => number) => s.kinds.reduce((n, k) => n + f(k), 0);
    eq(sum((k) => k.preparing), s.preparing, 'Σ kinds.preparing');
    eq(sum((k) => k.waiting), s.waiting, 'Σ kinds.waiting');
    eq(sum((k) => k.onDevice), s.onDevice, 'Σ kinds.onDevice');
    s.devices.forEach((dc, d) => eq(sum((k) => k.completions[d] ?? NaN), dc.completions, `Σ kinds.completions[${d}]`));
    let alive = 0;
    this.workers.forEach((ws, d) => {
      const dc = s.devices[d]!;
      eq(dc.workers, ws.filter((w) => w.alive).length, 'dc.workers');
      eq(dc.busy, ws.filter((w) => w.item !== null).length, 'dc.busy');
      eq(dc.completions, this.perDevice[d]!.completions, 'dc.completions');
      expectNear(dc.busyMs, this.perDevice[d]!.busyMs, `devices[${d}].busyMs`);
      alive += dc.workers;
      // Devices are fed eagerly: no alive idle worker while something waits — up to the pacer's
      // limit on the workers to run at once (the stoker pacer's, where fewer finish more: the
      // random busy times here can show that), and at least one.
      const limit = e.pacer.workerLimit?.(d) ?? Infinity;
      const usable = limit >= 1 ? Math.min(dc.workers, Math.floor(limit)) : Number.isNaN(limit) ? dc.workers : 1;
      if (s.waiting > 0) check(dc.busy >= usable, `device ${d} has an idle worker while items wait (${dc.busy} busy of ${dc.workers}, the pacer's limit ${limit})`);
    });
    eq(s.workers, alive, 's.workers');

    // No starvation: work queued, preparation slots free and the pacer willing ⇒ only memory can hold it back.
    const h = this.head();
    const pacerNext = e.pacer.nextDispatchAt(s);
    const pacerAllows = pacerNext <= this.now;
    const canPrepare = s.preparing < this.cfg.maxPreparing;
    if (h && canPrepare && pacerAllows) {
      check(b.free < h.job.reservation, 'the head fits in free memory, yet nothing was dispatched');
    }
    eq(s.budgetBlocked, !!h && canPrepare && pacerAllows && b.free < h.job.reservation, 's.budgetBlocked');

    // Timers: always in the future, never later than the next deadline, and there whenever the
    // pacer waits for a time (no stall with work queued).
    check(this.wake > this.now, `wake ${this.wake} not after now ${this.now}`);
    if (h && canPrepare && !s.budgetBlocked && pacerNext > this.now && Number.isFinite(pacerNext)) check(this.wake <= pacerNext, `wake ${this.wake} after the pacer's next dispatch ${pacerNext}`);
    const nextDeadline = Math.min(...this.liveJobs().map((j) => j.deadline));
    check(this.wake <= nextDeadline, `wake ${this.wake} after the next deadline ${nextDeadline}`);
  }

  /** Brings every worker back, lets go of held memory, and completes everything, ticking at the times asked for. */
  drain(): void {
    if (this.held > 0) this.step({ type: 'memoryHeld', time: this.now, bytes: 0 });
    this.workers.forEach((ws, device) =>
      ws.forEach((w, worker) => {
        if (!w.alive) this.step({ type: 'workerReturned', time: this.now, device, worker });
      }),
    );
    for (let iter = 0; iter < 5000 && this.liveJobs().length > 0; iter++) {
      const t = Math.max(this.now + 1000, Number.isFinite(this.wake) ? this.wake : 0);
      this.step({ type: 'tick', time: t });
      for (const it of this.itemsIn('preparing')) if (it.state === 'preparing') this.step({ type: 'prepared', time: this.now, item: it.id, attempt: it.attempt });
      for (const it of this.itemsIn('on-device')) if (it.state === 'on-device') this.step({ type: 'deviceDone', time: this.now + 10, item: it.id, attempt: it.attempt });
    }
  }
}

describe('Engine properties (random operation sequences against a model)', () => {
  it('keeps every invariant after every step, and releases everything once all work is done', () => {
    fc.assert(
      fc.property(configArb, fc.array(opArb, { minLength: 1, maxLength: 80, size: 'max' }), (cfg, ops) => {
        const h = new Harness(cfg);
        for (const op of ops) h.run(op);
        h.drain();
        expect(h.liveJobs()).toEqual([]);
        for (const j of h.jobs) expect(j.finishes, `job ${j.id} finished ${j.finishes} times`).toBe(1);
        expect(h.e.budget.used).toBe(0);
        expect(h.e.activeJobs).toBe(0);
        expect(h.e.snapshot).toMatchObject({ waiting: 0, preparing: 0, onDevice: 0, backlog: 0, budgetUsedBytes: 0 });
        expectNear(h.e.snapshot.preparingStartMsTotal, 0, 'preparingStartMsTotal');
        // The peak counts held bytes too, which the driver may hold beyond the budget (grants never do).
        expect(h.e.budget.peak).toBeLessThanOrEqual(cfg.budget + h.heldMax);
      }),
      RUNS,
    );
  });

  it('without failures, cancels or deadlines, every job ends done and every partition completes on a device exactly once', () => {
    const calm = fc.oneof(
      { weight: 2, arbitrary: fc.record({ op: fc.constant('submit' as const), dt, job: jobArb.map((j) => ({ ...j, deadlineIn: undefined })) }) },
      { weight: 3, arbitrary: itemOp('prepared').map((o) => ({ ...o, fresh: true })) },
      { weight: 3, arbitrary: itemOp('deviceDone').map((o) => ({ ...o, fresh: true })) },
      { weight: 1, arbitrary: fc.record({ op: fc.constantFrom('workerLost' as const, 'workerReturned' as const), dt, device: fc.nat(), worker: fc.nat() }) },
    );
    fc.assert(
      fc.property(configArb, fc.array(calm, { minLength: 1, maxLength: 60, size: 'max' }), (cfg, ops) => {
        const h = new Harness(cfg);
        for (const op of ops) h.run(op);
        h.drain();
        let partitions = 0;
        for (const j of h.jobs) {
          if (j.reservation > cfg.budget) continue; // oversize: failed at once
          partitions += j.spec.partitions;
          expect(j.items.map((i) => i.state)).toEqual(Array(j.spec.partitions).fill('done'));
        }
        expect(h.e.snapshot.deviceCompletions).toBe(partitions);
        // Once per partition, and once more each time a lost worker sent one back to be prepared again.
        expect(h.e.snapshot.dispatched).toBe(partitions + h.requeued);
      }),
      RUNS,
    );
  });
});

describe('PartitionQueue properties', () => {
  interface N extends KeyedNode {
    id: number;
  }

  type QOp = { op: 'push'; rank: number; seq: number; partition: number } | { op: 'pop' } | { op: 'remove'; pick: number } | { op: 'removeStranger'; pick: number };

  const qop: fc.Arbitrary<QOp> = fc.oneof(
    { weight: 4, arbitrary: fc.record({ op: fc.constant('push' as const), rank: fc.integer({ min: 0, max: 3 }), seq: fc.integer({ min: 0, max: 6 }), partition: fc.integer({ min: 0, max: 6 }) }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('pop' as const) }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('remove' as const), pick: fc.nat() }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('removeStranger' as const), pick: fc.nat() }) },
  );

  const cmp = (a: N, b: N) => a.rank - b.rank || a.seq - b.seq || a.partition - b.partition;

  it('behaves like a sorted array with unique (seq, partition) keys', () => {
    fc.assert(
      fc.property(fc.array(qop, { maxLength: 200, size: 'max' }), (ops) => {
        const q = new PartitionQueue<N>();
        let model: N[] = [];
        let nextId = 0;
        // A job sequence has one rank, as in the engine.
        const rankOf = new Map<number, number>();
        for (const o of ops) {
          if (o.op === 'push') {
            const rank = rankOf.get(o.seq) ?? o.rank;
            rankOf.set(o.seq, rank);
            const n: N = { id: nextId++, rank, seq: o.seq, partition: o.partition, heapIndex: -1 };
            const dup = model.some((m) => m.seq === n.seq && m.partition === n.partition);
            if (dup) {
              expect(() => q.push(n)).toThrow(expect.objectContaining({ code: 'E_DUPLICATE_KEY' }));
              expect(n.heapIndex).toBe(-1);
            } else {
              q.push(n);
              model.push(n);
              model.sort(cmp);
            }
          } else if (o.op === 'pop') {
            const got = q.pop();
            expect(got).toBe(model.shift());
            if (got) expect(got.heapIndex).toBe(-1);
          } else if (o.op === 'remove') {
            if (model.length === 0) continue;
            const victim = model[o.pick % model.length] as N;
            expect(q.remove(victim)).toBe(true);
            expect(victim.heapIndex).toBe(-1);
            model = model.filter((m) => m !== victim);
          } else {
            const stranger: N = { id: -1, rank: 0, seq: o.pick % 7, partition: 0, heapIndex: o.pick % 5 };
            expect(q.remove(stranger)).toBe(false);
          }
          expect(q.size).toBe(model.length);
          expect(q.peek()).toBe(model[0]);
        }
      }),
      RUNS,
    );
  });
});

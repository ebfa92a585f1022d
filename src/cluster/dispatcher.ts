import { Redis } from 'ioredis';
import type { Job, Worker } from 'bullmq';
import { totalBusyMs, windowOccupancy } from '../core/index.js';
import type { JobView } from '../server/api.js';
import { ServiceError } from '../server/errors.js';
import { isFinal } from '../server/progress.js';
import type { Service, ServiceEvent } from '../server/service.js';
import { failure, K, shareOutput, sharedOutput, writeResult, type JobData, type RunningRecord, type StoredResult } from './keys.js';

/** What the dispatcher uses of this node's local service. */
export type LocalNode = Pick<Service, 'counters' | 'submitRecord' | 'job' | 'cancel' | 'events' | 'workerBusyMs' | 'workerStates' | 'pacerState'>;

export interface DispatcherOptions {
  nodeId: string;
  /** This node's hold on its name (K.claim), renewed with each heartbeat. */
  claim: string;
  /** cluster.lockMs: a held job's lock, renewed every third of it. */
  lockMs: number;
  /** cluster.heartbeatMs: between this node's heartbeats. */
  heartbeatMs: number;
  /** How long a finished job's bookkeeping lives (server.resultTtlS), ms. */
  ttlMs: number;
  /** The most jobs held at once. */
  maxHeld: number;
  /** The end of a job a node republished (its queue's copy is from before Redis went back in time), else undefined: see Recovery.endedElsewhere. */
  endedElsewhere(id: string): Promise<JobView | undefined>;
  /** Before a write that records an end and advances this node's clock in Redis: what takes its reading (see Recovery.clockWrite). */
  clockWrite(): (clock: number) => void;
  /** Jobs taken that wait in endedElsewhere for a data loss to settle. */
  takesWaiting(): number;
  /** A line for the server's log (a job this node failed as it took it). */
  log(line: string): void;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The pull loop's recheck of a node that does not want a job, when no local event came first. */
const RECHECK_MS = 50;
/** How long a node whose journal is full stops pulling before it tries again. */
const FULL_PAUSE_MS = 5000;
/** How long an idle node waits before it asks its queues again when no job-added message woke it (jobs returned by the stalled check announce nothing). */
const IDLE_RECHECK_MS = 1000;

/**
 * A node's dispatcher: it pulls the next job of its kinds from the cluster's queues only when
 * the local engine wants one, runs it on the local service, keeps its lock, records its outcome
 * exactly once, shares its finished partitions (a node that takes the job over runs only the
 * rest), and writes the node's heartbeat.
 */
export class Dispatcher {
  /** The jobs this node holds, by id. */
  readonly held = new Map<string, { job: Job<JobData>; token: string; startedAt: number }>();
  private readonly holds = new Set<Promise<void>>();
  /** The order the pull loop asks the kinds' queues in (rotated after each take). */
  private pullOrder: string[] = [];
  /** Resolves the pull loop's wait for a local change (set while it waits). */
  private wake: (() => void) | undefined;
  private readonly onLocalEvent = () => this.wake?.();
  private closing = false;
  private pulling: Promise<void> | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  /** When the oldest heartbeat still waiting for Redis's answer was sent (performance.now()), else undefined. */
  private unanswered: number | undefined;
  private lastBusy = { t: performance.now(), busyS: 0 };
  private tokens = 0;
  /** Until then this node pulls nothing: its journal was full (see hold). */
  private fullUntil = 0;
  private url = '';

  constructor(
    private readonly local: LocalNode,
    private readonly redis: Redis,
    /** The kinds this node runs: a BullMQ worker on each one's queue. */
    private readonly workers: ReadonlyMap<string, Worker<JobData>>,
    private readonly o: DispatcherOptions,
  ) {}

  /** Starts the heartbeat and the pull loop; `url` is this node's API, as the heartbeat tells the others. */
  start(url: string): void {
    this.url = url;
    // (The workers open once Redis answers, after this dispatcher is made.)
    this.pullOrder = [...this.workers.keys()];
    const t = performance.now();
    this.lastBusy = { t, busyS: this.busyS(t) };
    void this.beat();
    this.heartbeat = setInterval(() => void this.beat(), this.o.heartbeatMs);
    this.local.events.on('event', this.onLocalEvent);
    this.pulling = this.pullLoop();
  }

  /** A job of one of this node's kinds was queued: the pull loop looks at once. */
  wakeUp(): void {
    this.wake?.();
  }

  /** Stops taking jobs: the pull loop ends at its next step. */
  stop(): void {
    this.closing = true;
    this.wake?.();
  }

  /** After {@link stop}: waits for the pull loop, stops the heartbeat and takes this node out of the cluster's list. */
  async leave(): Promise<void> {
    await this.pulling;
    this.local.events.off('event', this.onLocalEvent);
    if (this.heartbeat) clearInterval(this.heartbeat);
    await this.redis.multi().del(K.node(this.o.nodeId)).del(K.claim(this.o.nodeId)).srem(K.nodes, this.o.nodeId).exec().catch(() => undefined);
  }

  /** Resolves once every held job's outcome is recorded (or given back). */
  settled(): Promise<unknown> {
    return Promise.allSettled([...this.holds]);
  }

  /** The engine wants another job: nothing queued locally, the budget not blocking, room to hold one. */
  private wantsJob(): boolean {
    const s = this.local.counters;
    // (Not while a job taken waits for a data loss to settle: the pull loop took every job in reach meanwhile.)
    return this.o.takesWaiting() === 0 && s.backlog === 0 && !s.budgetBlocked && this.held.size < this.o.maxHeld && Date.now() >= this.fullUntil;
  }

  /**
   * Until the engine wants a job it waits for a local change: a job event (a partition started,
   * finished…), a held job ending, or at most {@link RECHECK_MS} (the backlog also shrinks
   * without an event, when a job's later partitions start). Then it asks the queues of its kinds
   * in turn (the one it took from last goes to the back); when all are empty it waits for a
   * job-added message of one of its kinds (published by the submitting node: it wakes at once) or
   * {@link IDLE_RECHECK_MS}.
   */
  private async pullLoop(): Promise<void> {
    while (!this.closing) {
      if (!this.wantsJob()) {
        await this.localChange(RECHECK_MS);
        continue;
      }
      const token = `${this.o.nodeId}:${++this.tokens}`;
      let job: Job<JobData> | undefined;
      try {
        for (const kind of this.pullOrder) {
          job = await (this.workers.get(kind) as Worker<JobData>).getNextJob(token, { block: false });
          if (job) {
            this.pullOrder = [...this.pullOrder.filter((k) => k !== kind), kind];
            break;
          }
        }
      } catch {
        await sleep(250);
        continue;
      }
      if (this.closing && !job) return;
      if (!job) {
        await this.localChange(IDLE_RECHECK_MS);
        continue;
      }
      if (this.closing) {
        await job.moveToWait(token).catch(() => undefined);
        return;
      }
      const p = this.hold(job, token).catch(() => undefined);
      this.holds.add(p);
      void p.finally(() => this.holds.delete(p));
    }
  }

  /** Runs a pulled job on the local service, keeps its lock, records the outcome exactly once. */
  private async hold(job: Job<JobData>, token: string): Promise<void> {
    const r = job.data.record;
    const id = r.id;
    const startedAt = Date.now();
    this.held.set(id, { job, token, startedAt });
    const lockMs = this.o.lockMs;
    // The running record lives as long as the lock: renewed with it, never written again here (a
    // node that stalled past its lock does not claim back a job another holds; after a data loss
    // Recovery's sweep writes it anew, see markHeld).
    const renew = setInterval(() => {
      void job.extendLock(token, lockMs).catch(() => undefined);
      void this.redis.pexpire(K.running(id), lockMs).catch(() => undefined);
    }, Math.max(50, Math.floor(lockMs / 3)));
    try {
      let ended: Promise<JobView | undefined>;
      // It ended on a node since the snapshot Redis went back to: that end, not a second run.
      const before = await this.o.endedElsewhere(id);
      // (A stop meanwhile: the job goes back for another node, not failed for good.)
      if (this.closing) {
        await job.moveToWait(token).catch(() => undefined);
        return;
      }
      if (before) {
        await this.endIn(job, before, token);
        await this.redis.multi().del(K.outputs(id)).pexpire(K.kindOf(id), this.o.ttlMs).exec();
        return;
      }
      // Its deadline passed while it was queued: it ends as a missed deadline (the local service refuses a past one).
      if (r.deadline !== null && r.deadline <= Date.now()) {
        await job.moveToFailed(failure('E_DEADLINE', `job ${id} missed its deadline ${new Date(r.deadline).toISOString()}`), token, false);
        return;
      }
      // Partitions another node finished before it died: they do not run again.
      const recorded = new Map<number, unknown>();
      try {
        for (const [p, text] of Object.entries(await this.redis.hgetall(K.outputs(id)))) recorded.set(Number(p), sharedOutput(text));
      } catch {
        // Redis away or an output unreadable: the job runs whole.
        recorded.clear();
      }
      try {
        // Synchronous: the engine's backlog counts it before the pull loop looks again.
        const { job: started } = this.local.submitRecord(r, recorded);
        // (Its result whole: a view leaves one over 1 MiB out, and what is stored here is what every node reads.)
        ended = isFinal(started.state) ? Promise.resolve(this.local.job(id, undefined, true)) : this.localEnd(id);
      } catch (e) {
        const err = e instanceof ServiceError ? e : undefined;
        if (err?.status === 507) {
          // This node's journal is full: the job goes back for another node, and this one stops pulling a while.
          this.fullUntil = Date.now() + FULL_PAUSE_MS;
          await job.moveToWait(token).catch(() => undefined);
          return;
        }
        // Shutting down: back for another node (a job failed E_SHUTTING_DOWN was failed for good).
        if (err?.status === 503) {
          await job.moveToWait(token).catch(() => undefined);
          return;
        }
        // This node refuses it (its module of the kind, another version than the one that accepted
        // it: a deploy tightened the schema; or its limits): said as that, not as an internal error,
        // and logged — it failed E_INTERNAL without a word, the node's counts not showing it.
        const refused = err?.status === 400;
        const code = refused ? 'E_INVALID_JOB' : 'E_INTERNAL';
        const reason = refused ? `node ${this.o.nodeId} refuses it as it takes it (the job as kind ${r.kind}'s module there reads it — its input, the partitions it makes of it, its limits — which the accepting node could not check where it does not run the kind, or another version of the module accepted): ${(e as Error).message} — submit it again, under another id, with what this node takes` : (e as Error).message;
        this.o.log(`job ${id} failed as this node took it: ${code}: ${reason}`);
        await job.moveToFailed(failure(code, reason), token, false);
        return;
      }
      void this.redis.set(K.holder(id), this.o.nodeId, 'PX', this.o.ttlMs).catch(() => undefined);
      void this.markRunning(id).catch(() => undefined);
      if ((await this.redis.exists(K.cancelRequest(id))) === 1) this.cancelLocal(id);
      const v = await ended;
      if (!v || !isFinal(v.state)) {
        // Shutdown cut it short: back to the queue for another node (or the lock expires).
        await this.redis.multi().del(K.running(id)).srem(K.runningIndex, id).exec().catch(() => undefined);
        await job.moveToWait(token).catch(() => undefined);
        return;
      }
      try {
        await this.endIn(job, v, token);
        if (v.state === 'done') {
          // Both live as long as BullMQ keeps the completed job (removeOnComplete: resultTtlS).
          // (The clock with it: Redis restored from a snapshot taken before this end is seen even where no sweep came between.)
          const clockRead = this.o.clockWrite();
          const r = await this.redis.multi().incr(K.completions(id)).pexpire(K.completions(id), this.o.ttlMs).pexpire(K.holder(id), this.o.ttlMs).pexpire(K.kindOf(id), this.o.ttlMs).del(K.outputs(id)).del(K.running(id)).srem(K.runningIndex, id).hincrby(K.clock, this.o.nodeId, 1).exec();
          clockRead(Number(r?.[7]?.[1]));
        } else {
          const m = this.redis.multi().pexpire(K.holder(id), this.o.ttlMs).pexpire(K.kindOf(id), this.o.ttlMs).del(K.outputs(id)).del(K.running(id)).srem(K.runningIndex, id);
          await (v.state === 'cancelled' ? m.del(K.cancelRequest(id)) : m).exec();
        }
      } catch {
        // Redis lost the job while this node ran it (a restart without persistence): its outcome
        // is published as a republished result is. Otherwise the lock was lost (this node stalled
        // past cluster.lockMs): another node holds the job now and records its outcome; this one
        // records nothing.
        if ((await job.getState().catch(() => 'away')) === 'unknown') await this.publishLost(v).catch(() => undefined);
      }
    } finally {
      clearInterval(renew);
      this.held.delete(id);
      this.wake?.();
    }
  }

  /** Moves a held job to the end a view gives: completed with its result, or failed with its error. */
  private async endIn(job: Job<JobData>, v: JobView, token: string): Promise<void> {
    if (v.state === 'done') {
      const stored: StoredResult = v.resultEncoding ? { result: v.result, encoding: v.resultEncoding } : { result: v.result };
      await job.moveToCompleted(stored, token, false);
    } else await job.moveToFailed(failure(v.error?.code ?? 'E_INTERNAL', v.error?.reason ?? ''), token, false);
  }

  /**
   * Says in Redis that this node runs a held job (K.running, for cluster.lockMs): after a Redis
   * data loss it keeps the accepting node from queueing the job again while it runs here.
   */
  private async markRunning(id: string): Promise<void> {
    const h = this.held.get(id);
    if (!h) return;
    const rec: RunningRecord = { data: h.job.data, node: this.o.nodeId, startedAt: h.startedAt };
    await this.redis.multi().set(K.running(id), JSON.stringify(rec), 'PX', this.o.lockMs).sadd(K.runningIndex, id).exec();
  }

  /** After a Redis data loss: says at once that this node runs its held jobs (Recovery's sweep, before any node queues lost jobs again). */
  async markHeld(): Promise<void> {
    for (const id of [...this.held.keys()]) await this.markRunning(id);
  }

  /** The outcome of a job Redis lost while this node ran it, readable from every node (as Recovery republishes one). */
  private async publishLost(v: JobView): Promise<void> {
    const ttl = this.o.ttlMs;
    const m = writeResult(this.redis.multi(), { ...v, node: this.o.nodeId }, ttl).del(K.running(v.id)).srem(K.runningIndex, v.id).del(K.outputs(v.id)).del(K.cancelRequest(v.id));
    await (v.state === 'done' ? m.incr(K.completions(v.id)).pexpire(K.completions(v.id), ttl) : m).exec();
    const clockRead = this.o.clockWrite();
    clockRead(await this.redis.hincrby(K.clock, this.o.nodeId, 1));
  }

  /** Resolves on the next local job event, held job ending or close, or after `ms`. */
  private localChange(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.wake = undefined;
        resolve();
      };
      const t = setTimeout(done, ms);
      this.wake = done;
    });
  }

  /** Shares a held job's finished partition (fire and forget: an output Redis misses is run again on takeover). */
  share(id: string, partition: number, output: unknown): void {
    if (!this.held.has(id)) return;
    const text = shareOutput(output);
    if (text === undefined) return;
    void this.redis.multi().hset(K.outputs(id), String(partition), text).pexpire(K.outputs(id), this.o.ttlMs).exec().catch(() => undefined);
  }

  /** Cancels a job this node holds (a cancel asked on another node). */
  cancelHeld(id: string): void {
    if (this.held.has(id)) this.cancelLocal(id);
  }

  private cancelLocal(id: string): void {
    try {
      this.local.cancel(id);
    } catch {
      // already ended
    }
  }

  /** The local job's final view, or undefined when the local service closes first. */
  private localEnd(id: string): Promise<JobView | undefined> {
    return new Promise((resolve) => {
      const onEvent = (e: ServiceEvent) => {
        if (e['id'] !== id || (e.type !== 'job.done' && e.type !== 'job.failed' && e.type !== 'job.cancelled')) return;
        cleanup();
        resolve(this.local.job(id, undefined, true));
      };
      const onClose = () => {
        cleanup();
        resolve(undefined);
      };
      const cleanup = () => {
        this.local.events.off('event', onEvent);
        this.local.events.off('close', onClose);
      };
      this.local.events.on('event', onEvent);
      this.local.events.once('close', onClose);
    });
  }

  /** Busy seconds of all the node's workers up to `at` (performance.now() ms), running partitions included. */
  private busyS(at: number): number {
    return totalBusyMs(this.local.workerBusyMs(at)) / 1000;
  }

  private async beat(): Promise<void> {
    if (this.closing) return;
    const now = performance.now();
    const busyS = this.busyS(now);
    const workers = this.local.workerStates().reduce((a, ws) => a + ws.length, 0);
    const dt = (now - this.lastBusy.t) / 1000;
    // At most 1 without clamping: the meter gives no window more busy time than its length.
    const occupancy = windowOccupancy(busyS - this.lastBusy.busyS, dt, workers);
    this.lastBusy = { t: now, busyS };
    const counters = this.local.counters;
    const pacer = this.local.pacerState();
    const key = K.node(this.o.nodeId);
    // (Since when a beat has waited for Redis's answer: a Redis that does not answer — frozen, its
    // connection up — read ready while every API call got 503.)
    this.unanswered ??= now;
    try {
      await this.redis
        .multi()
        .hset(key, {
          nodeId: this.o.nodeId,
          url: this.url,
          capacity: pacer.ratePerSec ?? '',
          occupancy: occupancy.toFixed(4),
          pacerMode: pacer.mode,
          inFlight: counters.preparing + counters.waiting + counters.onDevice,
          jobsHeld: this.held.size,
          workers,
          busyS: busyS.toFixed(3),
          kinds: [...this.workers.keys()].join(','),
          updatedAt: new Date().toISOString(),
        })
        .pexpire(key, this.o.heartbeatMs * 3)
        .set(K.claim(this.o.nodeId), this.o.claim, 'PX', this.o.heartbeatMs * 3)
        .sadd(K.nodes, this.o.nodeId)
        .exec();
      this.unanswered = undefined;
    } catch {
      // Redis away: the next beat tries again
    }
  }

  /** How long (ms) this node's heartbeat has waited for Redis to answer (0: it answered the last one). */
  waitingForRedisMs(now = performance.now()): number {
    return this.unanswered === undefined ? 0 : now - this.unanswered;
  }
}

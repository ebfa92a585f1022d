import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { jobView, type JobView } from '../server/api.js';
import { Journal, type JournalJobInput } from '../server/journal.js';
import { isFinal } from '../server/progress.js';
import type { Service } from '../server/service.js';
import { acceptedData, acceptedRecord, bullId, BULL_PRIORITY, K, writeCancelled, writeResult, type CancelledRecord, type JobData } from './keys.js';
import { NodeClock } from './node-clock.js';
import type { ClusterViews } from './views.js';

/** The most accepted jobs one sweep looks at (the oldest first). */
const SWEEP_MAX = 500;
/** After a Redis data loss, how long before jobs it lost are queued again (see Recovery.lostAt): two sweeps of every node. */
const REQUEUE_AFTER_LOSS_MS = 4000;
/** Between two looks at whether a data loss is settled, in endedElsewhere. */
const SETTLE_POLL_MS = 250;
/** Replaces the dataset mark (K.epoch) only where it is still the one given: of two nodes that saw Redis go back in time, one makes the new dataset. */
const SWAP_EPOCH = "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[1], ARGV[2]) return 1 end return 0";

/** What the sweep uses. */
export interface RecoverySources {
  redis: Redis;
  /** This node's journal of the submissions it acknowledged. */
  accepted: Journal;
  views: ClusterViews;
  queueOf(kind: string): Queue<JobData>;
  /** Enters this node's kinds in the registry (again, after a data loss). */
  register(): Promise<void>;
  /** Says in Redis that this node runs the jobs it holds (after a data loss, see Dispatcher.markHeld). */
  markHeld(): Promise<void>;
  local: Pick<Service, 'jobs' | 'job'>;
  nodeId: string;
  dataDir: string;
  ttlMs: number;
  closing(): boolean;
  /** Says what a Redis data loss made this node do (a line for the server's log). */
  log(line: string): void;
}

/**
 * What keeps a cluster's jobs through a Redis data loss (a restart without persistence): each
 * node keeps the submissions it acknowledged until their jobs end and queues again those Redis
 * no longer has, and republishes the results of the jobs it ran.
 */
export class Recovery {
  /**
   * The Redis dataset this node last republished its results to (K.epoch, kept in
   * `<dataDir>/cluster-epoch` across restarts); another value, or none, means Redis lost its data.
   * The dataset this node republished to before it last stopped, not the current one: a node
   * killed after Redis lost its data but before its sweep republished would otherwise take the
   * new dataset as seen, and the results only its journal holds would stay unknown for good.
   */
  private epoch: string | null;
  private sweeping: Promise<void> | undefined;
  /**
   * When this node saw Redis lose its data (performance.now(); NaN: not since it started). Jobs
   * Redis no longer has are queued again only REQUEUE_AFTER_LOSS_MS later: by then every live
   * node's own sweep has republished the jobs it ran, and one that ended just before the loss is
   * found ended, not run again (a job done on one node ran again on another when the accepting
   * node's sweep came first).
   */
  private lostAt = NaN;
  /**
   * This node's count in Redis's clock (K.clock, a field per node that only the node advances:
   * every sweep, every job it takes, every end it records), kept in `<dataDir>/cluster-clock`
   * across restarts. A read not above it means Redis went back in time: it restarted from an older
   * snapshot (an RDB file, the default persistence), where jobs that ended since are queued or
   * running again — the same dataset mark, so no loss was seen, and those jobs ran again (44 of 92
   * partitions in a trial).
   */
  private readonly clock: NodeClock;
  /** The dataset changed because Redis went back in time (not emptied): copies not ended there are older than this node's ends. */
  private backInTime = false;
  /** The clock's reading that showed Redis gone back in time, while the new dataset mark is not made (see markBack); null: none. */
  private unmarked: number | null = null;
  /** Jobs taken that wait in endedElsewhere for the loss to settle (the dispatcher takes no more meanwhile). */
  waiting = 0;

  constructor(private readonly d: RecoverySources) {
    this.epoch = this.savedEpoch();
    // ("<node> <count>": a data dir started under another node name has no reading of that name's count.)
    const [node, count] = this.readFile(this.clockFile).split(' ');
    this.clock = new NodeClock(node === d.nodeId ? Number(count) || 0 : 0);
  }

  /**
   * Whether a job Redis does not know may be one a node is about to republish: Redis lost its data
   * and not every node's sweep may have republished yet — this node saw the loss less than
   * REQUEUE_AFTER_LOSS_MS ago, or has not seen it yet (Redis holds another dataset than the one
   * it knows). A read of such a job is not a 404 then: finished jobs read as never submitted for
   * a second or two after Redis restarted empty (a user trial), and `stoker wait` gave up.
   */
  async unsettled(): Promise<boolean> {
    if (this.unmarked !== null || performance.now() - this.lostAt < REQUEUE_AFTER_LOSS_MS) return true;
    return this.epoch !== null && (await this.d.redis.get(K.epoch)) !== this.epoch;
  }

  /**
   * Before a node runs a job it took from a queue: the job's end where a node republished it, or
   * its cancel (the queue's copy is from before Redis went back in time: the job ended since),
   * else undefined (run it). Advances this node's clock first — Redis just restored from an older
   * snapshot is noticed here, not a sweep later — and while a data loss is not settled waits for
   * the nodes to republish (at most REQUEUE_AFTER_LOSS_MS and a little). Redis away, the commands
   * wait for it (the connection queues them); one that fails: undefined.
   */
  async endedElsewhere(id: string): Promise<JobView | undefined> {
    try {
      const ticket = this.clock.send();
      const first = await this.readAll(id);
      const [clock, epoch] = first;
      const reading = this.clock.read(clock, ticket);
      if (reading === 'back') {
        await this.markBack(clock);
        void this.sweep();
      }
      // (Stale: read before Redis went back in time was seen; it waits for the loss to settle as well.)
      const quiet = reading === 'ahead' && epoch === this.epoch && !(performance.now() - this.lostAt < REQUEUE_AFTER_LOSS_MS);
      const until = performance.now() + REQUEUE_AFTER_LOSS_MS + SETTLE_POLL_MS * 10;
      if (!quiet) this.waiting++;
      try {
        for (let settled = quiet; !settled && !this.d.closing() && performance.now() < until; ) {
          await new Promise((r) => setTimeout(r, SETTLE_POLL_MS));
          settled = !(await this.unsettled());
        }
      } finally {
        if (!quiet) this.waiting--;
      }
      const [, , after, cancel] = quiet ? first : await this.readAll(id);
      const view = after === null ? undefined : (JSON.parse(after) as JobView);
      if (view && isFinal(view.state)) return view;
      return cancel === null ? undefined : this.d.views.cancelledView(JSON.parse(cancel) as CancelledRecord);
    } catch {
      return undefined;
    }
  }

  /** This node's clock advanced, the dataset mark, and the job's republished end and cancel: one round trip. */
  private async readAll(id: string): Promise<[number, string | null, string | null, string | null]> {
    const r = (await this.d.redis.multi().hincrby(K.clock, this.d.nodeId, 1).get(K.epoch).get(K.result(id)).get(K.cancelled(id)).exec()) ?? [];
    for (const [err] of r) if (err) throw err;
    return [Number(r[0]?.[1]), (r[1]?.[1] ?? null) as string | null, (r[2]?.[1] ?? null) as string | null, (r[3]?.[1] ?? null) as string | null];
  }

  /**
   * For a write that advances this node's clock beside recording an end: call it just before
   * sending the write, and what it returns with the write's reading — Redis gone back in time is
   * acted on at once.
   */
  clockWrite(): (clock: number) => void {
    const ticket = this.clock.send();
    return (clock) => {
      if (this.clock.read(clock, ticket) === 'back') void this.markBack(clock).then(() => this.sweep(), () => undefined);
    };
  }

  /**
   * Redis went back in time: marks a new dataset (K.epoch), so that every node's sweep treats it as
   * a data loss — holders say what they run, republish what they ran, accepting nodes queue again
   * what no node has. (Of two nodes that saw it, one marks it; Redis restarted empty has no mark
   * to replace, and the sweep sees the new dataset anyway.)
   */
  private async markBack(clock: number): Promise<void> {
    this.backInTime = true;
    if (this.epoch === null) return;
    // (Until the mark is made the loss is unsettled, and the next sweep tries again: the clock took
    // the reading as seen, so no later one would tell — Redis gone again just after its restart
    // left the jobs that ended since to run a second time.)
    this.unmarked = clock;
    let swapped: unknown;
    try {
      swapped = await this.d.redis.eval(SWAP_EPOCH, 1, K.epoch, this.epoch, randomUUID());
    } catch {
      return;
    }
    this.unmarked = null;
    if (swapped === 1) this.d.log(`Redis went back in time (this node's clock in it read ${clock}, not above what it read before: restarted from an older snapshot, e.g. an RDB file): the jobs that ended since are queued or running there again — treated as a data loss`);
  }

  /** Resolves when a sweep running now is over. */
  idle(): Promise<void> {
    return this.sweeping ?? Promise.resolve();
  }

  /**
   * Checks the jobs this node accepted against Redis: those that ended are forgotten (kept as
   * ended until server.resultTtlS); those Redis no longer has (a restart without persistence) are
   * queued again, as they were submitted. When the dataset changed (K.epoch), the node also
   * registers its kinds again and republishes the ended jobs its own journal holds, so a reader
   * on any node still gets their results.
   */
  sweep(): Promise<void> {
    this.sweeping ??= this.sweepNow()
      .catch(() => undefined) // Redis away: the next sweep tries again
      .finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  private async sweepNow(): Promise<void> {
    if (this.d.closing() || this.d.redis.status !== 'ready') return;
    const ticket = this.clock.send();
    const clock = await this.d.redis.hincrby(K.clock, this.d.nodeId, 1);
    if (this.clock.read(clock, ticket) === 'back') await this.markBack(clock);
    else if (this.unmarked !== null) await this.markBack(this.unmarked);
    // (Kept on disk every sweep: a node restarted since can tell too.)
    this.writeFile(this.clockFile, `${this.d.nodeId} ${this.clock.value}`);
    await this.d.redis.set(K.epoch, randomUUID(), 'NX');
    const epoch = await this.d.redis.get(K.epoch);
    // (A node's first sweep ever finds a dataset it has not seen: no loss to tell of.)
    const lost = epoch !== this.epoch && this.epoch !== null;
    if (lost) this.lostAt = performance.now();
    const settling = performance.now() - this.lostAt < REQUEUE_AFTER_LOSS_MS;
    let republished = 0;
    if (epoch !== this.epoch) {
      await this.d.markHeld();
      await this.d.register();
      republished = await this.republish(this.backInTime);
      this.backInTime = false;
      this.epoch = epoch;
      this.saveEpoch(epoch);
    }
    const expired = Date.now() - this.d.ttlMs;
    let requeued = 0;
    for (const j of this.d.accepted.unfinished().slice(0, SWEEP_MAX)) {
      if (this.d.closing()) return;
      const found = await this.d.views.find(j.id);
      if (found && isFinal(found.view.state)) this.acceptedEnded(j.id, found.view);
      else if (!found && j.submittedAt < expired) this.acceptedEnded(j.id, undefined);
      else if (!found && !settling) {
        await this.requeue(j);
        requeued++;
      }
    }
    const queued = settling ? `queues again in ${REQUEUE_AFTER_LOSS_MS / 1000} s the jobs this node accepted that no node republishes by then` : `queued again ${requeued} job${requeued === 1 ? '' : 's'} this node accepted`;
    if (lost || requeued > 0) this.d.log(`Redis lost jobs${lost ? ' (its data was lost: a new dataset)' : ''}: ${lost ? `registered this node's kinds again, republished ${republished} ended job${republished === 1 ? '' : 's'}, ` : ''}${queued}`);
    this.d.accepted.purgeFinished(this.d.ttlMs);
  }

  private get epochFile(): string {
    return path.join(this.d.dataDir, 'cluster-epoch');
  }

  private get clockFile(): string {
    return path.join(this.d.dataDir, 'cluster-clock');
  }

  /** The dataset this node's last completed republish was for (null: none recorded). */
  private savedEpoch(): string | null {
    return this.readFile(this.epochFile) || null;
  }

  /** Records that this node's results are republished to `epoch`. */
  private saveEpoch(epoch: string | null): void {
    if (epoch !== null) this.writeFile(this.epochFile, epoch);
  }

  private readFile(file: string): string {
    try {
      return fs.readFileSync(file, 'utf8').trim();
    } catch {
      return '';
    }
  }

  /** Writes a small file whole, or not at all. */
  private writeFile(file: string, text: string): void {
    const tmp = `${file}.tmp`;
    try {
      fs.writeFileSync(tmp, text);
      fs.renameSync(tmp, file);
    } catch {
      // A full disk: the next start republishes again, or reads an older clock (harmless)
    }
  }

  /** A job this node accepted has ended (or is past its time to live): its acceptance record ends too. */
  private acceptedEnded(id: string, view: JobView | undefined): void {
    const state = view?.state === 'failed' || view?.state === 'cancelled' ? view.state : 'done';
    this.d.accepted.finish(id, state === 'done' ? { state, result: null } : { state, code: view?.error?.code ?? 'E_INTERNAL', reason: view?.error?.reason ?? '' });
  }

  /** Queues again a job Redis lost, as it was submitted (BullMQ keeps the first of two adds of one id). */
  private async requeue(j: JournalJobInput & { submittedAt: number }): Promise<void> {
    const data = acceptedData(j);
    const ttl = { age: this.d.ttlMs / 1000 };
    await this.d.redis.set(K.kindOf(j.id), j.kind, 'NX');
    await this.d.queueOf(j.kind).add('job', data, { jobId: bullId(j.id), priority: BULL_PRIORITY[j.priority], attempts: 1, removeOnComplete: ttl, removeOnFail: ttl });
    void this.d.redis.publish(K.addedChannel, j.kind).catch(() => undefined);
  }

  /**
   * After a Redis data loss: the ended jobs this node ran (its journal has their results) readable
   * again from any node — and those it accepted that were cancelled while queued, or failed as a
   * node took them (a missed deadline), which no node ran (only Redis and this node's acceptance
   * record knew them: they read 404 after the loss).
   */
  private async republish(backInTime: boolean): Promise<number> {
    let n = 0;
    // (After Redis went back in time, a copy there not ended is older than this node's end; else
    // it may be newer — the job taken over from this node, stalled past its lock — and is left.)
    const known = async (id: string) => {
      const found = await this.d.views.find(id);
      return found !== undefined && (!backInTime || isFinal(found.view.state));
    };
    for (const listed of this.d.local.jobs({ limit: 100_000, states: ['done', 'failed', 'cancelled'] })) {
      if (this.d.closing()) return n;
      if (await known(listed.id)) continue;
      // (A list leaves a result over 1 MiB out: what is republished is read whole.)
      const v = listed.resultOmittedBytes === undefined ? listed : (this.d.local.job(listed.id, undefined, true) ?? listed);
      await writeResult(this.d.redis.multi(), { ...v, node: this.d.nodeId }, this.d.ttlMs).exec();
      n++;
    }
    for (const j of this.d.accepted.list({ limit: 100_000, states: ['cancelled'] })) {
      if (this.d.closing()) return n;
      if (await known(j.id)) continue;
      n++;
      const rec: CancelledRecord = { data: acceptedData(j), cancelledAt: j.finishedAt ?? Date.now() };
      await writeCancelled(this.d.redis.multi(), rec, this.d.ttlMs).exec();
    }
    // Those it accepted that failed where no node's journal has them: ended as a node took them
    // (a missed deadline, an input its module refused) — they read 404 on every node after the loss.
    // (A node that ran one republishes it too: whichever comes first stays, the same failure.)
    for (const j of this.d.accepted.list({ limit: 100_000, states: ['failed'] })) {
      if (this.d.closing()) return n;
      if (await known(j.id)) continue;
      n++;
      const v = jobView({ record: acceptedRecord(j), state: 'failed', submittedAt: j.submittedAt, startedAt: null, finishedAt: j.finishedAt, partitionsDone: 0, partitionStates: null, partitionCounts: null, resumes: 0, result: { result: null }, error: { code: j.errorCode ?? 'E_INTERNAL', reason: j.errorReason ?? '' }, node: null });
      await writeResult(this.d.redis.multi(), v, this.d.ttlMs).exec();
    }
    return n;
  }
}

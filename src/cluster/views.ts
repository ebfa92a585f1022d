import { Job, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { jobView, type JobView } from '../server/api.js';
import { Journal, type JobState, type JournalJobInput } from '../server/journal.js';
import { isFinal, type StatesPage } from '../server/progress.js';
import type { Service } from '../server/service.js';
import { bullId, failureOf, K, resultOf, type CancelledRecord, type JobData, type RunningRecord, type StoredResult } from './keys.js';

/** What the views read: Redis, the kinds' queues, and the local service for the jobs this node holds. */
export interface ViewSources {
  redis: Redis;
  queueOf(kind: string): Queue<JobData>;
  isHeld(id: string): boolean;
  local: Pick<Service, 'job'>;
}

/**
 * A cluster job's view, wherever it is: a BullMQ job (queued, running — its partitions from the
 * holder when that is this node —, done or failed), a job cancelled while queued, a result a
 * node republished after Redis lost its data, or a job Redis lost that a node still runs.
 */
export class ClusterViews {
  constructor(private readonly d: ViewSources) {}

  async find(id: string, page?: StatesPage): Promise<{ view: JobView; data: JobData; job?: Job<JobData> } | undefined> {
    // The state first: a job read before it completes would show `done` without its result.
    const kind = await this.d.redis.get(K.kindOf(id));
    const queue = kind === null ? undefined : this.d.queueOf(kind);
    const state = queue ? await queue.getJobState(bullId(id)) : 'unknown';
    const job = state === 'unknown' || !queue ? undefined : await Job.fromId<JobData>(queue, bullId(id));
    if (job?.data?.record) {
      const view = await this.viewOf(job, state, page);
      // Queued or running in a Redis that went back in time (an older snapshot), where the node
      // that ran it since republished its end, or its cancel: that (see Recovery.endedElsewhere).
      if (!isFinal(view.state)) {
        const [republished, cancelled] = await this.d.redis.mget(K.result(id), K.cancelled(id));
        if (republished) return republishedView(republished);
        if (cancelled) {
          const rec = JSON.parse(cancelled) as CancelledRecord;
          return { view: this.cancelledView(rec), data: rec.data };
        }
      }
      return { view, data: job.data, job };
    }
    const raw = await this.d.redis.get(K.cancelled(id));
    if (raw !== null) {
      const rec = JSON.parse(raw) as CancelledRecord;
      return { view: this.cancelledView(rec), data: rec.data };
    }
    const republished = await this.d.redis.get(K.result(id));
    if (republished !== null) return republishedView(republished);
    const running = await this.d.redis.get(K.running(id));
    if (running === null) return undefined;
    const rec = JSON.parse(running) as RunningRecord;
    return { view: this.runningView(rec, page), data: rec.data };
  }

  async viewOf(job: Job<JobData>, known?: string, page?: StatesPage): Promise<JobView> {
    const [bull, node] = await Promise.all([known ?? job.getState(), this.d.redis.get(K.holder(job.data.record.id))]);
    const r = job.data.record;
    let state: JobState = bull === 'active' ? 'running' : bull === 'completed' ? 'done' : bull === 'failed' ? 'failed' : 'queued';
    let error: JobView['error'] = null;
    if (bull === 'failed') {
      error = failureOf(job.failedReason ?? '');
      if (error.code === 'E_CANCELLED') state = 'cancelled';
    }
    const localView = state === 'running' && this.d.isHeld(r.id) ? this.d.local.job(r.id, page) : undefined;
    const localDone = localView?.partitionCounts?.done;
    // Another node's running job — or this node's before its engine counts it (just taken over: the
    // journal's count is only this node's, 0, while the outputs it reuses are in Redis): the
    // partitions whose outputs were shared (a large output is not, so at least that many).
    const shared = state === 'running' && localDone === undefined ? Math.max(await this.d.redis.hlen(K.outputs(r.id)), localView?.partitionsDone ?? 0) : 0;
    const finishedAt = isFinal(state) ? (job.finishedOn ?? null) : null;
    return jobView({
      record: r,
      state,
      submittedAt: job.data.submittedAt,
      // (A job handed back to the queue — a node's shutdown, a full journal — keeps BullMQ's processedOn: queued is not started.)
      startedAt: state === 'queued' ? null : job.processedOn || null,
      finishedAt,
      // (A job taken over counts the outputs it reused, as its partitionCounts do: the journal's count is only this node's.)
      partitionsDone: state === 'done' ? r.partitions : (localDone ?? shared),
      partitionStates: localView?.partitionStates ?? null,
      partitionCounts: localView?.partitionCounts ?? null,
      resumes: job.stalledCounter ?? 0,
      result: resultOf(state === 'done' ? (job.returnvalue as StoredResult | null) : null),
      error,
      node: node ?? null,
    });
  }

  /** A job a node still runs that Redis lost (see K.running): its partitions from the holder when that is this node. */
  runningView(rec: RunningRecord, page?: StatesPage): JobView {
    const localView = this.d.isHeld(rec.data.record.id) ? this.d.local.job(rec.data.record.id, page) : undefined;
    return jobView({
      record: rec.data.record,
      state: 'running',
      submittedAt: rec.data.submittedAt,
      startedAt: rec.startedAt,
      finishedAt: null,
      partitionsDone: localView?.partitionCounts?.done ?? localView?.partitionsDone ?? 0,
      partitionStates: localView?.partitionStates ?? null,
      partitionCounts: localView?.partitionCounts ?? null,
      resumes: 0,
      result: { result: null },
      error: null,
      node: rec.node,
    });
  }

  cancelledView(rec: CancelledRecord): JobView {
    return jobView({
      record: rec.data.record,
      state: 'cancelled',
      submittedAt: rec.data.submittedAt,
      startedAt: null,
      finishedAt: rec.cancelledAt,
      partitionsDone: 0,
      partitionStates: null,
      partitionCounts: null,
      resumes: 0,
      result: { result: null },
      error: { code: 'E_CANCELLED', reason: 'cancelled on request' },
      node: null,
    });
  }
}

/** A result a node republished (K.result), with the job's data as it was submitted. */
function republishedView(text: string): { view: JobView; data: JobData } {
  const view = JSON.parse(text) as JobView;
  const record: JournalJobInput = { id: view.id, kind: view.kind, priority: view.priority, partitions: view.partitions, input: view.input, deadline: view.deadline === null ? null : Date.parse(view.deadline) };
  return { view, data: { record, hash: Journal.hash(record), submittedAt: Date.parse(view.submittedAt), nonce: '' } };
}

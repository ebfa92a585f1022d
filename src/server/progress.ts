import type { PartitionState } from '../core/index.js';
import type { JobView } from './api.js';
import type { JobState } from './journal.js';

/** A job's partitions as its views and its progress stream show them. */

/** Partitions of one job by stage. */
export type PartitionCounts = Record<PartitionState, number>;

/** Which partitions' states a job's own view gives: `limit` of them from `from`. */
export interface StatesPage {
  from: number;
  limit: number;
}

/** The most partition states one job view gives (`?statesFrom=` pages through more). */
export const STATES_PAGE_MAX = 100_000;

/** The most partitions whose states a list (or a submit answer) gives per job; the job's own view gives all. */
export const LIST_STATES_MAX = 96;

/** What `GET /v1/jobs/:id/events` streams: the job's partitions as they move, then its end. */
export type JobProgressEvent =
  | {
      type: 'progress';
      time: string;
      job: string;
      state: JobState;
      partitions: number;
      /** Partitions by stage now. */
      counts: PartitionCounts;
      /** The partitions that moved since the last event (all of them in the first), and where to. */
      changes: { partition: number; stage: PartitionState }[];
    }
  | { type: 'end'; time: string; job: JobView };

const PARTITION_STATES: readonly PartitionState[] = ['queued', 'preparing', 'waiting', 'on-device', 'done', 'failed', 'cancelled'];

/** Partitions by stage. */
export function countPartitions(states: readonly PartitionState[]): PartitionCounts {
  const c = Object.fromEntries(PARTITION_STATES.map((st) => [st, 0])) as PartitionCounts;
  for (const st of states) c[st]++;
  return c;
}

/**
 * Each partition's stage as a job view shows it (from the recorded count once the job is not live
 * here). Where the view gives only counts, the partitions are matched to `last` (the stages last
 * sent): a partition once done stays done — the counts can lag the journal by a group commit, as
 * when the engine has let go of a job whose end is not yet recorded, and numbered afresh they
 * showed a done partition as queued — and each other one keeps its stage where the counts still
 * hold it.
 */
export function partitionStatesOf(v: JobView, last: readonly PartitionState[] = []): PartitionState[] {
  if (v.partitionStates) return v.partitionStates;
  const fresh = freshStates(v);
  return last.length === fresh.length ? matchStates(fresh, last) : fresh;
}

/** Stages from a view's counts (or its recorded count of done partitions), in stage order. */
function freshStates(v: JobView): PartitionState[] {
  if (v.partitionCounts) return PARTITION_STATES.flatMap((st) => new Array<PartitionState>(v.partitionCounts?.[st] ?? 0).fill(st));
  const rest: PartitionState = v.state === 'done' ? 'done' : v.state === 'queued' || v.state === 'running' ? 'queued' : v.state;
  const done = v.state === 'done' ? v.partitions : Math.min(v.partitions, v.partitionsDone);
  return Array.from({ length: v.partitions }, (_, i) => (i < done ? 'done' : rest));
}

/** The stages of `fresh` (a multiset) given to the partitions as `last` had them, where they can be (see partitionStatesOf). */
function matchStates(fresh: readonly PartitionState[], last: readonly PartitionState[]): PartitionState[] {
  const pool = countPartitions(fresh);
  const out = new Array<PartitionState | undefined>(fresh.length).fill(undefined);
  const take = (st: PartitionState) => {
    // (Where the counts hold fewer done than were sent, they lag: a stage of theirs goes instead.)
    const from = pool[st] > 0 ? st : (PARTITION_STATES.find((x) => pool[x] > 0) as PartitionState);
    pool[from]--;
  };
  last.forEach((st, p) => {
    if (st !== 'done') return;
    out[p] = 'done';
    take('done');
  });
  last.forEach((st, p) => {
    if (out[p] !== undefined || pool[st] === 0) return;
    out[p] = st;
    pool[st]--;
  });
  return out.map((st) => {
    if (st !== undefined) return st;
    const next = PARTITION_STATES.find((x) => pool[x] > 0) as PartitionState;
    pool[next]--;
    return next;
  });
}

/**
 * The progress events for a job view against the partition states last sent (`[]` for none yet:
 * every partition is a change): a `progress` event when partitions moved, then `end` when the job
 * has ended. Returns the states to remember.
 */
export function progressEvents(v: JobView, last: readonly PartitionState[]): { events: JobProgressEvent[]; states: PartitionState[] } {
  // Not ended, and no partitions to show (its end is being recorded): nothing moved that can be told.
  if (!isFinal(v.state) && !v.partitionStates && !v.partitionCounts && last.length === v.partitions) return { events: [], states: [...last] };
  const states = partitionStatesOf(v, last);
  const changes = states.flatMap((stage, partition) => (last[partition] === stage ? [] : [{ partition, stage }]));
  const time = new Date().toISOString();
  const events: JobProgressEvent[] = changes.length > 0 ? [{ type: 'progress', time, job: v.id, state: v.state, partitions: v.partitions, counts: countPartitions(states), changes }] : [];
  if (isFinal(v.state)) events.push({ type: 'end', time, job: v });
  return { events, states };
}

/** Whether a job has ended. */
export function isFinal(state: JobState): boolean {
  return state === 'done' || state === 'failed' || state === 'cancelled';
}

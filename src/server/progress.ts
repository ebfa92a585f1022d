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

/** Each partition's stage as a job view shows it (from the recorded count once the job is not live here). */
export function partitionStatesOf(v: JobView): PartitionState[] {
  if (v.partitionStates) return v.partitionStates;
  if (v.partitionCounts) return PARTITION_STATES.flatMap((st) => new Array<PartitionState>(v.partitionCounts?.[st] ?? 0).fill(st));
  const rest: PartitionState = v.state === 'done' ? 'done' : v.state === 'queued' || v.state === 'running' ? 'queued' : v.state;
  const done = v.state === 'done' ? v.partitions : Math.min(v.partitions, v.partitionsDone);
  return Array.from({ length: v.partitions }, (_, i) => (i < done ? 'done' : rest));
}

/**
 * The progress events for a job view against the partition states last sent (`[]` for none yet:
 * every partition is a change): a `progress` event when partitions moved, then `end` when the job
 * has ended. Returns the states to remember.
 */
export function progressEvents(v: JobView, last: readonly PartitionState[]): { events: JobProgressEvent[]; states: PartitionState[] } {
  const states = partitionStatesOf(v);
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

/** A job's progress stream (src/server/progress.ts) where its view gives only partition counts. */
import { describe, expect, it } from 'vitest';
import type { JobView } from '../../src/server/api.js';
import { countPartitions, progressEvents } from '../../src/server/progress.js';
import { localJobView } from '../../src/server/local-view.js';
import type { JournalJob } from '../../src/server/journal.js';
import type { PartitionState } from '../../src/core/index.js';

/** A running job's view of `n` partitions with counts only (as once the engine has let go of it). */
function countsView(states: PartitionState[]): JobView {
  return { id: 'j', state: 'running', partitions: states.length, partitionsDone: 0, partitionStates: null, partitionCounts: countPartitions(states) } as unknown as JobView;
}

describe('progress from counts alone', () => {
  it('a partition once done stays done, though the counts lag by one (9 done, 1 queued after all 10 were sent done but the last)', () => {
    const last: PartitionState[] = ['done', 'done', 'done', 'done', 'done', 'done', 'done', 'done', 'done', 'on-device'];
    const { events, states } = progressEvents(countsView([...Array<PartitionState>(9).fill('done'), 'queued']), last);
    // Numbered afresh, partition 0 was sent as queued; now only partition 9 moves, to the stage the counts hold besides done.
    expect(states).toEqual([...Array<PartitionState>(9).fill('done'), 'queued']);
    expect(events[0]).toMatchObject({ type: 'progress', changes: [{ partition: 9, stage: 'queued' }] });
  });

  it('where the counts hold fewer done than were sent, done partitions stay done and the stale count gives way', () => {
    const last: PartitionState[] = ['done', 'done', 'on-device'];
    const { states } = progressEvents(countsView(['done', 'queued', 'queued']), last);
    expect(states).toEqual(['done', 'done', 'queued']);
  });

  it('each other partition keeps its stage where the counts still hold it', () => {
    const last: PartitionState[] = ['waiting', 'preparing', 'on-device', 'queued'];
    const { events, states } = progressEvents(countsView(['preparing', 'waiting', 'done', 'queued']), last);
    expect(states).toEqual(['waiting', 'preparing', 'done', 'queued']);
    expect(events[0]).toMatchObject({ changes: [{ partition: 2, stage: 'done' }] });
  });

  it('with nothing sent yet, the counts in stage order', () => {
    expect(progressEvents(countsView(['done', 'queued']), []).states).toEqual(['queued', 'done']);
  });
});

describe('a job whose end is being recorded', () => {
  // Run here, the engine has let go of it, the journal not yet final: its done count lagged, and a
  // finished partition was shown queued for a moment (on-device → queued → done).
  const record = { id: 'j', kind: 'k', priority: 'normal', partitions: 3, input: null, deadline: null, bodyHash: '', state: 'running', submittedAt: 0, startedAt: 0, finishedAt: null, result: null, errorCode: null, errorReason: null, partitionsDone: 2, resumes: 0 } as unknown as JournalJob;
  const letGo = { jobCounts: () => undefined, jobStates: () => undefined };

  it('its view shows no partitions, and its stream no progress, until the end is recorded', () => {
    const v = localJobView(record, letGo as never, null);
    expect(v).toMatchObject({ state: 'running', partitionStates: null, partitionCounts: null });
    const last: PartitionState[] = ['done', 'done', 'on-device'];
    expect(progressEvents(v, last)).toEqual({ events: [], states: last });
    // Then the end: the last partition goes from on-device to done.
    const done = localJobView({ ...record, state: 'done', partitionsDone: 3 }, letGo as never, null);
    expect(progressEvents(done, last).events[0]).toMatchObject({ type: 'progress', changes: [{ partition: 2, stage: 'done' }] });
  });

  it('done here while the journal is full (its end kept until it lands): every partition counts done, not most of them queued again (a user trial saw done 9, then done 2 and queued 14, beside a status that counted 16 complete)', () => {
    const view = (run: null | undefined) => localJobView({ ...record, partitions: 16, partitionsDone: 2 }, letGo as never, run, Infinity, undefined, true);
    // (And every state done, as while it ran: a fault trial read null as no states kept.)
    for (const run of [null, undefined]) expect(view(run)).toMatchObject({ state: 'running', partitionsDone: 2, partitionStates: Array(16).fill('done'), partitionCounts: { queued: 0, preparing: 0, waiting: 0, 'on-device': 0, done: 16 } });
    // Without a kept end, the journal's counts as before.
    expect(localJobView({ ...record, partitions: 16, partitionsDone: 2 }, letGo as never, undefined)).toMatchObject({ partitionCounts: { done: 2, queued: 14 } });
  });
});

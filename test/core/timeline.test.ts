import { describe, expect, it } from 'vitest';
import { createUnpacedPacer, Engine, TimelineRecorder, type Command, type EngineEvent, type JobSpec } from '../../src/core/index.js';

/** Drives an engine and a recorder together, keeping item ids and attempts by `job:partition`. */
function setup(workers = 1, options = {}) {
  const e = new Engine({ devices: [{ workers }], pacer: createUnpacedPacer(), maxPreparing: 2 });
  const rec = new TimelineRecorder(options);
  const items = new Map<string, { id: number; attempt: number }>();
  const apply = (ev: EngineEvent): Command[] => {
    const cmds = e.apply(ev);
    rec.record(ev, cmds, e.snapshot, 7);
    for (const c of cmds) if (c.type === 'startPrepare' || c.type === 'startDevice') items.set(`${c.item.jobId}:${c.item.partition}`, { id: c.item.id, attempt: c.attempt });
    return cmds;
  };
  const item = (k: string) => items.get(k) as { id: number; attempt: number };
  return { e, rec, apply, item };
}

const job = (id: string, partitions: number): JobSpec => ({ id, kind: 'k', partitions });

describe('TimelineRecorder', () => {
  it('records a span per stage on its lane: preparation slots reused lowest first, one lane per device worker', () => {
    const { rec, apply, item } = setup(1, { sampleEveryMs: 0 });
    apply({ type: 'submit', time: 0, job: job('a', 3) });
    apply({ type: 'prepared', time: 10, item: item('a:0').id, attempt: item('a:0').attempt }); // a:0 → device, a:2 starts preparing
    apply({ type: 'prepared', time: 12, item: item('a:1').id, attempt: item('a:1').attempt }); // waits
    apply({ type: 'deviceDone', time: 15, item: item('a:0').id, attempt: item('a:0').attempt }); // a:1 → device
    expect(rec.lanes()).toEqual([
      { id: 0, kind: 'prepare', name: 'prepare 0' },
      { id: 1, kind: 'prepare', name: 'prepare 1' },
      { id: 2, kind: 'device', name: 'device 0 / worker 0', device: 0, worker: 0 },
    ]);
    const spans = rec.spans().map((s) => `${s.kind}:${s.jobId}:${s.partition}@${s.lane} ${s.start}-${s.end} ${s.outcome}`);
    expect(spans).toEqual([
      'prepare:a:0@0 0-10 done',
      'prepare:a:1@1 0-12 done',
      'device:a:0@2 10-15 done',
      'prepare:a:2@0 10-null null', // the freed lane 0 is reused
      'device:a:1@2 15-null null',
    ]);
    expect(rec.spans(13).map((s) => `${s.jobId}:${s.partition}`)).toEqual(['a:0', 'a:2', 'a:1']);
    const last = rec.samples().at(-1);
    expect(last).toMatchObject({ t: 15, preparing: 1, waiting: 0, onDevice: 1, inventory: 2, budgetHeldBytes: 7 });
  });

  it('ends spans as failed or aborted, ignores stale attempts, and keeps memory bounded', () => {
    const { rec, apply, item } = setup(1, { maxSpans: 4, sampleEveryMs: 1000 });
    apply({ type: 'submit', time: 0, job: job('a', 1) });
    const first = item('a:0');
    apply({ type: 'prepareFailed', time: 5, item: first.id, attempt: first.attempt, reason: 'boom' }); // engine retries (retries 0: fails the job)
    apply({ type: 'submit', time: 6, job: job('b', 1) });
    apply({ type: 'prepared', time: 7, item: first.id, attempt: first.attempt }); // stale: ignored
    apply({ type: 'cancel', time: 8, jobId: 'b' });
    const spans = rec.spans();
    expect(spans.map((s) => `${s.jobId} ${s.end} ${s.outcome}`)).toEqual(['a 5 failed', 'b 8 aborted']);
    for (let i = 0; i < 10; i++) {
      apply({ type: 'submit', time: 10 + i, job: job(`c${i}`, 1) });
      apply({ type: 'cancel', time: 10 + i, jobId: `c${i}` });
    }
    expect(rec.spans().length).toBeLessThanOrEqual(5);
    expect(rec.spans().at(-1)?.jobId).toBe('c9');
    expect(rec.samples().map((s) => s.t)).toEqual([0]); // one sample per second at most
  });
});

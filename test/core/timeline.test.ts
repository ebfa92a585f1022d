import { describe, expect, it } from 'vitest';
import { createUnpacedPacer, Engine, TimelineRecorder, type Command, type EngineEvent, type ItemView, type JobSpec, type TimelineOptions, type TimelineSpan } from '../../src/core/index.js';
import { snapshot } from './helpers.js';

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

/** An item view as a command carries it (only id, job and partition matter to the recorder). */
const iv = (id: number, jobId = 'a', partition = id): ItemView => ({ id, jobId, kind: 'k', partition, priority: 'normal', state: 'preparing', attempt: 1, failures: 0, reservedBytes: 0 });
const startPrepare = (id: number, attempt = 1, jobId = 'a'): Command => ({ type: 'startPrepare', item: iv(id, jobId), attempt });
const startDevice = (id: number, device: number, worker: number, attempt = 2): Command => ({ type: 'startDevice', item: iv(id), attempt, device, worker });
const tick = (time: number): EngineEvent => ({ type: 'tick', time });
/** `kind:job:partition@lane start-end outcome` (and `×items` for a batch). */
const fmt = (s: TimelineSpan) => `${s.kind}:${s.jobId}:${s.partition}@${s.lane} ${s.start}-${s.end} ${s.outcome}${s.items === undefined ? '' : ` ×${s.items}`}`;

/** A recorder fed by hand: `step(event, ...commands)` with an empty snapshot. */
function recorder(options: TimelineOptions = { sampleEveryMs: Infinity }) {
  const rec = new TimelineRecorder(options);
  const step = (event: EngineEvent, ...commands: Command[]) => rec.record(event, commands, snapshot());
  const spans = (since?: number) => rec.spans(since).map(fmt);
  return { rec, step, spans };
}

describe('TimelineRecorder, fed by hand', () => {
  it('ends a stage’s span on its own events only: the current attempt, and the stage it is in', () => {
    const { step, spans } = recorder();
    step(tick(0), startPrepare(1), startPrepare(2), startPrepare(3));
    step({ type: 'deviceDone', time: 5, item: 1, attempt: 1 }); // item 1 is preparing, not on a device
    step({ type: 'prepared', time: 6, item: 2, attempt: 0 }); // an older attempt
    expect(spans()).toEqual(['prepare:a:1@0 0-null null', 'prepare:a:2@1 0-null null', 'prepare:a:3@2 0-null null']);
    step({ type: 'prepared', time: 10, item: 1, attempt: 1 }, startDevice(1, 0, 0));
    step({ type: 'prepareFailed', time: 11, item: 2, attempt: 1, reason: 'x' }, startDevice(3, 0, 1));
    step({ type: 'prepared', time: 12, item: 3, attempt: 1 }); // item 3 already moved on: its device span stays
    step({ type: 'deviceFailed', time: 20, item: 1, attempt: 1, reason: 'x' }); // stale attempt (the device run is attempt 2)
    step({ type: 'prepared', time: 21, item: 1, attempt: 2 }); // the right attempt, the wrong stage
    step({ type: 'deviceFailed', time: 22, item: 1, attempt: 2, reason: 'x' });
    step({ type: 'deviceDone', time: 23, item: 3, attempt: 2 });
    expect(spans()).toEqual([
      'prepare:a:1@0 0-10 done',
      'prepare:a:2@1 0-11 failed',
      'prepare:a:3@2 0-11 done', // started on a device without its event: ended there, done
      'device:a:1@3 10-22 failed',
      'device:a:3@4 11-23 done',
    ]);
  });

  it('gives each device worker its own lane, and reuses the lowest free preparation lane', () => {
    const { rec, step, spans } = recorder();
    step(tick(0), startPrepare(1));
    step(tick(1), startPrepare(2));
    step(tick(2), startPrepare(3));
    step({ type: 'prepared', time: 3, item: 2, attempt: 1 }, startDevice(2, 1, 0));
    step({ type: 'prepared', time: 4, item: 3, attempt: 1 }, startDevice(3, 0, 1));
    step({ type: 'deviceDone', time: 5, item: 2, attempt: 2 }, startPrepare(4)); // a device span ending frees no preparation lane
    step({ type: 'deviceDone', time: 6, item: 3, attempt: 2 }, startPrepare(5));
    step(tick(7), startPrepare(6));
    expect(rec.lanes()).toEqual([
      { id: 0, kind: 'prepare', name: 'prepare 0' },
      { id: 1, kind: 'prepare', name: 'prepare 1' },
      { id: 2, kind: 'prepare', name: 'prepare 2' },
      { id: 3, kind: 'device', name: 'device 1 / worker 0', device: 1, worker: 0 },
      { id: 4, kind: 'device', name: 'device 0 / worker 1', device: 0, worker: 1 },
      { id: 5, kind: 'prepare', name: 'prepare 3' },
    ]);
    expect(spans().filter((s) => s.startsWith('prepare')).map((s) => s.split(' ')[0])).toEqual([
      'prepare:a:1@0',
      'prepare:a:2@1',
      'prepare:a:3@2',
      'prepare:a:4@1', // lane 1 freed at 3
      'prepare:a:5@2', // lane 2 freed at 4
      'prepare:a:6@5', // none free: a new lane
    ]);
    // lanes() hands out copies.
    const lanes = rec.lanes();
    (lanes[0] as { name: string }).name = 'renamed';
    expect(rec.lanes()[0]?.name).toBe('prepare 0');
  });

  it('records a batch as one span named after its first item, with its size; preparation and device batches of one id apart', () => {
    const { rec, step, spans } = recorder();
    // Item 0, preparation batch 0 and device batch 0, all open at once.
    step(tick(0), startPrepare(0));
    step(tick(1), { type: 'startPrepareBatch', batch: 0, items: [iv(3, 'b', 7), iv(4, 'b', 8), iv(5, 'b', 9)] });
    step(tick(2), { type: 'startBatch', batch: 0, items: [iv(1, 'c', 2), iv(2, 'c', 3)], device: 0, worker: 0 });
    step({ type: 'prepared', time: 3, item: 3, attempt: 1 }); // not an item span: nothing ends
    step({ type: 'prepareBatchDone', time: 5, batch: 0 });
    step({ type: 'batchFailed', time: 6, batch: 0, reason: 'x' });
    expect(spans()).toEqual(['prepare:a:0@0 0-null null', 'prepare:b:7@1 1-5 done ×3', 'device:c:2@2 2-6 failed ×2']);
    // The freed preparation lane 1 is reused by the next batch.
    step(tick(7), { type: 'startPrepareBatch', batch: 1, items: [iv(6, 'b', 10)] });
    step(tick(8), { type: 'startBatch', batch: 1, items: [iv(3, 'b', 7), iv(4, 'b', 8)], device: 0, worker: 0 });
    step({ type: 'prepareBatchFailed', time: 9, batch: 1, reason: 'x' });
    step({ type: 'batchDone', time: 10, batch: 1 });
    expect(spans(7)).toEqual(['prepare:a:0@0 0-null null', 'prepare:b:10@1 7-9 failed ×1', 'device:b:7@2 8-10 done ×2']);
    expect(rec.lanes().map((l) => l.name)).toEqual(['prepare 0', 'prepare 1', 'device 0 / worker 0']);
  });

  it('a batch of several jobs lists them, each once, in the batch order (a job whose items a batch prepared had no span of its own)', () => {
    const { rec, step } = recorder();
    step(tick(1), { type: 'startBatch', batch: 0, items: [iv(1, 'c1', 0), iv(2, 'c2', 0), iv(3, 'c1', 1), iv(4, 'c3', 0)], device: 0, worker: 0 });
    step({ type: 'batchDone', time: 2, batch: 0 });
    expect(rec.spans().map((sp) => [sp.jobId, sp.items, sp.jobs])).toEqual([['c1', 4, ['c1', 'c2', 'c3']]]);
  });

  it('keeps items, preparation batches and device batches of the same ids apart, all open at once', () => {
    const { step, spans } = recorder();
    step(tick(0), startPrepare(0), startPrepare(1), startPrepare(2));
    for (const b of [0, 1, 2]) step(tick(1 + b), { type: 'startPrepareBatch', batch: b, items: [iv(10 + b, 'p', b)] });
    for (const b of [0, 1, 2]) step(tick(4 + b), { type: 'startBatch', batch: b, items: [iv(20 + b, 'd', b), iv(30 + b, 'd', 9)], device: 0, worker: b });
    expect(spans().filter((s) => s.includes('null')).length).toBe(9);
    // End each at its own time: every one ends once, when its own event comes.
    let t = 10;
    for (const b of [0, 1, 2]) step({ type: 'prepared', time: t++, item: b, attempt: 1 });
    for (const b of [0, 1, 2]) step({ type: 'prepareBatchDone', time: t++, batch: b });
    for (const b of [0, 1, 2]) step({ type: 'batchDone', time: t++, batch: b });
    expect(spans()).toEqual([
      'prepare:a:0@0 0-10 done',
      'prepare:a:1@1 0-11 done',
      'prepare:a:2@2 0-12 done',
      'prepare:p:0@3 1-13 done ×1',
      'prepare:p:1@4 2-14 done ×1',
      'prepare:p:2@5 3-15 done ×1',
      'device:d:0@6 4-16 done ×2',
      'device:d:1@7 5-17 done ×2',
      'device:d:2@8 6-18 done ×2',
    ]);
  });

  it('ignores the end of a batch it has no open span for (already aborted, or started before it recorded)', () => {
    const { step, spans } = recorder();
    step(tick(0), { type: 'startBatch', batch: 0, items: [iv(1)], device: 0, worker: 0 });
    step(tick(1), { type: 'abort', item: iv(1), stage: 'on-device', reason: 'cancelled', batch: { id: 0, remaining: 0 } });
    step({ type: 'batchDone', time: 2, batch: 0 });
    step({ type: 'prepareBatchFailed', time: 3, batch: 7, reason: 'x' });
    expect(spans()).toEqual(['device:a:1@0 0-1 aborted ×1']);
  });

  it('records no span for a batch without items (it has no first item to name it)', () => {
    const { step, spans } = recorder();
    step(tick(0), { type: 'startBatch', batch: 0, items: [], device: 0, worker: 0 }, { type: 'startPrepareBatch', batch: 0, items: [] });
    expect(spans()).toEqual([]);
  });

  it('aborts an item’s span, and a batch’s once none of its items still runs (at its own stage)', () => {
    const { step, spans } = recorder();
    step(tick(0), startPrepare(0));
    step(tick(1), { type: 'startPrepareBatch', batch: 0, items: [iv(1), iv(2)] });
    step(tick(2), { type: 'startBatch', batch: 0, items: [iv(3), iv(4)], device: 0, worker: 0 });
    step(tick(3), { type: 'abort', item: iv(3), stage: 'on-device', reason: 'cancelled', batch: { id: 0, remaining: 1 } }); // the batch still runs
    step(tick(4), { type: 'abort', item: iv(1), stage: 'preparing', reason: 'cancelled', batch: { id: 0, remaining: 1 } });
    expect(spans()).toEqual(['prepare:a:0@0 0-null null', 'prepare:a:1@1 1-null null ×2', 'device:a:3@2 2-null null ×2']);
    step(tick(5), { type: 'abort', item: iv(4), stage: 'on-device', reason: 'cancelled', batch: { id: 0, remaining: 0 } });
    expect(spans()).toEqual(['prepare:a:0@0 0-null null', 'prepare:a:1@1 1-null null ×2', 'device:a:3@2 2-5 aborted ×2']);
    step(tick(6), { type: 'abort', item: iv(2), stage: 'preparing', reason: 'cancelled', batch: { id: 0, remaining: 0 } });
    step(tick(7), { type: 'abort', item: iv(0), stage: 'preparing', reason: 'cancelled' });
    step(tick(8), { type: 'abort', item: iv(0), stage: 'preparing', reason: 'cancelled' }); // already ended: nothing
    expect(spans()).toEqual(['prepare:a:0@0 0-7 aborted', 'prepare:a:1@1 1-6 aborted ×2', 'device:a:3@2 2-5 aborted ×2']);
  });

  it('aborts what ran on a lost worker, and only there', () => {
    const { step, spans } = recorder();
    step(tick(0), startPrepare(1));
    step(tick(1), startDevice(2, 0, 0));
    step(tick(2), startDevice(3, 0, 1));
    step(tick(3), { type: 'startBatch', batch: 0, items: [iv(4), iv(5)], device: 1, worker: 1 });
    const running = ['prepare:a:1@0 0-null null', 'device:a:2@1 1-null null', 'device:a:3@2 2-null null', 'device:a:4@3 3-null null ×2'];
    step({ type: 'workerLost', time: 4, device: 2, worker: 0 }); // a worker that never ran anything
    expect(spans()).toEqual(running);
    step({ type: 'workerLost', time: 5, device: 0, worker: 1 });
    expect(spans()).toEqual([running[0], running[1], 'device:a:3@2 2-5 aborted', running[3]]);
    step({ type: 'workerLost', time: 6, device: 1, worker: 1 });
    expect(spans()).toEqual([running[0], running[1], 'device:a:3@2 2-5 aborted', 'device:a:4@3 3-6 aborted ×2']);
  });

  it('spans(since): those ended at or after it and all still running, oldest start first, as copies', () => {
    const { rec, step, spans } = recorder();
    step(tick(0), startPrepare(1));
    step(tick(5), startPrepare(2), startPrepare(3));
    step({ type: 'prepared', time: 10, item: 2, attempt: 1 });
    step({ type: 'prepared', time: 20, item: 1, attempt: 1 });
    // Ended in the order 2, 1; still running: 3 (from 5).
    expect(spans()).toEqual(['prepare:a:1@0 0-20 done', 'prepare:a:2@1 5-10 done', 'prepare:a:3@2 5-null null']);
    expect(spans(10)).toEqual(['prepare:a:1@0 0-20 done', 'prepare:a:2@1 5-10 done', 'prepare:a:3@2 5-null null']);
    expect(spans(11)).toEqual(['prepare:a:1@0 0-20 done', 'prepare:a:3@2 5-null null']);
    expect(spans(21)).toEqual(['prepare:a:3@2 5-null null']);
    const running = rec.spans(21)[0] as TimelineSpan;
    running.end = 99;
    expect(rec.spans(21)[0]?.end).toBeNull();
  });

  it('keeps up to 1.25 × maxSpans finished spans, then trims to the newest maxSpans', () => {
    const { rec, step } = recorder({ maxSpans: 4, sampleEveryMs: Infinity });
    const finish = (i: number) => {
      step(tick(i), startPrepare(i));
      step({ type: 'prepared', time: i, item: i, attempt: 1 });
    };
    for (let i = 0; i < 5; i++) finish(i);
    expect(rec.spans().map((s) => s.partition)).toEqual([0, 1, 2, 3, 4]); // 5 = 1.25 × 4: kept
    finish(5);
    expect(rec.spans().map((s) => s.partition)).toEqual([2, 3, 4, 5]);
  });

  it('keeps 50 000 finished spans by default (trimmed once past 62 500)', () => {
    const { rec, step } = recorder({ sampleEveryMs: Infinity });
    for (let i = 0; i < 62_500; i++) {
      step(tick(i), startPrepare(i));
      step({ type: 'prepared', time: i, item: i, attempt: 1 });
    }
    expect(rec.spans().length).toBe(62_500);
    step(tick(62_500), startPrepare(62_500));
    step({ type: 'prepared', time: 62_500, item: 62_500, attempt: 1 });
    const kept = rec.spans();
    expect(kept.length).toBe(50_000);
    expect(kept[0]?.partition).toBe(12_501);
  });

  it('records each job once as submitted, with its defaults; jobs(since) from that time on, as copies', () => {
    const { rec, step } = recorder();
    step({ type: 'submit', time: 1, job: { id: 'a', kind: 'k', partitions: 3 } });
    step({ type: 'submit', time: 2, job: { id: 'b', kind: 'w', partitions: 1, priority: 'high', memory: { prepareBytes: 10 } } });
    step({ type: 'submit', time: 3, job: { id: 'a', kind: 'k', partitions: 3 } }); // a retry: the same job
    step({ type: 'submit', time: 4, job: { id: 'c', kind: 'k', partitions: 2, priority: 'low', memory: { prepareBytes: 5, deviceBytes: 6 } } });
    expect(rec.jobs()).toEqual([
      { t: 1, id: 'a', kind: 'k', partitions: 3, priority: 'normal', prepareBytes: 0, deviceBytes: 0 },
      { t: 2, id: 'b', kind: 'w', partitions: 1, priority: 'high', prepareBytes: 10, deviceBytes: 0 },
      { t: 4, id: 'c', kind: 'k', partitions: 2, priority: 'low', prepareBytes: 5, deviceBytes: 6 },
    ]);
    expect(rec.jobs(2).map((j) => j.id)).toEqual(['b', 'c']);
    expect(rec.jobs(5)).toEqual([]);
    (rec.jobs()[0] as { kind: string }).kind = 'changed';
    expect(rec.jobs()[0]?.kind).toBe('k');
  });

  it('bounds the jobs like the spans (the oldest forgotten: resubmitted, one counts as new)', () => {
    const { rec, step } = recorder({ maxSpans: 4, sampleEveryMs: Infinity });
    const submit = (id: string, time: number) => step({ type: 'submit', time, job: { id, kind: 'k', partitions: 1 } });
    for (let i = 0; i < 5; i++) submit(`j${i}`, i);
    expect(rec.jobs().map((j) => j.id)).toEqual(['j0', 'j1', 'j2', 'j3', 'j4']);
    submit('j5', 5);
    expect(rec.jobs().map((j) => j.id)).toEqual(['j2', 'j3', 'j4', 'j5']);
    submit('j0', 6); // forgotten: recorded again
    submit('j2', 7); // still known: a retry
    expect(rec.jobs().map((j) => `${j.id}@${j.t}`)).toEqual(['j2@2', 'j3@3', 'j4@4', 'j5@5', 'j0@6']);
  });

  it('keeps 50 000 jobs by default (trimmed once past 62 500)', () => {
    const { rec, step } = recorder();
    for (let i = 0; i <= 62_500; i++) step({ type: 'submit', time: i, job: { id: `j${i}`, kind: 'k', partitions: 1 } });
    const jobs = rec.jobs();
    expect(jobs.length).toBe(50_000);
    expect(jobs[0]?.id).toBe('j12501');
  });

  it('samples the levels at most every 250 ms by default, with the memory held outside reservations', () => {
    const rec = new TimelineRecorder();
    const levels = snapshot({ waiting: 3, preparing: 2, onDevice: 1, budgetUsedBytes: 1000 });
    for (const t of [0, 100, 249, 250, 499, 500, 760]) rec.record(tick(t), [], levels, t === 0 ? undefined : 7);
    expect(rec.samples()).toEqual([
      { t: 0, waiting: 3, preparing: 2, onDevice: 1, inventory: 6, budgetUsedBytes: 1000, budgetHeldBytes: 0 },
      { t: 250, waiting: 3, preparing: 2, onDevice: 1, inventory: 6, budgetUsedBytes: 1000, budgetHeldBytes: 7 },
      { t: 500, waiting: 3, preparing: 2, onDevice: 1, inventory: 6, budgetUsedBytes: 1000, budgetHeldBytes: 7 },
      { t: 760, waiting: 3, preparing: 2, onDevice: 1, inventory: 6, budgetUsedBytes: 1000, budgetHeldBytes: 7 },
    ]);
    expect(rec.samples(500).map((x) => x.t)).toEqual([500, 760]);
    expect(rec.samples(501).map((x) => x.t)).toEqual([760]);
  });

  it('a sample is the levels after the last step at its time (steps at one time showed the first one\'s: waiting 0 where two waited)', () => {
    const rec = new TimelineRecorder();
    rec.record(tick(10), [], snapshot({ waiting: 0, preparing: 2, onDevice: 1 }));
    rec.record(tick(10), [], snapshot({ waiting: 1, preparing: 1, onDevice: 1 }));
    rec.record(tick(10), [], snapshot({ waiting: 2, preparing: 0, onDevice: 1 }));
    rec.record(tick(100), [], snapshot({ waiting: 9 }));
    expect(rec.samples()).toEqual([{ t: 10, waiting: 2, preparing: 0, onDevice: 1, inventory: 3, budgetUsedBytes: 0, budgetHeldBytes: 0 }]);
  });

  it('keeps up to 1.25 × maxSamples samples, then the newest maxSamples; 20 000 by default', () => {
    const small = new TimelineRecorder({ maxSamples: 4, sampleEveryMs: 0 });
    for (let t = 0; t < 5; t++) small.record(tick(t), [], snapshot());
    expect(small.samples().map((x) => x.t)).toEqual([0, 1, 2, 3, 4]);
    small.record(tick(5), [], snapshot());
    expect(small.samples().map((x) => x.t)).toEqual([2, 3, 4, 5]);
    const big = new TimelineRecorder({ sampleEveryMs: 1 });
    for (let t = 0; t < 25_000; t++) big.record(tick(t), [], snapshot());
    expect(big.samples().length).toBe(25_000);
    big.record(tick(25_000), [], snapshot());
    expect(big.samples().length).toBe(20_000);
    expect(big.samples()[0]?.t).toBe(5001);
  });
});

import { describe, expect, it } from 'vitest';
import { Engine, createUnpacedPacer, type BatchSpec, type Command, type EngineOptions, type JobSpec } from '../../src/core/index.js';
import { EngineDriver, expectStokerError, ofType } from './helpers.js';

/** An engine whose kind `k` is prepared in batches; every item dispatched at once (unpaced). */
function grouping(prepareBatch: BatchSpec, extra: Partial<EngineOptions> = {}): EngineDriver {
  return new EngineDriver(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), kinds: { k: { prepareBatch } }, ...extra }));
}

const job = (id: string, partitions: number, kind = 'k', extra: Partial<JobSpec> = {}): JobSpec => ({ id, kind, partitions, ...extra });

/** Each startPrepareBatch as `batch:[job:partition …]`, each startPrepare as `job:partition`. */
function starts(cmds: readonly Command[]): string[] {
  return cmds.flatMap((c) => (c.type === 'startPrepareBatch' ? [`${c.batch}:[${c.items.map((i) => `${i.jobId}:${i.partition}`).join(' ')}]`] : c.type === 'startPrepare' ? [`${c.item.jobId}:${c.item.partition}`] : []));
}

const wake = (cmds: readonly Command[]) => ofType(cmds, 'wakeAt').at(-1)?.time;

describe('Engine: preparation batches', () => {
  it('prepares up to maxItems queued items of the kind together, in queue order, each batch one preparation step', () => {
    const r = grouping({ maxItems: 3 });
    const out = r.apply({ type: 'submit', time: 0, job: job('a', 7, 'k', { memory: { prepareBytes: 10 } }) });
    expect(starts(out)).toEqual(['0:[a:0 a:1 a:2]', '1:[a:3 a:4 a:5]', '2:[a:6]']);
    const s = r.e.snapshot;
    expect([s.preparing, s.preparingSteps, s.dispatched, s.backlog, s.budgetUsedBytes]).toEqual([7, 3, 7, 0, 70]);
    expect(ofType(out, 'startPrepareBatch')[0]?.items.map((i) => i.reservedBytes)).toEqual([10, 10, 10]);
  });

  it('maxPreparing caps preparation steps, not items', () => {
    const r = grouping({ maxItems: 4 }, { maxPreparing: 1 });
    expect(starts(r.apply({ type: 'submit', time: 0, job: job('a', 6) }))).toEqual(['0:[a:0 a:1 a:2 a:3]']);
    expect(r.e.snapshot.preparing).toBe(4);
    expect(starts(r.apply({ type: 'prepareBatchDone', time: 5, batch: 0 }))).toEqual(['1:[a:4 a:5]']);
  });

  it('a short batch waits up to maxWaitMs for more to arrive, then starts with what is there', () => {
    const r = grouping({ maxItems: 4, maxWaitMs: 100 });
    const first = r.apply({ type: 'submit', time: 0, job: job('a', 2) });
    expect(starts(first)).toEqual([]);
    expect(wake(first)).toBe(100);
    expect(r.e.snapshot.backlog).toBe(2);
    // A later job of the kind joins it; still short, it waits on from the same start.
    expect(starts(r.apply({ type: 'submit', time: 50, job: job('b', 1) }))).toEqual([]);
    expect(starts(r.apply({ type: 'tick', time: 100 }))).toEqual(['0:[a:0 a:1 b:0]']);
    // A batch that fills starts at once.
    expect(starts(r.apply({ type: 'submit', time: 200, job: job('c', 4) }))).toEqual(['1:[c:0 c:1 c:2 c:3]']);
  });

  it('starts a short batch at once when other work is queued behind it (it could not grow), and prepares other kinds alone', () => {
    const e = new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), kinds: { k: { prepareBatch: { maxItems: 4, maxWaitMs: 1000 } } }, maxPreparing: 1 });
    const d = new EngineDriver(e);
    expect(starts(d.apply({ type: 'submit', time: 0, job: job('x', 1, 'other') }))).toEqual(['x:0']);
    d.apply({ type: 'submit', time: 1, job: job('a', 2) });
    d.apply({ type: 'submit', time: 1, job: job('b', 1, 'other') });
    expect(starts(d.apply({ type: 'prepared', time: 2, item: d.item('x:0').id, attempt: 1 }))).toEqual(['0:[a:0 a:1]']);
    expect(starts(d.apply({ type: 'prepareBatchDone', time: 3, batch: 0 }))).toEqual(['b:0']);
  });

  it('reserves memory for the whole batch: it waits for all of it, and is no larger than the whole budget holds', () => {
    const r = grouping({ maxItems: 4 }, { budgetBytes: 50 });
    const out = r.apply({ type: 'submit', time: 0, job: job('a', 8, 'k', { memory: { prepareBytes: 10 } }) });
    // 4 fit (40); the next batch needs 40 of the 10 left: it waits for memory rather than start short.
    expect(starts(out)).toEqual(['0:[a:0 a:1 a:2 a:3]']);
    expect(r.e.snapshot.budgetBlocked).toBe(true);
    r.apply({ type: 'prepareBatchDone', time: 1, batch: 0 });
    // Their memory is held while they wait for the device; one goes to it and keeps only deviceBytes (0).
    expect(r.e.budget.used).toBe(30);
    const small = grouping({ maxItems: 4 }, { budgetBytes: 25 });
    expect(starts(small.apply({ type: 'submit', time: 0, job: job('a', 3, 'k', { memory: { prepareBytes: 10 } }) }))).toEqual(['0:[a:0 a:1]']);
  });

  it('a finished batch makes its items wait for a device with its latency; the kind counts its batches', () => {
    const r = grouping({ maxItems: 3 });
    r.apply({ type: 'submit', time: 0, job: job('a', 3) });
    const out = r.apply({ type: 'prepareBatchDone', time: 40, batch: 0, latencyMs: 30 });
    const s = r.e.snapshot;
    expect(ofType(out, 'startDevice').map((c) => c.item.partition)).toEqual([0]);
    expect([s.preparing, s.preparingSteps, s.waiting, s.onDevice, s.prepareCompletions, s.prepareLatencyMsTotal]).toEqual([0, 0, 2, 1, 3, 90]);
    expect(s.kinds[0]?.prepareBatch).toEqual({ maxItems: 3, batches: 1, items: 3 });
    // An item of a batch is answered by the batch only: its own prepared event is stale.
    expect(ofType(r.apply({ type: 'prepared', time: 41, item: r.item('a:1').id, attempt: 1 }), 'startDevice')).toEqual([]);
  });

  it('an item named failed in a batch fails alone; the rest are prepared', () => {
    const r = grouping({ maxItems: 4, maxWaitMs: 1 });
    r.apply({ type: 'submit', time: 0, job: job('a', 2) });
    r.apply({ type: 'submit', time: 0, job: job('b', 1) });
    expect(starts(r.apply({ type: 'tick', time: 1 }))).toEqual(['0:[a:0 a:1 b:0]']);
    const out = r.apply({ type: 'prepareBatchDone', time: 5, batch: 0, failed: [{ item: r.item('a:1').id, reason: 'bad witness' }] });
    expect(ofType(out, 'finishJob').map((c) => `${c.jobId}:${c.state}:${c.reason}`)).toEqual(['a:failed:job a: partition 1 failed in preparation: bad witness']);
    // a:0 was prepared, then withdrawn with its job (the failed item's abort names no batch: it was answered); b:0 went on.
    expect(ofType(out, 'abort').map((c) => `${c.item.jobId}:${c.item.partition}:${c.stage}:${c.batch === undefined}`)).toEqual(['a:0:waiting:true', 'a:1:preparing:true']);
    expect(ofType(out, 'startDevice').map((c) => c.item.jobId)).toEqual(['b']);
    expect(r.e.snapshot.preparingSteps).toBe(0);
  });

  it('an item named failed in a batch is retried while retries are left, unless its failure is final', () => {
    const r = grouping({ maxItems: 4, maxWaitMs: 1 }, { retries: 2 });
    r.apply({ type: 'submit', time: 0, job: job('a', 1) });
    r.apply({ type: 'submit', time: 0, job: job('b', 1) });
    expect(starts(r.apply({ type: 'tick', time: 1 }))).toEqual(['0:[a:0 b:0]']);
    const out = r.apply({ type: 'prepareBatchDone', time: 5, batch: 0, failed: [{ item: r.item('a:0').id, reason: 'out of memory' }, { item: r.item('b:0').id, reason: 'bad witness', final: true }] });
    expect(ofType(out, 'finishJob').map((c) => `${c.jobId}:${c.state}:${c.reason}`)).toEqual(['b:failed:job b: partition 0 failed in preparation: bad witness']);
    // a:0 is queued again (for a batch of its own after maxWaitMs), its job alive.
    expect(r.item('a:0').state).toBe('queued');
    expect(starts(r.apply({ type: 'tick', time: 7 }))).toEqual(['1:[a:0]']);
  });

  it('a batch failed without naming items: each is prepared again alone (no retry spent), then fails as itself', () => {
    const r = grouping({ maxItems: 4 });
    r.apply({ type: 'submit', time: 0, job: job('a', 2) });
    const out = r.apply({ type: 'prepareBatchFailed', time: 5, batch: 0, reason: 'out of memory' });
    // Batches of one: the kind's step is always a preparation batch.
    expect(starts(out)).toEqual(['1:[a:0]', '2:[a:1]']);
    expect(ofType(out, 'finishJob')).toEqual([]);
    expect(r.e.snapshot.preparingSteps).toBe(2);
    r.apply({ type: 'prepareBatchDone', time: 6, batch: 1 });
    const end = r.apply({ type: 'prepareBatchFailed', time: 7, batch: 2, reason: 'out of memory' });
    expect(ofType(end, 'finishJob').map((c) => `${c.jobId}:${c.code}`)).toEqual(['a:E_PREPARE_FAILED']);
  });

  it('with retries, an item that failed alone joins batches again', () => {
    const r = grouping({ maxItems: 2, maxWaitMs: 1 }, { retries: 1 });
    r.apply({ type: 'submit', time: 0, job: job('a', 1) });
    expect(starts(r.apply({ type: 'submit', time: 0, job: job('b', 1) }))).toEqual(['0:[a:0 b:0]']);
    expect(starts(r.apply({ type: 'prepareBatchFailed', time: 1, batch: 0, reason: 'x' }))).toEqual(['1:[a:0]', '2:[b:0]']);
    const out = r.apply({ type: 'prepareBatchFailed', time: 2, batch: 1, reason: 'x' });
    // a:0 is retried (its failure was its own) in a batch again, which waits for company as any does.
    expect(starts(out)).toEqual([]);
    expect(ofType(out, 'finishJob')).toEqual([]);
    expect(starts(r.apply({ type: 'tick', time: 3 }))).toEqual(['3:[a:0]']);
  });

  it('a cancelled job leaves its batch; the step is withdrawn with its last item, and a late answer is ignored', () => {
    const r = grouping({ maxItems: 3, maxWaitMs: 1 });
    r.apply({ type: 'submit', time: 0, job: job('a', 1) });
    expect(starts(r.apply({ type: 'submit', time: 0, job: job('b', 2) }))).toEqual(['0:[a:0 b:0 b:1]']);
    expect(ofType(r.apply({ type: 'cancel', time: 1, jobId: 'a' }), 'abort').map((c) => [c.stage, c.batch])).toEqual([['preparing', { id: 0, remaining: 2 }]]);
    expect([r.e.snapshot.preparing, r.e.snapshot.preparingSteps]).toEqual([2, 1]);
    const cancelB = r.apply({ type: 'cancel', time: 2, jobId: 'b' });
    expect(ofType(cancelB, 'abort').map((c) => c.batch?.remaining)).toEqual([1, 0]);
    expect([r.e.snapshot.preparing, r.e.snapshot.preparingSteps, r.e.budget.used]).toEqual([0, 0, 0]);
    expect(r.apply({ type: 'prepareBatchDone', time: 3, batch: 0 }).filter((c) => c.type !== 'wakeAt')).toEqual([]);
    expect(r.e.snapshot.prepareCompletions).toBe(0);
  });

  it('refuses a bad prepareBatch option and a prepareBatchDone naming an item outside its batch', () => {
    expectStokerError(() => grouping({ maxItems: 0 }), 'E_INVALID_OPTION', /kinds\.k\.prepareBatch\.maxItems must be an integer ≥ 1/);
    expectStokerError(() => grouping({ maxItems: 2, maxWaitMs: Infinity }), 'E_INVALID_OPTION', /kinds\.k\.prepareBatch\.maxWaitMs/);
    expectStokerError(() => new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), kinds: { k: null as never } }), 'E_INVALID_OPTION', /kinds\.k must be an object/);
    const r = grouping({ maxItems: 2 });
    r.apply({ type: 'submit', time: 0, job: job('a', 2) });
    expectStokerError(() => r.apply({ type: 'prepareBatchDone', time: 1, batch: 0, failed: [{ item: 99, reason: 'x' }] }), 'E_INVALID_EVENT', /not in batch 0/);
    expect(r.e.snapshot.preparing).toBe(2);
  });
});

describe('Engine: preparation batches wait from their oldest item', () => {
  it('a held batch withdrawn leaves no wait behind: the next one waits its own maxWaitMs', () => {
    const r = grouping({ maxItems: 4, maxWaitMs: 100 });
    expect(wake(r.apply({ type: 'submit', time: 0, job: job('a', 1) }))).toBe(100);
    r.apply({ type: 'cancel', time: 10, jobId: 'a' });
    const out = r.apply({ type: 'submit', time: 5000, job: job('b', 1) });
    expect(starts(out)).toEqual([]);
    expect(wake(out)).toBe(5100);
  });

  it('items left queued after a full batch started keep the time they have waited', () => {
    const r = grouping({ maxItems: 2, maxWaitMs: 100 });
    r.apply({ type: 'submit', time: 0, job: job('a', 1) });
    // A more urgent pair fills a batch at 50 and starts; a:0 still waits from 0.
    expect(starts(r.apply({ type: 'submit', time: 50, job: job('u', 2, 'k', { priority: 'critical' }) }))).toEqual(['0:[u:0 u:1]']);
    expect(starts(r.apply({ type: 'tick', time: 100 }))).toEqual(['1:[a:0]']);
  });
});

import { describe, expect, it } from 'vitest';
import { Engine, createUnpacedPacer, type Command, type DeviceSpec, type JobSpec } from '../../src/core/index.js';
import { EngineDriver, expectStokerError, ofType } from './helpers.js';

/** An engine with one batching device; every item dispatched at once (unpaced). */
function batching(batch: DeviceSpec['batch'], workers = 1, extra: Partial<DeviceSpec> = {}, retries = 0): Driver {
  return new Driver(new Engine({ devices: [{ workers, batch, ...extra }], pacer: createUnpacedPacer(), retries }));
}

const job = (id: string, partitions: number, kind = 'k', extra: Partial<JobSpec> = {}): JobSpec => ({ id, kind, partitions, ...extra });

class Driver extends EngineDriver {
  prepared(time: number, ...keys: string[]): Command[] {
    const out: Command[] = [];
    for (const key of keys) {
      const it = this.item(key);
      out.push(...this.apply({ type: 'prepared', time, item: it.id, attempt: it.attempt }));
    }
    return out;
  }
}

/** Each startBatch as `batch:[job:partition …]@device/worker`. */
function batches(cmds: readonly Command[]): string[] {
  return ofType(cmds, 'startBatch').map((c) => `${c.batch}:[${c.items.map((i) => `${i.jobId}:${i.partition}`).join(' ')}]@${c.device}/${c.worker}`);
}

const wake = (cmds: readonly Command[]) => ofType(cmds, 'wakeAt').at(-1)?.time;

describe('Engine: batching devices', () => {
  it('a free worker takes up to maxItems waiting items of one kind at once, in queue order, as one busy worker', () => {
    const r = batching({ maxItems: 3 }, 2);
    r.apply({ type: 'submit', time: 0, job: job('a', 5) });
    // The first item starts alone (only it waits, nothing asks to wait for more), the next three batch, then one.
    expect(batches(r.prepared(1, 'a:0'))).toEqual(['0:[a:0]@0/0']);
    const out = r.prepared(2, 'a:1', 'a:2', 'a:3', 'a:4');
    expect(batches(out)).toEqual(['1:[a:1]@0/1']);
    expect(r.e.snapshot.waiting).toBe(3);
    expect(r.e.snapshot.devices[0]?.busy).toBe(2);
    expect(batches(r.apply({ type: 'batchDone', time: 3, batch: 0 }))).toEqual(['2:[a:2 a:3 a:4]@0/0']);
    const s = r.e.snapshot;
    expect([s.onDevice, s.waiting, s.devices[0]?.busy]).toEqual([4, 0, 2]);
    expect(ofType(r.log, 'startDevice')).toEqual([]);
  });

  it('a batch counts its busy time once: completions per item, the batch counters for a fit of busy time over size', () => {
    const r = batching({ maxItems: 4 });
    r.apply({ type: 'submit', time: 0, job: job('a', 1) });
    r.prepared(1, 'a:0');
    r.apply({ type: 'submit', time: 1, job: job('b', 4) });
    r.prepared(2, 'b:0', 'b:1', 'b:2', 'b:3');
    r.apply({ type: 'batchDone', time: 5, batch: 0, busyMs: 3 }); // a:0 alone
    r.apply({ type: 'batchDone', time: 9, batch: 1, busyMs: 4 }); // b:0–3
    const d = r.e.snapshot.devices[0];
    expect(d?.completions).toBe(5);
    expect(d?.busyMs).toBe(7);
    expect(d?.batch).toEqual({ maxItems: 4, batches: 2, items: 5 });
    expect(r.e.snapshot.kinds[0]?.busyMs).toEqual([7]);
    expect(ofType(r.log, 'finishJob').map((c) => `${c.jobId}:${c.state}`)).toEqual(['a:done', 'b:done']);
    // Without busyMs, the batch's time since it started.
    expect(r.e.snapshot.deviceBusyMs).toBe(7);
  });

  it('waits up to maxWaitMs for a fuller batch while more of the kind are in preparation, then takes what is there', () => {
    const r = batching({ maxItems: 4, maxWaitMs: 10 });
    r.apply({ type: 'submit', time: 0, job: job('a', 6) });
    const first = r.prepared(100, 'a:0');
    expect(batches(first)).toEqual([]);
    expect(wake(first)).toBe(110);
    expect(batches(r.prepared(105, 'a:1'))).toEqual([]);
    // The timer fires: the oldest has waited maxWaitMs.
    expect(batches(r.apply({ type: 'tick', time: 110 }))).toEqual(['0:[a:0 a:1]@0/0']);
    // A full batch starts at once, without waiting.
    r.apply({ type: 'batchDone', time: 120, batch: 0 });
    expect(batches(r.prepared(121, 'a:2', 'a:3', 'a:4'))).toEqual([]);
    expect(batches(r.prepared(122, 'a:5'))).toEqual(['1:[a:2 a:3 a:4 a:5]@0/0']);
  });

  it('a worker held for a fuller batch of one kind takes another kind meanwhile', () => {
    const r = batching({ maxItems: 4, maxWaitMs: 10 });
    r.apply({ type: 'submit', time: 0, job: job('a', 3, 'a') });
    r.apply({ type: 'submit', time: 0, job: job('b', 1, 'b') });
    expect(batches(r.prepared(100, 'a:0'))).toEqual([]); // held: a:1, a:2 are in preparation
    expect(batches(r.prepared(101, 'b:0'))).toEqual(['0:[b:0]@0/0']); // nothing more of b is coming
  });

  it('does not wait when no more of the kind is in preparation', () => {
    const r = batching({ maxItems: 4, maxWaitMs: 1000 });
    r.apply({ type: 'submit', time: 0, job: job('a', 2) });
    r.prepared(1, 'a:0');
    expect(batches(r.prepared(2, 'a:1'))).toEqual(['0:[a:0 a:1]@0/0']);
  });

  it('batches one kind at a time; items of other kinds keep their places in the queue', () => {
    const r = batching({ maxItems: 3 });
    r.apply({ type: 'submit', time: 0, job: job('x', 1, 'x') });
    r.prepared(1, 'x:0'); // occupies the worker
    r.apply({ type: 'submit', time: 1, job: job('a', 2, 'a') });
    r.apply({ type: 'submit', time: 1, job: job('b', 2, 'b') });
    r.apply({ type: 'submit', time: 1, job: job('c', 1, 'a') });
    r.prepared(2, 'a:0', 'b:0', 'a:1', 'b:1', 'c:0');
    expect(batches(r.apply({ type: 'batchDone', time: 3, batch: 0 }))).toEqual(['1:[a:0 a:1 c:0]@0/0']);
    expect(batches(r.apply({ type: 'batchDone', time: 4, batch: 1 }))).toEqual(['2:[b:0 b:1]@0/0']);
  });

  it('an item that failed in a batch the device named fails alone; the rest of the batch is done', () => {
    const r = batching({ maxItems: 4 });
    r.apply({ type: 'submit', time: 0, job: job('w', 1) });
    r.prepared(1, 'w:0');
    r.apply({ type: 'submit', time: 1, job: job('a', 2) });
    r.apply({ type: 'submit', time: 1, job: job('b', 1) });
    r.prepared(2, 'a:0', 'a:1', 'b:0');
    r.apply({ type: 'batchDone', time: 3, batch: 0 });
    const out = r.apply({ type: 'batchDone', time: 5, batch: 1, failed: [{ item: r.item('a:1').id, reason: 'bad input' }] });
    const ends = ofType(out, 'finishJob').map((c) => `${c.jobId}:${c.state}${c.reason ? ` ${c.reason}` : ''}`);
    expect(ends).toEqual(['b:done', 'a:failed job a: partition 1 failed on device 0: bad input']);
    // The failed item's own abort names no batch: the batch was answered, there is no step left to stop.
    expect(ofType(out, 'abort').map((c) => [c.item.partition, c.batch])).toEqual([[1, undefined]]);
    expect(r.e.snapshot.devices[0]?.busy).toBe(0);
    expect(r.e.snapshot.onDevice).toBe(0);
    expect(r.e.budget.used).toBe(0);
  });

  it('an item failed in a batch is retried while retries are left, unless its failure is final', () => {
    const r = batching({ maxItems: 4 }, 1, {}, 2);
    r.apply({ type: 'submit', time: 0, job: job('w', 1) });
    r.prepared(1, 'w:0');
    r.apply({ type: 'submit', time: 1, job: job('a', 1) });
    r.apply({ type: 'submit', time: 1, job: job('b', 1) });
    r.prepared(2, 'a:0', 'b:0');
    r.apply({ type: 'batchDone', time: 3, batch: 0 });
    const out = r.apply({ type: 'batchDone', time: 5, batch: 1, failed: [{ item: r.item('a:0').id, reason: 'device reset' }, { item: r.item('b:0').id, reason: 'bad input', final: true }] });
    expect(ofType(out, 'finishJob').map((c) => `${c.jobId}:${c.state} ${c.reason}`)).toEqual(['b:failed job b: partition 0 failed on device 0: bad input']);
    expect(ofType(out, 'startPrepare').map((c) => `${c.item.jobId}:${c.item.partition}`)).toEqual(['a:0']);
  });

  /** Job a's two partitions in batch 1 on the one worker (w:0 ran alone first, as batch 0). */
  function twoInABatch(r: Driver): void {
    r.apply({ type: 'submit', time: 0, job: job('w', 1) });
    r.prepared(1, 'w:0');
    r.apply({ type: 'submit', time: 1, job: job('a', 2) });
    r.prepared(2, 'a:0', 'a:1');
    r.apply({ type: 'batchDone', time: 3, batch: 0 });
  }

  it('a batch that failed without naming items: each runs again alone (no retry spent), then fails as itself', () => {
    const r = batching({ maxItems: 4 });
    twoInABatch(r);
    const out = r.apply({ type: 'batchFailed', time: 4, batch: 1, reason: 'device reset' });
    // Both are prepared again (the device had taken their data).
    expect(ofType(out, 'startPrepare').map((c) => c.item.partition)).toEqual([0, 1]);
    expect(ofType(out, 'finishJob')).toEqual([]);
    // They run alone, although both wait.
    expect(batches(r.prepared(5, 'a:0', 'a:1'))).toEqual(['2:[a:0]@0/0']);
    expect(batches(r.apply({ type: 'batchDone', time: 6, batch: 2 }))).toEqual(['3:[a:1]@0/0']);
    const end = r.apply({ type: 'batchFailed', time: 7, batch: 3, reason: 'device reset' });
    expect(ofType(end, 'finishJob').map((c) => `${c.jobId}:${c.state}:${c.code}`)).toEqual(['a:failed:E_DEVICE_FAILED']);
  });

  it('a batch failed with workerLost: its worker is out of service before the next dispatch (nothing waiting is sent to it)', () => {
    const r = batching({ maxItems: 4 });
    twoInABatch(r);
    r.apply({ type: 'submit', time: 3, job: job('b', 1) });
    r.prepared(3, 'b:0');
    const out = r.apply({ type: 'batchFailed', time: 4, batch: 1, reason: 'it exited', workerLost: true });
    expect(batches(out)).toEqual([]);
    expect(r.e.snapshot).toMatchObject({ workers: 0, waiting: 1 });
    expect(() => r.apply({ type: 'batchFailed', time: 5, batch: 1, reason: 'x', workerLost: 1 as never })).toThrow(/batchFailed\.workerLost must be true, false or absent \(got 1\)/);
  });

  it('a batch failed with final: several run again alone (it may be any one of them), one alone fails its job at once, its retries unspent', () => {
    const r = batching({ maxItems: 4 }, 1, {}, 3);
    twoInABatch(r);
    const out = r.apply({ type: 'batchFailed', time: 4, batch: 1, reason: 'answered 400', final: true });
    expect(ofType(out, 'finishJob')).toEqual([]);
    expect(ofType(out, 'startPrepare').map((c) => c.item.partition)).toEqual([0, 1]);
    expect(batches(r.prepared(5, 'a:0', 'a:1'))).toEqual(['2:[a:0]@0/0']);
    const end = r.apply({ type: 'batchFailed', time: 6, batch: 2, reason: 'answered 400', final: true });
    expect(ofType(end, 'finishJob').map((c) => `${c.jobId}:${c.state} ${c.reason}`)).toEqual(['a:failed job a: partition 0 failed on device 0: answered 400']);
    expect(() => r.apply({ type: 'batchFailed', time: 7, batch: 2, reason: 'x', final: 'yes' as never })).toThrow(/batchFailed\.final must be true, false or absent \(got "yes"\)/);
  });

  it('a cancelled job leaves a batch; its worker stays busy until the last item is withdrawn', () => {
    const r = batching({ maxItems: 4 });
    r.apply({ type: 'submit', time: 0, job: job('w', 1) });
    r.prepared(1, 'w:0');
    r.apply({ type: 'submit', time: 1, job: job('a', 1) });
    r.apply({ type: 'submit', time: 1, job: job('b', 2) });
    r.prepared(2, 'a:0', 'b:0', 'b:1');
    r.apply({ type: 'batchDone', time: 3, batch: 0 });
    const cancelA = r.apply({ type: 'cancel', time: 4, jobId: 'a' });
    expect(ofType(cancelA, 'abort').map((c) => c.batch)).toEqual([{ id: 1, remaining: 2 }]);
    expect(r.e.snapshot.devices[0]?.busy).toBe(1);
    expect(r.e.snapshot.onDevice).toBe(2);
    const cancelB = r.apply({ type: 'cancel', time: 5, jobId: 'b' });
    expect(ofType(cancelB, 'abort').map((c) => c.batch)).toEqual([
      { id: 1, remaining: 1 },
      { id: 1, remaining: 0 },
    ]);
    expect(r.e.snapshot.devices[0]?.busy).toBe(0);
    // A late answer for the withdrawn batch is ignored.
    expect(r.apply({ type: 'batchDone', time: 6, batch: 1 }).filter((c) => c.type !== 'wakeAt')).toEqual([]);
    expect(r.e.snapshot.deviceCompletions).toBe(1);
  });

  it('a lost worker gives its whole batch back to be prepared again', () => {
    const r = batching({ maxItems: 4 }, 2);
    r.apply({ type: 'submit', time: 0, job: job('a', 3) });
    r.prepared(1, 'a:0');
    r.prepared(2, 'a:1', 'a:2');
    const out = r.apply({ type: 'workerLost', time: 3, device: 0, worker: 1 });
    expect(ofType(out, 'abort').map((c) => `${c.item.partition}:${c.batch?.remaining}`)).toEqual(['1:0']);
    expect(ofType(out, 'startPrepare').map((c) => c.item.partition)).toEqual([1]);
    expect(r.e.snapshot.devices[0]?.busy).toBe(1);
    expect(r.e.workerStates()[0]?.map((w) => [w.alive, w.item?.partition ?? null, w.batch ?? null])).toEqual([
      [true, 0, 1],
      [false, null, null],
    ]);
  });

  it('refuses a bad batch option and a batchDone naming an item outside its batch', () => {
    expectStokerError(() => batching({ maxItems: 0 }), 'E_INVALID_OPTION', /devices\[0\]\.batch\.maxItems must be an integer ≥ 1/);
    expectStokerError(() => batching({ maxItems: 2, maxWaitMs: -1 }), 'E_INVALID_OPTION', /devices\[0\]\.batch\.maxWaitMs/);
    const r = batching({ maxItems: 2 });
    r.apply({ type: 'submit', time: 0, job: job('a', 1) });
    r.prepared(1, 'a:0');
    expectStokerError(() => r.apply({ type: 'batchDone', time: 2, batch: 0, failed: [{ item: 99, reason: 'x' }] }), 'E_INVALID_EVENT', /not in batch 0/);
    expectStokerError(() => r.apply({ type: 'batchDone', time: 2, batch: 0, failed: 'x' as never }), 'E_INVALID_EVENT', /must be an array/);
    // Nothing changed: the batch still runs.
    expect(r.e.snapshot.onDevice).toBe(1);
  });
});

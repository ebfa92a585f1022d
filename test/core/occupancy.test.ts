/**
 * The occupancy meter (src/core/occupancy.ts) on hand-made engine steps, with exact values: what
 * a worker's busy time reads while an item runs, when it ends, fails, is withdrawn or its worker
 * is lost, and for batches. (test/sim/occupancy.test.ts checks it against whole simulated runs.)
 */
import { describe, expect, it } from 'vitest';
import { OccupancyMeter, totalBusyMs, windowOccupancy, type Command, type EngineEvent, type ItemView } from '../../src/core/index.js';

function view(id: number): ItemView {
  return { id, jobId: 'j', kind: 'k', partition: id, priority: 'normal', state: 'on-device', attempt: 1, failures: 0, reservedBytes: 0 };
}
const tick = (time: number): EngineEvent => ({ type: 'tick', time });
const start = (id: number, device: number, worker: number, attempt = 1): Command => ({ type: 'startDevice', item: view(id), attempt, device, worker });
const done = (time: number, item: number, busyMs?: number, attempt = 1): EngineEvent => ({ type: 'deviceDone', time, item, attempt, ...(busyMs === undefined ? {} : { busyMs }) });

describe('windowOccupancy and totalBusyMs', () => {
  it('divide the busy time by the window times the workers, 0 for an empty window or no workers', () => {
    expect(windowOccupancy(1500, 1000, 2)).toBe(0.75);
    expect(windowOccupancy(1500, 0, 2)).toBe(0);
    expect(windowOccupancy(1500, 1000, 0)).toBe(0);
    expect(windowOccupancy(1500, -1, 2)).toBe(0);
  });

  it('sums every worker of every device', () => {
    expect(totalBusyMs([[1, 2], [3], []])).toBe(6);
    expect(totalBusyMs([])).toBe(0);
  });
});

describe('OccupancyMeter', () => {
  it('counts the running part of an item in flight, then credits what the worker measured', () => {
    const m = new OccupancyMeter([2, 1]);
    expect(m.busyMs(0)).toEqual([[0, 0], [0]]);
    m.record(tick(100), [start(7, 0, 1)]);
    expect(m.busyMs(100)).toEqual([[0, 0], [0]]);
    expect(m.busyMs(350)).toEqual([[0, 250], [0]]);
    // Done at 600 having measured 400 of the 500 it was held: the reading never goes back below 250.
    m.record(done(600, 7, 400), []);
    expect(m.busyMs(600)).toEqual([[0, 400], [0]]);
    expect(m.busyMs(900)).toEqual([[0, 400], [0]]);
  });

  it('never credits more than the item was held, and the held time when the worker did not measure', () => {
    const m = new OccupancyMeter([1]);
    m.record(tick(0), [start(1, 0, 0)]);
    m.record(done(300, 1, 5000), []);
    expect(m.busyMs(300)).toEqual([[300]]);
    m.record(tick(1000), [start(2, 0, 0)]);
    m.record(done(1200, 2), []);
    expect(m.busyMs(1200)).toEqual([[500]]);
  });

  it('keeps a reading monotone: a measure below what was shown holds the shown value until the meter passes it', () => {
    const m = new OccupancyMeter([1]);
    m.record(tick(0), [start(1, 0, 0)]);
    expect(m.busyMs(1000)).toEqual([[1000]]);
    m.record(done(1000, 1, 200), []);
    expect(m.busyMs(1000)).toEqual([[1000]]);
    m.record(tick(1000), [start(2, 0, 0)]);
    expect(m.busyMs(1500)).toEqual([[1000]]); // 200 + 500 < 1000 shown
    expect(m.busyMs(2000)).toEqual([[1200]]); // 200 + 1000
  });

  it('ignores an answer for another attempt, and credits the held time of a failed step', () => {
    const m = new OccupancyMeter([1]);
    m.record(tick(0), [start(1, 0, 0, 2)]);
    m.record(done(100, 1, 50, 1), []); // a stale attempt: the item still runs
    expect(m.busyMs(200)).toEqual([[200]]);
    m.record({ type: 'deviceFailed', time: 300, item: 1, attempt: 2, reason: 'x' }, []);
    expect(m.busyMs(400)).toEqual([[300]]);
  });

  it('ends what a lost worker ran at the loss, and only on that worker', () => {
    const m = new OccupancyMeter([2]);
    m.record(tick(0), [start(1, 0, 0), start(2, 0, 1)]);
    m.record({ type: 'workerLost', time: 400, device: 0, worker: 1 }, []);
    expect(m.busyMs(1000)).toEqual([[1000, 400]]);
  });

  it('ends an item withdrawn from its device at the withdrawal, not one withdrawn elsewhere', () => {
    const m = new OccupancyMeter([1]);
    m.record(tick(0), [start(1, 0, 0)]);
    m.record({ type: 'cancel', time: 250, jobId: 'j' }, [{ type: 'abort', item: view(1), stage: 'waiting', reason: 'r' }]);
    expect(m.busyMs(300)).toEqual([[300]]);
    m.record({ type: 'cancel', time: 300, jobId: 'j' }, [{ type: 'abort', item: view(1), stage: 'on-device', reason: 'r' }]);
    expect(m.busyMs(800)).toEqual([[300]]);
  });

  it('closes an item started again on a worker (a retry) at the new start', () => {
    const m = new OccupancyMeter([2]);
    m.record(tick(0), [start(1, 0, 0)]);
    m.record(tick(100), [start(1, 0, 1, 2)]);
    expect(m.busyMs(300)).toEqual([[100, 200]]);
  });

  it('runs a batch on its worker until its last item is withdrawn, and credits its measured time once', () => {
    const m = new OccupancyMeter([1]);
    const batch: Command = { type: 'startBatch', batch: 3, items: [view(1), view(2)], device: 0, worker: 0 };
    m.record(tick(0), [batch]);
    m.record(tick(100), [{ type: 'abort', item: view(1), stage: 'on-device', reason: 'r', batch: { id: 3, remaining: 1 } }]);
    expect(m.busyMs(200)).toEqual([[200]]);
    m.record(tick(300), [{ type: 'abort', item: view(2), stage: 'on-device', reason: 'r', batch: { id: 3, remaining: 0 } }]);
    expect(m.busyMs(500)).toEqual([[300]]);
    m.record(tick(1000), [{ ...batch, batch: 4 }]);
    m.record({ type: 'batchDone', time: 1400, batch: 4, busyMs: 250 }, []);
    expect(m.busyMs(2000)).toEqual([[550]]);
    m.record(tick(2000), [{ ...batch, batch: 5 }]);
    m.record({ type: 'batchFailed', time: 2100, batch: 5, reason: 'x' }, []);
    m.record(tick(2100), [{ ...batch, batch: 6 }]);
    m.record({ type: 'batchDone', time: 2400, batch: 6 }, []);
    expect(m.busyMs(3000)).toEqual([[550 + 100 + 300]]);
  });

  it('ignores a worker the meter was not built with', () => {
    const m = new OccupancyMeter([1]);
    m.record(tick(0), [start(1, 0, 5), start(2, 3, 0)]);
    expect(m.busyMs(100)).toEqual([[0]]);
    m.record(done(100, 1), []);
    m.record(done(100, 2), []);
    expect(m.busyMs(200)).toEqual([[0]]);
  });

  it('keeps batches apart from items and from each other (keys below every item id), and ignores an answer for a batch it never saw', () => {
    const m = new OccupancyMeter([3]);
    const batch = (id: number, worker: number): Command => ({ type: 'startBatch', batch: id, items: [view(10 + id)], device: 0, worker });
    m.record(tick(100), [start(2, 0, 0), batch(3, 1), batch(4, 2)]);
    m.record({ type: 'batchDone', time: 300, batch: 3, busyMs: 150 }, []);
    m.record({ type: 'batchDone', time: 300, batch: 9, busyMs: 150 }, []);
    expect(m.busyMs(500)).toEqual([[400, 150, 400]]);
  });

  it('times from each start: a loss, a withdrawal and a restart credit the time since the item started, not since 0', () => {
    const m = new OccupancyMeter([2, 1]);
    m.record(tick(100), [start(1, 0, 0), start(2, 1, 0)]);
    // Worker 0 of device 1 is lost, not worker 0 of device 0.
    m.record({ type: 'workerLost', time: 400, device: 1, worker: 0 }, []);
    expect(m.busyMs(500)).toEqual([[400, 0], [300]]);
    m.record(tick(600), [start(1, 0, 1, 2)]); // item 1 again, on worker 1: its first run ends here
    m.record({ type: 'cancel', time: 700, jobId: 'j' }, [{ type: 'abort', item: view(1), stage: 'on-device', reason: 'r' }]);
    expect(m.busyMs(800)).toEqual([[500, 100], [300]]);
  });

  it('ignores a worker index one past the device’s last', () => {
    const m = new OccupancyMeter([1]);
    m.record(tick(0), [start(1, 0, 1)]);
    expect(m.busyMs(100)).toEqual([[0]]);
    m.record(done(100, 1), []);
    expect(m.busyMs(200)).toEqual([[0]]);
  });
});

/**
 * Occupancy that is true in every window. The meter (what the progress line, the metrics, the
 * history and the dashboard read) never gives a window more busy time than its length, whatever
 * the devices report; and in simulation every figure of the history equals the truth derived from
 * the trace (the spans of what ran where) within 1 %.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createPacer, OccupancyMeter, TimelineRecorder, windowOccupancy, type Command, type EngineEvent, type ItemView, type PacerMode } from '../../src/core/index.js';
import { parseScenario } from '../../src/sim/scenario.js';
import { simulate } from '../../src/sim/simulator.js';
import { History, type HistoryReading, type HistorySample } from '../../src/server/history.js';

const item = (id: number) => ({ id }) as ItemView;

describe('windowOccupancy', () => {
  it('is the busy time gained ÷ (window × workers), and 0 for an empty window or no workers', () => {
    expect(windowOccupancy(1500, 1000, 2)).toBe(0.75);
    expect(windowOccupancy(1000, 1000, 1)).toBe(1);
    expect(windowOccupancy(10, 0, 2)).toBe(0);
    expect(windowOccupancy(10, 1000, 0)).toBe(0);
  });
});

describe('OccupancyMeter', () => {
  it('credits the running part of an item, and never more than a window’s length per worker', () => {
    const op = fc.oneof(
      fc.record({ type: fc.constant('start' as const), worker: fc.integer({ min: 0, max: 1 }) }),
      // A finished item's measure: below, at or above the time it was held (a lying device).
      fc.record({ type: fc.constant('done' as const), factor: fc.constantFrom(0, 0.3, 1, 1.7, 50) }),
      fc.constant({ type: 'fail' as const }),
      fc.constant({ type: 'abort' as const }),
      fc.record({ type: fc.constant('lost' as const), worker: fc.integer({ min: 0, max: 1 }) }),
      fc.constant({ type: 'read' as const }),
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(op, fc.double({ min: 0, max: 50, noNaN: true })), { maxLength: 80 }), (ops) => {
        const meter = new OccupancyMeter([2]);
        let t = 0;
        let nextId = 1;
        const running: { id: number; worker: number; since: number }[] = [];
        let last = { t: 0, busy: [0, 0] };
        const check = () => {
          const busy = meter.busyMs(t)[0] as number[];
          busy.forEach((b, w) => {
            const d = b - (last.busy[w] as number);
            expect(d).toBeGreaterThanOrEqual(0);
            expect(d).toBeLessThanOrEqual(t - last.t + 1e-9);
          });
          last = { t, busy };
        };
        for (const [o, dt] of ops) {
          t += dt;
          const step = (event: EngineEvent, cmds: Command[] = []) => meter.record(event, cmds);
          if (o.type === 'start') {
            if (running.some((r) => r.worker === o.worker)) continue;
            const id = nextId++;
            running.push({ id, worker: o.worker, since: t });
            step({ type: 'tick', time: t }, [{ type: 'startDevice', item: item(id), attempt: 1, device: 0, worker: o.worker }]);
          } else if (o.type === 'read') check();
          else if (o.type === 'lost') {
            step({ type: 'workerLost', time: t, device: 0, worker: o.worker });
            running.splice(0, running.length, ...running.filter((r) => r.worker !== o.worker));
          } else {
            const r = running.shift();
            if (!r) continue;
            if (o.type === 'done') step({ type: 'deviceDone', time: t, item: r.id, attempt: 1, busyMs: (t - r.since) * o.factor });
            else if (o.type === 'fail') step({ type: 'deviceFailed', time: t, item: r.id, attempt: 1, reason: 'x' });
            else step({ type: 'tick', time: t }, [{ type: 'abort', item: item(r.id), stage: 'on-device', reason: 'x' }]);
          }
        }
        check();
      }),
      { seed: 20261201, numRuns: 300 },
    );
  });

  it('a running item counts in the window it runs in, not all at once when it ends', () => {
    const meter = new OccupancyMeter([1]);
    meter.record({ type: 'tick', time: 0 }, [{ type: 'startDevice', item: item(1), attempt: 1, device: 0, worker: 0 }]);
    expect(meter.busyMs(1000)).toEqual([[1000]]);
    expect(meter.busyMs(2000)).toEqual([[2000]]);
    meter.record({ type: 'deviceDone', time: 2500, item: 1, attempt: 1, busyMs: 2500 }, []);
    expect(meter.busyMs(3000)).toEqual([[2500]]);
    // A stale event (an older attempt) ends nothing.
    meter.record({ type: 'tick', time: 3000 }, [{ type: 'startDevice', item: item(2), attempt: 2, device: 0, worker: 0 }]);
    meter.record({ type: 'deviceDone', time: 3100, item: 2, attempt: 1, busyMs: 100 }, []);
    expect(meter.busyMs(3500)).toEqual([[3000]]);
  });
});

/** Busy ms of a lane's spans inside [a, b] (a running span runs to b). */
function overlap(spans: { start: number; end: number | null }[], a: number, b: number): number {
  return spans.reduce((acc, s) => acc + Math.max(0, Math.min(s.end ?? b, b) - Math.max(s.start, a)), 0);
}

describe('a batch on one worker', () => {
  it('OccupancyMeter: busy from startBatch until the batch is answered (at most its measure), through withdrawn items', () => {
    const meter = new OccupancyMeter([1]);
    const batchItem = (id: number) => ({ id, jobId: 'j', partition: id }) as ItemView;
    meter.record({ type: 'tick', time: 0 }, [{ type: 'startBatch', batch: 7, items: [batchItem(1), batchItem(2)], device: 0, worker: 0 }]);
    // One item withdrawn: the worker still runs the other.
    meter.record({ type: 'cancel', time: 10, jobId: 'j' }, [{ type: 'abort', item: batchItem(1), stage: 'on-device', reason: 'x', batch: { id: 7, remaining: 1 } }]);
    expect(meter.busyMs(20)).toEqual([[20]]);
    meter.record({ type: 'batchDone', time: 40, batch: 7, busyMs: 30 }, []);
    expect(meter.busyMs(50)).toEqual([[30]]);
    // Withdrawn whole: busy until its last item went.
    meter.record({ type: 'tick', time: 50 }, [{ type: 'startBatch', batch: 8, items: [batchItem(3)], device: 0, worker: 0 }]);
    meter.record({ type: 'cancel', time: 55, jobId: 'j' }, [{ type: 'abort', item: batchItem(3), stage: 'on-device', reason: 'x', batch: { id: 8, remaining: 0 } }]);
    expect(meter.busyMs(90)).toEqual([[35]]);
  });

  it('TimelineRecorder: one span per batch on its worker’s lane, with its size, ended by its answer', () => {
    const timeline = new TimelineRecorder({ maxSpans: 100, sampleEveryMs: 1e12 });
    const s = simulate(parseScenario({ name: 'b', kinds: { k: { prepare: { type: 'fixed', value: 1 } } }, devices: [{ workers: 1, service: { type: 'fixed', value: 0.1 }, batch: { maxItems: 4 } }], arrivals: [{ atS: 0, jobs: 1, partitions: 9, kind: 'k' }] }), { pacer: (o) => createPacer('unpaced', o), timeline });
    expect(s.metrics.jobsDone).toBe(1);
    const device = timeline.spans().filter((sp) => sp.kind === 'device');
    // Nine items, prepared together: one alone (the worker was free), then batches of 4 and 4.
    expect(device.map((sp) => [sp.items, sp.outcome])).toEqual([
      [1, 'done'],
      [4, 'done'],
      [4, 'done'],
    ]);
    expect(device.map((sp) => (sp.end as number) - sp.start)).toEqual([100, 400, 400]);
  });
});

describe('history in simulation equals the trace-derived truth', () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    it(`seed ${seed}: per-worker and per-device occupancy, dispatch and completion rates per 1 s window`, () => {
      const s = parseScenario({
        name: 'occupancy',
        seed,
        targetWaiting: 2,
        kinds: { k: { prepare: { type: 'lognormal', median: 2, sigma: 0.5 }, memory: { prepareBytes: 1, deviceBytes: 1 } } },
        devices: [{ count: 2, workers: 2, service: { type: 'lognormal', median: 0.7, sigma: 0.6 } }],
        arrivals: [{ atS: 0, jobs: 40, partitions: 8, kind: 'k', everyS: 1.5 }],
      });
      const meter = new OccupancyMeter([2, 2]);
      const timeline = new TimelineRecorder({ maxSpans: 1e7, sampleEveryMs: 1e12 });
      const history = new History(Infinity);
      let nextAt = 0;
      const pacer = { mode: 'steady' as const, ratePerSec: null, intervalMs: null, terms: {} };
      simulate(s, {
        pacer: (o) => createPacer('stoker', o),
        timeline,
        onStep: (e, cmds, snap) => {
          meter.record(e, cmds);
          if (e.time < nextAt) return;
          nextAt = e.time + 1000;
          const workerBusyMs = meter.busyMs(e.time);
          history.record({
            t: e.time, workerBusyMs, workerAlive: workerBusyMs.map((row) => row.map(() => true)), dispatched: snap.dispatched, completed: snap.deviceCompletions, kinds: {},
            devices: snap.devices.map((d) => ({ completions: d.completions, busyMs: d.busyMs, workers: d.workers })),
            partitions: { queued: snap.backlog, preparing: snap.preparing, waiting: snap.waiting, onDevice: snap.onDevice }, pacer, waitingTarget: 2,
            memory: { reservedBytes: snap.budgetUsedBytes, idlePoolBytes: 0, budgetBytes: null },
          });
        },
      });
      const samples = history.samples();
      expect(samples.length).toBeGreaterThan(30);
      const spans = timeline.spans();
      const lanes = timeline.lanes();
      let worst = 0;
      let busyWindows = 0;
      (samples as HistorySample[]).forEach((x, i) => {
        const b = x.t;
        // The window begins at the previous sample (b − windowS · 1000 may round below it, and
        // count an item that ended at that sample in both windows).
        const a = i > 0 ? (samples[i - 1] as HistorySample).t : b - x.windowS * 1000;
        for (const l of lanes.filter((l) => l.kind === 'device')) {
          const truth = overlap(spans.filter((sp) => sp.lane === l.id), a, b) / (b - a);
          const shown = x.workerOccupancy[l.device as number]?.[l.worker as number] as number;
          worst = Math.max(worst, Math.abs(shown - truth));
          if (truth > 0.5) busyWindows++;
          expect(shown).toBeLessThanOrEqual(1);
        }
        for (const d of [0, 1]) {
          const devLanes = lanes.filter((l) => l.kind === 'device' && l.device === d);
          const truth = devLanes.reduce((acc, l) => acc + overlap(spans.filter((sp) => sp.lane === l.id), a, b), 0) / ((b - a) * 2);
          expect(Math.abs((x.occupancy[d] as number) - truth)).toBeLessThanOrEqual(0.01);
        }
        const dispatched = spans.filter((sp) => sp.kind === 'prepare' && sp.start > a && sp.start <= b).length;
        const completed = spans.filter((sp) => sp.kind === 'device' && sp.outcome === 'done' && (sp.end as number) > a && (sp.end as number) <= b).length;
        expect(x.dispatchedPerS * x.windowS).toBeCloseTo(dispatched, 6);
        expect(x.completedPerS * x.windowS).toBeCloseTo(completed, 6);
      });
      expect(worst).toBeLessThanOrEqual(0.01);
      // Per device: the completions and measured device time the windows add up to are the trace's.
      for (const d of [0, 1]) {
        const done = spans.filter((sp) => sp.kind === 'device' && sp.outcome === 'done' && lanes[sp.lane]?.device === d && (sp.end as number) <= (samples.at(-1) as HistorySample).t);
        expect(samples.reduce((a, x) => a + (x.devices[d]?.completions ?? 0), 0)).toBe(done.length);
        const busy = done.reduce((a, sp) => a + ((sp.end as number) - sp.start), 0) / 1000;
        expect(samples.reduce((a, x) => a + (x.devices[d]?.busyS ?? 0), 0)).toBeCloseTo(busy, 6);
      }
      expect(busyWindows).toBeGreaterThan(20);
    });
  }
});

describe('history of the pacer’s dispatch target', () => {
  it('reads 0 while the pacer is idle, as the metric does (it showed the rate last planned: 529/s with nothing to dispatch)', () => {
    const reading = (t: number, mode: PacerMode, intervalMs: number | null): HistoryReading => ({
      t,
      workerBusyMs: [[0]],
      workerAlive: [[true]],
      dispatched: 0,
      completed: 0,
      devices: [{ completions: 0, busyMs: 0, workers: 1 }],
      kinds: {},
      partitions: { queued: 0, preparing: 0, waiting: 0, onDevice: 0 },
      pacer: { mode, ratePerSec: 50, intervalMs, terms: {} },
      waitingTarget: 4,
      memory: { reservedBytes: 0, idlePoolBytes: 0, budgetBytes: null },
    });
    const h = new History(Infinity);
    for (const [t, mode, interval] of [[0, 'steady', 20], [1000, 'steady', 20], [2000, 'idle', 20], [3000, 'hold', null]] as const) h.record(reading(t, mode, interval));
    expect(h.samples().map((s) => [s.pacerMode, s.pacerTargetPerS])).toEqual([['steady', 50], ['idle', 0], ['hold', null]]);
  });
});

/**
 * The engine's read-outs and counters, on small hand-made runs: jobStates over a range, jobCounts
 * with items on a device, the ∫ preparing dt counter, the least-loaded device across devices of
 * different sizes, and the pacer's onDispatch per item of a preparation batch.
 */
import { describe, expect, it } from 'vitest';
import { Engine, createUnpacedPacer, type EngineOptions, type JobSpec } from '../../src/core/index.js';
import { EngineDriver, GatePacer, ofType, started } from './helpers.js';

const job = (id: string, partitions: number, extra: Partial<JobSpec> = {}): JobSpec => ({ id, kind: 'k', partitions, ...extra });

function driver(over: Partial<EngineOptions> = {}): EngineDriver {
  return new EngineDriver(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), ...over }));
}

/** Sends `prepared` for the item `key`. */
function prepare(d: EngineDriver, time: number, key: string, latencyMs?: number) {
  const it = d.item(key);
  return d.apply({ type: 'prepared', time, item: it.id, attempt: it.attempt, ...(latencyMs === undefined ? {} : { latencyMs }) });
}

/** Sends `deviceDone` for the item `key`. */
function finish(d: EngineDriver, time: number, key: string, busyMs?: number) {
  const it = d.item(key);
  return d.apply({ type: 'deviceDone', time, item: it.id, attempt: it.attempt, ...(busyMs === undefined ? {} : { busyMs }) });
}

describe('Engine.jobStates over a range of partitions', () => {
  /** Job `a` of 6 partitions, maxPreparing 2, one worker, one partition in each state (worked step by step). */
  function mixed(): EngineDriver {
    const d = driver({ maxPreparing: 2 });
    d.apply({ type: 'submit', time: 0, job: job('a', 6) }); // a:0, a:1 preparing
    prepare(d, 1, 'a:0'); // a:0 on the device; a:2 starts preparing
    finish(d, 2, 'a:0'); // a:0 done
    prepare(d, 3, 'a:1'); // a:1 on the device; a:3 starts preparing
    prepare(d, 4, 'a:2'); // a:2 waits (the one worker is busy); a:4 starts preparing
    // Now: a:0 done, a:1 on-device, a:2 waiting, a:3 preparing, a:4 preparing, a:5 queued.
    return d;
  }

  it('gives the states of partitions from `from` up to (not including) `to`', () => {
    const d = mixed();
    expect(d.e.jobStates('a', 0, 6)).toEqual(['done', 'on-device', 'waiting', 'preparing', 'preparing', 'queued']);
    expect(d.e.jobStates('a', 1, 3)).toEqual(['on-device', 'waiting']);
    expect(d.e.jobStates('a', 2, 6)).toEqual(['waiting', 'preparing', 'preparing', 'queued']);
    expect(d.e.jobStates('a', 5, 6)).toEqual(['queued']);
    expect(d.e.jobStates('a', 3, 4)).toEqual(['preparing']);
  });

  it('clamps the range to the job: a negative `from` starts at 0, a `to` past the end stops at the last partition, an empty or reversed range is empty', () => {
    const d = mixed();
    expect(d.e.jobStates('a', -3, 2)).toEqual(['done', 'on-device']);
    expect(d.e.jobStates('a', 4, 100)).toEqual(['preparing', 'queued']);
    expect(d.e.jobStates('a', 3, 3)).toEqual([]);
    expect(d.e.jobStates('a', 5, 2)).toEqual([]);
    expect(d.e.jobStates('a', 7, 9)).toEqual([]);
    expect(d.e.jobStates('nobody', 0, 1)).toBeUndefined();
  });

  it('job() lists every partition; jobCounts counts items on a device apart from the done ones', () => {
    const d = mixed();
    expect(d.e.job('a')?.partitions).toEqual(['done', 'on-device', 'waiting', 'preparing', 'preparing', 'queued']);
    // 6 partitions − 1 queued − 2 preparing − 1 waiting − 1 on-device = 1 done.
    expect(d.e.jobCounts('a')).toEqual({ queued: 1, preparing: 2, waiting: 1, 'on-device': 1, done: 1 });
    expect(d.e.partitionsByKind()).toEqual({ k: { queued: 1, preparing: 2, waiting: 1, 'on-device': 1 } });
  });

  it('jobCounts with two items on devices and none done counts done 0', () => {
    const d = new EngineDriver(new Engine({ devices: [{ workers: 2 }], pacer: createUnpacedPacer() }));
    d.apply({ type: 'submit', time: 0, job: job('a', 3) });
    prepare(d, 1, 'a:0');
    prepare(d, 1, 'a:1');
    // 3 − 0 queued − 1 preparing − 0 waiting − 2 on-device = 0 done.
    expect(d.e.jobCounts('a')).toEqual({ queued: 0, preparing: 1, waiting: 0, 'on-device': 2, done: 0 });
    finish(d, 5, 'a:1');
    expect(d.e.jobCounts('a')).toEqual({ queued: 0, preparing: 1, waiting: 0, 'on-device': 1, done: 1 });
  });
});

describe('Engine: preparingMsTotal, ∫ preparing dt', () => {
  it('adds items-in-preparation × time between events, and nothing while none is preparing', () => {
    const d = driver({ devices: [{ workers: 2 }] });
    d.apply({ type: 'submit', time: 10, job: job('a', 3) }); // 3 preparing from t 10
    expect(d.e.snapshot.preparingMsTotal).toBe(0);
    expect(d.e.snapshot.preparingStartMsTotal).toBe(30); // 10 + 10 + 10
    prepare(d, 14, 'a:0'); // 3 × (14 − 10) = 12; then 2 preparing
    expect(d.e.snapshot.preparingMsTotal).toBe(12);
    expect(d.e.snapshot.preparingStartMsTotal).toBe(20);
    d.apply({ type: 'tick', time: 20 }); // + 2 × 6 = 24
    expect(d.e.snapshot.preparingMsTotal).toBe(24);
    prepare(d, 21, 'a:1'); // + 2 × 1 = 26; then 1 preparing
    prepare(d, 25, 'a:2'); // + 1 × 4 = 30; then none
    expect(d.e.snapshot.preparingMsTotal).toBe(30);
    d.apply({ type: 'tick', time: 1000 }); // none preparing: unchanged
    expect(d.e.snapshot.preparingMsTotal).toBe(30);
    expect(d.e.snapshot.preparingStartMsTotal).toBe(0);
  });

  it('prepareConcurrencyTotal: the mean number preparing while each completed preparation ran, summed', () => {
    const d = driver({ devices: [{ workers: 2 }] });
    d.apply({ type: 'submit', time: 10, job: job('a', 3) }); // 3 preparing from t 10
    prepare(d, 14, 'a:0'); // ran 10–14 with 3: 3
    expect(d.e.snapshot.prepareConcurrencyTotal).toBe(3);
    prepare(d, 20, 'a:1'); // ran 10–20: 3 for 4 ms, 2 for 6 ms: 24 ÷ 10 = 2.4
    expect(d.e.snapshot.prepareConcurrencyTotal).toBeCloseTo(5.4, 12);
    prepare(d, 20, 'a:2', 5); // ran 10–20 too (its reported latency is its own): 2.4
    expect(d.e.snapshot.prepareConcurrencyTotal).toBeCloseTo(7.8, 12);
  });
});

describe('Engine: the least-loaded device, by busy ÷ workers', () => {
  it('with 4 workers and 2 workers, items go where the fraction of busy workers is lowest (the first device on a tie)', () => {
    const d = driver({ devices: [{ workers: 4 }, { workers: 2 }] });
    d.apply({ type: 'submit', time: 0, job: job('a', 6) });
    const order: string[] = [];
    for (let p = 0; p < 6; p++) order.push(...started(prepare(d, 1 + p, `a:${p}`)));
    // Loads (busy/workers) before each start, device 0 | device 1:
    // a:0 0 | 0 → 0;  a:1 ¼ | 0 → 1;  a:2 ¼ | ½ → 0;  a:3 ½ | ½ → 0 (tie);  a:4 ¾ | ½ → 1;  a:5 ¾ | full → 0.
    expect(order).toEqual(['a:0@0/0', 'a:1@1/0', 'a:2@0/1', 'a:3@0/2', 'a:4@1/1', 'a:5@0/3']);
    expect(d.e.snapshot.devices.map((c) => c.busy)).toEqual([4, 2]);
  });

  it('the same when devices name their kinds (the general assignment path)', () => {
    const d = driver({ devices: [{ workers: 4, kinds: ['k'] }, { workers: 2 }] });
    d.apply({ type: 'submit', time: 0, job: job('a', 6) });
    const order: string[] = [];
    for (let p = 0; p < 6; p++) order.push(...started(prepare(d, 1 + p, `a:${p}`)));
    expect(order).toEqual(['a:0@0/0', 'a:1@1/0', 'a:2@0/1', 'a:3@0/2', 'a:4@1/1', 'a:5@0/3']);
  });

  it('a device with fewer busy workers but a larger busy fraction loses to the other', () => {
    // Devices of 2 and 4 workers. a:0 → 0 (0 | 0, tie); a:1 → 1 (½ | 0); a:2 → 1: one busy on
    // each, but ½ > ¼; a:3 → 0 (½ | ½, tie).
    const d = driver({ devices: [{ workers: 2 }, { workers: 4 }] });
    d.apply({ type: 'submit', time: 0, job: job('a', 4) });
    const order: string[] = [];
    for (let p = 0; p < 4; p++) order.push(...started(prepare(d, 1 + p, `a:${p}`)));
    expect(order).toEqual(['a:0@0/0', 'a:1@1/0', 'a:2@1/1', 'a:3@0/1']);
  });

  it('with a pacer worker limit, a device with 2 usable of 4 workers counts as full at 2 busy', () => {
    const p = new GatePacer();
    const limited = Object.assign(p, { workerLimit: (dev: number) => (dev === 0 ? 2 : Infinity) });
    const d = driver({ devices: [{ workers: 4 }, { workers: 4 }], pacer: limited });
    d.apply({ type: 'submit', time: 0, job: job('a', 5) });
    const order: string[] = [];
    for (let q = 0; q < 5; q++) order.push(...started(prepare(d, 1 + q, `a:${q}`)));
    // Loads 0|0 → 0; ¼|0 → 1; ¼|¼ → 0; device 0 at its limit of 2 → 1; → 1.
    expect(order).toEqual(['a:0@0/0', 'a:1@1/0', 'a:2@0/1', 'a:3@1/1', 'a:4@1/2']);
  });
});

describe('Engine: the pacer is told of each item dispatched in a preparation batch', () => {
  it('onDispatch once per item of the batch, at the same instant, and observe once per event', () => {
    const p = new GatePacer();
    const d = new EngineDriver(new Engine({ devices: [{ workers: 1 }], pacer: p, kinds: { k: { prepareBatch: { maxItems: 3 } } } }));
    d.apply({ type: 'submit', time: 5, job: job('a', 5) });
    // Batches of 3 and 2: five items, five onDispatch calls at t 5.
    expect(ofType(d.log, 'startPrepareBatch').map((c) => c.items.length)).toEqual([3, 2]);
    expect(p.dispatchedAt).toEqual([5, 5, 5, 5, 5]);
    expect(p.observed).toEqual([5]);
    expect(d.e.snapshot.dispatched).toBe(5);
    expect(d.e.snapshot.preparingSteps).toBe(2);
  });

  it('a closed pacer holds the batch; when it opens, the batch counts as its items', () => {
    const p = new GatePacer();
    p.openAt = 100;
    const d = new EngineDriver(new Engine({ devices: [{ workers: 1 }], pacer: p, kinds: { k: { prepareBatch: { maxItems: 4 } } } }));
    d.apply({ type: 'submit', time: 0, job: job('a', 2) });
    expect(p.dispatchedAt).toEqual([]);
    d.apply({ type: 'tick', time: 100 });
    expect(p.dispatchedAt).toEqual([100, 100]);
  });
});

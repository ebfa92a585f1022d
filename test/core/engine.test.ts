import { describe, expect, it } from 'vitest';
import {
  Engine,
  createStokerPacer,
  createUnpacedPacer,
  createWindowPacer,
  normalizeJob,
  type Command,
  type EngineOptions,
  type JobSpec,
  type ReadonlySnapshot,
} from '../../src/core/index.js';
import { EngineDriver, GatePacer, aborts, expectStokerError, ofType, prepared, started } from './helpers.js';

function engine(over: Partial<EngineOptions> = {}): Engine {
  return new Engine({ devices: [{ workers: 2 }], pacer: createUnpacedPacer(), ...over });
}

const job = (id: string, partitions: number, extra: Partial<JobSpec> = {}): JobSpec => ({ id, kind: 'k', partitions, ...extra });

/** Submits and returns the commands plus the items by `jobId:partition`. */
class Run extends EngineDriver {
  submit(time: number, spec: JobSpec): Command[] {
    return this.apply({ type: 'submit', time, job: spec });
  }

  prepared(time: number, key: string, latencyMs?: number): Command[] {
    const it = this.item(key);
    return this.apply({ type: 'prepared', time, item: it.id, attempt: it.attempt, ...(latencyMs === undefined ? {} : { latencyMs }) });
  }

  done(time: number, key: string, busyMs?: number): Command[] {
    const it = this.item(key);
    return this.apply({ type: 'deviceDone', time, item: it.id, attempt: it.attempt, ...(busyMs === undefined ? {} : { busyMs }) });
  }

  finishes(): Array<{ jobId: string; state: string; code: string | undefined }> {
    return ofType(this.log, 'finishJob').map((c) => ({ jobId: c.jobId, state: c.state, code: c.code }));
  }
}

describe('Engine construction', () => {
  it('rejects bad options with E_INVALID_OPTION naming the option', () => {
    const pacer = createUnpacedPacer();
    expectStokerError(() => new Engine({ devices: [], pacer }), 'E_INVALID_OPTION', /devices/);
    expectStokerError(() => new Engine({ devices: [{ workers: 0 }], pacer }), 'E_INVALID_OPTION', /devices\[0\]\.workers/);
    expectStokerError(() => new Engine({ devices: [{ workers: 1 }, { workers: 1.5 }], pacer }), 'E_INVALID_OPTION', /devices\[1\]\.workers/);
    expectStokerError(() => new Engine({ devices: [{ workers: 1 }], pacer, maxPreparing: 0 }), 'E_INVALID_OPTION', /maxPreparing/);
    expectStokerError(() => new Engine({ devices: [{ workers: 1 }], pacer, maxPreparing: NaN }), 'E_INVALID_OPTION', /maxPreparing/);
    expectStokerError(() => new Engine({ devices: [{ workers: 1 }], pacer, budgetBytes: -1 }), 'E_INVALID_OPTION', /budgetBytes/);
  });

  it('starts with an empty snapshot that counts the workers of every device', () => {
    const e = new Engine({ devices: [{ workers: 2 }, { workers: 3 }], pacer: createUnpacedPacer(), budgetBytes: 1000, maxPreparing: 4 });
    expect(e.snapshot).toMatchObject({ waiting: 0, preparing: 0, onDevice: 0, backlog: 0, workers: 5, dispatched: 0, budgetTotalBytes: 1000, maxPreparing: 4, budgetBlocked: false });
    expect(e.snapshot.devices).toEqual([
      { workers: 2, busy: 0, completions: 0, busyMs: 0, concurrencyTotal: 0 },
      { workers: 3, busy: 0, completions: 0, busyMs: 0, concurrencyTotal: 0 },
    ]);
    expect(e.activeJobs).toBe(0);
    expect(e.budget.totalBytes).toBe(1000);
    expect(e.maxPreparing).toBe(4);
  });
});

describe('Engine.apply: measures a driver reports', () => {
  it('a busy time or latency that is negative, NaN or infinite is refused, naming the field; nothing changes', () => {
    const r = new Run(engine());
    r.submit(0, job('a', 1));
    const it0 = r.item('a:0');
    for (const bad of [-5, Number.NaN, Infinity]) expectStokerError(() => r.apply({ type: 'prepared', time: 1, item: it0.id, attempt: it0.attempt, latencyMs: bad }), 'E_INVALID_EVENT', /prepared\.latencyMs must be a finite number ≥ 0/);
    expect(r.e.snapshot.preparing).toBe(1);
    r.prepared(1, 'a:0', 1);
    expectStokerError(() => r.apply({ type: 'deviceDone', time: 2, item: it0.id, attempt: it0.attempt, busyMs: -5 }), 'E_INVALID_EVENT', /deviceDone\.busyMs must be a finite number ≥ 0 in ms, or absent/);
    expect(r.e.snapshot.onDevice).toBe(1);
    // 0 and absent are measures too.
    expect(ofType(r.done(2, 'a:0', 0), 'finishJob').map((c) => c.state)).toEqual(['done']);
  });

  it('an item event naming its item by anything but its id is refused (an id it no longer holds is a stale event: nothing happens)', () => {
    const r = new Run(engine());
    r.submit(0, job('a', 1));
    const it0 = r.item('a:0');
    expectStokerError(() => r.apply({ type: 'prepared', time: 1, item: it0 as unknown as number, attempt: it0.attempt }), 'E_INVALID_EVENT', /prepared\.item must be the item's id, an integer \(command\.item\.id\), not an object/);
    expectStokerError(() => r.apply({ type: 'deviceFailed', time: 1, item: 'x' as unknown as number, attempt: 1, reason: 'r' }), 'E_INVALID_EVENT', /deviceFailed\.item must be/);
    r.apply({ type: 'cancel', time: 1, jobId: 'a' });
    expect(r.apply({ type: 'prepared', time: 1, item: it0.id, attempt: 1 }).filter((c) => c.type !== 'wakeAt')).toEqual([]);
    expect(r.e.snapshot.preparing).toBe(0);
  });
});

describe('Engine.apply: submit validation', () => {
  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ['empty id', { id: '' }, /job\.id/],
    ['non-string id', { id: 7 }, /job\.id/],
    ['id over 256 characters', { id: 'x'.repeat(257) }, /job\.id/],
    ['empty kind', { kind: '' }, /job\.kind/],
    ['missing kind', { kind: undefined }, /job\.kind/],
    ['unknown priority', { priority: 'urgent' }, /job\.priority.*critical, high, normal, low/],
    ['0 partitions', { partitions: 0 }, /job\.partitions.*1 to 1000000/],
    ['1.5 partitions', { partitions: 1.5 }, /job\.partitions/],
    ['1,000,001 partitions', { partitions: 1_000_001 }, /job\.partitions/],
    ['NaN partitions', { partitions: NaN }, /job\.partitions/],
    ['negative prepareBytes', { memory: { prepareBytes: -1 } }, /job\.memory\.prepareBytes/],
    ['fractional prepareBytes', { memory: { prepareBytes: 1.5 } }, /job\.memory\.prepareBytes/],
    ['negative deviceBytes', { memory: { deviceBytes: -5 } }, /job\.memory\.deviceBytes/],
    ['fractional deviceBytes', { memory: { deviceBytes: 0.25 } }, /job\.memory\.deviceBytes/],
    ['infinite deviceBytes', { memory: { deviceBytes: Infinity } }, /job\.memory\.deviceBytes/],
    ['NaN deadline', { deadline: NaN }, /job\.deadline/],
    ['string deadline', { deadline: '100' }, /job\.deadline/],
  ];

  it.each(cases)('%s → E_INVALID_JOB naming the field, and nothing changes', (_name, patch, message) => {
    const e = engine();
    const spec = { ...job('a', 2), ...patch } as JobSpec;
    expectStokerError(() => e.apply({ type: 'submit', time: 0, job: spec }), 'E_INVALID_JOB', message);
    expect(e.activeJobs).toBe(0);
    expect(e.snapshot.backlog).toBe(0);
    expect(e.snapshot.dispatched).toBe(0);
  });

  it('a non-object job is E_INVALID_JOB', () => {
    const e = engine();
    expectStokerError(() => e.apply({ type: 'submit', time: 0, job: null as unknown as JobSpec }), 'E_INVALID_JOB', /object/);
  });

  it('accepts the boundary values: 1 and 1,000,000 partitions, 256-character id, zero bytes, infinite deadline', () => {
    expect(normalizeJob({ id: 'x'.repeat(256), kind: 'k', partitions: 1 })).toEqual({
      id: 'x'.repeat(256),
      kind: 'k',
      priority: 'normal',
      partitions: 1,
      memory: { prepareBytes: 0, deviceBytes: 0 },
      deadline: Infinity,
      partitionNumbers: null,
    });
    expect(normalizeJob({ id: 'a', kind: 'k', partitions: 1_000_000, memory: { prepareBytes: 0 }, deadline: Infinity }).partitions).toBe(1_000_000);
  });
});

describe('Engine.apply: duplicate submits', () => {
  it('an identical resubmit returns no commands and does not duplicate work', () => {
    const r = new Run(engine());
    const first = r.submit(0, job('a', 3, { memory: { prepareBytes: 10 } }));
    expect(prepared(first)).toEqual(['a:0', 'a:1', 'a:2']);
    // Defaults spelled out are the same spec.
    const again = r.submit(5, { id: 'a', kind: 'k', partitions: 3, priority: 'normal', memory: { prepareBytes: 10, deviceBytes: 0 } });
    expect(again).toEqual([]);
    expect(r.e.activeJobs).toBe(1);
    expect(r.e.snapshot.dispatched).toBe(3);
    expect(r.e.snapshot.backlog).toBe(0);
    expect(r.e.budget.used).toBe(30);
    expect(r.e.job('a')!.seq).toBe(0);
  });

  it('an identical resubmit while the job is still queued adds nothing to the queue', () => {
    const gate = new GatePacer();
    gate.openAt = Infinity;
    const e = engine({ pacer: gate });
    e.apply({ type: 'submit', time: 0, job: job('a', 4) });
    e.apply({ type: 'submit', time: 1, job: job('a', 4) });
    expect(e.snapshot.backlog).toBe(4);
    gate.openAt = 0;
    const out = e.apply({ type: 'tick', time: 2 });
    expect(prepared(out)).toEqual(['a:0', 'a:1', 'a:2', 'a:3']);
  });

  it.each<[string, Partial<JobSpec>]>([
    ['kind', { kind: 'other' }],
    ['priority', { priority: 'high' }],
    ['partitions', { partitions: 4 }],
    ['memory', { memory: { deviceBytes: 1 } }],
    ['deadline', { deadline: 1000 }],
  ])('a different %s under the same id throws E_DUPLICATE_JOB and keeps the original', (_f, patch) => {
    const e = engine();
    e.apply({ type: 'submit', time: 0, job: job('a', 3) });
    expectStokerError(() => e.apply({ type: 'submit', time: 1, job: { ...job('a', 3), ...patch } }), 'E_DUPLICATE_JOB', /"a"/);
    expect(e.activeJobs).toBe(1);
    expect(e.job('a')!.partitions).toHaveLength(3);
    expect(e.job('a')!.kind).toBe('k');
    expect(e.snapshot.dispatched).toBe(3);
  });

  it('an id may be reused once its job has ended', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer() }));
    r.submit(0, job('a', 1));
    r.apply({ type: 'cancel', time: 1, jobId: 'a' });
    expect(r.e.job('a')).toBeUndefined();
    const out = r.submit(2, job('a', 2, { kind: 'different' }));
    expect(prepared(out)).toEqual(['a:0', 'a:1']);
    expect(r.e.job('a')!.seq).toBe(1);
  });
});

describe('Engine: the happy path', () => {
  it("a command's item writes as its view in JSON (a driver logging its commands got 'Converting circular structure to JSON')", () => {
    const r = new Run(engine());
    const out = r.submit(100, job('a', 1, { kind: 'proof' }));
    expect(JSON.parse(JSON.stringify(out))).toEqual([{ type: 'startPrepare', attempt: 1, item: { id: 0, jobId: 'a', kind: 'proof', partition: 0, priority: 'normal', state: 'preparing', attempt: 1, failures: 0, reservedBytes: 0 } }]);
  });

  it('runs a 3-partition job on 1 device with 2 workers, counting everything, and finishes it once', () => {
    const r = new Run(engine());
    const e = r.e;
    const s = e.snapshot;

    let out = r.submit(100, job('a', 3, { kind: 'proof' }));
    expect(out.map((c) => c.type)).toEqual(['startPrepare', 'startPrepare', 'startPrepare']);
    expect(prepared(out)).toEqual(['a:0', 'a:1', 'a:2']);
    for (const c of ofType(out, 'startPrepare')) {
      expect(c.attempt).toBe(1);
      expect(c.item.kind).toBe('proof');
      expect(c.item.priority).toBe('normal');
      expect(c.item.state).toBe('preparing');
    }
    expect(new Set(ofType(out, 'startPrepare').map((c) => c.item.id)).size).toBe(3);
    expect(s).toMatchObject({ now: 100, preparing: 3, waiting: 0, onDevice: 0, backlog: 0, dispatched: 3, preparingStartMsTotal: 300, prepareCompletions: 0 });
    expect(e.job('a')).toMatchObject({ id: 'a', kind: 'proof', priority: 'normal', seq: 0, submittedAt: 100, partitions: ['preparing', 'preparing', 'preparing'] });
    expect(e.time).toBe(100);

    out = r.prepared(110, 'a:0');
    expect(started(out)).toEqual(['a:0@0/0']);
    const sd = ofType(out, 'startDevice')[0]!;
    expect(sd.attempt).toBe(2);
    expect(sd.item.attempt).toBe(2);
    expect(sd.item.state).toBe('on-device');
    expect(s).toMatchObject({ preparing: 2, waiting: 0, onDevice: 1, prepareCompletions: 1, prepareLatencyMsTotal: 10, prepareLatencySqTotal: 100, preparingStartMsTotal: 200 });
    expect(s.devices[0]).toEqual({ workers: 2, busy: 1, completions: 0, busyMs: 0, concurrencyTotal: 0 });

    out = r.prepared(120, 'a:1', 15); // the driver measured 15 ms itself
    expect(started(out)).toEqual(['a:1@0/1']);
    expect(s).toMatchObject({ preparing: 1, onDevice: 2, prepareCompletions: 2, prepareLatencyMsTotal: 25, prepareLatencySqTotal: 325, preparingStartMsTotal: 100 });
    expect(s.devices[0]!.busy).toBe(2);

    out = r.prepared(130, 'a:2');
    expect(out).toEqual([]); // both workers busy: it waits
    expect(s).toMatchObject({ preparing: 0, waiting: 1, onDevice: 2, prepareCompletions: 3, prepareLatencyMsTotal: 55, prepareLatencySqTotal: 1225, preparingStartMsTotal: 0 });
    expect(r.item('a:2').state).toBe('waiting');

    // concurrencyTotal: a:0 ran 110–150, 10 ms alone and 30 beside a:1 (1.75 busy on average);
    // a:1 120–160 beside another throughout (2); a:2 150–200, 10 ms beside a:1 then alone (1.2).
    out = r.done(150, 'a:0'); // 40 ms since its device start
    expect(started(out)).toEqual(['a:2@0/0']);
    expect(ofType(out, 'finishJob')).toEqual([]);
    expect(s).toMatchObject({ waiting: 0, onDevice: 2, deviceCompletions: 1, deviceBusyMs: 40 });
    expect(s.devices[0]).toEqual({ workers: 2, busy: 2, completions: 1, busyMs: 40, concurrencyTotal: 1.75 });
    expect(r.item('a:0').state).toBe('done');

    out = r.done(160, 'a:1', 5); // explicit busyMs wins over the 40 ms elapsed
    expect(out).toEqual([]);
    expect(s).toMatchObject({ onDevice: 1, deviceCompletions: 2, deviceBusyMs: 45 });
    expect(s.devices[0]).toEqual({ workers: 2, busy: 1, completions: 2, busyMs: 45, concurrencyTotal: 3.75 });

    out = r.done(200, 'a:2');
    expect(out).toEqual([{ type: 'finishJob', jobId: 'a', state: 'done', timeMs: 100 }]);
    expect(s).toMatchObject({ onDevice: 0, waiting: 0, preparing: 0, backlog: 0, deviceCompletions: 3, deviceBusyMs: 95, dispatched: 3 });
    expect(s.devices[0]).toEqual({ workers: 2, busy: 0, completions: 3, busyMs: 95, concurrencyTotal: 4.95 });
    expect(e.activeJobs).toBe(0);
    expect(e.job('a')).toBeUndefined();

    // Late duplicates change nothing, and the job never finishes twice.
    expect(r.done(210, 'a:2')).toEqual([]);
    expect(r.e.apply({ type: 'tick', time: 220 })).toEqual([]);
    expect(r.finishes()).toEqual([{ jobId: 'a', state: 'done', code: undefined }]);
    expect(s.deviceCompletions).toBe(3);
  });

  it('notifies the pacer: observe once per event, onDispatch once per startPrepare', () => {
    const gate = new GatePacer();
    const r = new Run(engine({ pacer: gate }));
    r.submit(0, job('a', 2));
    r.prepared(5, 'a:0');
    r.apply({ type: 'tick', time: 7 });
    expect(gate.observed).toEqual([0, 5, 7]);
    expect(gate.dispatchedAt).toEqual([0, 0]);
  });
});

describe('Engine: the pacer’s worker limit', () => {
  const limited = (limit: number) => {
    const gate = new GatePacer();
    const pacer = Object.assign(gate, { workerLimit: () => limit });
    const r = new Run(engine({ devices: [{ workers: 3 }], pacer }));
    r.submit(0, job('a', 3));
    r.prepared(1, 'a:0');
    r.prepared(1, 'a:1');
    r.prepared(1, 'a:2');
    return r.e.snapshot.devices[0]!.busy;
  };

  it('runs at most that many workers of a device; always at least one; NaN is no limit', () => {
    expect(limited(2)).toBe(2);
    expect(limited(2.7)).toBe(2);
    expect(limited(0)).toBe(1);
    expect(limited(Number.NaN)).toBe(3);
    expect(limited(Infinity)).toBe(3);
  });

  it('a limit that rises as the pacer observes frees a worker at that event, not the next', () => {
    const gate = new GatePacer();
    let limit = 1;
    const observe = gate.observe.bind(gate);
    const pacer = Object.assign(gate, {
      workerLimit: () => limit,
      // The limit rises to 2 when the pacer observes the tick at 5 (as the stoker pacer's may,
      // after the engine has assigned the devices for that event).
      observe: (s: Parameters<typeof observe>[0]) => {
        observe(s);
        if (s.now >= 5) limit = 2;
      },
    });
    const r = new Run(engine({ devices: [{ workers: 3 }], pacer }));
    r.submit(0, job('a', 3));
    r.prepared(1, 'a:0');
    r.prepared(1, 'a:1');
    expect(r.e.snapshot.devices[0]!.busy).toBe(1);
    expect(ofType(r.apply({ type: 'tick', time: 5 }), 'startDevice')).toHaveLength(1);
    expect(r.e.snapshot.devices[0]!.busy).toBe(2);
  });

  it('counts, per device, how many workers were busy on average while each item ran', () => {
    const r = new Run(engine({ devices: [{ workers: 2 }] }));
    r.submit(0, job('a', 2));
    r.prepared(0, 'a:0');
    r.prepared(10, 'a:1');
    r.done(20, 'a:0'); // ran 0–20: alone for 10 ms, then beside a:1: 1.5 on average
    r.done(40, 'a:1'); // ran 10–40: 10 ms beside a:0, 20 alone: 4/3
    expect(r.e.snapshot.devices[0]!.concurrencyTotal).toBeCloseTo(1.5 + 4 / 3, 12);
  });
});

describe('Engine: the pacer’s observeAgainAt', () => {
  it('a time after now is one more wake, even while the budget blocks dispatch; none at or before now, or absent', () => {
    const gate = new GatePacer();
    let look = 500;
    const pacer = Object.assign(gate, { observeAgainAt: () => look });
    // A budget for one item: the second is blocked, so nextDispatchAt gives no time to wake at.
    const r = new Run(engine({ pacer, budgetBytes: 100 }));
    expect(ofType(r.submit(0, job('a', 2, { memory: { prepareBytes: 100, deviceBytes: 0 } })), 'wakeAt')).toEqual([{ type: 'wakeAt', time: 500 }]);
    expect(r.e.snapshot.budgetBlocked).toBe(true);
    // The tick at 500 is observed; then no look after now: no timer asked for.
    expect(ofType(r.apply({ type: 'tick', time: 500 }), 'wakeAt')).toEqual([]);
    expect(gate.observed).toEqual([0, 500]);
    // A dispatch time earlier than the look wins.
    look = 900;
    gate.openAt = 700;
    const r2 = new Run(engine({ pacer, budgetBytes: 100 }));
    expect(ofType(r2.submit(600, job('b', 1, { memory: { prepareBytes: 100, deviceBytes: 0 } })), 'wakeAt')).toEqual([{ type: 'wakeAt', time: 700 }]);
  });

  it('asked only while jobs are live: a pacer that always asks does not keep an idle engine ticking', () => {
    const gate = new GatePacer();
    const pacer = Object.assign(gate, { observeAgainAt: (s: ReadonlySnapshot) => s.now + 5000 });
    const r = new Run(engine({ pacer }));
    expect(ofType(r.submit(0, job('a', 1)), 'wakeAt')).toEqual([{ type: 'wakeAt', time: 5000 }]);
    r.prepared(10, 'a:0');
    // The job ends with this completion: no more wakes (Infinity cancels the pending one).
    const out = r.done(20, 'a:0');
    expect(ofType(out, 'finishJob').map((c) => c.state)).toEqual(['done']);
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: Infinity }]);
  });
});

describe('Engine: a device of named kinds that the queue order starves', () => {
  it('gets the first queued items of its kinds while the pacer holds the head back — as many preparing or waiting as it has workers', () => {
    const gate = new GatePacer();
    gate.openAt = Infinity;
    const r = new Run(engine({ devices: [{ workers: 1, kinds: ['proof'] }, { workers: 2, kinds: ['caption'] }], pacer: gate }));
    r.submit(0, job('p', 5, { kind: 'proof' }));
    // The head (proof) is held back, and device 1 (2 workers) has nothing coming: the caption job's first two partitions start.
    const out = r.submit(1, job('c', 4, { kind: 'caption', priority: 'low' }));
    expect(ofType(out, 'startPrepare').map((c) => `${c.item.jobId}:${c.item.partition}`)).toEqual(['c:0', 'c:1']);
    expect(r.e.snapshot.kinds.map((k) => [k.name, k.preparing])).toEqual([
      ['proof', 0],
      ['caption', 2],
    ]);
    // Prepared, it runs on device 1: one coming, the next one starts.
    const more = r.prepared(2, 'c:0');
    expect(ofType(more, 'startDevice').map((c) => [`${c.item.jobId}:${c.item.partition}`, c.device])).toEqual([['c:0', 1]]);
    expect(ofType(more, 'startPrepare').map((c) => `${c.item.jobId}:${c.item.partition}`)).toEqual(['c:2']);
    // Its second worker takes c:1: one coming (c:2), so the last one starts.
    expect(ofType(r.prepared(3, 'c:1'), 'startPrepare').map((c) => `${c.item.jobId}:${c.item.partition}`)).toEqual(['c:3']);
    // Both workers busy and two prepared, waiting: nothing more would pass the gate (none is left to).
    expect(ofType(r.prepared(4, 'c:2'), 'startPrepare')).toEqual([]);
    // The held-back kind's own device never gets an item past the gate.
    expect(r.e.snapshot.kinds[0]?.preparing).toBe(0);
  });

  it('gives it no more than its workers while they are coming: a third waits for one to reach the device', () => {
    const gate = new GatePacer();
    gate.openAt = Infinity;
    const r = new Run(engine({ devices: [{ workers: 1, kinds: ['proof'] }, { workers: 2, kinds: ['caption'] }], pacer: gate }));
    r.submit(0, job('p', 5, { kind: 'proof' }));
    expect(ofType(r.submit(1, job('c', 6, { kind: 'caption', priority: 'low' })), 'startPrepare')).toHaveLength(2);
    // Both on the device, none coming: two more.
    r.prepared(2, 'c:0');
    r.prepared(2, 'c:1');
    expect(r.e.snapshot.kinds[1]).toMatchObject({ preparing: 2, waiting: 0, onDevice: 2 });
    // Those two prepared and waiting for a worker: two coming, nothing more.
    expect(ofType(r.prepared(3, 'c:2'), 'startPrepare')).toEqual([]);
    expect(ofType(r.prepared(3, 'c:3'), 'startPrepare')).toEqual([]);
    expect(r.e.snapshot.kinds[1]).toMatchObject({ preparing: 0, waiting: 2, onDevice: 2 });
  });
});

describe('Engine: counters per kind', () => {
  it('counts each kind’s items by stage and its device time per device, and names the next kind to dispatch', () => {
    const gate = new GatePacer();
    const r = new Run(engine({ devices: [{ workers: 1 }, { workers: 1, kinds: ['big'] }], pacer: gate }));
    const s = r.e.snapshot;
    gate.openAt = Infinity;
    r.submit(0, job('a', 2, { kind: 'small' }));
    r.submit(0, job('b', 2, { kind: 'big' }));
    expect(s.kinds.map((k) => [k.name, k.devices])).toEqual([
      ['small', [0]],
      ['big', [0, 1]],
    ]);
    expect(s.nextKind).toBe(0);
    // Each kind's queued partitions (what the pacer plans the kinds still to come by): b:0 left
    // the queue past the gate (device 1, idle with nothing of big coming, took it).
    expect(s.kinds.map((k) => k.queued)).toEqual([2, 1]);
    gate.openAt = 0;
    r.apply({ type: 'tick', time: 1 });
    expect(s.kinds.map((k) => k.queued)).toEqual([0, 0]);
    // Everything dispatched: no next kind.
    expect(s.nextKind).toBe(-1);
    expect(s.kinds.map((k) => [k.preparing, k.waiting, k.onDevice])).toEqual([
      [2, 0, 0],
      [2, 0, 0],
    ]);
    r.prepared(10, 'a:0');
    r.prepared(10, 'a:1');
    r.prepared(10, 'b:0');
    // a:0 on device 0; b:0 on device 1 (big runs there); a:1 waits.
    expect(s.kinds.map((k) => [k.preparing, k.waiting, k.onDevice])).toEqual([
      [0, 1, 1],
      [1, 0, 1],
    ]);
    // Each kind's own preparations: counted, their latencies summed, as the snapshot's are (a's 9 ms
    // each, from 1; b:0's 10 ms: device 1, idle with nothing of big coming, took it at 0 past the gate).
    expect(s.kinds.map((k) => [k.prepareCompletions, k.prepareLatencyMsTotal, k.prepareLatencySqTotal])).toEqual([
      [2, 18, 162],
      [1, 10, 100],
    ]);
    expect(s.prepareCompletions).toBe(3);
    expect(s.prepareLatencyMsTotal).toBe(28);
    r.done(30, 'a:0', 20);
    r.done(50, 'b:0', 40);
    expect(s.kinds[0]).toMatchObject({ preparing: 0, waiting: 0, onDevice: 1, completions: [1, 0], busyMs: [20, 0] });
    expect(s.kinds[1]).toMatchObject({ preparing: 1, waiting: 0, onDevice: 0, completions: [0, 1], busyMs: [0, 40] });
    // A cancelled job's items leave its kind's counts.
    r.apply({ type: 'cancel', time: 60, jobId: 'b' });
    expect(s.kinds[1]).toMatchObject({ preparing: 0, waiting: 0, onDevice: 0 });
    // The sums over kinds are the totals.
    expect(s.kinds.reduce((n, k) => n + k.preparing + k.waiting + k.onDevice, 0)).toBe(s.preparing + s.waiting + s.onDevice);
  });
});

describe('Engine: order', () => {
  it('a critical job submitted after normal ones is dispatched first', () => {
    const r = new Run(engine({ maxPreparing: 1 }));
    expect(prepared(r.submit(0, job('n1', 2)))).toEqual(['n1:0']);
    expect(prepared(r.submit(1, job('n2', 1)))).toEqual([]);
    expect(prepared(r.submit(2, job('low', 1, { priority: 'low' })))).toEqual([]);
    expect(prepared(r.submit(3, job('hi', 1, { priority: 'high' })))).toEqual([]);
    expect(prepared(r.submit(4, job('c', 2, { priority: 'critical' })))).toEqual([]);
    const order: string[] = [];
    let t = 10;
    for (let i = 0; i < 7; i++) {
      const key = [...r.items.keys()].find((k) => r.item(k).state === 'preparing')!;
      order.push(...prepared(r.prepared(t++, key)));
    }
    expect(order).toEqual(['c:0', 'c:1', 'hi:0', 'n1:1', 'n2:0', 'low:0']);
  });

  it('with the pacer closed, the whole queue is released in key order when it opens', () => {
    const gate = new GatePacer();
    gate.openAt = Infinity;
    const r = new Run(engine({ pacer: gate }));
    r.submit(0, job('n1', 2));
    r.submit(1, job('l', 1, { priority: 'low' }));
    r.submit(2, job('n2', 1));
    r.submit(3, job('c', 2, { priority: 'critical' }));
    gate.openAt = 4;
    const out = r.apply({ type: 'tick', time: 4 });
    expect(prepared(out)).toEqual(['c:0', 'c:1', 'n1:0', 'n1:1', 'n2:0', 'l:0']);
  });

  it('devices take waiting items in key order, not in the order they were prepared', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer() }));
    r.submit(0, job('first', 1));
    r.submit(0, job('low', 1, { priority: 'low' }));
    r.submit(0, job('n', 2));
    expect(started(r.prepared(1, 'first:0'))).toEqual(['first:0@0/0']);
    // Prepared in reverse key order while the only worker is busy.
    r.prepared(2, 'low:0');
    r.prepared(3, 'n:1');
    r.prepared(4, 'n:0');
    expect(r.e.snapshot.waiting).toBe(3);
    const order: string[] = [];
    order.push(...started(r.done(5, 'first:0')));
    r.submit(6, job('crit', 1, { priority: 'critical' }));
    r.prepared(7, 'crit:0');
    order.push(...started(r.done(8, 'n:0')));
    order.push(...started(r.done(9, 'crit:0')));
    order.push(...started(r.done(10, 'n:1')));
    expect(order).toEqual(['n:0@0/0', 'crit:0@0/0', 'n:1@0/0', 'low:0@0/0']);
  });

  it('spreads items over devices, least loaded first', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }, { workers: 2 }], pacer: createUnpacedPacer() }));
    r.submit(0, job('a', 4));
    const out = ['a:0', 'a:1', 'a:2', 'a:3'].flatMap((k, i) => started(r.prepared(i + 1, k)));
    // a:0 → device 0 (tie, first); a:1 → device 1 (0/2 < 1/1); a:2 → device 1 (1/2 < 1/1); a:3 waits.
    expect(out).toEqual(['a:0@0/0', 'a:1@1/0', 'a:2@1/1']);
    expect(r.e.snapshot.waiting).toBe(1);
    expect(r.e.snapshot.devices.map((d) => d.busy)).toEqual([1, 2]);
  });
});

describe('Engine: partitions made lazily', () => {
  it('a job of 10⁶ partitions is counted at once but makes only the partitions it dispatches', () => {
    const r = new Run(engine({ maxPreparing: 3 }));
    const heap0 = process.memoryUsage().heapUsed;
    for (let i = 0; i < 20; i++) r.submit(i, job(`big${i}`, 1_000_000));
    // 20 × 10⁶ partitions made eagerly would be gigabytes; made lazily, a few objects.
    expect(process.memoryUsage().heapUsed - heap0).toBeLessThan(50e6);
    expect(r.e.snapshot.backlog).toBe(20_000_000 - 3);
    expect(r.e.jobCounts('big0')).toEqual({ queued: 999_997, preparing: 3, waiting: 0, 'on-device': 0, done: 0 });
    expect(r.e.jobCounts('big1')).toEqual({ queued: 1_000_000, preparing: 0, waiting: 0, 'on-device': 0, done: 0 });
    expect(r.e.partitionsByKind()).toEqual({ k: { queued: 20_000_000 - 3, preparing: 3, waiting: 0, 'on-device': 0 } });
    r.apply({ type: 'cancel', time: 30, jobId: 'big0' });
    expect(r.e.snapshot.backlog).toBe(19_000_000 - 3);
    expect(r.e.jobCounts('big0')).toBeUndefined();
    // The cancel freed three preparation slots: the next job's first partitions, in order.
    expect([...r.items.keys()].filter((k) => k.startsWith('big1:'))).toEqual(['big1:0', 'big1:1', 'big1:2']);
  });

  it('item ids are dense in submission order (job base + partition), whether or not a partition was made', () => {
    const r = new Run(engine({ maxPreparing: 1 }));
    r.submit(0, job('a', 3));
    r.submit(1, job('b', 2));
    expect(r.item('a:0').id).toBe(0);
    r.prepared(2, 'a:0');
    r.done(3, 'a:0');
    expect(r.item('a:1').id).toBe(1);
    r.apply({ type: 'cancel', time: 4, jobId: 'a' });
    expect(r.item('b:0').id).toBe(3);
  });

  it('a retried partition keeps its key: it runs before the later partitions of its job, which are made only as they are dispatched', () => {
    const r = new Run(engine({ maxPreparing: 1, retries: 1 }));
    r.submit(0, job('a', 3));
    const a0 = r.item('a:0');
    const out = r.apply({ type: 'prepareFailed', time: 1, item: a0.id, attempt: a0.attempt, reason: 'flaky' });
    expect(prepared(out)).toEqual(['a:0']);
    expect(r.e.job('a')!.partitions).toEqual(['preparing', 'queued', 'queued']);
    expect(prepared(r.prepared(2, 'a:0'))).toEqual(['a:1']);
    expect(r.e.job('a')!.partitions).toEqual(['on-device', 'preparing', 'queued']);
  });
});

describe('Engine: memory', () => {
  it('counts memoryHeld bytes against the budget: the head waits until they are freed', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 1000 }));
    r.apply({ type: 'memoryHeld', time: 0, bytes: 500 });
    expect(r.e.budget.held).toBe(500);
    const first = r.submit(1, job('a', 2, { memory: { prepareBytes: 400, deviceBytes: 0 } }));
    expect(prepared(first)).toEqual(['a:0']); // 500 held + 400 fits; a second 400 does not
    expect(r.e.snapshot.budgetBlocked).toBe(true);
    expect(prepared(r.apply({ type: 'memoryHeld', time: 2, bytes: 0 }))).toEqual(['a:1']);
    expect(r.e.budget.peak).toBe(900);
    expectStokerError(() => r.apply({ type: 'memoryHeld', time: 3, bytes: -1 }), 'E_INVALID_EVENT', /memoryHeld\.bytes/);
    expectStokerError(() => r.apply({ type: 'memoryHeld', time: 3, bytes: Infinity }), 'E_INVALID_EVENT', /memoryHeld\.bytes/);
  });

  it('drain: no partition starts any more, those in flight still finish', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), maxPreparing: 1 }));
    r.submit(0, job('a', 3));
    r.apply({ type: 'drain', time: 1 });
    expect(prepared(r.prepared(2, 'a:0'))).toEqual([]);
    r.done(3, 'a:0');
    expect(r.e.snapshot).toMatchObject({ preparing: 0, waiting: 0, onDevice: 0, backlog: 2 });
  });

  it('reserves max(prepareBytes, deviceBytes) at dispatch and releases it in two steps', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 10_000 }));
    const e = r.e;
    r.submit(0, job('a', 3, { memory: { prepareBytes: 100, deviceBytes: 30 } }));
    expect(e.budget.used).toBe(300);
    expect(e.snapshot.budgetUsedBytes).toBe(300);
    expect(r.item('a:0').reservedBytes).toBe(100);

    r.prepared(1, 'a:0'); // starts on the device: keeps only the device bytes
    expect(r.item('a:0').reservedBytes).toBe(30);
    expect(e.budget.used).toBe(230);
    expect(e.snapshot.budgetUsedBytes).toBe(230);

    r.prepared(2, 'a:1'); // waits: still holds the prepared data
    expect(r.item('a:1').reservedBytes).toBe(100);
    expect(e.budget.used).toBe(230);

    r.done(3, 'a:0'); // a:1 takes the device
    expect(r.item('a:0').reservedBytes).toBe(0);
    expect(r.item('a:1').reservedBytes).toBe(30);
    expect(e.budget.used).toBe(130);

    r.prepared(4, 'a:2');
    r.done(5, 'a:1');
    expect(e.budget.used).toBe(30);
    r.done(6, 'a:2');
    expect(e.budget.used).toBe(0);
    expect(e.snapshot.budgetUsedBytes).toBe(0);
    expect(e.budget.peak).toBe(300);
  });

  it('when deviceBytes is the larger, the whole reservation stays until the item is done', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 1000 }));
    r.submit(0, job('a', 1, { memory: { prepareBytes: 20, deviceBytes: 70 } }));
    expect(r.e.budget.used).toBe(70);
    r.prepared(1, 'a:0');
    expect(r.e.budget.used).toBe(70);
    expect(r.item('a:0').reservedBytes).toBe(70);
    r.done(2, 'a:0');
    expect(r.e.budget.used).toBe(0);
  });

  it('an oversize job fails at once with E_OVERSIZE while another job continues', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 1000 }));
    r.submit(0, job('ok', 2, { memory: { prepareBytes: 400 } }));
    const out = r.submit(1, job('big', 3, { memory: { deviceBytes: 1001 } }));
    expect(out).toHaveLength(1);
    const fin = ofType(out, 'finishJob')[0]!;
    expect(fin).toMatchObject({ jobId: 'big', state: 'failed', code: 'E_OVERSIZE', timeMs: 0 });
    expect(fin.reason).toMatch(/1001 bytes.*1000 bytes.*budgetBytes/);
    expect(r.e.activeJobs).toBe(1);
    expect(r.e.snapshot.backlog).toBe(0);
    expect(r.e.budget.used).toBe(800);
    // 'ok' is unaffected and finishes; later jobs still run.
    r.prepared(2, 'ok:0');
    r.prepared(3, 'ok:1');
    r.done(4, 'ok:0');
    r.done(5, 'ok:1');
    expect(prepared(r.submit(6, job('after', 1, { memory: { prepareBytes: 1000 } })))).toEqual(['after:0']);
    expect(r.finishes()).toEqual([
      { jobId: 'big', state: 'failed', code: 'E_OVERSIZE' },
      { jobId: 'ok', state: 'done', code: undefined },
    ]);
  });

  it('a job that needs exactly the whole budget is not oversize', () => {
    const e = new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 500 });
    const out = e.apply({ type: 'submit', time: 0, job: job('a', 2, { memory: { prepareBytes: 500 } }) });
    expect(prepared(out)).toEqual(['a:0']);
    expect(e.snapshot.budgetBlocked).toBe(true);
  });

  it('the budget blocks dispatch and then grants strictly in queue order (no barging)', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 250 }));
    const e = r.e;
    r.submit(0, job('a', 1, { memory: { prepareBytes: 100 } }));
    expect(prepared(r.submit(1, job('b', 2, { memory: { prepareBytes: 100 } })))).toEqual(['b:0']);
    expect(e.budget.used).toBe(200);
    expect(e.snapshot.budgetBlocked).toBe(true);
    expect(e.snapshot.backlog).toBe(1);

    // A later, smaller job would fit in the 50 free bytes, but b:1 is ahead of it.
    expect(r.submit(2, job('c', 1, { memory: { prepareBytes: 40 } }))).toEqual([]);
    expect(e.snapshot.budgetBlocked).toBe(true);
    expect(e.budget.used).toBe(200);
    expect(e.snapshot.backlog).toBe(2);

    // An event that frees nothing keeps it blocked.
    expect(r.apply({ type: 'tick', time: 3 })).toEqual([]);
    expect(e.snapshot.budgetBlocked).toBe(true);

    // a:0 goes on the device (deviceBytes 0): 100 bytes free up → b:1, then c:0 fits too.
    const out = r.prepared(4, 'a:0');
    expect(out.map((c) => c.type)).toEqual(['startDevice', 'startPrepare', 'startPrepare']);
    expect(prepared(out)).toEqual(['b:1', 'c:0']);
    expect(e.budget.used).toBe(240);
    expect(e.snapshot.budgetBlocked).toBe(false);
    expect(e.snapshot.backlog).toBe(0);
  });

  it('a blocked head holds back everything behind it until exactly enough is free', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 100 }));
    const e = r.e;
    r.submit(0, job('a', 1, { memory: { prepareBytes: 60, deviceBytes: 60 } }));
    r.submit(0, job('big', 1, { memory: { prepareBytes: 90 } }));
    r.submit(0, job('small', 1, { memory: { prepareBytes: 10 } }));
    expect(prepared(r.log)).toEqual(['a:0']);
    expect(e.snapshot.budgetBlocked).toBe(true);
    r.prepared(1, 'a:0'); // keeps its 60 device bytes
    expect(prepared(r.log)).toEqual(['a:0']);
    expect(e.snapshot.budgetBlocked).toBe(true);
    const out = r.done(2, 'a:0');
    expect(prepared(out)).toEqual(['big:0', 'small:0']);
    expect(e.budget.used).toBe(100);
  });

  it('budgetBlocked clears when the blocked job is cancelled, and the next head is granted', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 100 }));
    r.submit(0, job('a', 1, { memory: { prepareBytes: 80 } }));
    r.submit(0, job('big', 2, { memory: { prepareBytes: 50 } }));
    r.submit(0, job('small', 1, { memory: { prepareBytes: 20 } }));
    expect(r.e.snapshot.budgetBlocked).toBe(true);
    const out = r.apply({ type: 'cancel', time: 1, jobId: 'big' });
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'big', state: 'cancelled', code: 'E_CANCELLED' }]);
    expect(aborts(out)).toEqual([]); // nothing of big had started
    expect(prepared(out)).toEqual(['small:0']);
    expect(r.e.snapshot.budgetBlocked).toBe(false);
    expect(r.e.snapshot.backlog).toBe(0);
  });
});

/** One device, one worker; job x with 4 partitions: x:0 on the device, x:1 waiting, x:2 and x:3 preparing. */
function staged(budgetBytes = 10_000) {
  const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes }));
  r.submit(0, job('x', 4, { memory: { prepareBytes: 100, deviceBytes: 40 } }));
  r.submit(0, job('y', 1, { memory: { prepareBytes: 10, deviceBytes: 10 } }));
  r.prepared(1, 'x:0');
  r.prepared(2, 'x:1');
  expect(r.item('x:0').state).toBe('on-device');
  expect(r.item('x:1').state).toBe('waiting');
  expect(r.e.budget.used).toBe(40 + 100 + 100 + 100 + 10);
  return r;
}

describe('Engine: failures', () => {
  it('prepareFailed fails the job once, aborts its other in-flight partitions with their stage and releases their memory', () => {
    const r = staged();
    const failing = r.item('x:3');
    const out = r.apply({ type: 'prepareFailed', time: 5, item: failing.id, attempt: failing.attempt, reason: 'out of disk' });
    const others = ofType(out, 'abort').filter((c) => c.item.id !== failing.id);
    expect(others.map((c) => `${c.item.partition}/${c.stage}`).sort()).toEqual(['0/on-device', '1/waiting', '2/preparing']);
    for (const c of others) expect(c.reason).toMatch(/out of disk/);
    const fin = ofType(out, 'finishJob');
    expect(fin).toHaveLength(1);
    expect(fin[0]).toMatchObject({ jobId: 'x', state: 'failed', code: 'E_PREPARE_FAILED', timeMs: 5 });
    expect(fin[0]!.reason).toMatch(/job x: partition 3 failed in preparation: out of disk/);
    // Aborts come before the finish.
    expect(out.findIndex((c) => c.type === 'finishJob')).toBeGreaterThan(Math.max(...others.map((c) => out.indexOf(c))));
    // x's memory is all back; y (still preparing) keeps its 10 bytes.
    expect(r.e.budget.used).toBe(10);
    for (const p of [0, 1, 2, 3]) {
      expect(r.item(`x:${p}`).reservedBytes).toBe(0);
      expect(r.item(`x:${p}`).state).toBe('failed');
    }
    expect(r.e.snapshot).toMatchObject({ preparing: 1, waiting: 0, onDevice: 0, backlog: 0, preparingStartMsTotal: 0 });
    expect(r.e.snapshot.devices[0]!.busy).toBe(0);
    // The freed worker serves y as soon as it is prepared.
    expect(started(r.prepared(6, 'y:0'))).toEqual(['y:0@0/0']);
    // Stale events about x are ignored; x never finishes twice.
    const x2 = r.item('x:2');
    expect(r.apply({ type: 'prepareFailed', time: 7, item: x2.id, attempt: x2.attempt, reason: 'again' })).toEqual([]);
    expect(r.apply({ type: 'prepared', time: 7, item: x2.id, attempt: x2.attempt })).toEqual([]);
    const x0 = r.item('x:0');
    expect(r.apply({ type: 'deviceDone', time: 8, item: x0.id, attempt: x0.attempt })).toEqual([]);
    expect(r.e.snapshot.deviceCompletions).toBe(0);
    expect(r.finishes()).toEqual([{ jobId: 'x', state: 'failed', code: 'E_PREPARE_FAILED' }]);
  });

  it('a failure marked final fails the job at once, its retries left unspent (trying again would fail the same way)', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), retries: 3 }));
    r.submit(0, job('f', 1));
    const f0 = r.item('f:0');
    expect(ofType(r.apply({ type: 'prepareFailed', time: 1, item: f0.id, attempt: f0.attempt, reason: 'bad input', final: true }), 'finishJob')).toMatchObject([{ jobId: 'f', state: 'failed', code: 'E_PREPARE_FAILED', reason: 'job f: partition 0 failed in preparation: bad input' }]);
    r.submit(2, job('g', 1));
    r.prepared(3, 'g:0');
    const g0 = r.item('g:0');
    expect(ofType(r.apply({ type: 'deviceFailed', time: 4, item: g0.id, attempt: g0.attempt, reason: 'NaN in the output', final: true }), 'finishJob')).toMatchObject([{ jobId: 'g', state: 'failed', code: 'E_DEVICE_FAILED' }]);
    // Not final: retried.
    r.submit(5, job('h', 1));
    const h0 = r.item('h:0');
    expect(ofType(r.apply({ type: 'prepareFailed', time: 6, item: h0.id, attempt: h0.attempt, reason: 'flaky' }), 'finishJob')).toEqual([]);
    expect(() => r.apply({ type: 'prepareFailed', time: 7, item: r.item('h:0').id, attempt: r.item('h:0').attempt, reason: 'x', final: 'yes' as unknown as boolean })).toThrow(/prepareFailed\.final must be true, false or absent/);
  });

  it("a failure reason names the job's own partition number (partitionNumbers: a job resumed with the partitions it had left)", () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer() }));
    r.submit(0, { ...job('resumed', 2), partitionNumbers: [5, 7] });
    const second = r.item('resumed:1');
    expect(ofType(r.apply({ type: 'prepareFailed', time: 1, item: second.id, attempt: second.attempt, reason: 'bad input' }), 'finishJob')).toMatchObject([{ reason: 'job resumed: partition 7 failed in preparation: bad input' }]);
    expect(() => r.submit(2, { ...job('short', 3), partitionNumbers: [1, 2] })).toThrow(/job\.partitionNumbers must be 3 whole numbers ≥ 0, the job's own number of each partition, or absent \(got 2 entries\)/);
  });

  it('a failure reason names the device by DeviceSpec.name where it has one (a config names devices; their indexes are nowhere in it)', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1, name: 'gpu-a' }], pacer: createUnpacedPacer(), budgetBytes: 1000 }));
    r.submit(0, job('n', 1));
    r.prepared(1, 'n:0');
    const n0 = r.item('n:0');
    const fin = ofType(r.apply({ type: 'deviceFailed', time: 2, item: n0.id, attempt: n0.attempt, reason: 'ECC error' }), 'finishJob');
    expect(fin[0]!.reason).toBe('job n: partition 0 failed on device "gpu-a": ECC error');
    expect(() => new Engine({ devices: [{ workers: 1, name: 3 as unknown as string }], pacer: createUnpacedPacer() })).toThrow(/devices\[0\]\.name must be a string/);
  });

  it('deviceFailed fails the job once, aborts the rest and releases all of its memory', () => {
    const r = staged();
    const x0 = r.item('x:0');
    const out = r.apply({ type: 'deviceFailed', time: 5, item: x0.id, attempt: x0.attempt, reason: 'ECC error' });
    const others = ofType(out, 'abort').filter((c) => c.item.id !== x0.id);
    expect(others.map((c) => `${c.item.partition}/${c.stage}`).sort()).toEqual(['1/waiting', '2/preparing', '3/preparing']);
    const fin = ofType(out, 'finishJob');
    expect(fin).toHaveLength(1);
    expect(fin[0]).toMatchObject({ jobId: 'x', state: 'failed', code: 'E_DEVICE_FAILED' });
    expect(fin[0]!.reason).toMatch(/partition 0 failed on device 0: ECC error/);
    expect(r.e.budget.used).toBe(10);
    expect(r.e.snapshot).toMatchObject({ preparing: 1, waiting: 0, onDevice: 0 });
    expect(r.e.snapshot.devices[0]).toMatchObject({ busy: 0, completions: 0 });
    expect(r.apply({ type: 'deviceFailed', time: 6, item: x0.id, attempt: x0.attempt, reason: 'again' })).toEqual([]);
    expect(r.finishes()).toHaveLength(1);
  });

  it('an event of an earlier attempt is stale and ignored; one of an attempt not started, of the other stage, or of an item never given is a driver\'s mistake, refused', () => {
    const r = staged();
    const x0 = r.item('x:0'); // on-device, attempt 2
    const x2 = r.item('x:2'); // preparing, attempt 1
    expect(r.apply({ type: 'deviceFailed', time: 5, item: x0.id, attempt: 1, reason: 'old' })).toEqual([]);
    expect(r.apply({ type: 'prepared', time: 5, item: x0.id, attempt: 1 })).toEqual([]);
    expectStokerError(() => r.apply({ type: 'prepareFailed', time: 5, item: x0.id, attempt: x0.attempt, reason: 'wrong stage' }), 'E_INVALID_EVENT', /^prepareFailed for item \d+ at attempt 2, which was its device step: answer a startPrepare with prepared or prepareFailed, a startDevice with deviceDone or deviceFailed$/);
    expectStokerError(() => r.apply({ type: 'deviceFailed', time: 5, item: x2.id, attempt: x2.attempt, reason: 'wrong stage' }), 'E_INVALID_EVENT', /which was its preparation/);
    expectStokerError(() => r.apply({ type: 'deviceDone', time: 5, item: x2.id, attempt: x2.attempt }), 'E_INVALID_EVENT', /which was its preparation/);
    expectStokerError(() => r.apply({ type: 'prepared', time: 5, item: x2.id, attempt: 2 }), 'E_INVALID_EVENT', /^prepared for item \d+ at attempt 2, which has not started \(its latest is 1\)/);
    expectStokerError(() => r.apply({ type: 'prepared', time: 5, item: x2.id, attempt: '1' as never }), 'E_INVALID_EVENT', /^prepared\.attempt must be the attempt of its command \(command\.attempt, an integer ≥ 1; got "1"\)$/);
    expectStokerError(() => r.apply({ type: 'prepared', time: 5, item: 9999, attempt: 1 }), 'E_INVALID_EVENT', /^prepared\.item 9999 is no item this engine gave/);
    expectStokerError(() => r.apply({ type: 'prepared', time: 5, item: -1, attempt: 1 }), 'E_INVALID_EVENT', /^prepared\.item -1 is no item this engine gave/);
    expectStokerError(() => r.apply({ type: 'prepareFailed', time: 5, item: x2.id, attempt: 1 } as never), 'E_INVALID_EVENT', /^prepareFailed\.reason must be a string saying why \(got undefined\)$/);
    expectStokerError(() => r.apply({ type: 'batchDone', time: 5, batch: 0 }), 'E_INVALID_EVENT', /^batchDone\.batch 0 is no batch this engine gave/);
    expectStokerError(() => r.apply({ type: 'cancel', time: 5 } as never), 'E_INVALID_EVENT', /^cancel\.jobId must be the job's id, a string \(got undefined\)$/);
    // A cancel of a job that is not there (ended already) is no mistake.
    expect(r.apply({ type: 'cancel', time: 5, jobId: 'gone' })).toEqual([]);
    expect(r.e.activeJobs).toBe(2);
    expect(r.finishes()).toEqual([]);
  });
});

describe('Engine: cancel', () => {
  it('withdraws queued, preparing, waiting and on-device partitions and finishes the job cancelled', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 350, maxPreparing: 3 }));
    r.submit(0, job('x', 5, { memory: { prepareBytes: 100, deviceBytes: 50 } }));
    r.prepared(1, 'x:0'); // on device; x:3 dispatched (preparing cap 3)
    r.prepared(2, 'x:1'); // waiting
    expect(r.e.snapshot).toMatchObject({ onDevice: 1, waiting: 1, preparing: 2, backlog: 1 });
    expect(r.e.budget.used).toBe(350);
    const out = r.apply({ type: 'cancel', time: 3, jobId: 'x' });
    expect(aborts(out).sort()).toEqual(['x:0/on-device', 'x:1/waiting', 'x:2/preparing', 'x:3/preparing']);
    for (const c of ofType(out, 'abort')) expect(c.reason).toBe('cancelled on request');
    expect(ofType(out, 'finishJob')).toEqual([{ type: 'finishJob', jobId: 'x', state: 'cancelled', code: 'E_CANCELLED', reason: 'cancelled on request', timeMs: 3 }]);
    // A driver may say why (a shutdown's cancel is not a user's); a reason that is not a string is refused.
    const f = engine();
    f.apply({ type: 'submit', time: 0, job: job('y', 1) });
    expect(ofType(f.apply({ type: 'cancel', time: 1, jobId: 'y', reason: 'shutting down' }), 'finishJob')[0]).toMatchObject({ code: 'E_CANCELLED', reason: 'shutting down' });
    expectStokerError(() => f.apply({ type: 'cancel', time: 2, jobId: 'y', reason: 7 } as never), 'E_INVALID_EVENT', /cancel\.reason must be a string/);
    expect(out.at(-1)!.type).toBe('finishJob');
    expect(r.e.budget.used).toBe(0);
    expect(r.e.snapshot).toMatchObject({ onDevice: 0, waiting: 0, preparing: 0, backlog: 0, budgetUsedBytes: 0, preparingStartMsTotal: 0 });
    expect(r.e.snapshot.devices[0]!.busy).toBe(0);
    for (const k of ['x:0', 'x:1', 'x:2', 'x:3']) expect(r.item(k).state).toBe('cancelled');
    expect(r.e.activeJobs).toBe(0);
  });

  it('stale events after cancel are ignored, and a second cancel or one for an unknown job does nothing', () => {
    const r = new Run(engine());
    r.submit(0, job('x', 3));
    r.prepared(1, 'x:0');
    r.prepared(2, 'x:1');
    r.apply({ type: 'cancel', time: 3, jobId: 'x' });
    const before = JSON.stringify(r.e.snapshot);
    expect(r.done(4, 'x:0')).toEqual([]);
    expect(r.prepared(4, 'x:2')).toEqual([]);
    const x1 = r.item('x:1');
    expect(r.apply({ type: 'deviceFailed', time: 4, item: x1.id, attempt: x1.attempt, reason: 'late' })).toEqual([]);
    expect(r.apply({ type: 'cancel', time: 5, jobId: 'x' })).toEqual([]);
    expect(r.apply({ type: 'cancel', time: 5, jobId: 'nope' })).toEqual([]);
    const after = JSON.parse(JSON.stringify(r.e.snapshot));
    expect({ ...after, now: 0 }).toEqual({ ...JSON.parse(before), now: 0 });
    expect(r.finishes()).toEqual([{ jobId: 'x', state: 'cancelled', code: 'E_CANCELLED' }]);
  });

  it('cancelling one job lets the next job use the freed worker at once', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer() }));
    r.submit(0, job('x', 1));
    r.submit(0, job('y', 1));
    r.prepared(1, 'x:0');
    r.prepared(2, 'y:0');
    expect(r.e.snapshot.waiting).toBe(1);
    const out = r.apply({ type: 'cancel', time: 3, jobId: 'x' });
    expect(out.map((c) => c.type)).toEqual(['abort', 'finishJob', 'startDevice']);
    expect(started(out)).toEqual(['y:0@0/0']);
  });
});

describe('Engine: workers', () => {
  it('workerLost with a busy worker aborts its item, releases all its memory and prepares it again; the old attempts are stale', () => {
    const r = new Run(engine({ budgetBytes: 1000 }));
    const e = r.e;
    r.submit(0, job('a', 3, { memory: { prepareBytes: 100, deviceBytes: 30 } }));
    r.prepared(1, 'a:0'); // worker 0
    r.prepared(2, 'a:1'); // worker 1
    r.prepared(3, 'a:2'); // waiting
    const a0 = r.item('a:0');
    const oldAttempt = a0.attempt;
    expect(oldAttempt).toBe(2);
    expect(e.budget.used).toBe(30 + 30 + 100);
    expect(e.snapshot.dispatched).toBe(3);

    // The device had the prepared data: a:0 goes back to the queue and (unpaced, memory free) is
    // dispatched again in the same step, with a new attempt and the full reservation.
    let out = r.apply({ type: 'workerLost', time: 4, device: 0, worker: 0 });
    expect(out.map((c) => c.type)).toEqual(['abort', 'startPrepare']);
    expect(aborts(out)).toEqual(['a:0/on-device']);
    expect(ofType(out, 'abort')[0]!.reason).toMatch(/device 0 worker 0 lost/);
    expect(prepared(out)).toEqual(['a:0']);
    expect(ofType(out, 'startPrepare')[0]!.item).toBe(a0); // the same item, not a new one
    expect(ofType(out, 'startPrepare')[0]!.attempt).toBe(oldAttempt + 1);
    expect(a0.state).toBe('preparing');
    expect(a0.attempt).toBe(oldAttempt + 1);
    expect(a0.reservedBytes).toBe(100);
    expect(e.budget.used).toBe(30 + 100 + 100);
    expect(e.snapshot).toMatchObject({ workers: 1, preparing: 1, waiting: 1, onDevice: 1, backlog: 0, dispatched: 4, budgetUsedBytes: 230 });
    expect(e.snapshot.devices[0]).toMatchObject({ workers: 1, busy: 1 });
    expect(e.job('a')!.partitions).toEqual(['preparing', 'on-device', 'waiting']);

    // Events about the old attempts (the device run, the first preparation) are stale.
    expect(r.apply({ type: 'deviceDone', time: 5, item: a0.id, attempt: oldAttempt })).toEqual([]);
    expect(r.apply({ type: 'deviceFailed', time: 5, item: a0.id, attempt: oldAttempt, reason: 'late' })).toEqual([]);
    expect(r.apply({ type: 'prepared', time: 5, item: a0.id, attempt: oldAttempt - 1 })).toEqual([]);
    expect(e.snapshot).toMatchObject({ deviceCompletions: 0, prepareCompletions: 3, preparing: 1 });
    expect(a0.state).toBe('preparing');

    // Prepared again: it waits (worker 1 is busy, worker 0 is lost), holding its prepared data.
    expect(r.prepared(6, 'a:0')).toEqual([]);
    expect(a0.state).toBe('waiting');
    expect(a0.reservedBytes).toBe(100);
    expect(e.snapshot).toMatchObject({ preparing: 0, waiting: 2, onDevice: 1, prepareCompletions: 4 });

    // When worker 1 frees up, a:0 (lower key than a:2) starts there with a new attempt.
    out = r.done(7, 'a:1');
    expect(started(out)).toEqual(['a:0@0/1']);
    expect(ofType(out, 'startDevice')[0]!.attempt).toBe(oldAttempt + 2);
    expect(a0.reservedBytes).toBe(30);
    expect(e.budget.used).toBe(30 + 100);

    // Lost worker comes back: a:2 starts on it.
    out = r.apply({ type: 'workerReturned', time: 8, device: 0, worker: 0 });
    expect(started(out)).toEqual(['a:2@0/0']);
    expect(e.snapshot).toMatchObject({ workers: 2, waiting: 0, onDevice: 2 });
    expect(e.snapshot.devices[0]).toMatchObject({ workers: 2, busy: 2 });

    r.done(9, 'a:0');
    out = r.done(10, 'a:2');
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'a', state: 'done' }]);
    expect(e.budget.used).toBe(0);
    expect(e.snapshot.deviceCompletions).toBe(3);
    expect(e.snapshot.dispatched).toBe(4);
    expect(r.finishes()).toEqual([{ jobId: 'a', state: 'done', code: undefined }]);
  });

  it('deviceFailed with workerLost: the failed item is retried, and nothing more is sent to its worker until it returns (handed the next item, then lost, that item was prepared again)', () => {
    const r = new Run(engine({ retries: 2 }));
    const e = r.e;
    r.submit(0, job('a', 3));
    r.prepared(1, 'a:0'); // worker 0
    r.prepared(2, 'a:1'); // worker 1
    r.prepared(3, 'a:2'); // waiting
    const a0 = r.item('a:0');
    const out = r.apply({ type: 'deviceFailed', time: 4, item: a0.id, attempt: a0.attempt, reason: 'it exited', workerLost: true });
    // a:0 is prepared again (a try spent); a:2 stays waiting, not sent to the lost worker.
    expect(prepared(out)).toEqual(['a:0']);
    expect(started(out)).toEqual([]);
    expect(ofType(out, 'abort')).toEqual([]);
    expect(e.snapshot).toMatchObject({ workers: 1, waiting: 1, onDevice: 1, preparing: 1 });
    expect(e.job('a')!.partitions).toEqual(['preparing', 'on-device', 'waiting']);
    // Its return: a:2 starts on it.
    expect(started(r.apply({ type: 'workerReturned', time: 5, device: 0, worker: 0 }))).toEqual(['a:2@0/0']);
    // Without it, the worker takes the waiting item at once.
    const q = new Run(engine({ retries: 2 }));
    q.submit(0, job('b', 3));
    q.prepared(1, 'b:0');
    q.prepared(2, 'b:1');
    q.prepared(3, 'b:2');
    const b0 = q.item('b:0');
    expect(started(q.apply({ type: 'deviceFailed', time: 4, item: b0.id, attempt: b0.attempt, reason: 'it exited' }))).toEqual(['b:2@0/0']);
    const b1 = q.item('b:1');
    expectStokerError(() => q.apply({ type: 'deviceFailed', time: 5, item: b1.id, attempt: b1.attempt, reason: 'x', workerLost: 'yes' as unknown as boolean }), 'E_INVALID_EVENT', /deviceFailed\.workerLost must be true, false or absent/);
  });

  it('a lost item goes back to the queue under its original key, ahead of later work', () => {
    // Budget for two reservations of 100: the lost item's prepare-phase memory is needed again.
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 200 }));
    const e = r.e;
    r.submit(0, job('a', 2, { memory: { prepareBytes: 100, deviceBytes: 100 } }));
    r.submit(1, job('b', 1, { memory: { prepareBytes: 100, deviceBytes: 100 } }));
    expect(prepared(r.log)).toEqual(['a:0', 'a:1']);
    r.prepared(2, 'a:0'); // on the device, keeps its 100 bytes
    expect(started(r.log)).toEqual(['a:0@0/0']);
    r.prepared(3, 'a:1'); // waits with its 100 bytes
    expect(e.snapshot).toMatchObject({ onDevice: 1, waiting: 1, backlog: 1, budgetBlocked: true });
    const a0 = r.item('a:0');

    const out = r.apply({ type: 'workerLost', time: 4, device: 0, worker: 0 });
    // a:0's 100 bytes come back, and the head of the queue takes them: a:0 again, not b:0.
    expect(aborts(out)).toEqual(['a:0/on-device']);
    expect(prepared(out)).toEqual(['a:0']);
    expect(a0.reservedBytes).toBe(100);
    expect(e.snapshot).toMatchObject({ preparing: 1, waiting: 1, onDevice: 0, backlog: 1, budgetBlocked: true });
    expect(e.budget.used).toBe(200);
    expect(e.job('b')!.partitions).toEqual(['queued']);
  });

  it('a lost item that cannot be dispatched at once is queued (backlog + 1), holding no memory', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 200, maxPreparing: 1 }));
    r.submit(0, job('a', 2, { memory: { prepareBytes: 100, deviceBytes: 100 } }));
    r.prepared(1, 'a:0'); // on the device; a:1 dispatched
    r.prepared(2, 'a:1'); // waits
    r.submit(3, job('c', 1, { priority: 'critical', memory: { prepareBytes: 0, deviceBytes: 0 } })); // a critical job with no memory goes at once
    r.submit(3, job('b', 1, { memory: { prepareBytes: 100, deviceBytes: 100 } }));
    expect(prepared(r.log)).toEqual(['a:0', 'a:1', 'c:0']);
    expect(r.e.snapshot).toMatchObject({ preparing: 1, backlog: 1 }); // b:0 is held by the preparation cap
    const a0 = r.item('a:0');
    let out = r.apply({ type: 'workerLost', time: 4, device: 0, worker: 0 });
    expect(out.map((c) => c.type)).toEqual(['abort']);
    expect(a0.state).toBe('queued');
    expect(a0.reservedBytes).toBe(0);
    expect(r.e.snapshot).toMatchObject({ backlog: 2, preparing: 1, waiting: 1, onDevice: 0, budgetUsedBytes: 100 });
    expect(r.e.job('a')!.partitions).toEqual(['queued', 'waiting']);
    // The preparation slot frees: a:0 (older job) goes before b:0.
    out = r.prepared(5, 'c:0');
    expect(prepared(out)).toEqual(['a:0']);
    expect(ofType(out, 'startPrepare')[0]!.attempt).toBe(3);
    expect(a0.reservedBytes).toBe(100);
    expect(r.e.snapshot).toMatchObject({ backlog: 1, preparing: 1, budgetUsedBytes: 200 });
    expect(r.e.job('b')!.partitions).toEqual(['queued']);
  });

  it('a job that ends while its lost item is queued takes it out of the queue, with no abort for it', () => {
    const gate = new GatePacer();
    const r = new Run(new Engine({ devices: [{ workers: 2 }], pacer: gate, budgetBytes: 1000 }));
    r.submit(0, job('a', 2, { memory: { prepareBytes: 100, deviceBytes: 40 } }));
    r.prepared(1, 'a:0');
    r.prepared(2, 'a:1');
    expect(started(r.log)).toEqual(['a:0@0/0', 'a:1@0/1']);
    gate.openAt = Infinity; // the pacer holds everything back
    let out = r.apply({ type: 'workerLost', time: 3, device: 0, worker: 0 });
    expect(aborts(out)).toEqual(['a:0/on-device']);
    expect(r.item('a:0').state).toBe('queued');
    expect(r.e.snapshot).toMatchObject({ backlog: 1, onDevice: 1, budgetUsedBytes: 40 });
    out = r.apply({ type: 'cancel', time: 4, jobId: 'a' });
    expect(aborts(out)).toEqual(['a:1/on-device']);
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'a', state: 'cancelled', code: 'E_CANCELLED' }]);
    expect(r.item('a:0').state).toBe('cancelled');
    expect(r.item('a:0').reservedBytes).toBe(0);
    expect(r.e.snapshot).toMatchObject({ backlog: 0, onDevice: 0, preparing: 0, waiting: 0, budgetUsedBytes: 0 });
    // Nothing of a is dispatched once the pacer opens.
    gate.openAt = 0;
    expect(prepared(r.apply({ type: 'tick', time: 5 }))).toEqual([]);
    expect(r.e.snapshot.dispatched).toBe(2);
  });

  it('an idle worker lost changes only the counts; losing or returning twice is a no-op', () => {
    const e = engine();
    expect(e.apply({ type: 'workerLost', time: 0, device: 0, worker: 1 })).toEqual([]);
    expect(e.snapshot.workers).toBe(1);
    e.apply({ type: 'workerLost', time: 1, device: 0, worker: 1 });
    expect(e.snapshot.workers).toBe(1);
    expect(e.snapshot.devices[0]!.workers).toBe(1);
    e.apply({ type: 'workerReturned', time: 2, device: 0, worker: 1 });
    e.apply({ type: 'workerReturned', time: 3, device: 0, worker: 1 });
    expect(e.snapshot.workers).toBe(2);
    expect(e.snapshot.devices[0]!.workers).toBe(2);
  });

  it('never starts an item on a lost worker; with all workers lost, a running item is prepared again and items wait until one returns', () => {
    const r = new Run(new Engine({ devices: [{ workers: 2 }], pacer: createUnpacedPacer() }));
    r.apply({ type: 'workerLost', time: 0, device: 0, worker: 0 });
    r.submit(1, job('a', 2));
    expect(started(r.prepared(2, 'a:0'))).toEqual(['a:0@0/1']);
    let out = r.apply({ type: 'workerLost', time: 3, device: 0, worker: 1 });
    expect(aborts(out)).toEqual(['a:0/on-device']);
    expect(prepared(out)).toEqual(['a:0']);
    expect(started(out)).toEqual([]);
    expect(r.item('a:0').state).toBe('preparing');
    expect(r.prepared(4, 'a:1')).toEqual([]);
    expect(r.prepared(5, 'a:0')).toEqual([]);
    expect(r.item('a:0').state).toBe('waiting');
    expect(r.e.snapshot).toMatchObject({ workers: 0, waiting: 2, onDevice: 0, preparing: 0, backlog: 0 });
    expect(r.apply({ type: 'tick', time: 6 })).toEqual([]);
    out = r.apply({ type: 'workerReturned', time: 7, device: 0, worker: 0 });
    expect(started(out)).toEqual(['a:0@0/0']);
    expect(r.e.snapshot).toMatchObject({ workers: 1, waiting: 1, onDevice: 1 });
  });

  it('an event naming a worker that does not exist throws E_INVALID_EVENT', () => {
    const e = engine();
    expectStokerError(() => e.apply({ type: 'workerLost', time: 0, device: 1, worker: 0 }), 'E_INVALID_EVENT', /no device 1: devices are numbered 0 to 0/);
    expectStokerError(() => e.apply({ type: 'workerReturned', time: 0, device: 0, worker: 2 }), 'E_INVALID_EVENT', /no worker 2 on device 0/);
    expect(e.snapshot.workers).toBe(2);
  });
});

describe('Engine: deadlines and time', () => {
  it('asks to be woken at the deadline and fails the job with E_DEADLINE on a tick at it', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 1000 }));
    let out = r.submit(0, job('d', 3, { deadline: 500, memory: { prepareBytes: 100 } }));
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: 500 }]);
    r.prepared(10, 'd:0');
    r.prepared(20, 'd:1');
    // An early tick: the timer fired, so the engine asks for it again.
    out = r.apply({ type: 'tick', time: 499.9 });
    expect(out).toEqual([{ type: 'wakeAt', time: 500 }]);
    out = r.apply({ type: 'tick', time: 500 });
    const fin = ofType(out, 'finishJob');
    expect(fin).toHaveLength(1);
    expect(fin[0]).toMatchObject({ jobId: 'd', state: 'failed', code: 'E_DEADLINE', timeMs: 500 });
    expect(fin[0]!.reason).toMatch(/missed its deadline \(at 500 ms on the driver.s clock\)/);
    expect(aborts(out).sort()).toEqual(['d:0/on-device', 'd:1/waiting', 'd:2/preparing']);
    // The timer has fired and no new one is needed: nothing to send.
    expect(ofType(out, 'wakeAt')).toEqual([]);
    expect(r.e.budget.used).toBe(0);
    expect(r.e.activeJobs).toBe(0);
  });

  it('a late tick (after the deadline) fails the job too', () => {
    const e = engine();
    e.apply({ type: 'submit', time: 0, job: job('d', 1, { deadline: 100 }) });
    const out = e.apply({ type: 'tick', time: 250 });
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'd', code: 'E_DEADLINE' }]);
  });

  it('any event at or after the deadline expires the job, not just ticks', () => {
    const e = engine();
    e.apply({ type: 'submit', time: 0, job: job('d', 1, { deadline: 100 }) });
    const out = e.apply({ type: 'submit', time: 100, job: job('other', 1) });
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'd', code: 'E_DEADLINE' }]);
    expect(e.job('other')).toBeDefined();
  });

  it('a deadline that passed before an event ends the job first: a completion after it is too late', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 1000 }));
    r.submit(0, job('d', 1, { deadline: 100, memory: { prepareBytes: 50, deviceBytes: 20 } }));
    r.prepared(10, 'd:0');
    const d0 = r.item('d:0');
    expect(d0.state).toBe('on-device');
    // No tick at 100 came; the device reports done at 150.
    const out = r.done(150, 'd:0');
    expect(out.map((c) => c.type)).toEqual(['abort', 'finishJob', 'wakeAt']);
    expect(aborts(out)).toEqual(['d:0/on-device']);
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE', timeMs: 150 }]);
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: Infinity }]);
    expect(d0.state).toBe('failed');
    expect(r.e.snapshot).toMatchObject({ deviceCompletions: 0, deviceBusyMs: 0, onDevice: 0, budgetUsedBytes: 0 });
    expect(r.e.snapshot.devices[0]).toEqual({ workers: 1, busy: 0, completions: 0, busyMs: 0, concurrencyTotal: 0 });
    expect(r.finishes()).toEqual([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE' }]);
  });

  it('an event exactly at the deadline is too late as well, whatever it is', () => {
    // The last partition's completion at the deadline.
    const r = new Run(new Engine({ devices: [{ workers: 2 }], pacer: createUnpacedPacer() }));
    r.submit(0, job('d', 2, { deadline: 100 }));
    r.prepared(10, 'd:0');
    r.prepared(20, 'd:1');
    r.done(30, 'd:0');
    let out = r.done(100, 'd:1');
    expect(aborts(out)).toEqual(['d:1/on-device']);
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE' }]);
    expect(r.e.snapshot.deviceCompletions).toBe(1);

    // A preparation finishing at the deadline does not reach a device.
    const p = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer() }));
    p.submit(0, job('d', 1, { deadline: 100 }));
    out = p.prepared(100, 'd:0');
    expect(started(out)).toEqual([]);
    expect(aborts(out)).toEqual(['d:0/preparing']);
    expect(p.e.snapshot).toMatchObject({ prepareCompletions: 0, preparing: 0, waiting: 0, onDevice: 0 });
    expect(p.finishes()).toEqual([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE' }]);

    // A cancel after the deadline finds the job already failed by it.
    const c = new Run(engine());
    c.submit(0, job('d', 1, { deadline: 100 }));
    out = c.apply({ type: 'cancel', time: 120, jobId: 'd' });
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE' }]);
    expect(c.finishes()).toHaveLength(1);
  });

  it('a deadline ends its job before the event is handled: a worker lost after it aborts nothing more', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer() }));
    r.submit(0, job('d', 1, { deadline: 100 }));
    r.prepared(10, 'd:0');
    const out = r.apply({ type: 'workerLost', time: 200, device: 0, worker: 0 });
    // One abort, for the deadline (not for the lost worker), and the item is not prepared again.
    expect(ofType(out, 'abort')).toHaveLength(1);
    expect(ofType(out, 'abort')[0]!.reason).toMatch(/missed its deadline \(at 100 ms on the driver.s clock\)/);
    expect(prepared(out)).toEqual([]);
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE' }]);
    expect(r.e.snapshot).toMatchObject({ workers: 0, backlog: 0, preparing: 0, dispatched: 1 });
  });

  it('a deadline already past at submit fails the job at once', () => {
    const e = engine();
    e.apply({ type: 'tick', time: 1000 });
    const out = e.apply({ type: 'submit', time: 1000, job: job('d', 2, { deadline: 999 }) });
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE' }]);
    expect(e.activeJobs).toBe(0);
    expect(e.snapshot).toMatchObject({ backlog: 0, preparing: 0 });
  });

  it('wakes for the earliest deadline; a job that finishes in time drops its deadline', () => {
    const r = new Run(new Engine({ devices: [{ workers: 2 }], pacer: createUnpacedPacer() }));
    expect(ofType(r.submit(0, job('late', 1, { deadline: 900 })), 'wakeAt')).toEqual([{ type: 'wakeAt', time: 900 }]);
    expect(ofType(r.submit(1, job('early', 1, { deadline: 300 })), 'wakeAt')).toEqual([{ type: 'wakeAt', time: 300 }]);
    expect(ofType(r.submit(2, job('later', 1, { deadline: 1000 })), 'wakeAt')).toEqual([]); // unchanged: no command
    r.prepared(3, 'early:0');
    const out = r.done(4, 'early:0');
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'early', state: 'done' }]);
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: 900 }]);
    expect(ofType(r.apply({ type: 'cancel', time: 5, jobId: 'late' }), 'wakeAt')).toEqual([{ type: 'wakeAt', time: 1000 }]);
    expect(ofType(r.apply({ type: 'tick', time: 300 }), 'finishJob')).toEqual([]); // early is done: no E_DEADLINE
  });

  it('the wake time is the earlier of the pacer’s next dispatch and the next deadline', () => {
    const gate = new GatePacer();
    gate.openAt = 700;
    const e = engine({ pacer: gate });
    let out = e.apply({ type: 'submit', time: 0, job: job('a', 1) });
    expect(out).toEqual([{ type: 'wakeAt', time: 700 }]);
    out = e.apply({ type: 'submit', time: 1, job: job('d', 1, { deadline: 400 }) });
    expect(out).toEqual([{ type: 'wakeAt', time: 400 }]);
    out = e.apply({ type: 'tick', time: 400 });
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'd', code: 'E_DEADLINE' }]);
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: 700 }]);
    out = e.apply({ type: 'tick', time: 700 });
    expect(prepared(out)).toEqual(['a:0']);
    expect(ofType(out, 'wakeAt')).toEqual([]);
  });

  it('a tick means the timer fired: the engine re-sends wakeAt whenever it still needs one, even an unchanged time', () => {
    const gate = new GatePacer();
    gate.openAt = 100;
    const e = engine({ pacer: gate, maxPreparing: 1 });
    expect(e.apply({ type: 'submit', time: 0, job: job('a', 3) })).toEqual([{ type: 'wakeAt', time: 100 }]);
    // A timer that fired early (real timers can): nothing to do yet, and the timer is asked for again.
    expect(e.apply({ type: 'tick', time: 60 })).toEqual([{ type: 'wakeAt', time: 100 }]);
    // The timer fires: a:0 goes and the preparation cap closes the gate: no timer is needed, none is sent.
    let out = e.apply({ type: 'tick', time: 100 });
    expect(prepared(out)).toEqual(['a:0']);
    expect(ofType(out, 'wakeAt')).toEqual([]);
    // The preparation slot frees while the pacer has moved its gate on: the engine asks for the new time.
    gate.openAt = 300;
    const a0 = ofType(out, 'startPrepare')[0]!.item;
    out = e.apply({ type: 'prepared', time: 200, item: a0.id, attempt: a0.attempt });
    expect(ofType(out, 'wakeAt')).toEqual([{ type: 'wakeAt', time: 300 }]);
    out = e.apply({ type: 'tick', time: 300 });
    expect(prepared(out)).toEqual(['a:1']);
    expect(ofType(out, 'wakeAt')).toEqual([]);
  });

  it('a pending timer that is no longer needed is cancelled with wakeAt(Infinity)', () => {
    const gate = new GatePacer();
    gate.openAt = 100;
    const e = engine({ pacer: gate });
    expect(e.apply({ type: 'submit', time: 0, job: job('a', 1) })).toEqual([{ type: 'wakeAt', time: 100 }]);
    // The only job is cancelled before the timer fires: the timer is withdrawn.
    expect(ofType(e.apply({ type: 'cancel', time: 50, jobId: 'a' }), 'wakeAt')).toEqual([{ type: 'wakeAt', time: Infinity }]);
  });

  it('a NaN from the pacer means no timer (Infinity), not a NaN wake', () => {
    const gate = new GatePacer();
    gate.openAt = 50;
    const e = engine({ pacer: gate });
    expect(e.apply({ type: 'submit', time: 0, job: job('a', 1) })).toEqual([{ type: 'wakeAt', time: 50 }]);
    gate.openAt = NaN;
    // After the tick no timer is pending, and NaN asks for none: nothing is sent (no NaN wake).
    expect(e.apply({ type: 'tick', time: 10 })).toEqual([]);
    gate.openAt = 80;
    expect(e.apply({ type: 'tick', time: 20 })).toEqual([{ type: 'wakeAt', time: 80 }]);
    gate.openAt = NaN;
    // With a timer pending, NaN cancels it (Infinity).
    expect(e.apply({ type: 'cancel', time: 30, jobId: 'none' })).toEqual([{ type: 'wakeAt', time: Infinity }]);
    expect(e.snapshot.dispatched).toBe(0);
  });

  it('time going backwards throws E_TIME_BACKWARDS; equal times are fine', () => {
    const e = engine();
    e.apply({ type: 'tick', time: 100 });
    expect(() => e.apply({ type: 'tick', time: 100 })).not.toThrow();
    expectStokerError(() => e.apply({ type: 'tick', time: 99 }), 'E_TIME_BACKWARDS', /99.*100/);
    expectStokerError(() => e.apply({ type: 'submit', time: 50, job: job('a', 1) }), 'E_TIME_BACKWARDS');
    // A time that is not a finite number is no time at all: named as such, not as time going backwards.
    expectStokerError(() => e.apply({ type: 'tick', time: NaN }), 'E_INVALID_EVENT', /event\.time must be a finite number of ms \(got NaN\)/);
    expectStokerError(() => e.apply({ type: 'tick', time: Infinity }), 'E_INVALID_EVENT', /got Infinity/);
    expectStokerError(() => e.apply({ type: 'tick' } as never), 'E_INVALID_EVENT', /got undefined/);
    expectStokerError(() => e.apply(null as never), 'E_INVALID_EVENT', /got an event of null/);
    expect(e.time).toBe(100);
    expect(e.activeJobs).toBe(0);
  });

  it('a rejected event does not move the clock: engine.time stays at the previous event’s time', () => {
    const gate = new GatePacer();
    const e = engine({ pacer: gate });
    // Before any event: the clock stays unset.
    expectStokerError(() => e.apply({ type: 'submit', time: 50, job: job('', 1) }), 'E_INVALID_JOB');
    expect(e.time).toBe(-Infinity);
    expect(e.snapshot.now).toBe(0);
    e.apply({ type: 'submit', time: 100, job: job('a', 1) });
    expect(e.time).toBe(100);
    const observed = gate.observed.length;
    // An invalid submit, a conflicting resubmit, an unknown worker and an unknown event type, all at 500.
    expectStokerError(() => e.apply({ type: 'submit', time: 500, job: job('b', 0) }), 'E_INVALID_JOB');
    expect(e.time).toBe(100);
    expect(e.snapshot.now).toBe(100);
    expectStokerError(() => e.apply({ type: 'submit', time: 500, job: job('a', 2) }), 'E_DUPLICATE_JOB');
    expect(e.time).toBe(100);
    expectStokerError(() => e.apply({ type: 'workerLost', time: 500, device: 3, worker: 0 }), 'E_INVALID_EVENT');
    expect(e.time).toBe(100);
    expectStokerError(() => e.apply({ type: 'explode', time: 500 } as unknown as Parameters<Engine['apply']>[0]), 'E_INVALID_EVENT');
    expect(e.time).toBe(100);
    expect(e.snapshot.now).toBe(100);
    expect(gate.observed).toHaveLength(observed); // the pacer never saw the rejected events
    // So a later event at an earlier time than the rejected ones is still in order.
    expect(() => e.apply({ type: 'tick', time: 200 })).not.toThrow();
    expect(e.time).toBe(200);
    expect(e.snapshot.now).toBe(200);
    expect(e.activeJobs).toBe(1);
    expect(e.job('a')!.partitions).toEqual(['preparing']);
  });

  // Events are validated before deadlines expire, so a rejected event changes nothing at all.
  it('a rejected event after a pending deadline leaves the job alive for the next event to fail', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer(), budgetBytes: 1000 }));
    r.submit(0, job('d', 1, { deadline: 100, memory: { prepareBytes: 10 } }));
    expectStokerError(() => r.apply({ type: 'submit', time: 200, job: job('', 1) }), 'E_INVALID_JOB');
    expect(r.e.time).toBe(0);
    expect(r.e.activeJobs).toBe(1);
    expect(r.e.budget.used).toBe(10);
    const out = r.apply({ type: 'tick', time: 200 });
    expect(aborts(out)).toEqual(['d:0/preparing']);
    expect(r.finishes()).toEqual([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE' }]);
  });

  it('an unknown event type throws E_INVALID_EVENT', () => {
    const e = engine();
    expectStokerError(() => e.apply({ type: 'explode', time: 0 } as unknown as Parameters<Engine['apply']>[0]), 'E_INVALID_EVENT', /explode/);
  });
});

describe('Engine: preparation cap and pacers', () => {
  it('maxPreparing caps concurrent preparations', () => {
    const r = new Run(engine({ maxPreparing: 2 }));
    expect(prepared(r.submit(0, job('a', 5)))).toEqual(['a:0', 'a:1']);
    expect(r.e.snapshot).toMatchObject({ preparing: 2, backlog: 3 });
    expect(r.apply({ type: 'tick', time: 1 })).toEqual([]);
    let out = r.prepared(2, 'a:0');
    expect(prepared(out)).toEqual(['a:2']);
    out = r.prepared(3, 'a:1');
    expect(prepared(out)).toEqual(['a:3']);
    expect(r.e.snapshot.preparing).toBe(2);
    const a2 = r.item('a:2');
    out = r.apply({ type: 'prepareFailed', time: 4, item: a2.id, attempt: a2.attempt, reason: 'x' });
    expect(prepared(out)).toEqual([]); // the whole job failed: nothing left to dispatch
    expect(r.e.snapshot.preparing).toBe(0);
  });

  it('a window pacer limits items in flight', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createWindowPacer({ window: 2 }) }));
    expect(prepared(r.submit(0, job('a', 5)))).toEqual(['a:0', 'a:1']);
    expect(prepared(r.prepared(1, 'a:0'))).toEqual([]); // still 2 in flight
    expect(prepared(r.done(2, 'a:0'))).toEqual(['a:2']);
  });

  it('the snapshot time follows the events', () => {
    const e = engine();
    expect(e.time).toBe(-Infinity);
    e.apply({ type: 'tick', time: 42 });
    expect(e.time).toBe(42);
    expect(e.snapshot.now).toBe(42);
  });
});

describe('Engine: resubmitting after a deadline', () => {
  it('a job whose deadline passed before the resubmit frees its id: the resubmit is a new job', () => {
    const r = new Run(new Engine({ devices: [{ workers: 1 }], pacer: createUnpacedPacer() }));
    r.submit(0, job('d', 1, { deadline: 100 }));
    // A different spec under the same id is fine once the old job has missed its deadline.
    const out = r.submit(200, job('d', 2));
    expect(r.finishes()).toEqual([{ jobId: 'd', state: 'failed', code: 'E_DEADLINE' }]);
    expect(out.filter((c) => c.type === 'startPrepare')).toHaveLength(2);
    expect(r.e.job('d')?.partitions).toHaveLength(2);
  });
});

describe('Engine: retries', () => {
  it('rejects a bad retries option', () => {
    expectStokerError(() => engine({ retries: -1 }), 'E_INVALID_OPTION', /retries/);
    expectStokerError(() => engine({ retries: 1.5 }), 'E_INVALID_OPTION', /retries/);
  });

  it('a failed preparation is prepared again while retries last, then the job fails once with the count', () => {
    const r = new Run(engine({ retries: 1, budgetBytes: 1000 }));
    r.submit(0, job('a', 1, { memory: { prepareBytes: 100, deviceBytes: 10 } }));
    const a0 = r.item('a:0');
    let out = r.apply({ type: 'prepareFailed', time: 1, item: a0.id, attempt: a0.attempt, reason: 'boom' });
    // Re-queued and, with the unpaced pacer, dispatched again at once with a fresh attempt.
    expect(ofType(out, 'finishJob')).toEqual([]);
    expect(ofType(out, 'startPrepare').map((c) => c.attempt)).toEqual([2]);
    expect(r.e.budget.used).toBe(100);
    out = r.apply({ type: 'prepareFailed', time: 2, item: a0.id, attempt: a0.attempt, reason: 'boom again' });
    expect(ofType(out, 'finishJob')).toMatchObject([{ jobId: 'a', state: 'failed', code: 'E_PREPARE_FAILED' }]);
    expect(ofType(out, 'finishJob')[0]?.reason).toMatch(/boom again \(after 2 attempts\)/);
    expect(r.e.budget.used).toBe(0);
  });

  it('a device failure frees the worker and prepares the item again', () => {
    const r = new Run(engine({ retries: 1, budgetBytes: 1000 }));
    r.submit(0, job('a', 1, { memory: { prepareBytes: 100, deviceBytes: 10 } }));
    r.prepared(1, 'a:0');
    const a0 = r.item('a:0');
    expect(a0.state).toBe('on-device');
    const out = r.apply({ type: 'deviceFailed', time: 2, item: a0.id, attempt: a0.attempt, reason: 'ECC error' });
    expect(ofType(out, 'finishJob')).toEqual([]);
    expect(ofType(out, 'startPrepare')).toHaveLength(1);
    expect(r.e.snapshot).toMatchObject({ onDevice: 0, preparing: 1 });
    expect(r.e.snapshot.devices[0]).toMatchObject({ busy: 0, completions: 0 });
    r.prepared(3, 'a:0');
    const done = r.done(4, 'a:0');
    expect(ofType(done, 'finishJob')).toMatchObject([{ jobId: 'a', state: 'done' }]);
    expect(r.e.budget.used).toBe(0);
  });
});

describe('devices that name their kinds', () => {
  const twoDevices = () => engine({ devices: [{ workers: 1, kinds: ['gpu'] }, { workers: 1, kinds: ['cpu', 'misc'] }] });

  it('routes each item only to a device that runs its kind; a waiting item of a busy device does not hold up another', () => {
    const r = new Run(twoDevices());
    r.submit(0, job('g1', 2, { kind: 'gpu' }));
    r.submit(0, job('c1', 1, { kind: 'cpu' }));
    expect(started(r.prepared(1, 'g1:0'))).toEqual(['g1:0@0/0']);
    // The GPU is busy: g1:1 waits, and c1:0 (queued behind it) goes to the CPU device.
    expect(started(r.prepared(2, 'g1:1'))).toEqual([]);
    expect(started(r.prepared(3, 'c1:0'))).toEqual(['c1:0@1/0']);
    expect(r.e.snapshot.waiting).toBe(1);
    // The CPU device frees up: g1:1 still waits for the GPU.
    expect(started(r.done(4, 'c1:0', 1))).toEqual([]);
    expect(started(r.done(5, 'g1:0', 1))).toEqual(['g1:1@0/0']);
    r.done(6, 'g1:1', 1);
    expect(r.finishes()).toEqual([
      { jobId: 'c1', state: 'done', code: undefined },
      { jobId: 'g1', state: 'done', code: undefined },
    ]);
  });

  it('keeps queue order among the items a device can take', () => {
    const r = new Run(twoDevices());
    r.submit(0, job('g1', 1, { kind: 'gpu' }));
    r.submit(0, job('c1', 1, { kind: 'cpu' }));
    r.submit(0, job('g2', 1, { kind: 'gpu' }));
    r.submit(0, job('c2', 1, { kind: 'misc' }));
    r.prepared(1, 'g1:0');
    // GPU busy with g1; g2 and c2 and c1 become ready in that order.
    r.prepared(2, 'g2:0');
    expect(started(r.prepared(3, 'c2:0'))).toEqual(['c2:0@1/0']);
    expect(started(r.prepared(4, 'c1:0'))).toEqual([]);
    // When the CPU device frees, c1 (older) is next there; g2 still waits for the GPU.
    expect(started(r.done(5, 'c2:0', 1))).toEqual(['c1:0@1/0']);
    expect(started(r.done(6, 'g1:0', 1))).toEqual(['g2:0@0/0']);
  });

  it('tells the pacer which devices have work of their kinds (eligible), so it does not count an idle one', () => {
    const r = new Run(twoDevices());
    expect(r.e.snapshot.devices.map((d) => d.eligible)).toEqual([undefined, undefined]);
    r.submit(0, job('g1', 1, { kind: 'gpu' }));
    expect(r.e.snapshot.devices.map((d) => d.eligible)).toEqual([true, false]);
    r.submit(0, job('c1', 1, { kind: 'misc' }));
    expect(r.e.snapshot.devices.map((d) => d.eligible)).toEqual([true, true]);
    r.prepared(1, 'g1:0');
    r.done(2, 'g1:0', 1);
    expect(r.e.snapshot.devices.map((d) => d.eligible)).toEqual([false, true]);
    // Without kinds on the devices there is nothing to say.
    const plain = new Run(engine());
    plain.submit(0, job('p', 1));
    expect(plain.e.snapshot.devices[0]?.eligible).toBeUndefined();
  });

  it('the stoker pacer still reports what it measured once no device has work (it plans with none then)', () => {
    const pacer = createStokerPacer();
    const r = new Run(engine({ devices: [{ workers: 1, kinds: ['gpu'] }, { workers: 1, kinds: ['cpu'] }], pacer }));
    r.submit(0, job('g1', 1, { kind: 'gpu' }));
    r.prepared(10, 'g1:0');
    r.done(110, 'g1:0', 100);
    expect(r.e.snapshot.devices.map((d) => d.eligible)).toEqual([false, false]);
    // 1 worker ÷ 100 ms: 10/s — not null, as while a job lived (an operator's capacity gauge read
    // 0 and the kind's series vanished whenever the server went idle).
    const st = pacer.state();
    expect(st.ratePerSec).toBeCloseTo(10, 9);
    expect(st.kinds).toEqual([{ name: 'gpu', estimatedPerSec: expect.closeTo(10, 9) as number }]);
    expect(st.devices?.map((d) => d.estimatedPerSec)).toEqual([expect.closeTo(10, 9), null]);
    // A device that does not run the plan's kind shows its time for a kind it runs (it read null).
    r.submit(200, job('c1', 1, { kind: 'cpu' }));
    r.prepared(210, 'c1:0');
    r.done(260, 'c1:0', 50);
    r.submit(300, job('g2', 1, { kind: 'gpu' }));
    expect(pacer.state().devices?.map((d) => d.estimatedPerSec)).toEqual([expect.closeTo(10, 9), expect.closeTo(20, 9)]);
    // While only gpu has work, the cpu kind keeps its figure (its series vanished: the plan counts no device without work).
    expect(pacer.state().kinds).toEqual([
      { name: 'gpu', estimatedPerSec: expect.closeTo(10, 9) as number },
      { name: 'cpu', estimatedPerSec: expect.closeTo(20, 9) as number },
    ]);
    r.prepared(310, 'g2:0');
    r.done(410, 'g2:0', 100);
    // Idle, kinds on devices of their own: every device counts, as the plan counts them (10 + 20).
    expect(pacer.state().ratePerSec).toBeCloseTo(30, 9);
    // No worker left (once a latency has passed: the plan keeps a lost worker that long): none, not the last figure.
    r.apply({ type: 'workerLost', time: 520, device: 0, worker: 0 });
    r.apply({ type: 'workerLost', time: 520, device: 1, worker: 0 });
    r.apply({ type: 'tick', time: 60_000 });
    expect(pacer.state().ratePerSec).toBeNull();
    expect(pacer.state().kinds?.map((k) => k.estimatedPerSec)).toEqual([null, null]);
  });

  it('refuses a job of a kind no device runs, and kinds that are not a list of names', () => {
    expectStokerError(() => twoDevices().apply({ type: 'submit', time: 0, job: job('x', 1, { kind: 'tpu' }) }), 'E_INVALID_JOB', /job\.kind "tpu" runs on no device/);
    expectStokerError(() => engine({ devices: [{ workers: 1, kinds: 'gpu' as unknown as string[] }] }), 'E_INVALID_OPTION', /devices\[0\]\.kinds must be an array/);
    // A device without kinds runs every kind.
    const mixed = new Run(engine({ devices: [{ workers: 1, kinds: ['gpu'] }, { workers: 1 }] }));
    mixed.submit(0, job('t', 1, { kind: 'tpu' }));
    expect(started(mixed.prepared(1, 't:0'))).toEqual(['t:0@1/0']);
  });
});

describe('engine.snapshot', () => {
  it('is the live counters, read-only all the way down: a write does not compile (npm run typecheck checks the @ts-expect-error lines)', () => {
    const e = new Engine({ devices: [{ workers: 2 }], pacer: createUnpacedPacer() });
    const writes = (s: ReadonlySnapshot): void => {
      // @ts-expect-error the engine's counters are not the reader's to write
      s.waiting = 1;
      // @ts-expect-error nor a device's
      (s.devices[0] as ReadonlySnapshot['devices'][number]).busy = 1;
      // @ts-expect-error nor the device list
      s.devices.push({ workers: 1, busy: 0, completions: 0, busyMs: 0 });
    };
    expect(writes).toBeTypeOf('function');
    e.apply({ type: 'submit', time: 0, job: { id: 'a', kind: 'k', partitions: 3 } });
    expect(e.snapshot.backlog + e.snapshot.preparing).toBe(3);
  });
});

/**
 * Engine edges the other core tests leave open: option and event validation messages (each says
 * what was wrong and gives an example), the order in which deadlines expire, which devices are
 * eligible, the default latency and busy time of batches, and a preparation batch that fills the
 * whole budget exactly.
 */
import { describe, expect, it } from 'vitest';
import { Engine, createUnpacedPacer, type BatchSpec, type EngineOptions, type JobSpec } from '../../src/core/index.js';
import { EngineDriver, expectStokerError, ofType } from './helpers.js';

const job = (id: string, partitions: number, extra: Partial<JobSpec> = {}): JobSpec => ({ id, kind: 'k', partitions, ...extra });
const pacer = createUnpacedPacer();
const make = (over: Partial<EngineOptions>) => new Engine({ devices: [{ workers: 1 }], pacer, ...over });

describe('Engine options: validation messages', () => {
  it('devices[i].kinds must list strings only', () => {
    expectStokerError(() => make({ devices: [{ workers: 1, kinds: ['a', 5 as unknown as string] }] }), 'E_INVALID_OPTION', /devices\[0\]\.kinds must be an array of kind names/);
    expect(make({ devices: [{ workers: 1, kinds: [] }] }).snapshot.workers).toBe(1);
  });

  it.each([
    ['an array', []],
    ['a string', 'k'],
  ])('kinds as %s is rejected', (_name, kinds) => {
    expectStokerError(() => make({ kinds: kinds as unknown as EngineOptions['kinds'] }), 'E_INVALID_OPTION', /^kinds must be an object of kind name → \{ prepareBatch \}, or absent$/);
  });

  it('kinds.<name> must be an object; one without prepareBatch is accepted and prepares alone', () => {
    expectStokerError(() => make({ kinds: { x: null as unknown as object } }), 'E_INVALID_OPTION', /kinds\.x must be an object such as \{ prepareBatch/);
    const d = new EngineDriver(make({ kinds: { k: {} } }));
    expect(ofType(d.apply({ type: 'submit', time: 0, job: job('a', 2) }), 'startPrepare')).toHaveLength(2);
  });

  it.each([
    ['null', null, 'undefined'],
    ['a number', 3, 'undefined'],
    ['maxItems 0', { maxItems: 0 }, '0'],
    ['maxItems 2.5', { maxItems: 2.5 }, '2.5'],
  ])('a batch spec of %s is rejected naming maxItems and giving an example', (_name, spec, got) => {
    const b = spec as unknown as BatchSpec;
    const dev = expectStokerError(() => make({ devices: [{ workers: 1, batch: b }] }), 'E_INVALID_OPTION');
    expect(dev.message).toBe(`devices[0].batch.maxItems must be an integer ≥ 1 (got ${got}), e.g. { maxItems: 16, maxWaitMs: 5 }`);
    const prep = expectStokerError(() => make({ kinds: { k: { prepareBatch: b } } }), 'E_INVALID_OPTION');
    expect(prep.message).toBe(`kinds.k.prepareBatch.maxItems must be an integer ≥ 1 (got ${got}), e.g. { maxItems: 4, maxWaitMs: 10000 }`);
  });

  it('maxWaitMs may be absent (0) but not a string, negative or infinite', () => {
    expect(() => make({ devices: [{ workers: 1, batch: { maxItems: 2 } }] })).not.toThrow();
    for (const w of ['5', -1, Infinity]) {
      expectStokerError(() => make({ devices: [{ workers: 1, batch: { maxItems: 2, maxWaitMs: w as number } }] }), 'E_INVALID_OPTION', /devices\[0\]\.batch\.maxWaitMs must be a finite number of ms ≥ 0/);
    }
  });
});

describe('Engine events: validation messages', () => {
  /** An engine with a batching device running batch 0 (a:0; a:1 waits) and preparation batch 0 (b:0, b:1). */
  function running() {
    const d = new EngineDriver(new Engine({ devices: [{ workers: 1, batch: { maxItems: 2 } }], pacer, kinds: { p: { prepareBatch: { maxItems: 2 } } } }));
    d.apply({ type: 'submit', time: 0, job: job('a', 2) });
    for (const k of ['a:0', 'a:1']) d.apply({ type: 'prepared', time: 1, item: d.item(k).id, attempt: 1 });
    d.apply({ type: 'submit', time: 2, job: { id: 'b', kind: 'p', partitions: 2 } });
    return d;
  }

  it.each([
    ['null', null],
    ['an item that is not a number', { item: '0', reason: 'x' }],
    ['a reason that is not a string', { item: 0, reason: 5 }],
    ['a final that is not a boolean', { item: 0, reason: 'x', final: 'yes' }],
  ])('a failed entry that is %s is rejected for both kinds of batch', (_name, entry) => {
    const d = running();
    const failed = [entry] as unknown as { item: number; reason: string }[];
    expectStokerError(() => d.apply({ type: 'batchDone', time: 3, batch: 0, failed }), 'E_INVALID_EVENT', /^each batchDone\.failed entry must be \{ item: <item id>, reason: <string>, final\?: <boolean> \}$/);
    expectStokerError(() => d.apply({ type: 'prepareBatchDone', time: 3, batch: 0, failed }), 'E_INVALID_EVENT', /^each prepareBatchDone\.failed entry must be/);
    // For a batch the engine no longer knows the entries are still checked.
    expectStokerError(() => d.apply({ type: 'batchDone', time: 3, batch: 99, failed }), 'E_INVALID_EVENT', /each batchDone\.failed entry/);
    expect([d.e.snapshot.onDevice, d.e.snapshot.waiting, d.e.snapshot.preparing]).toEqual([1, 1, 2]); // nothing changed
  });

  it('a failed list that is not an array names its event', () => {
    const d = running();
    const failed = {} as unknown as { item: number; reason: string }[];
    expectStokerError(() => d.apply({ type: 'prepareBatchDone', time: 3, batch: 0, failed }), 'E_INVALID_EVENT', /^prepareBatchDone\.failed must be an array/);
  });

  it('an unknown worker names its device’s workers; an unknown device says there is none (it said "no worker 0 on device 5")', () => {
    const e = new Engine({ devices: [{ workers: 2 }, { workers: 3 }], pacer });
    expectStokerError(() => e.apply({ type: 'workerLost', time: 0, device: 0, worker: 5 }), 'E_INVALID_EVENT', /^no worker 5 on device 0: it has workers 0 to 1$/);
    expectStokerError(() => e.apply({ type: 'workerLost', time: 0, device: 5, worker: 0 }), 'E_INVALID_EVENT', /^no device 5: devices are numbered 0 to 1$/);
    expectStokerError(() => e.apply({ type: 'workerReturned', time: 0, device: '1' as never, worker: 0 }), 'E_INVALID_EVENT', /^no device "1": devices are numbered 0 to 1$/);
  });
});

describe('Job validation messages say what was given', () => {
  it.each([
    [{ id: '' }, 'job.id must be a non-empty string of at most 256 characters (got "")'],
    [{ kind: '' }, 'job.kind must be a non-empty string naming the workload (got "")'],
    [{ memory: { prepareBytes: 1.5 } }, 'job.memory.prepareBytes must be a whole number of bytes ≥ 0 (got 1.5)'],
    [{ memory: { deviceBytes: 'x' } }, 'job.memory.deviceBytes must be a whole number of bytes ≥ 0 (got "x")'],
    [{ deadline: '9' }, 'job.deadline must be an absolute time in ms on the engine clock (got "9")'],
    // NaN is shown as NaN (it read null), a string quoted (it read as the number).
    [{ partitions: NaN }, 'job.partitions must be an integer from 1 to 1000000 (got NaN)'],
    [{ partitions: '3' }, 'job.partitions must be an integer from 1 to 1000000 (got "3")'],
    // A misspelt field is refused (it was read as absent: a partiton count of 1, no memory held).
    [{ partiton: 3 }, 'job.partiton is not a field of a job (did you mean partitions?): its fields are id, kind, priority, partitions, memory, deadline, partitionNumbers'],
    [{ memory: { prepareByte: 5e12 } }, 'job.memory.prepareByte is not a field of job.memory (did you mean prepareBytes?): its fields are prepareBytes, deviceBytes'],
  ])('%j → %s', (patch, message) => {
    const e = make({});
    expectStokerError(() => e.apply({ type: 'submit', time: 0, job: { ...job('a', 1), ...patch } as JobSpec }), 'E_INVALID_JOB', new RegExp(`^${message.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`));
  });

  it('a job that is a string, not an object, is rejected as such', () => {
    expectStokerError(() => make({}).apply({ type: 'submit', time: 0, job: 'a' as unknown as JobSpec }), 'E_INVALID_JOB', /^job must be an object with id, kind and partitions$/);
  });

  it('a resubmit differing only in prepareBytes is a different job', () => {
    const e = make({});
    e.apply({ type: 'submit', time: 0, job: job('a', 1, { memory: { prepareBytes: 1 } }) });
    expectStokerError(() => e.apply({ type: 'submit', time: 1, job: job('a', 1, { memory: { prepareBytes: 2 } }) }), 'E_DUPLICATE_JOB');
  });
});

describe('Engine options: a misspelt or mistyped one is refused, naming it', () => {
  it.each([
    [{ budgetbytes: 5 }, 'budgetbytes is not a field of the Engine options (did you mean budgetBytes?): its fields are devices, kinds, pacer, budgetBytes, maxPreparing, retries'],
    [{ devices: [{ workers: 1, wokers: 2 }] }, 'devices[0].wokers is not a field of a device (did you mean workers?): its fields are workers, name, kinds, batch'],
    [{ devices: [{ workers: '2' }] }, 'devices[0].workers must be an integer ≥ 1 (got "2")'],
    [{ devices: [{ workers: 1, batch: { maxItems: 4, maxWait: 5 } }] }, 'devices[0].batch.maxWait is not a field of a batch (did you mean maxWaitMs?): its fields are maxItems, maxWaitMs'],
    [{ kinds: { k: { prepareBatches: { maxItems: 2 } } } }, 'kinds.k.prepareBatches is not a field of a kind (did you mean prepareBatch?): its fields are prepareBatch'],
    [{ maxPreparing: '5' }, 'maxPreparing must be a number ≥ 1 or Infinity (got "5")'],
    [{ budgetBytes: '5' }, 'budgetBytes must be a number ≥ 0 or Infinity (got "5")'],
    [{ pacer: undefined }, "pacer must be a pacer object (got none): give one, e.g. createPacer('stoker'), or a checkedPacer of your own"],
  ])('%j → %s', (patch, message) => {
    expectStokerError(() => new Engine({ devices: [{ workers: 1 }], pacer, ...patch } as never), 'E_INVALID_OPTION', new RegExp(`^${message.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`));
  });
});

describe('Engine: drain', () => {
  it('a submit after drain is refused: a draining engine starts nothing new, so the job would have waited for good', () => {
    const e = new Engine({ devices: [{ workers: 1 }], pacer });
    e.apply({ type: 'drain', time: 0 });
    expectStokerError(() => e.apply({ type: 'submit', time: 1, job: job('late', 1) }), 'E_INVALID_EVENT', /^job "late" came after a drain event: a draining engine starts nothing new/);
    expect(e.activeJobs).toBe(0);
  });
});

describe('Engine: deadlines', () => {
  it('jobs that miss their deadlines at one event fail earliest deadline first, then in submission order', () => {
    const e = new Engine({ devices: [{ workers: 1 }], pacer, maxPreparing: 1 });
    e.apply({ type: 'submit', time: 0, job: job('x', 1) }); // occupies the one preparation slot
    e.apply({ type: 'submit', time: 0, job: job('b', 1, { deadline: 100 }) });
    e.apply({ type: 'submit', time: 0, job: job('c', 1, { deadline: 90 }) });
    e.apply({ type: 'submit', time: 0, job: job('a', 1, { deadline: 100 }) });
    e.apply({ type: 'submit', time: 0, job: job('d', 1, { deadline: 100 }) });
    const out = e.apply({ type: 'tick', time: 100 });
    expect(ofType(out, 'finishJob').map((c) => `${c.jobId}:${c.code}`)).toEqual(['c:E_DEADLINE', 'b:E_DEADLINE', 'a:E_DEADLINE', 'd:E_DEADLINE']);
  });

  it('a resubmit at the very time of the old job’s deadline is a new job (the old one has expired)', () => {
    const e = make({});
    e.apply({ type: 'submit', time: 0, job: job('d', 1, { deadline: 100 }) });
    const out = e.apply({ type: 'submit', time: 100, job: job('d', 3) });
    expect(ofType(out, 'finishJob').map((c) => c.code)).toEqual(['E_DEADLINE']);
    expect(e.jobCounts('d')).toMatchObject({ done: 0 });
    expect(e.job('d')?.partitions).toHaveLength(3);
  });

  it('a job finished done carries no code and no reason', () => {
    const d = new EngineDriver(make({}));
    d.apply({ type: 'submit', time: 0, job: job('a', 1) });
    d.apply({ type: 'prepared', time: 1, item: d.item('a:0').id, attempt: 1 });
    const out = d.apply({ type: 'deviceDone', time: 4, item: d.item('a:0').id, attempt: 2 });
    const fin = ofType(out, 'finishJob');
    expect(fin).toHaveLength(1);
    expect(Object.keys(fin[0] as object).sort()).toEqual(['jobId', 'state', 'timeMs', 'type']);
    expect(fin[0]?.timeMs).toBe(4);
  });
});

describe('Engine: device eligibility where devices name their kinds', () => {
  it('a device that runs every kind is eligible while any job lives; a named one only while a job of its kinds lives', () => {
    const e = new Engine({ devices: [{ workers: 1, kinds: ['a'] }, { workers: 1 }], pacer });
    e.apply({ type: 'submit', time: 0, job: { id: 'j', kind: 'b', partitions: 1 } });
    expect(e.snapshot.devices.map((c) => c.eligible)).toEqual([false, true]);
    e.apply({ type: 'submit', time: 0, job: { id: 'i', kind: 'a', partitions: 1 } });
    expect(e.snapshot.devices.map((c) => c.eligible)).toEqual([true, true]);
    e.apply({ type: 'cancel', time: 1, jobId: 'i' });
    expect(e.snapshot.devices.map((c) => c.eligible)).toEqual([false, true]);
    e.apply({ type: 'cancel', time: 1, jobId: 'j' });
    expect(e.snapshot.devices.map((c) => c.eligible)).toEqual([false, false]);
  });
});

describe('Engine: batch defaults and limits', () => {
  it('a preparation batch answered without latencyMs counts the time since it started, once per item', () => {
    const d = new EngineDriver(make({ devices: [{ workers: 1 }], kinds: { k: { prepareBatch: { maxItems: 2 } } } }));
    d.apply({ type: 'submit', time: 2, job: job('a', 2) });
    d.apply({ type: 'prepareBatchDone', time: 7, batch: 0 });
    // Two items, each 7 − 2 = 5 ms: total 10, squares 50.
    expect(d.e.snapshot).toMatchObject({ prepareCompletions: 2, prepareLatencyMsTotal: 10, prepareLatencySqTotal: 50 });
    expect(d.e.snapshot.kinds[0]?.prepareBatch).toEqual({ maxItems: 2, batches: 1, items: 2 });
  });

  it('a device batch answered without busyMs counts the time since it started, once; per kind and device it counts batches and items', () => {
    // Device 0 runs another kind only; kind k runs on device 1, which batches up to 3.
    const d = new EngineDriver(make({ devices: [{ workers: 1, kinds: ['other'] }, { workers: 1, batch: { maxItems: 3 } }] }));
    d.apply({ type: 'submit', time: 0, job: job('a', 3) });
    d.apply({ type: 'prepared', time: 1, item: d.item('a:0').id, attempt: 1 }); // batch 0: [a:0]
    for (const k of ['a:1', 'a:2']) d.apply({ type: 'prepared', time: 2, item: d.item(k).id, attempt: 1 }); // wait
    d.apply({ type: 'batchDone', time: 5, batch: 0, busyMs: 2 }); // batch 1: [a:1 a:2] from t 5
    expect(ofType(d.log, 'startBatch').map((c) => [c.batch, c.device, c.items.map((i) => i.partition)])).toEqual([
      [0, 1, [0]],
      [1, 1, [1, 2]],
    ]);
    d.apply({ type: 'batchDone', time: 9, batch: 1 });
    // busyMs 2 + (9 − 5) = 6 over 3 completions in 2 batches.
    expect(d.e.snapshot.devices[1]).toMatchObject({ completions: 3, busyMs: 6, batch: { maxItems: 3, batches: 2, items: 3 } });
    expect(d.e.snapshot.kinds[0]?.deviceBatches).toEqual({ batches: [0, 2], items: [0, 3] });
    expect(d.e.snapshot.kinds[0]?.busyMs).toEqual([0, 6]);
    expect(d.e.snapshot.deviceBusyMs).toBe(6);
  });

  it('a preparation batch takes as many items as the whole budget holds, exactly filling it', () => {
    const d = new EngineDriver(make({ budgetBytes: 30, kinds: { k: { prepareBatch: { maxItems: 4 } } } }));
    const out = d.apply({ type: 'submit', time: 0, job: job('a', 4, { memory: { prepareBytes: 10 } }) });
    expect(ofType(out, 'startPrepareBatch').map((c) => c.items.map((i) => i.partition))).toEqual([[0, 1, 2]]);
    expect(d.e.snapshot.budgetUsedBytes).toBe(30);
  });
});

import { setImmediate as tick } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createPacer, StokerError } from '../../src/core/index.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { BufferPool, type PooledBuffer } from '../../src/runtime/buffer-pool.js';
import { Runtime, type BatchResult, type DeviceTask, type PartitionTask, type PrepareResult, type StepFailure, type Workload } from '../../src/runtime/runtime.js';

/**
 * An in-process workload on a manual clock: preparation takes `prepareMs`, the device `runMs`;
 * hooks let a test make a stage throw or hang. Everything it holds is counted, so leaks show.
 */
class FakeWorkload implements Workload<number, { value: number }, number, number> {
  prepareMs = 100;
  runMs = 10;
  held = 0;
  prepares = 0;
  runs = 0;
  closed = false;
  failPrepare: (t: PartitionTask<number>) => boolean = () => false;
  /** A prepare failure says retry: false (trying again would fail the same way). */
  finalFailures = false;
  failRun: (t: DeviceTask<number, { value: number }>) => boolean = () => false;
  /** A preparation that never settles (it counts the signals it saw fire in `withdrawn`). */
  hangPrepare: (t: PartitionTask<number>) => boolean = () => false;
  withdrawn = 0;
  hangRun: (t: DeviceTask<number, { value: number }>) => boolean = () => false;
  /** Ms the device waits to be ready before it begins a step (then it calls task.begin()); 0: none, no begin(). */
  readyMs: (t: DeviceTask<number, { value: number }>) => number = () => 0;
  /** Leave busyMs out of run()'s answer (the runtime then uses the step's wall time). */
  noBusy = false;

  constructor(private readonly clock: ManualClock) {}

  prepare(t: PartitionTask<number>): Promise<{ value: number }> {
    this.prepares++;
    if (this.hangPrepare(t)) {
      t.signal.addEventListener('abort', () => this.withdrawn++);
      return new Promise(() => undefined);
    }
    const fail = this.failPrepare(t);
    return new Promise((resolve, reject) => {
      this.clock.schedule(() => {
        if (fail) reject(Object.assign(new Error(`synthesis of ${t.jobId}/${t.partition} crashed`), this.finalFailures ? { retry: false } : {}));
        else {
          this.held++;
          resolve({ value: t.input * 10 + t.partition });
        }
      }, this.prepareMs);
    });
  }

  run(t: DeviceTask<number, { value: number }>): Promise<{ output: number; busyMs?: number }> {
    this.runs++;
    const fail = this.failRun(t);
    const hang = this.hangRun(t);
    return new Promise((resolve, reject) => {
      if (hang) {
        t.signal.addEventListener('abort', () => reject(new Error('killed')));
        return;
      }
      const step = () => this.clock.schedule(() => (fail ? reject(new Error('device fault')) : resolve({ output: t.prepared.value, ...(this.noBusy ? {} : { busyMs: this.runMs }) })), this.runMs);
      const ready = this.readyMs(t);
      if (ready === 0) step();
      else
        this.clock.schedule(() => {
          t.begin?.();
          step();
        }, ready);
    });
  }

  finish(job: { jobId: string; input: number; outputs: number[] }): number {
    return job.outputs.reduce((a, b) => a + b, 0);
  }

  release(): void {
    this.held--;
  }

  close(): Promise<void> {
    this.closed = true;
    return Promise.resolve();
  }
}

/** Advances a manual clock by `ms` in steps of `step`, letting promise callbacks run between steps. */
async function advance(clock: ManualClock, ms: number, step = 5): Promise<void> {
  for (let t = 0; t < ms; t += step) {
    clock.advance(step);
    await tick();
  }
}

function setup(options: { retries?: number; deviceTimeoutMs?: number; prepareTimeoutMs?: number; budgetBytes?: number; onStepFailed?: (f: StepFailure) => void } = {}) {
  const clock = new ManualClock();
  const workload = new FakeWorkload(clock);
  const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced', clock, ...options });
  const run = (ms: number, step = 5) => advance(clock, ms, step);
  return { clock, workload, rt, run };
}

const job = (id: string, partitions = 3, extra = {}) => ({ id, kind: 'k', partitions, memory: { prepareBytes: 100, deviceBytes: 10 }, ...extra });

describe('Runtime with an in-process workload on a manual clock', () => {
  it('runs a job through preparation and devices and resolves with finish()', async () => {
    const { rt, run, workload } = setup();
    const p = rt.submit(job('a'), 4);
    await run(400);
    await expect(p).resolves.toBe(40 + 41 + 42);
    expect(workload.held).toBe(0);
    expect(rt.engine.budget.used).toBe(0);
    expect(rt.status().counters.deviceCompletions).toBe(3);
    expect(rt.status().counters.deviceBusyMs).toBe(30);
  });

  it('rejects an invalid spec at once with the field named', async () => {
    const { rt } = setup();
    await expect(rt.submit(job('', 1), 1)).rejects.toThrow(/job\.id/);
  });

  it('answers an identical resubmit with the same result, and a different one with E_DUPLICATE_JOB', async () => {
    const { rt, run } = setup();
    const p1 = rt.submit(job('a', 2), 1);
    const p2 = rt.submit(job('a', 2), 1);
    await expect(rt.submit(job('a', 5), 1)).rejects.toMatchObject({ code: 'E_DUPLICATE_JOB' });
    await run(300);
    await expect(p1).resolves.toBe(21);
    await expect(p2).resolves.toBe(21);
  });

  it('cancel withdraws the job everywhere, answers E_CANCELLED and frees everything', async () => {
    const { rt, run, workload } = setup();
    const p = rt.submit(job('a', 6), 1);
    const other = rt.submit(job('b', 1), 2);
    await run(105); // some prepared and on devices, some still preparing
    expect(rt.cancel('a')).toBe(true);
    await expect(p).rejects.toMatchObject({ code: 'E_CANCELLED' });
    // No live job of that id (cancelled already, or never submitted): said (it did nothing, silently).
    expect(rt.cancel('a')).toBe(false);
    expect(rt.cancel('no-such-job')).toBe(false);
    await run(300);
    await expect(other).resolves.toBe(20);
    expect(workload.held).toBe(0);
    expect(rt.engine.budget.used).toBe(0);
  });

  it('a preparation that throws is retried once, then the job fails with the reason', async () => {
    const { rt, run, workload } = setup({ retries: 1 });
    let failures = 0;
    workload.failPrepare = (t) => t.jobId === 'flaky' && t.partition === 1 && failures++ < 1;
    const flaky = rt.submit(job('flaky'), 1);
    await run(600);
    await expect(flaky).resolves.toBe(10 + 11 + 12);

    workload.failPrepare = (t) => t.jobId === 'broken' && t.partition === 2;
    const broken = rt.submit(job('broken'), 1).catch((x: unknown) => x);
    await run(600);
    const e = (await broken) as StokerError;
    expect(e.code).toBe('E_PREPARE_FAILED');
    expect(e.message).toMatch(/partition 2 failed in preparation: synthesis of broken\/2 crashed \(after 2 attempts\)/);
    expect(workload.held).toBe(0);
    expect(rt.engine.budget.used).toBe(0);
  });

  it('a preparation error with retry: false fails its job at once, the retries unspent', async () => {
    const { rt, run, workload } = setup({ retries: 3 });
    workload.finalFailures = true;
    workload.failPrepare = (t) => t.jobId === 'bad' && t.partition === 0;
    const bad = rt.submit(job('bad', 1), 1).catch((x: unknown) => x);
    await run(300);
    const e = (await bad) as StokerError;
    expect(e.code).toBe('E_PREPARE_FAILED');
    expect(e.message).toBe('job bad: partition 0 failed in preparation: synthesis of bad/0 crashed');
    expect(workload.prepares).toBe(1);
  });

  it('tells onStepFailed of every failed step once the engine has heard of it: where, why, and whether it is tried again', async () => {
    const told: StepFailure[] = [];
    const { rt, run, workload } = setup({ retries: 1, onStepFailed: (f) => told.push(f) });
    let faults = 0;
    workload.failRun = (t) => t.jobId === 'a' && t.partition === 2 && faults++ < 1;
    workload.failPrepare = (t) => t.jobId === 'b' && t.partition === 0;
    // (b's partitions are its own numbers 7 and 9, as after a restart.)
    const a = rt.submit(job('a'), 1);
    const b = rt.submit(job('b', 2, { partitionNumbers: [7, 9] }), 1).catch((e: unknown) => e);
    await run(800);
    await expect(a).resolves.toBe(10 + 11 + 12);
    expect(await b).toMatchObject({ code: 'E_PREPARE_FAILED' });
    // (b's preparation fails at 100 ms, before a's partition 2 reaches the device; its retry is its second try.)
    expect(told).toEqual([
      { stage: 'prepare', jobId: 'b', kind: 'k', partition: 7, attempt: 1, reason: 'synthesis of b/0 crashed', retried: true, counted: true },
      { stage: 'device', jobId: 'a', kind: 'k', partition: 2, attempt: 1, device: 0, worker: expect.any(Number), reason: 'device fault', retried: true, counted: true },
      { stage: 'prepare', jobId: 'b', kind: 'k', partition: 7, attempt: 2, reason: 'synthesis of b/0 crashed', retried: false, counted: true },
    ]);
  });

  it('a listener that throws (onStepFailed here; onStep is called alike) is a process warning, once; the jobs go on (it ended the process)', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => void warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      const { rt, run, workload } = setup({ retries: 1, onStepFailed: () => { throw new Error('my onStepFailed bug'); } });
      let faults = 0;
      workload.failRun = (t) => t.partition < 2 && faults++ < 2;
      const p = rt.submit(job('a'), 1);
      await run(800);
      await expect(p).resolves.toBe(10 + 11 + 12);
      await tick();
      expect(faults).toBe(4);
      expect(warnings.filter((w) => /onStepFailed threw \(my onStepFailed bug\)/.test(w))).toHaveLength(1);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('close() answers a job whose finish() still runs past the timeout with E_CANCELLED (its waiter never settled)', async () => {
    const clock = new ManualClock();
    const rt = new Runtime<number, number, number, number>({
      workload: { prepare: async () => 1, run: async () => ({ output: 1, busyMs: 1 }), finish: () => new Promise<number>(() => undefined) },
      devices: [{ workers: 1 }],
      pacer: 'unpaced',
      clock,
    });
    const p = rt.submit({ id: 'f', kind: 'k', partitions: 1, memory: { prepareBytes: 1, deviceBytes: 1 } }, 0).catch((e: unknown) => e);
    await advance(clock, 50);
    const closed = rt.close(100);
    await advance(clock, 150);
    await closed;
    expect(await p).toMatchObject({ code: 'E_CANCELLED', message: 'job f: the runtime closed while its finish() ran (close())' });
  });

  it('close() with drain waits for the finish() of a job whose last partition ended during the drain (it was cancelled there: the job resumed on the next start, its latency the downtime too)', async () => {
    const clock = new ManualClock();
    const rt = new Runtime<number, number, number, number>({
      workload: {
        prepare: async () => 1,
        // The device step ends 50 ms into the drain; finish() takes 20 ms more.
        run: () => new Promise((resolve) => clock.schedule(() => resolve({ output: 7, busyMs: 100 }), 100)),
        finish: (job) => new Promise<number>((resolve) => clock.schedule(() => resolve(job.outputs[0] as number), 20)),
      },
      devices: [{ workers: 1 }],
      pacer: 'unpaced',
      clock,
    });
    const p = rt.submit({ id: 'd', kind: 'k', partitions: 1, memory: { prepareBytes: 1, deviceBytes: 1 } }, 0).catch((e: unknown) => e);
    await advance(clock, 50);
    const closed = rt.close(1000, { drain: true });
    await advance(clock, 200);
    await closed;
    expect(await p).toBe(7);
  });

  it('a device error is retried; a hung device step times out, is aborted and retried', async () => {
    const { rt, run, workload } = setup({ retries: 1, deviceTimeoutMs: 50 });
    let faults = 0;
    workload.failRun = (t) => t.partition === 0 && faults++ < 1;
    let hangs = 0;
    workload.hangRun = (t) => t.partition === 1 && hangs++ < 1;
    const p = rt.submit(job('a'), 3);
    await run(800);
    await expect(p).resolves.toBe(30 + 31 + 32);
    expect(faults).toBe(2);
    expect(hangs).toBe(2);
    expect(workload.held).toBe(0);
  });

  it('a device that waits to be ready before it begins a step (task.begin()): the timeout and the wall time count from begin(); a wait past the timeout fails the step', async () => {
    // (Device steps take 10 ms here.) 45 ms of waiting + 10 ms of step > 50 ms, each within it.
    const { rt, run, workload } = setup({ retries: 1, deviceTimeoutMs: 50 });
    workload.noBusy = true;
    workload.readyMs = () => 45;
    const p = rt.submit(job('a', 2), 1);
    await run(400);
    await expect(p).resolves.toBe(10 + 11);
    expect(workload.runs).toBe(2);
    // Busy time from begin(): the two steps' 10 ms each, not the wait.
    expect(rt.status().counters.deviceBusyMs).toBe(20);
    // A wait longer than the timeout fails the step; its retry, on a device ready at once, runs.
    let waits = 0;
    workload.readyMs = () => (waits++ < 1 ? 60 : 0);
    const q = rt.submit(job('b', 1), 1);
    await run(400);
    await expect(q).resolves.toBe(10);
    expect(workload.runs).toBe(4);
    expect(workload.held).toBe(0);
  });

  it('a preparation past prepareTimeoutMs fails (its signal fires) and is retried; one that never settles fails its job once the retries are spent', async () => {
    // (Preparations take 100 ms here.)
    const { rt, run, workload } = setup({ retries: 1, prepareTimeoutMs: 150 });
    let hangs = 0;
    workload.hangPrepare = (t) => t.jobId === 'once' ? t.partition === 0 && hangs++ < 1 : t.jobId === 'never';
    const once = rt.submit(job('once', 2), 1);
    const never = rt.submit(job('never', 1), 1).catch((x: unknown) => x);
    await run(600);
    await expect(once).resolves.toBe(10 + 11);
    expect(await never).toMatchObject({ code: 'E_PREPARE_FAILED', message: 'job never: partition 0 failed in preparation: no preparation within the preparation timeout, 150 ms (the runtime\'s prepareTimeoutMs; engine.prepareTimeoutS in a service config) (after 2 attempts)' });
    expect(workload.withdrawn).toBe(3);
    expect(rt.engine.budget.used).toBe(0);
    expect(() => new Runtime({ workload, devices: [{ workers: 1 }], prepareTimeoutMs: 0 })).toThrow(/prepareTimeoutMs must be a number of ms > 0, or Infinity \(got 0\)/);
  });

  it('refuses a misspelt or mistyped option, and a workload without run or finish, at construction (they were accepted: no memory limit, no timeout, every job failing later)', () => {
    const workload = new FakeWorkload(new ManualClock());
    const refused = (options: object, message: string) => expect(() => new Runtime({ workload, devices: [{ workers: 1 }], ...options } as never)).toThrow(message);
    refused({ budgetbytes: 5 }, 'budgetbytes is not a field of the Runtime options (did you mean budgetBytes?): its fields are workload, devices, kinds, pacer, pacerOptions, budgetBytes, maxPreparing, retries, deviceTimeoutMs, prepareTimeoutMs, clock, timeline, onStep');
    refused({ prepareTimeoutMs: '5' }, 'prepareTimeoutMs must be a number of ms > 0, or Infinity (got "5")');
    refused({ deviceTimeoutMs: '5' }, 'deviceTimeoutMs must be a number of ms > 0, or Infinity (got "5")');
    refused({ devices: [{ workers: 1, batchh: {} }] }, 'devices[0].batchh is not a field of a Runtime device (did you mean batch?): its fields are workers, batch, name, kinds, kind, threadPerDevice');
    refused({ maxPreparing: '5' }, 'maxPreparing must be a number ≥ 1 or Infinity (got "5")');
    // Taken as they were, they failed at their first use: a warning per listener, "this.clock.now is not a function".
    refused({ onStep: 'x' }, 'onStep must be a function (got "x")');
    refused({ onStepFailed: 5 }, 'onStepFailed must be a function (got 5)');
    refused({ clock: {} }, 'clock must have now(), schedule(fn, ms) and cancel(handle)');
    refused({ pacer: createPacer('unpaced', {}), pacerOptions: { targetWaiting: 2 } }, 'pacerOptions are for a built-in pacer named by pacer');
    // A ThreadedWorkload's device entries, shared as they are (with its kind and threadPerDevice), are accepted.
    expect(() => new Runtime({ workload, devices: [{ workers: 1, kind: 'cpu', threadPerDevice: true }] } as never)).not.toThrow();
    refused({ workload: { prepare: workload.prepare.bind(workload), finish: workload.finish.bind(workload) } }, 'the workload has no run(task): give it one');
    refused({ workload: { prepare: workload.prepare.bind(workload), run: workload.run.bind(workload) } }, 'the workload has no finish(job): give it one');
  });

  it('a clock that goes back (or gives NaN) fails the runtime naming clock.now(), not the event (it threw E_INVALID_EVENT "prepared.latencyMs … got -499960", uncaught)', async () => {
    for (const wrong of [-500_000, NaN]) {
      const { rt, run, clock } = setup();
      const p = rt.submit(job('a', 1), 1).catch((x: unknown) => x);
      await run(50);
      const real = clock.now.bind(clock);
      clock.now = () => (wrong === wrong ? real() + wrong : NaN);
      await run(200);
      expect(await p).toMatchObject({ code: 'E_RUNTIME_FAILED', message: expect.stringMatching(new RegExp(`^the runtime stopped: the clock went ${wrong === wrong ? 'back' : 'NaN'}: clock\\.now\\(\\) returned (-\\d+|NaN) after \\d+ — give the Runtime a monotonic clock`)) });
    }
  });

  it('close() past its timeout starts nothing while it cancels the jobs one by one (each cancel freed room, and the next job was prepared only to be withdrawn)', async () => {
    const { rt, run, workload } = setup({ budgetBytes: 200 });
    workload.hangPrepare = (t) => t.jobId === 'stuck';
    const stuck = rt.submit(job('stuck', 2), 1).catch((x: unknown) => x);
    const next = rt.submit(job('next', 2), 1).catch((x: unknown) => x);
    await run(50);
    expect(workload.prepares).toBe(2);
    const closed = rt.close(100);
    await run(200);
    await closed;
    expect(await stuck).toMatchObject({ code: 'E_CANCELLED' });
    expect(await next).toMatchObject({ code: 'E_CANCELLED' });
    expect(workload.prepares).toBe(2);
  });

  it('close() lets running jobs finish within the timeout, cancels the rest, answers every waiter', async () => {
    const { rt, run, workload } = setup({ deviceTimeoutMs: 1e9 });
    workload.hangRun = (t) => t.jobId === 'stuck';
    const ok = rt.submit(job('ok', 1), 1);
    const stuck = rt.submit(job('stuck', 1), 1).catch((x: unknown) => x);
    const closed = rt.close(300);
    await expect(rt.submit(job('late', 1), 1)).rejects.toThrow(/shutting down/);
    await run(400);
    await closed;
    await expect(ok).resolves.toBe(10);
    // Said as a shutdown's, not as a user's cancel.
    expect(await stuck).toMatchObject({ code: 'E_CANCELLED', message: expect.stringContaining('the runtime closed before the job ended (close())') });
    expect(workload.closed).toBe(true);
    expect(workload.held).toBe(0);
    expect(rt.engine.activeJobs).toBe(0);
  });
});

/** Preparation writes into a pooled buffer of `input` bytes; the buffer goes back to the pool (idle) after the device step. */
class PooledWorkload implements Workload<number, PooledBuffer, number, number> {
  readonly pool = new BufferPool({ minClassBytes: 1024 });
  constructor(protected readonly clock: ManualClock) {}
  prepare(t: PartitionTask<number>): Promise<PooledBuffer> {
    const buf = this.pool.checkout(t.input);
    new Uint32Array(buf.buffer)[0] = t.partition;
    return new Promise((resolve) => this.clock.schedule(() => resolve(buf), 100));
  }
  run(t: DeviceTask<number, PooledBuffer>): Promise<{ output: number; busyMs: number }> {
    const v = new Uint32Array(t.prepared.buffer)[0] as number;
    return new Promise((resolve) => this.clock.schedule(() => resolve({ output: v, busyMs: 10 }), 10));
  }
  finish(job: { outputs: number[] }): number {
    return job.outputs.reduce((a, b) => a + b, 0);
  }
  release(b: PooledBuffer): void {
    this.pool.checkin(b);
  }
}

describe('Runtime with a buffer pool', () => {
  it('reuses idle buffers, and frees those of another size past the room beside the reservations (idle bytes are not charged to the budget)', async () => {
    const clock = new ManualClock();
    const workload = new PooledWorkload(clock);
    const rt = new Runtime({ workload, devices: [{ workers: 1 }], pacer: 'unpaced', clock, budgetBytes: 2048 });
    let most = 0;
    const run = async (ms: number) => {
      for (let t = 0; t < ms; t += 5) {
        clock.advance(5);
        await tick();
        // Idle bytes past the room beside the reservations, between steps: only of the size in use.
        most = Math.max(most, workload.pool.stats().idleBytes - Math.max(0, 2048 - rt.engine.budget.used));
      }
    };
    const a = rt.submit({ id: 'a', kind: 'k', partitions: 6, memory: { prepareBytes: 1024, deviceBytes: 1024 } }, 1024);
    await run(1000);
    await expect(a).resolves.toBe(15);
    expect(workload.pool.stats()).toMatchObject({ fresh: 2, reused: 4, idleBytes: 2048 });
    expect(rt.engine.budget.held).toBe(0);

    // A 2 KiB partition takes the whole budget: the idle 1 KiB buffers go, past the room (a review: kept, four sizes in turn held 4× the budget).
    const b = rt.submit({ id: 'b', kind: 'k', partitions: 1, memory: { prepareBytes: 2048, deviceBytes: 2048 } }, 2048);
    await run(500);
    await expect(b).resolves.toBe(0);
    expect(workload.pool.stats()).toMatchObject({ freed: 2, idleBytes: 2048 });
    expect(most).toBe(0);
    // (Left idle after the run: the 2 KiB buffer, within the budget's room.)
    expect(rt.engine.budget.peak).toBe(2048);
    await rt.close();
  });
});

/** As PooledWorkload, but the device step hands its data over at its start (as a process device's handoff file does) and gives the buffer back then. */
class HandoffWorkload extends PooledWorkload {
  override run(t: DeviceTask<number, PooledBuffer>): Promise<{ output: number; busyMs: number }> {
    const v = new Uint32Array(t.prepared.buffer)[0] as number;
    this.pool.checkin(t.prepared);
    return new Promise((resolve) => this.clock.schedule(() => resolve({ output: v, busyMs: 10 }), 10));
  }
  override release(): void {}
}

describe('Runtime with a buffer pool whose device steps give their buffers back at their start', () => {
  it('keeps idle buffers for reuse, not freed to make room (6 fresh for 8 partitions, and a user trial at 4× its budget), and no more than preparations ran at once', async () => {
    const clock = new ManualClock();
    const workload = new HandoffWorkload(clock);
    const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced', clock, budgetBytes: 3072 });
    const apply = rt.engine.apply.bind(rt.engine);
    let most = 0;
    rt.engine.apply = (e) => {
      const out = apply(e);
      // Reserved bytes and the pool's idle ones beyond the room: the newest of a size, per preparation at once.
      most = Math.max(most, rt.engine.budget.used + workload.pool.stats().idleBytes);
      return out;
    };
    const run = (ms: number) => advance(clock, ms);
    // Each partition's bytes stay reserved on the device (its data is in the handoff), its buffer idle meanwhile.
    const a = rt.submit({ id: 'a', kind: 'k', partitions: 8, memory: { prepareBytes: 1024, deviceBytes: 1024 } }, 1024);
    await run(2000);
    await expect(a).resolves.toBe(28);
    expect(most).toBeLessThanOrEqual(3072 + 2 * 1024);
    expect(rt.engine.budget.peak).toBeLessThanOrEqual(3072);
    // The buffers are kept for the next preparations, not freed to make room: a freed
    // SharedArrayBuffer's memory goes only when every thread that saw it collects it, and the next
    // preparation allocated afresh (6 fresh and 5 freed for 8 partitions; a user trial's server
    // grew to 4× its budget). No more buffers than preparations ran at once (3 in 3 KiB).
    expect(workload.pool.stats()).toMatchObject({ fresh: 3, reused: 5, freed: 0 });
    await rt.close();
  });
});

describe("a device step's busyMs", () => {
  /** Devices that take 30 ms of the manual clock and report `busy` (undefined: leave it out). */
  function withBusy(busy: unknown) {
    const clock = new ManualClock();
    const workload: Workload<number, number, number, number> = {
      prepare: () => Promise.resolve(1),
      run: () => new Promise((resolve) => clock.schedule(() => resolve((busy === undefined ? { output: 2 } : { output: 2, busyMs: busy }) as { output: number; busyMs?: number }), 30)),
      finish: (j) => j.outputs.length,
    };
    const rt = new Runtime({ workload, devices: [{ workers: 1 }], pacer: 'unpaced', clock, retries: 0 });
    const run = (ms: number) => advance(clock, ms);
    return { rt, run };
  }

  it('left out: the step wall time from the call until it settled is the busy time', async () => {
    const { rt, run } = withBusy(undefined);
    const p = rt.submit(job('w', 2), 0);
    await run(200);
    await expect(p).resolves.toBe(2);
    expect(rt.status().counters.deviceBusyMs).toBe(60);
  });

  it.each([[Number.NaN], [-1], [Infinity], ['12']])('%s fails the step with an error naming busyMs', async (busy) => {
    const { rt, run } = withBusy(busy);
    const p = rt.submit(job('bad', 1), 0);
    const settled = p.catch((e: unknown) => e);
    await run(100);
    const e = (await settled) as StokerError;
    expect(e).toBeInstanceOf(StokerError);
    expect(e.code).toBe('E_DEVICE_FAILED');
    expect(e.message).toMatch(/busyMs = .*busyMs must be a finite number ≥ 0/);
    expect(rt.status().counters.deviceBusyMs).toBe(0);
  });
});

it('the stoker pacer finishes jobs whose device steps report busyMs 0', async () => {
  const clock = new ManualClock();
  const workload: Workload<number, number, number, number> = {
    prepare: () => new Promise((resolve) => clock.schedule(() => resolve(1), 50)),
    run: () => Promise.resolve({ output: 1, busyMs: 0 }),
    finish: (j) => j.outputs.length,
  };
  const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'stoker', clock });
  const jobs = Array.from({ length: 20 }, (_, i) => rt.submit(job(`z${i}`, 3), 0));
  for (let t = 0; t < 20_000; t += 10) {
    clock.advance(10);
    await tick();
  }
  await expect(Promise.all(jobs)).resolves.toEqual(new Array(20).fill(3));
});

/**
 * Preparations of 200 ms; device steps of 20 ms that queue behind one lock for the first `locked`
 * of them (one at a time, each reporting only its own 20 ms: a kernel timed alone), then run side by side.
 */
function lockedWorkload(clock: ManualClock, locked: number): Workload<number, number, number, number> {
  const runMs = 20;
  let lock: Promise<void> = Promise.resolve();
  let steps = 0;
  return {
    prepare: () => new Promise((resolve) => clock.schedule(() => resolve(1), 200)),
    run: () => {
      if (steps++ >= locked) return new Promise((resolve) => clock.schedule(() => resolve({ output: 1, busyMs: runMs }), runMs));
      const turn = lock.then(() => new Promise<void>((resolve) => clock.schedule(resolve, runMs)));
      lock = turn;
      return turn.then(() => ({ output: 1, busyMs: runMs }));
    },
    finish: (job) => job.outputs.length,
    release: () => undefined,
    close: () => Promise.resolve(),
  };
}

describe('the measurement self-check, on the runtime', () => {
  it('a device slowed for a while (its first 200 steps behind one lock, the machine busy elsewhere) is planned with its busy time again once the observed rate keeps it short of work', async () => {
    const clock = new ManualClock();
    const workload = lockedWorkload(clock, 200);
    const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'stoker', pacerOptions: { targetWaiting: 4 }, clock });
    const done = rt.submit({ id: 'slowed', kind: 'k', partitions: 1500 }, 0);
    const trusted = new Set<string>();
    for (let t = 0; t < 60_000 && rt.engine.activeJobs > 0; t += 5) {
      clock.advance(5);
      await tick();
      trusted.add(rt.engine.pacer.state().devices?.[0]?.trusted ?? '');
    }
    expect(await done).toBe(1500);
    // It did plan with the observed rate (half), and let go of it: 1500 items at 100/s after the
    // slow start end by 21 s; held at 50/s they would take 30 s more.
    expect(trusted).toContain('observed');
    expect(rt.engine.pacer.state().devices?.[0]).toMatchObject({ trusted: 'estimate' });
    expect(clock.now()).toBeLessThan(25_000);
    await rt.close(0);
  });

  it('two declared workers on a device that serves one at a time and times only its own step: the pacer finds the device half as fast as its busy time says, and plans with that', async () => {
    const clock = new ManualClock();
    const workload = lockedWorkload(clock, Infinity);
    const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'stoker', pacerOptions: { targetWaiting: 4 }, clock });
    const done = rt.submit({ id: 'lock', kind: 'k', partitions: 600 }, 0);
    for (let t = 0; t < 20_000; t += 5) {
      clock.advance(5);
      await tick();
    }
    const st = rt.engine.pacer.state();
    // Busy time says 2 workers ÷ 20 ms = 100/s; the lock lets 50/s through.
    expect(st.devices?.[0]).toMatchObject({ estimatedPerSec: 100, trusted: 'observed' });
    expect(st.devices?.[0]?.observedRatio).toBeGreaterThan(0.45);
    expect(st.devices?.[0]?.observedRatio).toBeLessThan(0.55);
    expect(st.ratePerSec).toBeGreaterThan(45);
    expect(st.ratePerSec).toBeLessThan(55);
    for (let t = 0; t < 30_000 && rt.engine.activeJobs > 0; t += 5) {
      clock.advance(5);
      await tick();
    }
    expect(await done).toBe(600);
    await rt.close(0);
  });
});

/** FakeWorkload with a batch step: 20 ms + 2 ms per item; `failItem` fails one item alone, `failBatch` the whole batch. */
class BatchWorkload extends FakeWorkload {
  batches: number[] = [];
  failItem: (t: DeviceTask<number, { value: number }>) => boolean = () => false;
  failBatch = false;
  /** The next batch of several never answers (until its signals fire). */
  hangBatch = false;
  aborted = 0;
  private readonly c: ManualClock;

  constructor(clock: ManualClock) {
    super(clock);
    this.c = clock;
  }

  runBatch(tasks: DeviceTask<number, { value: number }>[]): Promise<{ results: BatchResult<number>[]; busyMs: number }> {
    this.batches.push(tasks.length);
    const ms = 20 + 2 * tasks.length;
    const whole = this.failBatch;
    return new Promise((resolve, reject) => {
      this.c.schedule(() => (whole ? reject(new Error('device reset')) : resolve({ results: tasks.map((t) => (this.failItem(t) ? { error: `bad partition ${t.partition}` } : { output: t.prepared.value })), busyMs: ms })), ms);
    });
  }
}

describe('Runtime with a batching device', () => {
  function batchSetup(retries = 0) {
    const clock = new ManualClock();
    const workload = new BatchWorkload(clock);
    const rt = new Runtime({ workload, devices: [{ workers: 1, batch: { maxItems: 4 } }], pacer: 'unpaced', clock, retries });
    const run = async (ms: number, step = 5) => {
      for (let t = 0; t < ms; t += step) {
        clock.advance(step);
        await tick();
      }
    };
    return { workload, rt, run };
  }

  it('runs waiting items as batches, each output to its own partition, busy time once per batch', async () => {
    const { rt, run, workload } = batchSetup();
    const p = rt.submit(job('a', 9), 1);
    await run(400);
    await expect(p).resolves.toBe(9 * 10 + 36);
    expect(workload.batches.reduce((a, b) => a + b, 0)).toBe(9);
    expect(Math.max(...workload.batches)).toBe(4);
    const d = rt.status().counters.devices[0];
    expect(d?.completions).toBe(9);
    expect(d?.batch?.batches).toBe(workload.batches.length);
    expect(d?.busyMs).toBe(workload.batches.reduce((a, n) => a + 20 + 2 * n, 0));
    expect(workload.held).toBe(0);
    expect(rt.engine.budget.used).toBe(0);
  });

  it('an item the batch step says failed fails only its job', async () => {
    const { rt, run, workload } = batchSetup();
    workload.failItem = (t) => t.jobId === 'bad' && t.partition === 1;
    const good = rt.submit(job('good', 3), 1);
    const bad = rt.submit(job('bad', 3), 2).catch((e: unknown) => e);
    await run(400);
    await expect(good).resolves.toBe(30 + 3);
    expect(await bad).toMatchObject({ code: 'E_DEVICE_FAILED', message: expect.stringMatching(/partition 1 failed on device 0: bad partition 1/) });
    expect(workload.held).toBe(0);
  });

  it('a batch step that throws: its items run again alone, and a job whose items then succeed is done', async () => {
    const { rt, run, workload } = batchSetup();
    const w = rt.submit(job('w', 1), 1);
    const p = rt.submit(job('a', 3), 1);
    await run(110); // all prepared at 100 ms: w:0 runs alone, a:0–2 wait for the worker
    workload.failBatch = true;
    await run(40); // a:0–2 run as one batch (from 122 ms), which throws
    workload.failBatch = false;
    await run(600);
    await expect(w).resolves.toBe(10);
    await expect(p).resolves.toBe(30 + 3);
    expect(workload.batches).toEqual([1, 3, 1, 1, 1]);
  });

  it('tells onStepFailed of each item of a batch that throws: prepared again at the try it had (a batch of several spends none, with no retries left too)', async () => {
    const clock = new ManualClock();
    const workload = new BatchWorkload(clock);
    const told: StepFailure[] = [];
    const rt = new Runtime({ workload, devices: [{ workers: 1, batch: { maxItems: 4 } }], pacer: 'unpaced', clock, retries: 0, onStepFailed: (f) => told.push(f) });
    const run = async (ms: number) => {
      for (let t = 0; t < ms; t += 5) {
        clock.advance(5);
        await tick();
      }
    };
    const w = rt.submit(job('w', 1), 1);
    const p = rt.submit(job('a', 3), 1);
    await run(110);
    workload.failBatch = true;
    await run(40);
    workload.failBatch = false;
    await run(600);
    await expect(w).resolves.toBe(10);
    await expect(p).resolves.toBe(30 + 3);
    // (counted false: the batch failed as a whole; a log line saying "prepared again" read as a retry spent.)
    expect(told.map((f) => [f.jobId, f.partition, f.stage, f.attempt, f.retried, f.counted])).toEqual([0, 1, 2].map((p) => ['a', p, 'device', 1, true, false]));
  });

  it('a batch step whose results are not { output } or { error } fails the batch, naming the result; the items then run alone', async () => {
    const { rt, run, workload } = batchSetup();
    let broken = true;
    const real = workload.runBatch.bind(workload);
    workload.runBatch = async (tasks) => {
      const r = await real(tasks);
      if (broken && tasks.length > 1) {
        broken = false;
        return { ...r, results: r.results.map((x, i) => (i === 1 ? (null as unknown as BatchResult<number>) : x)) };
      }
      return r;
    };
    const w = rt.submit(job('w', 1), 1);
    const p = rt.submit(job('a', 3), 1);
    await run(900);
    await expect(w).resolves.toBe(10);
    await expect(p).resolves.toBe(30 + 3);
    expect(broken).toBe(false);
    expect(workload.batches).toEqual([1, 3, 1, 1, 1]);
    expect(rt.engine.snapshot.onDevice).toBe(0);
    expect(workload.held).toBe(0);
  });

  it('refuses a batching device without runBatch', () => {
    const clock = new ManualClock();
    expect(() => new Runtime({ workload: new FakeWorkload(clock), devices: [{ workers: 1, batch: { maxItems: 2 } }], clock })).toThrow(/has no runBatch/);
  });
});

/** Prepares batches of partitions together: 50 ms + 10 ms per item; `failItem` names items that fail alone, `failBatch` fails a whole batch once. */
class PrepareBatchWorkload extends FakeWorkload {
  readonly groups: number[] = [];
  failItem: (t: PartitionTask<number>) => boolean = () => false;
  failBatch = false;
  /** The next batch of several never answers (until its signals fire). */
  hangBatch = false;
  aborted = 0;
  private readonly c: ManualClock;
  constructor(clock: ManualClock) {
    super(clock);
    this.c = clock;
  }

  prepareBatch(tasks: PartitionTask<number>[]): Promise<PrepareResult<{ value: number }>[]> {
    this.groups.push(tasks.length);
    const whole = this.failBatch && tasks.length > 1;
    if (whole) this.failBatch = false;
    if (this.hangBatch && tasks.length > 1) {
      this.hangBatch = false;
      for (const t of tasks) t.signal.addEventListener('abort', () => this.aborted++);
      return new Promise(() => {});
    }
    return new Promise((resolve, reject) => {
      this.c.schedule(() => {
        if (whole) return reject(new Error('synthesis ran out of memory'));
        resolve(
          tasks.map((t) => {
            if (this.failItem(t)) return { error: `bad witness ${t.partition}` };
            this.held++;
            return { prepared: { value: t.input * 10 + t.partition } };
          }),
        );
      }, 50 + 10 * tasks.length);
    });
  }
}

describe('Runtime with preparation batches', () => {
  function groupSetup(retries = 0, maxWaitMs = 0, prepareTimeoutMs = Infinity) {
    const clock = new ManualClock();
    const workload = new PrepareBatchWorkload(clock);
    const rt = new Runtime({ workload, devices: [{ workers: 1 }], kinds: { k: { prepareBatch: { maxItems: 4, maxWaitMs } } }, pacer: 'unpaced', maxPreparing: 1, clock, retries, prepareTimeoutMs });
    const run = async (ms: number, step = 5) => {
      for (let t = 0; t < ms; t += step) {
        clock.advance(step);
        await tick();
      }
    };
    return { workload, rt, run, clock };
  }

  it('prepares queued items in batches, each prepared value to its own partition, one preparation step per batch', async () => {
    const { rt, run, workload } = groupSetup();
    const p = rt.submit(job('a', 9), 1);
    await run(600);
    await expect(p).resolves.toBe(9 * 10 + 36);
    expect(workload.groups).toEqual([4, 4, 1]);
    expect(workload.prepares).toBe(0);
    const s = rt.status().counters;
    expect(s.kinds[0]?.prepareBatch).toEqual({ maxItems: 4, batches: 3, items: 9 });
    // Each item's latency is its batch's: 90 ms for the full ones, 60 ms for the last.
    expect(s.prepareLatencyMsTotal).toBe(8 * 90 + 60);
    expect(workload.held).toBe(0);
    expect(rt.engine.budget.used).toBe(0);
  });

  it('an item the batch says failed fails only its job; the others go on', async () => {
    const { rt, run, workload } = groupSetup(0, 20);
    workload.failItem = (t) => t.jobId === 'b';
    const a = rt.submit(job('a', 2), 1);
    const b = rt.submit(job('b', 1), 2).then(
      () => null,
      (e: unknown) => e,
    );
    await run(300);
    await expect(a).resolves.toBe(10 + 11);
    expect(await b).toMatchObject({ code: 'E_PREPARE_FAILED', message: expect.stringMatching(/bad witness 0/) });
    expect(workload.groups).toEqual([3]);
    expect(workload.held).toBe(0);
  });

  it('a batch that throws: each item is prepared again alone, and the job still completes', async () => {
    const { rt, run, workload } = groupSetup();
    workload.failBatch = true;
    const p = rt.submit(job('a', 3), 1);
    await run(600);
    await expect(p).resolves.toBe(30 + 3);
    expect(workload.groups).toEqual([3, 1, 1, 1]);
    expect(workload.held).toBe(0);
  });

  it('a batch past prepareTimeoutMs fails whole (its signals fire): each item is prepared again alone, and the job still completes', async () => {
    // (A batch of n takes 50 + 10·n ms here; alone, 60 ms.)
    const { rt, run, workload } = groupSetup(0, 0, 200);
    workload.hangBatch = true;
    const p = rt.submit(job('a', 3), 1);
    await run(195);
    expect(workload.aborted).toBe(0);
    await run(600);
    await expect(p).resolves.toBe(30 + 3);
    expect(workload.aborted).toBe(3);
    expect(workload.groups).toEqual([3, 1, 1, 1]);
    expect(workload.held).toBe(0);
    expect(rt.engine.budget.used).toBe(0);
  });

  it("a batch that never answers, its job cancelled: the batch's timeout is cancelled with its last item (it kept a timer, and the process, alive)", async () => {
    const { rt, run, workload, clock } = groupSetup(0, 0, 5000);
    const pending = new Set<unknown>();
    const schedule = clock.schedule.bind(clock);
    const cancel = clock.cancel.bind(clock);
    clock.schedule = (fn, ms) => {
      const h = schedule(fn, ms);
      if (ms === 5000) pending.add(h);
      return h;
    };
    clock.cancel = (h) => {
      pending.delete(h);
      cancel(h);
    };
    workload.hangBatch = true;
    const p = rt.submit(job('a', 3), 1).catch((x: unknown) => x);
    await run(20);
    expect(pending.size).toBe(1);
    rt.cancel('a');
    expect(await p).toMatchObject({ code: 'E_CANCELLED' });
    expect(pending.size).toBe(0);
    expect(workload.aborted).toBe(3);
  });

  it('a cancelled job: its prepared values are released when the batch answers', async () => {
    const { rt, run, workload } = groupSetup();
    const p = rt.submit(job('a', 3), 1);
    await run(10);
    rt.cancel('a');
    await expect(p).rejects.toMatchObject({ code: 'E_CANCELLED' });
    await run(200);
    expect(workload.groups).toEqual([3]);
    expect(workload.held).toBe(0);
    expect(rt.engine.snapshot.preparingSteps).toBe(0);
  });

  it('a malformed answer fails the batch, naming what to return', async () => {
    const { rt, run, workload } = groupSetup();
    const real = workload.prepareBatch.bind(workload);
    let broken = true;
    workload.prepareBatch = async (tasks) => {
      const r = await real(tasks);
      if (broken) {
        broken = false;
        return [...r, { bogus: 1 } as never];
      }
      return r;
    };
    const p = rt.submit(job('a', 2), 1);
    await run(400);
    await expect(p).resolves.toBe(20 + 1);
    expect(workload.groups).toEqual([2, 1, 1]);
    expect(workload.held).toBe(0);
  });

  it('refuses a kind with prepareBatch when the workload has no prepareBatch', () => {
    const clock = new ManualClock();
    expect(() => new Runtime({ workload: new FakeWorkload(clock), devices: [{ workers: 1 }], kinds: { k: { prepareBatch: { maxItems: 2 } } }, clock })).toThrow(/kinds\.k has prepareBatch, but the workload has no prepareBatch/);
  });
});

describe('stages that are not what the Workload type says (a JavaScript user’s)', () => {
  /** Runs one job of 2 partitions on a workload whose stages are `prepare` and `run` as given, with a budget two partitions fill; then a good job. */
  async function run(prepare: (t: PartitionTask<number>) => unknown, runStep: (t: DeviceTask<number, number>) => unknown): Promise<{ bad: unknown; good: unknown; used: number }> {
    const clock = new ManualClock();
    const workload = { prepare, run: runStep, finish: (j: { outputs: number[] }) => j.outputs.length } as unknown as Workload<number, number, number, number>;
    const rt = new Runtime({ workload, devices: [{ workers: 1 }], pacer: 'unpaced', clock, budgetBytes: 2000, retries: 0 });
    const spec = (id: string) => ({ id, kind: 'k', partitions: 2, memory: { prepareBytes: 1000, deviceBytes: 100 } });
    const bad = rt.submit(spec('bad'), 0).then((r) => r, (e: unknown) => e);
    for (let i = 0; i < 20; i++) await tick();
    const used = rt.engine.budget.used;
    const good = rt.submit({ id: 'good', kind: 'k', partitions: 1 }, 0).then((r) => r, (e: unknown) => e);
    for (let i = 0; i < 20; i++) await tick();
    const out = { bad: await bad, good: await Promise.race([good, Promise.resolve('still waiting')]), used };
    await rt.close(0);
    return out;
  }
  const ok = () => Promise.resolve(1);

  it('a plain (not async) run: its value is its answer; one that throws fails its partition, not the process', async () => {
    expect(await run(ok, (t) => ({ output: t.partition, busyMs: 1 }))).toMatchObject({ bad: 2, good: 1 });
    const r = await run(ok, () => {
      throw new Error('sync boom');
    });
    expect(r.bad).toMatchObject({ code: 'E_DEVICE_FAILED', message: expect.stringContaining('sync boom') });
    expect(r.used).toBe(0);
    expect(r.good).toBeInstanceOf(StokerError);
  });

  it('a run that resolves to something other than { output }: the partition fails naming what it returned', async () => {
    for (const [value, shown] of [[undefined, 'undefined'], [5, '5']] as const) {
      const r = await run(ok, () => Promise.resolve(value));
      expect(r.bad).toMatchObject({ code: 'E_DEVICE_FAILED', message: expect.stringContaining(`the device step returned ${shown}: run() must resolve to { output, busyMs? }`) });
    }
  });

  it('an answer out of the contract (no { output }, a bad busyMs) fails its job at once, its retries unspent: the same code would answer the same (a job failed "after 2 attempts")', async () => {
    for (const answer of [5, { output: 1, busyMs: -1 }]) {
      const clock = new ManualClock();
      let runs = 0;
      const workload = { prepare: ok, run: () => (runs++, Promise.resolve(answer)), finish: (j: { outputs: number[] }) => j.outputs.length } as unknown as Workload<number, number, number, number>;
      const rt = new Runtime({ workload, devices: [{ workers: 1 }], pacer: 'unpaced', clock, retries: 2 });
      const done = rt.submit({ id: 'j', kind: 'k', partitions: 1 }, 0).then((r) => r, (e: unknown) => e);
      for (let i = 0; i < 20; i++) await tick();
      expect(await done).toMatchObject({ code: 'E_DEVICE_FAILED' });
      expect(runs).toBe(1);
      await rt.close(0);
    }
  });

  it('a prepare that resolves undefined (P = void) has prepared: its partitions run (they waited for good, the job never settled)', async () => {
    const clock = new ManualClock();
    const rt = new Runtime<number, void, number, number[]>({
      workload: { prepare: async () => undefined, run: async (t) => ({ output: t.partition, busyMs: 1 }), finish: (j) => j.outputs },
      devices: [{ workers: 1 }],
      pacer: 'unpaced',
      clock,
    });
    const p = rt.submit({ id: 'v', kind: 'k', partitions: 2, memory: { prepareBytes: 1, deviceBytes: 1 } }, 0);
    for (let i = 0; i < 20; i++) {
      clock.advance(5);
      await tick();
    }
    await expect(p).resolves.toEqual([0, 1]);
  });

  it('a plain prepare that throws fails its partition with E_PREPARE_FAILED and frees its memory (the job was held for good)', async () => {
    const r = await run(() => {
      throw new Error('no input file');
    }, ok);
    expect(r.bad).toMatchObject({ code: 'E_PREPARE_FAILED', message: expect.stringContaining('no input file') });
    expect(r.used).toBe(0);
  });
});

describe('a pacer object given to the Runtime', () => {
  const workload = { prepare: () => Promise.resolve(1), run: () => Promise.resolve({ output: 1, busyMs: 1 }), finish: (j: { outputs: number[] }) => j.outputs.length } as unknown as Workload<number, number, number, number>;
  it('is checked as a module’s is: a state() it lacks is filled in, a time that is not a number is an error naming it (it stalled every job silently)', async () => {
    // The README's example pacer, as an object: no state().
    // (Typed as a UserPacer: no state(), as the README says; a Pacer would need one.)
    const rt = new Runtime({ workload, devices: [{ workers: 1 }], pacer: { name: 'cap-80', observe() {}, nextDispatchAt: (s: { now: number }) => s.now, onDispatch() {} }, clock: new ManualClock() });
    expect(rt.status().pacer).toMatchObject({ mode: 'steady' });
    expect(rt.status().failed).toBeUndefined();
    await rt.close(0);
    const nan = new Runtime({ workload, devices: [{ workers: 1 }], pacer: { name: 'nan', observe() {}, nextDispatchAt: () => NaN, onDispatch() {}, state: () => ({ mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} }) }, clock: new ManualClock() });
    await expect(nan.submit({ id: 'a', kind: 'k', partitions: 1 }, 0)).rejects.toThrow('the pacer given to the Runtime: nextDispatchAt(snapshot) must return a time in ms (a number; Infinity for none) (got NaN)');
    await nan.close(0);
    expect(() => new Runtime({ workload, devices: [{ workers: 1 }], pacer: { observe() {} } as never })).toThrow(/the pacer given to the Runtime is missing the methods nextDispatchAt, onDispatch/);
  });

  it('one that throws, or answers NaN, after the start: every job fails with E_RUNTIME_FAILED naming why, later submits too — the process goes on (it ended with an uncaught error)', async () => {
    for (const [name, pacer, why] of [
      ['throws', (n = 0) => ({ name: 'once', observe() { if (++n === 5) throw new Error('obs boom once'); }, nextDispatchAt: (s: { now: number }) => s.now, onDispatch() {} }), 'the pacer given to the Runtime threw in observe: obs boom once'],
      ['NaN', (n = 0) => ({ name: 'nan-later', observe() {}, nextDispatchAt: (s: { now: number }) => (++n >= 4 ? NaN : s.now), onDispatch() {} }), 'nextDispatchAt(snapshot) must return a time in ms (a number; Infinity for none) (got NaN)'],
    ] as const) {
      const rt = new Runtime({ workload, devices: [{ workers: 1 }], pacer: pacer() });
      const jobs = ['a', 'b'].map((id) => rt.submit({ id, kind: 'k', partitions: 3 }, 0).then(() => null, (e: unknown) => e));
      const errors = await Promise.all(jobs);
      for (const e of errors) expect(e, name).toMatchObject({ code: 'E_RUNTIME_FAILED', message: expect.stringContaining(why) });
      await expect(rt.submit({ id: 'c', kind: 'k', partitions: 1 }, 0)).rejects.toMatchObject({ code: 'E_RUNTIME_FAILED' });
      expect(rt.status().pacer.mode).toBe('hold');
      // (Its counters stay as they were when it failed: status says it failed, and why.)
      expect(rt.status().failed).toMatch(new RegExp(`^the runtime stopped: .*${why.replace(/[()]/g, '\\$&')}`));
      await rt.close(1000);
    }
  });

  it('one whose state() goes out of contract after the start: status() fails the runtime (E_RUNTIME_FAILED) rather than throw while the jobs go on', async () => {
    let n = 0;
    const rt = new Runtime({ workload, devices: [{ workers: 1 }], pacer: { name: 'shape', observe() {}, nextDispatchAt: (s: { now: number }) => s.now, onDispatch() {}, state: () => (++n > 1 ? ({ mode: 'warp' } as never) : { mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} }) } });
    const job = rt.submit({ id: 's', kind: 'k', partitions: 50 }, 0).then(() => null, (e: unknown) => e);
    expect(rt.status().pacer.mode).toBe('hold');
    expect(rt.status().failed).toMatch(/^the runtime stopped: .*state\(\)/);
    expect(await job).toMatchObject({ code: 'E_RUNTIME_FAILED', message: expect.stringMatching(/state\(\)/) });
    await rt.close(1000);
  });
});

describe('what the Runtime refuses', () => {
  const workload = { prepare: () => Promise.resolve(1), run: () => Promise.resolve({ output: 1, busyMs: 1 }), finish: (j: { outputs: number[] }) => j.outputs.length } as unknown as Workload<number, number, number, number>;
  it('a resubmit of a live job with another input (it was answered with the first input\'s result)', async () => {
    // (A preparation that never ends: the job stays live.)
    const held = { ...workload, prepare: () => new Promise(() => undefined) } as unknown as Workload<number, number, number, number>;
    const rt = new Runtime({ workload: held, devices: [{ workers: 1 }], pacer: 'unpaced', clock: new ManualClock() });
    const first = rt.submit({ id: 'j', kind: 'k', partitions: 1 }, 1000);
    await expect(rt.submit({ id: 'j', kind: 'k', partitions: 1 }, 7)).rejects.toMatchObject({ code: 'E_DUPLICATE_JOB', message: expect.stringContaining('is live with another input') });
    rt.cancel('j');
    await expect(first).rejects.toMatchObject({ code: 'E_CANCELLED' });
    await rt.close(0);
  });

  it('a misspelt pacer option, a missing workload, a workload with no prepare for a kind', async () => {
    expect(() => new Runtime({ workload, devices: [{ workers: 1 }], pacer: 'stoker', pacerOptions: { targetWaitng: 3 } })).toThrow(/pacerOptions.targetWaitng: the stoker pacer has no option targetWaitng — did you mean targetWaiting\? \(its options are targetWaiting, .*headStart.*\): check the spelling/);
    expect(() => new Runtime({ devices: [{ workers: 1 }] } as never)).toThrow(/workload is missing: give the Runtime \{ workload/);
    // A pacer module's factory passed as it is (it read "unknown pacer undefined").
    expect(() => new Runtime({ workload, devices: [{ workers: 1 }], pacer: (() => ({})) as never })).toThrow(/pacer is a function — a pacer module's factory\? Pass the pacer it makes, pacer: createPacer\(/);
    const batchOnly = { prepareBatch: () => Promise.resolve([]), run: () => Promise.resolve({ output: 1 }), finish: () => 0 } as unknown as Workload<number, number, number, number>;
    expect(() => new Runtime({ workload: batchOnly, devices: [{ workers: 1 }] })).toThrow(/the workload has no prepare\(task\)/);
    const rt = new Runtime({ workload: batchOnly, devices: [{ workers: 1 }], kinds: { b: { prepareBatch: { maxItems: 2, maxWaitMs: 0 } } }, clock: new ManualClock() });
    await expect(rt.submit({ id: 'x', kind: 'other', partitions: 1 }, 0)).rejects.toMatchObject({ code: 'E_INVALID_JOB', message: expect.stringContaining('kind "other" is not prepared in batches') });
    await rt.close(0);
  });
});

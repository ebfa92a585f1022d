/**
 * The runtime on real threads: ThreadedWorkload (piscina preparation pool, one thread per device
 * worker, pooled SharedArrayBuffers) driven by Runtime, with fixture modules that fail on demand.
 *
 * Thread entry points exist only as compiled JavaScript, so the runtime is imported from dist/
 * (`npm test` builds first; run `npx tsc -p tsconfig.build.json` before vitest by hand).
 */
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { closeSync, constants, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { threadId } from 'node:worker_threads';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Runtime } from '../../dist/runtime/runtime.js';
import { StageThreads, ThreadedWorkload } from '../../dist/runtime/threaded.js';
import { createNttProofWorkload } from '../../dist/runtime/workloads/ntt-proof.js';
import type { StokerErrorCode } from '../../src/core/errors.js';
import type { JobSpec } from '../../src/core/types.js';

type Mode = 'ok' | 'throw-prepare' | 'throw-device' | 'crash-device' | 'hang-device' | 'block-device' | 'final-prepare' | 'final-device' | 'exit-prepare' | 'spin-prepare' | 'null-prepare';

/** The fixtures' job input (see test/fixtures/flaky-*.mjs). */
interface FlakyInput {
  mode: Mode;
  /** Only the first attempt (over every thread) misbehaves; needs a marker. */
  failOnce?: boolean;
  /** Names the marker file under os.tmpdir() that remembers the first attempt. */
  marker?: string;
  /** Confines the fault to this partition. */
  only?: number;
  /** exit-prepare: when the thread ends; otherwise how long a preparation takes. */
  delayMs?: number;
  /** hang-device: the hung thread ticks word 0 every 5 ms while it lives. */
  heartbeat?: SharedArrayBuffer;
  /** block-device: a file descriptor (a FIFO) the stuck step reads 64 bytes from, into its buffer. */
  fd?: number;
  /** Healthy device steps wait until word 0 is not 0 before reading their buffer. */
  gate?: SharedArrayBuffer;
}

interface FlakyOutput {
  sum: number;
  /** What the preparation returned, passed to the device thread. */
  meta: { partition: number };
  partition: number;
  device: number;
  worker: number;
  threadId: number;
}

const prepareModule = new URL('../fixtures/flaky-prepare.mjs', import.meta.url).href;
const deviceModule = new URL('../fixtures/flaky-device.mjs', import.meta.url).href;
const TIMEOUT = 20_000;

type FlakyRuntime = Runtime<FlakyInput, unknown, FlakyOutput, FlakyOutput[]>;

const runtimes: { close(timeoutMs?: number): Promise<void> }[] = [];
const markers: string[] = [];
const tempDirs: string[] = [];

afterEach(async () => {
  await Promise.all(runtimes.splice(0).map((rt) => rt.close(0)));
  for (const m of markers.splice(0)) rmSync(markerPath(m), { force: true });
  for (const d of tempDirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function setup(deviceTimeoutMs = 2000) {
  const workload = new ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>({
    prepareModule,
    deviceModule,
    bufferBytes: () => 64,
    finish: (job) => job.outputs,
    devices: [{ workers: 2 }],
    prepareThreads: 1,
  });
  const rt: FlakyRuntime = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced', retries: 1, deviceTimeoutMs });
  runtimes.push(rt);
  return { workload, rt };
}

const spec = (id: string, partitions = 4): JobSpec => ({ id, kind: 'flaky', partitions, memory: { prepareBytes: 64, deviceBytes: 64 } });

/** The sum the device reads back when partition p's preparation wrote word i = (p + 1)(i + 1) over the whole buffer. */
function expectedSums(workload: ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>, partitions: number): number[] {
  const words = workload.pool.classOf(64) / 4;
  return Array.from({ length: partitions }, (_, p) => ((p + 1) * words * (words + 1)) / 2);
}

function newMarker(): string {
  const m = randomUUID();
  markers.push(m);
  return m;
}

/** A device module of the test's own, written to a temporary folder (removed after the test): its file URL. */
function deviceModuleFile(prefix: string, source: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  const file = join(dir, 'device.mjs');
  writeFileSync(file, source);
  return pathToFileURL(file).href;
}

function markerPath(marker: string): string {
  return join(tmpdir(), `stoker-flaky-${marker}`);
}

/** Awaits a promise that must reject; returns its error. */
async function rejection(p: Promise<unknown>): Promise<Error & { code?: StokerErrorCode }> {
  try {
    await p;
  } catch (e) {
    return e as Error & { code?: StokerErrorCode };
  }
  throw new Error('expected the promise to reject, it resolved');
}

/** Whether a hung fixture thread is still alive: its heartbeat moves within 100 ms. */
async function beating(heartbeat: SharedArrayBuffer): Promise<boolean> {
  const beat = new Int32Array(heartbeat);
  const before = Atomics.load(beat, 0);
  await sleep(100);
  return Atomics.load(beat, 0) !== before;
}

/** Waits until no hung thread ticks any more (terminate() is asynchronous); fails if one lives on. */
async function expectAllStopped(heartbeat: SharedArrayBuffer): Promise<void> {
  await vi.waitFor(async () => expect(await beating(heartbeat)).toBe(false), { timeout: 3000, interval: 10 });
}

it('a Runtime with other devices than its ThreadedWorkload is refused when made, naming both (its steps on the missing workers failed one by one)', () => {
  const workload = new ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>({ prepareModule, deviceModule, bufferBytes: () => 64, finish: (job) => job.outputs, devices: [{ workers: 1 }], prepareThreads: 1 });
  runtimes.push(workload);
  expect(() => new Runtime({ workload, devices: [{ workers: 3 }], pacer: 'unpaced', retries: 0 })).toThrow("devices [{ workers: 3 }] are not the workload's own [{ workers: 1 }]: give the Runtime the same devices as the workload");
  expect(() => new Runtime({ workload, devices: [{ workers: 1 }, { workers: 1 }], pacer: 'unpaced' })).toThrow("devices [{ workers: 1 }, { workers: 1 }] are not the workload's own [{ workers: 1 }]");
});

it('the pool stays within the memory budget where a larger partition follows smaller ones: the idle ones are freed before its buffer is made (a trial: both held, twice the budget)', async () => {
  const MiB = 2 ** 20;
  const workload = new ThreadedWorkload<FlakyInput & { bytes: number }, FlakyOutput, number>({ prepareModule, deviceModule, bufferBytes: (input) => input.bytes, finish: (job) => job.outputs.length, devices: [{ workers: 1 }], prepareThreads: 2 });
  runtimes.push(workload);
  const rt = new Runtime({ workload, devices: [{ workers: 1 }], budgetBytes: 2 * MiB, pacer: 'unpaced' });
  runtimes.push(rt);
  await rt.submit({ id: 'small', kind: 'k', partitions: 6, memory: { prepareBytes: MiB, deviceBytes: MiB } }, { mode: 'ok', bytes: MiB });
  expect(workload.pool.stats()).toMatchObject({ highWaterBytes: 2 * MiB, idleBytes: 2 * MiB });
  await rt.submit({ id: 'large', kind: 'k', partitions: 1, memory: { prepareBytes: 2 * MiB, deviceBytes: 2 * MiB } }, { mode: 'ok', bytes: 2 * MiB });
  expect(workload.pool.stats()).toMatchObject({ highWaterBytes: 2 * MiB, freed: 2 });
});

it('refuses options it cannot use when made, naming each (a user trial saw them only as jobs failed, after their retries, or never)', () => {
  const ok = { prepareModule, deviceModule, bufferBytes: () => 64, finish: (job: { outputs: FlakyOutput[] }) => job.outputs, devices: [{ workers: 1 }], prepareThreads: 1 };
  const made = (over: Record<string, unknown>) => () => new ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>({ ...ok, ...over } as never);
  expect(made({ prepareThread: 2 })).toThrow('prepareThread is not a field of the ThreadedWorkload options (did you mean prepareThreads?)');
  expect(made({ prepareModule: './tprepare.js' })).toThrow("ThreadedWorkload: prepareModule must be the file: URL of an ES module, e.g. new URL('./prepare.mjs', import.meta.url).href (got \"./tprepare.js\"; a path is resolved against stoker's own folder)");
  expect(made({ deviceModule: new URL('../fixtures/no-such-device.mjs', import.meta.url).href })).toThrow(/ThreadedWorkload: deviceModule: no file .*no-such-device\.mjs/);
  expect(made({ devices: [] })).toThrow('ThreadedWorkload: devices must list at least one device, e.g. [{ workers: 2 }] (got [])');
  expect(made({ prepareThreads: 0 })).toThrow('ThreadedWorkload: prepareThreads must be a whole number ≥ 1 (got 0)');
  expect(made({ prepareConcurrency: NaN })).toThrow('ThreadedWorkload: prepareConcurrency must be a whole number ≥ 1 (got NaN)');
  expect(made({ finish: undefined })).toThrow('ThreadedWorkload: finish must be a function (got undefined)');
  // Its type takes onThreadHeld (from the StageThreads options it is made of): it was refused as no field.
  expect(made({ onThreadHeld: 1 })).toThrow('ThreadedWorkload: onThreadHeld must be a function (got 1)');
  runtimes.push(made({ onThreadHeld: () => undefined })());
});

it('a bufferBytes that is no whole number ≥ 0 fails the job at once, naming it (NaN ran with no buffer: every job done with zeros)', async () => {
  const workload = new ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>({ prepareModule, deviceModule, bufferBytes: () => NaN, finish: (job) => job.outputs, devices: [{ workers: 1 }], prepareThreads: 1 });
  const rt: FlakyRuntime = new Runtime({ workload, devices: [{ workers: 1 }], pacer: 'unpaced', retries: 2 });
  runtimes.push(rt);
  const err = await rejection(rt.submit(spec('nan-bytes', 2), { mode: 'ok' }));
  expect(err.message).toContain('bufferBytes(input) must return a whole number of bytes ≥ 0 (0: no buffer) (got NaN)');
  expect(err.message).not.toContain('after 3 attempts');
}, TIMEOUT);

it("a buffer the machine cannot allocate fails the job at once, naming its size and where it came from (V8's bare \"Array buffer allocation failed\", retried)", async () => {
  const workload = new ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>({ prepareModule, deviceModule, bufferBytes: () => 2 ** 50, finish: (job) => job.outputs, devices: [{ workers: 1 }], prepareThreads: 1 });
  const rt: FlakyRuntime = new Runtime({ workload, devices: [{ workers: 1 }], pacer: 'unpaced', retries: 2 });
  runtimes.push(rt);
  const err = await rejection(rt.submit(spec('huge', 1), { mode: 'ok' }));
  expect(err.message).toContain(`the partition's shared buffer of ${2 ** 50} bytes (a pooled buffer of ${2 ** 50}) could not be allocated`);
  expect(err.message).toContain("more than this machine's memory — its kind's buffer(input) (bufferBytes) asks for it");
  expect(err.message).not.toContain('after 3 attempts');
}, TIMEOUT);

describe('ThreadedWorkload under the Runtime', () => {
  it(
    'runs a job across threads: the device reads exactly what preparation wrote, busy time and buffers are accounted',
    async () => {
      const { workload, rt } = setup();
      const out = await rt.submit(spec('ok'), { mode: 'ok' });

      expect(out.map((o) => o.sum)).toEqual(expectedSums(workload, 4));
      expect(out.map((o) => o.meta)).toEqual([0, 1, 2, 3].map((partition) => ({ partition })));
      expect(out.map((o) => o.partition)).toEqual([0, 1, 2, 3]);
      // The device step really ran on other threads.
      for (const o of out) expect(o.threadId).not.toBe(threadId);

      // Four checkouts: fresh ones (at least the first) and reuses of returned buffers.
      const stats = workload.pool.stats();
      expect(stats.fresh + stats.reused).toBe(4);
      expect(stats.fresh).toBeGreaterThanOrEqual(1);

      // The device threads' Atomics counters, and what the runtime took from them.
      const counters = workload.deviceCounters();
      expect(counters).toHaveLength(2);
      expect(counters.reduce((a, c) => a + c.count, 0)).toBe(4);
      expect(counters.reduce((a, c) => a + c.busyMs, 0)).toBeGreaterThan(0);
      expect(rt.status().counters.deviceCompletions).toBe(4);
      expect(rt.status().counters.deviceBusyMs).toBeGreaterThan(0);
      expect(rt.status().counters.dispatched).toBe(4);

      await rt.close();
      expect(workload.pool.stats().leased).toBe(0);
      expect(workload.pool.stats().leasedBytes).toBe(0);
    },
    TIMEOUT,
  );

  it(
    'runs the ntt-proof workload: every device value matches the reference, the commitment is deterministic per seed',
    async () => {
      const workload = createNttProofWorkload({ devices: [{ workers: 2 }], prepareThreads: 1 });
      const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced' });
      runtimes.push(rt);
      const input = { seed: 7, jobIndex: 0, logN: 8, synthesisMs: 0 };
      const nttSpec = (id: string) => ({ id, kind: 'ntt-proof', partitions: 3, memory: { prepareBytes: 2048, deviceBytes: 2048 } });
      // Concurrently: pooled buffers must not leak one job's data into another.
      const [a, b, c] = await Promise.all([rt.submit(nttSpec('a'), input), rt.submit(nttSpec('b'), input), rt.submit(nttSpec('c'), { ...input, seed: 8 })]);

      expect(a.commitment).toMatch(/^[0-9a-f]{64}$/);
      expect(a.partitions).toBe(3);
      expect(a.checked).toBe(3);
      expect(c.checked).toBe(3);
      expect(b.commitment).toBe(a.commitment);
      expect(c.commitment).not.toBe(a.commitment);

      await rt.close();
      expect(workload.pool.stats().leased).toBe(0);
    },
    TIMEOUT,
  );

  describe('preparation failures', () => {
    it(
      'retries a preparation that threw once; the job resolves',
      async () => {
        const { workload, rt } = setup();
        const marker = newMarker();
        const out = await rt.submit(spec('p-once'), { mode: 'throw-prepare', failOnce: true, marker });

        expect(existsSync(markerPath(marker))).toBe(true); // the fault did happen
        expect(out.map((o) => o.sum)).toEqual(expectedSums(workload, 4));
        expect(rt.status().counters.dispatched).toBe(5); // four partitions + one retry
        await vi.waitFor(() => expect(workload.pool.stats().leased).toBe(0));
      },
      TIMEOUT,
    );

    it(
      'fails the job with E_PREPARE_FAILED when preparation always throws; no buffer stays leased',
      async () => {
        const { workload, rt } = setup();
        const err = await rejection(rt.submit(spec('p-always'), { mode: 'throw-prepare' }));

        expect(err.code).toBe('E_PREPARE_FAILED');
        expect(err.message).toMatch(/synthesis of partition \d+ blew up/);
        expect(err.message).toContain('after 2 attempts');
        expect(workload.deviceCounters().reduce((a, c) => a + c.count, 0)).toBe(0);
        await vi.waitFor(() => expect(workload.pool.stats().leased).toBe(0));
        await rt.close();
        expect(workload.pool.stats().leased).toBe(0);
      },
      TIMEOUT,
    );

    it(
      "fails the job at once when preparation throws an error with retry: false (the thread's clone of the error would lose it)",
      async () => {
        const { workload, rt } = setup();
        const err = await rejection(rt.submit(spec('p-final'), { mode: 'final-prepare', only: 0 }));

        expect(err.code).toBe('E_PREPARE_FAILED');
        expect(err.message).toBe('job p-final: partition 0 failed in preparation: partition 0: bad input');
        await vi.waitFor(() => expect(workload.pool.stats().leased).toBe(0));
      },
      TIMEOUT,
    );
  });

  it(
    'a preparation that ends its thread fails alone and at once: the others on that thread run again alone, without spending a retry, and the reason names the partition at fault',
    async () => {
      const workload = new ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>({ prepareModule, deviceModule, bufferBytes: () => 64, finish: (job) => job.outputs, devices: [{ workers: 2 }], prepareThreads: 1, prepareConcurrency: 8 });
      const rt: FlakyRuntime = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced', retries: 1 });
      runtimes.push(rt);
      // Four innocent preparations of 400 ms share the one thread with partition 2 of 'bad', which ends the thread after 100 ms.
      const innocent = rt.submit(spec('innocent', 4), { mode: 'ok', delayMs: 400 });
      const bad = rejection(rt.submit(spec('bad', 4), { mode: 'exit-prepare', only: 2, delayMs: 100 }));
      const out = await innocent;
      expect(out.map((o) => o.sum)).toEqual(expectedSums(workload, 4));
      const err = await bad;
      expect(err.code).toBe('E_PREPARE_FAILED');
      expect(err.message).toMatch(/^job bad: partition 2 failed in preparation: its preparation ended its thread when it ran alone: worker exited with code: 7$/);
      await vi.waitFor(() => expect(workload.pool.stats().leased).toBe(0));
    },
    TIMEOUT,
  );

  it(
    'a preparation withdrawn while it waits in the pool’s queue behind one that never ends begins on the replacement thread with its signal fired, and, spinning too, is ended in turn (it held that thread for good)',
    async () => {
      const threads = new StageThreads({ devices: [{ workers: 1 }], prepareThreads: 1, withdrawnGraceMs: 300 });
      runtimes.push({ close: () => threads.close() });
      const call = (input: FlakyInput, signal: AbortSignal, partition: number) => threads.prepare({ module: prepareModule, style: 'workload', input, jobId: 'queued', partition, partitions: 3, signal, bufferBytes: 64 });
      const a = new AbortController();
      const b = new AbortController();
      // A runs on the one thread; B waits in the queue. Both withdrawn: A's thread is ended 300 ms
      // on; B begins on the new one, spins, and is ended a grace after it was looked at again.
      const ended = [rejection(call({ mode: 'spin-prepare' }, a.signal, 0)), rejection(call({ mode: 'spin-prepare' }, b.signal, 1))];
      await sleep(100);
      a.abort(new Error('withdrawn'));
      b.abort(new Error('withdrawn'));
      for (const e of await Promise.all(ended)) expect(e.message).toMatch(/worker exited/);
      const c = await call({ mode: 'ok' }, new AbortController().signal, 2);
      expect(c.meta).toEqual({ partition: 2 });
    },
    TIMEOUT,
  );

  it(
    'a preparation that throws null fails saying so (its reply was read as a result: "Cannot destructure property \'meta\'…")',
    async () => {
      const { rt } = setup();
      const err = await rejection(rt.submit(spec('null', 1), { mode: 'null-prepare' }));
      expect(err.message).toBe('job null: partition 0 failed in preparation: prepare threw null, not an Error: throw new Error("why") (after 2 attempts)');
    },
    TIMEOUT,
  );

  it(
    'a preparation that never ends (a loop that ignores its signal): withdrawnGraceMs after its timeout its thread is ended and replaced; the next jobs prepare (before, the pool was lost for good)',
    async () => {
      const workload = new ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>({ prepareModule, deviceModule, bufferBytes: () => 64, finish: (job) => job.outputs, devices: [{ workers: 2 }], prepareThreads: 1, withdrawnGraceMs: 300 });
      const rt: FlakyRuntime = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced', retries: 0, prepareTimeoutMs: 500 });
      runtimes.push(rt);
      const err = await rejection(rt.submit(spec('spin', 1), { mode: 'spin-prepare' }));
      expect(err.code).toBe('E_PREPARE_FAILED');
      expect(err.message).toMatch(/no preparation within the preparation timeout, 500 ms/);
      // The thread spins until it is ended; the next job's preparation waits for a replacement.
      const out = await rt.submit(spec('after', 2), { mode: 'ok' });
      expect(out.map((o) => o.sum)).toEqual(expectedSums(workload, 2));
    },
    TIMEOUT,
  );

  describe('device failures', () => {
    it(
      'retries a device step that threw once; the job resolves',
      async () => {
        const { workload, rt } = setup();
        const marker = newMarker();
        const out = await rt.submit(spec('d-once'), { mode: 'throw-device', failOnce: true, marker });

        expect(existsSync(markerPath(marker))).toBe(true);
        expect(out.map((o) => o.sum)).toEqual(expectedSums(workload, 4));
        expect(rt.status().counters.dispatched).toBe(5);
        // The failed attempt is not counted as device work.
        expect(workload.deviceCounters().reduce((a, c) => a + c.count, 0)).toBe(4);
        await vi.waitFor(() => expect(workload.pool.stats().leased).toBe(0));
      },
      TIMEOUT,
    );

    it(
      'fails the job with E_DEVICE_FAILED and the device message when the device always throws',
      async () => {
        const { workload, rt } = setup();
        const err = await rejection(rt.submit(spec('d-always'), { mode: 'throw-device' }));

        expect(err.code).toBe('E_DEVICE_FAILED');
        expect(err.message).toMatch(/kernel fault on partition \d+/);
        expect(err.message).toContain('after 2 attempts');
        await vi.waitFor(() => expect(workload.pool.stats().leased).toBe(0));
        await rt.close();
        expect(workload.pool.stats().leased).toBe(0);
      },
      TIMEOUT,
    );

    it(
      'fails the job at once when the device step throws an error with retry: false',
      async () => {
        const { rt } = setup();
        const err = await rejection(rt.submit(spec('d-final'), { mode: 'final-device', only: 0 }));

        expect(err.code).toBe('E_DEVICE_FAILED');
        expect(err.message).toMatch(/^job d-final: partition 0 failed on device 0: partition 0: tensor shape mismatch$/);
      },
      TIMEOUT,
    );

    it(
      'retries the item of a device thread that exited, and respawns the thread',
      async () => {
        const { workload, rt } = setup();
        const marker = newMarker();
        // Partition 0 is prepared first and goes to the first idle worker, device 0 worker 0.
        const out = await rt.submit(spec('crash'), { mode: 'crash-device', failOnce: true, marker, only: 0 });

        const crashed = JSON.parse(readFileSync(markerPath(marker), 'utf8')) as { threadId: number; device: number; worker: number };
        expect(crashed).toMatchObject({ device: 0, worker: 0 });
        expect(out.map((o) => o.sum)).toEqual(expectedSums(workload, 4));
        expect(rt.status().counters.dispatched).toBe(5);
        expect(out.map((o) => o.threadId)).not.toContain(crashed.threadId);

        // A later job: its first partition again goes to worker 0, which needs a new thread.
        const later = await rt.submit(spec('after-crash'), { mode: 'ok' });
        expect(later.map((o) => o.sum)).toEqual(expectedSums(workload, 4));
        expect(later[0]).toMatchObject({ device: 0, worker: 0 });
        expect(later[0]?.threadId).not.toBe(crashed.threadId);
        expect(workload.deviceCounters().reduce((a, c) => a + c.count, 0)).toBe(8);
      },
      TIMEOUT,
    );

    it(
      'terminates a device step that hangs past deviceTimeoutMs and retries it; the job resolves',
      async () => {
        // 1 s: the retry's thread is started afresh (the hung one was ended), and its start counts
        // toward the timeout too; 300 ms was not enough for that on a busy 2-core machine.
        const { workload, rt } = setup(1000);
        const marker = newMarker();
        const heartbeat = new SharedArrayBuffer(4);
        const t0 = performance.now();
        const out = await rt.submit(spec('hang-once'), { mode: 'hang-device', failOnce: true, marker, heartbeat });

        expect(performance.now() - t0).toBeGreaterThanOrEqual(990); // the timeout had to fire
        expect(existsSync(markerPath(marker))).toBe(true);
        expect(out.map((o) => o.sum)).toEqual(expectedSums(workload, 4));
        expect(rt.status().counters.dispatched).toBe(5);
        // The hung thread did run (it ticked), and it was terminated, not just forgotten.
        expect(Atomics.load(new Int32Array(heartbeat), 0)).toBeGreaterThan(0);
        await expectAllStopped(heartbeat);
        await vi.waitFor(() => expect(workload.pool.stats().leased).toBe(0));
      },
      TIMEOUT,
    );

    it(
      'fails the job with E_DEVICE_FAILED naming deviceTimeoutMs when the device always hangs',
      async () => {
        const { workload, rt } = setup(300);
        const heartbeat = new SharedArrayBuffer(4);
        const t0 = performance.now();
        const err = await rejection(rt.submit(spec('hang-always'), { mode: 'hang-device', heartbeat }));

        expect(performance.now() - t0).toBeGreaterThanOrEqual(590); // two attempts timed out
        expect(err.code).toBe('E_DEVICE_FAILED');
        expect(err.message).toContain("no answer within the device timeout, 300 ms (the runtime's deviceTimeoutMs");
        expect(err.message).toContain('after 2 attempts');
        expect(Atomics.load(new Int32Array(heartbeat), 0)).toBeGreaterThan(0);
        // Every hung thread, including the other worker's (aborted when the job failed), is gone.
        await expectAllStopped(heartbeat);
        await vi.waitFor(() => expect(workload.pool.stats().leased).toBe(0));
      },
      TIMEOUT,
    );

    it(
      "on a device whose workers share one thread (WebGPU's), another worker's step hung past the timeout does not fail this one: it is sent again to the fresh thread, no retry spent",
      async () => {
        // 'hang': never answers. 'wait': answers once the gate opens (asynchronously: the thread runs on meanwhile).
        const module = deviceModuleFile('stoker-shared-thread-', 'export async function run(input, ctx) {\n  if (input.mode === "hang") return new Promise(() => {});\n  const gate = new Int32Array(input.gate);\n  while (Atomics.load(gate, 0) === 0) await new Promise((r) => setTimeout(r, 10));\n  return { sum: 1, meta: ctx.meta, partition: ctx.partition, device: ctx.device, worker: ctx.worker, threadId: 0 };\n}\n');
        const workload = new ThreadedWorkload<{ mode: string; gate?: SharedArrayBuffer }, FlakyOutput, FlakyOutput[]>({ prepareModule, deviceModule: module, bufferBytes: () => 64, finish: (job) => job.outputs, devices: [{ workers: 2, threadPerDevice: true }], prepareThreads: 1 });
        const failures: string[] = [];
        const rt = new Runtime({ workload, devices: [{ workers: 2 }], pacer: 'unpaced', retries: 0, deviceTimeoutMs: 1500, onStepFailed: (f) => void failures.push(`${f.jobId}: ${f.reason}`) });
        runtimes.push(rt);
        const gate = new SharedArrayBuffer(4);
        const bad = rejection(rt.submit(spec('hung', 1), { mode: 'hang' }));
        // (Later, so that its own timeout is not the hung one's.)
        await sleep(600);
        const good = rt.submit(spec('innocent', 1), { mode: 'wait', gate });
        expect((await bad).message).toContain('no answer within the device timeout, 1500 ms');
        Atomics.store(new Int32Array(gate), 0, 1);
        expect((await good).map((o) => o.sum)).toEqual([1]);
        expect(failures).toHaveLength(1);
        expect(failures[0]).toMatch(/^hung: worker \d: no answer within the device timeout/);
      },
      TIMEOUT,
    );

    it(
      "a device thread's start (its module loading a model) is not the step's: the device timeout counts from when the step begins",
      async () => {
        // A 1.5 s load and a 1.5 s step, a 2.5 s timeout: together past it (the step timed out as it ran), each within it.
        const module = deviceModuleFile('stoker-slow-load-', 'await new Promise((r) => setTimeout(r, 1500));\nexport function run(input, ctx) {\n  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1500);\n  return { sum: 0, meta: ctx.meta, partition: ctx.partition, device: ctx.device, worker: ctx.worker, threadId: 0 };\n}\n');
        const workload = new ThreadedWorkload<FlakyInput, FlakyOutput, FlakyOutput[]>({ prepareModule, deviceModule: module, bufferBytes: () => 64, finish: (job) => job.outputs, devices: [{ workers: 1 }], prepareThreads: 1 });
        const failures: string[] = [];
        const rt: FlakyRuntime = new Runtime({ workload, devices: [{ workers: 1 }], pacer: 'unpaced', retries: 0, deviceTimeoutMs: 2500, onStepFailed: (f) => void failures.push(f.reason) });
        runtimes.push(rt);
        const out = await rt.submit(spec('slow-load', 1), { mode: 'ok' });
        expect(failures).toEqual([]);
        expect(out.map((o) => o.partition)).toEqual([0]);
      },
      TIMEOUT,
    );
  });

  it(
    'cancels a job whose partitions are on the devices: E_CANCELLED, the device threads are ended, no buffer leaked',
    async () => {
      const { workload, rt } = setup(60_000);
      const heartbeat = new SharedArrayBuffer(4);
      const job = rt.submit(spec('cancel'), { mode: 'hang-device', heartbeat });
      const settled = rejection(job);
      await vi.waitFor(() => expect(rt.status().counters.onDevice).toBe(2), { timeout: 10_000, interval: 10 });
      await vi.waitFor(() => expect(Atomics.load(new Int32Array(heartbeat), 0)).toBeGreaterThan(0), { timeout: 10_000, interval: 10 });
      expect(await beating(heartbeat)).toBe(true);

      rt.cancel('cancel');
      const err = await settled;
      expect(err.code).toBe('E_CANCELLED');
      expect(rt.status().counters.onDevice).toBe(0);
      await expectAllStopped(heartbeat);

      await rt.close();
      expect(workload.pool.stats().leased).toBe(0);
    },
    TIMEOUT,
  );

  it(
    'close() with a job still running answers it with E_CANCELLED within the close timeout and leaves no thread behind',
    async () => {
      // How "no thread behind" is checked: process.getActiveResourcesInfo() does not list worker
      // threads in Node 20 (a live Worker adds no entry), so it cannot see a leak. Instead:
      // (1) the hung device threads tick a shared heartbeat while they live: it must stop;
      // (2) on Linux, the process's OS threads (/proc/self/task) must come back to the count
      //     before the workload existed (Worker.terminate() resolves once the thread has exited).
      // Both are polled for a short while, as the OS may take a moment to reap a thread.
      const osThreads = () => (existsSync('/proc/self/task') ? readdirSync('/proc/self/task').length : undefined);
      const before = osThreads();

      const { workload, rt } = setup(60_000);
      const heartbeat = new SharedArrayBuffer(4);
      const job = rt.submit(spec('closing'), { mode: 'hang-device', heartbeat });
      const settled = rejection(job);
      await vi.waitFor(() => expect(rt.status().counters.onDevice).toBe(2), { timeout: 10_000, interval: 10 });
      await vi.waitFor(() => expect(Atomics.load(new Int32Array(heartbeat), 0)).toBeGreaterThan(0), { timeout: 10_000, interval: 10 });
      if (before !== undefined) expect(osThreads()).toBeGreaterThan(before); // the check below can see threads

      const t0 = performance.now();
      await rt.close(300);
      const took = performance.now() - t0;
      expect(took).toBeGreaterThanOrEqual(290); // it gave the job its grace period…
      expect(took).toBeLessThan(5000); // …and did not wait for the 60 s device timeout

      const err = await settled;
      expect(err.code).toBe('E_CANCELLED');
      expect(rt.status().closing).toBe(true);
      expect(workload.pool.stats().leased).toBe(0);
      await expectAllStopped(heartbeat);
      if (before !== undefined) await vi.waitFor(() => expect(osThreads()).toBeLessThanOrEqual(before), { timeout: 3000, interval: 10 });

      // A closed runtime takes no more jobs.
      const late = await rejection(rt.submit(spec('too-late'), { mode: 'ok' }));
      expect(late.code).toBe('E_CANCELLED');
    },
    TIMEOUT,
  );

  // An aborted device step settles only once its thread is gone (kill() terminates first), so the
  // Runtime cannot hand its buffer to another partition while a native call in it still writes.
  it.skipIf(process.platform === 'win32')(
    'does not reuse the buffer of a timed-out device step while its thread can still write into it',
    async () => {
      const fifo = join(tmpdir(), `stoker-fifo-${randomUUID()}`);
      execFileSync('mkfifo', [fifo]);
      const fd = openSync(fifo, constants.O_RDWR);
      const gate = new SharedArrayBuffer(4);
      const openGate = () => {
        Atomics.store(new Int32Array(gate), 0, 1);
        Atomics.notify(new Int32Array(gate), 0);
      };
      let unblocked = false;
      /** Lets the stuck native call return: it writes 64 bytes of 0xff into the buffer it was given. */
      const unblock = () => {
        if (!unblocked) writeSync(fd, Buffer.alloc(64, 0xff));
        unblocked = true;
      };
      try {
        const { workload, rt } = setup(1000);
        // Job 1: the first device attempt blocks; after 1 s the runtime gives up on it (its thread
        // is told to terminate but cannot yet) and the retry, on a fresh buffer, succeeds.
        const first = await rt.submit(spec('stuck', 1), { mode: 'block-device', failOnce: true, marker: newMarker(), fd });
        expect(first.map((o) => o.sum)).toEqual(expectedSums(workload, 1));

        // Job 2 checks out pooled buffers: both of its partitions are on the devices, held at the gate.
        const second = rt.submit(spec('reuse', 2), { mode: 'ok', gate });
        await vi.waitFor(() => expect(rt.status().counters.onDevice).toBe(2), { timeout: 10_000, interval: 10 });
        unblock(); // the native call of job 1's abandoned step returns and writes into its old buffer
        await sleep(300);
        openGate();
        expect((await second).map((o) => o.sum)).toEqual(expectedSums(workload, 2));
      } finally {
        unblock();
        openGate();
        closeSync(fd);
        rmSync(fifo, { force: true });
      }
    },
    TIMEOUT,
  );
});

describe('StageThreads.prepareBatch', () => {
  it('gives back the buffers it took when a later checkout fails (the pool is full)', async () => {
    const { StageThreads } = await import('../../dist/runtime/threaded.js');
    const { BufferPool } = await import('../../dist/runtime/buffer-pool.js');
    const pool = new BufferPool({ maxBytes: 16_384 });
    const threads = new StageThreads({ devices: [{ workers: 1 }], prepareThreads: 1, pool });
    try {
      const call = (partition: number) => ({ module: 'file:///nowhere.mjs', style: 'kind' as const, input: null, jobId: 'j', partition, partitions: 3, bufferBytes: 8192, signal: new AbortController().signal });
      await expect(threads.prepareBatch([call(0), call(1), call(2)])).rejects.toThrow();
      expect(pool.stats().leasedBytes).toBe(0);
    } finally {
      await threads.close();
    }
  });
});

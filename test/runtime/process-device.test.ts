/**
 * Process devices against real child processes: Python workers on python/stoker_worker.py, a Node
 * worker on stoker/worker, and programs that break the protocol. Each fault fails its item (the
 * engine retries it), the process is started again, and every job ends once, correctly or with a
 * reason naming the worker and what happened; no reservation is left behind.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { EngineEvent, ItemFailure, StokerError } from '../../src/core/index.js';
import { ProcessDevice, type ProcessDeviceOptions } from '../../src/runtime/process-device.js';
import type { PartitionTask } from '../../src/runtime/runtime.js';
import type { PreparedBuffer } from '../../src/runtime/threaded.js';
import { batchingRuntimeOver, failure, runtimeOver, spec } from './device-helpers.js';

const FIXTURES = path.resolve(import.meta.dirname, '../fixtures/devices');
const PY = path.join(FIXTURES, 'py-device.py');
const BAD = path.join(FIXTURES, 'bad-device.py');

interface Input {
  mode?: string;
  /** mode "signal": the signal the device sends itself. */
  signal?: string;
  /** Prepared with { id: 2 ** 60 } beside the rest. */
  large?: boolean;
  marker?: string;
  lock?: string;
  holdMs?: number;
  /** Bytes prepare returns (the payload) instead of JSON. */
  bytes?: number;
  /** mode "big": the characters of the string the device returns. */
  chars?: number;
  /** busy-device.mjs: the busyNs it reports. */
  busyNs?: number;
  /** mode "exit-on-worker": the worker whose processes end on each item. */
  worker?: number;
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

/** A runtime whose preparation is in process and whose device is a ProcessDevice. */
function setup(device: Partial<ProcessDeviceOptions> & { command: string }, options: { workers?: number; retries?: number; deviceTimeoutMs?: number; onStep?: (event: EngineEvent) => void } = {}) {
  const log: string[] = [];
  const workers = options.workers ?? 1;
  const dev = new ProcessDevice({ name: 'gpu', workers, readyTimeoutMs: 10_000, log: (l) => log.push(l), ...device });
  const prepare = async (t: PartitionTask<Input>): Promise<PreparedBuffer> => ({ meta: t.input.bytes ? Uint8Array.from({ length: t.input.bytes }, (_, i) => i % 251) : { p: t.partition, tag: 'prep', ...(t.input.large ? { id: 2 ** 60 } : {}) } });
  const rt = runtimeOver(dev, prepare, { ...options, workers });
  closers.push(() => rt.close(1000));
  return { rt, log };
}

describe('a Python process device (python/stoker_worker.py)', () => {
  it('runs items with the prepared value and the payload; results are JSON or bytes', async () => {
    const { rt } = setup({ command: 'python3', args: [PY] }, { workers: 2 });
    const out = (await rt.submit(spec('j1', 3), { mode: 'ok' })) as { partition: number; n: number; prepared: unknown; kind: string; job: string; pid: number; worker: string; workers: string }[];
    expect(out.map((o) => o.partition)).toEqual([0, 1, 2]);
    for (const [p, o] of out.entries()) expect(o).toMatchObject({ n: 0, prepared: { p, tag: 'prep' }, kind: 'k', job: 'j1', workers: '2' });

    expect(new Set(out.map((o) => o.pid)).size).toBeGreaterThanOrEqual(1);
    // Each process knows its worker index (to pin itself to one of several GPUs): one index per process.
    const byPid = new Map(out.map((o) => [o.pid, o.worker]));
    for (const o of out) expect(['0', '1']).toContain(o.worker);
    expect(new Set(byPid.values()).size).toBe(byPid.size);
    const bytes = (await rt.submit(spec('j2', 2), { mode: 'bytes', bytes: 5 })) as Uint8Array[];
    expect(bytes.map((b) => [...b])).toEqual([
      [4, 3, 2, 1, 0],
      [4, 3, 2, 1, 0],
    ]);
    expect(rt.engine.budget.used).toBe(0);
    // The helper's own measure is the busy time.
    expect(rt.status().counters.deviceBusyMs).toBeGreaterThan(0);
  });

  it('a busyNs longer than the step has been out (ms or a timestamp in its place) fails its item, naming it; a true one is the busy time', async () => {
    // (1e30 ns was taken: the pacer's rate went to 0, and the device's busy seconds and remembered service time kept it.)
    const { rt } = setup({ command: process.execPath, args: [path.join(FIXTURES, 'busy-device.mjs')] }, { retries: 0 });
    const e = await failure(rt.submit(spec('b1'), { busyNs: 1e30 }));
    expect(e.message).toMatch(/gpu\/0: busyNs 1e\+30 is longer than the \d+ ns since the step was sent: report the ns the item occupied the worker/);
    await expect(rt.submit(spec('b2'), { busyNs: 1000 })).resolves.toHaveLength(1);
    expect(rt.status().counters.deviceBusyMs).toBe(0.001);
  });

  it("an item whose handler raises fails with the handler's error; the worker goes on", async () => {
    const { rt } = setup({ command: 'python3', args: [PY] }, { retries: 0 });
    const e = await failure(rt.submit(spec('f1'), { mode: 'fail' }));
    expect(e.code).toBe('E_DEVICE_FAILED');
    expect(e.message).toMatch(/gpu\/0: ValueError: no such tensor/);
    await expect(rt.submit(spec('f2'), { mode: 'ok' })).resolves.toHaveLength(1);
  });

  it("a SIGINT, SIGTERM or SIGHUP to the server's whole process group (a Ctrl-C, systemd's stop, a closed terminal) does not end the worker mid-item: the server ends its workers", async () => {
    for (const args of [[PY], [path.join(FIXTURES, 'node-device.mjs')]]) {
      const { rt } = setup({ command: args[0] === PY ? 'python3' : process.execPath, args }, { retries: 0 });
      // (A SIGTERM to the group killed every worker mid-item: the drain had nothing to finish, and a try was spent.)
      for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) await expect(rt.submit(spec(`${signal}-${args[0]?.slice(-3)}`), { mode: 'signal', signal })).resolves.toEqual(['alive']);
    }
  });

  it('a worker whose server was killed hard (kill -9) mid-item ends: it held its device beside the restarted server\'s workers, an orphan', async () => {
    for (const [command, args] of [['python3', [PY]], [process.execPath, [path.join(FIXTURES, 'node-device.mjs')]]] as const) {
      // The "server": a process with a ProcessDevice, one item on it that hangs.
      const tag = `orphan-${process.pid}-${Date.now()}-${path.extname(args[0])}`;
      const dist = new URL('../../dist/runtime/process-device.js', import.meta.url).href;
      const script = `import { ProcessDevice } from ${JSON.stringify(dist)};
const dev = new ProcessDevice({ name: 'gpu', workers: 1, command: ${JSON.stringify(command)}, args: ${JSON.stringify([...args, tag])}, readyTimeoutMs: 10000, log: () => {} });
dev.run({ kind: 'k', module: '', style: 'kind', input: { mode: 'hang' }, jobId: 'j', partition: 0, partitions: 1, prepared: { meta: { p: 0 } }, device: 0, worker: 0, signal: new AbortController().signal });
setInterval(() => {}, 1000);`;
      const server = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'ignore' });
      const worker = () => fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d)).find((d) => {
        try {
          return fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(tag);
        } catch {
          return false;
        }
      });
      try {
        await eventually(() => worker() !== undefined, `the ${command} worker started`, 10_000);
        // (Its item under way: a second for the frame to reach it.)
        await new Promise((r) => setTimeout(r, 1000));
        server.kill('SIGKILL');
        await eventually(() => worker() === undefined, `the ${command} worker ended after its server was killed`, 10_000);
      } finally {
        server.kill('SIGKILL');
        const left = worker();
        if (left) process.kill(Number(left), 'SIGKILL');
      }
    }
  }, 30_000);

  it('an error with retry = False fails its job at once, the retries unspent', async () => {
    const steps: EngineEvent[] = [];
    const { rt } = setup({ command: 'python3', args: [PY] }, { retries: 2, onStep: (e) => steps.push(e) });
    const e = await failure(rt.submit(spec('final'), { mode: 'final' }));
    expect(e.message).toBe('job final: partition 0 failed on device 0: gpu/0: ValueError: shape (3,) is not (4,)');
    expect(steps.filter((s) => s.type === 'deviceFailed')).toMatchObject([{ final: true }]);
  });

  it('an output JSON cannot carry (NaN, a set) fails its job at once, naming where it is', async () => {
    const { rt } = setup({ command: 'python3', args: [PY] }, { retries: 2 });
    const nan = await failure(rt.submit(spec('nan'), { mode: 'nan' }));
    expect(nan.message).toBe('job nan: partition 0 failed on device 0: gpu/0: ValueError: output.score is nan, which JSON cannot carry: return numbers, strings, lists and dicts (a numpy array: .tolist(); NaN: None), or bytes');
    const set = await failure(rt.submit(spec('set'), { mode: 'set' }));
    expect(set.message).toMatch(/output\.tags is a set, which JSON cannot carry/);
    // (numpy's bool read "a bool", which JSON carries.)
    const flag = await failure(rt.submit(spec('numpy-bool'), { mode: 'numpy-bool' }));
    expect(flag.message).toMatch(/output\.flag is a numpy bool_? \(\.item\(\) makes it Python's\), which JSON cannot carry/);
    // Past Python's 4,300 digits of an int's text json.dumps raised first, and this said only "output".
    const huge = await failure(rt.submit(spec('huge-int'), { mode: 'huge-int' }));
    expect(huge.message).toMatch(/output\.n is an integer of about 5000 digits, more than Python writes as text \(return it as a string/);
    await expect(rt.submit(spec('after'), { mode: 'ok' })).resolves.toHaveLength(1);
  });

  it('an output JSON would change on the Node helper (Infinity, a Set, bytes inside) fails its job at once, naming where (it read as done with null, {} and an object of indices)', async () => {
    const steps: EngineEvent[] = [];
    const { rt } = setup({ command: process.execPath, args: [path.join(FIXTURES, 'node-device.mjs')] }, { retries: 2, onStep: (e) => steps.push(e) });
    const inf = await failure(rt.submit(spec('inf'), { mode: 'lossy-number' }));
    expect(inf.message).toBe('job inf: partition 0 failed on device 0: gpu/0: the output cannot be sent as JSON: it holds Infinity at "score", which JSON would store as null: return null, or a string, where a number is missing');
    expect((await failure(rt.submit(spec('set'), { mode: 'lossy-set' }))).message).toMatch(/it holds a Set at "tags", which JSON would store as \{\}/);
    expect((await failure(rt.submit(spec('nested'), { mode: 'lossy-bytes' }))).message).toMatch(/it holds bytes at "b": bytes may only be the whole value/);
    expect(steps.filter((s) => s.type === 'deviceFailed')).toMatchObject([{ final: true }, { final: true }, { final: true }]);
    await expect(rt.submit(spec('after'), { mode: 'ok' })).resolves.toHaveLength(1);
  });

  it('an integer a double would round fails its job at once, naming it (an int64 id 2^64 + 1 came back as 18446744073709552000, the job done)', async () => {
    const steps: EngineEvent[] = [];
    const { rt } = setup({ command: 'python3', args: [PY] }, { retries: 2, onStep: (e) => steps.push(e) });
    const e = await failure(rt.submit(spec('int64'), { mode: 'int64' }));
    expect(e.message).toBe(
      'job int64: partition 0 failed on device 0: gpu/0: InexactInteger: output.ids[1] is the integer 18446744073709551617, which stoker would read rounded to 18446744073709551616 — JSON numbers are doubles there, whole numbers exact to 2**53: return it as a string, str(x)',
    );
    expect(steps.filter((s) => s.type === 'deviceFailed')).toMatchObject([{ final: true }]);
    // A helper of one's own sends it anyway: stoker's side names it too, and the process serves on.
    const own = setup({ command: 'python3', args: [BAD, 'int64'] }, { retries: 2 });
    const e2 = await failure(own.rt.submit(spec('own'), { mode: 'ok' }));
    expect(e2.message).toBe('job own: partition 0 failed on device 0: gpu/0: output.ids[1] is the integer 18446744073709551617, which stoker reads rounded (as 18446744073709552000: JSON numbers are doubles here, whole numbers exact to 2^53): send it as a string');
  });

  it('an integer stoker sent itself comes back as it was: 2^60 prepared, written 1152921504606847000 (the helper refused its own echo as one stoker would read rounded)', async () => {
    const { rt } = setup({ command: 'python3', args: [PY] });
    const [out] = (await rt.submit(spec('echo'), { mode: 'ok', large: true })) as { prepared: { id: number } }[];
    expect(out?.prepared.id).toBe(2 ** 60);
  });

  it('a JSON output over 1 MiB comes back whole (it was refused as a malformed frame: the header was capped at 1 MiB); one over the 64 MiB a header carries fails its job at once, saying to return bytes', async () => {
    const { rt } = setup({ command: 'python3', args: [PY] }, { retries: 2 });
    await expect(rt.submit(spec('big'), { mode: 'big', chars: 1_500_000 })).resolves.toEqual(['y'.repeat(1_500_000)]);
    const e = await failure(rt.submit(spec('huge'), { mode: 'big', chars: 65 << 20 }));
    expect(e.message).toMatch(/^job huge: partition 0 failed on device 0: gpu\/0: FrameTooLarge: its JSON is \d+ bytes, over the 67108864 bytes a frame header carries: return large data as bytes, which go as the payload$/);
  });

  it('a process that exits mid-item: the item is retried on the restarted process', async () => {
    const marker = path.join(os.tmpdir(), `stoker-exit-${process.pid}-${Date.now()}`);
    closers.push(async () => fs.rmSync(marker, { force: true }));
    const { rt, log } = setup({ command: 'python3', args: [PY] });
    const [out] = (await rt.submit(spec('e1'), { mode: 'exit-once', marker })) as { pid: number }[];
    expect(out?.pid).toBeGreaterThan(0);
    expect(log.join('\n')).toMatch(/\[device gpu\/0\] it exited \(code 3\): starting it again/);
    expect(rt.engine.budget.used).toBe(0);
  });

  it('a worker whose processes, after one crashed mid-item, keep ending before they are ready is taken out of service: its items go to the healthy worker, and the jobs are done (they failed while it idled)', async () => {
    const marker = path.join(os.tmpdir(), `stoker-broken-${process.pid}-${Date.now()}`);
    closers.push(async () => fs.rmSync(marker, { force: true }));
    // Worker 0's processes exit at start once the marker exists (the GPU gone); worker 1's never do.
    const script = `if [ "$STOKER_WORKER" = 0 ] && [ -e "${marker}" ]; then echo "cannot open /dev/nvidia0" >&2; exit 5; fi; exec python3 "${PY}"`;
    const { rt, log } = setup({ command: 'sh', args: ['-c', script] }, { workers: 2, retries: 1 });
    // (One partition on idle workers: worker 0 takes it, creates the marker and exits mid-item.)
    const [first] = (await rt.submit(spec('crash'), { mode: 'exit-once', marker })) as { pid: number }[];
    expect(first?.pid).toBeGreaterThan(0);
    const outs = (await rt.submit(spec('after', 6), { mode: 'ok' })) as { worker: string }[];
    expect(outs.map((o) => o.worker)).toEqual(Array(6).fill('1'));
    const lines = log.join('\n');
    expect(lines).toMatch(/\[device gpu\/0\] it exited \(code 3\)/);
    expect(lines).toMatch(/\[device gpu\/0\] its processes keep ending before they are ready: taken out of service \(its items go to the other workers\) until one is/);
    expect(rt.status().counters.devices[0]?.workers).toBe(1);
    expect(rt.engine.budget.used).toBe(0);
    // Its GPU back: a process of it says ready, and it is back in service.
    fs.rmSync(marker);
    await eventually(() => rt.status().counters.devices[0]?.workers === 2, 'worker 0 back in service', 20_000);
    expect(log).toContain('[device gpu/0] back in service');
  }, 60_000);

  it('a worker whose crashes put its next process off for a second or more is out of service until one is ready: it took the next item and held it through the backoff while the other worker idled', async () => {
    const { rt, log } = setup({ command: 'python3', args: [PY] }, { workers: 2, retries: 8 });
    // Every item worker 0 takes ends its process; its restarts back off 250 ms, 500 ms, then 1 s.
    for (let j = 0; !log.some((l) => l.includes('[device gpu/0] its processes keep failing')); j++) {
      if (j === 10) throw new Error(`worker 0 was never taken out of service:\n${log.join('\n')}`);
      const outs = (await rt.submit(spec(`crashy-${j}`, 4), { mode: 'exit-on-worker', worker: 0 })) as { worker: string }[];
      expect(outs.map((o) => o.worker)).toEqual(Array(4).fill('1'));
    }
    expect(log.join('\n')).toMatch(/\[device gpu\/0\] its processes keep failing: the next starts in \d\.\d s: taken out of service \(its items go to the other workers\) until one is ready/);
    expect(rt.status().counters.devices[0]?.workers).toBe(1);
    // Meanwhile the other worker runs every item at once (before, one waited the backoff out on worker 0).
    const outs = (await rt.submit(spec('meanwhile', 6), { mode: 'exit-on-worker', worker: 0 })) as { worker: string }[];
    expect(outs.map((o) => o.worker)).toEqual(Array(6).fill('1'));
    // Its next process says ready: back in service.
    await eventually(() => rt.status().counters.devices[0]?.workers === 2, 'worker 0 back in service', 20_000);
    expect(log).toContain('[device gpu/0] back in service');
    expect(rt.engine.budget.used).toBe(0);
  }, 60_000);

  it('a worker that cannot start stays out of service while the other backs off (it was put back in service, and items waited on it)', async () => {
    // Worker 1's processes end at start (its GPU gone); every item worker 0 takes ends its process.
    const script = `if [ "$STOKER_WORKER" = 1 ]; then echo "cannot open /dev/nvidia1" >&2; exit 5; fi; exec python3 "${PY}"`;
    const { rt, log } = setup({ command: 'sh', args: ['-c', script] }, { workers: 2, retries: 0 });
    await eventually(() => log.some((l) => l.includes('[device gpu/1] its processes keep ending before they are ready: taken out of service')), 'worker 1 out of service', 20_000);
    for (let j = 0; j < 10 && !log.some((l) => /\[device gpu\/0\] it exited \(code 3\): starting it again in (1000|2000|4000) ms/.test(l)); j++) {
      await failure(rt.submit(spec(`poison-${j}`), { mode: 'exit-on-worker', worker: 0 }));
    }
    await new Promise((r) => setImmediate(r));
    expect(log.join('\n')).not.toContain('[device gpu/1] every worker of the device is being started again');
    // Worker 0, backing off, is the one that can run: in service; worker 1 is still out.
    expect(rt.status().counters.devices[0]?.workers).toBe(1);
  }, 60_000);

  it('a burst of stderr lines is logged up to 200 in 10 s, the rest counted (20,000 lines flooded the server log)', async () => {
    const { rt, log } = setup({ command: 'python3', args: [PY] });
    await expect(rt.submit(spec('ch'), { mode: 'chatter' })).resolves.toEqual(['said']);
    // stderr is its own pipe: wait for the last line to have come (it is counted, not logged).
    await new Promise((r) => setTimeout(r, 500));
    const chatter = log.filter((l) => l.startsWith('[device gpu/0] chatter '));
    expect(chatter).toHaveLength(200);
    expect(chatter[0]).toBe('[device gpu/0] chatter 0');
    // The count is said once the 10 s are over, with no next line (it waited two minutes for one).
    await eventually(() => log.includes('[device gpu/0] 800 more stderr lines in the last 10 s were not logged'), 'the count of the lines not logged', 15_000);
  }, 30_000);

  it('print() in the device goes to the log with the worker prefix, not into the protocol', async () => {
    const { rt, log } = setup({ command: 'python3', args: [PY] });
    await expect(rt.submit(spec('pr'), { mode: 'print' })).resolves.toEqual(['printed']);
    // stderr is its own pipe: its line may arrive after the result.
    await eventually(() => log.includes('[device gpu/0] hello from the device 0'), 'the printed line in the log');
  });

  it('a process that hangs past deviceTimeoutMs is ended (with onWithdraw "finish" too: a timeout may be a hang); once retries are spent the job fails naming the timeout', async () => {
    // (1.5 s: a python3 that starts slowly on a loaded machine must have the step before it times out.)
    const { rt, log } = setup({ command: 'python3', args: [PY], onWithdraw: 'finish' }, { retries: 1, deviceTimeoutMs: 1500 });
    const e = await failure(rt.submit(spec('h1'), { mode: 'hang' }));
    expect(e.code).toBe('E_DEVICE_FAILED');
    expect(e.message).toMatch(/failed on device 0: worker \d: no answer within the device timeout, 1500 ms \(the runtime's deviceTimeoutMs; engine.deviceTimeoutS in a service config\)/);
    // Ended, started again, and healthy.
    expect(log.join('\n')).toMatch(/the step was withdrawn/);
    await expect(rt.submit(spec('h2'), { mode: 'ok' })).resolves.toHaveLength(1);
    expect(rt.engine.budget.used).toBe(0);
  });

  it('past deviceTimeoutMs, the next item waits for the ended process and runs on the new one (it was refused as "already busy")', async () => {
    // One worker, two partitions: the first hangs, the second waits prepared; when the first times
    // out the second goes to the worker at once, while its process is still being ended.
    const marker = path.join(os.tmpdir(), `stoker-hang-${process.pid}-${Date.now()}`);
    closers.push(async () => fs.rmSync(marker, { force: true }));
    const failed: string[] = [];
    // (5 s: the restarted python3 must have the second item done before it times out, on a loaded machine too.)
    const { rt } = setup({ command: 'python3', args: [PY] }, { retries: 1, deviceTimeoutMs: 5000, onStep: (e) => void (e.type === 'deviceFailed' && failed.push(e.reason)) });
    const out = (await rt.submit(spec('t2', 2), { mode: 'hang-once', marker })) as { partition: number }[];
    expect(out.map((o) => o.partition)).toEqual([0, 1]);
    expect(failed).toEqual([expect.stringMatching(/no answer within the device timeout/)]);
  });

  it('a step that waited for its process to be ready (a model loading) is timed from when it is sent: the wait and the step each within deviceTimeoutMs, not both together', async () => {
    // A 2 s start and a 1.5 s step, a 3 s timeout: together past it (the step failed, timed out,
    // while it ran), each within it (the 1 s left for the wait covers python3's own start).
    const failed: string[] = [];
    const { rt } = setup({ command: 'python3', args: [PY], env: { START_DELAY_S: '2' } }, { retries: 0, deviceTimeoutMs: 3000, onStep: (e) => void (e.type === 'deviceFailed' && failed.push(e.reason)) });
    const out = (await rt.submit(spec('slow-start'), { mode: 'sleep', holdMs: 1500 })) as { partition: number }[];
    expect(out.map((o) => o.partition)).toEqual([0]);
    expect(failed).toEqual([]);
  });

  it('a prepared value JSON would change (a Map, NaN) or cannot hold (a BigInt) fails its job at once, saying where — it reached the device as {} and null', async () => {
    const values: Record<string, unknown> = { map: { m: new Map([['a', 1]]) }, nan: { score: NaN }, bigint: { n: 1n } };
    const rt = runtimeOver<{ v: string }>(new ProcessDevice({ name: 'gpu', workers: 1, command: 'python3', args: [PY], readyTimeoutMs: 10_000, log: () => undefined }), async (t) => ({ meta: values[t.input.v] }), { workers: 1, retries: 1 });
    closers.push(() => rt.close(1000));
    const said = async (v: string) => (await failure(rt.submit(spec(v), { v }))).message;
    expect(await said('map')).toMatch(/cannot be sent to the device as JSON: it holds a Map at "m", which JSON would store as \{\}/);
    expect(await said('nan')).toMatch(/cannot be sent to the device as JSON: it holds NaN at "score", which JSON would store as null/);
    expect(await said('bigint')).toMatch(/cannot be sent to the device as JSON: it holds a BigInt at "n", which JSON cannot hold: return a number, or a string \(String\(n\)\)$/);
    expect(rt.status().counters.dispatched).toBe(3);
  });

  it('a step withdrawn while the process starts is dropped without ending the process; the next step runs', async () => {
    const { rt, log } = setup({ command: 'python3', args: [PY], env: { START_DELAY_S: '0.8' } }, { retries: 0 });
    const first = rt.submit(spec('w1'), { mode: 'ok' });
    const settled = first.catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 200));
    rt.cancel('w1');
    expect(((await settled) as StokerError).code).toBe('E_CANCELLED');
    const [out] = (await rt.submit(spec('w2'), { mode: 'ok' })) as { partition: number }[];
    expect(out?.partition).toBe(0);
    // The one process started once: the second step waited for it, not for a restart (no wall-clock
    // bound: on a loaded machine that measured the load).
    expect(log.filter((l) => l.includes('starting it again'))).toEqual([]);
  });

  it('onWithdraw "finish": a step withdrawn with its job is let finish and its output dropped — the process is not started again, and the next item runs on it after; "end" (the default) ends it', async () => {
    for (const onWithdraw of ['finish', 'end'] as const) {
      const { rt, log } = setup({ command: 'python3', args: [PY], onWithdraw }, { retries: 0 });
      const [before] = (await rt.submit(spec(`a-${onWithdraw}`), { mode: 'ok' })) as { pid: number }[];
      const slow = rt.submit(spec(`s-${onWithdraw}`), { mode: 'sleep', holdMs: 700 }).catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 250));
      rt.cancel(`s-${onWithdraw}`);
      expect(((await slow) as StokerError).code).toBe('E_CANCELLED');
      const [after] = (await rt.submit(spec(`b-${onWithdraw}`), { mode: 'ok' })) as { pid: number; partition: number; job: string }[];
      // (Its own result, not the dropped step's: only "ok" answers with the job.)
      expect(after).toMatchObject({ partition: 0, job: `b-${onWithdraw}` });
      if (onWithdraw === 'finish') {
        expect(after?.pid).toBe(before?.pid);
        expect(log.filter((l) => l.includes('starting it again'))).toEqual([]);
      } else {
        expect(after?.pid).not.toBe(before?.pid);
        expect(log).toContainEqual(expect.stringMatching(/the step was withdrawn .*: starting it again/));
      }
    }
  });

  it('onWithdraw "finish": a withdrawn step that hangs is ended past finishTimeoutMs (it held its worker for good), and the next item runs on the new process', async () => {
    const { rt, log } = setup({ command: 'python3', args: [PY], onWithdraw: 'finish', finishTimeoutMs: 800 }, { retries: 0 });
    // (The process ready first: a step withdrawn while it starts is not sent at all.)
    await rt.submit(spec('warm'), { mode: 'ok' });
    const hung = rt.submit(spec('h-finish'), { mode: 'hang' }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 400));
    rt.cancel('h-finish');
    expect(((await hung) as StokerError).code).toBe('E_CANCELLED');
    const [after] = (await rt.submit(spec('n-finish'), { mode: 'ok' })) as { job: string }[];
    expect(after?.job).toBe('n-finish');
    expect(log).toContainEqual(expect.stringMatching(/a withdrawn step did not finish within 0\.8 s \(finishTimeoutS\): starting it again/));
  });

  it('two workers sharing one GPU behind a lock: measured capacity matches the real completion rate within 5 %', async () => {
    const lock = path.join(os.tmpdir(), `stoker-lock-${process.pid}-${Date.now()}`);
    closers.push(async () => fs.rmSync(lock, { force: true }));
    const { rt } = setup({ command: 'python3', args: [PY] }, { workers: 2 });
    const holdMs = 300;
    // At each completion: the time, and the device's busy-time counters.
    const seen: { t: number; busyMs: number; completions: number }[] = [];
    const jobs = Array.from({ length: 20 }, (_, i) =>
      rt.submit(spec(`l${i}`), { mode: 'lock', lock, holdMs }).then((o) => {
        const c = rt.status().counters.devices[0];
        seen.push({ t: performance.now(), busyMs: c?.busyMs ?? 0, completions: c?.completions ?? 0 });
        return o;
      }),
    );
    const outs = (await Promise.all(jobs)) as { waitedNs: number }[][];
    // The steady part, while both workers contend: without the first completions (the processes
    // start) and the last ones (one worker is out of work, so its item does not wait).
    const [a, b] = [seen[4], seen[seen.length - 3]] as [(typeof seen)[number], (typeof seen)[number]];
    const realRate = (b.completions - a.completions) / ((b.t - a.t) / 1000);
    const measured = 2 / ((b.busyMs - a.busyMs) / (b.completions - a.completions) / 1000);
    console.log(`shared lock: real ${realRate.toFixed(2)} items/s, measured capacity ${measured.toFixed(2)} items/s (ratio ${(measured / realRate).toFixed(3)}); the lock alone allows ${(1000 / holdMs).toFixed(2)}/s`);
    expect(Math.abs(measured / realRate - 1)).toBeLessThan(0.05);
    // Kernel time alone (the hold, without the lock wait) would claim twice the real rate.
    const waitedMs = outs.flat().reduce((a, o) => a + o.waitedNs / 1e6, 0) / outs.length;
    expect(waitedMs).toBeGreaterThan(holdMs / 2);
    expect(2 / (holdMs / 1000) / realRate).toBeGreaterThan(1.8);
  });
});

describe('a Node process device (stoker/worker)', () => {
  it('runs items and sends console.log to the log', async () => {
    const { rt, log } = setup({ command: process.execPath, args: [path.join(FIXTURES, 'node-device.mjs')] }, { workers: 2 });
    const out = (await rt.submit(spec('n1', 2), { mode: 'ok' })) as { partition: number; prepared: unknown; kind: string }[];
    expect(out).toMatchObject([
      { partition: 0, prepared: { p: 0, tag: 'prep' }, kind: 'k' },
      { partition: 1, prepared: { p: 1, tag: 'prep' }, kind: 'k' },
    ]);
    const bytes = (await rt.submit(spec('n2'), { mode: 'bytes', bytes: 3 })) as Uint8Array[];
    expect([...(bytes[0] as Uint8Array)]).toEqual([2, 1, 0]);
    await eventually(() => log.some((l) => /^\[device gpu\/[01]\] logged by the node device [01]$/.test(l)), 'the logged line');
    // process.stdout.write too (it failed the item: "a malformed frame").
    await expect(rt.submit(spec('n3'), { mode: 'stdout' })).resolves.toMatchObject([{ partition: 0 }]);
    await eventually(() => log.some((l) => /^\[device gpu\/[01]\] progress of 0: 50%$/.test(l)), 'the written line');
  });

  it('an error with retry: false fails its job at once, the retries unspent', async () => {
    const steps: EngineEvent[] = [];
    const { rt } = setup({ command: process.execPath, args: [path.join(FIXTURES, 'node-device.mjs')] }, { retries: 2, onStep: (e) => steps.push(e) });
    const e = await failure(rt.submit(spec('final'), { mode: 'final' }));
    expect(e.message).toBe('job final: partition 0 failed on device 0: gpu/0: shape (3,) is not (4,)');
    expect(steps.filter((s) => s.type === 'deviceFailed')).toMatchObject([{ final: true }]);
  });
});

describe('a busy time in ms where ns are due', () => {
  it('is said once, with the unit to use (the pacer took a device of 10 items/s for 353,389); the outputs stand', async () => {
    const { rt, log } = setup({ command: 'python3', args: [BAD, 'busy-ms'] }, { retries: 0 });
    expect(await rt.submit(spec('ms', 3), { mode: 'ok' })).toEqual([1, 1, 1]);
    const said = log.filter((l) => l.includes('report ns'));
    expect(said).toEqual([expect.stringMatching(/^\[device gpu\/0\] busyNs 150 for a step that was out \d+ ms: 0.000150 ms of work — report ns \(time\.perf_counter_ns\(\) around the work/)]);
  });
});

describe('credentials a process prints', () => {
  it('read *** in its logged stderr and in the failures that quote it (a process that printed its argv and environment put its API key into job errors and logs)', async () => {
    const script = 'import os, sys; sys.stderr.write("argv %s env %s short %s\\n" % (sys.argv, os.environ["HF_TOKEN"], os.environ["MY_KEY"])); sys.exit(2)';
    const { rt, log } = setup({ command: 'python3', args: ['-c', script, '--api-key=sk-s3cret-A1', '--token', 'tk-s3cret-B2'], env: { HF_TOKEN: 'hf_s3cret_C3', MY_KEY: 'k1' } }, { retries: 0 });
    const e = await failure(rt.submit(spec('creds'), { mode: 'ok' }));
    const said = [e.message, ...log].join('\n');
    expect(said).toMatch(/its last stderr: argv \[.*'--api-key=\*\*\*', '--token', '\*\*\*'\] env \*\*\* short k1/);
    expect(said).not.toMatch(/s3cret/);
  });

  it('read *** in the error a process sends for an item (an exception quoting its key went into the job error)', async () => {
    // (The fixture's "fail" mode raises ValueError("no such tensor"): given as a credential, it is one.)
    const { rt } = setup({ command: 'python3', args: [PY], env: { HF_TOKEN: 'no such tensor' } }, { retries: 0 });
    const e = await failure(rt.submit(spec('fails'), { mode: 'fail' }));
    expect(e.message).toMatch(/gpu\/0: ValueError: \*\*\*/);
  });
});

describe('processes that break the protocol', () => {
  const cases: [how: string, reason: RegExp][] = [
    ['never-ready', /did not say ready within 0.5 s/],
    ['exit-at-start', /it exited \(code 7\); its last stderr: CUDA error: no device found/],
    ['garbage', /malformed frame: a frame header length of \d+ bytes \(as text: "Loading model weights... done\\n"…\)/],
    ['oversized', /it wrote an output over maxFrameBytes: a frame payload of 2147483648 bytes is over the 1048576-byte limit: raise \[device\.process\] maxFrameBytes, or return less/],
    ['wrong-id', /where the result of item \d+ was due: its "id" must be the number \d+, the item's/],
    // A device written from the protocol's docs alone (a language with no helper), and its mistakes.
    ['little-endian', /a frame header length of \d+ bytes, \d+ read little-endian, and a JSON header of \d+ bytes after it: write the length as 4 bytes big-endian/],
    ['protocol-2', /it speaks protocol 2, and this stoker protocol 1/],
    ['bytes-no-length', /"bytes": true needs "payloadBytes", the number of bytes that follow the header \(0 for empty bytes\)/],
    ['ok-string', /"ok" must be true or false \(got "true"\)/],
    ['no-type', /where the result of item \d+ was due: its "type" must be "result"/],
    ['bad-utf8', /a frame header is not UTF-8/],
    ['huge-header', /it wrote an output too large for JSON: a frame header of \d+ bytes is over the 67108864 bytes a header carries: return large data as bytes/],
  ];
  it.each(cases)('%s: the item fails with the reason, the process is started again', async (how, reason) => {
    // A short ready timeout only where that is the fault: a python3 that starts slowly on a loaded
    // machine must not read as never ready where another fault is meant.
    const { rt, log } = setup({ command: 'python3', args: [BAD, how], readyTimeoutMs: how === 'never-ready' ? 500 : 10_000, maxFrameBytes: 2 ** 20 }, { retries: 1 });
    const e = await failure(rt.submit(spec(`b-${how}`), { mode: 'ok' }));
    expect(e.code).toBe('E_DEVICE_FAILED');
    expect(e.message).toMatch(/gpu\/0 \(python3\)/);
    expect(e.message).toMatch(reason);
    // Two attempts (the retry), so at least two restarts were announced — but an output over the
    // limit would come again: its job fails at once (it was retried, on a restarted process).
    const attempts = how === 'oversized' || how === 'huge-header' ? 1 : 2;
    if (attempts === 1) expect(e.message).not.toMatch(/after \d+ attempts/);
    else expect(e.message).toMatch(/\(after 2 attempts\)$/);
    expect(log.filter((l) => l.includes('starting it again')).length).toBeGreaterThanOrEqual(attempts);
    expect(rt.engine.budget.used).toBe(0);
  });

  it('a program that fails at start: the failure quotes the line naming the error, not stack frames, and the first such line where more came after it', async () => {
    const missing = setup({ command: process.execPath, args: [path.join(FIXTURES, 'no-such-device.mjs')] }, { retries: 0 });
    const e = await failure(missing.rt.submit(spec('nm'), { mode: 'ok' }));
    expect(e.message).toMatch(/it exited \(code 1\); its last stderr: .*Error: Cannot find module '[^']*no-such-device\.mjs'/);
    expect(e.message).not.toMatch(/\|\s+at /);
    const noisy = setup({ command: process.execPath, args: ['-e', "console.error('Error: no weights in /models/m.bin'); for (let i = 0; i < 20; i++) console.error('cleanup ' + i); process.exit(3)"] }, { retries: 0 });
    const f = await failure(noisy.rt.submit(spec('nz'), { mode: 'ok' }));
    expect(f.message).toMatch(/it exited \(code 3\); its stderr first said: Error: no weights in \/models\/m\.bin; its last stderr: cleanup 12 \| .* \| cleanup 19/);
  });

  it("a failure quotes what the process wrote for its item, not an earlier item's lines", async () => {
    const marker = path.join(os.tmpdir(), `stoker-quiet-${process.pid}-${Date.now()}`);
    closers.push(async () => fs.rmSync(marker, { force: true }));
    const { rt, log } = setup({ command: 'python3', args: [PY] }, { retries: 0 });
    await expect(rt.submit(spec('pr'), { mode: 'print' })).resolves.toEqual(['printed']);
    await eventually(() => log.includes('[device gpu/0] hello from the device 0'), 'the printed line in the log');
    const e = await failure(rt.submit(spec('quiet'), { mode: 'exit-once', marker }));
    expect(e.message).toMatch(/it exited \(code 3\)/);
    expect(e.message).not.toContain('hello from the device');
  });

  it('a command that does not exist says so', async () => {
    const { rt } = setup({ command: 'no-such-program-xyz' }, { retries: 0 });
    const e = await failure(rt.submit(spec('nx'), { mode: 'ok' }));
    expect(e.message).toMatch(/could not be started: spawn no-such-program-xyz ENOENT — check the device's command/);
  });

  it('a program that keeps ending before it is ready: steps fail at once with why, not after restarts backed off to 30 s', async () => {
    // python3 with a script that is not there exits 2 at once, every time. The first job's two
    // attempts each wait for a start (0, then 250 ms of backoff); after those two in a row the
    // next job fails at once, quoting the program's own stderr.
    const { rt } = setup({ command: 'python3', args: ['/nonexistent/device.py'] }, { retries: 1 });
    const first = await failure(rt.submit(spec('u1'), { mode: 'ok' }));
    expect(first.message).toMatch(/it exited \(code 2\).*can't open file/);
    const second = await failure(rt.submit(spec('u2'), { mode: 'ok' }));
    expect(second.message).toMatch(/can't open file.* — it ended before it was ready \d+ times in a row \(it is started again in the background\): check the device's command, args and cwd/);
  });
});

async function eventually(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}


describe('batches on a process device', () => {
  /** A one-worker batching Runtime (up to 4 items a batch) over a ProcessDevice's runBatch. */
  function batching(command: string, args: string[], sizes: number[] = [], failed: ItemFailure[] = []) {
    const dev = new ProcessDevice({ name: 'gpu', workers: 1, command, args, readyTimeoutMs: 10_000, log: () => undefined });
    const rt = batchingRuntimeOver<Record<string, unknown>>(dev, async (t) => ({ meta: { p: t.partition } }), 4, (e, cmds) => {
      cmds.forEach((c) => c.type === 'startBatch' && sizes.push(c.items.length));
      if (e.type === 'batchDone') failed.push(...(e.failed ?? []));
    });
    closers.push(() => rt.close(1000));
    return rt;
  }

  for (const [name, command, args] of [
    ['Python (handle_batch)', 'python3', [path.join(FIXTURES, 'py-batch-device.py')]],
    ['Node (handleBatch)', process.execPath, [path.join(FIXTURES, 'node-batch-device.mjs')]],
  ] as const) {
    it(`${name}: each item's output to its own partition; a failed item fails only its job`, async () => {
      const rt = batching(command, [...args]);
      const [good, bad] = await Promise.all([rt.submit(spec('g', 10), {}), failure(rt.submit(spec('b', 3), { failAt: 1 }))]);
      const outs = good as { p: number; size: number }[];
      expect(outs.map((o) => o.p)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      // Items waited for the worker: some ran together.
      expect(Math.max(...outs.map((o) => o.size))).toBeGreaterThan(1);
      // The worker named, as for a single item.
      expect(bad.message).toMatch(/partition 1 failed on device 0: gpu\/0: .*bad partition 1/);
      const d = rt.status().counters.devices[0];
      expect(d?.batch?.items).toBe(13);
      expect(d?.batch?.batches).toBeLessThan(13);
      expect(rt.engine.budget.used).toBe(0);
    });

    it(`${name}: an item's error with retry false is final (its job would not retry it)`, async () => {
      const failed: ItemFailure[] = [];
      const rt = batching(command, [...args], [], failed);
      const bad = await failure(rt.submit(spec('f', 3), { finalAt: 1 }));
      expect(bad.message).toMatch(/partition 1 failed on device 0: .*bad input in partition 1$/);
      expect(failed).toMatchObject([{ reason: expect.stringMatching(/bad input in partition 1$/), final: true }]);
    });
  }

  it('an item whose prepared value JSON would change (an Int32Array inside it) fails alone at once, saying where; the others of its batch run', async () => {
    const dev = new ProcessDevice({ name: 'gpu', workers: 1, command: 'python3', args: [path.join(FIXTURES, 'py-batch-device.py')], readyTimeoutMs: 10_000, log: () => undefined });
    const failed: ItemFailure[] = [];
    const rt = batchingRuntimeOver<{ bad?: boolean }>(dev, async (t) => ({ meta: t.input.bad && t.partition === 2 ? { p: t.partition, ids: Int32Array.of(7, 8, 9) } : { p: t.partition } }), 4, (e) => void (e.type === 'batchDone' && failed.push(...(e.failed ?? []))), 1);
    closers.push(() => rt.close(1000));
    const [good, bad] = await Promise.all([rt.submit(spec('ok', 6), {}), failure(rt.submit(spec('typed', 4), { bad: true }))]);
    expect((good as { p: number }[]).map((o) => o.p)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(bad.message).toMatch(/partition 2 failed on device 0: the prepared value \(what prepare\(\) returned\) cannot be sent to the device as JSON: it holds bytes at "ids": bytes may only be the whole value/);
    expect(bad.message).not.toMatch(/after 2 attempts/);
    expect(failed).toMatchObject([{ final: true }]);
  });

  it('a batch that raises: its items run again alone, and their job is done', async () => {
    const sizes: number[] = [];
    const rt = batching('python3', [path.join(FIXTURES, 'py-batch-device.py')], sizes);
    const outs = (await rt.submit(spec('r', 6), { raiseBatch: true })) as { p: number; size: number }[];
    expect(outs.map((o) => o.p)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(outs.every((o) => o.size === 1)).toBe(true);
    // A batch of several did run (and raised): its items were started again, alone.
    expect(Math.max(...sizes)).toBeGreaterThan(1);
    expect(sizes.reduce((a, b) => a + b, 0)).toBeGreaterThan(6);
  });
});

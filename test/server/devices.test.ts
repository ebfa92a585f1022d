/**
 * Process devices behind `stoker serve` (real server and device processes): the embeddings
 * example with its numpy device, the device's stderr in the server's log, and kinds that do not
 * fit a process device refused at start.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/cluster/redis-server.js';
import { Journal } from '../../src/server/journal.js';
import { CLI, http, metricValue, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess } from './helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const EXAMPLE = path.join(ROOT, 'examples/embeddings');

describe('the embeddings example on a Python process device (numpy)', () => {
  let server: ServerProcess;
  let dir: string;
  beforeAll(async () => {
    dir = tempDataDir();
    server = await startServer(dir, ['--config', path.join(EXAMPLE, 'python-device.toml')]);
  });
  afterAll(async () => {
    await server?.stop();
    removeDir(dir);
  });

  it('embeds through the Python workers: the vectors of embed() to float32 rounding', async () => {
    expect(server.output()).toMatch(/2 process \(python3 embed_device\.py\) device workers; kinds embed\b/);
    const texts = ['a cat sat on the mat', 'the dog barked', 'stoker keeps accelerators fed', 'THE DOG BARKED', 'zk proofs'];
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'py1', kind: 'embed', input: { texts, batch: 2, dim: 16 } })).status).toBe(202);
    const res = await fetch(new URL('/v1/jobs/py1/result?wait=60s', server.url), { headers: { accept: 'application/octet-stream' } });
    expect(res.status).toBe(200);
    const got = new Float32Array(await res.arrayBuffer());
    const { embed } = (await import(pathToFileURL(path.join(EXAMPLE, 'embed-kind.mjs')).href)) as { embed(t: string[], o: { dim: number }): Float32Array };
    const want = embed(texts, { dim: 16 });
    expect(got.length).toBe(want.length);
    for (let i = 0; i < want.length; i++) expect(Math.abs((got[i] as number) - (want[i] as number))).toBeLessThan(1e-6);
    const status = await http(server.url, 'GET', '/v1/status');
    expect(status.body.devices[0]).toMatchObject({ kind: 'process', completions: 3 });
    expect(status.body.devices[0].busyS).toBeGreaterThan(0);
  });
});

describe('an HTTP device whose endpoint is not there', () => {
  it('is said at start, shown unreachable in /v1/status and stoker status, and /readyz answers 503 naming it (it read ready, every worker idle)', async () => {
    const port = await freePort();
    const data = tempDataDir();
    const s = await startServer(data, ['--config', path.join(ROOT, 'examples/http-device/http-device.toml')], { STOKER_DEVICE_HTTP: JSON.stringify({ url: `http://127.0.0.1:${port}/embed` }) });
    try {
      const why = new RegExp(`^http://127\\.0\\.0\\.1:${port}/embed is unreachable \\(ECONNREFUSED\\) since \\d{4}-`);
      await waitUntil(async () => s.output().includes('is unreachable (ECONNREFUSED): steps wait for it'), 10_000, 'the start-up line');
      expect((await http(s.url, 'GET', '/v1/status')).body.devices[0].unreachable).toMatch(why);
      const ready = await http(s.url, 'GET', '/readyz');
      expect(ready.status).toBe(503);
      // (Public: no URL.)
      expect(ready.body.why).toEqual([expect.stringMatching(/^device default: its endpoint is unreachable \(ECONNREFUSED\) since \d{4}-/)]);
      expect(metricValue((await http(s.url, 'GET', '/metrics')).body as unknown as string, 'stoker_device_unreachable', { device: 'default' })).toBe(1);
      const st = await new Promise<string>((resolve) => execFile(process.execPath, [CLI, 'status', '--server', s.url], { timeout: 20_000 }, (_e, out) => resolve(out)));
      expect(st).toMatch(new RegExp(`device default unreachable: http://127\\.0\\.0\\.1:${port}/embed is unreachable \\(ECONNREFUSED\\)`));
    } finally {
      await s.stop();
      removeDir(data);
    }
  });
});

describe('a drain with the HTTP endpoint gone', () => {
  it('does not wait out shutdownTimeoutS for work only the unreachable endpoint could run: SIGTERM stops at once, the job resumes on the next start (a model server stopped first held the stop 30 s)', async () => {
    const port = await freePort();
    const data = tempDataDir();
    const env = { STOKER_DEVICE_HTTP: JSON.stringify({ url: `http://127.0.0.1:${port}/embed` }), STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '30' };
    const s = await startServer(data, ['--config', path.join(ROOT, 'examples/http-device/http-device.toml')], env);
    try {
      expect((await http(s.url, 'POST', '/v1/jobs', { id: 'stuck', kind: 'embed', input: { texts: ['a', 'b', 'c'] } })).status).toBe(202);
      await waitUntil(async () => ((await http(s.url, 'GET', '/v1/jobs/stuck')).body.partitionCounts?.['on-device'] ?? 0) > 0, 20_000, 'a step sent to the gone endpoint');
      const t0 = Date.now();
      expect(await s.stop()).toBe(0);
      // (30 s of shutdownTimeoutS; a drain that ends as its last step fails to connect takes a second or two.)
      expect(Date.now() - t0).toBeLessThan(20_000);
      // Said as that, not as a timeout that ran out (it said "still in flight when server.shutdownTimeoutS (30 s) ran out").
      expect(s.output()).toMatch(/stoker serve: stopped; \d+ partitions? that only devices whose endpoints refuse connections could run (was|were) withdrawn; /);
    } finally {
      if (s.child.exitCode === null) await s.stop();
    }
    const journal = Journal.open(data);
    try {
      expect(journal.get('stuck')?.state).toBe('running');
    } finally {
      journal.close();
      removeDir(data);
    }
  });
});

describe('the http-device example: the model behind an HTTP endpoint', () => {
  it('embeds through embed-server.mjs: the vectors of embed()', async () => {
    const port = await freePort();
    const model = spawn(process.execPath, [path.join(ROOT, 'examples/http-device/embed-server.mjs'), '--port', String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const data = tempDataDir();
    try {
      await new Promise<void>((resolve) => model.stdout.on('data', (b: Buffer) => b.toString().includes('listening') && resolve()));
      // The example's config, its url pointed at this port (an environment variable replaces the table).
      const s = await startServer(data, ['--config', path.join(ROOT, 'examples/http-device/http-device.toml')], { STOKER_DEVICE_HTTP: JSON.stringify({ url: `http://127.0.0.1:${port}/embed`, timeoutS: 30 }) });
      try {
        expect(s.output()).toContain(`2 http (http://127.0.0.1:${port}/embed) device workers; kinds embed`);
        const texts = ['a cat sat on the mat', 'the dog barked', 'stoker keeps accelerators fed'];
        await http(s.url, 'POST', '/v1/jobs', { id: 'h1', kind: 'embed', input: { texts, batch: 2 } });
        const res = await fetch(new URL('/v1/jobs/h1/result?wait=60s', s.url), { headers: { accept: 'application/octet-stream' } });
        const got = new Float32Array(await res.arrayBuffer());
        const { embed } = (await import(pathToFileURL(path.join(EXAMPLE, 'embed-kind.mjs')).href)) as { embed(t: string[]): Float32Array };
        expect([...got]).toEqual([...embed(texts)]);
        expect((await http(s.url, 'GET', '/v1/status')).body.devices[0]).toMatchObject({ kind: 'http', completions: 2 });
      } finally {
        await s.stop();
      }
    } finally {
      model.kill();
      removeDir(data);
    }
  });
});

describe('a process device in the server', () => {
  let dir: string;
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-devices-'));
  });
  afterAll(() => removeDir(dir));

  const config = (extra = '') => {
    const file = path.join(dir, `c${Math.random().toString(36).slice(2)}.toml`);
    fs.writeFileSync(file, `[device]\nworkers = 1\n[device.process]\ncommand = "python3"\nargs = [${JSON.stringify(path.join(ROOT, 'test/fixtures/devices/py-device.py'))}]\n${extra}`);
    return file;
  };

  it("logs the device's stderr prefixed with the worker, and answers with its output", async () => {
    const data = tempDataDir();
    const s = await startServer(data, ['--config', config(), '--kind', path.join(ROOT, 'test/fixtures/kinds/remote-kind.mjs')]);
    try {
      await http(s.url, 'POST', '/v1/jobs', { id: 'r1', kind: 'remote', partitions: 2, input: { mode: 'print' } });
      const r = await http(s.url, 'GET', '/v1/jobs/r1/result?wait=30s');
      expect(r.body).toMatchObject({ state: 'done', result: ['printed', 'printed'] });
      await waitUntil(async () => (/\[device default\/0\] hello from the device 1/.test(s.output()) ? true : undefined), 5000, 'the device line in the log');
      await http(s.url, 'POST', '/v1/jobs', { id: 'r2', kind: 'remote', partitions: 1 });
      const ok = await http(s.url, 'GET', '/v1/jobs/r2/result?wait=30s');
      expect(ok.body.result).toMatchObject([{ partition: 0, prepared: { from: 'prepare', partition: 0 }, kind: 'remote', job: 'r2' }]);
    } finally {
      await s.stop();
      removeDir(data);
    }
  });

  it('hands large prepared data over by file, removed when the partition ends (also after the worker crashed) and at start', async () => {
    const shm = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-shm-'));
    const data = tempDataDir();
    // What a crashed earlier run of this data dir left behind.
    const folder = path.join(shm, `stoker-handoff-${createHash('sha256').update(data).digest('hex').slice(0, 16)}`);
    fs.mkdirSync(folder);
    fs.writeFileSync(path.join(folder, 'stale.bin'), 'x');
    const marker = path.join(dir, 'exit-marker');
    const s = await startServer(data, ['--config', config(`handoffDir = ${JSON.stringify(shm)}\nhandoffMinBytes = 1000\n`), '--kind', path.join(ROOT, 'test/fixtures/kinds/remote-kind.mjs')]);
    try {
      expect(fs.readdirSync(folder)).toEqual([]);
      const sum = (n: number) => Array.from({ length: n }, (_, i) => i % 251).reduce((a, b) => a + b, 0);
      await http(s.url, 'POST', '/v1/jobs', { id: 'big', kind: 'remote', partitions: 2, input: { mode: 'inspect', size: 5000 } });
      await http(s.url, 'POST', '/v1/jobs', { id: 'small', kind: 'remote', partitions: 1, input: { mode: 'inspect', size: 10 } });
      expect((await http(s.url, 'GET', '/v1/jobs/big/result?wait=30s')).body.result).toEqual([{ byPath: true, n: 5000, sum: sum(5000) }, { byPath: true, n: 5000, sum: sum(5000) }]);
      expect((await http(s.url, 'GET', '/v1/jobs/small/result?wait=30s')).body.result).toEqual([{ byPath: false, n: 10, sum: sum(10) }]);
      // Bytes are bytes however prepare returns them: an ArrayBuffer, another typed array.
      for (const as of ['arraybuffer', 'uint16']) {
        await http(s.url, 'POST', '/v1/jobs', { id: `as-${as}`, kind: 'remote', partitions: 1, input: { mode: 'inspect', size: 10, as } });
        expect((await http(s.url, 'GET', `/v1/jobs/as-${as}/result?wait=30s`)).body.result).toEqual([{ byPath: false, n: 10, sum: sum(10) }]);
      }
      expect(fs.readdirSync(folder)).toEqual([]);
      // The worker dies holding a handoff file: the item is retried, and no file is left.
      await http(s.url, 'POST', '/v1/jobs', { id: 'crash', kind: 'remote', partitions: 1, input: { mode: 'exit-once', size: 5000, marker } });
      expect((await http(s.url, 'GET', '/v1/jobs/crash/result?wait=30s')).body).toMatchObject({ state: 'done', result: [{ partition: 0 }] });
      expect(fs.readdirSync(folder)).toEqual([]);
    } finally {
      await s.stop();
      removeDir(data);
    }
    expect(fs.existsSync(folder)).toBe(false);
    removeDir(shm);
  });

  it('a kind prepared in batches hands each item its own file', async () => {
    const shm = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-shm-'));
    const data = tempDataDir();
    const kind = `[kinds.remote]\nmodule = ${JSON.stringify(path.join(ROOT, 'test/fixtures/kinds/remote-kind.mjs'))}\n[kinds.remote.prepareBatch]\nmaxItems = 4\nmaxWaitMs = 50\n`;
    const s = await startServer(data, ['--config', config(`handoffDir = ${JSON.stringify(shm)}\nhandoffMinBytes = 1000\n${kind}`)]);
    try {
      const sum = (n: number) => Array.from({ length: n }, (_, i) => i % 251).reduce((a, b) => a + b, 0);
      await http(s.url, 'POST', '/v1/jobs', { id: 'big', kind: 'remote', partitions: 4, input: { mode: 'inspect', size: 5000 } });
      expect((await http(s.url, 'GET', '/v1/jobs/big/result?wait=30s')).body.result).toEqual(Array.from({ length: 4 }, () => ({ byPath: true, n: 5000, sum: sum(5000) })));
      const status = await http(s.url, 'GET', '/v1/status');
      expect(status.body.partitions.prepareBatches.remote.items).toBe(4);
      expect(status.body.partitions.prepareBatches.remote.batches).toBeLessThan(4);
      const folder = fs.readdirSync(shm).find((f) => f.startsWith('stoker-handoff-')) as string;
      expect(fs.readdirSync(path.join(shm, folder))).toEqual([]);
    } finally {
      await s.stop();
      removeDir(data);
    }
    removeDir(shm);
  });

  it('a handoffDir that cannot be used stops the start with exit 2 naming it (nothing left running)', async () => {
    const file = path.join(dir, 'not-a-folder');
    fs.writeFileSync(file, 'x');
    const r = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'serve', '--config', config(`handoffDir = ${JSON.stringify(file)}\n`), '--port', '0', '--data', path.join(dir, 'd2'), '--kind', path.join(ROOT, 'test/fixtures/kinds/remote-kind.mjs')], { timeout: 20_000 }, (err, _out, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
      ),
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/device\.process\.handoffDir: cannot use .*not-a-folder\/stoker-handoff-[0-9a-f]{16} for handoff files: .* — give a memory-backed folder/);
  });

  it('a process device whose processes end before they are ready (a script that is not there) stops the start with exit 2 naming its command; the journal’s unfinished jobs are left to the next start', async () => {
    // A job left unfinished by an earlier run: resumed on a broken device, it would fail for good.
    const data = path.join(dir, 'd3');
    const journal = Journal.open(data);
    journal.insert({ id: 'left', kind: 'remote', priority: 'normal', partitions: 1, input: { mode: 'print' }, deadline: null });
    journal.close();
    const file = path.join(dir, 'broken.toml');
    fs.writeFileSync(file, `[device]\nworkers = 2\n[device.process]\ncommand = "python3"\nargs = [${JSON.stringify(path.join(dir, 'no-such-device.py'))}]\n`);
    const r = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'serve', '--config', file, '--port', '0', '--data', data, '--kind', path.join(ROOT, 'test/fixtures/kinds/remote-kind.mjs')], { timeout: 30_000 }, (err, _out, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
      ),
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error: configuration: device\.process\.command: its processes end before they are ready \(default\/0 \(python3\): it exited \(code 2\); its last stderr: .*no-such-device\.py.*\): check the command, args and cwd$/m);
    expect(r.stderr).not.toContain('listening');
    // One that prints to stdout before serve(): told so, not to check its command.
    const chatty = path.join(dir, 'chatty.py');
    fs.writeFileSync(chatty, 'print("loading the model")\nimport stoker_worker\nstoker_worker.serve(lambda item: 1)\n');
    fs.writeFileSync(file, `[device]\nworkers = 1\n[device.process]\ncommand = "python3"\nargs = [${JSON.stringify(chatty)}]\n`);
    const c = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'serve', '--config', file, '--port', '0', '--data', path.join(dir, 'd4')], { timeout: 30_000 }, (err, _out, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr })),
    );
    expect(c.code).toBe(2);
    expect(c.stderr).toMatch(/as text: "load.*: print nothing to stdout before calling serve\(\)/);
    // One that loads for longer than readyTimeoutS: stoker stopped it, and says so (a trial read "end before they are ready: check the command").
    const slow = path.join(dir, 'slow.py');
    fs.writeFileSync(slow, 'import sys, time\nprint("loading", file=sys.stderr)\ntime.sleep(1000)\n');
    fs.writeFileSync(file, `[device]\nworkers = 1\n[device.process]\ncommand = "python3"\nargs = [${JSON.stringify(slow)}]\nreadyTimeoutS = 1\n`);
    const t = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'serve', '--config', file, '--port', '0', '--data', path.join(dir, 'd5')], { timeout: 30_000 }, (err, _out, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr })),
    );
    expect(t.code).toBe(2);
    expect(t.stderr).toMatch(/^error: configuration: device\.process\.readyTimeoutS: its processes do not say ready in time, and are stopped \(.*it did not say ready within 1 s \(readyTimeoutS\).*\): raise readyTimeoutS if the program takes longer to load/m);
    const after = Journal.open(data);
    try {
      expect(after.get('left')?.state).toBe('queued');
    } finally {
      after.close();
    }
  });

  it('refuses, at start, a kind that exports run, naming the export (the process does the device step)', async () => {
    const r = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'serve', '--config', config(), '--port', '0', '--data', path.join(dir, 'd'), '--kind', path.join(EXAMPLE, 'embed-kind.mjs')], (err, _out, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr })),
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`kind module ${path.join(EXAMPLE, 'embed-kind.mjs')}: export run: its device "default" is a process device`);
  });
});

it('stoker device-bench prints the handoff and items/s measurements (small sizes)', async () => {
  const r = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile(process.execPath, [CLI, 'device-bench', '--bytes', String(2 ** 20), '--items', '200', '--json'], { timeout: 60_000 }, (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr })),
  );
  expect(r.code, r.stderr).toBe(0);
  const out = JSON.parse(r.stdout) as { handoff: { how: string; bytes: number; writeMs: number; runMs: number; totalMs: number }[]; items: { device: string; items: number; itemsPerSec: number }[] };
  expect(out.handoff.map((h) => [h.how, h.bytes])).toEqual([
    ['file', 2 ** 20],
    ['pipe', 2 ** 20],
  ]);
  for (const h of out.handoff) expect(h.totalMs).toBeGreaterThan(0);
  expect(out.handoff[0]?.writeMs).toBeGreaterThan(0);
  expect(out.handoff[1]?.writeMs).toBe(0);
  expect(out.items.map((i) => [i.device, i.items])).toEqual([
    ['process (python)', 200],
    ['thread', 200],
  ]);
  for (const i of out.items) expect(i.itemsPerSec).toBeGreaterThan(0);
  const usage = await new Promise<{ code: number; stderr: string }>((resolve) => execFile(process.execPath, [CLI, 'device-bench', '--bytes', String(2 ** 31)], (err, _o, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr })));
  expect(usage.code).toBe(2);
  expect(usage.stderr).toMatch(/--bytes must be at most 1073741824 \(1 GiB\)/);
}, 90_000);

describe('several devices in one server', () => {
  it('runs each kind on the device it names: thread kinds on [device], a process kind on [devices.py]', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-multi-'));
    const data = tempDataDir();
    const file = path.join(dir, 'multi.toml');
    fs.writeFileSync(
      file,
      [
        '[device]',
        'workers = 1',
        '[devices.py]',
        'workers = 2',
        '[devices.py.process]',
        'command = "python3"',
        `args = [${JSON.stringify(path.join(ROOT, 'test/fixtures/devices/py-device.py'))}]`,
        '[kinds.remote]',
        `module = ${JSON.stringify(path.join(ROOT, 'test/fixtures/kinds/remote-kind.mjs'))}`,
        'device = "py"',
        '',
      ].join('\n'),
    );
    const s = await startServer(data, ['--config', file, '--kind', path.join(ROOT, 'test/fixtures/kinds/probe-kind.mjs')]);
    try {
      expect(s.output()).toMatch(/1 cpu device worker, py: 2 process \(python3 .*py-device\.py\) device workers; kinds ntt-proof, sleep, remote, probe/);
      expect(s.output()).not.toContain('no kind runs on');
      await http(s.url, 'POST', '/v1/jobs', { id: 'm-probe', kind: 'probe', input: { items: 2 } });
      await http(s.url, 'POST', '/v1/jobs', { id: 'm-remote', kind: 'remote', partitions: 3 });
      await http(s.url, 'POST', '/v1/jobs', { id: 'm-sleep', kind: 'sleep', partitions: 2, input: { seed: 4, prepareMs: 20 } });
      const probe = (await http(s.url, 'GET', '/v1/jobs/m-probe/result?wait=30s')).body;
      expect(probe.state).toBe('done');
      for (const o of probe.result.outputs as { device: number; deviceKind: string }[]) expect(o).toMatchObject({ device: 0, deviceKind: 'cpu' });
      const remote = (await http(s.url, 'GET', '/v1/jobs/m-remote/result?wait=30s')).body;
      expect(remote.state).toBe('done');
      expect(remote.result).toMatchObject([0, 1, 2].map((p) => ({ partition: p, kind: 'remote', pid: expect.any(Number) })));
      expect((await http(s.url, 'GET', '/v1/jobs/m-sleep/result?wait=30s')).body).toMatchObject({ state: 'done', result: { partitions: 2 } });
      const st = (await http(s.url, 'GET', '/v1/status')).body as { devices: { name: string; kind: string; completions: number; workers: unknown[] }[] };
      expect(st.devices.map((d) => [d.name, d.kind, d.completions, d.workers.length])).toEqual([
        ['default', 'cpu', 4, 1],
        ['py', 'process', 3, 2],
      ]);
    } finally {
      await s.stop();
      removeDir(data);
      removeDir(dir);
    }
  });

  it('says at start that a device no kind runs on stays idle (a plan’s [devices.gpu] lines pasted where no kind names gpu)', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-multi-'));
    const data = tempDataDir();
    const file = path.join(dir, 'idle.toml');
    fs.writeFileSync(file, '[devices.gpu]\nworkers = 2\n');
    const s = await startServer(data, ['--config', file]);
    try {
      await waitUntil(async () => (s.output().includes('no kind runs on') ? true : undefined), 5000, 'the idle-device line');
      expect(s.output()).toContain('stoker serve: no kind runs on [devices.gpu] (2 workers): it stays idle — name it in a kind (`[kinds.NAME] device = "gpu"`), or leave it out\n');
    } finally {
      await s.stop();
      removeDir(data);
      removeDir(dir);
    }
  });

  it('refuses, at start, a kind whose [kinds.NAME] device names no device', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-multi-'));
    const file = path.join(dir, 'bad.toml');
    fs.writeFileSync(file, `[kinds.probe]\nmodule = ${JSON.stringify(path.join(ROOT, 'test/fixtures/kinds/probe-kind.mjs'))}\ndevice = "gpu"\n`);
    const r = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'serve', '--config', file, '--port', '0', '--data', path.join(dir, 'd')], { timeout: 20_000 }, (err, _o, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr })),
    );
    removeDir(dir);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/export device: "gpu" names no device: this server has "default" .* — fix \[kinds\.probe\] device in the config/);
  });
});

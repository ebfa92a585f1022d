/**
 * Batching devices behind `stoker serve` (real server, device threads, an HTTP endpoint): a kind's
 * runBatch gets several prepared partitions at once, each output lands on its own partition, an
 * Error in an item's place fails only that item's job; kinds whose steps do not fit the device are
 * refused at start with exit 2; an HTTP device POSTs a batch as one request.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, http, metricValue, removeDir, sleepTotal, startServer, tempDataDir, type ServerProcess } from './helpers.js';

const BATCHED = `
export const name = 'batched';
export async function prepare(input, ctx) { await new Promise((r) => setTimeout(r, 2)); return { p: ctx.partition }; }
// 40 ms a batch, whatever its size: items wait for the one worker, so batches form.
export async function runBatch(prepared, ctx) {
  await new Promise((r) => setTimeout(r, 40));
  return prepared.map((x, i) => (ctx[i].input?.failAt === x.p ? new Error('bad partition ' + x.p) : { p: x.p, size: prepared.length, job: ctx[i].job, partition: ctx[i].partition }));
}
`;

let tmp: string;
beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-batch-'));
  fs.writeFileSync(path.join(tmp, 'batched.mjs'), BATCHED);
  fs.writeFileSync(path.join(tmp, 'single.mjs'), "export const name = 'single'; export async function prepare() { return 1; } export function run(p) { return p; }");
  fs.writeFileSync(path.join(tmp, 'batch-only.mjs'), "export const name = 'batchonly'; export async function prepare() { return 1; } export function runBatch(p) { return p; }");
});
afterAll(() => removeDir(tmp));

const EMBED = path.resolve(import.meta.dirname, '../../examples/embeddings/embed-kind.mjs');

const BATCH_ENV = { STOKER_DEVICE_WORKERS: '1', STOKER_DEVICE_BATCH: JSON.stringify({ maxItems: 4 }), STOKER_PREPARE_THREADS: '1' };

describe('a thread device with [device.batch]', () => {
  let server: ServerProcess;
  let dir: string;
  beforeAll(async () => {
    dir = tempDataDir();
    server = await startServer(dir, ['--kind', path.join(tmp, 'batched.mjs')], BATCH_ENV);
  });
  afterAll(async () => {
    await server?.stop();
    removeDir(dir);
  });

  it("runs a kind's runBatch: each output on its own partition, several items a step; a failed item fails only its job", async () => {
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'g', kind: 'batched', partitions: 12, input: {} })).status).toBe(202);
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'b', kind: 'batched', partitions: 3, input: { failAt: 1 } })).status).toBe(202);
    const good = await http(server.url, 'GET', '/v1/jobs/g/result?wait=30s');
    expect(good.body.state).toBe('done');
    const outs = good.body.result as { p: number; size: number; job: string; partition: number }[];
    expect(outs.map((o) => [o.p, o.partition, o.job])).toEqual(Array.from({ length: 12 }, (_, i) => [i, i, 'g']));
    expect(Math.max(...outs.map((o) => o.size))).toBeGreaterThan(1);
    const bad = await http(server.url, 'GET', '/v1/jobs/b/result?wait=30s');
    expect(bad.body).toMatchObject({ state: 'failed', error: { code: 'E_DEVICE_FAILED', reason: expect.stringMatching(/partition 1 failed on device "default": bad partition 1 \(after 2 attempts\)/) } });
    // The status says how the batches ran (the dashboard shows their mean size).
    const status = await http(server.url, 'GET', '/v1/status');
    expect(status.body.devices[0].batch.maxItems).toBe(4);
    expect(status.body.devices[0].batch.items).toBe(16); // 12 + 3, and the failed item once more (engine.retries = 1)
    expect(status.body.devices[0].batch.batches).toBeLessThan(15);
    // The metrics count the batches and their sizes.
    const metrics = await (await fetch(new URL('/metrics', server.url))).text();
    expect(metricValue(metrics, 'stoker_device_batch_items_count', { device: 'default' })).toBeGreaterThan(0);
    expect(metricValue(metrics, 'stoker_device_batch_items_count', { device: 'default' })).toBeLessThan(15);
    expect(metricValue(metrics, 'stoker_device_batch_items_sum', { device: 'default' })).toBeGreaterThanOrEqual(15);
    // The waiting target the pacer holds: the target (4) and half a batch (it read 4, the configured target alone).
    expect(metricValue(metrics, 'stoker_waiting_target_partitions', {})).toBe(4 + 4 / 2);
    // Its trace records the batch setting (what stoker plan fits a batched run with: a size and a wait are settings, not measures).
    const trace = await http(server.url, 'GET', '/v1/trace');
    expect(JSON.parse(trace.body.otherData.deviceBatches)).toEqual([{ maxItems: 4, maxWaitMs: 0 }]);
  });

  it("runs the embeddings example's runBatch: one forward pass per batch, embed()'s vectors", async () => {
    const texts = ['a cat sat on the mat', 'the dog barked', 'stoker keeps accelerators fed', 'THE DOG BARKED', 'zk proofs', 'one more', 'and the last'];
    // Up to 500 ms for a fuller batch: preparations finish one by one, faster than that.
    const data = tempDataDir();
    const s = await startServer(data, ['--kind', EMBED], { ...BATCH_ENV, STOKER_DEVICE_BATCH: JSON.stringify({ maxItems: 4, maxWaitMs: 500 }) });
    try {
      for (const [i, dim] of [16, 16, 32].entries()) await http(s.url, 'POST', '/v1/jobs', { id: `e${i}`, kind: 'embed', input: { texts, batch: 2, dim } });
      const { embed } = (await import(pathToFileURL(EMBED).href)) as { embed(t: string[], o: { dim: number }): Float32Array };
      for (const [i, dim] of [16, 16, 32].entries()) {
        const res = await fetch(new URL(`/v1/jobs/e${i}/result?wait=30s`, s.url), { headers: { accept: 'application/octet-stream' } });
        expect(res.status).toBe(200);
        expect([...new Float32Array(await res.arrayBuffer())]).toEqual([...embed(texts, { dim })]);
      }
      const status = await http(s.url, 'GET', '/v1/status');
      // 3 jobs × 4 partitions, and fewer steps than partitions: some ran together.
      expect(status.body.devices[0].batch.items).toBe(12);
      expect(status.body.devices[0].batch.batches).toBeLessThan(12);
    } finally {
      await s.stop();
      removeDir(data);
    }
  });

  it('runs the built-in sleep kind in batches too', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 's', kind: 'sleep', partitions: 8, input: { seed: 3, prepareMs: 1, deviceMs: 20 } });
    const r = await http(server.url, 'GET', '/v1/jobs/s/result?wait=30s');
    expect(r.body).toMatchObject({ state: 'done', result: { partitions: 8, total: sleepTotal(3, 8) } });
  });
});

function serve(args: string[], env: Record<string, string>): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'serve', '--port', '0', ...args], { timeout: 30_000, env: { ...process.env, ...env } }, (err, _stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }));
  });
}

describe('kinds whose device steps do not fit the device are refused at start', () => {
  it('a kind with only run on a batching device', async () => {
    const r = await serve(['--data', path.join(tmp, 'd1'), '--kind', path.join(tmp, 'single.mjs')], BATCH_ENV);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/single\.mjs: export runBatch: missing: its device \[device\] batches \(\[device\.batch\]\)/);
  });

  it('a kind with only runBatch on a device that does not batch', async () => {
    const r = await serve(['--data', path.join(tmp, 'd2'), '--kind', path.join(tmp, 'batch-only.mjs')], { STOKER_PREPARE_THREADS: '1' });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/batch-only\.mjs: export run: missing: its device \[device\] runs one item per step/);
  });

});

describe('an HTTP device with [device.batch]', () => {
  it('POSTs a batch as one request and puts each result on its partition', async () => {
    const sizes: number[] = [];
    const endpoint = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const { items } = JSON.parse(Buffer.concat(chunks).toString()) as { items: { partition: number; prepared: { p: number } }[] };
        sizes.push(items.length);
        setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ results: items.map((it) => ({ output: { p: it.prepared.p, partition: it.partition } })) })), 40);
      });
    });
    await new Promise<void>((r) => endpoint.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(endpoint.address() as AddressInfo).port}/infer`;
    fs.writeFileSync(path.join(tmp, 'http-kind.mjs'), "export const name = 'hb'; export async function prepare(input, ctx) { return { p: ctx.partition }; }");
    const dir = tempDataDir();
    const s = await startServer(dir, ['--kind', path.join(tmp, 'http-kind.mjs')], { ...BATCH_ENV, STOKER_DEVICE_HTTP: JSON.stringify({ url }) });
    try {
      await http(s.url, 'POST', '/v1/jobs', { id: 'h', kind: 'hb', partitions: 9, input: {} });
      const r = await http(s.url, 'GET', '/v1/jobs/h/result?wait=30s');
      expect(r.body.state).toBe('done');
      expect((r.body.result as { p: number; partition: number }[]).map((o) => [o.p, o.partition])).toEqual(Array.from({ length: 9 }, (_, i) => [i, i]));
      expect(Math.max(...sizes)).toBeGreaterThan(1);
    } finally {
      await s.stop();
      removeDir(dir);
      endpoint.closeAllConnections();
      await new Promise((r) => endpoint.close(r));
    }
  });
});

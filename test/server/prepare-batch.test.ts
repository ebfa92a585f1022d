/**
 * Preparation batches behind `stoker serve` (real server, preparation threads): a kind with
 * `[kinds.NAME.prepareBatch]` has its `prepareBatch(inputs[], ctx[])` called with several
 * partitions at once, each with its own pooled buffer; each prepared value reaches its own
 * partition's device step; an Error in an item's place fails only that item's job; the status and
 * metrics count the batches; a kind whose exports do not fit its config is refused at start.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, http, metricValue, removeDir, startServer, tempDataDir, type ServerProcess } from './helpers.js';

const GROUPED = `
export const name = 'grouped';
export function buffer() { return 8; }
// 60 ms a batch, whatever its size, on one preparation thread: partitions queue, so batches form.
export async function prepareBatch(inputs, ctx) {
  await new Promise((r) => setTimeout(r, 60));
  return ctx.map((c, i) => {
    if (inputs[i]?.exitAt === c.partition) process.exit(7);
    if (inputs[i]?.failAt === c.partition) return new Error('bad witness ' + c.partition);
    new Int32Array(c.buffer)[0] = c.partition * 7;
    return { p: c.partition, size: ctx.length, job: c.job };
  });
}
export function run(prepared, ctx) { return { ...prepared, fromBuffer: new Int32Array(ctx.buffer)[0], partition: ctx.partition }; }
`;

let tmp: string;
beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-prepbatch-'));
  fs.writeFileSync(path.join(tmp, 'grouped.mjs'), GROUPED);
  fs.writeFileSync(path.join(tmp, 'plain.mjs'), "export const name = 'plain'; export async function prepare() { return 1; } export function run(p) { return p; }");
  fs.writeFileSync(path.join(tmp, 'only-batch.mjs'), "export const name = 'onlybatch'; export async function prepareBatch(inputs) { return inputs.map(() => 1); } export function run(p) { return p; }");
  const toml = (name: string, file: string, batch: boolean) => `[kinds.${name}]\nmodule = "./${file}"\n${batch ? '[kinds.' + name + '.prepareBatch]\nmaxItems = 4\nmaxWaitMs = 100\n' : ''}`;
  fs.writeFileSync(path.join(tmp, 'grouped.toml'), toml('grouped', 'grouped.mjs', true));
  fs.writeFileSync(path.join(tmp, 'plain.toml'), toml('plain', 'plain.mjs', true));
  fs.writeFileSync(path.join(tmp, 'only-batch.toml'), toml('onlybatch', 'only-batch.mjs', false));
});
afterAll(() => removeDir(tmp));

describe('a kind with [kinds.NAME.prepareBatch]', () => {
  let server: ServerProcess;
  let dir: string;
  beforeAll(async () => {
    dir = tempDataDir();
    server = await startServer(dir, ['--config', path.join(tmp, 'grouped.toml')], { STOKER_PREPARE_THREADS: '1', STOKER_PREPARE_CONCURRENCY: '1' });
  });
  afterAll(async () => {
    await server?.stop();
    removeDir(dir);
  });

  it("prepares several partitions in one call, each into its own buffer and onto its own partition; a failed item fails only its job", async () => {
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'g', kind: 'grouped', partitions: 10, input: {} })).status).toBe(202);
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'b', kind: 'grouped', partitions: 3, input: { failAt: 1 } })).status).toBe(202);
    const good = await http(server.url, 'GET', '/v1/jobs/g/result?wait=30s');
    expect(good.body.state).toBe('done');
    const outs = good.body.result as { p: number; size: number; job: string; fromBuffer: number; partition: number }[];
    expect(outs.map((o) => [o.p, o.partition, o.fromBuffer, o.job])).toEqual(Array.from({ length: 10 }, (_, i) => [i, i, i * 7, 'g']));
    expect(Math.max(...outs.map((o) => o.size))).toBeGreaterThan(1);
    const bad = await http(server.url, 'GET', '/v1/jobs/b/result?wait=30s');
    expect(bad.body).toMatchObject({ state: 'failed', error: { code: 'E_PREPARE_FAILED', reason: expect.stringMatching(/partition 1 failed in preparation: bad witness 1 \(after 2 attempts\)/) } });
    const status = await http(server.url, 'GET', '/v1/status');
    const pb = status.body.partitions.prepareBatches.grouped as { maxItems: number; batches: number; items: number };
    expect(pb.maxItems).toBe(4);
    expect(pb.batches).toBeLessThan(pb.items);
    expect(pb.items).toBeGreaterThanOrEqual(13);
    expect(status.body.partitions.preparingSteps).toBe(0);
    const metrics = await (await fetch(new URL('/metrics', server.url))).text();
    expect(metricValue(metrics, 'stoker_prepare_batch_items_count', { kind: 'grouped' })).toBe(pb.batches);
    expect(metricValue(metrics, 'stoker_prepare_batch_items_sum', { kind: 'grouped' })).toBe(pb.items);
  });

  it('a batch that ends its thread: the innocent partitions are prepared, and the one at fault fails its job at once, without its retries (it spent them, as a batch of one)', async () => {
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'x', kind: 'grouped', partitions: 4, input: { exitAt: 2 } })).status).toBe(202);
    const x = await http(server.url, 'GET', '/v1/jobs/x/result?wait=30s');
    expect(x.body).toMatchObject({ state: 'failed', error: { code: 'E_PREPARE_FAILED', reason: 'job x: partition 2 failed in preparation: its preparation ended its thread when it ran alone: worker exited with code: 7' } });
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'after', kind: 'grouped', partitions: 3, input: {} })).status).toBe(202);
    expect((await http(server.url, 'GET', '/v1/jobs/after/result?wait=30s')).body.state).toBe('done');
  });
});

function serve(args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'serve', '--port', '0', ...args], { timeout: 30_000, env: { ...process.env, STOKER_PREPARE_THREADS: '1' } }, (err, _stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }));
  });
}

describe('kinds whose preparation does not fit their config are refused at start', () => {
  it('[kinds.NAME.prepareBatch] for a kind without prepareBatch', async () => {
    const r = await serve(['--data', path.join(tmp, 'd1'), '--config', path.join(tmp, 'plain.toml')]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/plain\.mjs: export prepareBatch: missing: the config gives it \[kinds\.plain\.prepareBatch\]/);
  });

  it('a kind with only prepareBatch and no [kinds.NAME.prepareBatch]', async () => {
    const r = await serve(['--data', path.join(tmp, 'd2'), '--config', path.join(tmp, 'only-batch.toml')]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/only-batch\.mjs: export prepare: missing: it is prepared one partition per step/);
  });

  it('a misspelt prepareBatch field names the keys it takes', async () => {
    fs.writeFileSync(path.join(tmp, 'typo.toml'), '[kinds.grouped]\nmodule = "./grouped.mjs"\n[kinds.grouped.prepareBatch]\nmaxItem = 4\n');
    const r = await serve(['--data', path.join(tmp, 'd3'), '--config', path.join(tmp, 'typo.toml')]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/kinds\.grouped\.prepareBatch/);
    expect(r.stderr).toMatch(/maxItems/);
  });
});

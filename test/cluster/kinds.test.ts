/**
 * Kinds per cluster node, against a real redis-server on a free loopback port: each node pulls
 * only the jobs of the kinds it runs (a "GPU" node with a kind module and a node with only the
 * built-ins), any node validates a submission of a kind it does not run against the cluster's
 * registry, a job of a kind no live node runs waits queued (GET /v1/cluster names it) until a node
 * that runs it joins, and a node whose module for a kind differs from the live nodes' refuses to
 * join, naming the kind.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisServerPath, startRedis, type RedisProcess } from '../../src/cluster/redis-server.js';
import { CLI, http, metricValue, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess } from '../server/helpers.js';

const bin = redisServerPath();
if (!bin) {
  if (process.env['STOKER_REQUIRE_REDIS'] === '1') throw new Error('STOKER_REQUIRE_REDIS=1 but redis-server was not found (apt-get install redis-server)');
  console.warn('SKIPPED: redis-server not found (apt-get install redis-server)');
}

const FIXTURES = path.resolve(import.meta.dirname, '../fixtures/kinds');
const PROBE = path.join(FIXTURES, 'probe-kind.mjs');
const DOUBLER = path.join(FIXTURES, 'default-kind.mjs');

let redis: RedisProcess | undefined;
const servers: ServerProcess[] = [];
const dirs: string[] = [];

async function node(id: string, kinds: string[]): Promise<ServerProcess> {
  const dir = tempDataDir();
  dirs.push(dir);
  const s = await startServer(dir, ['--cluster', (redis as RedisProcess).url, ...kinds.flatMap((k) => ['--kind', k])], {
    STOKER_CLUSTER_NODE_ID: id,
    STOKER_CLUSTER_LOCK_MS: '3000',
    STOKER_CLUSTER_HEARTBEAT_MS: '300',
    STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '2',
  });
  servers.push(s);
  return s;
}

async function result(url: string, id: string): Promise<{ state: string; result: unknown; node?: string }> {
  await waitUntil(async () => ((await http(url, 'GET', `/v1/jobs/${id}/result?wait=5s`)).status === 200 ? true : undefined), 30_000, `${id} to finish`);
  return (await http(url, 'GET', `/v1/jobs/${id}`)).body as { state: string; result: unknown; node?: string };
}

beforeAll(async () => {
  if (bin) redis = await startRedis(bin);
}, 20_000);

afterAll(async () => {
  for (const s of servers) {
    if (s.child.exitCode === null && s.child.signalCode === null) {
      const t = setTimeout(() => s.child.kill('SIGKILL'), 5000);
      await s.stop();
      clearTimeout(t);
    }
  }
  await redis?.stop();
  for (const d of dirs) removeDir(d);
}, 30_000);

describe.skipIf(!bin)('kinds per cluster node', () => {
  let gpu: ServerProcess, cpu: ServerProcess;

  it('each node pulls only the jobs of its kinds; a node validates a kind it does not run against the registry', async () => {
    [gpu, cpu] = await Promise.all([node('gpu', [PROBE]), node('cpu', [])]);
    const c = await waitUntil(async () => {
      const r = (await http(cpu.url, 'GET', '/v1/cluster')).body as { nodes: { nodeId: string; kinds: string[] }[]; kinds: { name: string; nodes: string[]; hash: string | null }[] };
      return r.nodes.length === 2 ? r : undefined;
    }, 10_000, 'both nodes');
    expect(Object.fromEntries(c.nodes.map((n) => [n.nodeId, n.kinds]))).toEqual({ cpu: ['ntt-proof', 'sleep'], gpu: ['ntt-proof', 'sleep', 'probe'] });
    expect(c.kinds.find((k) => k.name === 'probe')).toMatchObject({ nodes: ['gpu'], hash: expect.stringMatching(/^[0-9a-f]{64}$/) });
    // Any node lists every kind the cluster runs: one only another node runs with its schema, its memory unknown here.
    const listed = (await http(cpu.url, 'GET', '/v1/kinds')).body as { name: string; input: unknown; memory: unknown; partitionsFromInput: boolean }[];
    expect(listed.map((k) => k.name).sort()).toEqual(['ntt-proof', 'probe', 'sleep']);
    expect(listed.find((k) => k.name === 'probe')).toMatchObject({ input: expect.objectContaining({ type: 'object' }), memory: null, partitionsFromInput: true });
    // Through the node without the module: the schema comes from the registry.
    const bad = await http(cpu.url, 'POST', '/v1/jobs', { kind: 'probe', partitions: 1, input: { items: 0 } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual([{ path: 'input.items', message: 'items must be ≥ 1' }]);
    const noParts = await http(cpu.url, 'POST', '/v1/jobs', { kind: 'probe', input: { items: 2 } });
    expect(noParts.body.errors).toEqual([{ path: 'partitions', message: expect.stringMatching(/derives its partitions from the input on the nodes that run it: give partitions/) }]);
    const unknown = await http(cpu.url, 'POST', '/v1/jobs', { kind: 'nope', partitions: 1 });
    expect(unknown.body.errors[0].message).toMatch(/unknown kind "nope": use one of .*probe/);
    for (let i = 0; i < 6; i++) expect((await http(cpu.url, 'POST', '/v1/jobs', { id: `p${i}`, kind: 'probe', partitions: 2, input: { items: 2 } })).status).toBe(202);
    for (let i = 0; i < 6; i++) expect((await http(gpu.url, 'POST', '/v1/jobs', { id: `s${i}`, kind: 'sleep', partitions: 2, input: { prepareMs: 200, deviceMs: 50, seed: i } })).status).toBe(202);
    const probes = await Promise.all(Array.from({ length: 6 }, (_, i) => result(cpu.url, `p${i}`)));
    for (const p of probes) expect(p).toMatchObject({ state: 'done', node: 'gpu' });
    expect((probes[0]?.result as { outputs: unknown[] }).outputs).toHaveLength(2);
    const sleeps = await Promise.all(Array.from({ length: 6 }, (_, i) => result(gpu.url, `s${i}`)));
    expect(sleeps.every((s) => s.state === 'done')).toBe(true);
    // The same id as another kind is a conflict.
    expect((await http(gpu.url, 'POST', '/v1/jobs', { id: 'p0', kind: 'sleep', partitions: 2 })).status).toBe(409);
    // A result over 1 MiB: stored whole (the holder read its own job's view, which leaves it out:
    // it stored null), read whole from …/result on another node, left out of views by its size.
    const sub = await http(cpu.url, 'POST', '/v1/jobs', { id: 'big', kind: 'probe', partitions: 4, input: { items: 4, mode: 'large' } });
    expect(sub.status, JSON.stringify(sub.body)).toBe(202);
    await result(cpu.url, 'big');
    const big = (await http(cpu.url, 'GET', '/v1/jobs/big/result')).body as { state: string; result: unknown };
    expect(big).toMatchObject({ state: 'done', resultEncoding: 'base64' });
    // (Buffer.equals: toEqual walks 1.2 MB element by element, 7 s.)
    expect(Buffer.from(big.result as string, 'base64').equals(Buffer.concat([0, 1, 2, 3].map((p) => Buffer.alloc(300_000, p))))).toBe(true);
    expect((await http(cpu.url, 'GET', '/v1/jobs/big')).body).toMatchObject({ state: 'done', result: null, resultOmittedBytes: 1_200_000 });
  }, 60_000);

  it('a job of a kind no live node runs stays queued, named in GET /v1/cluster, until a node that runs it joins', async () => {
    const late = await node('late', [DOUBLER]);
    await waitUntil(async () => (((await http(cpu.url, 'GET', '/v1/cluster')).body.nodes as unknown[]).length === 3 ? true : undefined), 10_000, 'the third node');
    expect(await late.stop()).toBe(0);
    // The registry remembers doubler's schema: it is accepted, and waits.
    expect((await http(cpu.url, 'POST', '/v1/jobs', { id: 'd1', kind: 'doubler', partitions: 3, input: { base: 5 } })).status).toBe(202);
    const c = await waitUntil(async () => {
      const r = (await http(gpu.url, 'GET', '/v1/cluster')).body as { nodes: unknown[]; unserved: string[]; kinds: { name: string; queued: number; nodes: string[] }[] };
      return r.nodes.length === 2 ? r : undefined;
    }, 10_000, 'the node to leave');
    expect(c.unserved).toEqual(['doubler']);
    expect(c.kinds.find((k) => k.name === 'doubler')).toMatchObject({ queued: 1, nodes: [] });
    await new Promise((r) => setTimeout(r, 1000));
    expect((await http(gpu.url, 'GET', '/v1/jobs/d1')).body.state).toBe('queued');
    // The cluster's backlog in every node's metrics (a node's own stoker_jobs counts only what it holds).
    // (Read every cluster.heartbeatMs: waited for.)
    for (const n of [gpu, cpu]) {
      const text = await waitUntil(async () => {
        const t = (await http(n.url, 'GET', '/metrics')).body as unknown as string;
        return metricValue(t, 'stoker_cluster_queue_jobs', { state: 'queued' }) === 1 ? t : undefined;
      }, 10_000, 'the queue gauge', 200);
      expect(metricValue(text, 'stoker_cluster_queue_jobs', { state: 'running' })).toBe(0);
    }
    await node('again', [DOUBLER]);
    expect(await result(gpu.url, 'd1')).toMatchObject({ state: 'done', node: 'again', result: [10, 12, 14] });
  }, 60_000);

  it('a job whose deadline passes while it waits queued ends as a missed deadline when a node takes it', async () => {
    await node('d-runner', [DOUBLER]);
    await waitUntil(async () => (((await http(cpu.url, 'GET', '/v1/cluster')).body.nodes as { nodeId: string }[]).some((n) => n.nodeId === 'd-runner') ? true : undefined), 10_000, 'd-runner');
    // Nobody runs doubler while it waits.
    for (const n of ['again', 'd-runner']) await servers.find((x) => x.output().includes(`cluster node ${n} `))?.stop();
    await waitUntil(async () => (((await http(cpu.url, 'GET', '/v1/cluster')).body.nodes as { kinds: string[] }[]).every((n) => !n.kinds.includes('doubler')) ? true : undefined), 10_000, 'the doubler nodes to leave');
    const deadline = new Date(Date.now() + 600).toISOString();
    expect((await http(cpu.url, 'POST', '/v1/jobs', { id: 'dl1', kind: 'doubler', partitions: 1, deadline })).status).toBe(202);
    await new Promise((r) => setTimeout(r, 1200));
    await node('d-late', [DOUBLER]);
    const v = await result(cpu.url, 'dl1');
    expect(v).toMatchObject({ state: 'failed', error: { code: 'E_DEADLINE', reason: `job dl1 missed its deadline ${deadline}` } });
    // Redis restarted empty once the accepting node saw it end (two sweeps): no node ran it, so no
    // node's journal has it — the accepting node republishes it from its acceptance record (it read
    // 404, never submitted, on every node).
    await new Promise((r) => setTimeout(r, 4500));
    const port = (redis as RedisProcess).port;
    await (redis as RedisProcess).stop();
    redis = await startRedis(bin as string, port);
    // While the nodes register their kinds again, a node that does not run doubler answers a
    // submission of it 503 (retry), never 400 "unknown kind" (a client gives up on that).
    const answers: number[] = [];
    for (let i = 0; i < 8; i++) {
      answers.push((await http(cpu.url, 'POST', '/v1/jobs', { id: `dl-after-${i}`, kind: 'doubler', partitions: 1 })).status);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(answers.filter((s) => s !== 202 && s !== 503), answers.join(' ')).toEqual([]);
    const again = await waitUntil(async () => {
      const x = await http(cpu.url, 'GET', '/v1/jobs/dl1');
      return x.status === 200 ? x : undefined;
    }, 20_000, 'dl1 readable after the Redis restart', 250);
    expect(again.body).toMatchObject({ state: 'failed', error: { code: 'E_DEADLINE', reason: `job dl1 missed its deadline ${deadline}` } });
  }, 60_000);

  it('a node whose journal is full hands the job back; another node runs it', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-tiny-'));
    dirs.push(dir);
    const conf = path.join(dir, 'tiny.toml');
    fs.writeFileSync(conf, '[journal]\nmaxBytes = 65536\n');
    const tinyDir = tempDataDir();
    dirs.push(tinyDir);
    const tiny = await startServer(tinyDir, ['--cluster', (redis as RedisProcess).url, '--config', conf, '--kind', DOUBLER], { STOKER_CLUSTER_NODE_ID: 'tiny', STOKER_CLUSTER_LOCK_MS: '3000', STOKER_CLUSTER_HEARTBEAT_MS: '300' });
    servers.push(tiny);
    const pad = 'x'.repeat(6000);
    const ids = Array.from({ length: 16 }, (_, i) => `full${i}`);
    for (const [i, id] of ids.entries()) expect((await http(tiny.url, 'POST', '/v1/jobs', { id, kind: 'doubler', partitions: 2, input: { base: i, pad } })).status).toBe(202);
    const views = await Promise.all(ids.map((id) => result(cpu.url, id)));
    views.forEach((v, i) => expect(v, ids[i]).toMatchObject({ state: 'done', result: [2 * i, 2 * i + 2] }));
    const byNode = new Map<string, number>();
    for (const v of views) byNode.set(v.node as string, (byNode.get(v.node as string) ?? 0) + 1);
    console.log(`full node journal: ${[...byNode].map(([n, c]) => `${n} ${c}`).join(', ')}`);
    expect([...byNode.keys()].some((n) => n !== 'tiny')).toBe(true);
  }, 60_000);

  it('the same body sent again is the same job after a deploy changed the kind\'s defaults (it read as another body: 409)', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-thumb-'));
    dirs.push(dir);
    const kind = path.join(dir, 'thumb.mjs');
    const version = (size: number, required: string) =>
      fs.writeFileSync(kind, `export const name = 'thumb';\nexport const input = { type: 'object', additionalProperties: false, properties: { image: { type: 'string' }, fmt: { type: 'string' }, slow: { type: 'boolean' }, size: { type: 'integer', default: ${size} } }, required: [${required}] };\nexport const prepare = (input) => input.slow ? new Promise((r) => setTimeout(() => r(input), 30_000)) : input;\nexport const run = (x) => x.size;\n`);
    const body = { id: 'thumb:1', kind: 'thumb', partitions: 1, input: { image: 'a' } };
    version(128, "'image'");
    const v1 = await node('thumb-v1', [kind]);
    expect((await http(v1.url, 'POST', '/v1/jobs', body)).status).toBe(202);
    expect(await result(v1.url, 'thumb:1')).toMatchObject({ state: 'done', result: [128] });
    // One still preparing when the node stops: back in the queue.
    expect((await http(v1.url, 'POST', '/v1/jobs', { id: 'thumb:slow', kind: 'thumb', partitions: 1, input: { image: 's', slow: true } })).status).toBe(202);
    await waitUntil(async () => ((await http(v1.url, 'GET', '/v1/jobs/thumb:slow')).body.state === 'running' ? true : undefined), 10_000, 'thumb:slow running');
    await v1.stop();
    // The deploy: the kind's default is another now, and it requires a field the slow job lacks; the retry goes to a node of the new version.
    version(256, "'image', 'fmt'");
    const v2 = await node('thumb-v2', [kind]);
    try {
      // The job its module refuses fails naming why, not E_INTERNAL without a word.
      expect(await result(v2.url, 'thumb:slow')).toMatchObject({ state: 'failed', error: { code: 'E_INVALID_JOB', reason: expect.stringMatching(/^node thumb-v2 refuses it as it takes it \(the job as kind thumb's module there reads it — its input, the partitions it makes of it, its limits — which the accepting node could not check where it does not run the kind, or another version of the module accepted\): input.*fmt/) } });
      expect(v2.output()).toContain('stoker serve: job thumb:slow failed as this node took it: E_INVALID_JOB: ');
      expect(await http(v2.url, 'POST', '/v1/jobs', body)).toMatchObject({ status: 200, body: { id: 'thumb:1', state: 'done', input: { image: 'a', size: 128 } } });
      // (A node that does not run the kind answers the same.)
      expect((await http(cpu.url, 'POST', '/v1/jobs', body)).status).toBe(200);
      // Another body under the same id is still a conflict.
      expect((await http(v2.url, 'POST', '/v1/jobs', { ...body, input: { image: 'b', fmt: 'png' } })).status).toBe(409);
    } finally {
      await v2.stop();
    }
  }, 60_000);

  it('a node whose module for a kind differs from the live nodes refuses to join, naming the kind', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-other-probe-'));
    dirs.push(dir);
    const other = path.join(dir, 'probe-kind.mjs');
    fs.writeFileSync(other, `${fs.readFileSync(PROBE, 'utf8')}\n// another version\n`);
    const r = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'serve', '--port', '0', '--data', path.join(dir, 'data'), '--cluster', (redis as RedisProcess).url, '--kind', other], { env: { ...process.env, STOKER_CLUSTER_NODE_ID: 'odd', STOKER_PREPARE_THREADS: '1' }, timeout: 30_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      ),
    );
    expect(r.code).toBe(2);
    expect(r.stdout).not.toContain('listening');
    expect(r.stderr).toMatch(new RegExp(`kind module ${other.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: differs from the module the cluster runs as kind "probe" \\(content hash [0-9a-f]{12}… here, [0-9a-f]{12}… on gpu\\): this node does not join — a kind changes across the cluster at once: stop every node that runs it \\(gpu; its queued jobs wait in Redis\\), then start them on the new module`));
  }, 60_000);
});

import { execFile } from 'node:child_process';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, http, removeDir, sleepTotal, startServer, tempDataDir, undocumented, waitUntil, type OpenApiDoc, type ServerProcess } from '../server/helpers.js';
import { redisServerPath, startRedis, type RedisProcess } from '../../src/cluster/redis-server.js';

const bin = redisServerPath();
if (!bin) {
  if (process.env['STOKER_REQUIRE_REDIS'] === '1') throw new Error('STOKER_REQUIRE_REDIS=1 but redis-server was not found (apt-get install redis-server)');
  console.warn('SKIPPED: redis-server not found (apt-get install redis-server)');
}

let redis: RedisProcess | undefined;
let client: Redis | undefined;
const servers: ServerProcess[] = [];
const dirs: string[] = [];

async function node(id: string, env: Record<string, string> = {}): Promise<ServerProcess> {
  const dir = tempDataDir();
  dirs.push(dir);
  const s = await startServer(dir, ['--cluster', (redis as RedisProcess).url], {
    STOKER_CLUSTER_NODE_ID: id,
    STOKER_CLUSTER_LOCK_MS: '3000',
    STOKER_CLUSTER_HEARTBEAT_MS: '300',
    STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '2',
    ...env,
  });
  servers.push(s);
  return s;
}

interface NodeRow {
  nodeId: string;
  capacity: number | null;
  occupancy: number;
  inFlight: number;
  jobsHeld: number;
}
async function clusterNodes(url: string): Promise<NodeRow[]> {
  const r = await http(url, 'GET', '/v1/cluster');
  expect(r.status).toBe(200);
  return r.body.nodes as NodeRow[];
}

/** Each job's recorded completions (a per-job key, expiring with server.resultTtlS). */
async function completionCounts(ids: readonly string[]): Promise<Record<string, string | null>> {
  const v = await (client as Redis).mget(ids.map((id) => `stoker:cluster:completions:${id}`));
  return Object.fromEntries(ids.map((id, i) => [id, v[i] ?? null]));
}

interface JobRow {
  id: string;
  state: string;
  node: string | null;
  submittedAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  result: { total: number; partitions: number } | null;
}

/** Waits for each job to end (long-polling `url`) and returns its view. */
function finished(url: string, ids: readonly string[], timeoutMs: number): Promise<JobRow[]> {
  return Promise.all(
    ids.map((id) =>
      waitUntil(async () => {
        const x = await http(url, 'GET', `/v1/jobs/${id}/result?wait=5s`);
        return x.status === 200 ? ((await http(url, 'GET', `/v1/jobs/${id}`)).body as JobRow) : undefined;
      }, timeoutMs, `${id} to finish`),
    ),
  );
}

const sleepJob = (id: string, seed: number, partitions: number, input: Record<string, number> = {}) => ({ id, kind: 'sleep', partitions, input: { seed, prepareMs: 100, deviceMs: 100, ...input } });

beforeAll(async () => {
  if (!bin) return;
  redis = await startRedis(bin);
  client = new Redis(redis.url, { maxRetriesPerRequest: 1 });
}, 20_000);

afterAll(async () => {
  for (const s of servers) {
    if (s.child.exitCode === null && s.child.signalCode === null) {
      const t = setTimeout(() => s.child.kill('SIGKILL'), 5000);
      await s.stop();
      clearTimeout(t);
    }
  }
  client?.disconnect();
  await redis?.stop();
  for (const d of dirs) removeDir(d);
}, 30_000);

describe.skipIf(!bin)('cluster mode (BullMQ on a real redis-server)', () => {
  let a: ServerProcess, b: ServerProcess, c: ServerProcess;
  let fast: ServerProcess, slow: ServerProcess;

  it('three nodes join: GET /v1/cluster lists them with capacity, occupancy and in-flight work', async () => {
    [a, b, c] = await Promise.all([node('n1'), node('n2'), node('n3')]);
    const nodes = await waitUntil(async () => {
      const n = await clusterNodes(b.url);
      return n.length === 3 ? n : undefined;
    }, 10_000, 'three live nodes');
    expect(nodes.map((n) => n.nodeId)).toEqual(['n1', 'n2', 'n3']);
    for (const n of nodes) {
      expect(n).toHaveProperty('capacity');
      expect(n.occupancy).toBeGreaterThanOrEqual(0);
      expect(n.inFlight).toBe(0);
    }
    // stoker status on a node says it is one, with the shared queues (it showed only its own counts).
    const status = await new Promise<string>((resolve, reject) => execFile(process.execPath, [CLI, 'status', '--server', a.url], (e, out) => (e ? reject(e) : resolve(out))));
    expect(status).toMatch(/^cluster {5}node n1 holds 0 of at most \d+ jobs; the queues: queued 0, running 0 \(GET \/v1\/cluster: every node\)$/m);
  }, 30_000);

  it('a node started under the name of a live node refuses to join (exit 2 naming cluster.nodeId): two of one name shared one heartbeat, and the cluster counted one', async () => {
    const dir = tempDataDir();
    dirs.push(dir);
    const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(process.execPath, [CLI, 'serve', '--port', '0', '--data', dir, '--cluster', (redis as RedisProcess).url], { env: { ...process.env, STOKER_CLUSTER_NODE_ID: 'n1', STOKER_PREPARE_THREADS: '1' }, timeout: 30_000 }, (e, _out, stderr) => resolve({ code: e ? ((e as { code?: number }).code ?? 1) : 0, stderr }));
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/cluster\.nodeId: "n1" is the name of a live node \(http:\/\/127\.0\.0\.1:\d+, host .*, pid \d+\) — give each node its own cluster\.nodeId/);
    expect((await clusterNodes(a.url)).map((n) => n.nodeId)).toEqual(['n1', 'n2', 'n3']);
    // Two started at once under one new name (one config file for both): one joins (both did, the heartbeat not yet written).
    const twins = await Promise.allSettled([node('twin'), node('twin')]);
    expect(twins.filter((t) => t.status === 'fulfilled')).toHaveLength(1);
    expect(String((twins.find((t) => t.status === 'rejected') as PromiseRejectedResult).reason)).toMatch(/exited \(2\) before listening:[^]*cluster\.nodeId: "twin" is the name of a live node/);
    const joined = (twins.find((t) => t.status === 'fulfilled') as PromiseFulfilledResult<ServerProcess>).value;
    await joined.stop();
  }, 40_000);

  it('one node’s GET /v1/cluster shows every node at work: occupancy (≤ 1), pacer mode, capacity, and the totals', async () => {
    // Long device steps on every node: 12 jobs of 4 partitions, 150 ms each on a device.
    for (let i = 0; i < 12; i++) expect((await http([a, b, c][i % 3]!.url, 'POST', '/v1/jobs', sleepJob(`busy:${i}`, i, 4, { prepareMs: 5, deviceMs: 150 }))).status).toBe(202);
    type Cluster = { totals: { nodes: number; workers: number; occupancy: number | null; inFlight: number; jobsHeld: number; capacity: number | null }; nodes: (NodeRow & { pacerMode: string; workers: number; capacity: number | null })[] };
    const seen = await waitUntil(async () => {
      const r = (await http(a.url, 'GET', '/v1/cluster')).body as Cluster;
      return r.nodes.length === 3 && r.nodes.filter((n) => n.occupancy > 0.3).length >= 2 ? r : undefined;
    }, 20_000, 'two busy nodes seen from n1', 100);
    for (const n of seen.nodes) {
      expect(n.occupancy).toBeLessThanOrEqual(1);
      expect(['bootstrap', 'steady', 'hold', 'blocked', 'idle']).toContain(n.pacerMode);
    }
    expect(seen.totals.nodes).toBe(3);
    expect(seen.totals.workers).toBe(seen.nodes.reduce((x, n) => x + n.workers, 0));
    expect(seen.totals.inFlight).toBe(seen.nodes.reduce((x, n) => x + n.inFlight, 0));
    expect(seen.totals.jobsHeld).toBe(seen.nodes.reduce((x, n) => x + n.jobsHeld, 0));
    expect(seen.totals.occupancy).toBeCloseTo(seen.nodes.reduce((x, n) => x + n.occupancy * n.workers, 0) / seen.totals.workers, 6);
    // The capacity: the nodes' that have measured theirs, summed; null (not 0) while none has.
    const measured = seen.nodes.filter((n) => n.capacity !== null);
    expect(seen.totals.capacity).toBe(measured.length === 0 ? null : measured.reduce((x, n) => x + (n.capacity as number), 0));
    for (let i = 0; i < 12; i++) expect((await http(a.url, 'GET', `/v1/jobs/busy:${i}/result?wait=30s`)).body.state).toBe('done');
  }, 60_000);

  it('submission is idempotent across nodes: same id and body → 200 and the same job, another body → 409', async () => {
    const body = sleepJob('idem:1', 7, 1, { prepareMs: 10, deviceMs: 1 });
    expect((await http(a.url, 'POST', '/v1/jobs', body)).status).toBe(202);
    const again = await http(c.url, 'POST', '/v1/jobs', body);
    expect(again.status).toBe(200);
    expect(again.body.id).toBe('idem:1');
    const other = await http(b.url, 'POST', '/v1/jobs', { ...body, partitions: 2 });
    expect(other.status).toBe(409);
    const r = await http(b.url, 'GET', '/v1/jobs/idem:1/result?wait=10s');
    expect(r.body).toMatchObject({ state: 'done', result: { partitions: 1, total: sleepTotal(7, 1) } });
    expect((await http(a.url, 'POST', '/v1/jobs', { kind: 'sleep', partitions: 0 })).status).toBe(400);
    // A cluster node's answers hold no field its OpenAPI document leaves out (node, cluster included).
    const doc = (await http(b.url, 'GET', '/v1/openapi.json')).body as OpenApiDoc & { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> };
    // A node's document has its cluster route, and the 503 its routes answer while Redis does not.
    expect(doc.paths['/v1/cluster']?.['get']).toBeDefined();
    expect(Object.keys(doc.paths['/v1/status']?.['get']?.responses ?? {})).toContain('503');
    const job = (await http(b.url, 'GET', '/v1/jobs/idem:1')).body;
    expect(job).toHaveProperty('node');
    expect(undocumented(job, doc.components.schemas['Job'] as Record<string, unknown>, doc)).toEqual([]);
    expect(undocumented(r.body, doc.components.schemas['Result'] as Record<string, unknown>, doc)).toEqual([]);
    const status = (await http(b.url, 'GET', '/v1/status')).body;
    expect(status).toHaveProperty('cluster');
    expect(undocumented(status, doc.components.schemas['Status'] as Record<string, unknown>, doc)).toEqual([]);
  }, 30_000);

  it('a cancel on one node reaches the node that holds the job', async () => {
    expect((await http(a.url, 'POST', '/v1/jobs', sleepJob('cancel:1', 3, 1, { prepareMs: 60_000 }))).status).toBe(202);
    const holder = await waitUntil(async () => {
      const j = (await http(a.url, 'GET', '/v1/jobs/cancel:1')).body;
      return j.state === 'running' && j.node ? (j.node as string) : undefined;
    }, 10_000, 'the job held by a node');
    const other = [a, b, c].find((s, i) => `n${i + 1}` !== holder) as ServerProcess;
    const r = await http(other.url, 'DELETE', '/v1/jobs/cancel:1');
    expect(r.status).toBe(200);
    expect(r.body.state).toBe('cancelled');
    const third = [a, b, c].find((s, i) => `n${i + 1}` !== holder && s !== other) as ServerProcess;
    expect((await http(third.url, 'GET', '/v1/jobs/cancel:1')).body).toMatchObject({ state: 'cancelled', error: { code: 'E_CANCELLED' } });
    // Queued jobs are cancelled at once; a finished one cannot be (409).
    expect((await http(b.url, 'DELETE', '/v1/jobs/idem:1')).status).toBe(409);
  }, 30_000);

  it('100 jobs over three nodes, one killed with -9 mid-run: all finish, each result recorded exactly once and correct', async () => {
    const N = 100;
    const nodes = [a, b, c];
    const ids = Array.from({ length: N }, (_, i) => `run:${i}`);
    await Promise.all(ids.map(async (id, i) => expect((await http((nodes[i % 3] as ServerProcess).url, 'POST', '/v1/jobs', sleepJob(id, 1000 + i, 2))).status).toBe(202)));
    // Kill n3 once some jobs are done and it holds some.
    await waitUntil(async () => {
      const done = (await http(a.url, 'GET', '/v1/jobs?state=done&limit=1000')).body as { id: string }[];
      const n3 = (await clusterNodes(a.url)).find((n) => n.nodeId === 'n3');
      return done.filter((j) => j.id.startsWith('run:')).length >= 10 && n3 && n3.jobsHeld > 0 ? true : undefined;
    }, 20_000, 'n3 holding jobs after some finished', 20);
    const held = await http(c.url, 'GET', '/v1/status');
    expect(held.body.cluster.jobsHeld).toBeGreaterThan(0);
    // (A node's list has no pages: said, not a first page again.)
    const paged = await http(a.url, 'GET', '/v1/jobs?before=run:1');
    expect([paged.status, paged.body.detail]).toEqual([400, 'before: cluster mode has no pages (a node lists the newest jobs of each state from the queues, up to limit): narrow the list with state, or read a job by its id']);
    await c.crash();

    const survivors = [a, b];
    const results = await Promise.all(
      ids.map(async (id, i) => {
        const s = survivors[i % 2] as ServerProcess;
        const r = await waitUntil(async () => {
          const x = await http(s.url, 'GET', `/v1/jobs/${id}/result?wait=5s`);
          return x.status === 200 ? x : undefined;
        }, 40_000, `${id} to finish`);
        return r.body as { state: string; result: { total: number; partitions: number } };
      }),
    );
    results.forEach((r, i) => expect(r).toMatchObject({ state: 'done', result: { partitions: 2, total: sleepTotal(1000 + i, 2) } }));
    const completions = await completionCounts(ids);
    for (const id of ids) expect(completions[id], id).toBe('1');
    // Some of them were taken back from the dead node.
    const views = await Promise.all(ids.map(async (id) => (await http(a.url, 'GET', `/v1/jobs/${id}`)).body as { resumes: number; node: string }));
    expect(views.filter((v) => v.resumes > 0).length).toBeGreaterThan(0);
    const live = await waitUntil(async () => {
      const n = await clusterNodes(b.url);
      return n.length === 2 ? n : undefined;
    }, 5000, 'the dead node to drop out');
    expect(live.map((n) => n.nodeId)).toEqual(['n1', 'n2']);
    for (const n of live) expect(n.capacity).toBeGreaterThan(0);
  }, 60_000);

  it('heterogeneous: a node with twice the device workers takes about twice the jobs', async () => {
    await Promise.all([a.stop(), b.stop()]);
    [fast, slow] = await Promise.all([node('fast', { STOKER_DEVICE_WORKERS: '4' }), node('slow', { STOKER_DEVICE_WORKERS: '2' })]);
    await waitUntil(async () => ((await clusterNodes(fast.url)).length === 2 ? true : undefined), 5000, 'two nodes');
    const ids = Array.from({ length: 90 }, (_, i) => `het:${i}`);
    // Submitted all at once, so a queue builds and each node's capacity decides its share: one by
    // one, on a loaded machine, the submits came slower than the nodes drained them and each node
    // took what arrived (a ratio of 1.25 once, with a benchmark running beside the test).
    const accepted = await Promise.all(ids.map((id, i) => http((i % 2 ? fast : slow).url, 'POST', '/v1/jobs', sleepJob(id, i, 1, { prepareMs: 50, deviceMs: 150 }))));
    for (const r of accepted) expect(r.status).toBe(202);
    const views = await Promise.all(
      ids.map((id) =>
        waitUntil(async () => {
          const x = await http(slow.url, 'GET', `/v1/jobs/${id}/result?wait=5s`);
          return x.status === 200 ? ((await http(slow.url, 'GET', `/v1/jobs/${id}`)).body as { state: string; node: string }) : undefined;
        }, 30_000, `${id} to finish`),
      ),
    );
    expect(views.every((v) => v.state === 'done')).toBe(true);
    const byFast = views.filter((v) => v.node === 'fast').length;
    const bySlow = views.filter((v) => v.node === 'slow').length;
    console.log(`heterogeneous: fast node ${byFast} jobs, slow node ${bySlow} jobs, ratio ${(byFast / bySlow).toFixed(2)}`);
    expect(byFast + bySlow).toBe(90);
    // Clearly more, about twice: both nodes share the machine's cores (clean-clone CI runs on a
    // loaded 2-core machine read 1.43, 1.90 and 2.33 with one-by-one submits), so the lower bound leaves room for that.
    expect(byFast / bySlow).toBeGreaterThanOrEqual(1.3);
    expect(byFast / bySlow).toBeLessThanOrEqual(2.7);
    // Redis never went back in time here: a node that took its own readings of its clock, handled
    // out of order, for it stalled the cluster 4–5 s for a data loss that never happened (a ratio of 4.3 in CI).
    for (const s of [a, b, c, fast, slow]) expect(s.output()).not.toContain('went back in time');
  }, 60_000);

  it('priorities hold across nodes: a critical job submitted last overtakes the normal jobs queued ahead of it', async () => {
    const ids = Array.from({ length: 60 }, (_, i) => `prio:${i}`);
    // Submitted all at once: one by one, on a loaded machine, the submits came slower than the two
    // nodes drained them and the queue never built up (the wait below timed out).
    const accepted = await Promise.all(ids.map((id, i) => http((i % 2 ? fast : slow).url, 'POST', '/v1/jobs', sleepJob(id, 500 + i, 1, { prepareMs: 50, deviceMs: 200 }))));
    for (const r of accepted) expect(r.status).toBe(202);
    // Both nodes saturated, plenty still queued in BullMQ.
    await waitUntil(async () => {
      const q = (await http(fast.url, 'GET', '/v1/status')).body.cluster.queue as Record<string, number>;
      const held = (await clusterNodes(fast.url)).map((n) => n.jobsHeld);
      return held.length === 2 && held.every((h) => h > 0) && (q['waiting'] ?? 0) + (q['prioritized'] ?? 0) >= 20 ? true : undefined;
    }, 10_000, 'two busy nodes with normal jobs queued', 20);
    const crit = await http(slow.url, 'POST', '/v1/jobs', { ...sleepJob('prio:critical', 99, 1, { prepareMs: 50, deviceMs: 200 }), priority: 'critical' });
    expect(crit.status).toBe(202);
    const [critical] = await finished(fast.url, ['prio:critical'], 20_000);
    const normal = await finished(fast.url, ids, 30_000);
    expect(critical).toMatchObject({ state: 'done', result: { total: sleepTotal(99, 1) } });
    normal.forEach((v, i) => expect(v).toMatchObject({ state: 'done', result: { total: sleepTotal(500 + i, 1) } }));
    // The normal jobs still queued when the critical one came: those started after it was submitted.
    const submitted = Date.parse((critical as JobRow).submittedAt);
    const behind = normal.filter((v) => Date.parse(v.startedAt as string) > submitted).map((v) => Date.parse(v.finishedAt as string)).sort((x, y) => x - y);
    const critStart = Date.parse((critical as JobRow).startedAt as string);
    const critEnd = Date.parse((critical as JobRow).finishedAt as string);
    console.log(`priorities: ${behind.length} normal jobs queued ahead; the critical one started ${critStart - submitted} ms after submission, finished before ${behind.filter((t) => t > critEnd).length} of them`);
    expect(behind.length).toBeGreaterThanOrEqual(15);
    expect(critEnd).toBeLessThan(behind[behind.length - 5] as number);
  }, 40_000);

  it('graceful shutdown: SIGTERM to a node holding jobs exits 0 within its shutdown timeout; each job it held ends once, correctly', async () => {
    const ids = Array.from({ length: 16 }, (_, i) => `drain:${i}`);
    for (const [i, id] of ids.entries()) expect((await http((i % 2 ? fast : slow).url, 'POST', '/v1/jobs', sleepJob(id, 700 + i, 2, { prepareMs: 200, deviceMs: 800 }))).status).toBe(202);
    const heldBySlow = await waitUntil(async () => {
      const running = (await http(fast.url, 'GET', '/v1/jobs?state=running&limit=100')).body as JobRow[];
      const mine = running.filter((v) => v.node === 'slow' && v.id.startsWith('drain:')).map((v) => v.id);
      return mine.length >= 2 ? mine : undefined;
    }, 10_000, 'the slow node to hold jobs', 20);
    const t0 = performance.now();
    const code = await slow.stop();
    const tookMs = performance.now() - t0;
    console.log(`graceful shutdown: held ${heldBySlow.length} jobs, exited ${code} after ${tookMs.toFixed(0)} ms (shutdown timeout 2 s)`);
    expect(code).toBe(0);
    expect(tookMs).toBeLessThan(2000 + 1500);
    const views = await finished(fast.url, ids, 30_000);
    views.forEach((v, i) => expect(v, ids[i]).toMatchObject({ state: 'done', result: { partitions: 2, total: sleepTotal(700 + i, 2) } }));
    const completions = await completionCounts(ids);
    for (const id of ids) expect(completions[id], id).toBe('1');
    for (const id of heldBySlow) expect(['slow', 'fast']).toContain(views[ids.indexOf(id)]?.node);
    expect((await clusterNodes(fast.url)).map((n) => n.nodeId)).toEqual(['fast']);
  }, 40_000);
});

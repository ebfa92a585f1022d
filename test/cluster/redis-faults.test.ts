/**
 * Redis faults, against a real redis-server on loopback: while Redis is away a cluster node
 * answers every API call that needs it with 503 and Retry-After within a few seconds (before, the
 * calls hung until Redis came back), and serves again once it returns. A Redis restarted without
 * persistence loses the whole queue: the nodes queue again what they accepted and republish the
 * results they hold (before, every one of 30 accepted jobs was a 404).
 */
import { execFile } from 'node:child_process';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, redisServerPath, startRedis, type RedisProcess } from '../../src/cluster/redis-server.js';
import { CLI, http, metricValue, removeDir, sleepTotal, startServer, tempDataDir, waitUntil, type ServerProcess } from '../server/helpers.js';

const bin = redisServerPath();
if (!bin) {
  if (process.env['STOKER_REQUIRE_REDIS'] === '1') throw new Error('STOKER_REQUIRE_REDIS=1 but redis-server was not found (apt-get install redis-server)');
  console.warn('SKIPPED: redis-server not found (apt-get install redis-server)');
}

/**
 * A private redis-server and the cluster nodes a test starts on it (`node(id)`, each with `env`
 * beside its id and a zero shutdown timeout), all stopped afterwards.
 */
function useCluster(env: Record<string, string> = {}) {
  const c = { redis: undefined as unknown as RedisProcess, dirs: [] as string[], nodes: [] as ServerProcess[] };
  afterAll(async () => {
    for (const n of c.nodes) if (n.child.exitCode === null && n.child.signalCode === null) await n.crash();
    await c.redis?.stop();
    for (const d of c.dirs) removeDir(d);
  }, 30_000);
  return Object.assign(c, {
    start: async () => (c.redis = await startRedis(bin as string)),
    /** `dir`: the data dir of a node started before (a restart), else a new one. */
    node: async (id: string, dir?: string) => {
      if (dir === undefined) c.dirs.push((dir = tempDataDir()));
      const s = await startServer(dir, ['--cluster', c.redis.url], { STOKER_CLUSTER_NODE_ID: id, STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0', ...env });
      c.nodes.push(s);
      return s;
    },
  });
}

/** `stoker serve --cluster <url>` in a new data dir, to its exit (a node that starts is killed after 20 s). */
function serveOnce(url: string): Promise<{ code: number | null; stderr: string }> {
  const dir = tempDataDir();
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'serve', '--port', '0', '--data', dir, '--cluster', url], { env: { ...process.env, STOKER_PREPARE_THREADS: '1' }, timeout: 20_000 }, (e, _out, stderr) => {
      removeDir(dir);
      resolve({ code: e ? ((e as { code?: number }).code ?? 1) : 0, stderr });
    });
  });
}

describe.skipIf(!bin)('a --cluster URL a node cannot use', () => {
  let redis: RedisProcess;
  beforeAll(async () => void (redis = await startRedis(bin as string)), 30_000);
  afterAll(async () => redis?.stop());

  it('a database the server lacks is refused at start (exit 2 naming cluster.redis and the databases it has): it joined database 0', async () => {
    const r = await serveOnce(`${redis.url}/99`);
    expect(r.stderr).not.toContain('listening');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`error: cluster: cluster.redis: database 99 of ${redis.url}/99: ERR DB index is out of range — the server has 16 databases: 0..15: name one of those at the end of the URL (redis://host:port/N), or raise "databases" in the server's redis.conf\n`);
  }, 30_000);

  it('an unreachable Redis, an unknown host, a rediss:// URL to a plain Redis: refused at start (exit 1 naming cluster.redis and why, as for a port taken), without a crash (an unknown host and rediss:// ended in a BullMQ connection’s unhandled error event)', async () => {
    const unreachable = `redis://127.0.0.1:${await freePort()}`;
    const [unknown, tls, refused] = await Promise.all([serveOnce('redis://redis.invalid:6379'), serveOnce(redis.url.replace('redis:', 'rediss:')), serveOnce(unreachable)]);
    expect(unknown.stderr).toMatch(/^error: cluster: cluster\.redis: cannot reach Redis at redis:\/\/redis\.invalid:6379 within 5 s \(getaddrinfo (ENOTFOUND|EAI_AGAIN) redis\.invalid\): start it, or fix --cluster \/ cluster\.redis\n$/);
    expect(tls.stderr).toBe(`error: cluster: cluster.redis: cannot reach Redis at ${redis.url.replace('redis:', 'rediss:')} within 5 s (no answer to the TLS handshake of rediss://: is TLS on at that port?): start it, or fix --cluster / cluster.redis\n`);
    expect(refused.stderr).toBe(`error: cluster: cluster.redis: cannot reach Redis at ${unreachable} within 5 s (connect ECONNREFUSED ${unreachable.slice('redis://'.length)}): start it, or fix --cluster / cluster.redis\n`);
    for (const r of [unknown, tls, refused]) expect(r.code, r.stderr).toBe(1);
  }, 30_000);
});

describe.skipIf(!bin)('a cluster node while Redis is away', () => {
  let redis: RedisProcess;
  let node: ServerProcess;
  let dir: string;
  beforeAll(async () => {
    redis = await startRedis(bin as string);
    dir = tempDataDir();
    node = await startServer(dir, ['--cluster', redis.url], { STOKER_CLUSTER_NODE_ID: 'rf', STOKER_CLUSTER_HEARTBEAT_MS: '300', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '1' });
  }, 30_000);
  afterAll(async () => {
    const t = setTimeout(() => node.child.kill('SIGKILL'), 8000);
    await node.stop();
    clearTimeout(t);
    await redis.stop();
    removeDir(dir);
  }, 30_000);

  it('reads not ready while Redis is connected but does not answer (frozen: /readyz read ready while every call got 503), and ready again once it answers', async () => {
    await waitUntil(async () => ((await http(node.url, 'GET', '/readyz')).status === 200 ? true : undefined), 10_000, 'ready', 100);
    redis.child.kill('SIGSTOP');
    try {
      const why = await waitUntil(async () => {
        const r = await http(node.url, 'GET', '/readyz');
        return r.status === 503 ? (r.body.why as string[]) : undefined;
      }, 15_000, 'not ready', 200);
      expect(why).toEqual([expect.stringMatching(/^the cluster's Redis has not answered for \d+ s \(connected, but not answering: every call that needs it gets 503\)$/)]);
    } finally {
      redis.child.kill('SIGCONT');
    }
    await waitUntil(async () => ((await http(node.url, 'GET', '/readyz')).status === 200 ? true : undefined), 15_000, 'ready again', 200);
  }, 45_000);

  it('answers 503 with Retry-After within seconds, and serves again when Redis is back', async () => {
    expect((await http(node.url, 'POST', '/v1/jobs', { id: 'rf-1', kind: 'sleep', partitions: 1 })).status).toBe(202);
    expect((await http(node.url, 'GET', '/v1/jobs/rf-1/result?wait=10s')).body.state).toBe('done');
    await redis.stop();
    const calls: [string, string, unknown?][] = [['GET', '/v1/status'], ['POST', '/v1/jobs', { kind: 'sleep', partitions: 1 }], ['GET', '/v1/jobs/rf-1'], ['GET', '/v1/jobs'], ['GET', '/v1/jobs/rf-1/result?wait=30s'], ['DELETE', '/v1/jobs/rf-1'], ['GET', '/v1/cluster']];
    for (const [method, p, body] of calls) {
      const t0 = performance.now();
      const r = await http(node.url, method, p, body);
      const ms = performance.now() - t0;
      expect(r.status, `${method} ${p}: ${JSON.stringify(r.body)}`).toBe(503);
      expect(r.headers.get('retry-after')).toBe('5');
      expect(r.body.detail).toContain(redis.url);
      expect(ms, `${method} ${p} answered after ${ms.toFixed(0)} ms`).toBeLessThan(4000);
      // A submission without an id is named one to retry with (queued late, it may still run).
      if (method === 'POST') expect(r.body.detail).toMatch(/this job may have been accepted as "[0-9a-f-]{36}": retry with "id": "[0-9a-f-]{36}" \(the same id and body run once\)$/);
    }
    // Local views need no Redis.
    expect((await http(node.url, 'GET', '/v1/history?since=1m')).status).toBe(200);
    // Said on stderr, away and back (only /readyz and the 503s showed it).
    expect(node.output()).toMatch(/stoker serve: the cluster's Redis \(redis:\/\/127\.0\.0\.1:\d+\) went away: calls that need it get 503 until it is back/);
    redis = await startRedis(bin as string, redis.port);
    await waitUntil(async () => ((await http(node.url, 'GET', '/v1/status')).status === 200 ? true : undefined), 20_000, 'the node to serve again', 200);
    await waitUntil(async () => (/stoker serve: the cluster's Redis \(redis:\/\/[^)]+\) is back, after [\d.]+ s away/.test(node.output()) ? true : undefined), 5000, 'the back line');
    expect((await http(node.url, 'POST', '/v1/jobs', { id: 'rf-2', kind: 'sleep', partitions: 1 })).status).toBe(202);
    expect((await http(node.url, 'GET', '/v1/jobs/rf-2/result?wait=10s')).body.state).toBe('done');
  }, 60_000);
});

describe.skipIf(!bin)('failover with the default settings', () => {
  const cluster = useCluster();

  it('a kill -9ed node’s job runs on another node within seconds (it took 41.7 s with a 30 s lock)', async () => {
    await cluster.start();
    const node = cluster.node;
    const a = await node('fo-a');
    expect((await http(a.url, 'POST', '/v1/jobs', { id: 'fo-1', kind: 'sleep', partitions: 1, input: { prepareMs: 60_000 } })).status).toBe(202);
    await waitUntil(async () => ((await http(a.url, 'GET', '/v1/jobs/fo-1')).body.node === 'fo-a' ? true : undefined), 10_000, 'fo-a to hold the job', 50);
    const b = await node('fo-b');
    await waitUntil(async () => (((await http(b.url, 'GET', '/v1/cluster')).body.nodes as unknown[]).length === 2 ? true : undefined), 10_000, 'two nodes', 100);
    const t0 = performance.now();
    await a.crash();
    await waitUntil(async () => {
      const v = (await http(b.url, 'GET', '/v1/jobs/fo-1')).body as { node: string; state: string };
      return v.node === 'fo-b' && v.state === 'running' ? true : undefined;
    }, 30_000, 'fo-b to take the job over', 100);
    const s = (performance.now() - t0) / 1000;
    console.log(`failover with the defaults (cluster.lockMs 6000, heartbeatMs 2000): the dead node's job ran on another node ${s.toFixed(1)} s after the kill`);
    expect(s).toBeLessThan(20);
  }, 60_000);
});

describe.skipIf(!bin)('a Redis restart without persistence', () => {
  const cluster = useCluster({ STOKER_CLUSTER_HEARTBEAT_MS: '300' });

  it('loses no accepted job: the accepting nodes queue them again (answering for them meanwhile, a cancel included), the results of those already done are readable on every node', async () => {
    await cluster.start();
    const node = cluster.node;
    const a = await node('rr-a');
    const b = await node('rr-b');
    expect(a.output()).toContain('Redis persistence: none (save "", appendonly no): a restart loses the whole queue');
    // 10 quick jobs that end before the restart, then 20 slow ones that are queued or running when
    // it comes; rr-27, cancelled after it, slower still (on a loaded machine the restart and the
    // reads below outlasted its 0.8 s: it was done, and the cancel a 409).
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) {
      const id = `rr-${i}`;
      ids.push(id);
      const r = await http((i % 2 ? a : b).url, 'POST', '/v1/jobs', { id, kind: 'sleep', partitions: 2, input: { seed: i, prepareMs: i < 10 ? 1 : id === 'rr-27' ? 60_000 : 400, deviceMs: 1 } });
      expect(r.status).toBe(202);
      if (i === 9) for (const done of ids) expect((await http(a.url, 'GET', `/v1/jobs/${done}/result?wait=10s`)).body.state).toBe('done');
    }
    await cluster.redis.stop();
    cluster.redis = await startRedis(bin as string, cluster.redis.port);
    const t0 = performance.now();
    // While the nodes republish, a job done before the restart is never a 404 on either node (it read
    // as never submitted for a second or two, and stoker wait gave up): 503 with Retry-After, done,
    // or (on the node that accepted it, from its acceptance record) queued.
    const early404: string[] = [];
    for (let round = 0; round < 3; round++) {
      for (const id of ids.slice(0, 10)) {
        for (const n of [a, b]) {
          const x = await http(n.url, 'GET', `/v1/jobs/${id}`);
          if (x.status === 404) early404.push(`${id} on ${n === a ? 'rr-a' : 'rr-b'}`);
          else if (x.status === 503) expect(x.headers.get('retry-after')).not.toBeNull();
          else expect(['done', 'queued'], id).toContain(x.body.state);
        }
      }
    }
    expect(early404).toEqual([]);
    // Before it is queued again, the node that accepted a job says it is queued (it said 404, never submitted).
    const early = await waitUntil(async () => {
      const x = await http(a.url, 'GET', '/v1/jobs/rr-29');
      return x.status === 503 ? undefined : x; // (Redis reconnecting)
    }, 10_000, 'an answer from rr-a once Redis is back', 50);
    expect(early.status, JSON.stringify(early.body)).toBe(200);
    expect(['queued', 'running', 'done']).toContain(early.body.state);
    // And a cancel then holds: the job is not queued again (it was a 404).
    const cancel = await http(a.url, 'DELETE', '/v1/jobs/rr-27');
    expect(cancel.body, JSON.stringify(cancel.body)).toMatchObject({ state: 'cancelled' });
    for (const [i, id] of ids.entries()) {
      if (id === 'rr-27') continue;
      for (const n of [a, b]) {
        const r = await waitUntil(async () => {
          const x = await http(n.url, 'GET', `/v1/jobs/${id}/result?wait=5s`);
          return x.status === 200 ? x : undefined;
        }, 60_000, `${id} done, read on ${n === a ? 'rr-a' : 'rr-b'}`, 200);
        expect(r.body, id).toMatchObject({ state: 'done', result: { partitions: 2, total: sleepTotal(i, 2) } });
      }
    }
    console.log(`Redis restarted without persistence: all 29 accepted jobs done and readable on both nodes ${((performance.now() - t0) / 1000).toFixed(1)} s later, the one cancelled meanwhile cancelled`);
    for (const n of [a, b]) expect((await http(n.url, 'GET', '/v1/jobs/rr-27')).body).toMatchObject({ state: 'cancelled' });
    // Each node says what the loss made it do (nothing was said before).
    for (const n of [a, b]) expect(n.output()).toMatch(/stoker serve: Redis lost jobs \(its data was lost: a new dataset\): registered this node's kinds again, republished \d+ ended jobs?, queues again in 4 s the jobs this node accepted that no node republishes by then/);
    // And listed: those done before the restart are republished results, not in the queues (a list showed only those run after it).
    for (const n of [a, b]) {
      const listed = (await http(n.url, 'GET', '/v1/jobs?limit=1000')).body as unknown as { id: string; state: string }[];
      expect(listed.filter((j) => ids.includes(j.id) && j.state === 'done').map((j) => j.id).sort()).toEqual(ids.filter((id) => id !== 'rr-27').sort());
    }
  }, 120_000);
});

describe.skipIf(!bin)('jobs running when Redis loses its data', () => {
  const cluster = useCluster({ STOKER_CLUSTER_HEARTBEAT_MS: '300' });

  it('run once: their holders say so in Redis, so the accepting node does not queue them again; their results are readable on every node', async () => {
    await cluster.start();
    const a = await cluster.node('rn-a');
    const b = await cluster.node('rn-b');
    const ids = Array.from({ length: 4 }, (_, i) => `rn-${i}`);
    for (const [i, id] of ids.entries()) expect((await http(a.url, 'POST', '/v1/jobs', { id, kind: 'sleep', partitions: 1, input: { seed: i, prepareMs: 9000, deviceMs: 1 } })).status).toBe(202);
    // Running, and the node running it known to the accepting node (on a loaded machine a view read
    // between the two said running with node null, and the check below compared with null).
    const nodes = await waitUntil(async () => {
      const views = await Promise.all(ids.map(async (id) => (await http(a.url, 'GET', `/v1/jobs/${id}`)).body));
      return views.every((v) => v.state === 'running' && typeof v.node === 'string') ? views.map((v) => v.node as string) : undefined;
    }, 10_000, 'every job running on a known node', 100);
    await cluster.redis.stop();
    cluster.redis = await startRedis(bin as string, cluster.redis.port);
    // Past the accepting node's 4 s wait for every node to republish: still running where they ran.
    await new Promise((r) => setTimeout(r, 6500));
    for (const [i, id] of ids.entries()) expect((await http(b.url, 'GET', `/v1/jobs/${id}`)).body, id).toMatchObject({ state: 'running', node: nodes[i] });
    // And listed as running on every node (no queue holds them now: a list left them out).
    for (const n of [a, b]) {
      const listed = (await http(n.url, 'GET', '/v1/jobs?state=running')).body as unknown as { id: string; node: string }[];
      expect(listed.map((j) => `${j.id}@${j.node}`).sort()).toEqual(ids.map((id, i) => `${id}@${nodes[i]}`).sort());
    }
    for (const [i, id] of ids.entries()) {
      for (const n of [a, b]) {
        const r = await waitUntil(async () => {
          const x = await http(n.url, 'GET', `/v1/jobs/${id}/result?wait=5s`);
          return x.status === 200 && x.body.state === 'done' ? x : undefined;
        }, 30_000, `${id} done`, 200);
        expect(r.body, id).toMatchObject({ state: 'done', result: { partitions: 1, total: sleepTotal(i, 1) } });
        expect((await http(n.url, 'GET', `/v1/jobs/${id}`)).body, id).toMatchObject({ state: 'done', node: nodes[i] });
      }
    }
    // Each ran on one node only (before, those the accepting node queued again ran on a second one).
    const ended = await Promise.all([a, b].map(async (n) => metricValue((await http(n.url, 'GET', '/metrics')).body as unknown as string, 'stoker_jobs_ended_total', { kind: 'sleep', state: 'done' })));
    expect((ended[0] ?? 0) + (ended[1] ?? 0)).toBe(4);
  }, 90_000);
});

describe.skipIf(!bin)('Redis restarted from an older snapshot (an RDB file)', () => {
  const cluster = useCluster({ STOKER_CLUSTER_HEARTBEAT_MS: '300' });

  it('the jobs that ended since it was taken do not run again (they did: the same dataset, no loss seen), one cancelled since stays cancelled; read so on every node', async () => {
    const dir = tempDataDir();
    cluster.dirs.push(dir);
    cluster.redis = await startRedis(bin as string, undefined, dir);
    const a = await cluster.node('rs-a');
    const b = await cluster.node('rs-b');
    const ids = Array.from({ length: 8 }, (_, i) => `rs-${i}`);
    for (const [i, id] of ids.entries()) expect((await http((i % 2 ? a : b).url, 'POST', '/v1/jobs', { id, kind: 'sleep', partitions: 2, input: { seed: i, prepareMs: 300, deviceMs: 1 } })).status).toBe(202);
    expect((await http(a.url, 'POST', '/v1/jobs', { id: 'rs-q', kind: 'sleep', partitions: 2, input: { seed: 99, prepareMs: 300, deviceMs: 1 } })).status).toBe(202);
    // The snapshot while they are queued or running; then they end, and one is cancelled.
    const r = new Redis(cluster.redis.url);
    await r.save();
    r.disconnect();
    expect((await http(b.url, 'DELETE', '/v1/jobs/rs-q')).body).toMatchObject({ state: 'cancelled' });
    for (const id of ids) expect((await http(a.url, 'GET', `/v1/jobs/${id}/result?wait=20s`)).body.state, id).toBe('done');
    const steps = async () => (await Promise.all([a, b].map(async (n) => metricValue((await http(n.url, 'GET', '/metrics')).body as unknown as string, 'stoker_device_seconds_count', { kind: 'sleep' })))).reduce((x, y) => x + y, 0);
    const before = await steps();
    expect(before).toBeGreaterThanOrEqual(16);
    // Killed (no save on the way out), started again on the snapshot: the 9 jobs queued or running there.
    cluster.redis.child.kill('SIGKILL');
    await new Promise((res) => cluster.redis.child.once('exit', res));
    cluster.redis = await startRedis(bin as string, cluster.redis.port, dir);
    for (const [i, id] of ids.entries()) {
      for (const n of [a, b]) {
        const x = await waitUntil(async () => {
          const y = await http(n.url, 'GET', `/v1/jobs/${id}/result?wait=5s`);
          return y.status === 200 && y.body.state === 'done' ? y : undefined;
        }, 20_000, `${id} done on ${n === a ? 'rs-a' : 'rs-b'}`, 200);
        expect(x.body, id).toMatchObject({ state: 'done', result: { partitions: 2, total: sleepTotal(i, 2) } });
      }
    }
    // The queued copies ended with the republished ends: none is left to run, and none ran again.
    await waitUntil(async () => {
      const text = (await http(a.url, 'GET', '/metrics')).body as unknown as string;
      return metricValue(text, 'stoker_cluster_queue_jobs', { state: 'queued' }) + metricValue(text, 'stoker_cluster_queue_jobs', { state: 'running' }) === 0 ? true : undefined;
    }, 20_000, "the cluster's queues empty", 200);
    expect(await steps()).toBe(before);
    for (const n of [a, b]) expect((await http(n.url, 'GET', '/v1/jobs/rs-q')).body).toMatchObject({ state: 'cancelled' });
    expect([a, b].some((n) => n.output().includes('stoker serve: Redis went back in time'))).toBe(true);
  }, 90_000);
});

describe.skipIf(!bin)('a job resubmitted to another node', () => {
  const cluster = useCluster({ STOKER_CLUSTER_HEARTBEAT_MS: '300' });

  it('is kept by that node too: when the accepting node is dead and Redis loses its data, the other queues it again', async () => {
    await cluster.start();
    const a = await cluster.node('rs-a');
    const b = await cluster.node('rs-b');
    const body = { id: 'rs-1', kind: 'sleep', partitions: 2, input: { seed: 5, prepareMs: 3000, deviceMs: 1 } };
    expect((await http(a.url, 'POST', '/v1/jobs', body)).status).toBe(202);
    // The client retries on another node (as after a lost answer): the same job, not created again.
    const again = await http(b.url, 'POST', '/v1/jobs', body);
    expect(again.status).toBe(200);
    // The accepting node dies (here: as if before its own journal had the job), and Redis loses everything.
    await a.crash();
    await cluster.redis.stop();
    cluster.redis = await startRedis(bin as string, cluster.redis.port);
    const r = await waitUntil(async () => {
      const x = await http(b.url, 'GET', '/v1/jobs/rs-1/result?wait=2s');
      return x.status === 200 && x.body.state === 'done' ? x : undefined;
    }, 40_000, 'rs-1 done on rs-b', 200);
    expect(r.body).toMatchObject({ state: 'done', result: { partitions: 2, total: sleepTotal(5, 2) } });
  }, 90_000);
});

describe.skipIf(!bin)('a node killed after Redis lost its data, before it republished', () => {
  const cluster = useCluster({ STOKER_CLUSTER_HEARTBEAT_MS: '300' });

  it('republishes the results only it holds once restarted (before, they were a 404 on every node for good)', async () => {
    await cluster.start();
    const a = await cluster.node('rk-a');
    const ids = Array.from({ length: 5 }, (_, i) => `rk-${i}`);
    for (const [i, id] of ids.entries()) expect((await http(a.url, 'POST', '/v1/jobs', { id, kind: 'sleep', partitions: 2, input: { seed: i, prepareMs: 1, deviceMs: 1 } })).status).toBe(202);
    for (const id of ids) expect((await http(a.url, 'GET', `/v1/jobs/${id}/result?wait=10s`)).body.state).toBe('done');
    // Two sweeps (every 2 s): the node has seen them end and no longer queues them again.
    await new Promise((r) => setTimeout(r, 4500));
    // Redis loses its data and the node dies before a sweep of its could see it (here: while Redis is away).
    await cluster.redis.stop();
    await a.crash();
    cluster.redis = await startRedis(bin as string, cluster.redis.port);
    const b = await cluster.node('rk-a', cluster.dirs[0]);
    // (The start line says a data dir is new only where it is.)
    expect(a.output()).toContain(', a new journal;');
    expect(b.output()).not.toContain('a new journal');
    for (const [i, id] of ids.entries()) {
      const r = await waitUntil(async () => {
        const x = await http(b.url, 'GET', `/v1/jobs/${id}/result?wait=2s`);
        return x.status === 200 ? x : undefined;
      }, 15_000, `${id} readable after the restarts`, 200);
      expect(r.body, id).toMatchObject({ state: 'done', result: { partitions: 2, total: sleepTotal(i, 2) } });
    }
  }, 90_000);
});

describe.skipIf(!bin)('jobs cancelled while queued, then Redis loses its data at once', () => {
  const cluster = useCluster({ STOKER_CLUSTER_HEARTBEAT_MS: '300' });

  it('stay cancelled: the accepting node ends its record at the cancel, on it or on another node (it queued them again, to run)', async () => {
    await cluster.start();
    const a = await cluster.node('rc-a');
    const b = await cluster.node('rc-b');
    // Two long jobs keep each node's own queue non-empty, so neither takes more from Redis's. One
    // at a time: the second goes to the other node once the first is held (submitted together on a
    // loaded machine, one node could take both before its queue showed the first).
    const heldBy = async (id: string) => (await http(a.url, 'GET', `/v1/jobs/${id}`)).body.node as string | null;
    expect((await http(a.url, 'POST', '/v1/jobs', { id: 'rc-long-1', kind: 'sleep', partitions: 40, input: { seed: 1, prepareMs: 2000, deviceMs: 1 } })).status).toBe(202);
    const first = await waitUntil(async () => (await heldBy('rc-long-1')) ?? undefined, 15_000, 'the first long job held', 100);
    expect((await http(a.url, 'POST', '/v1/jobs', { id: 'rc-long-2', kind: 'sleep', partitions: 40, input: { seed: 1, prepareMs: 2000, deviceMs: 1 } })).status).toBe(202);
    await waitUntil(async () => {
      const second = await heldBy('rc-long-2');
      return second && second !== first ? true : undefined;
    }, 15_000, 'the second long job on the other node', 100);
    // Both accepted by a; one cancelled on a, the other on b (a hears of it on Redis's cancel channel).
    for (const [id, n] of [['rc-1', a], ['rc-2', b]] as const) {
      expect((await http(a.url, 'POST', '/v1/jobs', { id, kind: 'sleep', partitions: 2, input: { seed: 2, prepareMs: 1, deviceMs: 1 } })).status).toBe(202);
      expect((await http(n.url, 'DELETE', `/v1/jobs/${id}`)).status).toBe(200);
      // Never started: cancelled in the queue.
      expect((await http(a.url, 'GET', `/v1/jobs/${id}`)).body).toMatchObject({ state: 'cancelled', startedAt: null });
    }
    // Redis loses its data well before a's 2 s check of its records would have seen the cancels.
    await new Promise((r) => setTimeout(r, 300));
    await cluster.redis.stop();
    cluster.redis = await startRedis(bin as string, cluster.redis.port);
    for (const id of ['rc-1', 'rc-2']) {
      for (const n of [a, b]) {
        const r = await waitUntil(async () => {
          const x = await http(n.url, 'GET', `/v1/jobs/${id}`);
          return x.status === 200 ? x : undefined;
        }, 20_000, `${id} readable after the loss`, 200);
        expect(r.body, id).toMatchObject({ id, state: 'cancelled' });
      }
    }
    expect(a.output()).toMatch(/republished [1-9]\d* ended jobs?/);
  }, 60_000);
});

describe.skipIf(!bin)('a job taken over by another node', () => {
  const cluster = useCluster({ STOKER_PREPARE_THREADS: '1', STOKER_PREPARE_CONCURRENCY: '1' });

  it('runs only its unfinished partitions: the dead holder’s finished outputs are in Redis', async () => {
    await cluster.start();
    // One preparation at a time: the partitions finish one by one, 300 ms apart.
    const node = cluster.node;
    const both = [await node('to-a'), await node('to-b')];
    await waitUntil(async () => (((await http(both[0]!.url, 'GET', '/v1/cluster')).body.nodes as unknown[]).length === 2 ? true : undefined), 10_000, 'two nodes', 100);
    const seed = 42;
    expect((await http(both[0]!.url, 'POST', '/v1/jobs', { id: 'to-1', kind: 'sleep', partitions: 10, input: { seed, prepareMs: 300, deviceMs: 1 } })).status).toBe(202);
    const holder = await waitUntil(async () => {
      const n = (await http(both[0]!.url, 'GET', '/v1/jobs/to-1')).body.node as string | null;
      return n === null ? undefined : n;
    }, 10_000, 'a node to take the job', 20);
    const [a, b] = holder === 'to-a' ? both : [both[1]!, both[0]!];
    await waitUntil(async () => (((await http(a!.url, 'GET', '/v1/jobs/to-1')).body.partitionsDone as number) >= 7 ? true : undefined), 30_000, `${holder} to finish 7 partitions`, 20);
    // The other node counts the outputs the holder shared (it said 0) — those in Redis, which may
    // trail the holder's own count by the one it is sharing: what the bound below counts on.
    const doneOnA = await waitUntil(async () => {
      const n = (await http(b!.url, 'GET', '/v1/jobs/to-1')).body.partitionsDone as number;
      return n >= 7 ? n : undefined;
    }, 5_000, 'the other node to count the shared outputs', 20);
    await a!.crash();
    // Taken over, its progress counts the outputs it reused (it counted only the new holder's own).
    const taken = await waitUntil(async () => {
      const v = (await http(b!.url, 'GET', '/v1/jobs/to-1')).body as { node: string | null; partitionsDone: number; state: string };
      return v.node !== null && v.node !== holder ? v : undefined;
    }, 60_000, 'the other node to take to-1 over', 50);
    expect(taken.partitionsDone).toBeGreaterThanOrEqual(doneOnA);
    const r = await waitUntil(async () => {
      const x = await http(b!.url, 'GET', '/v1/jobs/to-1/result?wait=5s');
      return x.status === 200 ? x : undefined;
    }, 60_000, 'to-1 done on the other node', 100);
    expect(r.body).toMatchObject({ state: 'done', result: { partitions: 10, total: sleepTotal(seed, 10) } });
    expect((await http(b!.url, 'GET', '/v1/jobs/to-1')).body.node).not.toBe(holder);
    const spans = ((await http(b!.url, 'GET', '/v1/timeline?since=10m')).body as { spans: { kind: string; jobId: string; partition: number }[] }).spans.filter((sp) => sp.jobId === 'to-1' && sp.kind === 'prepare');
    const ranOnB = [...new Set(spans.map((sp) => sp.partition))].sort((x, y) => x - y);
    console.log(`takeover: ${holder} finished ${doneOnA} of 10 partitions before kill -9; the other node ran partitions ${ranOnB.join(', ')}`);
    expect(ranOnB.length).toBeLessThanOrEqual(10 - doneOnA);
    expect(ranOnB.length).toBeGreaterThan(0);
  }, 120_000);
});

describe.skipIf(!bin)('SIGTERM while Redis is away', () => {
  const cluster = useCluster({ STOKER_CLUSTER_HEARTBEAT_MS: '300', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '2' });

  it('ends within server.shutdownTimeoutS and 5 s, saying so (a node stayed up 77 s with a 30 s timeout, until Redis returned); its job stays in the queue', async () => {
    await cluster.start();
    const a = await cluster.node('tr-a');
    expect((await http(a.url, 'POST', '/v1/jobs', { id: 'tr-1', kind: 'sleep', partitions: 2, input: { seed: 3, prepareMs: 30_000, deviceMs: 1 } })).status).toBe(202);
    await waitUntil(async () => ((await http(a.url, 'GET', '/v1/jobs/tr-1')).body.state === 'running' ? true : undefined), 10_000, 'tr-1 running on tr-a', 50);
    await cluster.redis.stop();
    const t0 = performance.now();
    const code = await Promise.race([a.stop(), new Promise((r) => setTimeout(() => r('still running 15 s after SIGTERM'), 15_000))]);
    const s = (performance.now() - t0) / 1000;
    expect(code).toBe(1);
    expect(s).toBeLessThan(2 + 5 + 2);
    expect(a.output()).toMatch(/stoker serve: not stopped 5 s past server\.shutdownTimeoutS \(the cluster's Redis away\?\): exiting now; unfinished jobs stay in the cluster's queue/);
  }, 60_000);
});

import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startAndWait, stopChild as stop } from '../runtime/child.js';
import { startRedis } from './redis-server.js';

/**
 * `stoker cluster-bench`: a private redis-server, then 1, 2, … N `stoker serve --cluster` nodes
 * in turn, each with `sleep` devices (they sleep for their service time, so a few cores
 * suffice). Every run gets enough jobs for about `seconds` at the nodes' device rate, all
 * submitted up front; throughput and each node's device occupancy are measured between 10 % and
 * 90 % of the jobs done (warm-up and drain left out).
 */
export interface ClusterBenchOptions {
  nodes: number;
  seconds: number;
  prepareMs: number;
  deviceMs: number;
  workers: number;
  partitions: number;
  redisServer: string;
  out: (s: string) => void;
}

export interface ClusterBenchRow {
  nodes: number;
  jobs: number;
  jobsPerS: number;
  ratio: number;
  occupancy: number[];
}

const CLI = fileURLToPath(new URL('../cli/main.js', import.meta.url));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function json(url: string, method = 'GET', body?: unknown): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { method, ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }) });
  return { status: res.status, body: (await res.json()) as unknown };
}

interface Sample {
  t: number;
  completed: number;
  busyS: number[];
}

async function runOnce(n: number, o: ClusterBenchOptions): Promise<Omit<ClusterBenchRow, 'ratio'>> {
  const redis = await startRedis(o.redisServer);
  const url = redis.url;
  const dirs: string[] = [];
  const nodes: { child: ChildProcess; url: string }[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-cluster-bench-'));
      dirs.push(dir);
      const env = { ...process.env, STOKER_CLUSTER_NODE_ID: `bench-${i + 1}`, STOKER_DEVICE_WORKERS: String(o.workers), STOKER_ENGINE_TARGET_WAITING: '4', STOKER_PREPARE_THREADS: '1' };
      const s = await startAndWait(process.execPath, [CLI, 'serve', '--host', '127.0.0.1', '--port', '0', '--data', dir, '--cluster', url], env, /listening on (http:\/\/\S+)/);
      nodes.push({ child: s.child, url: s.match[1] as string });
    }
    const ratePerNode = (o.workers * 1000) / o.deviceMs / o.partitions; // jobs/s one node's devices can take
    const jobs = Math.ceil(ratePerNode * n * o.seconds);
    const first = nodes[0]?.url as string;
    for (let i = 0; i < jobs; i += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, jobs - i) }, (_, k) => {
          const body = { id: `bench:${i + k}`, kind: 'sleep', partitions: o.partitions, input: { seed: i + k, prepareMs: o.prepareMs, deviceMs: o.deviceMs } };
          return json(`${nodes[(i + k) % n]?.url ?? first}/v1/jobs`, 'POST', body).then((r) => {
            if (r.status !== 202) throw new Error(`submit answered ${r.status}: ${JSON.stringify(r.body)}`);
          });
        }),
      );
    }
    const samples: Sample[] = [];
    for (;;) {
      const t = performance.now();
      const [cluster, ...statuses] = await Promise.all([json(`${first}/v1/cluster`), ...nodes.map((x) => json(`${x.url}/v1/status`))]);
      const q = (cluster.body as { queue: { completed: number; failed: number } }).queue;
      const busyS = statuses.map((s) => (s.body as { devices: { workers: { busyS: number }[] }[] }).devices.reduce((a, d) => a + d.workers.reduce((b, w) => b + w.busyS, 0), 0));
      samples.push({ t, completed: q.completed, busyS });
      if (q.failed > 0) throw new Error(`${q.failed} jobs failed`);
      if (q.completed >= jobs) break;
      await sleep(200);
    }
    const at = (frac: number) => samples.find((s) => s.completed >= jobs * frac) as Sample;
    const a = at(0.1);
    const b = at(0.9);
    const dt = (b.t - a.t) / 1000;
    return {
      nodes: n,
      jobs,
      jobsPerS: (b.completed - a.completed) / dt,
      occupancy: b.busyS.map((x, i) => (x - (a.busyS[i] ?? 0)) / (dt * o.workers)),
    };
  } finally {
    await Promise.all(nodes.map((x) => stop(x.child)));
    await redis.stop();
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  }
}

export async function clusterBench(o: ClusterBenchOptions): Promise<ClusterBenchRow[]> {
  const rows: ClusterBenchRow[] = [];
  o.out(`cluster bench: sleep jobs of ${o.partitions} partitions (prepare ${o.prepareMs} ms, device ${o.deviceMs} ms), ${o.workers} device workers per node, ~${o.seconds} s per run\n`);
  o.out('nodes  jobs  jobs/s  vs 1 node  occupancy per node\n');
  for (let n = 1; n <= o.nodes; n++) {
    const r = await runOnce(n, o);
    const base = rows[0]?.jobsPerS ?? r.jobsPerS;
    const row = { ...r, ratio: r.jobsPerS / base };
    rows.push(row);
    o.out(`${String(n).padStart(5)}  ${String(r.jobs).padStart(4)}  ${r.jobsPerS.toFixed(2).padStart(6)}  ${`${row.ratio.toFixed(2)}×`.padStart(9)}  ${r.occupancy.map((x) => x.toFixed(3)).join(' ')}\n`);
  }
  return rows;
}

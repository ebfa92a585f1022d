import { spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, redisServerPath, startRedis } from '../cluster/redis-server.js';
import { startAndWait } from '../runtime/child.js';

const CLI = fileURLToPath(new URL('./main.js', import.meta.url));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export interface ChaosOptions {
  /** How long jobs keep arriving and faults keep coming (per phase). */
  seconds: number;
  seed: number;
  /** Progress lines (stderr). */
  progress: (line: string) => void;
}

export interface ChaosReport {
  /** Faults injected, by kind. */
  faults: Record<string, number>;
  accepted: number;
  done: number;
  /** Failed or cancelled, by reason code. */
  failed: Record<string, number>;
  /** Accepted jobs the server no longer knows (404), or that never ended. */
  lost: number;
  /** Done with a result other than the one the input determines. */
  wrong: number;
  /** Jobs whose end was recorded more than once. */
  duplicated: number;
  /** Servers that exited without being killed (must be 0). */
  crashes: number;
  /** What the phase could not do here (e.g. no tmpfs for disk faults), else absent. */
  skipped?: string;
}

/** The sleep kind's result for a seed and partition count: Σ 2·(31·seed + p). */
const sleepTotal = (seed: number, partitions: number) => Array.from({ length: partitions }, (_, p) => 2 * (seed * 31 + p)).reduce((a, b) => a + b, 0);

/** A small deterministic generator (xorshift32) for the run's choices. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

/** A `stoker serve` that is restarted after each kill; an exit nobody asked for is a crash. */
class ServeProcess {
  child: ChildProcess | undefined;
  crashes = 0;
  private killing = false;

  constructor(
    private readonly args: string[],
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  async start(): Promise<void> {
    for (let i = 0; ; i++) {
      try {
        const c = (await startAndWait(process.execPath, [CLI, 'serve', ...this.args], this.env, /listening on /)).child;
        c.stdout?.resume();
        c.stderr?.resume();
        c.once('exit', () => {
          if (!this.killing && this.child === c) {
            this.crashes++;
            void this.start(); // the operator's supervisor would restart it too
          }
        });
        this.child = c;
        return;
      } catch (e) {
        // The port may still be held for a moment after a kill.
        if (i >= 20) throw e;
        await sleep(250);
      }
    }
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const c = this.child as ChildProcess;
    this.killing = true;
    const exited = new Promise((r) => c.once('exit', r));
    if (c.exitCode === null && c.signalCode === null) c.kill(signal);
    await exited;
    this.killing = false;
  }
}

/** The load: one submission at a time to `base()`, each retried with its id until acknowledged. */
async function load(end: number, random: () => number, base: () => string, accepted: Map<string, { partitions: number; seed: number }>, prefix: string): Promise<void> {
  for (let n = 0; performance.now() < end; n++) {
    const id = `${prefix}-${n}`;
    const job = { partitions: 1 + Math.floor(random() * 4), seed: n };
    const body = { id, kind: 'sleep', partitions: job.partitions, input: { seed: job.seed, prepareMs: 20 + Math.floor(random() * 200), deviceMs: 1 + Math.floor(random() * 20) } };
    for (;;) {
      try {
        const res = await fetch(`${base()}/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
        await res.arrayBuffer();
        if (res.status === 202 || res.status === 200) {
          accepted.set(id, job);
          break;
        }
        if (res.status === 400 || res.status === 409) throw new Error(`submit ${id}: ${res.status}`);
      } catch (e) {
        if (e instanceof Error && e.message.startsWith('submit ')) throw e;
      }
      await sleep(50);
    }
    await sleep(random() * 40);
  }
}

/**
 * Every acknowledged job must end, with its result: asks `base()` (any node) until it answers.
 * `unknownForMs`: how long a job may be unknown (404) before it counts as lost (a cluster queues
 * again what a Redis restart lost within seconds).
 */
async function verify(accepted: Map<string, { partitions: number; seed: number }>, base: () => string, report: ChaosReport, unknownForMs = 0): Promise<void> {
  for (const [id, job] of accepted) {
    let body: { state?: string; result?: { total?: number }; error?: { code: string } | null } | undefined;
    let unknownSince: number | undefined;
    for (let tries = 0; tries < 120; tries++) {
      try {
        const res = await fetch(`${base()}/v1/jobs/${encodeURIComponent(id)}/result?wait=10s`, { signal: AbortSignal.timeout(20_000) });
        const status = res.status;
        body = (await res.json()) as typeof body;
        if (status === 200) break;
        if (status === 404) {
          unknownSince ??= performance.now();
          if (performance.now() - unknownSince >= unknownForMs) break;
          await sleep(250);
        } else {
          unknownSince = undefined;
          // (A 503 — the nodes republishing just after Redis lost its data — asks for a retry
          // in a few seconds: asked again at once, 120 tries passed in a second and the job
          // counted as lost.)
          if (status === 503) await sleep(250);
        }
      } catch {
        await sleep(200);
      }
    }
    const state = body?.state;
    if (state === 'done') {
      report.done++;
      if (body?.result?.total !== sleepTotal(job.seed, job.partitions)) report.wrong++;
    } else if (state === 'failed' || state === 'cancelled') {
      const code = body?.error?.code ?? state;
      report.failed[code] = (report.failed[code] ?? 0) + 1;
    } else report.lost++;
  }
}

/** A small tmpfs for the data dir, so that the disk can really fill (needs root); undefined where it cannot be mounted. */
function smallDisk(dir: string, mb: number): string | undefined {
  const at = path.join(dir, 'disk');
  fs.mkdirSync(at);
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${mb}m`, 'tmpfs', at], { encoding: 'utf8' });
  return r.status === 0 ? at : undefined;
}

/** Fills the disk under `at` to the last byte (a filler file); returns the filler's path. */
function fill(at: string): string {
  const filler = path.join(at, 'filler');
  const fd = fs.openSync(filler, 'w');
  try {
    for (const size of [1 << 20, 1 << 12, 1 << 9]) {
      const chunk = Buffer.alloc(size);
      try {
        for (;;) fs.writeSync(fd, chunk);
      } catch {
        // ENOSPC: the next, smaller chunk
      }
    }
  } finally {
    fs.closeSync(fd);
  }
  return filler;
}

/**
 * The chaos run, local phase: a `stoker serve` under a steady stream of sleep jobs is killed with
 * SIGKILL at random moments (every 0.5–3 s) and restarted on the same data dir and port, and —
 * where a small tmpfs can be mounted for the data dir (root) — its disk fills to the last byte
 * and frees again; the client retries each submission with its id until it is acknowledged (a
 * retry of a journaled job answers 200, a full disk 507). Then every acknowledged job must end
 * exactly once with the result its input determines: the report counts the lost, the wrong, the
 * duplicated and the crashes (must all be 0).
 */
export async function chaosRun(o: ChaosOptions): Promise<ChaosReport> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-chaos-'));
  const disk = smallDisk(dir, 48);
  const data = path.join(disk ?? dir, 'data');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const server = new ServeProcess(['--host', '127.0.0.1', '--port', String(port), '--data', data], { ...process.env, STOKER_PREPARE_THREADS: '1', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '2' });
  const random = rng(o.seed);
  const accepted = new Map<string, { partitions: number; seed: number }>();
  const doneEvents = new Map<string, number>();
  const faults: Record<string, number> = { 'kill -9': 0, ...(disk ? { 'disk full': 0 } : {}) };
  let running = true;
  try {
    await server.start();

    // The event stream, reopened after each restart: counts each job's end announcements.
    const listen = (async () => {
      while (running) {
        try {
          const res = await fetch(`${base}/v1/events`);
          let buf = '';
          for await (const chunk of (res.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream())) {
            buf += chunk;
            let i: number;
            while ((i = buf.indexOf('\n\n')) >= 0) {
              const line = buf.slice(0, i).split('\n').find((l) => l.startsWith('data: '));
              buf = buf.slice(i + 2);
              if (!line) continue;
              const e = JSON.parse(line.slice(6)) as { type: string; id?: string };
              if ((e.type === 'job.done' || e.type === 'job.failed' || e.type === 'job.cancelled') && e.id) doneEvents.set(e.id, (doneEvents.get(e.id) ?? 0) + 1);
            }
            if (!running) break;
          }
        } catch {
          // the server was killed: try again
        }
        await sleep(100);
      }
    })();

    const end = performance.now() + o.seconds * 1000;
    const loading = load(end, random, () => base, accepted, 'chaos');
    // The faults: SIGKILL and a restart on the same data dir, or (one in three, with a small disk) the disk full for 1–3 s.
    while (performance.now() < end) {
      await sleep(500 + random() * 2500);
      if (performance.now() >= end) break;
      if (disk && random() < 1 / 3) {
        const filler = fill(disk);
        await sleep(1000 + random() * 2000);
        fs.rmSync(filler);
        faults['disk full'] = (faults['disk full'] ?? 0) + 1;
      } else {
        await server.kill();
        faults['kill -9'] = (faults['kill -9'] ?? 0) + 1;
        await server.start();
      }
      o.progress(`${((o.seconds * 1000 - (end - performance.now())) / 1000).toFixed(0).padStart(4)} s  ${Object.entries(faults).map(([k, n]) => `${n} ${k}`).join(', ')}  ${accepted.size} jobs acknowledged`);
    }
    await loading;

    const report: ChaosReport = { faults, accepted: accepted.size, done: 0, failed: {}, lost: 0, wrong: 0, duplicated: 0, crashes: 0 };
    if (!disk) report.skipped = 'disk faults: no small tmpfs could be mounted for the data dir (run as root to have them)';
    await verify(accepted, () => base, report);
    // Let the last end events arrive, then stop listening.
    await sleep(500);
    running = false;
    report.duplicated = [...doneEvents.values()].filter((n) => n > 1).length;
    report.crashes = server.crashes;
    await server.kill('SIGTERM');
    await Promise.race([listen, sleep(2000)]);
    return report;
  } finally {
    running = false;
    if (server.child && server.child.exitCode === null && server.child.signalCode === null) await server.kill();
    if (disk) spawnSync('umount', [disk]);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The chaos run, cluster phase: three `stoker serve --cluster` nodes on a private redis-server
 * (no persistence) under a stream of sleep jobs sent to any live node; at random moments one node
 * is killed with SIGKILL and restarted, or Redis is stopped and started again (empty: it lost the
 * queue). Every acknowledged job must end, readable on any node, with its result; `duplicated`
 * counts jobs whose completion Redis recorded more than once since its last restart.
 */
export async function chaosCluster(o: ChaosOptions): Promise<ChaosReport> {
  const bin = redisServerPath();
  const report: ChaosReport = { faults: { 'node kill -9': 0, 'Redis restart': 0 }, accepted: 0, done: 0, failed: {}, lost: 0, wrong: 0, duplicated: 0, crashes: 0 };
  if (!bin) {
    report.skipped = 'the cluster phase: redis-server is not installed (apt-get install redis-server)';
    return report;
  }
  try {
    await Promise.all([import('bullmq'), import('ioredis')]);
  } catch {
    report.skipped = 'the cluster phase: bullmq and ioredis are not installed (npm install bullmq ioredis)';
    return report;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-chaos-cluster-'));
  let redis = await startRedis(bin);
  const nodes: ServeProcess[] = [];
  const urls: string[] = [];
  const random = rng(o.seed + 1);
  const accepted = new Map<string, { partitions: number; seed: number }>();
  const faults = report.faults;
  try {
    for (let n = 0; n < 3; n++) {
      const port = await freePort();
      urls.push(`http://127.0.0.1:${port}`);
      const env = { ...process.env, STOKER_PREPARE_THREADS: '1', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '2', STOKER_CLUSTER_NODE_ID: `chaos-${n}`, STOKER_CLUSTER_HEARTBEAT_MS: '500' };
      const node = new ServeProcess(['--host', '127.0.0.1', '--port', String(port), '--data', path.join(dir, `node-${n}`), '--cluster', redis.url], env);
      nodes.push(node);
      await node.start();
    }
    let down = -1;
    let next = 0;
    const base = () => {
      next = (next + 1) % urls.length;
      if (next === down) next = (next + 1) % urls.length;
      return urls[next] as string;
    };
    const end = performance.now() + o.seconds * 1000;
    const loading = load(end, random, base, accepted, 'cluster-chaos');
    while (performance.now() < end) {
      await sleep(1000 + random() * 3000);
      if (performance.now() >= end) break;
      if (random() < 1 / 3) {
        await redis.stop();
        await sleep(200 + random() * 800);
        redis = await startRedis(bin, redis.port);
        faults['Redis restart'] = (faults['Redis restart'] ?? 0) + 1;
      } else {
        down = Math.floor(random() * nodes.length);
        await (nodes[down] as ServeProcess).kill();
        faults['node kill -9'] = (faults['node kill -9'] ?? 0) + 1;
        await (nodes[down] as ServeProcess).start();
        down = -1;
      }
      o.progress(`${((o.seconds * 1000 - (end - performance.now())) / 1000).toFixed(0).padStart(4)} s  cluster: ${Object.entries(faults).map(([k, n]) => `${n} ${k}`).join(', ')}  ${accepted.size} jobs acknowledged`);
    }
    await loading;
    report.accepted = accepted.size;
    await verify(accepted, base, report, 10_000);
    report.duplicated = await duplicatedCompletions(redis.url, [...accepted.keys()]);
    report.crashes = nodes.reduce((a, n) => a + n.crashes, 0);
    return report;
  } finally {
    for (const n of nodes) if (n.child && n.child.exitCode === null && n.child.signalCode === null) await n.kill();
    await redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Jobs whose completion Redis counted more than once (stoker:cluster:completions:<id>). */
async function duplicatedCompletions(url: string, ids: string[]): Promise<number> {
  const { Redis } = await import('ioredis');
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await r.connect();
    let n = 0;
    for (let i = 0; i < ids.length; i += 500) {
      const counts = await r.mget(ids.slice(i, i + 500).map((id) => `stoker:cluster:completions:${id}`));
      n += counts.filter((c) => Number(c ?? 0) > 1).length;
    }
    return n;
  } finally {
    r.disconnect();
  }
}

import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../cluster/redis-server.js';
import { startAndWait } from '../runtime/child.js';

const CLI = fileURLToPath(new URL('./main.js', import.meta.url));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export interface ChaosOptions {
  /** How long jobs keep arriving and the server keeps being killed. */
  seconds: number;
  seed: number;
  /** Progress lines (stderr). */
  progress: (line: string) => void;
}

export interface ChaosReport {
  faults: number;
  accepted: number;
  done: number;
  /** Failed or cancelled, by reason code. */
  failed: Record<string, number>;
  /** Accepted jobs the server no longer knows (404), or that never ended. */
  lost: number;
  /** Done with a result other than the one the input determines. */
  wrong: number;
  /** Jobs whose end was announced more than once on the event stream. */
  duplicated: number;
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

/**
 * The chaos run: a `stoker serve` under a steady stream of sleep jobs is killed with SIGKILL at
 * random moments (every 0.5–3 s) and restarted on the same data dir and port; the client retries
 * each submission with its id until it is acknowledged (a retry of a journaled job answers 200).
 * Then every acknowledged job must end exactly once with the result its input determines: the
 * report counts the lost, the wrong and the duplicated (must all be 0).
 */
export async function chaosRun(o: ChaosOptions): Promise<ChaosReport> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-chaos-'));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const env = { ...process.env, STOKER_PREPARE_THREADS: '1', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '2' };
  let child: ChildProcess | undefined;
  const start = async () => {
    for (let i = 0; ; i++) {
      try {
        child = (await startAndWait(process.execPath, [CLI, 'serve', '--host', '127.0.0.1', '--port', String(port), '--data', dir], env, /listening on /)).child;
        return;
      } catch (e) {
        // The port may still be held for a moment after a kill.
        if (i >= 20) throw e;
        await sleep(250);
      }
    }
  };
  const random = rng(o.seed);
  const accepted = new Map<string, { partitions: number; seed: number }>();
  const doneEvents = new Map<string, number>();
  let faults = 0;
  let running = true;
  await start();

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
            const data = buf.slice(0, i).split('\n').find((l) => l.startsWith('data: '));
            buf = buf.slice(i + 2);
            if (!data) continue;
            const e = JSON.parse(data.slice(6)) as { type: string; id?: string };
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

  // The load: one submission at a time, each retried with its id until acknowledged.
  const end = performance.now() + o.seconds * 1000;
  const load = (async () => {
    for (let n = 0; performance.now() < end; n++) {
      const id = `chaos-${n}`;
      const job = { partitions: 1 + Math.floor(random() * 4), seed: n };
      const body = { id, kind: 'sleep', partitions: job.partitions, input: { seed: job.seed, prepareMs: 20 + Math.floor(random() * 200), deviceMs: 1 + Math.floor(random() * 20) } };
      for (;;) {
        try {
          const res = await fetch(`${base}/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
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
  })();

  // The faults: SIGKILL at random moments, then a restart on the same data dir.
  while (performance.now() < end) {
    await sleep(500 + random() * 2500);
    if (performance.now() >= end) break;
    const c = child as ChildProcess;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill('SIGKILL');
    await exited;
    faults++;
    await start();
    o.progress(`${((o.seconds * 1000 - (end - performance.now())) / 1000).toFixed(0).padStart(4)} s  ${faults} kills  ${accepted.size} jobs acknowledged`);
  }
  await load;

  // Every acknowledged job must end, once, with its result.
  const report: ChaosReport = { faults, accepted: accepted.size, done: 0, failed: {}, lost: 0, wrong: 0, duplicated: 0 };
  for (const [id, job] of accepted) {
    let body: { state?: string; result?: { total?: number }; error?: { code: string } | null } | undefined;
    for (let tries = 0; tries < 60; tries++) {
      const res = await fetch(`${base}/v1/jobs/${encodeURIComponent(id)}/result?wait=10s`);
      const status = res.status;
      body = (await res.json()) as typeof body;
      if (status === 200 || status === 404) break;
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
  // Let the last end events arrive, then stop listening.
  await sleep(500);
  running = false;
  report.duplicated = [...doneEvents.values()].filter((n) => n > 1).length;
  const c = child as ChildProcess;
  const exited = new Promise((r) => c.once('exit', r));
  c.kill('SIGTERM');
  await exited;
  await Promise.race([listen, sleep(2000)]);
  fs.rmSync(dir, { recursive: true, force: true });
  return report;
}

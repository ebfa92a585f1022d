/**
 * The preparation pool's task (piscina): loads the module once per thread and runs its
 * `prepare(input, ctx)`. `ctx.signal` fires when the runtime withdraws the task: it announces the
 * task's number on the pool's BroadcastChannel (one message per withdrawal, none per task).
 */
import { performance } from 'node:perf_hooks';
import { BroadcastChannel } from 'node:worker_threads';
import { moduleLoader, type PrepareModule, type PrepareRequest } from './protocol.js';

const load = moduleLoader<PrepareModule>('prepare', 'prepare', () => 'prepare(input, ctx)');

/** The running tasks' controllers, and withdrawals heard before their task started here. */
const running = new Map<number, AbortController>();
const early = new Set<number>();
const EARLY_MAX = 4096;
let channel: BroadcastChannel | undefined;

function listen(name: string): void {
  if (channel) return;
  channel = new BroadcastChannel(name);
  // Announcements must not keep an idle thread alive.
  channel.unref();
  channel.onmessage = (e) => {
    const task = (e as { data: number }).data;
    const c = running.get(task);
    if (c) return c.abort(new Error('the partition was withdrawn'));
    // Every thread hears every withdrawal; keep a bounded memory of those not (yet) ours.
    early.add(task);
    if (early.size > EARLY_MAX) early.delete(early.values().next().value as number);
  };
}

export default async function prepareTask(req: PrepareRequest): Promise<{ meta: unknown; latencyMs: number }> {
  listen(req.abortChannel);
  const m = load(req.module, req.style);
  const mod = m instanceof Promise ? await m : m;
  const controller = new AbortController();
  if (early.delete(req.task)) controller.abort(new Error('the partition was withdrawn'));
  running.set(req.task, controller);
  const { jobId, partition, partitions, buffer } = req.ctx;
  const ctx = { jobId, job: jobId, partition, partitions, signal: controller.signal, ...(buffer ? { buffer } : {}) };
  const t0 = performance.now();
  try {
    const meta = await mod.prepare(req.input, ctx as Parameters<PrepareModule['prepare']>[1]);
    return { meta, latencyMs: performance.now() - t0 };
  } finally {
    running.delete(req.task);
  }
}

/**
 * The preparation pool's task (piscina): loads the module once per thread and runs its
 * `prepare(input, ctx)`. `ctx.signal` fires when the runtime withdraws the task: it announces the
 * task's number on the pool's BroadcastChannel (one message per withdrawal, none per task), and
 * marks it withdrawn in the task's `owner` words, read as the task begins.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { threadId } from 'node:worker_threads';
import { types } from 'node:util';
import { BroadcastChannel } from 'node:worker_threads';
import { moduleLoader, thrownValue, type PrepareItemReply, type PrepareModule, type PrepareReply, type PrepareRequest } from './protocol.js';
import { itemError, noRetry } from '../no-retry.js';

const load = moduleLoader<PrepareModule>('prepare', 'prepare', () => 'prepare(input, ctx)');
const loadBatch = moduleLoader<{ prepareBatch(inputs: unknown[], ctx: unknown[]): unknown }>('prepare', 'prepareBatch', () => 'prepareBatch(inputs[], ctx[])');

/** The running tasks' controllers (a withdrawal made before its task began is in the task's `owner`). */
const running = new Map<number, AbortController>();
let channel: BroadcastChannel | undefined;

function listen(name: string): void {
  if (channel) return;
  channel = new BroadcastChannel(name);
  // Announcements must not keep an idle thread alive.
  channel.unref();
  channel.onmessage = (e) => {
    // (Every thread hears every withdrawal: one not running here is another thread's, or not begun.)
    running.get((e as { data: number }).data)?.abort(new Error('the partition was withdrawn'));
  };
}

const isBytes = (v: unknown): v is ArrayBuffer | SharedArrayBuffer | ArrayBufferView => v instanceof ArrayBuffer || v instanceof SharedArrayBuffer || ArrayBuffer.isView(v);
/** The bytes of a bytes value, without a copy. */
const view = (v: ArrayBuffer | SharedArrayBuffer | ArrayBufferView) => (ArrayBuffer.isView(v) ? new Uint8Array(v.buffer, v.byteOffset, v.byteLength) : new Uint8Array(v));

/**
 * Large prepared bytes for a process device go to a handoff file, written here in the
 * preparation thread (the server's event loop never copies them): those `prepare` returned, or
 * the partition's buffer.
 */
function handOff(req: PrepareRequest, meta: unknown, ctx = req.ctx, bufferBytes = req.bufferBytes, index = -1): PrepareReply['file'] | undefined {
  const h = req.handoff;
  if (!h) return undefined;
  const bytes = isBytes(meta) ? view(meta) : ctx.buffer ? new Uint8Array(ctx.buffer, 0, bufferBytes) : undefined;
  if (!bytes || bytes.byteLength < h.minBytes) return undefined;
  const path = join(h.dir, `${process.pid}-${threadId}-${req.task}${index >= 0 ? `-${index}` : ''}.bin`);
  const t0 = performance.now();
  try {
    writeFileSync(path, bytes);
  } catch (e) {
    rmSync(path, { force: true });
    throw new Error(`cannot write the handoff file ${path} (${(e as Error).message}): free space in the device's handoffDir, or raise handoffMinBytes`);
  }
  return { path, bytes: bytes.byteLength, writeMs: performance.now() - t0 };
}

/**
 * Where a prepared value holds something structured clone refuses (a function, a symbol, a
 * promise, a proxy, a weak collection), its path; null where there is none. The pool posts the
 * reply itself, and a reply that cannot be cloned crashes the thread — failing every preparation
 * on it, other jobs' too — so the value is checked here, and its own preparation fails, saying
 * where. Primitives and bytes are passed over without a path being built: an array of a million
 * numbers is checked in milliseconds.
 */
export function uncloneable(value: unknown, path = 'the prepared value'): string | null {
  try {
    const found = refused(value, new Set());
    return found ? `${path}${found.path.reverse().join('')} (${found.what})` : null;
  } catch (e) {
    if (e instanceof RangeError) return `${path} (nested too deeply to be sent: ${e.message})`;
    throw e;
  }
}

/** Whether a value needs no look inside: a primitive structured clone copies as it is. */
const plain = (x: unknown) => x === null || (typeof x !== 'object' && typeof x !== 'function' && typeof x !== 'symbol');

/** What structured clone refuses in `x` (a member of its parent at `segment`), or null. */
function member(x: unknown, segment: string, seen: Set<object>): { path: string[]; what: string } | null {
  const r = refused(x, seen);
  if (r) r.path.push(segment);
  return r;
}

/** What structured clone refuses in `v`, with its path from `v` (segments last first), or null. */
function refused(v: unknown, seen: Set<object>): { path: string[]; what: string } | null {
  if (typeof v === 'function') return { path: [], what: 'a function' };
  if (typeof v === 'symbol') return { path: [], what: 'a symbol' };
  if (typeof v !== 'object' || v === null) return null;
  if (types.isProxy(v)) return { path: [], what: 'a Proxy' };
  if (isBytes(v) || seen.has(v)) return null;
  if (v instanceof Promise) return { path: [], what: 'a promise: await it in prepare' };
  if (v instanceof WeakMap || v instanceof WeakSet || v instanceof WeakRef || v instanceof FinalizationRegistry) return { path: [], what: `a ${v.constructor.name}` };
  if (v instanceof Date || v instanceof RegExp) return null;
  seen.add(v);
  if (v instanceof Error) return plain(v.cause) ? null : member(v.cause, '.cause', seen);
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const x: unknown = v[i];
      if (plain(x)) continue;
      const r = member(x, `[${i}]`, seen);
      if (r) return r;
    }
    return null;
  }
  if (v instanceof Map) {
    for (const [k, x] of v) {
      const r = (plain(k) ? null : member(k, ': a key of the Map', seen)) ?? (plain(x) ? null : member(x, `.get(${typeof k === 'string' ? JSON.stringify(k) : '…'})`, seen));
      if (r) return r;
    }
    return null;
  }
  if (v instanceof Set) {
    for (const x of v) {
      if (plain(x)) continue;
      const r = member(x, ': a member of the Set', seen);
      if (r) return r;
    }
    return null;
  }
  for (const k in v) {
    if (!Object.hasOwn(v, k)) continue;
    const x = (v as Record<string, unknown>)[k];
    if (plain(x)) continue;
    const r = member(x, `.${k}`, seen);
    if (r) return r;
  }
  return null;
}

/** The error for a prepared value that cannot be sent between threads (see uncloneable). */
function notSendable(where: string): Error {
  return new Error(`prepare returned a value that cannot be sent between threads: ${where}: return plain data — objects, arrays, numbers, strings, typed arrays`);
}

/** A kind module's ctx for one item (the task's signal fires when the whole task is withdrawn). */
function itemCtx(c: PrepareRequest['ctx'], signal: AbortSignal) {
  const { jobId, partition, partitions, buffer } = c;
  return { jobId, job: jobId, partition, partitions, signal, ...(buffer ? { buffer } : {}) };
}

/** A preparation batch: the kind module's prepareBatch(inputs[], ctx[]); one prepared value per item, an Error in its place failing that item alone. */
async function prepareBatch(req: PrepareRequest, batch: NonNullable<PrepareRequest['batch']>, signal: AbortSignal): Promise<PrepareReply> {
  const m = loadBatch(req.module, req.style);
  const mod = m instanceof Promise ? await m : m;
  const t0 = performance.now();
  const out = await mod.prepareBatch(
    batch.map((b) => b.input),
    batch.map((b) => itemCtx(b.ctx, signal)),
  );
  if (!Array.isArray(out) || out.length !== batch.length) {
    throw new Error(`prepareBatch returned ${Array.isArray(out) ? `${out.length} values` : typeof out} for ${batch.length} items: return an array with one prepared value (or Error) per item, in order`);
  }
  const files: string[] = [];
  try {
    const replies = out.map((meta: unknown, i): PrepareItemReply => {
      if (meta instanceof Error) return itemError(meta);
      const bad = uncloneable(meta, `the prepared value of item ${i}`);
      if (bad) return { error: notSendable(bad).message, retry: false };
      const b = batch[i] as (typeof batch)[number];
      const file = handOff(req, meta, b.ctx, b.bufferBytes, i);
      if (!file) return { meta };
      files.push(file.path);
      return { meta: isBytes(meta) ? null : meta, file };
    });
    return { meta: null, latencyMs: performance.now() - t0, batch: replies };
  } catch (e) {
    // A handoff file that could not be written fails the batch: those already written go.
    for (const f of files) rmSync(f, { force: true });
    throw e;
  }
}

export default async function prepareTask(req: PrepareRequest): Promise<PrepareReply> {
  // Which thread runs it: one that ignores its withdrawal is ended by the runtime. And whether it
  // was withdrawn before it began (an announcement made before it ran here is not heard again).
  const words = new Int32Array(req.owner);
  Atomics.store(words, 0, threadId);
  listen(req.abortChannel);
  const controller = new AbortController();
  if (Atomics.load(words, 1) === 1) controller.abort(new Error('the partition was withdrawn'));
  running.set(req.task, controller);
  try {
    if (req.batch) return await prepareBatch(req, req.batch, controller.signal);
    const m = load(req.module, req.style);
    const mod = m instanceof Promise ? await m : m;
    const t0 = performance.now();
    let meta: unknown;
    let heldMs = 0;
    try {
      const made = mod.prepare(req.input, itemCtx(req.ctx, controller.signal) as Parameters<PrepareModule['prepare']>[1]);
      heldMs = performance.now() - t0;
      meta = await made;
    } catch (e) {
      // (A thread's clone of the error would drop its retry: false.)
      if (noRetry(e)) return { meta: null, latencyMs: performance.now() - t0, finalError: e instanceof Error ? e.message : String(e) };
      throw e;
    }
    const bad = uncloneable(meta);
    // (Final: the same input would return the same value again — it was retried.)
    if (bad) return { meta: null, latencyMs: performance.now() - t0, finalError: notSendable(bad).message, heldMs };
    const file = handOff(req, meta);
    if (!file) return { meta, latencyMs: performance.now() - t0, heldMs };
    return { meta: isBytes(meta) ? null : meta, latencyMs: performance.now() - t0, file, heldMs };
  } catch (e) {
    // (A thrown null or undefined reached the pool as no error at all: its reply was read as a result.)
    throw e instanceof Error ? e : new Error(`${req.batch ? 'prepareBatch' : 'prepare'} threw ${thrownValue(e)}, not an Error: throw new Error("why")`);
  } finally {
    running.delete(req.task);
  }
}

/** What the runtime and its threads say to each other, and what workload modules export. */

/** Where a partition's work happens, as the workload modules see it. */
export interface StageContext {
  jobId: string;
  partition: number;
  /** The job's partition count. */
  partitions: number;
  /** The pooled shared buffer the preparation writes into and the device reads (no copy); absent where bufferBytes is 0. */
  buffer?: SharedArrayBuffer;
  /** Preparation only: fires when the engine withdraws the partition (cancel, failure, shutdown); a preparation that stops early frees its slot sooner. */
  signal?: AbortSignal;
}

/** A module run in the preparation threads: `export function prepare(input, ctx)`. */
export interface PrepareModule {
  prepare(input: unknown, ctx: StageContext): unknown;
}

/** A module run in the device threads: `export function run(input, ctx)`. */
export interface DeviceModule {
  run(input: unknown, ctx: StageContext & { meta: unknown; device: number; worker: number }): unknown;
}

/**
 * How a thread calls a module: `workload` modules (ThreadedWorkload) get `prepare(input, ctx)`
 * and `run(input, ctx)` with the prepared value as `ctx.meta`; `kind` modules (stoker serve's job
 * kinds) get `prepare(input, ctx)` and `run(prepared, ctx)` with the input as `ctx.input`.
 */
export type CallStyle = 'workload' | 'kind';

/** The context the threads build a module's `ctx` from (the buffer is absent when the partition has none). */
export interface ThreadTaskContext {
  jobId: string;
  partition: number;
  /** The job's partition count. */
  partitions: number;
  buffer?: SharedArrayBuffer;
}

export interface PrepareRequest {
  module: string;
  style: CallStyle;
  input: unknown;
  ctx: ThreadTaskContext;
  /** Names this task in the pool's abort channel. */
  task: number;
  /** The BroadcastChannel on which the runtime announces the tasks it withdrew. */
  abortChannel: string;
  /** Two Int32 words: the thread that runs the task writes its threadId in the first as it begins (the runtime ends that thread where the task ignores its withdrawal); the runtime sets the second to 1 when it withdraws the task. */
  owner: SharedArrayBuffer;
  /** Bytes of the buffer the partition asked for (what a handoff file holds). */
  bufferBytes: number;
  /** For a process device: prepared bytes of at least `minBytes` go to a file in `dir` (its path to the worker), not through the pipe. */
  handoff?: Handoff;
  /** A preparation batch (kind modules' `prepareBatch(inputs[], ctx[])`): each item's input, context and buffer bytes; then `input`, `ctx` and `bufferBytes` are the first's. */
  batch?: { input: unknown; ctx: ThreadTaskContext; bufferBytes: number }[];
}

/** Where large prepared data is handed to a process device: a file in a memory-backed folder. */
export interface Handoff {
  dir: string;
  minBytes: number;
}

/** What a preparation task answers. */
export interface PrepareReply {
  meta: unknown;
  latencyMs: number;
  /** The prepared bytes, in a handoff file (the buffer's, or those `prepare` returned: then meta is null). */
  file?: { path: string; bytes: number; writeMs: number };
  /** A preparation batch's answer, per item (then `meta` is null). */
  batch?: PrepareItemReply[];
  /** `prepare` threw an error with `retry: false` (which a thread's clone of it would lose): its message; then `meta` is null. */
  finalError?: string;
  /** How long the call to `prepare` held its thread before it returned (its promise or its value), ms: what it computed synchronously. */
  heldMs?: number;
}

/** One item of a preparation batch: what it prepared (and its handoff file), or the message of the Error the module returned in its place. */
export type PrepareItemReply = { meta: unknown; file?: { path: string; bytes: number; writeMs: number } } | { error: string; retry?: false };

export interface DeviceWorkerData {
  /** BigInt64Array layout: [busyNs, count] per worker slot. */
  counters: SharedArrayBuffer;
  device: number;
  /** The device's kind as configured (`cpu`, `webgpu`): kind modules see it as ctx.deviceKind. */
  deviceKind: string;
}

export interface DeviceRequest {
  id: number;
  module: string;
  style: CallStyle;
  /** The worker slot whose counters the step adds to, and the worker's index on its device. */
  slot: number;
  worker: number;
  input: unknown;
  ctx: ThreadTaskContext & { meta: unknown };
  /** A batch (kind modules' `runBatch(prepared[], ctx[])`): each item's input and context; then `input` and `ctx` are the first's. */
  batch?: { input: unknown; ctx: ThreadTaskContext & { meta: unknown } }[];
}

/** A batch's answer: per item its output, or the message of the Error the module returned in its place. */
export type BatchItemReply = { output: unknown } | { error: string; retry?: false };

/**
 * A step's answer (`retry: false`: the step threw an error with `retry: false`); `begun` comes
 * first from a thread that had to load the step's module (its start counts as waiting, not as the step).
 */
export type DeviceReply = { id: number; ok: true; output: unknown } | { id: number; ok: false; message: string; retry?: false } | { id: number; begun: true };

/** A thrown value that is no Error, as a message can show it (String() throws for some objects). */
export function thrownValue(e: unknown): string {
  if (typeof e === 'string') return JSON.stringify(e.length > 200 ? `${e.slice(0, 200)}…` : e);
  if (typeof e === 'function') return 'a function';
  if (typeof e === 'symbol') return 'a symbol';
  return e === null || e === undefined || typeof e !== 'object' ? String(e) : `an object (${Object.prototype.toString.call(e)})`;
}

/** A kind module's exports: its named exports, or its default export's properties when it has no `prepare` (or `prepareBatch`) of its own. */
export function kindExports(mod: Record<string, unknown>): Record<string, unknown> {
  let d = mod['default'];
  // TypeScript compiled to CommonJS: `export default {…}` is module.exports.default, marked __esModule.
  const cjs = d !== null && typeof d === 'object' ? (d as Record<string, unknown>) : undefined;
  if (cjs?.['__esModule'] === true && cjs['default'] !== null && typeof cjs['default'] === 'object') d = cjs['default'];
  return typeof mod['prepare'] !== 'function' && typeof mod['prepareBatch'] !== 'function' && d !== null && typeof d === 'object' ? (d as Record<string, unknown>) : mod;
}

/**
 * Loads ES modules once per thread and checks that each exports the function a call needs; a
 * module already loaded is returned at once (not as a promise: no extra turn per step).
 */
export function moduleLoader<M>(what: string, fn: string, signature: (style: CallStyle) => string): (url: string, style: CallStyle) => M | Promise<M> {
  const loading = new Map<string, Promise<M>>();
  const loaded = new Map<string, M>();
  return (url, style) => {
    const key = `${style} ${url}`;
    const ready = loaded.get(key);
    if (ready) return ready;
    let m = loading.get(key);
    if (!m) {
      m = (import(url) as Promise<Record<string, unknown>>).then((raw) => {
        const mod = style === 'kind' ? kindExports(raw) : raw;
        // (Tried again, the module is the same: no retry — a job failed "(after 2 attempts)" for it.)
        if (typeof mod[fn] !== 'function') throw Object.assign(new Error(`${style === 'kind' ? 'kind' : what} module ${url} must export a function ${signature(style)}`), { retry: false as const });
        loaded.set(key, mod as M);
        return mod as M;
      }, (e: unknown) => {
        // (It loaded in the server's thread, where it was checked: what fails here is its loading
        // in this one — read as the step's own failure, it was "cannot init GPU context".)
        const message = e instanceof Error ? e.message : String(e);
        throw Object.assign(new Error(`${style === 'kind' ? 'kind' : what} module ${url} does not load in its worker thread (it did in the server's own): ${message}`, { cause: e }), { retry: false });
      });
      loading.set(key, m);
    }
    return m;
  };
}

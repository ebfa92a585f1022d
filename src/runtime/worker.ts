/**
 * stoker/worker: the Node side of a process device (docs/process-devices.md). A worker program
 * calls `serve(handle)`; stoker sends it one item at a time over stdin, `handle(item)` returns the
 * item's output (a JSON value or bytes), and the helper replies over stdout with the output and
 * its own measure of the call (`busyNs`: the time the item occupied this worker).
 *
 * ```js
 * // device.mjs, run by stoker as [device.process] command = "node", args = ["device.mjs"]
 * import { serve } from 'stoker/worker';
 * await serve(async (item) => ({ sum: item.payload.reduce((a, b) => a + b, 0), partition: item.partition }));
 * ```
 *
 * stdout carries the protocol, so from the import on `console.log` and friends are sent to stderr
 * (the server logs them, prefixed with the worker's name).
 */
import { readFileSync } from 'node:fs';
import { encodeFrame, FrameReader, type Frame } from './frames.js';
import { checkOutput } from './lossless-json.js';
import { noRetry } from './no-retry.js';

/** One item as the worker gets it. */
export interface ProcessItem {
  /** The job's id, its kind and this partition (0-based) of its `partitions`. */
  job: string;
  kind: string;
  partition: number;
  partitions: number;
  /** The job's input. */
  input: unknown;
  /** What the kind's `prepare` returned (null when it returned bytes: those are the payload). */
  prepared: unknown;
  /** The bytes `prepare` returned, or the partition's buffer; absent when there are none. */
  payload?: Uint8Array;
  /** Large prepared data comes by file: its path (`payload` holds its bytes, read from it). */
  path?: string;
}

// stdout carries the protocol: from the import on (a console.log before serve() broke the first
// frame), what the program writes there itself goes to stderr — console.log and friends, and
// process.stdout.write (a progress line there failed the item: "a malformed frame"). The frames
// go through the stream's own write.
const protocolWrite = process.stdout.write.bind(process.stdout);
process.stdout.write = process.stderr.write.bind(process.stderr) as typeof process.stdout.write;
for (const m of ['log', 'info', 'debug'] as const) console[m] = console.error;

function write(header: Record<string, unknown>, payload?: Uint8Array): void {
  for (const b of encodeFrame(header, payload)) protocolWrite(b);
}

const isBytes = (v: unknown): v is ArrayBuffer | ArrayBufferView => v instanceof ArrayBuffer || ArrayBuffer.isView(v);
const asBytes = (v: ArrayBuffer | ArrayBufferView) => (v instanceof ArrayBuffer ? new Uint8Array(v) : new Uint8Array(v.buffer, v.byteOffset, v.byteLength));

/**
 * Serves items until stdin ends (the server closes it on shutdown); resolves then. On a device
 * that batches (`[device.batch]`), the items of a batch come together: `handleBatch(items)` gets
 * them at once and returns one output per item, in order (an `Error` in an item's place fails it
 * alone; a throw fails the batch, whose items then run again alone); without `handleBatch` the
 * batch's items go through `handle` one after another. Each batch is timed once.
 */
export function serve(handle: (item: ProcessItem) => unknown, handleBatch?: (items: ProcessItem[]) => unknown[] | Promise<unknown[]>): Promise<void> {
  const reader = new FrameReader(Number.MAX_SAFE_INTEGER);
  let queue = Promise.resolve();
  /** The frames of the batch now arriving (they come back to back). */
  let batch: Frame[] = [];
  // A signal to the server's whole process group — a Ctrl-C, systemd's stop (KillMode=control-group),
  // a closed terminal — is the server's to act on (it finishes the items in flight, then closes
  // stdin), not an end mid-item. The server ends a worker by closing stdin, else SIGKILL.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => undefined);
  // A server killed hard (kill -9) closes stdin, which ends serve() — but not an item that runs on
  // (a hung step holding its device memory beside the workers of the restarted server): once the
  // parent is gone (the parent pid changes) the worker ends, mid-item if need be (a step that
  // blocks the event loop is seen when it yields).
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) process.exit(70);
  }, 1000).unref();
  write({ type: 'ready', protocol: 1, runtime: `node ${process.version}` });
  const ok = (id: unknown, out: unknown, extra: Record<string, unknown>) => {
    if (isBytes(out)) write({ type: 'result', id, ok: true, bytes: true, ...extra }, asBytes(out));
    else {
      // (What JSON would change — NaN, a Set, bytes inside — fails its item, as the Python helper's: sent, it read as done with null or {}.)
      checkOutput(out);
      write({ type: 'result', id, ok: true, output: out ?? null, ...extra });
    }
  };
  return new Promise((resolve) => {
    process.stdin.on('data', (chunk: Buffer) => {
      for (const f of reader.push(chunk)) {
        const h = f.header;
        if (h['type'] !== 'item') continue;
        const b = h['batch'] as { size: number; index: number } | undefined;
        if (b) {
          batch.push(f);
          if (batch.length < b.size) continue;
          const frames = batch;
          batch = [];
          queue = queue.then(async () => {
            const t0 = process.hrtime.bigint();
            try {
              const items = frames.map(itemOf);
              const outs = handleBatch ? await handleBatch(items) : await sequential(handle, items);
              if (!Array.isArray(outs) || outs.length !== items.length) throw new Error(`handleBatch returned ${Array.isArray(outs) ? outs.length : typeof outs} outputs for ${items.length} items: return one per item, in order`);
              const busyNs = Number(process.hrtime.bigint() - t0);
              outs.forEach((out, index) => {
                if (out instanceof Error) return write({ type: 'result', id: h['id'], index, busyNs, ...failed(out) });
                // (An output that cannot be sent — JSON over a frame header — fails its item alone.)
                try {
                  ok(h['id'], out, { index, busyNs });
                } catch (e) {
                  write({ type: 'result', id: h['id'], index, busyNs, ...failed(e) });
                }
              });
            } catch (e) {
              write({ type: 'result', id: h['id'], ok: false, busyNs: Number(process.hrtime.bigint() - t0), error: e instanceof Error ? e.message : String(e) });
            }
          });
          continue;
        }
        // One item at a time, in order: the server sends the next only after this one's result.
        queue = queue.then(async () => {
          const t0 = process.hrtime.bigint();
          try {
            const out = await handle(itemOf(f));
            const busyNs = Number(process.hrtime.bigint() - t0);
            ok(h['id'], out, { busyNs });
          } catch (e) {
            write({ type: 'result', id: h['id'], busyNs: Number(process.hrtime.bigint() - t0), ...failed(e) });
          }
        });
      }
    });
    process.stdin.on('end', () => void queue.then(() => resolve()));
  });
}

/** A failed result's fields for a thrown value: `retry: false` when the error has it (the item would fail the same way again: its job fails at once). */
function failed(e: unknown): { ok: false; error: string; retry?: false } {
  return { ok: false, error: e instanceof Error ? e.message : String(e), ...(noRetry(e) ? { retry: false as const } : {}) };
}

/** The item a frame carries (its payload read from its file when it came by file). */
function itemOf(f: Frame): ProcessItem {
  const h = f.header;
  const path = typeof h['payloadPath'] === 'string' ? h['payloadPath'] : undefined;
  const payload = path === undefined ? f.payload : new Uint8Array(readFileSync(path));
  return { job: h['job'] as string, kind: h['kind'] as string, partition: h['partition'] as number, partitions: h['partitions'] as number, input: h['input'], prepared: h['prepared'], ...(payload ? { payload } : {}), ...(path === undefined ? {} : { path }) };
}

/** A batch without handleBatch: its items through handle, one after another (an item that throws fails alone). */
async function sequential(handle: (item: ProcessItem) => unknown, items: ProcessItem[]): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const item of items) {
    try {
      out.push(await handle(item));
    } catch (e) {
      out.push(e instanceof Error ? e : new Error(String(e)));
    }
  }
  return out;
}

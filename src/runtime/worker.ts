/**
 * stoker/worker: the Node side of a process device (docs/process-devices.md). A worker program
 * calls `serve(handle)`; stoker sends it one item at a time over stdin, `handle(item)` returns the
 * item's output (a JSON value or bytes), and the helper replies over stdout with the output and
 * its own measure of the call (`busyNs`: the time the item occupied this worker).
 *
 * ```js
 * // device.mjs, run by stoker as [device] type = "process", command = "node", args = ["device.mjs"]
 * import { serve } from 'stoker/worker';
 * await serve(async (item) => ({ sum: item.payload.reduce((a, b) => a + b, 0), partition: item.partition }));
 * ```
 *
 * stdout carries the protocol, so `console.log` and friends are sent to stderr (the server logs
 * them, prefixed with the worker's name).
 */
import { readFileSync } from 'node:fs';
import { encodeFrame, FrameReader } from './frames.js';

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

function write(header: Record<string, unknown>, payload?: Uint8Array): void {
  for (const b of encodeFrame(header, payload)) process.stdout.write(b);
}

const isBytes = (v: unknown): v is ArrayBuffer | ArrayBufferView => v instanceof ArrayBuffer || ArrayBuffer.isView(v);
const asBytes = (v: ArrayBuffer | ArrayBufferView) => (v instanceof ArrayBuffer ? new Uint8Array(v) : new Uint8Array(v.buffer, v.byteOffset, v.byteLength));

/** Serves items until stdin ends (the server closes it on shutdown); resolves then. */
export function serve(handle: (item: ProcessItem) => unknown): Promise<void> {
  for (const m of ['log', 'info', 'debug'] as const) console[m] = console.error;
  const reader = new FrameReader(Number.MAX_SAFE_INTEGER);
  let queue = Promise.resolve();
  write({ type: 'ready', protocol: 1, runtime: `node ${process.version}` });
  return new Promise((resolve) => {
    process.stdin.on('data', (chunk: Buffer) => {
      for (const f of reader.push(chunk)) {
        const h = f.header;
        if (h['type'] !== 'item') continue;
        // One item at a time, in order: the server sends the next only after this one's result.
        queue = queue.then(async () => {
          const t0 = process.hrtime.bigint();
          try {
            const path = typeof h['payloadPath'] === 'string' ? h['payloadPath'] : undefined;
            const payload = path === undefined ? f.payload : new Uint8Array(readFileSync(path));
            const item: ProcessItem = { job: h['job'] as string, kind: h['kind'] as string, partition: h['partition'] as number, partitions: h['partitions'] as number, input: h['input'], prepared: h['prepared'], ...(payload ? { payload } : {}), ...(path === undefined ? {} : { path }) };
            const out = await handle(item);
            const busyNs = Number(process.hrtime.bigint() - t0);
            if (isBytes(out)) write({ type: 'result', id: h['id'], ok: true, busyNs, bytes: true }, asBytes(out));
            else write({ type: 'result', id: h['id'], ok: true, busyNs, output: out ?? null });
          } catch (e) {
            write({ type: 'result', id: h['id'], ok: false, busyNs: Number(process.hrtime.bigint() - t0), error: e instanceof Error ? e.message : String(e) });
          }
        });
      }
    });
    process.stdin.on('end', () => void queue.then(() => resolve()));
  });
}

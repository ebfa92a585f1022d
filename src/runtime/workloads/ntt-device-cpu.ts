/** ntt-proof device step on the CPU (runs in a device worker thread): NTTs and the product, read straight from the shared buffer. */
import type { StageContext } from '../threads/protocol.js';
import { partitionOutput, type NttPartitionOutput, type NttProofInput } from './ntt-proof.js';
import { provePartition } from './ntt.js';

export function run(input: NttProofInput, ctx: StageContext & { buffer: SharedArrayBuffer; meta: unknown }): NttPartitionOutput {
  const n = 2 ** input.logN;
  const out = new Uint32Array(n);
  provePartition(new Uint32Array(ctx.buffer, 0, n), new Uint32Array(ctx.buffer, 4 * n, n), out);
  return partitionOutput(input, ctx.partition, out, ctx.meta);
}

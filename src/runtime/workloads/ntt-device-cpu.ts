/** ntt-proof device step on the CPU (runs in a device worker thread): NTTs and the product, read straight from the shared buffer. */
import { createHash } from 'node:crypto';
import type { StageContext } from '../threads/protocol.js';
import { sampleIndices, type NttPartitionOutput, type NttProofInput, type NttReference } from './ntt-proof.js';
import { provePartition } from './ntt.js';

export function run(input: NttProofInput, ctx: StageContext & { meta: unknown }): NttPartitionOutput {
  const n = 2 ** input.logN;
  const a = new Uint32Array(ctx.buffer, 0, n);
  const b = new Uint32Array(ctx.buffer, 4 * n, n);
  const out = new Uint32Array(n);
  provePartition(a, b, out);
  const digest = createHash('sha256').update(new Uint8Array(out.buffer)).digest('hex');
  const samples = sampleIndices(input.logN, ctx.partition).map((j): [number, number] => [j, out[j] as number]);
  return { digest, samples, reference: (ctx.meta as NttReference).samples };
}

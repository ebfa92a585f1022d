/** ntt-proof preparation (runs in a preparation thread): the witness polynomials into the shared buffer, and the reference values. */
import { setTimeout as sleep } from 'node:timers/promises';
import type { StageContext } from '../threads/protocol.js';
import { referenceSamples, type NttProofInput, type NttReference } from './ntt-proof.js';
import { prepareInputs } from './ntt.js';

export async function prepare(input: NttProofInput, ctx: StageContext & { buffer: SharedArrayBuffer }): Promise<NttReference> {
  const n = 2 ** input.logN;
  const a = new Uint32Array(ctx.buffer, 0, n);
  const b = new Uint32Array(ctx.buffer, 4 * n, n);
  prepareInputs(input.seed, input.jobIndex, ctx.partition, input.logN, a, b);
  const samples = referenceSamples(input.logN, ctx.partition, a, b);
  if (input.synthesisMs > 0) await sleep(input.synthesisMs, undefined, ctx.signal ? { signal: ctx.signal } : {});
  return { samples };
}

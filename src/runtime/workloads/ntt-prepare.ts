/** ntt-proof preparation (runs in a preparation thread): the partition's witness polynomials, written into the shared buffer. */
import { setTimeout as sleep } from 'node:timers/promises';
import type { StageContext } from '../threads/protocol.js';
import type { NttProofInput } from './ntt-proof.js';
import { prepareInputs } from './ntt.js';

export async function prepare(input: NttProofInput, ctx: StageContext): Promise<null> {
  const n = 2 ** input.logN;
  prepareInputs(input.seed, input.jobIndex, ctx.partition, input.logN, new Uint32Array(ctx.buffer, 0, n), new Uint32Array(ctx.buffer, 4 * n, n));
  if (input.synthesisMs > 0) await sleep(input.synthesisMs);
  return null;
}

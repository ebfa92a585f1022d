/**
 * The built-in `ntt-proof` kind (the demo workload, see src/runtime/workloads/ntt-proof.ts): a
 * partition's seeded witness polynomials are written into its pooled shared buffer by a
 * preparation thread, with reference values from a direct evaluation; the device thread runs
 * forward NTTs and a pointwise product over BabyBear on the CPU or, with `[device] kind =
 * "webgpu"`, in WGSL; the job's result is a commitment over the partitions, and it fails if any
 * device value disagrees with the reference.
 */
import { finishNttProof, nttBufferBytes, type NttPartitionOutput, type NttProofInput } from '../runtime/workloads/ntt-proof.js';
import { MAX_NTT_LOG_N } from '../runtime/workloads/ntt.js';
import { prepare as prepareNtt } from '../runtime/workloads/ntt-prepare.js';
import type { StageContext } from '../runtime/threads/protocol.js';
import type { PrepareContext, RunContext } from '../server/kind-module.js';

type Input = Omit<NttProofInput, 'jobIndex'>;

export const name = 'ntt-proof';
export const description = 'BabyBear NTT proof partitions: seeded witness → forward NTTs and a product on the device → commitment, checked against a reference';

export const input = {
  type: 'object',
  additionalProperties: false,
  properties: {
    seed: { type: 'integer', minimum: 0, maximum: 2 ** 31 - 1, default: 1, description: 'an integer naming the witness' },
    logN: { type: 'integer', minimum: 4, maximum: MAX_NTT_LOG_N, default: 16, description: `each polynomial has 2^logN coefficients, 4–${MAX_NTT_LOG_N}` },
    synthesisMs: { type: 'number', minimum: 0, maximum: 600_000, default: 1000, description: 'milliseconds each preparation also waits, mimicking long synthesis' },
  },
};

const ntt = (i: Input): NttProofInput => ({ ...i, jobIndex: 0 });

/** The shared buffer holds both polynomials; the device step reads it until it ends, so the bytes stay held on the device too. */
export const buffer = (i: Input): number => nttBufferBytes(ntt(i));

export function prepare(i: Input, ctx: PrepareContext & { jobId: string }): Promise<unknown> {
  return prepareNtt(ntt(i), ctx as PrepareContext & { jobId: string; buffer: SharedArrayBuffer });
}

type DeviceStep = { run(input: NttProofInput, ctx: StageContext & { buffer: SharedArrayBuffer; meta: unknown; device: number; worker: number }): NttPartitionOutput | Promise<NttPartitionOutput> };
/** The device step's module, loaded once per thread (WebGPU's only where the device is one). */
let step: Promise<DeviceStep> | undefined;

export async function run(meta: unknown, ctx: RunContext): Promise<NttPartitionOutput> {
  step ??= ctx.deviceKind === 'webgpu' ? import('../runtime/workloads/ntt-device-webgpu.js') : import('../runtime/workloads/ntt-device-cpu.js');
  const device = await step;
  const c = ctx as RunContext & { buffer: SharedArrayBuffer; jobId: string };
  return device.run(ntt(ctx.input as Input), { jobId: c.jobId, partition: c.partition, partitions: c.partitions, buffer: c.buffer, meta, device: c.device, worker: c.worker });
}

/** On a batching device: the batch's partitions one after another (the NTT gains nothing from batching). */
export async function runBatch(meta: unknown[], ctx: RunContext[]): Promise<NttPartitionOutput[]> {
  const out: NttPartitionOutput[] = [];
  for (let i = 0; i < meta.length; i++) out.push(await run(meta[i], ctx[i] as RunContext));
  return out;
}

export function finish(outputs: NttPartitionOutput[], i: Input, ctx: { job: string }) {
  return finishNttProof({ jobId: ctx.job, input: ntt(i), outputs });
}

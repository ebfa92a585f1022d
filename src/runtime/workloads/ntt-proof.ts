/**
 * The default demo workload, `ntt-proof`: a stand-in for a zero-knowledge proving pipeline.
 * Preparation ("synthesis", CPU threads) generates a partition's seeded witness polynomials into a
 * pooled shared buffer, evaluates them directly (Horner) at a few points as the reference, and
 * may wait to mimic long synthesis without burning cores; the device step runs forward NTTs and a
 * pointwise product over BabyBear and returns a digest and its values at those points; the job
 * finishes by hashing the digests into a commitment and checking every device value against the
 * reference — two independent computations, on different threads, must agree.
 */
import { createHash } from 'node:crypto';
import type { BufferPool } from '../buffer-pool.js';
import { ThreadedWorkload } from '../threaded.js';
import { commitment, productAt } from './ntt.js';

export interface NttProofInput {
  seed: number;
  /** Names the job's witness streams (with the seed). */
  jobIndex: number;
  /** Each polynomial has 2^logN coefficients. */
  logN: number;
  /** Extra wait in each preparation, mimicking long synthesis without using a core. */
  synthesisMs: number;
}

/** What preparation hands the device besides the buffer: the reference values A(ω^j)·B(ω^j). */
export interface NttReference {
  samples: [number, number][];
}

export interface NttPartitionOutput {
  /** SHA-256 of the partition's product evaluations ({@link commitment} of the one vector). */
  digest: string;
  /** [index, value] of the device's evaluations at the sample indices. */
  samples: [number, number][];
  /** The preparation's reference values at the same indices, passed through. */
  reference: [number, number][];
}

export interface NttProofResult {
  commitment: string;
  partitions: number;
  /** Evaluations checked against the reference. */
  checked: number;
}

/** Shared buffer bytes a partition needs: two polynomials of 2^logN 32-bit coefficients. */
export function nttBufferBytes(input: NttProofInput): number {
  return 2 * 4 * 2 ** input.logN;
}

/**
 * The evaluation index a partition reports (deterministic, different per partition). One point
 * per partition keeps the reference's Horner evaluations (2 × 2^logN steps) a small part of the
 * preparation's CPU time; over a job's partitions the checks cover different points.
 */
export function sampleIndices(logN: number, partition: number): number[] {
  return [(partition * 104729 + 7919) % 2 ** logN];
}

/** The reference: A(ω^j)·B(ω^j) at the sample indices, by Horner's rule on the coefficients. */
export function referenceSamples(logN: number, partition: number, a: Uint32Array, b: Uint32Array): [number, number][] {
  return sampleIndices(logN, partition).map((j) => [j, productAt(a, b, logN, j)]);
}

/** What a device step returns for a partition's product evaluations `out` (the same for every device kind). */
export function partitionOutput(input: NttProofInput, partition: number, out: Uint32Array, meta: unknown): NttPartitionOutput {
  return {
    digest: commitment([out]),
    samples: sampleIndices(input.logN, partition).map((j): [number, number] => [j, out[j] as number]),
    reference: (meta as NttReference).samples,
  };
}

/** Main-thread finish (cheap): the commitment over the partitions' digests, every device value checked against the reference. */
export function finishNttProof(job: { jobId: string; input: NttProofInput; outputs: NttPartitionOutput[] }): NttProofResult {
  const hash = createHash('sha256');
  let checked = 0;
  job.outputs.forEach((out, partition) => {
    hash.update(out.digest);
    if (out.samples.length !== out.reference.length || out.samples.length === 0) throw new Error(`partition ${partition}: ${out.samples.length} device values for ${out.reference.length} reference values`);
    out.samples.forEach(([j, value], k) => {
      const [rj, expected] = out.reference[k] as [number, number];
      if (j !== rj || value !== expected) throw new Error(`partition ${partition}: evaluation ${j} is ${value} on the device, the reference says ${expected} at ${rj}`);
      checked++;
    });
  });
  return { commitment: hash.digest('hex'), partitions: job.outputs.length, checked };
}

export interface NttProofOptions {
  devices: { workers: number }[];
  /** Where the device step runs: a CPU thread, or WebGPU (a GPU, or Mesa's software renderer). @default 'cpu' */
  device?: 'cpu' | 'webgpu';
  prepareThreads?: number;
  /** Preparations per thread at once (they mostly wait, see synthesisMs). @default 8 */
  prepareConcurrency?: number;
  pool?: BufferPool;
}

/** The ntt-proof workload on threads: preparation pool + one CPU thread per device worker. */
export function createNttProofWorkload(options: NttProofOptions): ThreadedWorkload<NttProofInput, NttPartitionOutput, NttProofResult> {
  // Mesa reads EGL_PLATFORM from the process environment, which a worker thread's process.env
  // does not change: set it here, in the main thread, for the device threads' software fallback.
  if (options.device === 'webgpu') process.env['EGL_PLATFORM'] ??= 'surfaceless';
  return new ThreadedWorkload<NttProofInput, NttPartitionOutput, NttProofResult>({
    prepareModule: new URL('./ntt-prepare.js', import.meta.url).href,
    deviceModule: new URL(options.device === 'webgpu' ? './ntt-device-webgpu.js' : './ntt-device-cpu.js', import.meta.url).href,
    bufferBytes: nttBufferBytes,
    finish: finishNttProof,
    devices: options.devices,
    prepareConcurrency: options.prepareConcurrency ?? 8,
    // Dawn on Mesa's software GL must not be driven from several threads at once.
    threadPerDevice: options.device === 'webgpu',
    ...(options.prepareThreads === undefined ? {} : { prepareThreads: options.prepareThreads }),
    ...(options.pool === undefined ? {} : { pool: options.pool }),
  });
}

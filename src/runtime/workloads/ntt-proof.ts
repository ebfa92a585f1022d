/**
 * The default demo workload, `ntt-proof`: a stand-in for a zero-knowledge proving pipeline.
 * Preparation ("synthesis", CPU threads) generates a partition's seeded witness polynomials into a
 * pooled shared buffer, optionally waiting to mimic long synthesis without burning cores; the
 * device step runs forward NTTs and a pointwise product over BabyBear and returns a digest and a
 * few sample evaluations; the job finishes by hashing the digests into a commitment and checking
 * the samples against a direct (Horner) evaluation of the regenerated polynomials.
 */
import { createHash } from 'node:crypto';
import type { BufferPool } from '../buffer-pool.js';
import { ThreadedWorkload } from '../threaded.js';
import { mulMod, evaluateAt, powMod, prepareInputs, rootOfUnity } from './ntt.js';

export interface NttProofInput {
  seed: number;
  /** Names the job's witness streams (with the seed). */
  jobIndex: number;
  /** Each polynomial has 2^logN coefficients. */
  logN: number;
  /** Extra wait in each preparation, mimicking long synthesis without using a core. */
  synthesisMs: number;
}

export interface NttPartitionOutput {
  /** SHA-256 of the partition's product evaluations. */
  digest: string;
  /** [index, value] of a few evaluations, for the spot check. */
  samples: [number, number][];
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

/** The evaluation indices a partition reports (deterministic, spread over the domain). */
export function sampleIndices(logN: number, partition: number): number[] {
  const n = 2 ** logN;
  return [(partition * 7919 + 1) % n, (partition * 104729 + n / 2 + 3) % n];
}

/** Main-thread finish: the commitment over the partitions' digests, every sample checked. */
export function finishNttProof(job: { jobId: string; input: NttProofInput; outputs: NttPartitionOutput[] }): NttProofResult {
  const { seed, jobIndex, logN } = job.input;
  const n = 2 ** logN;
  const hash = createHash('sha256');
  const omega = rootOfUnity(logN);
  const a = new Uint32Array(n);
  const b = new Uint32Array(n);
  let checked = 0;
  job.outputs.forEach((out, partition) => {
    hash.update(out.digest);
    prepareInputs(seed, jobIndex, partition, logN, a, b);
    for (const [j, value] of out.samples) {
      const x = powMod(omega, j);
      const expected = mulMod(evaluateAt(a, x), evaluateAt(b, x));
      if (value !== expected) throw new Error(`partition ${partition}: evaluation ${j} is ${value}, the reference says ${expected}`);
      checked++;
    }
  });
  return { commitment: hash.digest('hex'), partitions: job.outputs.length, checked };
}

export interface NttProofOptions {
  devices: { workers: number }[];
  prepareThreads?: number;
  /** Preparations per thread at once (they mostly wait, see synthesisMs). @default 8 */
  prepareConcurrency?: number;
  pool?: BufferPool;
}

/** The ntt-proof workload on threads: preparation pool + one CPU thread per device worker. */
export function createNttProofWorkload(options: NttProofOptions): ThreadedWorkload<NttProofInput, NttPartitionOutput, NttProofResult> {
  return new ThreadedWorkload<NttProofInput, NttPartitionOutput, NttProofResult>({
    prepareModule: new URL('./ntt-prepare.js', import.meta.url).href,
    deviceModule: new URL('./ntt-device-cpu.js', import.meta.url).href,
    bufferBytes: nttBufferBytes,
    finish: finishNttProof,
    devices: options.devices,
    prepareConcurrency: options.prepareConcurrency ?? 8,
    ...(options.prepareThreads === undefined ? {} : { prepareThreads: options.prepareThreads }),
    ...(options.pool === undefined ? {} : { pool: options.pool }),
  });
}

/**
 * The built-in `sleep` kind: waits instead of computing (for trying the API, load and crash
 * tests); its result is checkable: partition p of a job with seed s outputs 2·(31·s + p).
 */
import { setTimeout as wait } from 'node:timers/promises';
import type { PrepareContext } from '../server/kind-module.js';

interface SleepInput {
  seed: number;
  prepareMs: number;
  deviceMs: number;
}

export const name = 'sleep';
export const description = 'waits prepareMs, then deviceMs on a device worker (a batch: deviceMs once); result { partitions, total } with total = Σ 2·(31·seed + p)';

export const input = {
  type: 'object',
  additionalProperties: false,
  properties: {
    seed: { type: 'integer', minimum: 0, maximum: 1_000_000, default: 0, description: 'an integer naming the job’s values' },
    prepareMs: { type: 'number', minimum: 0, maximum: 600_000, default: 10, description: 'milliseconds each preparation waits' },
    deviceMs: { type: 'number', minimum: 0, maximum: 60_000, default: 1, description: 'milliseconds each device step waits' },
  },
};

export async function prepare(job: SleepInput, ctx: PrepareContext): Promise<number> {
  await wait(job.prepareMs, undefined, { signal: ctx.signal });
  return job.seed * 31 + ctx.partition;
}

export async function run(prepared: number, ctx: { input: unknown }): Promise<number> {
  await wait((ctx.input as SleepInput).deviceMs);
  return 2 * prepared;
}

/** On a batching device: the whole batch waits the first item's deviceMs once (a batch of n costs what one does). */
export async function runBatch(prepared: number[], ctx: { input: unknown }[]): Promise<number[]> {
  await wait((ctx[0]?.input as SleepInput | undefined)?.deviceMs ?? 0);
  return prepared.map((p) => 2 * p);
}

export function finish(outputs: number[]): { partitions: number; total: number } {
  return { partitions: outputs.length, total: outputs.reduce((a, b) => a + b, 0) };
}

/** What the runtime and its threads say to each other, and what workload modules export. */

/** Where a partition's work happens, as the workload modules see it. */
export interface StageContext {
  jobId: string;
  partition: number;
  /** The pooled shared buffer the preparation writes into and the device reads (no copy). */
  buffer: SharedArrayBuffer;
}

/** A module run in the preparation threads: `export function prepare(input, ctx)`. */
export interface PrepareModule {
  prepare(input: unknown, ctx: StageContext): unknown;
}

/** A module run in the device threads: `export function run(input, ctx)`. */
export interface DeviceModule {
  run(input: unknown, ctx: StageContext & { meta: unknown; device: number; worker: number }): unknown;
}

export interface PrepareRequest {
  module: string;
  input: unknown;
  ctx: StageContext;
}

export interface DeviceWorkerData {
  module: string;
  /** BigInt64Array layout: [busyNs, count] per worker slot. */
  counters: SharedArrayBuffer;
  device: number;
}

export interface DeviceRequest {
  id: number;
  /** The worker slot whose counters the step adds to, and the worker's index on its device. */
  slot: number;
  worker: number;
  input: unknown;
  ctx: StageContext & { meta: unknown };
}

export type DeviceReply = { id: number; ok: true; output: unknown } | { id: number; ok: false; message: string };

// What a submit rejects with: its `code` says why (E_PREPARE_FAILED, E_DEADLINE, …).
export { StokerError, type StokerErrorCode } from '../core/index.js';
export { Runtime, type BatchResult, type DeviceTask, type PartitionTask, type PrepareResult, type RuntimeOptions, type RuntimeStatus, type StepFailure, type Workload } from './runtime.js';
export { systemClock, ManualClock, type Clock } from './clock.js';
export { BufferPool, BufferPoolError, type BufferPoolOptions, type BufferPoolStats, type PooledBuffer } from './buffer-pool.js';
export { ThreadedWorkload, type PreparedBuffer, type ThreadedWorkloadOptions } from './threaded.js';
export type { DeviceModule, PrepareModule, StageContext } from './threads/protocol.js';
export { createNttProofWorkload, finishNttProof, nttBufferBytes, type NttPartitionOutput, type NttProofInput, type NttProofResult } from './workloads/ntt-proof.js';
// A WebGPU device for a kind's own kernels (examples/webgpu-sum): the backend stoker's own picks, its instance kept alive.
export { openGpu, type GpuOpen, type WebGpuDevice } from './workloads/open-gpu.js';

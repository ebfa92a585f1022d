/** ntt-proof device step on WebGPU (runs in the device's thread): uploads the shared buffer's polynomials, runs the WGSL kernel, reads the product back. */
import type { StageContext } from '../threads/protocol.js';
import { partitionOutput, type NttPartitionOutput, type NttProofInput } from './ntt-proof.js';
import { WebGpuNtt } from './ntt-webgpu.js';
import { openGpu } from './open-gpu.js';

let kernel: Promise<WebGpuNtt> | undefined;

function gpuKernel(): Promise<WebGpuNtt> {
  kernel ??= openGpu().then((g) => {
    // (Not retried: the next try finds no device either.)
    if (!g.device) throw Object.assign(new Error(`no WebGPU device could be opened (${g.description}); where no GPU driver is, Mesa's EGL/GLES drivers give a software one (libegl1 libegl-mesa0 libgles2 libgl1-mesa-dri; and STOKER_WEBGPU_BACKEND unset or opengles) — or run on the CPU: [device] kind = "cpu" (stoker demo --device cpu)`), { retry: false as const });
    return new WebGpuNtt(g.device);
  });
  return kernel;
}

export async function run(input: NttProofInput, ctx: StageContext & { buffer: SharedArrayBuffer; meta: unknown; worker: number }): Promise<NttPartitionOutput> {
  const n = 2 ** input.logN;
  const out = new Uint32Array(n);
  // One thread serves all of the device's workers (threadPerDevice): each worker is a lane.
  await (await gpuKernel()).prove(new Uint32Array(ctx.buffer, 0, n), new Uint32Array(ctx.buffer, 4 * n, n), out, ctx.worker);
  return partitionOutput(input, ctx.partition, out, ctx.meta);
}

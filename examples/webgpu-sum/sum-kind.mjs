/**
 * A job kind whose device step is your own WebGPU kernel: a partition is `n` float32s, prepared
 * on the CPU into the partition's pooled buffer; the device sums them in WGSL (each invocation a
 * strided slice, the partial sums read back and added up). The output is the partition's sum and
 * the CPU's, for checking.
 *
 *   npm install webgpu          # the optional package the WebGPU device needs
 *   stoker serve --config ./examples/webgpu-sum/webgpu.toml
 *   curl -s -XPOST localhost:7070/v1/jobs -H 'content-type: application/json' \
 *     -d '{"id":"s1","kind":"gpu-sum","partitions":4,"input":{"n":1048576}}'
 *   curl -s 'localhost:7070/v1/jobs/s1/result?wait=60s'
 *
 * What a kernel of your own needs on a WebGPU device (see the README, "Your own WebGPU kernel"):
 * a GPUDevice you open yourself (openGpu from stoker/runtime), kept for the thread's life and one
 * per worker — a WebGPU device's workers share one thread, and one device's error scopes would
 * mix their steps' errors — and data copied out of the shared buffer before it is uploaded (Dawn
 * refuses a SharedArrayBuffer).
 */
import { openGpu } from 'stoker/runtime';

export const name = 'gpu-sum';
export const description = 'sums n float32s per partition in a WGSL kernel; output { gpu, cpu }';
export const input = {
  type: 'object',
  additionalProperties: false,
  required: ['n'],
  properties: { n: { type: 'integer', minimum: 1, maximum: 16777216, description: 'float32s per partition' }, seed: { type: 'integer', default: 1 } },
};
export const buffer = (job) => job.n * 4;

/** The partition's numbers: small integers, so that both sums are exact in float32 and comparable. */
export function prepare(job, ctx) {
  const x = new Float32Array(ctx.buffer, 0, job.n);
  let h = (job.seed * 7919 + ctx.partition * 104729) >>> 0;
  for (let i = 0; i < job.n; i++) {
    h = (Math.imul(h, 1103515245) + 12345) >>> 0;
    x[i] = (h >>> 24) & 7;
  }
  return null;
}

const INVOCATIONS = 256 * 64;
const SHADER = /* wgsl */ `
@group(0) @binding(0) var<storage, read> xs: array<f32>;
@group(0) @binding(1) var<storage, read_write> partial: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  var s = 0.0;
  for (var i = id.x; i < arrayLength(&xs); i += ${INVOCATIONS}u) { s += xs[i]; }
  partial[id.x] = s;
}`;

/** One GPUDevice and pipeline per worker, opened at its first step and kept (the instance with it). */
const gpus = new Map();
function gpuFor(worker) {
  let g = gpus.get(worker);
  if (!g) {
    g = openGpu().then(({ device, description }) => {
      if (!device) throw new Error(`no WebGPU device: ${description}`);
      const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code: SHADER }), entryPoint: 'main' } });
      return { device, pipeline };
    });
    gpus.set(worker, g);
    // A failed open is not kept: the next step tries again.
    g.catch(() => gpus.delete(worker));
  }
  return g;
}

const STORAGE = 128, COPY_SRC = 4, COPY_DST = 8, MAP_READ = 1;

export async function run(_prepared, ctx) {
  const { device, pipeline } = await gpuFor(ctx.worker);
  const n = ctx.input.n;
  // Out of the shared buffer first: Dawn's writeBuffer refuses a SharedArrayBuffer.
  const xs = new Float32Array(ctx.buffer, 0, n).slice();
  device.pushErrorScope('validation');
  let scoped = true;
  const input = device.createBuffer({ size: n * 4, usage: STORAGE | COPY_DST });
  const partial = device.createBuffer({ size: INVOCATIONS * 4, usage: STORAGE | COPY_SRC });
  const read = device.createBuffer({ size: INVOCATIONS * 4, usage: COPY_DST | MAP_READ });
  try {
    device.queue.writeBuffer(input, 0, xs);
    const bind = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: input } }, { binding: 1, resource: { buffer: partial } }] });
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(INVOCATIONS / 64);
    pass.end();
    enc.copyBufferToBuffer(partial, 0, read, 0, INVOCATIONS * 4);
    device.queue.submit([enc.finish()]);
    scoped = false;
    const error = await device.popErrorScope();
    if (error) throw new Error(`WebGPU: ${error.message}`);
    await read.mapAsync(MAP_READ);
    const gpu = new Float32Array(read.getMappedRange()).reduce((a, b) => a + b, 0);
    read.unmap();
    const cpu = xs.reduce((a, b) => a + b, 0);
    return { gpu, cpu };
  } finally {
    // (A step that threw before its scope was popped leaves the device's scopes as it found them.)
    if (scoped) void device.popErrorScope().catch(() => {});
    input.destroy();
    partial.destroy();
    read.destroy();
  }
}

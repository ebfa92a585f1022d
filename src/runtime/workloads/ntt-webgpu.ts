/// <reference types="@webgpu/types" />
/**
 * The ntt-proof device step in WGSL, on WebGPU through Dawn (the `webgpu` package): the same
 * forward NTTs and pointwise product as the CPU kernel, bit for bit. On a GPU it runs through
 * Vulkan; on machines without one, through Mesa's software OpenGL ES with EGL_PLATFORM=surfaceless
 * (Dawn's compatibility mode).
 *
 * Field products use Montgomery reduction with R = 2^32 on 32-bit words (WGSL has no 64-bit
 * integers): a twiddle stored as ω·R mod p turns REDC(x · ωR) into x·ω in normal form, and the
 * pointwise product is corrected with one more REDC by R² mod p.
 */
import { BABYBEAR_P, MAX_NTT_LOG_N, mulMod, rootOfUnity } from './ntt.js';

/** Montgomery constants for R = 2^32: R mod p, R² mod p, and −p⁻¹ mod 2^32. */
export const R_MOD_P = 268435454;
export const R2_MOD_P = 1172168163;
export const P_INV_NEG = 0x77ffffff;

/** Field arithmetic shared by both shader modules. */
const FIELD_WGSL = /* wgsl */ `
const P: u32 = ${BABYBEAR_P}u;
const PINV: u32 = ${P_INV_NEG}u;
const R2: u32 = ${R2_MOD_P}u;

// (lo, hi) of the 64-bit product of two 32-bit words.
fn mul64(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xffffu; let a1 = a >> 16u;
  let b0 = b & 0xffffu; let b1 = b >> 16u;
  let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
  let mid = p01 + p10;
  let midCarry = select(0u, 0x10000u, mid < p01);
  let lo = p00 + (mid << 16u);
  let loCarry = select(0u, 1u, lo < p00);
  return vec2<u32>(lo, p11 + (mid >> 16u) + midCarry + loCarry);
}

// Montgomery product a·b·2^-32 mod p, for a, b < p.
fn montMul(a: u32, b: u32) -> u32 {
  let t = mul64(a, b);
  let m = t.x * PINV;
  let mp = mul64(m, P);
  let carry = select(0u, 1u, t.x + mp.x < t.x);
  var u = t.y + mp.y + carry;
  if (u >= P) { u = u - P; }
  return u;
}
`;

/** In-place forward NTT of one vector: a bit-reversal pass, then one butterfly pass per stage. */
const NTT_WGSL = FIELD_WGSL + /* wgsl */ `
struct Params { half: u32, logN: u32, n: u32, pad: u32 }

@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var<storage, read> twiddles: array<u32>;

@compute @workgroup_size(64)
fn bitReverse(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  if (i >= params.n) { return; }
  let j = reverseBits(i) >> (32u - params.logN);
  if (i < j) { let t = data[i]; data[i] = data[j]; data[j] = t; }
}

@compute @workgroup_size(64)
fn butterfly(@builtin(global_invocation_id) id: vec3<u32>) {
  let k = id.x;
  if (k >= params.n / 2u) { return; }
  let half = params.half;
  let j = k % half;
  let i0 = (k / half) * 2u * half + j;
  let i1 = i0 + half;
  let t = montMul(data[i1], twiddles[half + j]);
  let u = data[i0];
  var s = u + t; if (s >= P) { s = s - P; }
  var d = u + P - t; if (d >= P) { d = d - P; }
  data[i0] = s;
  data[i1] = d;
}
`;

/** The pointwise product of the two evaluations, back in normal form. */
const PRODUCT_WGSL = FIELD_WGSL + /* wgsl */ `
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(64)
fn product(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  if (i >= arrayLength(&out)) { return; }
  out[i] = montMul(montMul(a[i], b[i]), R2);
}
`;

/** Twiddles for every stage, ω_{2h}^j · R mod p at index h + j (h = 1, 2, 4, …, n/2). */
export function montgomeryTwiddles(logN: number): Uint32Array {
  const n = 2 ** logN;
  const tw = new Uint32Array(Math.max(2, n));
  for (let h = 1; h < n; h *= 2) {
    const w = rootOfUnity(Math.log2(2 * h));
    let x = R_MOD_P;
    for (let j = 0; j < h; j++) {
      tw[h + j] = x;
      x = mulMod(x, w);
    }
  }
  return tw;
}

/** GPUBufferUsage and GPUMapMode flags (numbers fixed by the WebGPU spec; Node has no such globals). */
const USAGE = { MAP_READ: 1, COPY_SRC: 4, COPY_DST: 8, UNIFORM: 64, STORAGE: 128 } as const;
const MAP_READ_MODE = 1;

interface SizeKit {
  n: number;
  staging: Uint32Array;
  buffers: { a: GPUBuffer; b: GPUBuffer; out: GPUBuffer; read: GPUBuffer };
  passes: { pipeline: GPUComputePipeline; group: GPUBindGroup; workgroups: number }[];
}

/** The ntt-proof kernel on one WebGPU device: pipelines once, buffers and bind groups per size. */
export class WebGpuNtt {
  private readonly kits = new Map<string, SizeKit>();
  private readonly bitReverse: GPUComputePipeline;
  private readonly butterfly: GPUComputePipeline;
  private readonly product: GPUComputePipeline;

  constructor(readonly device: GPUDevice) {
    const ntt = device.createShaderModule({ code: NTT_WGSL });
    const prod = device.createShaderModule({ code: PRODUCT_WGSL });
    this.bitReverse = device.createComputePipeline({ layout: 'auto', compute: { module: ntt, entryPoint: 'bitReverse' } });
    this.butterfly = device.createComputePipeline({ layout: 'auto', compute: { module: ntt, entryPoint: 'butterfly' } });
    this.product = device.createComputePipeline({ layout: 'auto', compute: { module: prod, entryPoint: 'product' } });
  }

  /**
   * out[j] = A(ω^j)·B(ω^j) from the coefficients in a and b (which are not changed). Calls on
   * different `lane`s (a device's workers) may overlap: each lane has its own buffers.
   */
  async prove(a: Uint32Array, b: Uint32Array, out: Uint32Array, lane = 0): Promise<void> {
    const n = a.length;
    if (b.length !== n || out.length !== n || n < 2 || (n & (n - 1)) !== 0 || n > 2 ** MAX_NTT_LOG_N) {
      throw new RangeError(`WebGpuNtt.prove: a, b and out must have one power-of-two length in [2, 2^${MAX_NTT_LOG_N}] (got ${a.length}, ${b.length}, ${out.length})`);
    }
    const kit = this.kit(n, lane);
    const q = this.device.queue;
    // Dawn does not accept views of a SharedArrayBuffer here: stage through ordinary memory (the
    // upload copies to the device anyway).
    kit.staging.set(a);
    q.writeBuffer(kit.buffers.a, 0, kit.staging);
    kit.staging.set(b);
    q.writeBuffer(kit.buffers.b, 0, kit.staging);
    const enc = this.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    for (const p of kit.passes) {
      pass.setPipeline(p.pipeline);
      pass.setBindGroup(0, p.group);
      pass.dispatchWorkgroups(p.workgroups);
    }
    pass.end();
    enc.copyBufferToBuffer(kit.buffers.out, 0, kit.buffers.read, 0, n * 4);
    q.submit([enc.finish()]);
    await kit.buffers.read.mapAsync(MAP_READ_MODE);
    out.set(new Uint32Array(kit.buffers.read.getMappedRange()));
    kit.buffers.read.unmap();
  }

  destroy(): void {
    this.device.destroy();
  }

  private kit(n: number, lane: number): SizeKit {
    const key = `${n}/${lane}`;
    let kit = this.kits.get(key);
    if (kit) return kit;
    const d = this.device;
    const logN = Math.log2(n);
    const storage = (usage: number) => d.createBuffer({ size: n * 4, usage: USAGE.STORAGE | usage });
    const buffers = {
      a: storage(USAGE.COPY_DST),
      b: storage(USAGE.COPY_DST),
      out: storage(USAGE.COPY_SRC),
      read: d.createBuffer({ size: n * 4, usage: USAGE.MAP_READ | USAGE.COPY_DST }),
    };
    const tw = montgomeryTwiddles(logN);
    const twiddles = d.createBuffer({ size: tw.byteLength, usage: USAGE.STORAGE | USAGE.COPY_DST });
    d.queue.writeBuffer(twiddles, 0, tw);
    const params = (half: number) => {
      const buf = d.createBuffer({ size: 16, usage: USAGE.UNIFORM | USAGE.COPY_DST });
      d.queue.writeBuffer(buf, 0, new Uint32Array([half, logN, n, 0]));
      return buf;
    };
    const groups = Math.ceil(n / 64);
    const passes: SizeKit['passes'] = [];
    for (const data of [buffers.a, buffers.b]) {
      passes.push({
        pipeline: this.bitReverse,
        group: d.createBindGroup({ layout: this.bitReverse.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: data } }, { binding: 1, resource: { buffer: params(0) } }] }),
        workgroups: groups,
      });
      for (let half = 1; half < n; half *= 2) {
        passes.push({
          pipeline: this.butterfly,
          group: d.createBindGroup({
            layout: this.butterfly.getBindGroupLayout(0),
            entries: [
              { binding: 0, resource: { buffer: data } },
              { binding: 1, resource: { buffer: params(half) } },
              { binding: 2, resource: { buffer: twiddles } },
            ],
          }),
          workgroups: Math.ceil(n / 2 / 64),
        });
      }
    }
    passes.push({
      pipeline: this.product,
      group: d.createBindGroup({
        layout: this.product.getBindGroupLayout(0),
        entries: [
          { binding: 0, resource: { buffer: buffers.a } },
          { binding: 1, resource: { buffer: buffers.b } },
          { binding: 2, resource: { buffer: buffers.out } },
        ],
      }),
      workgroups: groups,
    });
    kit = { n, staging: new Uint32Array(n), buffers, passes };
    this.kits.set(key, kit);
    return kit;
  }
}


import { describe, expect, it } from 'vitest';
// Thread entry points exist only in the build: the kernel and the runtime are loaded from dist/.
import { Runtime } from '../../dist/runtime/runtime.js';
import { BABYBEAR_P, prepareInputs, provePartition } from '../../dist/runtime/workloads/ntt.js';
import { createNttProofWorkload, type NttProofInput, type NttProofResult } from '../../dist/runtime/workloads/ntt-proof.js';
import { montgomeryTwiddles, P_INV_NEG, R2_MOD_P, R_MOD_P, WebGpuNtt } from '../../dist/runtime/workloads/ntt-webgpu.js';
import { openGpu } from '../../dist/runtime/workloads/open-gpu.js';

const gpu = await openGpu();
if (!gpu.device) {
  // Said out loud: these tests are skipped, not passed, where no WebGPU device can start.
  console.warn(`WebGPU unavailable, the WebGPU tests are SKIPPED: ${gpu.description}`);
}
const noGpu = !gpu.device;

describe('the WebGPU ntt-proof kernel', () => {
  it('uses the right Montgomery constants for R = 2^32', () => {
    const p = BigInt(BABYBEAR_P);
    const r = 1n << 32n;
    expect(BigInt(R_MOD_P)).toBe(r % p);
    expect(BigInt(R2_MOD_P)).toBe((r * r) % p);
    expect((BigInt(P_INV_NEG) * p + 1n) % r).toBe(0n);
    // A stage's twiddles are the successive powers of its root, times R.
    const tw = montgomeryTwiddles(3);
    expect(tw[1]).toBe(R_MOD_P);
    expect(tw[2]).toBe(R_MOD_P);
  });

  it.skipIf(noGpu)('gives the same products as the CPU kernel, bit for bit, for sizes 2 … 2^12', async () => {
    const k = new WebGpuNtt(gpu.device as GPUDevice);
    for (let logN = 1; logN <= 12; logN++) {
      const n = 2 ** logN;
      const a = new Uint32Array(n);
      const b = new Uint32Array(n);
      prepareInputs(11, logN, 2, logN, a, b);
      const onGpu = new Uint32Array(n);
      await k.prove(a, b, onGpu);
      const onCpu = new Uint32Array(n);
      provePartition(a.slice(), b.slice(), onCpu);
      expect(onGpu).toEqual(onCpu);
    }
  }, 30_000);

  it.skipIf(noGpu)('rejects lengths that are not one power of two', async () => {
    const k = new WebGpuNtt(gpu.device as GPUDevice);
    await expect(k.prove(new Uint32Array(6), new Uint32Array(6), new Uint32Array(6))).rejects.toThrow(/power-of-two length/);
  });

  it.skipIf(noGpu)('an ntt-proof job on WebGPU device threads has the same commitment as on CPU threads', async () => {
    const input: NttProofInput = { seed: 3, jobIndex: 0, logN: 10, synthesisMs: 0 };
    const commitments: string[] = [];
    for (const device of ['cpu', 'webgpu'] as const) {
      const devices = [{ workers: 2 }]; // two workers: on WebGPU, two lanes in the device's one thread
      const workload = createNttProofWorkload({ devices, device, prepareThreads: 1 });
      const rt = new Runtime<NttProofInput, unknown, unknown, NttProofResult>({ workload, devices, pacer: 'unpaced', retries: 0 });
      try {
        const r = await rt.submit({ id: 'j', kind: 'ntt-proof', partitions: 6 }, input);
        expect(r.checked).toBe(6);
        commitments.push(r.commitment);
      } finally {
        await rt.close();
      }
    }
    expect(commitments[1]).toBe(commitments[0]);
  }, 60_000);
});

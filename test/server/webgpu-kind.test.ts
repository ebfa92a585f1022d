/**
 * A kind's own WebGPU kernel (examples/webgpu-sum, as the README's "Your own WebGPU kernel" says
 * to write one): through `stoker serve` on a WebGPU device of two workers — one thread, a device
 * each — every partition's GPU sum is the CPU's. Skipped, saying so, where no WebGPU device starts.
 */
import { describe, expect, it } from 'vitest';
import { openGpu } from '../../dist/runtime/index.js';
import { http, removeDir, startServer, tempDataDir } from './helpers.js';

const gpu = await openGpu();
if (!gpu.device) console.warn(`WebGPU unavailable, the own-kernel test is SKIPPED: ${gpu.description}`);
gpu.device?.destroy();

describe('a kind with its own WebGPU kernel', () => {
  it.skipIf(!gpu.device)('runs its WGSL on both workers of a WebGPU device, each sum the CPU\'s', async () => {
    const dir = tempDataDir();
    const server = await startServer(dir, ['--config', 'examples/webgpu-sum/webgpu.toml'], { EGL_PLATFORM: 'surfaceless' });
    try {
      for (let j = 0; j < 3; j++) expect((await http(server.url, 'POST', '/v1/jobs', { id: `g${j}`, kind: 'gpu-sum', partitions: 4, input: { n: 65_536 + j, seed: j } })).status).toBe(202);
      for (let j = 0; j < 3; j++) {
        const r = await http(server.url, 'GET', `/v1/jobs/g${j}/result?wait=60s`);
        expect(r.body.state, JSON.stringify(r.body.error)).toBe('done');
        const sums = r.body.result as { gpu: number; cpu: number }[];
        expect(sums).toHaveLength(4);
        for (const s of sums) {
          expect(s.cpu).toBeGreaterThan(0);
          expect(s.gpu).toBe(s.cpu);
        }
      }
      // Both workers ran steps (each with its own device).
      const status = (await http(server.url, 'GET', '/v1/status')).body as { devices: { workers: { busyS: number }[] }[] };
      expect(status.devices[0]?.workers.every((w) => w.busyS > 0)).toBe(true);
    } finally {
      await server.stop();
      removeDir(dir);
    }
  }, 120_000);
});

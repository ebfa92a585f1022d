/**
 * Opening a WebGPU device (`openGpu`, exported from stoker/runtime for a kind's own kernel), apart
 * from the ntt-proof kernel so that its declarations name no WebGPU type a program may not have.
 */
import { importOptional, OptionalPackageError } from '../optional.js';

type GpuModule = { create(options: string[]): GPU };

/**
 * WebGPU's GPUDevice where its types are in the program (`@webgpu/types`, as `webgpu`'s users
 * have), else unknown: the declarations named GPUDevice outright, and a program compiled without
 * those types (skipLibCheck off) failed on stoker's own .d.ts.
 */
export type WebGpuDevice = typeof globalThis extends { GPUDevice: { prototype: infer D } } ? D : unknown;

/** The GPU and what was tried to get it; `device` is null when none could be opened. */
export interface GpuOpen {
  device: WebGpuDevice | null;
  /** Which backend answered, or why none did. */
  description: string;
}

/** GPU instances kept alive for the life of the process (see openGpu). */
const instances = new Set<GPU>();

/**
 * Opens a WebGPU device: the default backend first (Vulkan on a real GPU), then Dawn's OpenGL ES
 * backend in compatibility mode (Mesa's software renderer, EGL_PLATFORM=surfaceless).
 */
export async function openGpu(): Promise<GpuOpen> {
  let mod: GpuModule;
  try {
    mod = (await importOptional(() => import('webgpu'), 'the WebGPU device', ['webgpu'])) as unknown as GpuModule;
  } catch (e) {
    return { device: null, description: e instanceof OptionalPackageError ? e.message : `the webgpu package could not be loaded: ${e instanceof Error ? e.message : String(e)}` };
  }
  const all: { flags: string[]; options?: GPURequestAdapterOptions; name: string }[] = [
    { flags: ['backend=vulkan'], name: 'vulkan' },
    { flags: ['backend=opengles'], options: { featureLevel: 'compatibility' } as GPURequestAdapterOptions, name: 'opengles' },
  ];
  // STOKER_WEBGPU_BACKEND picks one (vulkan or opengles); by default Vulkan, then OpenGL ES.
  const wanted = process.env['STOKER_WEBGPU_BACKEND'];
  const tries = wanted ? all.filter((t) => t.name === wanted) : all;
  if (tries.length === 0) return { device: null, description: `STOKER_WEBGPU_BACKEND must be vulkan or opengles (got ${JSON.stringify(wanted)})` };
  process.env['EGL_PLATFORM'] ??= 'surfaceless';
  const failures: string[] = [];
  for (const t of tries) {
    try {
      const gpu = mod.create(t.flags);
      // Dawn's instance must outlive its devices: a collected GPU object takes the device down with it.
      instances.add(gpu);
      const adapter = await gpu.requestAdapter(t.options);
      if (!adapter) {
        failures.push(`${t.name}: no adapter`);
        continue;
      }
      const device = await adapter.requestDevice();
      const info = adapter.info as GPUAdapterInfo | undefined;
      return { device, description: `${t.name}: ${info?.description || info?.vendor || 'adapter'}` };
    } catch (e) {
      failures.push(`${t.name}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  return { device: null, description: failures.join('; ') };
}

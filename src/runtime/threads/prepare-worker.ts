/** The preparation pool's task (piscina): loads the workload's prepare module once per thread and runs it. */
import { performance } from 'node:perf_hooks';
import type { PrepareModule, PrepareRequest } from './protocol.js';

const modules = new Map<string, Promise<PrepareModule>>();

function load(module: string): Promise<PrepareModule> {
  let m = modules.get(module);
  if (!m) {
    m = (import(module) as Promise<PrepareModule>).then((mod) => {
      if (typeof mod.prepare !== 'function') throw new Error(`prepare module ${module} must export a function prepare(input, ctx)`);
      return mod;
    });
    modules.set(module, m);
  }
  return m;
}

export default async function prepareTask(req: PrepareRequest): Promise<{ meta: unknown; latencyMs: number }> {
  const mod = await load(req.module);
  const t0 = performance.now();
  const meta = await mod.prepare(req.input, req.ctx);
  return { meta, latencyMs: performance.now() - t0 };
}

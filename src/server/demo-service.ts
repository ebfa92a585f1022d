import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { totalBusyMs } from '../core/index.js';
import type { DemoBackend } from '../runtime/demo.js';
import type { DemoOptions } from '../runtime/demo-options.js';
import { loadConfig } from './config.js';
import { startServer } from './serve.js';
import { isFinal } from './progress.js';

/**
 * The demo's jobs through a real service (a journal in a temporary directory, the HTTP API and
 * its dashboard at `/`), so `stoker demo --dashboard` can be watched in a browser.
 */
export async function serviceBackend(opts: DemoOptions, listen: { host: string; port: number }): Promise<{ backend: DemoBackend; url: string }> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-demo-'));
  const base = loadConfig({ env: {}, flags: { host: listen.host, port: listen.port, dataDir } });
  const config = {
    ...base,
    engine: { ...base.engine, pacer: opts.pacer, targetWaiting: opts.targetWaiting, budgetBytes: opts.budgetBytes ?? Infinity, pacerOptions: opts.pacerOptions ?? {} },
    device: { kind: opts.device, workers: opts.workers },
    prepare: { threads: 1, concurrency: opts.maxPreparing ?? 64 },
  };
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    server = await startServer(config);
  } catch (e) {
    fs.rmSync(dataDir, { recursive: true, force: true });
    throw e;
  }
  const { service } = server;
  const backend: DemoBackend = {
    async submit(j) {
      const id = `demo-${j}`;
      // Each job its own witness: the seed stream names the job.
      await service.submit({ id, kind: 'ntt-proof', partitions: opts.partitions, input: { seed: (opts.seed * 1_000_003 + j) % 2 ** 31, logN: opts.logN, synthesisMs: opts.synthesisMs } });
      for (;;) {
        const job = await service.wait(id, 60_000);
        if (!job) throw new Error(`job ${id} vanished from the journal`);
        if (!isFinal(job.state)) continue;
        if (job.state !== 'done') throw new Error(`${job.error?.code ?? job.state}: ${job.error?.reason ?? ''}`);
        return;
      }
    },
    snapshot: service.counters,
    pacerState: () => service.pacerState(),
    busyMs: (at) => totalBusyMs(service.workerBusyMs(at)),
    pool: service.pool,
    async close() {
      await server.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return { backend, url: server.url };
}

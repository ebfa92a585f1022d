/**
 * A cluster node runs a job another node accepted through Service.submitRecord: the record is
 * not parsed again as a body, but this node's module for the kind still checks the input and
 * the partitions it derives from it (the accepting node may not run the kind, or another version).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../dist/server/config.js';
import { loadServerKinds } from '../../dist/server/serve.js';
import { Service } from '../../dist/server/service.js';
import { ServiceError } from '../../dist/server/errors.js';

const PROBE = path.resolve('test/fixtures/kinds/probe-kind.mjs');

describe('Service.submitRecord', () => {
  let dir: string;
  let service: Service;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-record-'));
    const config = loadConfig({ env: {}, cwd: dir, values: { dataDir: dir, prepare: { threads: 1 }, kinds: { probe: { module: PROBE } } } });
    service = Service.open(config, await loadServerKinds(config));
  });
  afterAll(async () => {
    await service?.close(0);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const record = (id: string, partitions: number, input: unknown) => ({ id, kind: 'probe', priority: 'normal' as const, partitions, input, deadline: null });
  const refusal = (fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      return e as ServiceError;
    }
    return undefined;
  };

  it('runs a valid record to its end', async () => {
    const { job, created } = service.submitRecord(record('r-ok', 2, { items: 2 }));
    expect(created).toBe(true);
    expect(job.partitions).toBe(2);
    const end = await service.wait('r-ok', 20_000);
    expect(end?.state).toBe('done');
  });

  it('refuses partitions that disagree with what the kind derives from the input, and an input the module refuses', () => {
    const wrong = refusal(() => service.submitRecord(record('r-parts', 3, { items: 2 })));
    expect(wrong).toBeInstanceOf(ServiceError);
    expect(wrong?.status).toBe(400);
    expect(wrong?.extra.errors?.[0]?.path).toBe('partitions');
    const bad = refusal(() => service.submitRecord(record('r-input', 1, { items: 0 })));
    expect(bad?.status).toBe(400);
    expect(bad?.extra.errors?.[0]?.path).toMatch(/^input/);
    const missing = refusal(() => service.submitRecord(record('r-missing', 1, {})));
    expect(missing?.status).toBe(400);
    // Nothing refused was journaled.
    for (const id of ['r-parts', 'r-input', 'r-missing']) expect(service.job(id)).toBeUndefined();
  });

  it('refuses a kind this server does not run', () => {
    const e = refusal(() => service.submitRecord({ ...record('r-kind', 1, {}), kind: 'nope' }));
    expect(e?.status).toBe(400);
    expect(e?.detail).toContain('not loaded on this server');
  });
});

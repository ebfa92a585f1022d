/**
 * Every built-in pacer runs a server — also on a data dir whose last run (under the stoker
 * pacer) left priors: a server of another pacer was given the remembered rates as options, which
 * it refused as misspelt ("the classic pacer has no option priorDeviceServiceMs"), and did not
 * start at all (a user trial, on a fresh data dir too).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACER_NAMES } from '../../dist/core/index.js';
import { loadConfig } from '../../dist/server/config.js';
import { loadServerKinds } from '../../dist/server/serve.js';
import { Service } from '../../dist/server/service.js';

describe('a server of each built-in pacer', () => {
  let dir: string;
  const open = async (pacer: string) => {
    const config = loadConfig({ env: {}, cwd: dir, values: { dataDir: dir, prepare: { threads: 1 }, engine: { pacer } } });
    return Service.open(config, await loadServerKinds(config));
  };
  const runs = async (service: Service, id: string) => {
    await service.submit({ id, kind: 'sleep', partitions: 2, input: { prepareMs: 5, deviceMs: 5 } });
    return (await service.wait(id, 20_000))?.state;
  };
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-pacers-'));
    // A first run under stoker leaves what it measured for the next start.
    const first = await open('stoker');
    expect(await runs(first, 'first')).toBe('done');
    await first.close(0);
    expect(fs.existsSync(path.join(dir, 'stoker.priors.json'))).toBe(true);
  }, 30_000);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it.each(PACER_NAMES)('%s starts on the remembered priors and runs a job', async (pacer) => {
    const service = await open(pacer);
    try {
      expect(await runs(service, `job-${pacer}`)).toBe('done');
      // Only a pacer that reads them is said to start from them.
      expect(service.priorsNote === undefined).toBe(pacer !== 'stoker');
    } finally {
      await service.close(0);
    }
  }, 30_000);
});

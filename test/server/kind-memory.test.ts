/**
 * A partition's pooled buffer is its buffer(input) rounded up to a size class (at most a quarter
 * more, past 4 KiB). What the memory budget counts must cover it: by default it counts the lent
 * size; a memory() that counts less by more than a MiB is said once per kind (a trial's 80 MiB
 * partitions were lent 128 MiB each, its budget 1.6× over what it counted).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { sizeClass } from '../../dist/runtime/buffer-pool.js';
import { loadConfig } from '../../dist/server/config.js';
import { loadKind } from '../../dist/server/kind-module.js';
import { loadServerKinds } from '../../dist/server/serve.js';
import { Service } from '../../dist/server/service.js';

const MIB = 2 ** 20;
const KIND = (name: string, memory: boolean) => `
export const name = ${JSON.stringify(name)};
export const description = 'a buffer of 10 MiB + 1 byte';
export const input = { type: 'object' };
export const partitions = () => 1;
export const buffer = () => ${10 * MIB + 1};
${memory ? `export const memory = () => ({ prepareBytes: ${10 * MIB + 1}, deviceBytes: 0 });` : ''}
export const prepare = () => null;
export const run = () => 1;
`;

describe('what the memory budget counts of a pooled buffer', () => {
  let dir = '';
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('counts the size class lent where memory() is left out; a memory() that counts less is said once per kind', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-kind-memory-'));
    fs.writeFileSync(path.join(dir, 'lent.mjs'), KIND('lent', false));
    fs.writeFileSync(path.join(dir, 'counted.mjs'), KIND('counted', true));
    expect(sizeClass(10 * MIB + 1)).toBe(12 * MIB);
    const lent = await loadKind(pathToFileURL(path.join(dir, 'lent.mjs')).href);
    expect(lent.memory({})).toEqual({ prepareBytes: 12 * MIB, deviceBytes: 12 * MIB });

    const config = loadConfig({ env: {}, cwd: dir, values: { dataDir: path.join(dir, 'data'), prepare: { threads: 1 }, kinds: { lent: { module: path.join(dir, 'lent.mjs') }, counted: { module: path.join(dir, 'counted.mjs') } } } });
    const lines: string[] = [];
    const service = Service.open(config, await loadServerKinds(config), { log: (l) => lines.push(l) });
    try {
      for (const [id, kind] of [['a', 'counted'], ['b', 'counted'], ['c', 'lent']]) await service.submit({ id, kind, input: {} });
      for (const id of ['a', 'b', 'c']) expect((await service.wait(id, 20_000))?.state).toBe('done');
      const said = lines.filter((l) => l.startsWith('stoker serve: kind '));
      expect(said).toEqual([`stoker serve: kind counted: memory() counts ${10 * MIB + 1} preparation bytes a partition, but each is lent a pooled buffer of ${12 * MIB} bytes (buffer() asks ${10 * MIB + 1}, rounded up to its size class): the memory budget holds more than it counts — return prepareBytes of at least ${12 * MIB} from memory(), or leave memory() out (it then counts what is lent)`]);
    } finally {
      await service.close(0);
    }
  });
});

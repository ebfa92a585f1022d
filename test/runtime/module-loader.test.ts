import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { moduleLoader } from '../../src/runtime/threads/protocol.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-loader-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('moduleLoader (a module in a worker thread)', () => {
  it('says that the module does not load in its thread, not a step failure of its own, and not to retry it (a user trial read "cannot init GPU context")', async () => {
    const file = path.join(dir, 'k.mjs');
    fs.writeFileSync(file, 'throw new Error("cannot init GPU context in a worker");');
    const load = moduleLoader<{ prepare: () => unknown }>('prepare', 'prepare', () => 'prepare(input, ctx)');
    const url = pathToFileURL(file).href;
    await expect(load(url, 'kind')).rejects.toMatchObject({
      message: `kind module ${url} does not load in its worker thread (it did in the server's own): cannot init GPU context in a worker`,
      retry: false,
    });
  });
});

/**
 * A server started from a program says what its operator should know through `options.log`, not
 * on the process's stderr: here a process device's own stderr lines (the server's most talkative
 * source). A log that is no function is refused when the server starts.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
// Thread entry points exist only as compiled JavaScript: the server is imported from dist/.
import { loadConfig } from '../../dist/server/config.js';
import { startLog, startServer } from '../../dist/server/serve.js';
import { http, removeDir, tempDataDir } from './helpers.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));

describe('startServer options.log', () => {
  afterEach(() => vi.restoreAllMocks());

  it("takes the server's lines — a process device's stderr among them — and nothing of it reaches stderr", async () => {
    const dataDir = tempDataDir();
    const lines: string[] = [];
    const stderr = vi.spyOn(process.stderr, 'write');
    const config = loadConfig({
      env: {},
      values: {
        dataDir,
        server: { port: 0, host: '127.0.0.1' },
        prepare: { threads: 1 },
        device: { workers: 1, process: { command: 'python3', args: [path.join(FIXTURES, 'devices', 'py-device.py')] } },
        kinds: { remote: { module: path.join(FIXTURES, 'kinds', 'remote-kind.mjs') } },
      },
    });
    const s = await startServer(config, { log: (line) => lines.push(line) });
    try {
      expect((await http(s.url, 'POST', '/v1/jobs', { id: 'l1', kind: 'remote', partitions: 2, input: { mode: 'print' } })).status).toBe(202);
      const r = await http(s.url, 'GET', '/v1/jobs/l1/result?wait=30s');
      expect(r.body).toMatchObject({ state: 'done', result: ['printed', 'printed'] });
      for (let i = 0; i < 50 && !lines.some((l) => l.startsWith('[device default/0] hello from the device')); i++) await new Promise((r) => setTimeout(r, 100));
      expect(lines).toContain('[device default/0] hello from the device 0');
      expect(lines.every((l) => !l.endsWith('\n'))).toBe(true);
      expect(stderr.mock.calls.map((c) => String(c[0])).filter((t) => t.includes('hello from the device'))).toEqual([]);
    } finally {
      await s.close();
      removeDir(dataDir);
    }
  }, 60_000);

  it('a log that throws says the line on stderr instead (it runs in timers and stream handlers, where a throw would end the server)', () => {
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    startLog({
      log: () => {
        throw new Error('the logger is closed');
      },
    })('[device default/0] hello');
    expect(stderr).toHaveBeenCalledWith('[device default/0] hello (options.log threw: the logger is closed)\n');
  });

  it('refuses a log that is no function, naming the option', async () => {
    const dataDir = tempDataDir();
    try {
      const config = loadConfig({ env: {}, values: { dataDir, server: { port: 0, host: '127.0.0.1' }, prepare: { threads: 1 } } });
      await expect(startServer(config, { log: 'stderr' as unknown as (line: string) => void })).rejects.toThrow(/options\.log must be a function that takes one line of text \(got string\)/);
    } finally {
      removeDir(dataDir);
    }
  });
});

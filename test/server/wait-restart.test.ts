/** `stoker wait` across a restart of its server: the job resumes there, and the waiter waits for it. */
import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CLI, freePort, http, removeDir, startServer, tempDataDir } from './helpers.js';

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 90_000 }, (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

describe('stoker wait', () => {
  it('rides out a crash and restart of its server: says so, then prints the resumed job\'s result (it ended with ECONNREFUSED, exit 1); a server never reached is said at once', async () => {
    const dir = tempDataDir();
    const port = await freePort();
    let s = await startServer(dir, ['--port', String(port)]);
    try {
      expect((await http(s.url, 'POST', '/v1/jobs', { id: 'w1', kind: 'sleep', partitions: 2, input: { prepareMs: 3500 } })).status).toBe(202);
      const waiting = cli(['wait', 'w1', '--server', s.url, '--timeout', '60s']);
      // (Its long poll under way, the job not done: the crash breaks the connection it had. Its
      // first partition ends at 3.5 s; 2 s was too short for the CLI to start on a loaded machine.)
      await new Promise((r) => setTimeout(r, 3000));
      expect((await http(s.url, 'GET', '/v1/jobs/w1')).body.state).toBe('running');
      await s.crash();
      await new Promise((r) => setTimeout(r, 800));
      s = await startServer(dir, ['--port', String(port)]);
      const r = await waiting;
      expect(r.code, r.stderr).toBe(0);
      // (The crash broke the long poll it had under way: the server was reached, and closed it.)
      expect(r.stderr).toMatch(/^stoker wait: the server at http:\/\/127\.0\.0\.1:\d+ closed the connection before it answered \(\w+\) — waiting for it to come back \(a restarted server resumes the job\), until --timeout\nstoker wait: the server answers again\n$/);
      expect(JSON.parse(r.stdout)).toMatchObject({ id: 'w1', state: 'done' });
    } finally {
      await s.stop();
      removeDir(dir);
    }
    const nowhere = `http://127.0.0.1:${await freePort()}`;
    // (With --progress it retried silently until --timeout, exit 3.)
    for (const progress of [[], ['--progress']]) {
      const never = await cli(['wait', 'x', '--server', nowhere, '--timeout', '30s', ...progress]);
      expect(never.code, progress.join(' ')).toBe(1);
      expect(never.stderr).toMatch(/cannot reach the server/);
    }
  }, 90_000);
});

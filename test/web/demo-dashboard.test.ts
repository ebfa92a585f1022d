import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CLI } from '../server/helpers.js';

describe('stoker demo --dashboard', () => {
  it('runs the demo jobs through the service and serves the dashboard and its API while they run', async () => {
    const child = spawn(process.execPath, [CLI, 'demo', '--dashboard', '--port', '0', '--seconds', '6', '--log-n', '12', '--synthesis-ms', '100', '--partitions', '4', '--jobs-in-flight', '4', '--quiet'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setInterval(() => {
          const m = /dashboard: (http:\/\/\S+?)\/ /.exec(err);
          if (m) {
            clearInterval(timer);
            resolve(m[1] as string);
          }
        }, 50);
        void exited.then(() => {
          clearInterval(timer);
          reject(new Error(`demo exited before serving:\n${err}`));
        });
      });
      const page = await fetch(`${url}/`);
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/text\/html/);
      expect(await page.text()).toContain('dashboard.js');
      // The demo's jobs are the service's: they show in its job list and status.
      let seen: { id: string; kind: string }[] = [];
      for (let i = 0; i < 100 && seen.length === 0; i++) {
        seen = (await (await fetch(`${url}/v1/jobs?limit=10`)).json()) as { id: string; kind: string }[];
        if (seen.length === 0) await new Promise((r) => setTimeout(r, 100));
      }
      expect(seen.length).toBeGreaterThan(0);
      expect(seen[0]?.kind).toBe('ntt-proof');
      expect(seen[0]?.id).toMatch(/^demo-\d+$/);
      const status = (await (await fetch(`${url}/v1/status`)).json()) as { pacer: { name: string } };
      expect(status.pacer.name).toBe('stoker');
      expect(await exited).toBe(0);
      expect(out).toMatch(/stoker\s+\d+\/0/); // the summary row: jobs done / 0 failed
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 60_000);
});

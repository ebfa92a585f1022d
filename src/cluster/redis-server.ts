/**
 * A private, throw-away redis-server for the cluster benchmark and tests: on a free loopback
 * port, no persistence, stopped by its owner. Never a Redis someone else runs.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';

/** The redis-server binary, or undefined when it is not installed (`apt-get install redis-server`). */
export function redisServerPath(): string | undefined {
  for (const p of ['/usr/bin/redis-server', '/usr/local/bin/redis-server']) if (fs.existsSync(p)) return p;
  const r = spawnSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' });
  const found = r.stdout.trim();
  return r.status === 0 && found ? found : undefined;
}

/** A loopback port nothing listens on (the OS picks it; released before it is returned). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

export interface RedisProcess {
  url: string;
  port: number;
  child: ChildProcess;
  stop(): Promise<void>;
}

/**
 * A private, throw-away redis-server on a free loopback port (no persistence). `dir`: its working
 * directory, where a SAVE writes its snapshot and a start loads it (a restart from an older snapshot).
 */
export async function startRedis(bin: string, port?: number, dir?: string): Promise<RedisProcess> {
  port ??= await freePort();
  const child = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...(dir === undefined ? [] : ['--dir', dir])], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const onData = (b: Buffer) => {
      out += b.toString();
      if (/Ready to accept connections/i.test(out)) resolve();
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    void exited.then(() => reject(new Error(`redis-server exited before it was ready:\n${out}`)));
  });
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    child,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(t);
    },
  };
}

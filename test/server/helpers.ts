import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';

/** A TCP port free on loopback now (for a server that must come back on the same port). */
export { freePort } from '../../src/cluster/redis-server.js';

/** The built CLI (npm test builds it first: `pretest`). */
export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

/** A `stoker serve` process on loopback, on a port the OS picks. */
export interface ServerProcess {
  url: string;
  child: ChildProcess;
  dataDir: string;
  /** Everything it printed so far. */
  output(): string;
  /** Resolves with the exit code (or signal name) once the process has exited. */
  exited: Promise<number | string>;
  /** SIGTERM, then waits for the exit. */
  stop(): Promise<number | string>;
  /** kill -9. */
  crash(): Promise<number | string>;
}

/** A fresh temporary data dir; remove it with {@link removeDir}. */
export function tempDataDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-serve-'));
}

export function removeDir(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
}

/**
 * Starts `stoker serve --port 0 --data <dir>` with the given extra args and environment, and
 * resolves once it prints the address it listens on.
 */
export function startServer(dataDir: string, args: string[] = [], env: Record<string, string> = {}): Promise<ServerProcess> {
  const child = spawn(process.execPath, [CLI, 'serve', '--host', '127.0.0.1', '--port', '0', '--data', dataDir, ...args], {
    // (Idle keep-alive connections held 60 s, not 5: fetch drops its own a second before the
    // server's hint, and on a loaded machine its timer came late — it sent on a socket the server
    // had just closed, "other side closed".)
    env: { ...process.env, STOKER_PREPARE_THREADS: '1', STOKER_SERVER_KEEP_ALIVE_TIMEOUT_S: '60', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)));
  return new Promise((resolve, reject) => {
    const onData = (b: Buffer) => {
      out += b.toString();
      const m = /listening on (https?:\/\/\S+)/.exec(out);
      if (m) {
        child.stdout?.off('data', onData);
        child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
        resolve({
          url: m[1] as string,
          child,
          dataDir,
          output: () => out,
          exited,
          stop: () => {
            child.kill('SIGTERM');
            return exited;
          },
          crash: () => {
            child.kill('SIGKILL');
            return exited;
          },
        });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (b: Buffer) => (out += b.toString()));
    void exited.then((code) => reject(new Error(`stoker serve exited (${code}) before listening:\n${out}`)));
  });
}

/** JSON over HTTP: status, headers and parsed body (or text); tests check the body field by field. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function http(base: string, method: string, p: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; body: any }> {
  const res = await fetch(new URL(p, base), {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // keep the text
  }
  return { status: res.status, headers: res.headers, body: parsed };
}

/** The result a `sleep` job with this seed and partition count must produce. */
export function sleepTotal(seed: number, partitions: number): number {
  let t = 0;
  for (let p = 0; p < partitions; p++) t += 2 * (seed * 31 + p);
  return t;
}

/** Polls `probe` every `everyMs` until it returns a value other than undefined; throws after `timeoutMs`. */
export async function waitUntil<T>(probe: () => Promise<T | undefined>, timeoutMs: number, what: string, everyMs = 15): Promise<T> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (performance.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** The value of one sample of a Prometheus text exposition (0 when the series is absent). */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = new Map([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) return Number(m[3]);
  }
  return 0;
}

/** A server-sent event as `GET /v1/events` sends it. */
export interface StreamedEvent {
  type: string;
  id?: string;
  partition?: number;
  [k: string]: unknown;
}

/** Subscribes to `GET /v1/events` and collects the events until close() (or the server goes away). */
export async function collectEvents(base: string): Promise<{ events: StreamedEvent[]; close(): Promise<void> }> {
  const ac = new AbortController();
  const res = await fetch(new URL('/v1/events', base), { signal: ac.signal });
  if (res.status !== 200 || !res.body) throw new Error(`GET /v1/events answered ${res.status}`);
  const events: StreamedEvent[] = [];
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const pump = (async () => {
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += value;
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = block
            .split('\n')
            .filter((l) => l.startsWith('data: '))
            .map((l) => l.slice(6))
            .join('\n');
          if (data) events.push(JSON.parse(data) as StreamedEvent);
        }
      }
    } catch {
      // aborted, or the server went away
    }
  })();
  return {
    events,
    close: async () => {
      ac.abort();
      await pump;
    },
  };
}

/**
 * A `stoker serve` for the tests of one describe block: started in beforeAll on a fresh data dir
 * (with these args and environment), stopped and its dir removed in afterAll. Read `.server`
 * inside the tests.
 */
export function useServer(args: string[] = [], env: Record<string, string> = {}): { readonly server: ServerProcess } {
  const ref: { server?: ServerProcess; dir?: string } = {};
  beforeAll(async () => {
    ref.dir = tempDataDir();
    ref.server = await startServer(ref.dir, args, env);
  }, 30_000);
  afterAll(async () => {
    await ref.server?.stop();
    if (ref.dir) removeDir(ref.dir);
  }, 30_000);
  return {
    get server() {
      if (!ref.server) throw new Error('the server is not started yet: read .server inside a test');
      return ref.server;
    },
  };
}

/** The served OpenAPI document, as far as {@link undocumented} reads it. */
export type OpenApiDoc = { components: { schemas: Record<string, Record<string, unknown>> } };

/** The keys of `value` (deeply) that `schema` (JSON Schema, refs into `doc`) does not name. */
export function undocumented(value: unknown, schema: Record<string, unknown>, doc: OpenApiDoc, at = ''): string[] {
  const ref = schema['$ref'];
  if (typeof ref === 'string') return undocumented(value, doc.components.schemas[ref.split('/').pop() as string] as Record<string, unknown>, doc, at);
  for (const k of ['anyOf', 'oneOf'] as const) {
    const alts = schema[k] as Record<string, unknown>[] | undefined;
    if (alts) return alts.map((a) => undocumented(value, a, doc, at)).reduce((best, x) => (x.length < best.length ? x : best));
  }
  if (Array.isArray(value)) return value.flatMap((v, i) => (schema['items'] ? undocumented(v, schema['items'] as Record<string, unknown>, doc, `${at}[${i}]`) : []));
  if (typeof value !== 'object' || value === null) return [];
  const props = schema['properties'] as Record<string, Record<string, unknown>> | undefined;
  const extra = schema['additionalProperties'] as Record<string, unknown> | boolean | undefined;
  return Object.entries(value).flatMap(([k, v]) => {
    const sub = props?.[k] ?? (typeof extra === 'object' ? extra : undefined);
    if (sub) return undocumented(v, sub, doc, `${at}.${k}`);
    return props || extra === false ? [`${at}.${k}`] : [];
  });
}

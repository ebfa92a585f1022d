/**
 * The endpoints behind the dashboard and the trace export, against a real `stoker serve` process:
 * GET /v1/jobs (recent jobs), /v1/timeline, /v1/trace, per-worker busy time in /v1/status, the
 * dashboard page and its whitelisted assets, and `stoker trace export`.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { request } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TimelineLane as Lane, TimelineSpan as Span } from '../../src/core/index.js';
import type { ChromeTraceEvent as TraceEvent } from '../../src/report/chrome-trace.js';
import { CLI, http, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess } from './helpers.js';

let server: ServerProcess;
let dataDir: string;
const tmp: string[] = [];

beforeAll(async () => {
  dataDir = tempDataDir();
  server = await startServer(dataDir, [], { STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '2' });
}, 60_000);

afterAll(async () => {
  if (server) {
    const code = await Promise.race([server.stop(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 20_000))]);
    if (code === undefined) await server.crash();
  }
  removeDir(dataDir);
  for (const d of tmp) removeDir(d);
}, 60_000);

const submit = (body: unknown) => http(server.url, 'POST', '/v1/jobs', body);
const done = (id: string) => waitUntil(async () => ((await http(server.url, 'GET', `/v1/jobs/${id}/result?wait=5s`)).status === 200 ? true : undefined), 30_000, `job ${id} to end`);

/** GET with the path exactly as written (no URL normalisation). */
function rawGet(base: string, p: string): Promise<{ status: number; type: string; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: p, method: 'GET' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), body }));
    });
    req.on('error', reject);
    req.end();
  });
}

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 30_000, maxBuffer: 64 * 2 ** 20 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout, stderr });
    });
  });
}

describe('the timeline and the trace', () => {
  const t0 = Date.now();

  beforeAll(async () => {
    // (Longer than the timeline's 250 ms between samples: a job over in 100 ms fell between two, and no sample saw it in flight.)
    const r = await submit({ id: 'tl-1', kind: 'sleep', partitions: 3, input: { prepareMs: 300, deviceMs: 100 } });
    expect(r.status).toBe(202);
    await done('tl-1');
  }, 60_000);

  it('GET /v1/timeline: lanes, one prepare and one device span per partition, in epoch ms', async () => {
    const r = await http(server.url, 'GET', '/v1/timeline?since=5m');
    expect(r.status).toBe(200);
    const { now, lanes, spans, samples } = r.body as { now: number; lanes: Lane[]; spans: Span[]; samples: { t: number; inventory: number }[] };
    expect(Math.abs(now - Date.now())).toBeLessThan(2_000);
    expect(lanes.filter((l) => l.kind === 'device').map((l) => l.name)).toEqual(expect.arrayContaining([expect.stringMatching(/^device 0 \/ worker \d$/)]));
    expect(lanes.some((l) => l.kind === 'prepare')).toBe(true);
    const mine = spans.filter((s) => s.jobId === 'tl-1');
    expect(mine.filter((s) => s.kind === 'prepare').map((s) => s.partition).sort()).toEqual([0, 1, 2]);
    expect(mine.filter((s) => s.kind === 'device').map((s) => s.partition).sort()).toEqual([0, 1, 2]);
    for (const s of mine) {
      expect(s.outcome).toBe('done');
      expect(s.start).toBeGreaterThanOrEqual(t0 - 1_000);
      expect(s.end as number).toBeGreaterThanOrEqual(s.start);
      expect(s.end as number).toBeLessThanOrEqual(now + 1);
      const lane = lanes.find((l) => l.id === s.lane);
      expect(lane?.kind).toBe(s.kind);
    }
    // A partition reaches a device after its preparation ended, and stays there about deviceMs.
    for (let p = 0; p < 3; p++) {
      const prep = mine.find((s) => s.kind === 'prepare' && s.partition === p) as Span;
      const dev = mine.find((s) => s.kind === 'device' && s.partition === p) as Span;
      expect(dev.start).toBeGreaterThanOrEqual(prep.end as number);
      expect((dev.end as number) - dev.start).toBeGreaterThanOrEqual(25);
      expect((prep.end as number) - prep.start).toBeGreaterThanOrEqual(35);
    }
    expect(samples.length).toBeGreaterThan(0);
    for (const x of samples) expect(Math.abs(x.t - now)).toBeLessThan(5 * 60_000);
    expect(Math.max(...samples.map((x) => x.inventory))).toBeGreaterThan(0);
    // The spans ended more than `since` ago drop out; limit keeps the newest.
    const limited = await http(server.url, 'GET', '/v1/timeline?since=5m&limit=2');
    expect((limited.body as { spans: Span[] }).spans.length).toBe(2);
    await waitUntil(async () => (Date.now() - Math.max(...mine.map((s) => s.end as number)) > 300 ? true : undefined), 5_000, '300 ms to pass', 50);
    const recent = await http(server.url, 'GET', '/v1/timeline?since=200ms');
    expect((recent.body as { spans: Span[] }).spans.filter((s) => s.jobId === 'tl-1')).toEqual([]);
  });

  it('GET /v1/timeline and /v1/trace answer a bad since with a 400 problem', async () => {
    for (const q of ['since=soon', 'since=5x', 'since=1m&since=2m']) {
      for (const p of ['/v1/timeline', '/v1/trace']) {
        const r = await http(server.url, 'GET', `${p}?${q}`);
        expect(r.status, `${p}?${q}`).toBe(400);
        expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(r.body.detail).toMatch(/since/);
      }
    }
    expect((await http(server.url, 'GET', '/v1/timeline?limit=-1')).status).toBe(400);
  });

  it('GET /v1/trace: Chrome trace JSON with a track per lane and a slice per partition and stage', async () => {
    const r = await http(server.url, 'GET', '/v1/trace?since=10m');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    const events = (r.body as { traceEvents: TraceEvent[] }).traceEvents;
    expect(r.body.displayTimeUnit).toBe('ms');
    expect(events.find((e) => e.name === 'process_name')?.args).toEqual({ name: 'stoker serve' });
    const threads = events.filter((e) => e.name === 'thread_name').map((e) => e.args?.['name']);
    // (The device's name beside its index: the metrics name it so.)
    expect(threads).toContain('device 0 (default) / worker 0');
    expect(threads).toContain('pipeline levels');
    const slices = events.filter((e) => e.ph === 'X' && e.args?.['job'] === 'tl-1');
    expect(slices.map((e) => `${e.cat} ${e.name}`).sort()).toEqual(['device tl-1 #0', 'device tl-1 #1', 'device tl-1 #2', 'prepare tl-1 #0', 'prepare tl-1 #1', 'prepare tl-1 #2']);
    for (const e of slices) {
      expect(e.ts).toBeGreaterThanOrEqual(0);
      expect(e.dur).toBeGreaterThan(0);
      expect(e.args?.['outcome']).toBe('done');
    }
    expect(events.some((e) => e.ph === 'C' && e.name === 'inventory')).toBe(true);
  });

  it('stoker trace export: the trace on stdout, or to a file with -o', async () => {
    const out = await cli(['trace', 'export', '--server', server.url, '--since', '10m']);
    expect(out.code, out.stderr).toBe(0);
    const trace = JSON.parse(out.stdout) as { traceEvents: TraceEvent[] };
    expect(trace.traceEvents.filter((e) => e.ph === 'X' && e.args?.['job'] === 'tl-1').length).toBe(6);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-trace-'));
    tmp.push(dir);
    const file = path.join(dir, 'trace.json');
    const toFile = await cli(['trace', 'export', '--server', server.url, '--since', '10m', '-o', file]);
    expect(toFile.code, toFile.stderr).toBe(0);
    expect(toFile.stdout).toBe('');
    expect(toFile.stderr).toMatch(/wrote .*trace\.json: \d+ partition slices/);
    expect((JSON.parse(fs.readFileSync(file, 'utf8')) as { traceEvents: TraceEvent[] }).traceEvents.length).toBe(trace.traceEvents.length);
    const bad = await cli(['trace', 'export', '--server', server.url, '--since', 'later']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--since must be a duration');
    const help = await cli(['trace', 'export', '--help']);
    expect(help.stdout).toContain('--since');
  });
});

describe('GET /v1/jobs and per-worker busy time', () => {
  it('lists recent jobs newest first, as GET /v1/jobs/:id shows them, filtered by state', async () => {
    for (const id of ['list-a', 'list-b']) expect((await submit({ id, kind: 'sleep', partitions: 2, input: { prepareMs: 5 } })).status).toBe(202);
    const long = await submit({ id: 'list-long', kind: 'sleep', partitions: 3, input: { prepareMs: 60_000 } });
    expect(long.status).toBe(202);
    await done('list-a');
    await done('list-b');
    const all = await http(server.url, 'GET', '/v1/jobs');
    expect(all.status).toBe(200);
    const ids = (all.body as { id: string }[]).map((j) => j.id);
    expect(ids.indexOf('list-long')).toBeLessThan(ids.indexOf('list-b'));
    expect(ids.indexOf('list-b')).toBeLessThan(ids.indexOf('list-a'));
    expect((await http(server.url, 'GET', '/v1/jobs?limit=2')).body.map((j: { id: string }) => j.id)).toEqual(['list-long', 'list-b']);
    const running = await waitUntil(
      async () => {
        const r = await http(server.url, 'GET', '/v1/jobs?state=running');
        const j = (r.body as { id: string; partitionStates: string[] | null }[]).find((x) => x.id === 'list-long');
        // All three preparing: then nothing changes for a minute, and two reads must agree.
        return j?.partitionStates?.every((st) => st === 'preparing') ? r.body : undefined;
      },
      15_000,
      'list-long running',
    );
    for (const j of running as { state: string }[]) expect(j.state).toBe('running');
    const one = await http(server.url, 'GET', '/v1/jobs/list-long');
    expect((running as { id: string }[]).find((j) => j.id === 'list-long')).toEqual(one.body);
    const finished = await http(server.url, 'GET', '/v1/jobs?state=done,failed&state=cancelled');
    expect((finished.body as { id: string; state: string }[]).map((j) => j.id)).toEqual(expect.arrayContaining(['list-a', 'list-b']));
    for (const j of finished.body as { state: string; partitionStates: unknown }[]) {
      expect(['done', 'failed', 'cancelled']).toContain(j.state);
      expect(j.partitionStates).toBeNull();
    }
    for (const q of ['state=nope', 'limit=x', 'limit=1001', 'limit=1&limit=2']) {
      const r = await http(server.url, 'GET', `/v1/jobs?${q}`);
      expect(r.status, q).toBe(400);
      expect(r.body.type).toBe('https://stoker.dev/problems/bad-query');
    }
    expect((await http(server.url, 'DELETE', '/v1/jobs/list-long')).body.state).toBe('cancelled');
  }, 60_000);

  it('GET /v1/status: each worker has its own busy seconds, adding up to its device', async () => {
    const r = await submit({ id: 'busy-1', kind: 'sleep', partitions: 6, input: { prepareMs: 1, deviceMs: 50 } });
    expect(r.status).toBe(202);
    await done('busy-1');
    const s = (await http(server.url, 'GET', '/v1/status')).body as { devices: { busyS: number; workers: { busyS: number }[] }[] };
    const d = s.devices[0] as { busyS: number; workers: { busyS: number }[] };
    const sum = d.workers.reduce((a, w) => a + w.busyS, 0);
    expect(sum).toBeGreaterThanOrEqual(6 * 0.045);
    expect(sum).toBeCloseTo(d.busyS, 3);
    for (const w of d.workers) expect(w.busyS).toBeGreaterThanOrEqual(0);
  }, 60_000);
});

describe('the dashboard page and its assets', () => {
  it('serves the page at / and its script, style and uPlot under /assets/', async () => {
    const page = await fetch(new URL('/', server.url));
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await page.text();
    for (const asset of ['assets/dashboard.js', 'assets/dashboard.css', 'assets/uPlot.iife.min.js', 'assets/uPlot.min.css']) {
      expect(html).toContain(asset);
      const r = await fetch(new URL(`/${asset}`, server.url));
      expect(r.status, asset).toBe(200);
      expect(r.headers.get('content-type'), asset).toMatch(asset.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);
      expect((await r.text()).length, asset).toBeGreaterThan(100);
    }
    expect(await (await fetch(new URL('/assets/uPlot.iife.min.js', server.url))).text()).toContain('uPlot');
  });

  it('serves no other file: unknown names and path tricks are 404 problems', async () => {
    // Sent as written (fetch would normalise the dot segments away before they reach the server).
    const paths = ['/assets/nope.js', '/assets/index.html', '/assets/..%2Fpackage.json', '/assets/..%2F..%2Fpackage.json', '/assets/%2e%2e%2f%2e%2e%2fpackage.json', '/assets/../../package.json', '/assets/./dashboard.js/..', '/assets/', '/assets/__proto__', '/assets/constructor', '/assets/toString', '/web/dashboard.js', '/web/index.html'];
    for (const p of paths) {
      const r = await rawGet(server.url, p);
      expect(r.status, p).toBe(404);
      expect(r.type, p).toMatch(/^application\/problem\+json/);
      expect(r.body, p).not.toContain('"version"');
    }
  });
});

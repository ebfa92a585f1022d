/**
 * The HTTP API and the CLI client commands against real `stoker serve` processes (dist/, built by
 * `npm run build`). One shared server runs most tests; dedicated servers cover admission limits,
 * metrics from a fresh start, and a graceful shutdown with resume.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { createServer } from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/cluster/redis-server.js';
import { Journal } from '../../src/server/journal.js';
import { CLI, http, removeDir, sleepTotal, startServer, tempDataDir, type ServerProcess } from './helpers.js';

// ─── Helpers ──────────────────────────────────────────────────────────────────────────────────

const PROBLEMS = 'https://stoker.dev/problems/';
const PARTITION_STATES = ['queued', 'preparing', 'waiting', 'on-device', 'done'];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

type Reply = Awaited<ReturnType<typeof http>>;

/** Polls `fn` until it returns a truthy value (then returns it); fails after `timeoutMs`. */
async function until<T>(what: string, fn: () => Promise<T> | T, timeoutMs = 15_000, intervalMs = 20): Promise<NonNullable<T>> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Resolves with `p`, or rejects after `ms`. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)))]).finally(() => clearTimeout(t));
}

const isIso = (v: unknown): boolean => typeof v === 'string' && !Number.isNaN(Date.parse(v)) && new Date(v).toISOString() === v;

function expectProblem(r: Reply, status: number, type: string): void {
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(r.body).toMatchObject({ type: PROBLEMS + type, status, title: expect.any(String), detail: expect.any(String) });
  expect((r.body as { title: string }).title.length).toBeGreaterThan(0);
  expect((r.body as { detail: string }).detail.length).toBeGreaterThan(0);
}

/** The `errors[].path` of a 400 invalid-job problem. */
function errorPaths(r: Reply): string[] {
  expectProblem(r, 400, 'invalid-job');
  return (r.body as { errors: { path: string; message: string }[] }).errors.map((e) => e.path);
}

function errorFor(r: Reply, path: string): string {
  const e = (r.body as { errors: { path: string; message: string }[] }).errors.find((x) => x.path === path);
  if (!e) throw new Error(`no error for ${path} in ${JSON.stringify(r.body)}`);
  return e.message;
}

const sleepJob = (id: string | undefined, partitions: number, input: { seed?: number; prepareMs?: number; deviceMs?: number } = {}) => ({
  ...(id === undefined ? {} : { id }),
  kind: 'sleep',
  partitions,
  input: { prepareMs: 20, ...input },
});

const submit = (base: string, body: unknown) => http(base, 'POST', '/v1/jobs', body);
const getJob = (base: string, id: string) => http(base, 'GET', `/v1/jobs/${encodeURIComponent(id)}`);
const result = (base: string, id: string, wait = '30s') => http(base, 'GET', `/v1/jobs/${encodeURIComponent(id)}/result?wait=${wait}`);
const status = async (base: string) => (await http(base, 'GET', '/v1/status')).body as StatusBody;

interface StatusBody {
  time: string;
  uptimeS: number;
  closing: boolean;
  jobs: { queued: number; running: number; done: number; failed: number; cancelled: number; pending: number; maxPending: number };
  partitions: { queued: number; preparing: number; waiting: number; onDevice: number; inFlight: number; pending: number; byKind: Record<string, Record<string, number>>; dispatched: number; completed: number };
  targetWaiting: number;
  devices: { device: number; kind: string; completions: number; busyS: number; workers: { state: string; job: string | null; partition: number | null; busyS: number }[] }[];
  pacer: { name: string; mode: string; ratePerSec: number | null; intervalMs: number | null };
  budget: { usedBytes: number; totalBytes: number | null; peakBytes: number; blocked: boolean };
  pool: Record<string, number>;
}

/** Waits until the server runs no partition at all (every earlier job ended). */
const idle = (base: string) => until('no partitions pending', async () => (await status(base)).partitions.pending === 0);

/** One series' value in a Prometheus text exposition, e.g. `stoker_jobs{kind="sleep",state="done"}`. */
function metric(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}
const metrics = async (base: string) => (await http(base, 'GET', '/metrics')).body as string;

interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs `node dist/cli/main.js …args` with no STOKER_* variables but `env`. */
function cli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('STOKER_')));
  const t0 = performance.now();
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...clean, ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolve({ code, stdout, stderr, ms: performance.now() - t0 });
    });
  });
}


/** Servers and dirs this file started: stopped and removed in the end even when a test fails. */
const started: ServerProcess[] = [];
const dirs: string[] = [];

async function serve(env: Record<string, string> = {}, dir?: string): Promise<ServerProcess> {
  const dataDir = dir ?? tempDataDir();
  if (!dirs.includes(dataDir)) dirs.push(dataDir);
  const s = await startServer(dataDir, [], env);
  started.push(s);
  return s;
}

async function stopServer(s: ServerProcess): Promise<void> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) return;
  try {
    await within(s.stop(), 20_000, 'graceful stop');
  } catch {
    await s.crash();
  }
}

afterAll(async () => {
  await Promise.all(started.map(stopServer));
  for (const d of dirs) removeDir(d);
}, 60_000);

/** A `text/event-stream` reader: parses events as they arrive. */
interface EventStream {
  contentType: string | null;
  /** Reads until an event satisfies `done`; returns every event read so far. */
  readUntil(done: (e: StreamEvent) => boolean, timeoutMs?: number): Promise<StreamEvent[]>;
  close(): Promise<void>;
}
interface StreamEvent {
  event: string;
  data: { type: string; time: string; id?: string; [k: string]: unknown };
}

async function openEvents(base: string): Promise<EventStream> {
  const ac = new AbortController();
  const res = await fetch(new URL('/v1/events', base), { signal: ac.signal });
  if (!res.body) throw new Error('no body');
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let comment = false;
  const events: StreamEvent[] = [];
  /** Reads one chunk and parses the complete blocks in it. */
  const pump = async () => {
    const { value, done } = await reader.read();
    if (done) throw new Error('the event stream ended');
    buffer += decoder.decode(value, { stream: true });
    let cut: number;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const lines = block.split('\n');
      if (lines.some((l) => l.startsWith(': stoker events'))) comment = true;
      const ev = lines.find((l) => l.startsWith('event: '));
      const data = lines.find((l) => l.startsWith('data: '));
      if (ev && data) events.push({ event: ev.slice(7), data: JSON.parse(data.slice(6)) as StreamEvent['data'] });
    }
  };
  // The server subscribes before it writes its opening comment: once that is read, no event is missed.
  await within((async () => { while (!comment) await pump(); })(), 10_000, 'the opening comment');
  return {
    contentType: res.headers.get('content-type'),
    async readUntil(done, timeoutMs = 15_000) {
      const t = setTimeout(() => ac.abort(), timeoutMs);
      try {
        while (!events.some(done)) await pump();
      } catch (e) {
        throw new Error(`events: ${(e as Error).message}; read so far: ${JSON.stringify(events.map((x) => x.data))}`);
      } finally {
        clearTimeout(t);
      }
      return [...events];
    },
    async close() {
      ac.abort();
      await reader.cancel().catch(() => undefined);
    },
  };
}

// ─── The shared server ────────────────────────────────────────────────────────────────────────

describe('stoker serve (shared server)', () => {
  let s: ServerProcess;
  let url: string;

  beforeAll(async () => {
    s = await serve();
    url = s.url;
  }, 30_000);

  afterAll(async () => {
    await stopServer(s);
    expect(s.child.exitCode).toBe(0);
  }, 30_000);

  describe('POST /v1/jobs', () => {
    it('accepts a job: 202, Location, the job as journaled with its input normalized', async () => {
      const r = await submit(url, sleepJob('post-1', 2, { seed: 3 }));
      expect(r.status).toBe(202);
      expect(r.headers.get('location')).toBe('/v1/jobs/post-1');
      expect(r.headers.get('content-type')).toMatch(/^application\/json/);
      expect(r.body).toMatchObject({
        id: 'post-1',
        kind: 'sleep',
        priority: 'normal',
        partitions: 2,
        input: { seed: 3, prepareMs: 20, deviceMs: 1 },
        deadline: null,
        finishedAt: null,
        durationS: null,
        resumes: 0,
        result: null,
        error: null,
      });
      expect(['queued', 'running']).toContain(r.body.state);
      // One state, not two: partitions already preparing are a running job's (it read queued
      // beside partitionStates ["preparing", "preparing"] until the journal recorded its start).
      const started = (r.body.partitionStates as string[]).some((st) => st !== 'queued');
      expect(r.body.state).toBe(started ? 'running' : 'queued');
      // And running since when: it read running with startedAt null (a user trial).
      if (started) expect(isIso(r.body.startedAt)).toBe(true);
      expect(isIso(r.body.submittedAt)).toBe(true);
      const done = await result(url, 'post-1');
      expect(done.status).toBe(200);
      expect(done.body).toMatchObject({ id: 'post-1', state: 'done', result: { partitions: 2, total: sleepTotal(3, 2) }, error: null });
      // The view sent back as it shows deadline (null: none) is the same job, not a 400.
      const back = await submit(url, { ...sleepJob('post-1', 2, { seed: 3 }), deadline: null });
      expect(back.status).toBe(200);
      expect(back.body.id).toBe('post-1');
    });

    it('generates an id when none is given', async () => {
      const r = await submit(url, sleepJob(undefined, 1, { seed: 4 }));
      expect(r.status).toBe(202);
      expect(r.body.id).toMatch(UUID);
      expect(r.headers.get('location')).toBe(`/v1/jobs/${r.body.id as string}`);
      const again = await result(url, r.body.id as string);
      expect(again.body).toMatchObject({ id: r.body.id, state: 'done', result: { partitions: 1, total: sleepTotal(4, 1) } });
      // Without an id there is no idempotency: the same body is another job.
      const other = await submit(url, sleepJob(undefined, 1, { seed: 4 }));
      expect(other.status).toBe(202);
      expect(other.body.id).not.toBe(r.body.id);
      await result(url, other.body.id as string);
    });

    it('is idempotent: the same id and body give 200 and the same job, also with the defaults spelled out', async () => {
      const body = sleepJob('idem-1', 2, { seed: 6 });
      const first = await submit(url, body);
      expect(first.status).toBe(202);
      const second = await submit(url, body);
      expect(second.status).toBe(200);
      expect(second.headers.get('location')).toBe('/v1/jobs/idem-1');
      expect(second.body.id).toBe('idem-1');
      expect(second.body.submittedAt).toBe(first.body.submittedAt);
      await result(url, 'idem-1');
      const spelled = await submit(url, { ...body, priority: 'normal', input: { seed: 6, prepareMs: 20, deviceMs: 1 } });
      expect(spelled.status).toBe(200);
      expect(spelled.body).toMatchObject({ id: 'idem-1', state: 'done', submittedAt: first.body.submittedAt, result: { partitions: 2, total: sleepTotal(6, 2) } });
    });

    it('answers 409 problem+json for the same id with a different body', async () => {
      await submit(url, sleepJob('conflict-1', 1));
      for (const other of [sleepJob('conflict-1', 2), sleepJob('conflict-1', 1, { seed: 1 }), { ...sleepJob('conflict-1', 1), priority: 'high' }]) {
        const r = await submit(url, other);
        expectProblem(r, 409, 'job-conflict');
        expect(r.body.title).toBe('Job id in use');
        expect(r.body.detail).toContain('conflict-1');
      }
      // The original is untouched.
      expect((await result(url, 'conflict-1')).body).toMatchObject({ state: 'done', result: { partitions: 1, total: sleepTotal(0, 1) } });
    });

    it('rejects invalid bodies with 400 and errors[] naming each field, creating no job', async () => {
      const before = await status(url);
      const total = (st: StatusBody) => st.jobs.pending + st.jobs.done + st.jobs.failed + st.jobs.cancelled;
      const cases: [body: unknown, path: string, message: RegExp][] = [
        [{ kind: 'sleep', partitions: 'three' }, 'partitions', /whole number/],
        [{ kind: 'sleep', partitions: 1.5 }, 'partitions', /whole number/],
        [{ kind: 'sleep', partitions: 0 }, 'partitions', /≥ 1/],
        [{ kind: 'sleep', partitions: 1e9 }, 'partitions', /≤ 1000000/],
        [{ kind: 'sleep' }, 'partitions', /whole number/],
        [{ partitions: 1 }, 'kind', /kind must be a string/],
        [{ kind: 'nope', partitions: 1 }, 'kind', /unknown kind "nope": use one of ntt-proof, sleep/],
        [{ kind: 'sleep', partitions: 1, colour: 'red' }, 'colour', /unknown field "colour": the fields are id, kind, priority, partitions, input, deadline/],
        [{ kind: 'sleep', partitons: 1 }, 'partitons', /^unknown field "partitons" \(did you mean partitions\?\): the fields are id, kind/],
        [{ kind: 'sleep', partitions: 1, input: { prepareMs: -1 } }, 'input.prepareMs', /prepareMs must be ≥ 0/],
        [{ kind: 'sleep', partitions: 1, input: { prepareMs: 'slow' } }, 'input.prepareMs', /milliseconds/],
        [{ kind: 'sleep', partitions: 1, input: { seed: 1.5 } }, 'input.seed', /integer/],
        [{ kind: 'sleep', partitions: 1, input: { bogus: 1 } }, 'input.bogus', /unknown field "bogus"/],
        [{ kind: 'ntt-proof', partitions: 1, input: { logN: 30 } }, 'input.logN', /logN must be ≤ 20/],
        [{ kind: 'sleep', partitions: 1, priority: 'urgent' }, 'priority', /critical, high, normal, low/],
        [{ kind: 'sleep', partitions: 1, deadline: 'tomorrow' }, 'deadline', /epoch milliseconds or an ISO 8601 time/],
        [{ kind: 'sleep', partitions: 1, deadline: -5 }, 'deadline', /epoch milliseconds or an ISO 8601 time/],
        [{ kind: 'sleep', partitions: 1, deadline: '2030-01-01T00:00:00' }, 'deadline', /an ISO 8601 time with its zone/],
        [{ kind: 'sleep', partitions: 1, id: 'has space' }, 'id', /id must be 1–200 characters/],
        [{ kind: 'sleep', partitions: 1, id: 'x'.repeat(201) }, 'id', /id must be 1–200 characters/],
        [[{ kind: 'sleep', partitions: 1 }], '', /the body must be a JSON object such as \{"kind": "KIND", "partitions": 4, "input": \{\}\} with KIND one of GET \/v1\/kinds/],
        [null, '', /the body must be a JSON object/],
      ];
      for (const [body, path, message] of cases) {
        const r = await submit(url, body);
        expect(errorPaths(r), JSON.stringify(body)).toContain(path);
        expect(errorFor(r, path)).toMatch(message);
        expect(r.body.detail).toContain(errorFor(r, path));
      }
      // A field that fails two checks with one message is named once (1e20: not a safe integer, past the last date).
      const twice = await submit(url, { kind: 'sleep', partitions: 1, deadline: 1e20 });
      expect(errorPaths(twice)).toEqual(['deadline']);
      // Every problem at once, each named.
      const many = await submit(url, { kind: 'sleep', partitions: 0, priority: 'x', colour: 1 });
      expect(errorPaths(many).sort()).toEqual(['colour', 'partitions', 'priority']);
      const after = await status(url);
      expect(total(after)).toBe(total(before));
    });

    it('answers a body of 50,000 unknown keys with a bounded 400: the first 20 named, the rest counted', async () => {
      // (Each error was listed, twice: a 12.6 MB reply to 60,000 keys, built in quadratic time while the server answered nothing else.)
      type Listed = { path: string; message: string }[];
      const keys = (prefix: string, n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, i]));
      const bounded = (r: Reply): Listed => {
        expectProblem(r, 400, 'invalid-job');
        expect(Buffer.byteLength(JSON.stringify(r.body))).toBeLessThan(16_384);
        return r.body.errors as Listed;
      };
      const first20 = (prefix: string) => Array.from({ length: 20 }, (_, i) => `${prefix}${i}`);
      // Unknown keys of the input: the sleep kind's JSON Schema has additionalProperties: false.
      const input = await submit(url, { kind: 'sleep', partitions: 1, input: keys('k', 50_000) });
      const inInput = bounded(input);
      expect(inInput.slice(0, 20).map((e) => e.path)).toEqual(first20('input.k'));
      expect(inInput[0]?.message).toMatch(/^unknown field "k0": remove it/);
      expect(inInput.slice(20)).toEqual([{ path: '', message: 'and 49980 more errors not listed, all of them unknown fields (50000 in all; the first 20 are listed)' }]);
      expect(input.body.detail).toMatch(/^input\.k0: unknown field "k0": remove it .*; input\.k19: .*; and 49980 more errors not listed, all of them unknown fields \(50000 in all; the first 20 are listed\)$/);
      // Unknown keys of the body, beside a bad field: every problem counts, the first listed first.
      const top = await submit(url, { kind: 'sleep', partitions: 0, ...keys('x', 50_000) });
      const atTop = bounded(top);
      expect(atTop.slice(0, 20).map((e) => e.path)).toEqual(['partitions', ...first20('x').slice(0, 19)]);
      expect(atTop[1]?.message).toBe('unknown field "x0": the fields are id, kind, priority, partitions, input, deadline');
      expect(atTop.at(-1)).toEqual({ path: '', message: 'and 49981 more errors not listed, all of them unknown fields (50001 in all; the first 20 are listed)' });
      expect(top.body.detail).toContain('; and 49981 more errors not listed');
      // A long value is quoted cut, not echoed whole (a 900 KB kind was, twice).
      const kind = await submit(url, { kind: 'k'.repeat(900_000), partitions: 1 });
      expect(bounded(kind)).toEqual([{ path: 'kind', message: `unknown kind "${'k'.repeat(100)}…": use one of ntt-proof, sleep` }]);
      const long = await submit(url, { kind: 'sleep', partitions: 1, input: { ['y'.repeat(5000)]: 1 } });
      expect(bounded(long)).toEqual([{ path: `input.${'y'.repeat(194)}…`, message: `unknown field "${'y'.repeat(100)}…": remove it (GET /v1/kinds describes each kind's input)` }]);
    });

    it('answers malformed JSON with a 400 bad-request problem', async () => {
      for (const text of ['{"kind": "sleep", ', 'not json', '{"kind":"sleep","partitions":1}}']) {
        const r = await http(url, 'POST', '/v1/jobs', text);
        expectProblem(r, 400, 'bad-request');
        expect(r.body.detail).toMatch(/not valid JSON.*send a JSON object/);
      }
      const empty = await http(url, 'POST', '/v1/jobs', '');
      expectProblem(empty, 400, 'bad-request');
      expect(empty.body.detail).toMatch(/empty/);
    });

    it('answers a body that is not application/json with a 415 problem', async () => {
      for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
        const r = await http(url, 'POST', '/v1/jobs', JSON.stringify({ kind: 'sleep', partitions: 1 }), { 'content-type': type });
        expectProblem(r, 415, 'unsupported-media-type');
        expect(r.body.detail).toBe(`send the body as JSON with the header Content-Type: application/json (got ${JSON.stringify(type)}; curl: -H 'content-type: application/json')`);
      }
      // Compressed, or another charset: said so (read as UTF-8 text, it was "not valid JSON").
      const { gzipSync } = await import('node:zlib');
      const gz = await fetch(new URL('/v1/jobs', url), { method: 'POST', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' }, body: gzipSync(JSON.stringify({ kind: 'sleep', partitions: 1 })) });
      expect(gz.status).toBe(415);
      expect(((await gz.json()) as { detail: string }).detail).toBe('a body with Content-Encoding gzip is not taken: send it uncompressed');
      const utf16 = await http(url, 'POST', '/v1/jobs', JSON.stringify({ kind: 'sleep', partitions: 1 }), { 'content-type': 'application/json; charset=utf-16' });
      expectProblem(utf16, 415, 'unsupported-media-type');
      expect(utf16.body.detail).toBe('a body in charset utf-16 is not taken: send JSON as UTF-8');
      expect((await http(url, 'POST', '/v1/jobs', JSON.stringify({ kind: 'sleep', partitions: 1, input: { prepareMs: 1 } }), { 'content-type': 'application/json; charset=UTF-8' })).status).toBe(202);
    });
  });

  describe('GET /v1/jobs/:id', () => {
    it('shows a running job with per-partition states and ISO timings, then the finished job', async () => {
      const r = await submit(url, sleepJob('get-1', 4, { seed: 2, prepareMs: 400 }));
      expect(r.status).toBe(202);
      const running = await until('get-1 running', async () => {
        const j = await getJob(url, 'get-1');
        return j.body.state === 'running' ? j : undefined;
      });
      expect(running.status).toBe(200);
      const job = running.body;
      expect(job).toMatchObject({ id: 'get-1', kind: 'sleep', partitions: 4, priority: 'normal', finishedAt: null, durationS: null, result: null, error: null, resumes: 0 });
      expect(job.partitionStates).toHaveLength(4);
      for (const st of job.partitionStates as string[]) expect(PARTITION_STATES).toContain(st);
      expect((job.partitionStates as string[]).filter((st) => st === 'done')).toHaveLength(job.partitionsDone as number);
      expect(isIso(job.submittedAt)).toBe(true);
      expect(isIso(job.startedAt)).toBe(true);
      expect(Date.parse(job.startedAt as string)).toBeGreaterThanOrEqual(Date.parse(job.submittedAt as string));

      expect((await result(url, 'get-1')).status).toBe(200);
      const done = (await getJob(url, 'get-1')).body;
      expect(done).toMatchObject({ state: 'done', partitionsDone: 4, partitionStates: null, error: null, result: { partitions: 4, total: sleepTotal(2, 4) } });
      expect(isIso(done.finishedAt)).toBe(true);
      expect(Date.parse(done.finishedAt as string)).toBeGreaterThanOrEqual(Date.parse(done.startedAt as string));
      expect(done.durationS).toBeCloseTo((Date.parse(done.finishedAt as string) - Date.parse(done.submittedAt as string)) / 1000, 3);
      expect(done.durationS).toBeGreaterThanOrEqual(0.4);
    });

    it('answers 404 problem for an unknown job', async () => {
      const r = await getJob(url, 'no-such-job');
      expectProblem(r, 404, 'job-not-found');
      expect(r.body.detail).toContain('"no-such-job"');
      // No id at all (GET /v1/jobs/): said so, with the list's path.
      const none = await http(url, 'GET', '/v1/jobs/');
      expectProblem(none, 404, 'job-not-found');
      expect(none.body.detail).toBe('no job id given: GET /v1/jobs/ID for a job, GET /v1/jobs for the list');
    });
  });

  describe('GET /v1/jobs/:id/result', () => {
    it('answers 202 with the state when the wait elapses first', async () => {
      await submit(url, sleepJob('res-slow', 2, { prepareMs: 3000 }));
      await until('res-slow running', async () => (await getJob(url, 'res-slow')).body.state === 'running');
      const t0 = performance.now();
      const r = await result(url, 'res-slow', '200ms');
      const ms = performance.now() - t0;
      expect(r.status).toBe(202);
      expect(r.body).toEqual({ id: 'res-slow', state: 'running', result: null, error: null, finishedAt: null });
      expect(ms).toBeGreaterThanOrEqual(150);
      expect(ms).toBeLessThan(2000);
      // No wait: at once.
      const now = await http(url, 'GET', '/v1/jobs/res-slow/result');
      expect(now.status).toBe(202);
      expect(now.body.state).toBe('running');
      expect((await http(url, 'DELETE', '/v1/jobs/res-slow')).status).toBe(200);
      await idle(url);
    });

    it('answers 200 with the result when the job ends within the wait', async () => {
      await submit(url, sleepJob('res-fast', 5, { seed: 11, prepareMs: 30 }));
      const t0 = performance.now();
      const r = await result(url, 'res-fast', '20s');
      expect(performance.now() - t0).toBeLessThan(10_000);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ id: 'res-fast', state: 'done', result: { partitions: 5, total: sleepTotal(11, 5) }, error: null });
      expect(isIso(r.body.finishedAt)).toBe(true);
      // Asked again: the same, at once, in every wait syntax.
      for (const w of ['0', '1', '500ms', '1.5s', '1m']) expect((await result(url, 'res-fast', w)).body).toEqual(r.body);
    });

    it('rejects a bad wait with a 400 problem, and answers 404 for an unknown job', async () => {
      await submit(url, sleepJob('res-bad', 1));
      for (const w of ['abc', '-1', '10s5', '1d']) {
        const r = await result(url, 'res-bad', w);
        expectProblem(r, 400, 'bad-wait');
        expect(r.body.detail).toContain('wait must be a duration');
      }
      const unknown = await result(url, 'no-such-job', '1s');
      expectProblem(unknown, 404, 'job-not-found');
      await result(url, 'res-bad');
    });

    it('pages with before: every job once, newest first, to the first (a list was the newest 1,000 at most: an audit could not read further)', async () => {
      for (let i = 0; i < 7; i++) await submit(url, sleepJob(`pg-${i}`, 1, { prepareMs: 1 }));
      for (let i = 0; i < 7; i++) await result(url, `pg-${i}`);
      const all = ((await http(url, 'GET', '/v1/jobs?limit=1000')).body as { id: string }[]).map((j) => j.id);
      const seen: string[] = [];
      let before: string | undefined;
      for (;;) {
        const page = (await http(url, 'GET', `/v1/jobs?limit=3${before ? `&before=${encodeURIComponent(before)}` : ''}`)).body as { id: string }[];
        seen.push(...page.map((j) => j.id));
        if (page.length < 3) break;
        before = page.at(-1)?.id;
      }
      expect(seen).toEqual(all);
      expect(seen.indexOf('pg-6')).toBeLessThan(seen.indexOf('pg-0'));
      // With a state filter too: the done ones before pg-3.
      const done = ((await http(url, 'GET', '/v1/jobs?limit=1000&state=done&before=pg-3')).body as { id: string; state: string }[]);
      expect(done.map((j) => j.id).slice(0, 3)).toEqual(['pg-2', 'pg-1', 'pg-0']);
      const unknown = await http(url, 'GET', '/v1/jobs?before=no-such-job');
      expectProblem(unknown, 400, 'bad-query');
      expect(unknown.body.detail).toBe('before: no job "no-such-job" here (purged, or never submitted): give the id of the last job of the page before, as listed');
      // Empty, or twice: each said as it is (an empty one read "must be given once").
      expect((await http(url, 'GET', '/v1/jobs?before=')).body.detail).toBe('before is empty: give the id of the last job of the page before (leave it out for the first page)');
      expect((await http(url, 'GET', '/v1/jobs?before=pg-1&before=pg-2')).body.detail).toBe('before must be given once: give the id of the last job of the page before (leave it out for the first page)');
    });

    it('GET /v1/backup: a consistent copy of the journal while the server runs (sqlite3 .backup was locked out), a server starts on it with the jobs it held; the copy is not left in the data dir', async () => {
      await submit(url, sleepJob('bk-done', 1, { prepareMs: 1 }));
      await result(url, 'bk-done');
      await submit(url, sleepJob('bk-running', 1, { prepareMs: 600_000 }));
      try {
        const r = await fetch(new URL('/v1/backup', url));
        expect(r.status).toBe(200);
        expect(r.headers.get('content-type')).toBe('application/vnd.sqlite3');
        expect(r.headers.get('content-disposition')).toMatch(/^attachment; filename="stoker-.*\.db"$/);
        const bytes = Buffer.from(await r.arrayBuffer());
        expect(bytes.subarray(0, 16).toString('latin1')).toBe('SQLite format 3\0');
        await until('the copy removed once sent', async () => fs.readdirSync(s.dataDir).every((f) => !f.includes('backup')));
        // The same from the command line, written whole under the name asked for.
        const into = tempDataDir();
        dirs.push(into);
        const file = path.join(into, 'copy.db');
        const cmd = await cli(['backup', '--server', url, '-o', file]);
        expect(cmd.code, cmd.stderr).toBe(0);
        expect(cmd.stderr).toMatch(/^wrote .*copy\.db: \d+ bytes, a copy of the server's journal/);
        expect(fs.readFileSync(file).subarray(0, 16).toString('latin1')).toBe('SQLite format 3\0');
        expect(fs.readdirSync(path.dirname(file))).toEqual(['copy.db']);
        // A directory as -o: refused before anything is written (the whole copy was left beside it as a .part file), --json says what was written.
        const asDir = await cli(['backup', '--server', url, '-o', into]);
        expect(asDir.code).toBe(2);
        expect(asDir.stderr).toMatch(/cannot write -o .*: it is a directory — give a file in it, e\.g\. -o .*stoker-backup\.db/);
        expect(fs.readdirSync(into)).toEqual(['copy.db']);
        const json = await cli(['backup', '--server', url, '-o', path.join(into, 'again.db'), '--json']);
        expect(JSON.parse(json.stdout)).toEqual({ file: path.join(into, 'again.db'), bytes: fs.statSync(path.join(into, 'again.db')).size });
        const restored = tempDataDir();
        dirs.push(restored);
        fs.writeFileSync(path.join(restored, 'stoker.db'), bytes);
        const j = Journal.open(restored);
        try {
          expect(j.get('bk-done')?.state).toBe('done');
          expect(j.get('bk-running')?.state).toMatch(/^(queued|running)$/);
        } finally {
          j.close();
        }
      } finally {
        await http(url, 'DELETE', '/v1/jobs/bk-running');
      }
    });

    it('answers a query parameter a route does not take with a 400 naming it (ignored, a paging client read the first page for ever)', async () => {
      const page = await http(url, 'GET', '/v1/jobs?limit=5&offset=50');
      expectProblem(page, 400, 'bad-query');
      expect(page.body.detail).toBe('/v1/jobs takes limit, state and before, not "offset": the list is the newest jobs, up to limit (at most 1000); the next page is ?before=<the last id listed>');
      const timeout = await http(url, 'GET', '/v1/jobs/res-bad/result?timeout=30s');
      expectProblem(timeout, 400, 'bad-query');
      expect(timeout.body.detail).toBe('/v1/jobs/:id/result takes only wait, not "timeout"');
      expect((await http(url, 'GET', '/v1/jobs?limit=5&state=done')).status).toBe(200);
    });
  });

  describe('DELETE /v1/jobs/:id', () => {
    it('cancels a running job, answers its waiter, and leaves no partition in flight', async () => {
      await idle(url);
      await submit(url, sleepJob('del-1', 4, { prepareMs: 3000 }));
      await until('del-1 running', async () => (await getJob(url, 'del-1')).body.state === 'running');
      const waiter = result(url, 'del-1', '30s');
      expect((await status(url)).partitions.pending).toBe(4);
      const t0 = performance.now();
      const r = await http(url, 'DELETE', '/v1/jobs/del-1');
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ id: 'del-1', state: 'cancelled', partitionStates: null, result: null, error: { code: 'E_CANCELLED', reason: 'cancelled on request' } });
      expect(isIso(r.body.finishedAt)).toBe(true);
      const w = await waiter;
      expect(performance.now() - t0).toBeLessThan(2000);
      expect(w.status).toBe(200);
      expect(w.body).toMatchObject({ id: 'del-1', state: 'cancelled', result: null, error: { code: 'E_CANCELLED' } });
      // A second cancel is a no-op.
      const again = await http(url, 'DELETE', '/v1/jobs/del-1');
      expect(again.status).toBe(200);
      expect(again.body.finishedAt).toBe(r.body.finishedAt);
      // Its partitions leave the engine (the runtime withdraws them asynchronously).
      const st = await until('del-1 withdrawn', async () => {
        const x = await status(url);
        return x.partitions.pending === 0 ? x : undefined;
      });
      expect(st.partitions).toMatchObject({ queued: 0, preparing: 0, waiting: 0, onDevice: 0, inFlight: 0, pending: 0 });
      expect(st.partitions.byKind).toEqual({});
      expect(st.devices[0]?.workers.every((wk) => wk.job === null)).toBe(true);
      expect((await getJob(url, 'del-1')).body).toMatchObject({ state: 'cancelled', partitionsDone: 0 });
    });

    it('answers 409 for a finished job and 404 for an unknown one', async () => {
      await submit(url, sleepJob('del-done', 1));
      await result(url, 'del-done');
      const r = await http(url, 'DELETE', '/v1/jobs/del-done');
      expectProblem(r, 409, 'job-finished');
      expect(r.body.detail).toContain('(done)');
      expect((await getJob(url, 'del-done')).body.state).toBe('done');
      expectProblem(await http(url, 'DELETE', '/v1/jobs/no-such-job'), 404, 'job-not-found');
    });
  });

  describe('GET /v1/status', () => {
    it('counts jobs and partitions exactly, and shows workers, pacer, budget and pool', async () => {
      const s0 = await idle(url).then(() => status(url));
      expect(s0.jobs.pending).toBe(0);
      expect(s0).toMatchObject({ closing: false, targetWaiting: 4, jobs: { queued: 0, running: 0, maxPending: 10_000 } });
      expect(isIso(s0.time)).toBe(true);
      expect(s0.uptimeS).toBeGreaterThan(0);

      // st-dev's partition reaches a device worker and stays there; the others keep preparing.
      try {
        await checkLoaded();
      } finally {
        for (const id of ['st-1', 'st-2', 'st-dev']) await http(url, 'DELETE', `/v1/jobs/${id}`);
      }
      const s2 = await idle(url).then(() => status(url));
      expect(s2.jobs.pending).toBe(0);
      expect(s2.jobs.cancelled).toBe(s0.jobs.cancelled + 3);
      expect(s2.devices[0]?.workers.map((w) => w.state)).toEqual(['idle', 'idle']);

      async function checkLoaded(): Promise<void> {
        await submit(url, sleepJob('st-dev', 1, { prepareMs: 10, deviceMs: 5000 }));
        await until('st-dev on a device', async () => (await status(url)).devices[0]?.workers.some((w) => w.job === 'st-dev'));
        await submit(url, sleepJob('st-1', 3, { prepareMs: 5000 }));
        await submit(url, sleepJob('st-2', 2, { prepareMs: 5000 }));
        const s1 = await status(url);
        expect(s1.jobs.pending).toBe(3);
        expect(s1.jobs.queued + s1.jobs.running).toBe(3);
        expect(s1.jobs.done).toBe(s0.jobs.done);
        expect(s1.jobs.cancelled).toBe(s0.jobs.cancelled);
        const p = s1.partitions;
        expect(p.pending).toBe(6);
        expect(p.queued + p.preparing + p.waiting + p.onDevice).toBe(6);
        expect(p.inFlight).toBe(p.preparing + p.waiting + p.onDevice);
        expect(p.onDevice).toBe(1);
        const sleep = p.byKind['sleep'] as Record<string, number>;
        expect(sleep).toEqual({ queued: p.queued, preparing: p.preparing, waiting: p.waiting, 'on-device': p.onDevice });

        expect(s1.devices).toHaveLength(1);
        const dev = s1.devices[0] as StatusBody['devices'][number];
        expect(dev).toMatchObject({ device: 0, kind: 'cpu' });
        expect(dev.workers).toHaveLength(2);
        for (const w of dev.workers) expect(['idle', 'busy']).toContain(w.state);
        expect(dev.workers.filter((w) => w.state === 'busy')).toEqual([{ state: 'busy', job: 'st-dev', partition: 0, busyS: expect.any(Number) }]);
        for (const w of dev.workers) expect(w.busyS).toBeGreaterThanOrEqual(0);
        expect(dev.completions).toEqual(expect.any(Number));
        expect(dev.busyS).toEqual(expect.any(Number));

        expect(s1.pacer.name).toBe('stoker');
        expect(['bootstrap', 'steady', 'hold', 'blocked', 'idle']).toContain(s1.pacer.mode);
        expect(s1.budget).toMatchObject({ usedBytes: 0, totalBytes: null, peakBytes: expect.any(Number), blocked: false });
        expect(s1.pool).toMatchObject({ leasedBytes: expect.any(Number), idleBytes: expect.any(Number), totalBytes: expect.any(Number) });

        // The worker's busy ratio in /metrics agrees.
        const busyWorker = dev.workers.findIndex((w) => w.state === 'busy');
        const text = await metrics(url);
        expect(metric(text, `stoker_device_worker_busy{device="default",worker="${busyWorker}"}`)).toBe(1);
        expect(metric(text, `stoker_device_worker_busy{device="default",worker="${1 - busyWorker}"}`)).toBe(0);
        expect(metric(text, 'stoker_partitions{kind="sleep",stage="on-device"}')).toBe(1);
      }
    });
  });

  describe('discovery', () => {
    it('GET /v1/kinds lists ntt-proof and sleep', async () => {
      const r = await http(url, 'GET', '/v1/kinds');
      expect(r.status).toBe(200);
      expect((r.body as { name: string }[]).map((k) => k.name).sort()).toEqual(['ntt-proof', 'sleep']);
      for (const k of r.body as { description: string }[]) expect(k.description.length).toBeGreaterThan(10);
    });

    it('GET /v1/openapi.json documents every route the server answers', async () => {
      const r = await http(url, 'GET', '/v1/openapi.json');
      expect(r.status).toBe(200);
      expect(r.body.openapi).toBe('3.1.0');
      const paths = r.body.paths as Record<string, Record<string, unknown>>;
      expect(Object.keys(paths).sort()).toEqual(['/', '/assets/{file}', '/livez', '/metrics', '/readyz', '/v1/backup', '/v1/events', '/v1/history', '/v1/jobs', '/v1/jobs/{id}', '/v1/jobs/{id}/events', '/v1/jobs/{id}/result', '/v1/kinds', '/v1/openapi.json', '/v1/status', '/v1/timeline', '/v1/trace']);
      expect(Object.entries(paths).flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`)).sort()).toEqual([
        'DELETE /v1/jobs/{id}',
        'GET /',
        'GET /assets/{file}',
        'GET /livez',
        'GET /metrics',
        'GET /readyz',
        'GET /v1/backup',
        'GET /v1/events',
        'GET /v1/history',
        'GET /v1/jobs',
        'GET /v1/jobs/{id}',
        'GET /v1/jobs/{id}/events',
        'GET /v1/jobs/{id}/result',
        'GET /v1/kinds',
        'GET /v1/openapi.json',
        'GET /v1/status',
        'GET /v1/timeline',
        'GET /v1/trace',
        'POST /v1/jobs',
      ]);
      // Each documented GET is served (not the 404 of an unknown route).
      await submit(url, sleepJob('doc-1', 1));
      await result(url, 'doc-1');
      for (const p of Object.keys(paths).filter((x) => x !== '/v1/events' && 'get' in (paths[x] as object))) {
        const got = await http(url, 'GET', p.replace('{id}', 'doc-1').replace('{file}', 'dashboard.js'));
        expect(got.status, p).toBe(200);
      }
     // Who may call is said on every route but the probes (no route listed 401, 403 or 421); the event streams take their query parameters.
      const ops = paths as Record<string, Record<string, { responses: Record<string, unknown>; parameters?: { name: string }[] }>>;
      for (const [p, byMethod] of Object.entries(ops)) {
        for (const [m, op] of Object.entries(byMethod)) expect(Object.keys(op.responses).includes('421'), `${m} ${p}`).toBe(p !== '/livez' && p !== '/readyz');
      }
      expect(Object.keys(ops['/v1/jobs']?.['post']?.responses ?? {})).toEqual(expect.arrayContaining(['401', '403', '421']));
      expect(ops['/v1/events']?.['get']?.parameters?.map((x) => x.name)).toEqual(['lastEventId', 'access_token']);
    });

    it('answers an unknown route with a 404 problem, a known one asked with another method with a 405 naming the methods it takes (it was a 404: no such path)', async () => {
      const r = await http(url, 'GET', '/v1/nope?x=1');
      expectProblem(r, 404, 'not-found');
      expect(r.body.detail).toBe('no route GET /v1/nope: see GET /v1/openapi.json for the API');
      const put = await http(url, 'PUT', '/v1/jobs', { kind: 'sleep', partitions: 1 });
      expectProblem(put, 405, 'method-not-allowed');
      expect(put.headers.get('allow')?.split(', ').sort()).toEqual(['GET', 'HEAD', 'POST']);
      expect(put.body.detail).toBe('PUT /v1/jobs is not served: it takes POST, GET, HEAD (see GET /v1/openapi.json)');
      const del = await http(url, 'DELETE', '/v1/jobs/doc-1/result');
      expectProblem(del, 405, 'method-not-allowed');
      expect(del.headers.get('allow')?.split(', ').sort()).toEqual(['GET', 'HEAD']);
      expect((await http(url, 'PATCH', '/v1/jobs/doc-1')).headers.get('allow')?.split(', ').sort()).toEqual(['DELETE', 'GET', 'HEAD']);
      expectProblem(await http(url, 'OPTIONS', '/v1/status'), 405, 'method-not-allowed');
      // Before the body is read: one the path would never take is no 415.
      const text = await fetch(new URL('/v1/jobs', url), { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: 'x' });
      expect(text.status).toBe(405);
    });
  });

  describe('GET /v1/events', () => {
    it('streams job.submitted, job.started, one job.partition per partition and job.done, in order', async () => {
      const stream = await openEvents(url);
      try {
        expect(stream.contentType).toBe('text/event-stream');
        await submit(url, sleepJob('ev-1', 3, { prepareMs: 20 }));
        const all = await stream.readUntil((e) => e.data.type === 'job.done' && e.data.id === 'ev-1');
        const mine = all.filter((e) => e.data.id === 'ev-1');
        for (const e of mine) {
          expect(e.event).toBe(e.data.type);
          expect(isIso(e.data.time)).toBe(true);
        }
        expect(mine.map((e) => e.data.type)).toEqual(['job.submitted', 'job.started', 'job.partition', 'job.partition', 'job.partition', 'job.done']);
        expect(mine[0]?.data).toMatchObject({ kind: 'sleep', partitions: 3, priority: 'normal', deadline: null });
        expect(mine.filter((e) => e.data.type === 'job.partition').map((e) => e.data['partition']).sort()).toEqual([0, 1, 2]);

        // A cancellation is an event too.
        await submit(url, sleepJob('ev-2', 2, { prepareMs: 5000 }));
        await until('ev-2 running', async () => (await getJob(url, 'ev-2')).body.state === 'running');
        await http(url, 'DELETE', '/v1/jobs/ev-2');
        const more = await stream.readUntil((e) => e.data.type === 'job.cancelled' && e.data.id === 'ev-2');
        expect(more.filter((e) => e.data.id === 'ev-2').map((e) => e.data.type)).toEqual(['job.submitted', 'job.started', 'job.cancelled']);
        expect(more.find((e) => e.data.type === 'job.cancelled')?.data).toMatchObject({ code: 'E_CANCELLED', reason: 'cancelled on request' });
      } finally {
        await stream.close();
      }
      await idle(url);
    });
  });

  describe('ntt-proof', () => {
    it('proves a small job: every partition checked, a 64-hex commitment, the same for the same input', async () => {
      const input = { seed: 7, logN: 10, synthesisMs: 10 };
      for (const id of ['ntt-a', 'ntt-b']) expect((await submit(url, { id, kind: 'ntt-proof', partitions: 3, input })).status).toBe(202);
      await submit(url, { id: 'ntt-c', kind: 'ntt-proof', partitions: 3, input: { ...input, seed: 8 } });
      const [a, b, c] = await Promise.all(['ntt-a', 'ntt-b', 'ntt-c'].map((id) => result(url, id)));
      for (const r of [a, b, c]) {
        expect(r?.status).toBe(200);
        expect(r?.body).toMatchObject({ state: 'done', error: null, result: { partitions: 3, checked: 3 } });
        expect(r?.body.result.commitment).toMatch(/^[0-9a-f]{64}$/);
      }
      expect(a?.body.result.commitment).toBe(b?.body.result.commitment);
      expect(c?.body.result.commitment).not.toBe(a?.body.result.commitment);
      expect((await getJob(url, 'ntt-a')).body.input).toEqual(input);
    });
  });

  describe('a second server', () => {
    it('refuses the data dir a running server holds', async () => {
      const second = startServer(s.dataDir).then((x) => {
        started.push(x);
        return x;
      });
      await expect(second).rejects.toThrow(/in use by another stoker serve/);
      expect((await status(url)).closing).toBe(false);
    });
  });

  describe('CLI client', () => {
    const server = () => ['--server', url];

    it('submit prints the accepted id; again: already submitted; --json prints the job', async () => {
      const r = await cli(['submit', ...server(), '-k', 'sleep', '-n', '2', '--id', 'cli-1', '--input', '{"prepareMs":20,"seed":5}']);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^accepted: cli-1 \((queued|running)\)\n$/);
      const again = await cli(['submit', ...server(), '-k', 'sleep', '-n', '2', '--id', 'cli-1', '--input', '{"prepareMs":20,"seed":5}']);
      expect(again.code).toBe(0);
      expect(again.stdout).toMatch(/^already submitted: cli-1 \((queued|running|done)\)\n$/);
      const gen = await cli(['submit', ...server(), '-k', 'sleep', '-n', '1']);
      expect(gen.code).toBe(0);
      expect(gen.stdout).toMatch(/^accepted: [0-9a-f-]{36} \((queued|running)\)\n$/);
      const json = await cli(['submit', ...server(), '--json', '-k', 'sleep', '-n', '3', '--id', 'cli-json', '--priority', 'high', '--input', '{"prepareMs":20}']);
      expect(json.code).toBe(0);
      expect(JSON.parse(json.stdout)).toMatchObject({ id: 'cli-json', kind: 'sleep', partitions: 3, priority: 'high', input: { seed: 0, prepareMs: 20, deviceMs: 1 } });
      // A deadline from now (+90s); a wrong one says the forms.
      const before = Date.now();
      const dl = await cli(['submit', ...server(), '--json', '-k', 'sleep', '-n', '1', '--id', 'cli-dl', '--deadline', '+90s']);
      expect(dl.code).toBe(0);
      const at = Date.parse(JSON.parse(dl.stdout).deadline as string);
      expect(at).toBeGreaterThanOrEqual(before + 90_000);
      expect(at).toBeLessThanOrEqual(Date.now() + 90_000);
      const bad = await cli(['submit', ...server(), '-k', 'sleep', '-n', '1', '--deadline', '+soon']);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/--deadline \+soon: give a duration from now such as \+90s/);
      // A duration without its + (the server's "epoch ms or ISO" said nothing of +90s).
      const plain = await cli(['submit', ...server(), '-k', 'sleep', '-n', '1', '--deadline', '90s']);
      expect(plain.code).toBe(2);
      expect(plain.stderr).toMatch(/--deadline 90s: a duration from now takes a \+ \(--deadline \+90s\)/);
      // The API's prefix in --server: every call went to /v1/v1/….
      const prefixed = await cli(['status', '--server', `${url}/v1`]);
      expect(prefixed.code).toBe(2);
      expect(prefixed.stderr).toContain(`--server is the server's base URL, without /v1: ${new URL(url).origin}`);
    });

    it('wait prints the result and exits 0 when done; status <id> prints the job', async () => {
      const r = await cli(['wait', ...server(), 'cli-1']);
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ id: 'cli-1', state: 'done', result: { partitions: 2, total: sleepTotal(5, 2) }, error: null });
      const st = await cli(['status', ...server(), 'cli-1']);
      expect(st.code).toBe(0);
      expect(JSON.parse(st.stdout)).toMatchObject({ id: 'cli-1', state: 'done', partitionsDone: 2, partitionStates: null });
      const gone = await cli(['status', ...server(), 'no-such-job']);
      expect(gone.code).toBe(2);
      expect(gone.stderr).toContain('error: 404 No such job: no job "no-such-job"');
    });

    it('status prints the engine as text, or as JSON with --json (also via STOKER_SERVER)', async () => {
      await cli(['wait', ...server(), 'cli-json']);
      await idle(url);
      const r = await cli(['status', ...server()]);
      expect(r.code).toBe(0);
      const lines = r.stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(5);
      expect(lines[0]).toMatch(/^jobs {8}pending 0 {2}\(queued 0, running 0\) {2}done \d+ {2}failed 0 {2}cancelled \d+$/);
      expect(lines[1]).toBe('partitions  queued 0  preparing 0  waiting 0 (target 4)  on device 0');
      expect(lines[2]).toBe('devices     0/2 workers busy');
      expect(lines[3]).toMatch(/^pacer {7}stoker \w+ {2}capacity /);
      expect(lines[4]).toBe('budget      0 B of unlimited');
      const api = await status(url);
      expect(lines[0]).toContain(`done ${api.jobs.done}  failed 0  cancelled ${api.jobs.cancelled}`);

      const json = await cli(['status', '--json'], { STOKER_SERVER: url });
      expect(json.code).toBe(0);
      const body = JSON.parse(json.stdout) as StatusBody;
      expect(body.jobs).toEqual(api.jobs);
      expect(body.devices[0]?.workers).toHaveLength(2);
      expect(body.pacer.name).toBe('stoker');
    });

    it('wait --timeout exits 3 on a slow job; cancel cancels it; wait on a cancelled job exits 1', async () => {
      expect((await cli(['submit', ...server(), '-k', 'sleep', '-n', '2', '--id', 'cli-slow', '--input', '{"prepareMs":5000}'])).code).toBe(0);
      const t = await cli(['wait', ...server(), 'cli-slow', '--timeout', '200ms']);
      expect(t.code).toBe(3);
      expect(t.stdout).toBe('');
      expect(t.stderr).toMatch(/^job cli-slow is still (queued|running) after --timeout 200ms\n$/);
      expect(t.ms).toBeLessThan(4000);
      const c = await cli(['cancel', ...server(), 'cli-slow']);
      expect(c.code).toBe(0);
      expect(c.stdout).toBe('cli-slow: cancelled\n');
      const w = await cli(['wait', ...server(), 'cli-slow']);
      expect(w.code).toBe(1);
      expect(JSON.parse(w.stdout)).toMatchObject({ id: 'cli-slow', state: 'cancelled', error: { code: 'E_CANCELLED' } });
      const cj = await cli(['cancel', ...server(), '--json', 'cli-slow']);
      expect(cj.code).toBe(0);
      expect(JSON.parse(cj.stdout)).toMatchObject({ id: 'cli-slow', state: 'cancelled' });
      const done = await cli(['cancel', ...server(), 'cli-1']);
      expect(done.code).toBe(2);
      expect(done.stderr).toContain('error: 409 Job already finished: job cli-1 has already ended (done)');
      expect(done.stdout).toBe('');
      // With --json the refusal's problem body is on stdout too (a script reading it had nothing).
      const doneJson = await cli(['cancel', ...server(), '--json', 'cli-1']);
      expect(doneJson.code).toBe(2);
      expect(JSON.parse(doneJson.stdout)).toMatchObject({ status: 409, title: 'Job already finished', detail: 'job cli-1 has already ended (done); there is nothing to cancel' });
      expect(doneJson.stderr).toContain('error: 409 Job already finished');
      await idle(url);
    });

    it('client errors: bad input exits 2 with the problem detail; a local usage error exits 2', async () => {
      const r = await cli(['submit', ...server(), '-k', 'sleep', '-n', '1', '--input', '{"prepareMs":-1}']);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe('error: 400 Invalid job: input.prepareMs: prepareMs must be ≥ 0\n');
      const kind = await cli(['submit', ...server(), '-k', 'nope', '-n', '1']);
      expect(kind.code).toBe(2);
      expect(kind.stderr).toContain('unknown kind "nope": use one of ntt-proof, sleep');
      const json = await cli(['submit', ...server(), '-k', 'sleep', '-n', '1', '--input', '{oops']);
      expect(json.code).toBe(2);
      expect(json.stderr).toMatch(/^error: --input must be JSON/);
      // No -n for a kind that does not derive its partitions: the server says so.
      const missing = await cli(['submit', ...server(), '-k', 'sleep']);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain('partitions: partitions must be a whole number from 1 to');
      expect(missing.stderr).toContain('kind sleep does not derive it from its input');
    });

    it('a --server that is not a URL, a bad --input-file, a server that is not stoker and a 429: each named, each with its exit code', async () => {
      const bad = await cli(['status', '--server', 'notaurl']);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toBe('error: --server must be the server\'s http:// or https:// URL, e.g. http://127.0.0.1:8080 (got "notaurl"; or set STOKER_SERVER)\n');
      const scheme = await cli(['status', '--server', 'localhost:7070']);
      expect(scheme.code).toBe(2);
      expect(scheme.stderr).toContain('(got "localhost:7070"; or set STOKER_SERVER)');
      const file = path.join(os.tmpdir(), `stoker-input-${process.pid}.toml`);
      fs.writeFileSync(file, 'prepareMs = 1\n');
      try {
        const toml = await cli(['submit', ...server(), '-k', 'sleep', '-n', '1', '--input-file', file]);
        expect(toml.code).toBe(2);
        expect(toml.stderr).toMatch(new RegExp(`^error: --input-file ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} must be JSON`));
        // A file with a byte order mark and CRLF (a Windows editor's) is JSON all the same.
        fs.writeFileSync(file, '\uFEFF{"prepareMs": 1, "deviceMs": 1}\r\n');
        const bom = await cli(['submit', ...server(), '-k', 'sleep', '-n', '1', '--input-file', file, '--json']);
        expect(bom.code, bom.stderr).toBe(0);
        expect(JSON.parse(bom.stdout)).toMatchObject({ input: { prepareMs: 1, deviceMs: 1 } });
      } finally {
        fs.rmSync(file, { force: true });
      }
      // Something else on the port: an HTML page (its first line, not the page), or 429 Too Many Requests (later: exit 1).
      const fake = createServer((req, res) => {
        if (req.url?.includes('busy')) return res.writeHead(429, { 'content-type': 'application/problem+json', 'retry-after': '7' }).end(JSON.stringify({ title: 'Too many pending jobs', detail: '10000 jobs are pending' }));
        // (A service of another kind that answers 200 with JSON to anything, on /ok/….)
        if (req.url?.startsWith('/ok/')) return res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"service":"resize"}');
        res.writeHead(404, { 'content-type': 'text/html' }).end(`<!DOCTYPE html>\n<html><head><title>Not here</title></head><body>${'<p>filler</p>'.repeat(500)}</body></html>`);
      });
      await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
      const base = `http://127.0.0.1:${(fake.address() as net.AddressInfo).port}`;
      try {
        const html = await cli(['status', '--server', base]);
        expect(html.code).toBe(2);
        expect(html.stderr).toMatch(/^error: 404 Not Found: Not here \(not a stoker answer: is http:\/\/127\.0\.0\.1:\d+ a stoker server\?\)\n$/);
        // 200 with JSON that is no stoker answer: said so (it read `devices` of nothing before, or
        // printed the foreign JSON as the job and exited 0), for every command that reads an answer.
        for (const args of [['status'], ['status', 'job-1'], ['wait', 'job-1'], ['cancel', 'job-1'], ['submit', '-k', 'sleep']]) {
          const ok = await cli([...args, '--server', `${base}/ok/`]);
          expect(ok.code, args.join(' ')).toBe(2);
          expect(ok.stderr, args.join(' ')).toMatch(/^error: (GET|POST|DELETE) \/ok\/v1\/\S+ answered 200: \{"ok":true,"service":"resize"\} \(not a stoker answer: is http:\/\/127\.0\.0\.1:\d+\/ok\/ a stoker server\?\)\n$/);
        }
        const busy = await cli(['status', '--server', base, 'busy']);
        expect(busy.code).toBe(1);
        expect(busy.stderr).toBe('error: 429 Too many pending jobs: 10000 jobs are pending (retry after 7 s)\n');
      } finally {
        await new Promise((r) => fake.close(r));
      }
    });

    it("wait long-polls for the time left, in ms, capped at 60 s: no busy loop in the last second", async () => {
      // A stand-in server that records each wait and holds the request that long (or answers done).
      const waits: string[] = [];
      let done = false;
      const fake = createServer((req, res) => {
        const wait = new URL(req.url ?? '/', 'http://x').searchParams.get('wait') ?? '';
        waits.push(wait);
        const reply = (code: number, state: string) => res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'j', state, result: null, error: null, finishedAt: null }));
        if (done) return reply(200, 'done');
        setTimeout(() => reply(202, 'running'), Number(/^(\d+)ms$/.exec(wait)?.[1] ?? 0));
      });
      await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
      const base = `http://127.0.0.1:${(fake.address() as net.AddressInfo).port}`;
      try {
        const t = await cli(['wait', '--server', base, 'j', '--timeout', '300ms']);
        expect(t.code).toBe(3);
        expect(waits.length).toBeGreaterThanOrEqual(1);
        expect(waits.length).toBeLessThanOrEqual(3);
        for (const w of waits) expect(w).toMatch(/^\d+ms$/);
        expect(Number.parseInt(waits[0] as string, 10)).toBeGreaterThan(200);
        expect(Number.parseInt(waits[0] as string, 10)).toBeLessThanOrEqual(300);
        waits.length = 0;
        done = true;
        const d = await cli(['wait', '--server', base, 'j', '--timeout', '5m']);
        expect(d.code).toBe(0);
        expect(waits).toEqual(['60000ms']);
      } finally {
        await new Promise((r) => fake.close(r));
      }
    });

    it('exits 1 with "cannot reach the server" when nothing listens', async () => {
      const port = await freePort();
      for (const args of [['status'], ['submit', '-k', 'sleep', '-n', '1'], ['wait', 'x'], ['cancel', 'x']]) {
        const r = await cli([...args, '--server', `http://127.0.0.1:${port}`]);
        expect(r.code).toBe(1);
        expect(r.stderr).toContain(`error: cannot reach the server at http://127.0.0.1:${port} (ECONNREFUSED)`);
      }
      // A port fetch() refuses to connect to (the Fetch standard's blocked ports) said only "fetch failed".
      const blocked = await cli(['status', '--server', 'http://127.0.0.1:6000']);
      expect(blocked.code).toBe(2);
      expect(blocked.stderr).toContain("Node's fetch refuses that port");
    });
  });
});

// ─── Admission and body limits ────────────────────────────────────────────────────────────────

describe('stoker serve with maxPendingJobs 2 and bodyLimitBytes 2048', () => {
  let s: ServerProcess;

  beforeAll(async () => {
    s = await serve({ STOKER_SERVER_MAX_PENDING_JOBS: '2', STOKER_SERVER_BODY_LIMIT_BYTES: '2048', STOKER_SERVER_MAX_WAIT_S: '1' });
  }, 30_000);

  afterAll(async () => {
    await stopServer(s);
    expect(s.child.exitCode).toBe(0);
  }, 30_000);

  it('cuts a long-poll longer than server.maxWaitS (1 s) to it (an hour too), and `stoker wait` keeps polling', async () => {
    expect((await submit(s.url, sleepJob('wait-cut', 1, { prepareMs: 2500 }))).status).toBe(202);
    const t0 = performance.now();
    const r = await result(s.url, 'wait-cut', '1h');
    const took = performance.now() - t0;
    expect(r.status).toBe(202);
    expect(r.body.state).toBe('running');
    expect(took).toBeGreaterThanOrEqual(900);
    expect(took).toBeLessThan(2400);
    const waited = await cli(['wait', 'wait-cut', '--server', s.url, '--timeout', '30s']);
    expect(waited.code).toBe(0);
    expect(JSON.parse(waited.stdout)).toMatchObject({ id: 'wait-cut', state: 'done' });
  });

  it('answers 429 with Retry-After beyond the pending jobs; an idempotent resubmit still gets 200', async () => {
    const slow = (id: string) => sleepJob(id, 1, { prepareMs: 5000 });
    expect((await submit(s.url, slow('adm-1'))).status).toBe(202);
    expect((await submit(s.url, slow('adm-2'))).status).toBe(202);
    const full = await submit(s.url, slow('adm-3'));
    expectProblem(full, 429, 'too-many-jobs');
    expect(full.headers.get('retry-after')).toBe('5');
    expect(full.body.detail).toContain('2 jobs are pending (server.maxPendingJobs)');
    expectProblem(await submit(s.url, sleepJob(undefined, 1)), 429, 'too-many-jobs');
    expectProblem(await getJob(s.url, 'adm-3'), 404, 'job-not-found');

    const again = await submit(s.url, slow('adm-1'));
    expect(again.status).toBe(200);
    expect(again.body.id).toBe('adm-1');
    // A different body under a taken id is still a conflict, not 429.
    expectProblem(await submit(s.url, sleepJob('adm-1', 2)), 409, 'job-conflict');
    expect((await status(s.url)).jobs).toMatchObject({ pending: 2, maxPending: 2 });

    // A cancel frees a place.
    expect((await http(s.url, 'DELETE', '/v1/jobs/adm-1')).status).toBe(200);
    expect((await submit(s.url, slow('adm-3'))).status).toBe(202);
    for (const id of ['adm-2', 'adm-3']) expect((await http(s.url, 'DELETE', `/v1/jobs/${id}`)).status).toBe(200);
    await idle(s.url);
    expect((await status(s.url)).jobs).toMatchObject({ pending: 0, cancelled: 3 });
  });

  it('answers a body over the limit with 413 and accepts one under it', async () => {
    const big = { ...sleepJob('big-1', 1), id: 'b'.repeat(190), input: { prepareMs: 10 }, pad: 'x'.repeat(4096) };
    const body = JSON.stringify(big);
    expect(body.length).toBeGreaterThan(4096);
    const r = await http(s.url, 'POST', '/v1/jobs', body);
    expectProblem(r, 413, 'body-too-large');
    expect(r.body.detail).toContain('over 2048 bytes (server.bodyLimitBytes)');
    // Megabytes over, streamed: the rest of the body is read and dropped before the answer, so a
    // client still sending reads the 413 (the connection closed under it: fetch failed with EPIPE, no status).
    const chunk = new TextEncoder().encode('x'.repeat(1 << 20));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent++ < 16) c.enqueue(chunk);
        else c.close();
      },
    });
    const streamed = await fetch(new URL('/v1/jobs', s.url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: stream, duplex: 'half' } as RequestInit);
    expect(streamed.status).toBe(413);
    expect(((await streamed.json()) as { type: string }).type).toContain('body-too-large');
    // Just under the limit (padded with whitespace): accepted.
    const fits = { id: `k${'a'.repeat(199)}`, kind: 'sleep', partitions: 1, input: { prepareMs: 10, seed: 1 } };
    const padded = JSON.stringify(fits).replace('{', `{${' '.repeat(1700)}`);
    expect(Buffer.byteLength(padded)).toBeGreaterThan(1900);
    expect(Buffer.byteLength(padded)).toBeLessThanOrEqual(2048);
    const ok = await http(s.url, 'POST', '/v1/jobs', padded);
    expect(ok.status).toBe(202);
    expect((await result(s.url, fits.id)).body).toMatchObject({ state: 'done', result: { total: sleepTotal(1, 1) } });
  });
});

// ─── Metrics from a fresh start ───────────────────────────────────────────────────────────────

describe('GET /metrics (fresh server)', () => {
  let s: ServerProcess;

  beforeAll(async () => {
    s = await serve();
  }, 30_000);

  afterAll(async () => {
    await stopServer(s);
  }, 30_000);

  it('exposes job, stage and worker metrics that match the partitions run', async () => {
    const res = await http(s.url, 'GET', '/metrics');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const t0 = res.body as string;
    // Every labelled series exists from the start, at 0 (increase() then sees the first job).
    expect(metric(t0, 'stoker_jobs{kind="sleep",state="done"}')).toBe(0);
    expect(metric(t0, 'stoker_jobs_ended_total{kind="sleep",state="failed"}')).toBe(0);
    // (Absent until the first failure, increase() missed that one: a user trial.)
    expect(t0).toContain('stoker_jobs_failed_total{kind="sleep",code="E_DEVICE_FAILED"} 0');
    expect(t0).toContain('stoker_jobs_failed_total{kind="sleep",code="E_DEADLINE"} 0');
    expect(metric(t0, 'stoker_waiting_target_partitions')).toBe(4);
    expect(metric(t0, 'stoker_waiting_partitions')).toBe(0);
    expect(metric(t0, 'stoker_pacer_capacity_partitions_per_second')).toBe(0);
    expect(metric(t0, 'stoker_device_worker_busy{device="default",worker="0"}')).toBe(0);
    expect(metric(t0, 'stoker_device_worker_busy{device="default",worker="1"}')).toBe(0);
    expect(metric(t0, 'stoker_prepare_seconds_count{kind="sleep"}')).toBe(0);
    expect(metric(t0, 'stoker_device_seconds_count{kind="sleep"}')).toBe(0);
    expect(t0).toContain('# TYPE stoker_job_seconds histogram');
    // Every series has the priority label (zeroed without it, a kind's stood at 0 beside the real ones).
    expect(metric(t0, 'stoker_job_seconds_count{kind="sleep",state="done",priority="normal"}')).toBe(0);
    // Every class's, at 0 (only normal's were: increase() missed the first critical job after a start).
    for (const priority of ['critical', 'high', 'low']) expect(metric(t0, `stoker_job_seconds_count{kind="sleep",state="failed",priority="${priority}"}`), priority).toBe(0);
    expect(t0).not.toMatch(/stoker_job_seconds_\w+\{[^}]*state="\w+"\}/);

    const jobs: [string, number, number][] = [
      ['m-1', 2, 1],
      ['m-2', 2, 2],
      ['m-3', 2, 3],
      ['m-4', 3, 4],
    ];
    for (const [id, n, seed] of jobs) expect((await submit(s.url, sleepJob(id, n, { seed, prepareMs: 15 }))).status).toBe(202);
    for (const [id, n, seed] of jobs) expect((await result(s.url, id)).body).toMatchObject({ state: 'done', result: { partitions: n, total: sleepTotal(seed, n) } });
    await submit(s.url, sleepJob('m-cancel', 2, { prepareMs: 5000 }));
    await http(s.url, 'DELETE', '/v1/jobs/m-cancel');
    // A missed deadline, and a critical job: by code and by priority class (both were one series).
    expect((await submit(s.url, { ...sleepJob('m-late', 1, { prepareMs: 5000 }), deadline: Date.now() + 300 })).status).toBe(202);
    expect((await result(s.url, 'm-late')).body).toMatchObject({ state: 'failed', error: { code: 'E_DEADLINE' } });
    expect((await submit(s.url, { ...sleepJob('m-urgent', 1, { prepareMs: 15 }), priority: 'critical' })).status).toBe(202);
    expect((await result(s.url, 'm-urgent')).body.state).toBe('done');
    await idle(s.url);

    const t1 = await until('a measured capacity', async () => {
      const t = await metrics(s.url);
      return (metric(t, 'stoker_pacer_capacity_partitions_per_second') ?? 0) > 0 ? t : undefined;
    });
    expect(metric(t1, 'stoker_jobs{kind="sleep",state="done"}')).toBe(5);
    expect(metric(t1, 'stoker_jobs{kind="sleep",state="cancelled"}')).toBe(1);
    expect(metric(t1, 'stoker_jobs_ended_total{kind="sleep",state="done"}')).toBe(5);
    expect(metric(t1, 'stoker_job_seconds_count{kind="sleep",state="done",priority="normal"}')).toBe(4);
    expect(metric(t1, 'stoker_job_seconds_count{kind="sleep",state="done",priority="critical"}')).toBe(1);
    expect(metric(t1, 'stoker_job_seconds_count{kind="sleep",state="cancelled",priority="normal"}')).toBe(1);
    expect(metric(t1, 'stoker_job_seconds_bucket{le="+Inf",kind="sleep",state="done",priority="normal"}')).toBe(4);
    expect(metric(t1, 'stoker_job_seconds_sum{kind="sleep",state="done",priority="normal"}')).toBeGreaterThan(4 * 0.015);
    expect(metric(t1, 'stoker_jobs_failed_total{kind="sleep",code="E_DEADLINE"}')).toBe(1);
    expect(metric(t1, 'stoker_journal_bytes{state="used"}')).toBeGreaterThan(4096);
    expect(metric(t1, 'stoker_journal_bytes{state="free"}')).toBeGreaterThanOrEqual(0);
    // 10 partitions ran to the end; m-cancel's and m-late's preparations were aborted, never measured.
    expect(metric(t1, 'stoker_prepare_seconds_count{kind="sleep"}')).toBe(10);
    expect(metric(t1, 'stoker_device_seconds_count{kind="sleep"}')).toBe(10);
    expect(metric(t1, 'stoker_prepare_seconds_sum{kind="sleep"}')).toBeGreaterThanOrEqual(10 * 0.014);
    expect(metric(t1, 'stoker_device_seconds_sum{kind="sleep"}')).toBeGreaterThan(0);
    expect(metric(t1, 'stoker_waiting_partitions')).toBe(0);
    expect(metric(t1, 'stoker_waiting_target_partitions')).toBe(4);
    expect(metric(t1, 'stoker_device_worker_busy{device="default",worker="0"}')).toBe(0);
    expect(metric(t1, 'stoker_device_worker_busy{device="default",worker="1"}')).toBe(0);
    expect(metric(t1, 'stoker_device_busy_seconds_total{device="default"}')).toBeGreaterThan(0);
    expect(metric(t1, 'stoker_dispatched_partitions_total')).toBeGreaterThanOrEqual(10);
    expect(metric(t1, 'stoker_budget_used_bytes')).toBe(0);
    expect(t1).toContain('stoker_budget_bytes +Inf');
    const st = await status(s.url);
    expect(st.devices[0]?.completions).toBe(10);
    expect(metric(t1, 'stoker_pacer_capacity_partitions_per_second')).toBeGreaterThan(0);
    // One kind: its own capacity estimate is the pacer's.
    expect(metric(t1, 'stoker_kind_estimated_capacity_per_second{kind="sleep"}')).toBe(metric(t1, 'stoker_pacer_capacity_partitions_per_second'));
  });
});

describe('a kind of 1 MiB partitions under a 1.5 MiB budget, its input any JSON', () => {
  let s: ServerProcess;

  beforeAll(async () => {
    const dataDir = tempDataDir();
    dirs.push(dataDir);
    const kind = path.join(dataDir, 'mib-kind.mjs');
    fs.writeFileSync(kind, "export const name = 'mib';\nexport const memory = () => ({ prepareBytes: 1048576, deviceBytes: 1048576 });\nexport const prepare = () => new Promise((r) => setTimeout(() => r(1), 100));\nexport const run = (x) => x;\n");
    s = await startServer(dataDir, ['--kind', kind], { STOKER_ENGINE_BUDGET_BYTES: String(1.5 * 1048576) });
    started.push(s);
  }, 30_000);

  afterAll(async () => {
    await stopServer(s);
  }, 30_000);

  it('stoker_budget_blocked while the head of the queue waits for memory, and its seconds in all', async () => {
    // One partition at a time: the other three wait for memory through at least three 100 ms preparations.
    const t0 = await metrics(s.url);
    expect(metric(t0, 'stoker_budget_blocked')).toBe(0);
    expect(metric(t0, 'stoker_budget_blocked_seconds_total')).toBe(0);
    const from = performance.now();
    expect((await submit(s.url, { id: 'b-1', kind: 'mib', partitions: 4 })).status).toBe(202);
    await until('the head of the queue blocked', async () => metric(await metrics(s.url), 'stoker_budget_blocked') === 1);
    expect((await result(s.url, 'b-1')).body).toMatchObject({ state: 'done' });
    const elapsedS = (performance.now() - from) / 1000;
    const t1 = await metrics(s.url);
    expect(metric(t1, 'stoker_budget_blocked')).toBe(0);
    const blockedS = metric(t1, 'stoker_budget_blocked_seconds_total') as number;
    expect(blockedS).toBeGreaterThanOrEqual(0.25);
    expect(blockedS).toBeLessThanOrEqual(elapsedS);
  });

  it('an input over 64 KiB is left out of the submit answer and of lists, by its size; the job view gives it whole', async () => {
    const input = { blob: 'x'.repeat(100_000) };
    const bytes = Buffer.byteLength(JSON.stringify(input));
    const sub = await submit(s.url, { id: 'in-1', kind: 'mib', partitions: 1, input });
    expect(sub.status).toBe(202);
    expect(sub.body).toMatchObject({ id: 'in-1', input: null, inputOmittedBytes: bytes });
    // A retry answers the same way.
    expect((await submit(s.url, { id: 'in-1', kind: 'mib', partitions: 1, input })).body).toMatchObject({ input: null, inputOmittedBytes: bytes });
    expect((await submit(s.url, { id: 'in-2', kind: 'mib', partitions: 1, input: { small: 1 } })).body).toMatchObject({ input: { small: 1 } });
    const list = (await http(s.url, 'GET', '/v1/jobs?limit=10')).body as { id: string; input: unknown; inputOmittedBytes?: number }[];
    expect(list.find((j) => j.id === 'in-1')).toMatchObject({ input: null, inputOmittedBytes: bytes });
    expect(list.find((j) => j.id === 'in-2')).toMatchObject({ input: { small: 1 } });
    expect(list.find((j) => j.id === 'in-2')?.inputOmittedBytes).toBeUndefined();
    const view = (await http(s.url, 'GET', '/v1/jobs/in-1')).body;
    expect(view.input).toEqual(input);
    expect(view.inputOmittedBytes).toBeUndefined();
  });
});

// ─── config print and serve --help ────────────────────────────────────────────────────────────

describe('stoker config print / serve --help', () => {
  it('prints the effective config as TOML: flags and environment applied', async () => {
    const r = await cli(['config', 'print', '--port', '9999'], { STOKER_ENGINE_TARGET_WAITING: '7' });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^port = 9999$/m);
    expect(r.stdout).toMatch(/^targetWaiting = 7$/m);
    const doc = parseToml(r.stdout) as { server: { port: number; host: string }; engine: { targetWaiting: number; pacer: string } };
    expect(doc.server).toMatchObject({ port: 9999, host: '127.0.0.1' });
    expect(doc.engine).toMatchObject({ targetWaiting: 7, pacer: 'stoker' });
    // serve's --cluster too (it was refused: the effective config of a cluster node could not be shown).
    const c = await cli(['config', 'print', '--cluster', 'redis://127.0.0.1:6390']);
    expect(c.code).toBe(0);
    expect((parseToml(c.stdout) as { cluster: { redis: string } }).cluster.redis).toBe('redis://127.0.0.1:6390');
  });

  it('exits 2 naming a bad environment variable', async () => {
    const r = await cli(['config', 'print'], { STOKER_SERVER_PORT: 'abc' });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^error: STOKER_SERVER_PORT: server\.port: expected an integer from 0 to 65535, got "abc"/);
    const typo = await cli(['config', 'print'], { STOKER_ENGINE_TARGET_WAITNG: '3' });
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('did you mean STOKER_ENGINE_TARGET_WAITING?');
    // serve checks the same before it listens.
    const dir = tempDataDir();
    dirs.push(dir);
    const serveBad = await cli(['serve', '--port', '0', '--data', dir], { STOKER_ENGINE_PACER: 'stokr' });
    expect(serveBad.code).toBe(2);
    expect(serveBad.stdout).not.toContain('listening');
    expect(serveBad.stderr).toContain('STOKER_ENGINE_PACER: engine.pacer');
    expect(serveBad.stderr).toContain('did you mean "stoker"?');
  });

  it('serve --help lists every config field with its variable', async () => {
    const r = await cli(['serve', '--help']);
    expect(r.code).toBe(0);
    for (const [field, env] of [
      ['dataDir', 'STOKER_DATA_DIR'],
      ['server.host', 'STOKER_SERVER_HOST'],
      ['server.port', 'STOKER_SERVER_PORT'],
      ['server.bodyLimitBytes', 'STOKER_SERVER_BODY_LIMIT_BYTES'],
      ['server.maxPendingJobs', 'STOKER_SERVER_MAX_PENDING_JOBS'],
      ['server.retryAfterS', 'STOKER_SERVER_RETRY_AFTER_S'],
      ['server.resultTtlS', 'STOKER_SERVER_RESULT_TTL_S'],
      ['server.shutdownTimeoutS', 'STOKER_SERVER_SHUTDOWN_TIMEOUT_S'],
      ['server.maxWaitS', 'STOKER_SERVER_MAX_WAIT_S'],
      ['engine.pacer', 'STOKER_ENGINE_PACER'],
      ['engine.targetWaiting', 'STOKER_ENGINE_TARGET_WAITING'],
      ['engine.budgetBytes', 'STOKER_ENGINE_BUDGET_BYTES'],
      ['engine.retries', 'STOKER_ENGINE_RETRIES'],
      ['engine.deviceTimeoutS', 'STOKER_ENGINE_DEVICE_TIMEOUT_S'],
      ['engine.pacerOptions', 'STOKER_ENGINE_PACER_OPTIONS'],
      ['device.kind', 'STOKER_DEVICE_KIND'],
      ['device.workers', 'STOKER_DEVICE_WORKERS'],
      ['prepare.threads', 'STOKER_PREPARE_THREADS'],
      ['prepare.concurrency', 'STOKER_PREPARE_CONCURRENCY'],
    ] as const) {
      expect(r.stdout).toMatch(new RegExp(`^ {2}${field.replace('.', '\\.')} +\\S.* +${env} +\\S`, 'm'));
    }
    for (const flag of ['--config <file>', '--host <host>', '--port <n>', '--data <dir>']) expect(r.stdout).toContain(flag);
  });
});

// ─── Graceful shutdown and resume ─────────────────────────────────────────────────────────────

describe('graceful shutdown', () => {
  it('past server.shutdownTimeoutS says how many partitions it withdrew (it read "stopped", as a drain that finished)', async () => {
    const dir = tempDataDir();
    dirs.push(dir);
    const a = await serve({ STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '1' }, dir);
    expect((await submit(a.url, sleepJob('cut-1', 2, { prepareMs: 20, deviceMs: 20_000 }))).status).toBe(202);
    await until('on a device', async () => (((await getJob(a.url, 'cut-1')).body.partitionCounts?.['on-device'] ?? 0) > 0 ? true : undefined));
    a.child.kill('SIGTERM');
    expect(await within(a.exited, 15_000, 'exit after SIGTERM')).toBe(0);
    expect(a.output()).toMatch(/stoker serve: stopped; [12] partitions? still in flight when server\.shutdownTimeoutS \(1 s\) ran out (was|were) withdrawn; unfinished jobs resume on the next start/);
  }, 30_000);

  it('on SIGTERM finishes the partitions in flight, exits 0, and the restarted server resumes the rest', async () => {
    const dir = tempDataDir();
    dirs.push(dir);
    // Two preparations at a time (one thread × concurrency 2), so part of the job is still queued
    // after its first partitions finished.
    const env = { STOKER_PREPARE_CONCURRENCY: '2' };
    const a = await serve(env, dir);
    const seed = 9;
    expect((await submit(a.url, sleepJob('sd-1', 6, { seed, prepareMs: 1500, deviceMs: 10 }))).status).toBe(202);
    const before = await until('some partitions done while others are queued', async () => {
      const j = (await getJob(a.url, 'sd-1')).body;
      return j.partitionsDone > 0 ? j : undefined;
    });
    expect(before.state).toBe('running');
    const doneBefore = before.partitionsDone as number;
    expect((before.partitionStates as string[]).filter((st) => st === 'queued').length).toBeGreaterThan(0);
    const waiter = result(a.url, 'sd-1', '60s');

    a.child.kill('SIGTERM');
    // While it drains: closing, and no new jobs.
    await until('closing', async () => (await status(a.url)).closing);
    const refused = await submit(a.url, sleepJob('sd-late', 1));
    expectProblem(refused, 503, 'shutting-down');
    expect(refused.headers.get('retry-after')).toBe('5');
    const code = await within(a.exited, 15_000, 'exit after SIGTERM');
    expect(code).toBe(0);
    expect(a.output()).toMatch(/SIGTERM: finishing [1-9]\d* partitions in flight \(up to 30 s\), then stopping/);
    expect(a.output()).toContain('stopped; unfinished jobs resume on the next start');
    // Its data dir was empty: the start said it made a journal (a mistyped --data started afresh without a word).
    expect(a.output()).toContain(`data ${dir}, a new journal; 0 unfinished jobs resumed`);
    // The waiter was answered with the state at the stop.
    const w = await waiter;
    expect(w.status).toBe(202);
    expect(w.body).toMatchObject({ id: 'sd-1', state: 'running', result: null });

    // The journal holds the job unfinished, with the outputs of every partition that finished.
    let doneAtStop: number;
    const journal = Journal.open(dir);
    try {
      const j = journal.get('sd-1');
      expect(j?.state).toBe('running');
      doneAtStop = j?.partitionsDone ?? -1;
      expect(doneAtStop).toBeGreaterThanOrEqual(doneBefore);
      expect(doneAtStop).toBeLessThan(6);
      const outputs = journal.partitionOutputs('sd-1');
      expect(outputs.size).toBe(doneAtStop);
      for (const [p, o] of outputs) expect(o).toBe(2 * (seed * 31 + p));
      expect(journal.get('sd-late')).toBeUndefined();
    } finally {
      journal.close();
    }

    const b = await serve(env, dir);
    expect(b.output()).toContain(`data ${dir}; 1 unfinished job resumed`);
    const resumed = (await getJob(b.url, 'sd-1')).body;
    expect(resumed).toMatchObject({ id: 'sd-1', resumes: 1 });
    expect(resumed.partitionsDone).toBeGreaterThanOrEqual(doneAtStop);
    const r = await result(b.url, 'sd-1', '30s');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ state: 'done', error: null, result: { partitions: 6, total: sleepTotal(seed, 6) } });
    expect((await getJob(b.url, 'sd-1')).body).toMatchObject({ state: 'done', partitionsDone: 6, resumes: 1 });
    // Only the partitions unfinished at the stop ran again.
    const text = await metrics(b.url);
    expect(metric(text, 'stoker_dispatched_partitions_total')).toBe(6 - doneAtStop);
    expect(metric(text, 'stoker_prepare_seconds_count{kind="sleep"}')).toBe(6 - doneAtStop);
    expect(metric(text, 'stoker_device_seconds_count{kind="sleep"}')).toBe(6 - doneAtStop);
    expect(metric(text, 'stoker_jobs{kind="sleep",state="done"}')).toBe(1);

    expect(await within(b.stop(), 15_000, 'second stop')).toBe(0);
  }, 45_000);

  it('SIGHUP (a closed terminal) drains as SIGTERM does, exit 0 (it ended the server at once, mid-drain, without a word: exit 129)', async () => {
    const dir = tempDataDir();
    dirs.push(dir);
    const a = await serve({}, dir);
    expect((await submit(a.url, sleepJob('hup-1', 1, { seed: 1, prepareMs: 1, deviceMs: 1500 }))).status).toBe(202);
    await until('hup-1 on a device', async () => ((await getJob(a.url, 'hup-1')).body.partitionCounts?.['on-device'] === 1 ? true : undefined));
    a.child.kill('SIGHUP');
    expect(await within(a.exited, 15_000, 'exit after SIGHUP')).toBe(0);
    expect(a.output()).toContain('stoker serve: SIGHUP: finishing 1 partition in flight');
    const j = Journal.open(dir);
    try {
      expect(j.get('hup-1')?.state).toBe('done');
    } finally {
      j.close();
    }
  }, 30_000);

  it('a terminal that closes under it (SIGHUP, then no terminal to write to) lets the drain finish: the job done and journaled (its first line after the hangup threw EIO, and it died mid-drain)', async () => {
    const dir = tempDataDir();
    dirs.push(dir);
    const err = path.join(dir, 'stderr.txt');
    const hangUp = async (stderr: string, dir: string) => {
      const port = await freePort();
      const run = await new Promise<string>((resolve) => execFile('python3', [path.resolve(import.meta.dirname, '../fixtures/pty-hangup.py'), process.execPath, CLI, dir, String(port), stderr], { timeout: 30_000 }, (_e, stdout) => resolve(stdout)));
      expect(run.split('\n')[0], run).toBe('202');
      const j = Journal.open(dir);
      try {
        return j.get('hup-pty')?.state;
      } finally {
        j.close();
      }
    };
    // Its stderr on the terminal too: what it says after the hangup goes nowhere, and the drain goes on.
    expect(await hangUp('-', dir)).toBe('done');
    // Its stderr in a file: the drain says what it does.
    const again = tempDataDir();
    dirs.push(again);
    expect(await hangUp(err, again)).toBe('done');
    const said = fs.readFileSync(err, 'utf8');
    expect(said).toContain('stoker serve: SIGHUP: finishing 1 partition in flight');
    expect(said).toContain('stoker serve: stopped;');
  }, 40_000);

  it('a second SIGTERM while it drains stops it at once, saying so (it died without a word), exit 143; the job resumes on the next start', async () => {
    const dir = tempDataDir();
    dirs.push(dir);
    const a = await serve({}, dir);
    expect((await submit(a.url, sleepJob('sd-2', 1, { seed: 1, prepareMs: 1, deviceMs: 20_000 }))).status).toBe(202);
    await until('sd-2 on a device', async () => ((await getJob(a.url, 'sd-2')).body.partitionCounts?.['on-device'] === 1 ? true : undefined));
    expect((await http(a.url, 'GET', '/readyz')).body).toEqual({ status: 'ready' });
    a.child.kill('SIGTERM');
    await until('closing', async () => (await status(a.url)).closing);
    // Draining: live, not ready (a load balancer sends new jobs elsewhere).
    expect((await http(a.url, 'GET', '/livez')).status).toBe(200);
    const ready = await http(a.url, 'GET', '/readyz');
    expect([ready.status, ready.body]).toEqual([503, { status: 'not ready', why: ['shutting down'] }]);
    a.child.kill('SIGTERM');
    expect(await within(a.exited, 10_000, 'exit after the second SIGTERM')).toBe(143);
    expect(a.output()).toContain('stoker serve: SIGTERM again: stopping now, without waiting for the partitions in flight (unfinished jobs resume on the next start)');
    const j = Journal.open(dir);
    try {
      expect(j.get('sd-2')?.state).toBe('running');
    } finally {
      j.close();
    }
  }, 30_000);
});

it('a port in use stops the start with a message naming server.port and how to pick another (it was Node’s bare listen EADDRINUSE)', async () => {
  const port = await freePort();
  const taken = net.createServer();
  await new Promise<void>((r) => taken.listen(port, '127.0.0.1', r));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-port-'));
  try {
    const r = await cli(['serve', '--port', String(port), '--data', dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`error: 127.0.0.1:${port} is in use (another server?): give another server.port (--port, STOKER_SERVER_PORT), or 0 for any free one`);
  } finally {
    await new Promise((r) => taken.close(r));
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * Events that can be resumed, and one job's progress. The event log numbers every event and keeps
 * a bounded buffer of job events; a real EventSource (the `eventsource` package) reconnecting with
 * Last-Event-ID gets what it missed, or a `gap` event after a server restart. GET /v1/jobs/:id/events
 * streams a job's partitions as they move; `stoker wait --progress` draws them.
 */
import { spawn } from 'node:child_process';
import { EventSource } from 'eventsource';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServerResponse } from 'node:http';
import { EventLog } from '../../src/server/event-log.js';
import { eventFrame, EventStreamOut, STREAM_BUFFER_MAX } from '../../src/server/sse.js';
import { CLI, freePort, http, removeDir, startServer, tempDataDir, useServer, waitUntil, type ServerProcess } from './helpers.js';

describe('EventStreamOut', () => {
  /** A response the test drives: what was written, what is unsent, and its drain. */
  function fakeResponse() {
    const handlers = new Map<string, (() => void)[]>();
    const res = {
      writableLength: 0,
      destroyed: false,
      writableEnded: false,
      sent: [] as string[],
      writeHead: () => res,
      write(text: string) {
        res.sent.push(text);
        res.writableLength += text.length;
        return res.writableLength < 16 * 1024;
      },
      on: (e: string, f: () => void) => void handlers.set(e, [...(handlers.get(e) ?? []), f]),
      once: (e: string, f: () => void) => void handlers.set(e, [...(handlers.get(e) ?? []), f]),
      off: (e: string, f: () => void) => void handlers.set(e, (handlers.get(e) ?? []).filter((g) => g !== f)),
      /** The client read everything. */
      drain() {
        res.writableLength = 0;
        for (const f of handlers.get('drain') ?? []) f();
      },
      destroy: () => void (res.destroyed = true),
      end: () => void (res.writableEnded = true),
    };
    return res;
  }

  it('ends the connection of a client that stops reading once more than STREAM_BUFFER_MAX is unsent', () => {
    const res = fakeResponse();
    const out = new EventStreamOut(res as unknown as ServerResponse, 'test');
    res.drain();
    const big = 'x'.repeat(STREAM_BUFFER_MAX);
    out.write(big);
    out.write('y');
    expect(res.destroyed).toBe(false);
    out.write('z');
    expect(res.destroyed).toBe(true);
    expect(res.sent.at(-1)).toBe('y');
  });

  it('writes a replay piece by piece as the client reads, then the live events that came meanwhile, in order', async () => {
    const res = fakeResponse();
    const out = new EventStreamOut(res as unknown as ServerResponse, 'test');
    res.drain();
    const frames = Array.from({ length: 3000 }, (_, i) => `id: ${i}\ndata: ${'e'.repeat(60)}\n\n`);
    const done = out.replay(frames);
    out.write('live 1');
    // Not all at once: a piece, then nothing more until the client reads.
    const first = res.sent.length;
    expect(res.writableLength).toBeLessThan(80 * 1024);
    await new Promise((r) => setTimeout(r, 5));
    expect(res.sent.length).toBe(first);
    for (let i = 0; i < 100 && res.sent.at(-1) !== 'live 1'; i++) {
      res.drain();
      await new Promise((r) => setTimeout(r, 0));
    }
    await done;
    expect(res.sent.slice(1).join('')).toBe(`${frames.join('')}live 1`);
  });

  it('makes an event into text once, with its id', () => {
    let serialised = 0;
    const e = { type: 'job.done', id: 'j', toJSON: () => (serialised++, { type: 'job.done', id: 'j' }) };
    expect(eventFrame(e, '1-2')).toBe(`id: 1-2\nevent: job.done\ndata: {"type":"job.done","id":"j"}\n\n`);
    eventFrame(e, '1-2');
    expect(serialised).toBe(1);
  });
});

describe('EventLog', () => {
  it('replays what a client missed, and says when it cannot', () => {
    const log = new EventLog<{ n: number }>(4);
    const ids = Array.from({ length: 12 }, (_, n) => log.add({ n }, n % 4 === 3).eventId);
    // Transient events (the periodic pacer ones) get ids but are not replayed.
    const r = log.since(ids[8] as string);
    expect('events' in r && r.events.map((e) => e.event.n)).toEqual([9, 10]);
    expect(log.since(ids[11] as string)).toEqual({ events: [] });
    // Kept events were dropped past the bound (4, trimmed at 5): older positions are a gap.
    const old = log.since(ids[0] as string);
    expect('gap' in old && old.gap.reason).toMatch(/^the replay buffer \(at least the last 4 job events\) no longer holds/);
    expect('gap' in old && old.now).toBe(ids[11]);
    const other = new EventLog<{ n: number }>();
    const restart = other.since(ids[5] as string);
    // (An id of another run and one of another server look alike: the reason says both, and this one's ids — it said "the server restarted" to a client of another server.)
    expect('gap' in restart && restart.gap.reason).toBe(`the Last-Event-ID is of another run of this server (it restarted since) or of another server (this one's ids are ${other.boot}-<seq>): events between the last one received and this connection are not known here; read job states with GET /v1/jobs`);
    expect('gap' in log.since('nonsense') && true).toBe(true);
    expect('gap' in log.since(`${log.boot}-99`) && true).toBe(true);
  });
});

// Event payloads are checked field by field.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Data = any;

/** Reads a whole SSE response of a stream that ends: each event's id, type and data. */
async function readEvents(url: string, headers: Record<string, string> = {}, stopAfter = Infinity): Promise<{ id?: string; event?: string; data: Data }[]> {
  const ac = new AbortController();
  const res = await fetch(url, { headers, signal: ac.signal });
  const out: { id?: string; event?: string; data: Data }[] = [];
  let buf = '';
  try {
    for await (const chunk of (res.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let i: number;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i).split('\n');
        buf = buf.slice(i + 2);
        const field = (f: string) => block.find((l) => l.startsWith(`${f}: `))?.slice(f.length + 2);
        const data = field('data');
        if (data === undefined) continue;
        out.push({ id: field('id'), event: field('event'), data: JSON.parse(data) });
        if (out.length >= stopAfter) {
          ac.abort();
          return out;
        }
      }
    }
  } catch (e) {
    if (!ac.signal.aborted) throw e;
  }
  return out;
}

describe('GET /v1/events across a restart (a real EventSource)', () => {
  let dir: string;
  let server: ServerProcess | undefined;
  beforeAll(() => {
    dir = tempDataDir();
  });
  afterAll(async () => {
    if (server && server.child.exitCode === null) await server.crash();
    removeDir(dir);
  });

  it('gives every event an id, replays missed events to Last-Event-ID, and sends a gap after a restart', async () => {
    const port = await freePort();
    server = await startServer(dir, ['--port', String(port)]);
    const base = server.url;
    const seen: { type: string; lastEventId: string; data: Data }[] = [];
    const es = new EventSource(`${base}/v1/events`);
    // Every type the server sends (the EventSource's last id is the last event's, listened to or not).
    for (const type of ['job.submitted', 'job.started', 'job.partition', 'job.done', 'job.failed', 'job.cancelled', 'step.failed', 'device.measurement', 'gap']) es.addEventListener(type, (m) => seen.push({ type, lastEventId: m.lastEventId, data: JSON.parse(m.data) }));
    try {
      await new Promise<void>((resolve, reject) => {
        es.onopen = () => resolve();
        es.onerror = () => reject(new Error('the event stream did not open'));
      });
      es.onerror = null;
      expect((await http(base, 'POST', '/v1/jobs', { id: 'ev-1', kind: 'sleep', partitions: 2, input: { prepareMs: 20 } })).status).toBe(202);
      await waitUntil(async () => seen.find((e) => e.type === 'job.done' && e.data.id === 'ev-1'), 20_000, 'ev-1 done');
      for (const e of seen) expect(e.lastEventId).toMatch(/^[0-9a-f]+-\d+$/);
      // A reconnect from job.submitted replays what followed it, in order.
      const submitted = seen.find((e) => e.type === 'job.submitted') as { lastEventId: string };
      const replay = await readEvents(`${base}/v1/events`, { 'last-event-id': submitted.lastEventId }, 2);
      expect(replay.map((e) => e.event)).toEqual(['job.started', 'job.partition']);
      expect(replay[0]?.id).toBe(seen.find((e) => e.type === 'job.started')?.lastEventId);
      // Its time is an ISO 8601 time (the README said ms).
      expect(seen[0]?.data.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      // ?lastEventId= twice: refused as the job list refuses a repeated limit (the first was read without a word).
      const twice = await http(base, 'GET', `/v1/events?lastEventId=${submitted.lastEventId}&lastEventId=x-0`);
      expect([twice.status, (twice.body as { detail: string }).detail]).toEqual([400, 'lastEventId must be given once, e.g. lastEventId=<the id of the last event received>']);

      // Restart on the same port: the EventSource reconnects by itself (retry: 2000) with its last id.
      expect(await server.stop()).toBe(0);
      server = await startServer(dir, ['--port', String(port)]);
      const gap = await waitUntil(async () => seen.find((e) => e.type === 'gap'), 20_000, 'a gap event after the restart', 50);
      expect(gap.data.reason).toMatch(/is of another run of this server \(it restarted since\)/);
      expect(gap.data.lastEventId).toBe(seen.filter((e) => e.type !== 'gap').at(-1)?.lastEventId);
      // And it goes on receiving the new server's events.
      expect((await http(server.url, 'POST', '/v1/jobs', { id: 'ev-2', kind: 'sleep', partitions: 1 })).status).toBe(202);
      await waitUntil(async () => seen.find((e) => e.type === 'job.done' && e.data.id === 'ev-2'), 20_000, 'ev-2 done on the new server');
    } finally {
      es.close();
    }
  }, 60_000);
});

describe('one job’s progress', () => {
  const fixture = useServer([], { STOKER_DEVICE_WORKERS: '1' });

  it('GET /v1/jobs/:id/events streams the partitions as they move, then the end', async () => {
    expect((await http(fixture.server.url, 'POST', '/v1/jobs', { id: 'pg-1', kind: 'sleep', partitions: 4, input: { prepareMs: 100, deviceMs: 250 } })).status).toBe(202);
    const events = await readEvents(`${fixture.server.url}/v1/jobs/pg-1/events`);
    const progress = events.filter((e) => e.event === 'progress').map((e) => e.data);
    expect(progress.length).toBeGreaterThanOrEqual(4);
    // The first event has every partition; each later one only those that moved, with the counts after.
    expect(progress[0].changes).toHaveLength(4);
    for (const p of progress) expect(Object.values(p.counts as Record<string, number>).reduce((a, b) => a + b, 0)).toBe(4);
    const stages = new Set(progress.flatMap((p) => (p.changes as { stage: string }[]).map((c) => c.stage)));
    for (const st of ['waiting', 'on-device', 'done']) expect(stages, st).toContain(st);
    const last = events.at(-1);
    expect(last?.event).toBe('end');
    expect(last?.data.job).toMatchObject({ id: 'pg-1', state: 'done', partitionsDone: 4 });
    // A finished job: its picture and its end at once.
    const again = await readEvents(`${fixture.server.url}/v1/jobs/pg-1/events`);
    expect(again.map((e) => e.event)).toEqual(['progress', 'end']);
    expect(again[0]?.data.counts.done).toBe(4);
    expectProblem404(await http(fixture.server.url, 'GET', '/v1/jobs/nope/events'));
  }, 30_000);

  it('a HEAD of an event stream answers its headers and ends (it never answered, and held a stream\'s place)', async () => {
    expect((await http(fixture.server.url, 'POST', '/v1/jobs', { id: 'pg-head', kind: 'sleep', partitions: 1, input: { prepareMs: 1, deviceMs: 1 } })).status).toBe(202);
    for (const path of ['/v1/events', '/v1/jobs/pg-head/events']) {
      const res = await fetch(`${fixture.server.url}${path}`, { method: 'HEAD', signal: AbortSignal.timeout(5000) });
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type'), path).toBe('text/event-stream');
    }
    expect((await fetch(`${fixture.server.url}/v1/jobs/nope/events`, { method: 'HEAD', signal: AbortSignal.timeout(5000) })).status).toBe(404);
  });

  it('stoker wait --progress prints a line per change off a terminal, then the result', async () => {
    expect((await http(fixture.server.url, 'POST', '/v1/jobs', { id: 'pg-2', kind: 'sleep', partitions: 3, input: { prepareMs: 1500, deviceMs: 200 } })).status).toBe(202);
    const child = spawn(process.execPath, [CLI, 'wait', 'pg-2', '--progress', '--server', fixture.server.url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    expect(code).toBe(0);
    const lines = err.trim().split('\n');
    expect(lines.length).toBeGreaterThanOrEqual(2);
    for (const l of lines) expect(l).toMatch(/^pg-2: \d\/3 done/);
    expect(lines.at(-1)).toMatch(/^pg-2: 3\/3 done/);
    // A partition once past the queue is not shown queued again (at the end, the journal's lagging
    // count showed the last one queued for a moment: 2/3 done · 1 queued).
    const firstUnqueued = lines.findIndex((l) => !l.includes('queued'));
    expect(lines.slice(Math.max(0, firstUnqueued)).filter((l) => l.includes('queued'))).toEqual([]);
    // The same shape as `stoker wait` prints without --progress (the result endpoint's).
    const plain = (await http(fixture.server.url, 'GET', '/v1/jobs/pg-2/result')).body;
    expect(JSON.parse(out)).toEqual(plain);
    expect(Object.keys(JSON.parse(out) as object).sort()).toEqual(['error', 'finishedAt', 'id', 'result', 'state']);
    // No such job: the server's own words, as without --progress.
    const missing = spawn(process.execPath, [CLI, 'wait', 'nosuch', '--progress', '--server', fixture.server.url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let missingErr = '';
    missing.stderr.on('data', (b: Buffer) => (missingErr += b.toString()));
    expect(await new Promise<number | null>((r) => missing.once('exit', r))).toBe(2);
    expect(missingErr).toMatch(/404 No such job: no job "nosuch": it was never submitted/);
  }, 30_000);
});

function expectProblem404(r: { status: number; body: Data }): void {
  expect(r.status).toBe(404);
  expect(r.body.type).toMatch(/not-found$/);
}

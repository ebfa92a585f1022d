/**
 * The Chrome trace export against the trace event format's schema: a simulated run through the
 * CLI, and a short real demo run on threads (imported from dist/: thread entry points exist only
 * as compiled JavaScript; `npm test` builds first).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterAll, describe, expect, it } from 'vitest';
import { TimelineRecorder } from '../../dist/core/index.js';
import { runDemo } from '../../dist/runtime/demo.js';
import { DEMO_DEFAULTS } from '../../dist/runtime/demo-options.js';
import { fromChromeTrace, toChromeTrace } from '../../dist/report/chrome-trace.js';
import { run, tempDir } from '../cli/helpers.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

interface Event {
  name: string;
  ph: string;
  pid: number;
  tid?: number;
  ts?: number;
  dur?: number;
  args?: Record<string, unknown>;
}

/** Checks the trace's schema; returns the X events by track name. */
function checkSchema(text: string): Map<string, Event[]> {
  const trace = JSON.parse(text) as { traceEvents: unknown };
  expect(Array.isArray(trace.traceEvents)).toBe(true);
  const events = trace.traceEvents as Event[];
  for (const e of events) {
    expect(typeof e.name).toBe('string');
    expect(['X', 'C', 'M', 'i']).toContain(e.ph);
    expect(Number.isInteger(e.pid)).toBe(true);
  }
  // One instant event per job submitted, with what a plan fits arrivals from.
  const submits = events.filter((x) => x.ph === 'i');
  expect(submits.length).toBeGreaterThan(0);
  for (const e of submits) {
    expect(Number.isInteger(e.ts) && (e.ts as number) >= 0).toBe(true);
    expect(e.args).toMatchObject({ id: expect.any(String), kind: expect.any(String), partitions: expect.any(Number), priority: expect.any(String), prepareBytes: expect.any(Number), deviceBytes: expect.any(Number) });
  }
  const threadNames = new Map<string, string>();
  for (const e of events.filter((x) => x.ph === 'M' && x.name === 'thread_name')) {
    expect(Number.isInteger(e.tid)).toBe(true);
    expect(typeof e.args?.['name']).toBe('string');
    threadNames.set(`${e.pid}/${e.tid}`, e.args?.['name'] as string);
  }
  const byTrack = new Map<string, Event[]>();
  for (const e of events.filter((x) => x.ph === 'X')) {
    expect(Number.isInteger(e.ts) && (e.ts as number) >= 0, `ts of ${JSON.stringify(e)}`).toBe(true);
    expect(Number.isInteger(e.dur) && (e.dur as number) >= 0, `dur of ${JSON.stringify(e)}`).toBe(true);
    const track = threadNames.get(`${e.pid}/${e.tid}`);
    expect(track, `a thread_name for tid ${e.tid}`).toBeDefined();
    byTrack.set(track as string, [...(byTrack.get(track as string) ?? []), e]);
  }
  const counters = events.filter((x) => x.ph === 'C');
  expect(counters.length).toBeGreaterThan(0);
  for (const e of counters) {
    expect(typeof e.ts).toBe('number');
    expect(Object.keys(e.args ?? {}).length).toBeGreaterThan(0);
    for (const v of Object.values(e.args ?? {})) expect(Number.isFinite(v)).toBe(true);
  }
  return byTrack;
}

/** One device track per worker, work on each, and no two spans on a track overlapping (touching is fine). */
function checkDeviceTracks(byTrack: Map<string, Event[]>): void {
  const devices = [...byTrack.keys()].filter((n) => n.startsWith('device ')).sort();
  expect(devices).toEqual(['device 0 / worker 0', 'device 0 / worker 1']);
  for (const name of devices) {
    const spans = [...(byTrack.get(name) as Event[])].sort((a, b) => (a.ts as number) - (b.ts as number));
    expect(spans.length).toBeGreaterThan(0);
    for (let i = 1; i < spans.length; i++) {
      const prev = spans[i - 1] as Event;
      expect((spans[i] as Event).ts, `${name}: ${prev.name} then ${(spans[i] as Event).name}`).toBeGreaterThanOrEqual((prev.ts as number) + (prev.dur as number));
    }
  }
}

describe('Chrome trace', () => {
  it('simulate seed --trace: valid, one track per device worker, a span per partition and stage', async () => {
    const file = path.join(tmp.dir, 'seed.json');
    const r = await run('simulate', 'seed', '--pacer', 'stoker', '--trace', file);
    expect(r.code).toBe(0);
    expect(r.err).toContain(`wrote ${file}`);
    const text = fs.readFileSync(file, 'utf8');
    const byTrack = checkSchema(text);
    checkDeviceTracks(byTrack);
    // seed: 40 jobs × 10 partitions, each prepared and served once.
    const spans = [...byTrack.values()].flat();
    expect(spans.filter((e) => (e as { cat?: string }).cat === 'device')).toHaveLength(400);
    expect(spans.filter((e) => (e as { cat?: string }).cat === 'prepare')).toHaveLength(400);
    expect(text).toContain('seed — stoker pacer (virtual time)');
  });

  it('a simulate trace is in the scenario\'s seconds from 0 (it began at its first scenario event: a submission at 100 s showed at 50 s)', async () => {
    const scenario = path.join(tmp.dir, 'late.json');
    fs.writeFileSync(scenario, JSON.stringify({ name: 'late', kinds: { k: { prepare: { type: 'fixed', value: 10 } } }, devices: [{ workers: 1, service: { type: 'fixed', value: 2 } }], arrivals: [{ atS: 100, partitions: 1, kind: 'k' }], events: [{ type: 'speed', atS: 50, speed: 2 }] }));
    const file = path.join(tmp.dir, 'late-trace.json');
    expect((await run('simulate', scenario, '--pacer', 'unpaced', '--trace', file)).code).toBe(0);
    const trace = JSON.parse(fs.readFileSync(file, 'utf8')) as { traceEvents: { name: string; ph: string; ts: number; cat?: string }[]; otherData: Record<string, string> };
    expect(trace.otherData['originMs']).toBe('0');
    expect(trace.traceEvents.find((e) => e.name === 'submit job-0')?.ts).toBe(100_000_000);
    expect(trace.traceEvents.find((e) => e.cat === 'prepare')?.ts).toBe(100_000_000);
  });

  it('a long run: more spans than a function call takes arguments', () => {
    const spans = Array.from({ length: 300_000 }, (_, i) => ({ lane: 0, kind: 'device' as const, jobId: `job-${i}`, partition: 0, start: 10 + i, end: 11 + i, outcome: 'done' as const }));
    const trace = toChromeTrace({ lanes: [{ id: 0, kind: 'device', name: 'device 0 / worker 0', device: 0, worker: 0 }], spans, samples: [], title: 'long', now: 400_000 });
    const x = trace.traceEvents.filter((e) => e.ph === 'X');
    expect(x).toHaveLength(300_000);
    expect(x[0]).toMatchObject({ ts: 0, dur: 1000 });
  });

  it('records the batch settings for stoker plan; a damaged record is refused naming it', () => {
    const input = { lanes: [], spans: [], samples: [], title: 'b', now: 0, deviceBatches: [null, { maxItems: 8, maxWaitMs: 5 }], prepareBatches: { embed: { maxItems: 4, maxWaitMs: 500 } } };
    const back = fromChromeTrace(JSON.parse(JSON.stringify(toChromeTrace(input))));
    expect([back.deviceBatches, back.prepareBatches]).toEqual([input.deviceBatches, input.prepareBatches]);
    // None recorded (an older trace): none read.
    const plain = fromChromeTrace(toChromeTrace({ ...input, deviceBatches: [null], prepareBatches: {} }));
    expect([plain.deviceBatches, plain.prepareBatches]).toEqual([[], {}]);
    const damaged = toChromeTrace(input);
    damaged.otherData['deviceBatches'] = '[{"maxItems":0,"maxWaitMs":5}]';
    expect(() => fromChromeTrace(damaged)).toThrow(/otherData\.deviceBatches\[0\] is \{"maxItems":0,"maxWaitMs":5\}, not \{ maxItems: an integer ≥ 1/);
    damaged.otherData['deviceBatches'] = '[{"maxItems":4,"maxWaitMs":1e999}]';
    expect(() => fromChromeTrace(damaged)).toThrow(/maxWaitMs: a finite number ≥ 0/);
    damaged.otherData['deviceBatches'] = '{';
    expect(() => fromChromeTrace(damaged)).toThrow(/otherData\.deviceBatches is not JSON/);
  });

  it('several pacers: one file per pacer, named after it', async () => {
    const file = path.join(tmp.dir, 'cmp.json');
    const r = await run('simulate', 'failure', '--pacer', 'stoker,classic', '--trace', file);
    expect(r.code).toBe(0);
    for (const p of ['stoker', 'classic']) {
      const f = path.join(tmp.dir, `cmp.${p}.json`);
      expect(r.err).toContain(`wrote ${f}`);
      checkSchema(fs.readFileSync(f, 'utf8'));
    }
    expect(fs.existsSync(file)).toBe(false);
  });

  it('a --trace path that cannot be written: exit 2 before the run, names the file', async () => {
    const bad = path.join(tmp.dir, 'no-such-dir', 'trace.json');
    const r = await run('simulate', 'seed', '--trace', bad);
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
    expect(r.err).toContain(bad);
    const dir = await run('simulate', 'seed', '--trace', tmp.dir);
    expect(dir.code).toBe(2);
    expect(dir.err).toMatch(/is a directory/);
  });

  it('a real demo run: valid, two device worker tracks that never run two partitions at once', async () => {
    const timeline = new TimelineRecorder({ sampleEveryMs: 50 });
    const summary = await runDemo({ ...DEMO_DEFAULTS, seconds: 3, logN: 12, synthesisMs: 50, progressMs: 0, jobsInFlight: 4, partitions: 4, timeline }, () => {});
    expect(summary.jobsDone).toBeGreaterThan(0);
    const trace = toChromeTrace({ lanes: timeline.lanes(), spans: timeline.spans(), samples: timeline.samples(), jobs: timeline.jobs(), title: 'demo', now: performance.now() });
    const byTrack = checkSchema(JSON.stringify(trace));
    checkDeviceTracks(byTrack);
    // Every partition of every finished job ran on a device.
    const device = [...byTrack.entries()].filter(([n]) => n.startsWith('device ')).flatMap(([, e]) => e);
    expect(device.length).toBeGreaterThanOrEqual(summary.jobsDone * 4);
  });

  it('stoker demo --trace writes the real run (the built CLI)', () => {
    const file = path.join(tmp.dir, 'demo.json');
    const args = ['demo', '--seconds', '1', '--log-n', '10', '--synthesis-ms', '20', '--partitions', '2', '--jobs-in-flight', '2', '--max-preparing', '3', '--quiet', '--trace', file];
    execFileSync(process.execPath, [path.resolve('dist/cli/main.js'), ...args], { stdio: 'pipe' });
    const text = fs.readFileSync(file, 'utf8');
    const byTrack = checkSchema(text);
    expect([...byTrack.keys()].some((n) => n.startsWith('device 0 / worker '))).toBe(true);
    expect(text).toContain('ntt-proof demo — stoker pacer');
    // The run's preparation cap, for stoker plan to replay (a plan replayed a demo uncapped: 2.6× what it ran).
    expect((JSON.parse(text) as { otherData: Record<string, string> }).otherData['maxPreparing']).toBe('3');
  });
});

import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createPacer } from '../../src/core/index.js';
import { METRIC_KEYS, resolvePacer, resultRecord, SCENARIOS, simulate, writeReport, type SimResult } from '../../src/sim/index.js';
import { tempDir } from './helpers.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

function runs(scenario: string, pacers: string[]): SimResult[] {
  const s = SCENARIOS.get(scenario);
  if (!s) throw new Error(scenario);
  return pacers.map((p) => simulate(s, { pacer: (o) => createPacer(p, o) }));
}

describe('writeReport', () => {
  it('writes report.json with stable keys and four charts per scenario', () => {
    const results = [...runs('failure', ['stoker', 'unpaced']), ...runs('cancel', ['stoker'])];
    const dir = path.join(tmp.dir, 'nested', 'out');
    const files = writeReport(dir, results);
    expect(files.map((f) => path.relative(dir, f))).toEqual([
      'report.json',
      'failure-waiting.svg',
      'failure-inventory.svg',
      'failure-occupancy.svg',
      'failure-dispatch.svg',
      'cancel-waiting.svg',
      'cancel-inventory.svg',
      'cancel-occupancy.svg',
      'cancel-dispatch.svg',
    ]);
    const text = fs.readFileSync(path.join(dir, 'report.json'), 'utf8');
    expect(text.endsWith(']\n')).toBe(true);
    expect(text).toContain('\n  {\n    "scenario": "failure",');
    const report = JSON.parse(text) as ReturnType<typeof resultRecord>[];
    expect(report).toHaveLength(3);
    expect(Object.keys(report[0]?.metrics ?? {})).toEqual([...METRIC_KEYS]);
    expect(report[0]?.failures.map((f) => f.job)).toEqual(['job-3', 'job-7']);
    // Two pacers on the failure charts, one on the cancel charts.
    expect(fs.readFileSync(path.join(dir, 'failure-waiting.svg'), 'utf8').match(/class="pacer"/g)).toHaveLength(2);
    expect(fs.readFileSync(path.join(dir, 'cancel-dispatch.svg'), 'utf8').match(/class="pacer"/g)).toHaveLength(1);
  });

  it('keeps charts small: ≤ 600 points per line, numbers with at most 1 decimal', () => {
    const results = runs('burst-after-idle', ['stoker', 'classic']);
    expect(results[0]?.series.time.length).toBeGreaterThan(600);
    const [, waiting] = writeReport(path.join(tmp.dir, 'long'), results);
    const svg = fs.readFileSync(waiting as string, 'utf8');
    for (const m of svg.matchAll(/<polyline class="pacer"[^>]* points="([^"]*)"/g)) expect((m[1] as string).split(' ').length).toBeLessThanOrEqual(600);
    const coords = [...svg.matchAll(/ (?:x|y|x1|y1|x2|y2|width|height)="([^"]*)"/g)].map((m) => m[1] as string);
    const pts = [...svg.matchAll(/ points="([^"]*)"/g)].flatMap((m) => (m[1] as string).split(/[ ,]/));
    expect(coords.length + pts.length).toBeGreaterThan(100);
    for (const n of [...coords, ...pts]) expect(n).toMatch(/^-?\d+(\.\d)?$/);
    expect(svg).toContain('time (min)');
    // The steady window is shaded.
    expect(svg).toMatch(/<rect x="[\d.]+" y="52" width="[\d.]+" height="278" fill="#4e79a7" fill-opacity="0.08"\/>/);
  });

  it('escapes names in the markup', () => {
    const s = SCENARIOS.get('cancel');
    if (!s) throw new Error('cancel');
    const r = simulate(s, {
      pacer: (o) => {
        const p = createPacer('stoker', o);
        return { name: 'a<b>&"c"', observe: (x) => p.observe(x), nextDispatchAt: (x) => p.nextDispatchAt(x), onDispatch: (x) => p.onDispatch(x), state: () => p.state() };
      },
    });
    const [, waiting] = writeReport(path.join(tmp.dir, 'esc'), [r]);
    const svg = fs.readFileSync(waiting as string, 'utf8');
    expect(svg).toContain('data-pacer="a&lt;b&gt;&amp;&quot;c&quot;"');
    expect(svg).not.toContain('a<b>');
  });
});

describe('resolvePacer', () => {
  it('resolves built-in names and relative paths (against cwd)', async () => {
    expect((await resolvePacer('classic'))({}).name).toBe('classic');
    tmp.file('plain.js', 'export default () => ({ name: "mine", observe() {}, nextDispatchAt: (s) => s.now, onDispatch() {} });\n');
    const create = await resolvePacer('plain.js', tmp.dir);
    const p = create({ targetWaiting: 4 });
    expect(p.name).toBe('mine');
    expect(p.state()).toEqual({ mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} });
  });

  it('keeps a class instance working (methods on the prototype, this bound)', async () => {
    tmp.file(
      'klass.mjs',
      `class P { constructor(o) { this.target = o.targetWaiting; }
        observe() {} nextDispatchAt(s) { return s.waiting < this.target ? s.now : Infinity; } onDispatch() {} }
       export default (o) => new P(o);\n`,
    );
    const p = (await resolvePacer(path.join(tmp.dir, 'klass.mjs')))({ targetWaiting: 3 });
    expect(p.name).toBe('klass');
    const snap = { now: 5, waiting: 1 } as Parameters<typeof p.nextDispatchAt>[0];
    expect(p.nextDispatchAt(snap)).toBe(5);
  });

  it('checks what state() returns, naming the field', async () => {
    // Each check reloads the module under a fresh name (import caches by URL).
    let n = 0;
    const pacerWith = async (state: string) => {
      tmp.file(`st${++n}.mjs`, `export default () => ({ observe() {}, nextDispatchAt: (s) => s.now, onDispatch() {}, state: () => (${state}) });\n`);
      return (await resolvePacer(path.join(tmp.dir, `st${n}.mjs`)))({});
    };
    expect((await pacerWith("{ mode: 'steady', ratePerSec: 2, intervalMs: null, terms: { x: 1 } }")).state()).toEqual({ mode: 'steady', ratePerSec: 2, intervalMs: null, terms: { x: 1 } });
    await expect(pacerWith("{ mode: 'fast', ratePerSec: 1, intervalMs: 1, terms: {} }").then((p) => p.state())).rejects.toThrow(/state\(\)\.mode must be one of bootstrap, steady, idle, blocked, hold \(got "fast"\)/);
    await expect(pacerWith("{ mode: 'steady', rate: 1, intervalMs: 1, terms: {} }").then((p) => p.state())).rejects.toThrow(/state\(\)\.ratePerSec must be a number ≥ 0 or null \(got undefined\)/);
    await expect(pacerWith("{ mode: 'steady', ratePerSec: null, intervalMs: 'soon', terms: {} }").then((p) => p.state())).rejects.toThrow(/state\(\)\.intervalMs must be a number/);
    await expect(pacerWith("{ mode: 'steady', ratePerSec: null, intervalMs: null, terms: { gain: 'high' } }").then((p) => p.state())).rejects.toThrow(/state\(\)\.terms\.gain must be a number/);
    await expect(pacerWith("{ mode: 'steady', ratePerSec: null, intervalMs: null }").then((p) => p.state())).rejects.toThrow(/state\(\)\.terms must be an object of numbers/);
    await expect(pacerWith("{ mode: 'steady', ratePerSec: null, intervalMs: null, terms: {}, kinds: [{ name: 'a', estimatedPerSec: -1 }] }").then((p) => p.state())).rejects.toThrow(/state\(\)\.kinds\[0\]\.estimatedPerSec must be a number ≥ 0 or null \(got -1\)/);
    await expect(pacerWith("{ mode: 'steady', ratePerSec: null, intervalMs: null, terms: {}, devices: [{ estimatedPerSec: 1, observedRatio: null, trusted: 'maybe' }] }").then((p) => p.state())).rejects.toThrow(/state\(\)\.devices\[0\]\.trusted must be "estimate" or "observed"/);
    await expect(pacerWith("{ mode: 'steady', ratePerSec: null, intervalMs: null, terms: {}, kinds: {} }").then((p) => p.state())).rejects.toThrow(/state\(\)\.kinds must be an array \(or absent\)/);
  });

  it('rejects a factory that returns something other than an object', async () => {
    tmp.file('num.mjs', 'export default () => 42;\n');
    const create = await resolvePacer(path.join(tmp.dir, 'num.mjs'));
    expect(() => create({})).toThrow(/returned number, not a pacer object/);
  });
});

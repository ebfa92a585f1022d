/** The self-contained HTML report of `stoker simulate --html` and `stoker bench --html`. */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatMetric } from '../../src/cli/table.js';
import type { Metrics } from '../../src/sim/metrics.js';
import type { PlanRow } from '../../src/plan/sweep.js';
import type { PlanHtmlData } from '../../src/report/plan-html.js';
import type { HtmlReportData } from '../../src/report/report-html.js';
import { run, tempDir } from '../cli/helpers.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

const uplotJs = fs.readFileSync(createRequire(import.meta.url).resolve('uplot/dist/uPlot.iife.min.js'), 'utf8');

/** The document must open offline: uPlot inlined, no URL anywhere. */
function checkSelfContained(html: string): void {
  expect(html.startsWith('<!DOCTYPE html>')).toBe(true);
  expect(html).toContain('uPlot');
  // A stretch from the middle of uPlot's minified source.
  const mid = Math.floor(uplotJs.length / 2);
  expect(html).toContain(uplotJs.slice(mid, mid + 300));
  expect(html).not.toMatch(/<script[^>]*\ssrc=/i);
  expect(html).not.toMatch(/<link[^>]*\shref=/i);
  expect(html).not.toMatch(/https?:\/\//i);
  expect(html).not.toMatch(/url\(/i);
}

/** The JSON embedded in the page. */
function embedded<T = HtmlReportData>(html: string): T {
  const m = /<script type="application\/json" id="stoker-data">([^]*?)<\/script>/.exec(html);
  expect(m).not.toBeNull();
  return JSON.parse((m as RegExpExecArray)[1] as string) as T;
}

describe('HTML report', () => {
  it('simulate --html: metrics table, four charts with one line per pacer, uPlot inlined', async () => {
    const file = path.join(tmp.dir, 'seed.html');
    const r = await run('simulate', 'seed', '--pacer', 'stoker,classic', '--json', '--html', file);
    expect(r.code).toBe(0);
    expect(r.err).toContain(`wrote ${file}`);
    const html = fs.readFileSync(file, 'utf8');
    checkSelfContained(html);
    const data = embedded(html);
    const records = JSON.parse(r.out) as { pacer: string; metrics: Metrics }[];
    expect(data.runs.map((x) => x.pacer)).toEqual(['stoker', 'classic']);
    expect(data.runs.map((x) => x.metrics)).toEqual(records.map((x) => x.metrics));
    expect(data.scenarios.map((s) => s.name)).toEqual(['seed']);
    const charts = data.scenarios[0]?.charts ?? [];
    expect(charts.map((c) => c.key)).toEqual(['waiting', 'inventory', 'occupancy', 'dispatch']);
    for (const c of charts) {
      expect(c.series.map((s) => s.label)).toEqual(['stoker', 'classic']);
      for (const s of [...c.series, c.reference]) {
        expect(s.x.length).toBeGreaterThan(1);
        expect(s.y).toHaveLength(s.x.length);
      }
      expect(html).toContain(`id="chart-0-${charts.indexOf(c)}"`);
    }
    // The visible table holds the CLI's values, formatted as the CLI prints them.
    for (const rec of records) {
      for (const k of ['throughputRatio', 'waitingMean', 'peakMemoryBytes', 'jobLatencyP50Ms'] as const) expect(html).toContain(`<td>${formatMetric(k, rec.metrics[k])}</td>`);
    }
  });

  it('bench --html: the bench table, a section per scenario, one line per pacer in each chart', async () => {
    const file = path.join(tmp.dir, 'bench.html');
    const r = await run('bench', '--scenarios', 'seed,gain-sweep-1', '--pacers', 'stoker,classic', '--json', '--html', file);
    expect(r.code).toBe(0);
    const html = fs.readFileSync(file, 'utf8');
    checkSelfContained(html);
    const data = embedded(html);
    const rows = JSON.parse(r.out) as { scenario: string; pacer: string; metrics: Metrics }[];
    expect(data.runs.map(({ scenario, pacer, metrics }) => ({ scenario, pacer, metrics }))).toEqual(rows);
    expect(data.scenarios.map((s) => s.name)).toEqual(['seed', 'gain-sweep-1']);
    for (const s of data.scenarios) {
      expect(s.charts).toHaveLength(4);
      for (const c of s.charts) expect(c.series.map((x) => x.label)).toEqual(['stoker', 'classic']);
    }
    expect(html.match(/<section id="scenario-\d+">/g)).toHaveLength(2);
    expect(html).toContain('<table class="summary">');
    expect(html).toContain('<th>done/failed/cancelled</th>');
    for (const row of rows) expect(html).toContain(`<td>${formatMetric('throughputRatio', row.metrics.throughputRatio)}</td>`);
  });

  it('plan --html: the frontier table, every setting as a point, the frontier and the recommendation marked as --json gives them', async () => {
    const file = path.join(tmp.dir, 'plan.html');
    const r = await run('plan', 'seed', '--seeds', '1', '--targets', '2,4', '--threads', '1', '--json', '--html', file);
    expect(r.code, r.err).toBe(0);
    expect(r.err).toContain(`wrote ${file}`);
    const html = fs.readFileSync(file, 'utf8');
    checkSelfContained(html);
    const out = JSON.parse(r.out) as { frontier: PlanRow[]; recommended: (PlanRow & { config: string[] }) | null; rows: PlanRow[] };
    const data = embedded<PlanHtmlData>(html);
    expect(data.memoryUnit).toBe('GiB');
    expect(data.points).toHaveLength(out.rows.length);
    const memory = data.points.map((p) => p.memory);
    expect(memory).toEqual([...memory].sort((a, b) => a - b));
    const key = (r: { itemsPerSec: number; memory: number }) => `${r.itemsPerSec.toPrecision(6)}@${r.memory.toPrecision(5)}`;
    const asPoint = (row: PlanRow) => key({ itemsPerSec: row.itemsPerSec, memory: row.peakMemoryBytes / 2 ** 30 });
    expect(data.points.filter((p) => p.frontier).map(key).sort()).toEqual(out.frontier.map(asPoint).sort());
    const marked = data.points.filter((p) => p.recommended);
    expect(marked).toHaveLength(1);
    expect(key(marked[0] as PlanHtmlData['points'][number])).toBe(asPoint(out.recommended as PlanRow));
    expect(marked[0]?.label).toBe(`stoker, target ${out.recommended?.targetWaiting}, budget none, prep cap ${out.recommended?.maxPreparing ?? 'none'}, workers ${out.recommended?.workers.join('/')}`);
    // The visible page: one table row per frontier setting, the config lines to paste, two charts.
    expect(html.match(/<table class="frontier">[^]*?<\/table>/)?.[0].match(/<tr>/g)).toHaveLength(out.frontier.length + 1);
    expect(html).toContain(`<pre class="config">${(out.recommended?.config ?? []).join("\n").replace(/"/g, "&quot;")}</pre>`);
    expect(html).toContain('id="chart-throughput"');
    expect(html).toContain('id="chart-latency"');
  });

  it('plan --html to a path that cannot be written: exit 2 before the sweep', async () => {
    const r = await run('plan', 'seed', '--seeds', '1', '--threads', '1', '--html', path.join(tmp.dir, 'missing', 'plan.html'));
    expect(r.code).toBe(2);
    expect(r.err).toContain('does not exist');
    expect(r.err).not.toContain('[1/');
  });

  it('names that look like markup stay text, and cannot end the data script', async () => {
    const scenario = {
      name: 'x</script><script>alert(1)</script>',
      description: '<b>bold</b> & more',
      targetWaiting: 2,
      kinds: { k: { prepare: { type: 'fixed', value: 1 }, memory: { prepareBytes: 1, deviceBytes: 1 } } },
      devices: [{ workers: 1, service: { type: 'fixed', value: 0.5 } }],
      arrivals: [{ atS: 0, jobs: 2, partitions: 3, kind: 'k' }],
    };
    const spec = tmp.file('markup.json', JSON.stringify(scenario));
    const file = path.join(tmp.dir, 'markup.html');
    const r = await run('simulate', spec, '--html', file);
    expect(r.code).toBe(0);
    const html = fs.readFileSync(file, 'utf8');
    expect(html).not.toContain('<script>alert(1)');
    expect(html).toContain('&lt;b&gt;bold&lt;/b&gt; &amp; more');
    expect(embedded(html).scenarios[0]?.name).toBe(scenario.name);
  });

  it('an --html path that cannot be written: exit 2 before the run, names the file', async () => {
    const bad = path.join(tmp.dir, 'missing', 'report.html');
    for (const argv of [['simulate', 'seed', '--html', bad], ['bench', '--scenarios', 'seed', '--pacers', 'stoker', '--html', bad]]) {
      const r = await run(...argv);
      expect(r.code).toBe(2);
      expect(r.out).toBe('');
      expect(r.err).toContain(bad);
    }
  });
});

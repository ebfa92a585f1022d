import { formatMetric } from '../sim/format.js';
import { esc, htmlPage, tableHtml } from './html-page.js';
import { METRIC_KEYS, orderedMetrics, PALETTE, scenarioCharts, timeUnit, type ChartData } from '../sim/report.js';
import type { Metrics } from '../sim/metrics.js';
import type { SimResult } from '../sim/simulator.js';

/**
 * A self-contained HTML report of simulation results: per scenario, a table of every measure and
 * the four charts of the SVG report (waiting vs target, inventory vs the Little's-law need,
 * occupancy, dispatch rate vs capacity), one line per pacer, drawn in the page by uPlot. uPlot's
 * script and stylesheet are read from node_modules and inlined, the data is embedded as JSON:
 * the file references no URL and opens offline.
 */

export interface HtmlReportOptions {
  /** The page's title, e.g. "stoker simulate seed". */
  title: string;
  /** A table above the scenario sections (the bench table): headers and formatted cells. */
  summary?: { headers: string[]; rows: string[][] };
  /** Scenario descriptions by name, shown under each section's heading. */
  descriptions?: Record<string, string>;
}

/** One line of a chart: x in the scenario's time unit, y in the chart's unit. */
interface Line {
  label: string;
  colour: string;
  x: number[];
  y: number[];
}

/** What the page's script reads from the `<script type="application/json" id="stoker-data">` tag. */
export interface HtmlReportData {
  generator: 'stoker';
  title: string;
  /** Every run's measures, unformatted (as `--json` prints them). */
  runs: { scenario: string; pacer: string; seed: number; metrics: Metrics }[];
  scenarios: {
    name: string;
    /** The x axis's unit ("s", "min", "h"). */
    unit: string;
    /** The steady window, and the x axis's end (the longest run), in `unit`. */
    window: [number, number];
    xMax: number;
    charts: { key: string; title: string; yLabel: string; note: string; yMax: number | null; series: Line[]; reference: Line }[];
  }[];
}

const round = (v: number, digits: number) => (Number.isFinite(v) ? Number(v.toPrecision(digits)) : 0);

function chartLines(c: ChartData, div: number, colours: Map<string, string>): { series: Line[]; reference: Line } {
  const toLine = (label: string, colour: string, pts: [number, number][]): Line => ({
    label,
    colour,
    x: pts.map((p) => round(p[0] / div, 6)),
    y: pts.map((p) => round(p[1], 4)),
  });
  const ref = c.reference.value;
  const refPts: [number, number][] = typeof ref === 'number' ? [[0, ref], [c.xMaxMs, ref]] : ref;
  return {
    series: c.lines.map((l) => toLine(l.pacer, colours.get(l.pacer) ?? '#000', l.points)),
    reference: toLine(c.reference.label, '#555', refPts),
  };
}

/**
 * Renders the report as one HTML document. Results are grouped by scenario in order of first
 * appearance; a pacer keeps its colour in every chart. Same results → the same bytes.
 */
export function renderHtmlReport(results: SimResult[], options: HtmlReportOptions): string {
  const colours = new Map<string, string>();
  for (const r of results) if (!colours.has(r.pacer)) colours.set(r.pacer, PALETTE[colours.size % PALETTE.length] as string);
  const byScenario = new Map<string, SimResult[]>();
  for (const r of results) byScenario.set(r.scenario, [...(byScenario.get(r.scenario) ?? []), r]);

  const data: HtmlReportData = {
    generator: 'stoker',
    title: options.title,
    runs: results.map((r) => ({ scenario: r.scenario, pacer: r.pacer, seed: r.seed, metrics: orderedMetrics(r.metrics) })),
    scenarios: [],
  };
  const sections: string[] = [];
  [...byScenario].forEach(([name, runs], si) => {
    const charts = scenarioCharts(runs);
    const first = runs[0] as SimResult;
    const unit = timeUnit(charts[0]?.xMaxMs ?? 1);
    data.scenarios.push({
      name,
      unit: unit.label,
      window: [round(first.window.fromMs / unit.div, 6), round(first.window.toMs / unit.div, 6)],
      xMax: round((charts[0]?.xMaxMs ?? 1) / unit.div, 6),
      charts: charts.map((c) => ({
        key: c.key,
        title: c.title,
        yLabel: c.yLabel,
        note: `points average ${round(c.groupMs / 1000, 3)} s${c.clipped ? ` · y axis clipped (peak ${round(c.dataMax, 3)})` : ''}`,
        yMax: c.yMax,
        ...chartLines(c, unit.div, colours),
      })),
    });
    const description = options.descriptions?.[name];
    const rows = METRIC_KEYS.map((k) => [k, ...runs.map((r) => formatMetric(k, r.metrics[k]))]);
    sections.push(
      [
        `<section id="scenario-${si}">`,
        `<h2>${esc(name)}</h2>`,
        description ? `<p class="note">${esc(description)}</p>` : '',
        `<p class="note">seed ${first.seed} · steady window ${(first.window.fromMs / 1000).toFixed(1)} s – ${(first.window.toMs / 1000).toFixed(1)} s (shaded) · ${runs.map((r) => `${esc(r.pacer)}: ${r.events} events, ${(r.simulatedMs / 1000).toFixed(1)} s simulated`).join(' · ')}</p>`,
        tableHtml(['metric', ...runs.map((r) => r.pacer)], rows, 'metrics'),
        `<div class="charts">${charts.map((_, ci) => `<div class="chart" id="chart-${si}-${ci}"></div>`).join('')}</div>`,
        '</section>',
      ]
        .filter((l) => l !== '')
        .join('\n'),
    );
  });

  return htmlPage({
    title: options.title,
    body: [
      '<p class="note">Dashed: the reference (target, Little’s-law need, all workers busy, device capacity). Shaded: the steady window the measures use. Drag on a chart to zoom, double-click to reset.</p>',
      options.summary ? tableHtml(options.summary.headers, options.summary.rows, 'summary') : '',
      sections.join('\n'),
    ].join('\n'),
    data,
    script: PAGE_SCRIPT,
  });
}

/** Draws the charts from the embedded data (runs in the browser). */
const PAGE_SCRIPT = `(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('stoker-data').textContent);
  var plots = [];
  data.scenarios.forEach(function (sc, si) {
    sc.charts.forEach(function (ch, ci) {
      var el = document.getElementById('chart-' + si + '-' + ci);
      var lines = ch.series.concat([ch.reference]);
      var aligned = uPlot.join(lines.map(function (l) { return [l.x, l.y]; }));
      var series = [{ label: 'time (' + sc.unit + ')' }].concat(lines.map(function (l, i) {
        var ref = i === lines.length - 1;
        return ref ? { label: l.label, stroke: l.colour, width: 1.5, dash: [6, 4], spanGaps: true } : { label: l.label, stroke: l.colour, width: 1.5, spanGaps: true };
      }));
      var note = document.createElement('p');
      note.className = 'chart-note';
      note.textContent = ch.note;
      var shade = function (u) {
        var x0 = u.valToPos(sc.window[0], 'x', true), x1 = u.valToPos(sc.window[1], 'x', true);
        var lo = Math.max(u.bbox.left, Math.min(x0, x1)), hi = Math.min(u.bbox.left + u.bbox.width, Math.max(x0, x1));
        if (hi <= lo) return;
        u.ctx.save();
        u.ctx.fillStyle = 'rgba(78, 121, 167, 0.08)';
        u.ctx.fillRect(lo, u.bbox.top, hi - lo, u.bbox.height);
        u.ctx.restore();
      };
      var opts = {
        title: sc.name + ': ' + ch.title,
        width: Math.max(320, el.clientWidth || 640),
        height: 320,
        scales: {
          // The whole run from 0 unless zoomed (a zoom's ends are not the data's ends).
          x: { time: false, range: function (u, min, max) { var xs = u.data[0]; return min === xs[0] && max === xs[xs.length - 1] ? [0, sc.xMax] : [min, max]; } },
          y: { range: function (u, min, max) { return [0, ch.yMax !== null ? ch.yMax : (max > 0 ? max * 1.05 : 1)]; } },
        },
        axes: [{ label: 'time (' + sc.unit + ')' }, { label: ch.yLabel }],
        series: series,
        hooks: { drawAxes: [shade] },
      };
      plots.push({ el: el, plot: new uPlot(opts, aligned, el) });
      el.appendChild(note);
    });
  });
  var pending = 0;
  window.addEventListener('resize', function () {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(function () {
      plots.forEach(function (p) { p.plot.setSize({ width: Math.max(320, p.el.clientWidth), height: 320 }); });
    });
  });
})();`;

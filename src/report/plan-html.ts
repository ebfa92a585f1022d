import type { PlanRow } from '../plan/sweep.js';
import { esc, htmlPage, tableHtml } from './html-page.js';

/** What `stoker plan --html` shows: the text parts as the CLI prints them, and every setting's numbers. */
export interface PlanHtmlInput {
  title: string;
  /** Lines describing the fit (a plan from a trace), else empty. */
  fitLines: string[];
  /** One line: the scenario, the settings and the seeds. */
  summary: string;
  /** The frontier table as the CLI prints it. */
  table: { headers: string[]; rows: string[][] };
  /** Every setting swept, the frontier among them, and the recommended one (null: none finished every job). */
  rows: PlanRow[];
  frontier: PlanRow[];
  recommended: PlanRow | null;
  /** The recommendation in words and the config lines to paste. */
  recommendation: string;
  /** The scenario's (or the run's) own setting and what it did, in words ('' where it was not swept). */
  current: string;
  config: string[];
  /** What the reader should weigh beside the recommendation (a quicker setting, devices its arrivals leave idle), in words. */
  notes: string[];
  /** A setting in words (the hover text of its point). */
  describe: (r: PlanRow) => string;
}

/** One setting as a point: memory on x; throughput and p99 latency on y. */
interface PlanPoint {
  label: string;
  pacer: string;
  memory: number;
  itemsPerSec: number;
  p99S: number | null;
  frontier: boolean;
  recommended: boolean;
}

/** What the page's script reads from `<script type="application/json" id="stoker-data">`. */
export interface PlanHtmlData {
  generator: 'stoker';
  title: string;
  /** The unit of `memory` ("GiB" or "MiB"). */
  memoryUnit: string;
  /** Sorted by memory. */
  points: PlanPoint[];
  /** The pacers swept, and the colour of each one's points. */
  pacers: string[];
  colours: string[];
}

const PACER_COLOURS = ['#9c9c9c', '#b7a16a', '#8fb0c9', '#c99a9a'];

/**
 * The plan as one self-contained page: the fit, the frontier table, the recommendation and its
 * config lines, and two charts of every setting by peak memory (throughput, p99 job latency),
 * the frontier drawn as a line and the recommendation marked. Same plan → the same bytes.
 */
export function renderPlanHtml(p: PlanHtmlInput): string {
  const maxBytes = Math.max(0, ...p.rows.map((r) => r.peakMemoryBytes));
  const [unit, div] = maxBytes >= 2 ** 30 ? ['GiB', 2 ** 30] : ['MiB', 2 ** 20];
  const onFrontier = new Set(p.frontier);
  const points = [...p.rows]
    .sort((a, b) => a.peakMemoryBytes - b.peakMemoryBytes || b.itemsPerSec - a.itemsPerSec)
    .map((r) => ({
      label: p.describe(r),
      pacer: r.pacer,
      memory: Number((r.peakMemoryBytes / div).toPrecision(6)),
      itemsPerSec: Number(r.itemsPerSec.toPrecision(6)),
      p99S: r.jobLatencyP99Ms === null ? null : Number((r.jobLatencyP99Ms / 1000).toPrecision(6)),
      frontier: onFrontier.has(r),
      recommended: r === p.recommended,
    }));
  const data: PlanHtmlData = { generator: 'stoker', title: p.title, memoryUnit: unit, points, pacers: [...new Set(p.rows.map((r) => r.pacer))], colours: PACER_COLOURS };
  const body = [
    `<p class="note">${esc(p.summary)}</p>`,
    p.fitLines.length ? `<pre class="fit">${esc(p.fitLines.join('\n'))}</pre>` : '',
    '<h2>The frontier</h2>',
    '<p class="note">No other setting has more throughput, less peak memory and less p99 latency. →: the recommendation.</p>',
    tableHtml(p.table.headers, p.table.rows, 'frontier'),
    ...(p.current ? [`<p>${esc(p.current)}</p>`] : []),
    `<p>${esc(p.recommendation)}</p>`,
    p.config.length ? `<pre class="config">${esc(p.config.join('\n'))}</pre>` : '',
    ...p.notes.map((n) => `<p>${esc(n)}</p>`),
    '<h2>Every setting by peak memory</h2>',
    '<p class="note">Grey points: each setting swept (means over the seeds); the line: the frontier; the large point: the recommendation. Hover a point for its setting; drag to zoom, double-click to reset.</p>',
    '<div class="charts"><div class="chart" id="chart-throughput"></div><div class="chart" id="chart-latency"></div></div>',
    '<p class="note" id="hover">&nbsp;</p>',
  ]
    .filter((l) => l !== '')
    .join('\n');
  return htmlPage({ title: p.title, body, data, script: PAGE_SCRIPT });
}

/** Draws the two charts from the embedded data (runs in the browser). */
const PAGE_SCRIPT = `(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('stoker-data').textContent);
  var colours = data.colours;
  var pts = data.points;
  var xs = pts.map(function (p) { return p.memory; });
  var hover = document.getElementById('hover');
  var plots = [];
  var dots = function (stroke, size) { return { stroke: stroke, fill: stroke, paths: function () { return null; }, points: { show: true, size: size, stroke: stroke, fill: stroke } }; };
  [['chart-throughput', 'items/s', 'itemsPerSec', 'throughput by peak memory'], ['chart-latency', 'p99 job latency (s)', 'p99S', 'p99 job latency by peak memory']].forEach(function (c) {
    var el = document.getElementById(c[0]);
    var key = c[2];
    var cols = [xs];
    var series = [{ label: 'peak memory (' + data.memoryUnit + ')' }];
    data.pacers.forEach(function (pacer, i) {
      cols.push(pts.map(function (p) { return p.pacer === pacer ? p[key] : null; }));
      series.push(Object.assign({ label: pacer }, dots(colours[i % colours.length], 6)));
    });
    cols.push(pts.map(function (p) { return p.frontier ? p[key] : null; }));
    series.push({ label: 'frontier', stroke: '#4e79a7', width: 2, spanGaps: true, points: { show: true, size: 7 } });
    cols.push(pts.map(function (p) { return p.recommended ? p[key] : null; }));
    series.push(Object.assign({ label: 'recommended' }, dots('#e15759', 13)));
    var opts = {
      title: c[3],
      width: Math.max(320, el.clientWidth || 640),
      height: 340,
      scales: { x: { time: false }, y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.08 : 1]; } } },
      axes: [{ label: 'peak memory (' + data.memoryUnit + ')' }, { label: c[1] }],
      series: series,
    };
    var plot = new uPlot(opts, cols, el);
    // Many settings share a peak memory: the hovered one is the point nearest the pointer on the plot, not the first at its x.
    plot.over.addEventListener('mousemove', function (ev) {
      var r = plot.over.getBoundingClientRect(), best = -1, bestD = Infinity;
      pts.forEach(function (p, i) {
        if (p[key] === null) return;
        var dx = plot.valToPos(p.memory, 'x') - (ev.clientX - r.left), dy = plot.valToPos(p[key], 'y') - (ev.clientY - r.top), d = dx * dx + dy * dy;
        if (d < bestD) { bestD = d; best = i; }
      });
      hover.textContent = best < 0 ? '\\u00a0' : pts[best].label;
    });
    plots.push({ el: el, plot: plot });
  });
  var pending = 0;
  window.addEventListener('resize', function () {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(function () {
      plots.forEach(function (p) { p.plot.setSize({ width: Math.max(320, p.el.clientWidth), height: 340 }); });
    });
  });
})();`;

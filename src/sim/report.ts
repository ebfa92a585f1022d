import fs from 'node:fs';
import path from 'node:path';
import type { Metrics, Series } from './metrics.js';
import type { SimResult } from './simulator.js';

/** Every field of the benchmark contract (Metrics), in the interface's order. */
export const METRIC_KEYS = [
  'throughputRatio',
  'itemsPerSec',
  'batchItemsMean',
  'occupancy',
  'starvedMs',
  'waitingMean',
  'waitingStd',
  'waitingP95',
  'waitingMax',
  'inventoryRatio',
  'peakMemoryBytes',
  'jobLatencyP50Ms',
  'jobLatencyP99Ms',
  'burstMax',
  'settleCompletions',
  'rampMs',
  'leakedBytes',
  'jobsDone',
  'jobsFailed',
  'jobsCancelled',
  'inventoryAtChange',
  'inventoryMaxAfterChange',
] as const satisfies readonly (keyof Metrics)[];

// Does not compile when Metrics gains a field that METRIC_KEYS does not list.
type Unlisted = Exclude<keyof Metrics, (typeof METRIC_KEYS)[number]>;
const everyMetricListed: [Unlisted] extends [never] ? true : Unlisted = true;
void everyMetricListed;

/** What report.json and `stoker simulate --json` hold for one run: no wall-clock fields, stable key order. */
export type ResultRecord = Pick<SimResult, 'scenario' | 'pacer' | 'seed' | 'window' | 'events' | 'simulatedMs' | 'metrics' | 'byKind' | 'failures' | 'unfinishedJobs' | 'endedBy' | 'stall'> & Partial<Pick<SimResult, 'byPriority'>>;

/** The metrics with their keys in the contract's order. */
export function orderedMetrics(m: Metrics): Metrics {
  const out: Partial<Record<keyof Metrics, number | null>> = {};
  for (const k of METRIC_KEYS) out[k] = m[k];
  return out as Metrics;
}

/** The deterministic record of one run (same inputs → same JSON, byte for byte). */
export function resultRecord(r: SimResult): ResultRecord {
  return {
    scenario: r.scenario,
    pacer: r.pacer,
    seed: r.seed,
    window: { fromMs: r.window.fromMs, toMs: r.window.toMs },
    events: r.events,
    simulatedMs: r.simulatedMs,
    metrics: orderedMetrics(r.metrics),
    byKind: r.byKind.map((k) => ({ kind: k.kind, jobsDone: k.jobsDone, jobLatencyP50Ms: k.jobLatencyP50Ms, jobLatencyP99Ms: k.jobLatencyP99Ms })),
    // (Where more than one priority class arrives: a run of one class has its latency in the metrics.)
    ...(r.byPriority.length > 1 ? { byPriority: r.byPriority.map((p) => ({ priority: p.priority, jobsDone: p.jobsDone, jobLatencyP50Ms: p.jobLatencyP50Ms, jobLatencyP99Ms: p.jobLatencyP99Ms })) } : {}),
    failures: r.failures.map((f) => ({ job: f.job, state: f.state, code: f.code, reason: f.reason })),
    unfinishedJobs: r.unfinishedJobs,
    endedBy: r.endedBy,
    ...(r.stall === undefined ? {} : { stall: r.stall }),
  };
}

/** JSON with 2-space indent and a trailing newline. */
export function toJson(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

/**
 * Writes `report.json` (one record per result) and, per scenario, four SVG charts overlaying
 * its pacers: `<scenario>-waiting.svg`, `-inventory.svg`, `-occupancy.svg`, `-dispatch.svg`.
 * Creates `dir`; returns the paths written. Same results → byte-identical files.
 */
export function writeReport(dir: string, results: SimResult[]): string[] {
  fs.mkdirSync(dir, { recursive: true });
  const written: string[] = [];
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text);
    written.push(file);
  };
  write('report.json', toJson(results.map(resultRecord)));
  const colours = new Map<string, string>();
  for (const r of results) if (!colours.has(r.pacer)) colours.set(r.pacer, PALETTE[colours.size % PALETTE.length] as string);
  const byScenario = new Map<string, SimResult[]>();
  for (const r of results) byScenario.set(r.scenario, [...(byScenario.get(r.scenario) ?? []), r]);
  for (const [scenario, runs] of byScenario) {
    const base = scenario.replace(/[^A-Za-z0-9._-]+/g, '_');
    for (const chart of CHARTS) write(`${base}-${chart.key}.svg`, renderChart(chart, scenario, runs, colours));
  }
  return written;
}

// ───────────────────────────── charts ─────────────────────────────

/** Tableau 10: distinct, colour-blind-friendly enough, readable on white. The charts' colours, by pacer in order of first appearance. */
export const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
const MAX_POINTS = 600;

interface ChartSpec {
  key: 'waiting' | 'inventory' | 'occupancy' | 'dispatch';
  title: string;
  yLabel: string;
  values: (s: Series) => number[];
  /** The dashed reference: a constant or a series (taken from the longest run). */
  reference: { label: (s: Series) => string; values: (s: Series) => number | number[] };
  /** A fixed top of the y axis. */
  yMax?: number;
  /** Clip the y axis at this multiple of the reference's maximum (bursts would flatten the rest). */
  clipAt?: number;
  /** Average at least this span into each point, ms (counts per 1 s bin are too coarse to read as a rate). */
  minGroupMs?: number;
}

const CHARTS: ChartSpec[] = [
  { key: 'waiting', title: 'items waiting for a device', yLabel: 'items', values: (s) => s.waiting, reference: { label: (s) => `target ${fmt(s.target)}`, values: (s) => s.target } },
  { key: 'inventory', title: 'inventory (preparing + waiting)', yLabel: 'items', values: (s) => s.inventory, reference: { label: () => 'Little’s-law need', values: (s) => s.need } },
  { key: 'occupancy', title: 'device occupancy', yLabel: 'busy workers ÷ workers', values: (s) => s.occupancy, reference: { label: () => 'all workers busy', values: () => 1 }, yMax: 1 },
  { key: 'dispatch', title: 'dispatch rate', yLabel: 'items/s', values: (s) => s.dispatchRate, reference: { label: () => 'device capacity', values: (s) => s.capacity }, clipAt: 4, minGroupMs: 5000 },
];

const W = 800;
const H = 380;
const PL = 64;
const PR = 600;
const PT = 52;
const PB = 330;

/** Rounds to 1 decimal, without "-0". */
function fmt(n: number): string {
  const v = Math.round(n * 10) / 10;
  return String(v === 0 ? 0 : v);
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** 1, 2 or 5 × 10^k, at least x. */
function niceStep(x: number): number {
  if (!(x > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  const f = x / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

function tickLabel(v: number, step: number): string {
  const decimals = step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step) - 1e-9));
  return v.toFixed(decimals);
}

/** Bins averaged into one point: enough to keep ≤ MAX_POINTS, and to span minGroupMs. */
function groupSize(s: Series, minGroupMs: number): number {
  return Math.max(1, Math.ceil(s.time.length / MAX_POINTS), Math.ceil(minGroupMs / s.binMs));
}

/** Points (ms, value) of a series: whole bins only (the last one is cut short by the run's end), averaged in groups of k. */
function points(s: Series, values: number[], endMs: number, minGroupMs = 0): [number, number][] {
  let n = Math.min(s.time.length, values.length);
  while (n > 1 && (s.time[n - 1] as number) + s.binMs > endMs) n--;
  const k = groupSize(s, minGroupMs);
  const out: [number, number][] = [];
  for (let i = 0; i < n; i += k) {
    const j = Math.min(n, i + k);
    let sum = 0;
    for (let m = i; m < j; m++) sum += values[m] as number;
    out.push([((s.time[i] as number) + (s.time[j - 1] as number) + s.binMs) / 2, sum / (j - i)]);
  }
  return out;
}

/** "x,y" pairs, dropping the inner points of horizontal runs (they draw nothing). */
function polylinePoints(pts: [number, number][], x: (t: number) => number, y: (v: number) => number): string {
  const xy = pts.map(([t, v]) => [fmt(x(t)), fmt(y(v))] as const);
  return xy
    .filter((p, i) => i === 0 || i === xy.length - 1 || p[1] !== (xy[i - 1] as readonly [string, string])[1] || p[1] !== (xy[i + 1] as readonly [string, string])[1])
    .map((p) => `${p[0]},${p[1]}`)
    .join(' ');
}

/** The x axis's unit for a run of `maxMs`: seconds up to 10 min, minutes up to 10 h, then hours. */
export function timeUnit(maxMs: number): { div: number; label: string } {
  if (maxMs <= 600_000) return { div: 1000, label: 's' };
  if (maxMs <= 36_000_000) return { div: 60_000, label: 'min' };
  return { div: 3_600_000, label: 'h' };
}

/** One chart of a scenario, computed once for the SVG and the HTML reports. */
export interface ChartData {
  key: ChartSpec['key'];
  title: string;
  yLabel: string;
  /** One line per run (pacer): points (ms, value), whole bins averaged in groups of `groupMs`. */
  lines: { pacer: string; points: [number, number][] }[];
  /** The dashed reference: a constant, or points (ms, value) from the longest run. */
  reference: { label: string; value: number | [number, number][] };
  /** The top of the y axis when it is fixed (occupancy) or clipped (bursts); null: fit the data. */
  yMax: number | null;
  /** The y axis was clipped below the data's peak (`dataMax`). */
  clipped: boolean;
  dataMax: number;
  /** The span averaged into each point, ms. */
  groupMs: number;
  /** The x axis's end: the longest run's simulated time, ms. */
  xMaxMs: number;
  /** The steady window of the first run, ms. */
  window: { fromMs: number; toMs: number };
}

/** The four charts of one scenario (waiting, inventory, occupancy, dispatch), one line per run. */
export function scenarioCharts(runs: SimResult[]): ChartData[] {
  return CHARTS.map((spec) => chartData(spec, runs));
}

function chartData(spec: ChartSpec, runs: SimResult[]): ChartData {
  const first = runs[0] as SimResult;
  const longest = runs.reduce((a, b) => (b.simulatedMs > a.simulatedMs ? b : a), first);
  const xMaxMs = Math.max(1, ...runs.map((r) => r.simulatedMs));
  const lines = runs.map((r) => ({ pacer: r.pacer, points: points(r.series, spec.values(r.series), r.simulatedMs, spec.minGroupMs) }));
  const ref = spec.reference.values(longest.series);
  const refPts = typeof ref === 'number' ? null : points(longest.series, ref, longest.simulatedMs, spec.minGroupMs);
  const refMax = typeof ref === 'number' ? ref : Math.max(0, ...(refPts ?? []).map((p) => p[1]));
  const dataMax = Math.max(0, ...lines.flatMap((l) => l.points.map((p) => p[1])));
  let yMax = spec.yMax ?? null;
  let clipped = false;
  if (yMax === null && spec.clipAt !== undefined && refMax > 0 && dataMax > spec.clipAt * refMax) {
    yMax = spec.clipAt * refMax;
    clipped = true;
  }
  return {
    key: spec.key,
    title: spec.title,
    yLabel: spec.yLabel,
    lines,
    reference: { label: spec.reference.label(longest.series), value: refPts ?? refMax },
    yMax,
    clipped,
    dataMax,
    groupMs: groupSize(longest.series, spec.minGroupMs ?? 0) * longest.series.binMs,
    xMaxMs,
    window: { fromMs: first.window.fromMs, toMs: first.window.toMs },
  };
}

function renderChart(spec: ChartSpec, scenario: string, runs: SimResult[], colours: Map<string, string>): string {
  const c = chartData(spec, runs);
  const { xMaxMs, dataMax, clipped } = c;
  const lines = c.lines.map((l) => ({ pacer: l.pacer, pts: l.points }));
  const refPts = typeof c.reference.value === 'number' ? null : c.reference.value;
  const refMax = typeof c.reference.value === 'number' ? c.reference.value : Math.max(0, ...c.reference.value.map((p) => p[1]));
  let top = c.yMax ?? Math.max(dataMax, refMax);
  if (!(top > 0)) top = 1;
  const yStep = spec.yMax !== undefined ? niceStep(top / 5) : niceStep((top * 1.05) / 5);
  const yTop = spec.yMax ?? Math.ceil((top * 1.05) / yStep) * yStep;

  const unit = timeUnit(xMaxMs);
  const xStep = niceStep(xMaxMs / unit.div / 8);
  const x = (t: number) => PL + (t / xMaxMs) * (PR - PL);
  const y = (v: number) => PB - (v / yTop) * (PB - PT);

  const o: string[] = [];
  o.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="12" fill="#222">`);
  o.push(`<title>${esc(`${scenario}: ${spec.title}`)}</title>`);
  o.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  o.push(`<defs><clipPath id="plot"><rect x="${PL}" y="${PT - 2}" width="${PR - PL}" height="${PB - PT + 2}"/></clipPath></defs>`);
  o.push(`<text x="${PL}" y="22" font-size="15" font-weight="bold">${esc(`${scenario}: ${spec.title}`)}</text>`);
  const note = clipped ? ` · y axis clipped at ${fmt(yTop)} (peak ${fmt(dataMax)})` : '';
  o.push(`<text x="${PL}" y="40" font-size="11" fill="#666">steady window shaded · points average ${fmt(c.groupMs / 1000)} s${esc(note)}</text>`);

  // Steady window.
  const w0 = Math.max(0, c.window.fromMs);
  const w1 = Math.min(xMaxMs, c.window.toMs);
  if (w1 > w0) o.push(`<rect x="${fmt(x(w0))}" y="${PT}" width="${fmt(x(w1) - x(w0))}" height="${PB - PT}" fill="#4e79a7" fill-opacity="0.08"/>`);

  // Grid and y ticks.
  for (let i = 0; i * yStep <= yTop + yStep * 1e-9; i++) {
    const v = i * yStep;
    const yy = fmt(y(v));
    if (i > 0) o.push(`<line x1="${PL}" y1="${yy}" x2="${PR}" y2="${yy}" stroke="#e6e6e6"/>`);
    o.push(`<text x="${PL - 6}" y="${yy}" dy="4" text-anchor="end">${tickLabel(v, yStep)}</text>`);
  }
  // x ticks.
  for (let i = 0; i * xStep * unit.div <= xMaxMs * (1 + 1e-9); i++) {
    const xx = fmt(x(i * xStep * unit.div));
    o.push(`<line x1="${xx}" y1="${PB}" x2="${xx}" y2="${PB + 4}" stroke="#333"/>`);
    o.push(`<text x="${xx}" y="${PB + 17}" text-anchor="middle">${tickLabel(i * xStep, xStep)}</text>`);
  }
  o.push(`<line x1="${PL}" y1="${PB}" x2="${PR}" y2="${PB}" stroke="#333"/>`);
  o.push(`<line x1="${PL}" y1="${PT}" x2="${PL}" y2="${PB}" stroke="#333"/>`);
  o.push(`<text x="${(PL + PR) / 2}" y="${PB + 36}" text-anchor="middle">time (${unit.label})</text>`);
  o.push(`<text transform="translate(16 ${(PT + PB) / 2}) rotate(-90)" text-anchor="middle">${esc(spec.yLabel)}</text>`);

  // Reference, then one line per pacer.
  const dash = 'stroke="#555" stroke-width="1.5" stroke-dasharray="6 4"';
  o.push('<g clip-path="url(#plot)">');
  if (refPts === null) o.push(`<line class="reference" x1="${PL}" y1="${fmt(y(refMax))}" x2="${PR}" y2="${fmt(y(refMax))}" ${dash}/>`);
  else o.push(`<polyline class="reference" fill="none" ${dash} points="${polylinePoints(refPts, x, y)}"/>`);
  for (const l of lines) {
    o.push(`<polyline class="pacer" data-pacer="${esc(l.pacer)}" fill="none" stroke="${colours.get(l.pacer) ?? '#000'}" stroke-width="1.5" stroke-linejoin="round" points="${polylinePoints(l.pts, x, y)}"/>`);
  }
  o.push('</g>');

  // Legend.
  const lx = PR + 20;
  let ly = PT + 6;
  for (const l of lines) {
    o.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 24}" y2="${ly}" stroke="${colours.get(l.pacer) ?? '#000'}" stroke-width="3"/>`);
    o.push(`<text x="${lx + 30}" y="${ly}" dy="4">${esc(l.pacer)}</text>`);
    ly += 18;
  }
  o.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 24}" y2="${ly}" ${dash}/>`);
  o.push(`<text x="${lx + 30}" y="${ly}" dy="4">${esc(c.reference.label)}</text>`);
  ly += 18;
  o.push(`<rect x="${lx}" y="${ly - 6}" width="24" height="12" fill="#4e79a7" fill-opacity="0.08" stroke="#ccc"/>`);
  o.push(`<text x="${lx + 30}" y="${ly}" dy="4">steady window</text>`);
  o.push('</svg>');
  return `${o.join('\n')}\n`;
}

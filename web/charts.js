// The dashboard's rolling line charts (uPlot, loaded as a global by index.html) and readouts.
import { $, clock, el, fmtNum } from './format.js';

const { uPlot } = window;

/** Seconds of history the charts show (the server keeps an hour). */
export const WINDOW_S = 600;

export const PALETTE = ['#1f5fbf', '#e07b1a', '#2e9b5a', '#7c4dbf', '#d23c3c', '#0f8f8f', '#b0457d', '#6b7a1f'];

/** A rolling uPlot line chart: x in epoch seconds, one array per series. */
export class Chart {
  constructor(id, series, { yMin = 0, yMax = null, fmt = (v) => fmtNum(v) } = {}) {
    this.el = $(id);
    this.series = series;
    this.data = [[], ...series.map(() => [])];
    this.fmt = fmt;
    /** The x axis ends at the server's now and spans what there is (at least a minute, at most the window): distinct tick labels from the first poll. */
    this.until = Date.now() / 1000;
    const opts = {
      width: Math.max(300, this.el.clientWidth),
      height: 200,
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: true, range: () => [Math.max(this.until - WINDOW_S, Math.min(this.data[0][0] ?? this.until, this.until - 60)), this.until] },
        y: {
          range: (_u, min, max) => {
            const hi = yMax ?? Math.max(max ?? 0, yMin + 1e-9);
            const top = yMax ?? (hi <= 0 ? 1 : hi * 1.1);
            return [Math.min(yMin, min ?? yMin), top];
          },
        },
      },
      axes: [
        { stroke: '#5f6b78', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#d9dde3' }, space: 80, values: (_u, vals) => vals.map((v) => clock(v)) },
        { stroke: '#5f6b78', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#d9dde3' }, size: 76, values: (_u, vals) => vals.map((v) => fmt(v)) },
      ],
      series: [
        {},
        ...series.map((s, i) => ({
          label: s.label,
          stroke: s.stroke ?? PALETTE[i % PALETTE.length],
          width: s.width ?? 1.5,
          dash: s.dash,
          fill: s.fill,
          spanGaps: false,
          points: { show: false },
          value: (_u, v) => fmt(v),
        })),
      ],
    };
    this.plot = new uPlot(opts, this.data, this.el);
    new ResizeObserver(() => {
      const w = Math.max(300, this.el.clientWidth);
      if (Math.abs(w - this.plot.width) > 2) this.plot.setSize({ width: w, height: 200 });
    }).observe(this.el);
  }

  /** Appends one point (values in series order; null for none) and drops points older than the window; showUntil() draws. */
  push(t, values) {
    const xs = this.data[0];
    if (xs.length > 0 && t <= xs[xs.length - 1]) return;
    xs.push(t);
    values.forEach((v, i) => this.data[i + 1].push(v === undefined || (typeof v === 'number' && !Number.isFinite(v)) ? null : v));
    let drop = 0;
    while (drop < xs.length && xs[drop] < t - WINDOW_S) drop++;
    if (drop > 0) for (const arr of this.data) arr.splice(0, drop);
    this.el.dataset.points = String(xs.length);
    this.el.dataset.t = String(t);
    this.el.dataset.last = JSON.stringify(values.map((v) => (typeof v === 'number' ? Math.round(v * 1000) / 1000 : v)));
  }

  /** Draws the points held, the x axis ending at `nowS` (epoch s). */
  showUntil(nowS) {
    this.until = nowS;
    this.plot.setData(this.data);
  }
}

/** A readout line: "label value · label value". */
export function readout(id, parts) {
  const r = $(id);
  r.replaceChildren();
  parts.forEach(([label, value], i) => {
    if (i > 0) r.append(' · ');
    r.append(`${label} `, el('b', { text: value }));
  });
}

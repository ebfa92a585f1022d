/** Metric values for people, by the metric's name (the CLI's tables and the HTML report). */

const GiB = 1024 ** 3;

/** How a metric prints, by its name. */
export type MetricKind = 'ratio' | 'ms' | 'bytes' | 'mean' | 'count';

export function metricKind(name: string): MetricKind {
  if (/Ratio$/.test(name) || name === 'occupancy') return 'ratio';
  if (/Ms$/.test(name)) return 'ms';
  if (/Bytes$/.test(name)) return 'bytes';
  if (/(Mean|Std|PerSec)$/.test(name)) return 'mean';
  return 'count';
}

/**
 * One metric value for people: ratios with 3 decimals, ms as seconds with 1 decimal
 * (`jobLatencyP50Ms` 194_400 → `194.4 s`; under a second as ms, 29 → `29 ms`), bytes as GiB with 1 decimal, means and standard
 * deviations with 2 decimals, counts as integers, null as `–`.
 */
export function formatMetric(name: string, value: number | null | undefined): string {
  if (value === null || value === undefined || Number.isNaN(value)) return '–';
  if (!Number.isFinite(value)) return value > 0 ? '∞' : '-∞';
  switch (metricKind(name)) {
    case 'ratio':
      return value.toFixed(3);
    case 'ms':
      // (Under a second, in ms: a 29 ms job latency read "0.0 s".)
      if (value !== 0 && Math.abs(value) < 950) return `${Math.abs(value) < 10 ? value.toFixed(1) : Math.round(value)} ms`;
      return `${(value / 1000).toFixed(1)} s`;
    case 'bytes':
      // A small non-zero amount must not read as nothing (a leak of a few bytes is still a leak).
      if (value !== 0 && Math.abs(value) < 0.05 * GiB) return `${value < 0 ? '-' : ''}<0.1 GiB`;
      return `${(value / GiB).toFixed(1)} GiB`;
    case 'mean':
      return value.toFixed(2);
    case 'count':
      return Number.isInteger(value) ? String(value) : String(Math.round(value));
  }
}

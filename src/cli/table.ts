const GiB = 1024 ** 3;

/** A cell that reads as a number ("0.998", "194.4 s", "–", "<0.1 GiB") is right-aligned. */
const NUMERIC = /^(?:[-+]?[<∞]?\d[\d.,]*(?:\s?\S+)?|–|∞|[-+]?\d+(?:\/\d+)+)$/;

/**
 * An aligned text table: a header row, a rule, then the rows; two spaces between columns.
 * Columns whose cells all read as numbers are right-aligned, others left-aligned, unless
 * `align` says otherwise. Lines carry no trailing spaces and end with a newline.
 */
export function formatTable(headers: string[], rows: string[][], align?: ('left' | 'right')[]): string {
  const cols = Math.max(headers.length, ...rows.map((r) => r.length));
  const width = (s: string) => [...s].length;
  const widths: number[] = [];
  const aligns: ('left' | 'right')[] = [];
  for (let c = 0; c < cols; c++) {
    const cells = rows.map((r) => r[c] ?? '');
    widths.push(Math.max(width(headers[c] ?? ''), ...cells.map(width)));
    const numeric = cells.length > 0 && cells.every((s) => s === '' || NUMERIC.test(s));
    aligns.push(align?.[c] ?? (numeric ? 'right' : 'left'));
  }
  const line = (cells: string[]) =>
    cells
      .map((s, c) => {
        const pad = ' '.repeat(Math.max(0, (widths[c] as number) - width(s)));
        return aligns[c] === 'right' ? pad + s : s + pad;
      })
      .join('  ')
      .trimEnd();
  const body = [line(Array.from({ length: cols }, (_, c) => headers[c] ?? '')), widths.map((w) => '─'.repeat(w)).join('  ')];
  for (const r of rows) body.push(line(Array.from({ length: cols }, (_, c) => r[c] ?? '')));
  return `${body.join('\n')}\n`;
}

/** How a metric prints, by its name. */
export type MetricKind = 'ratio' | 'ms' | 'bytes' | 'mean' | 'count';

export function metricKind(name: string): MetricKind {
  if (/Ratio$/.test(name) || name === 'occupancy') return 'ratio';
  if (/Ms$/.test(name)) return 'ms';
  if (/Bytes$/.test(name)) return 'bytes';
  if (/(Mean|Std)$/.test(name)) return 'mean';
  return 'count';
}

/**
 * One metric value for people: ratios with 3 decimals, ms as seconds with 1 decimal
 * (`jobLatencyP50Ms` 194_400 → `194.4 s`), bytes as GiB with 1 decimal, means and standard
 * deviations with 2 decimals, counts as integers, null as `–`.
 */
export function formatMetric(name: string, value: number | null | undefined): string {
  if (value === null || value === undefined || Number.isNaN(value)) return '–';
  if (!Number.isFinite(value)) return value > 0 ? '∞' : '-∞';
  switch (metricKind(name)) {
    case 'ratio':
      return value.toFixed(3);
    case 'ms':
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

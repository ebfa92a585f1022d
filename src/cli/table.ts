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

// Metric formatting lives with the metrics (the HTML report uses it too); the CLI's tables re-export it.
export { formatMetric, metricKind, type MetricKind } from '../sim/format.js';

/** Bytes in the largest unit that keeps them ≥ 1 (a plan for items of kilobytes must not read 0.0 MiB everywhere). */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (u < units.length - 1 && n >= 1024 ** (u + 1)) u++;
  return u === 0 ? `${n} B` : `${(n / 1024 ** u).toFixed(1)} ${units[u]}`;
}

const JSON_DEPTH = 64;

/**
 * JSON as `JSON.stringify(v, null, 2)` writes it, but an array of numbers, strings, booleans and
 * nulls on one line: a result of vectors read one number per line (a 40 × 16 embedding, 700 lines).
 */
export function formatJson(v: unknown, indent = ''): string {
  // (Nested deeper than anyone reads: the rest on one line, and no recursion to run out of stack.)
  if (indent.length > 2 * JSON_DEPTH) return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) {
    if (v.length === 0) return '[]';
    // (Array.from, not map: a hole is null, as JSON.stringify writes it.)
    const items = Array.from(v, (x: unknown) => (x === undefined || typeof x === 'function' || typeof x === 'symbol' ? null : x));
    if (items.every((x) => x === null || typeof x !== 'object')) return `[${items.map((x) => JSON.stringify(x)).join(', ')}]`;
    const inner = `${indent}  `;
    return `[\n${items.map((x) => inner + formatJson(x, inner)).join(',\n')}\n${indent}]`;
  }
  if (v !== null && typeof v === 'object' && typeof (v as { toJSON?: unknown }).toJSON !== 'function') {
    const entries = Object.entries(v).filter(([, x]) => x !== undefined && typeof x !== 'function' && typeof x !== 'symbol');
    if (entries.length === 0) return '{}';
    const inner = `${indent}  `;
    return `{\n${entries.map(([k, x]) => `${inner}${JSON.stringify(k)}: ${formatJson(x, inner)}`).join(',\n')}\n${indent}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

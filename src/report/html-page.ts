import fs from 'node:fs';
import { createRequire } from 'node:module';

let uplotAssets: { js: string; css: string } | undefined;

/** uPlot's minified script and stylesheet from node_modules (read once). */
function uplot(): { js: string; css: string } {
  if (uplotAssets) return uplotAssets;
  const require = createRequire(import.meta.url);
  let jsFile: string;
  let cssFile: string;
  try {
    jsFile = require.resolve('uplot/dist/uPlot.iife.min.js');
    cssFile = require.resolve('uplot/dist/uPlot.min.css');
  } catch {
    throw new Error('the HTML report needs the uplot package (a dependency of stoker): run npm install');
  }
  const raw = fs.readFileSync(jsFile, 'utf8');
  const version = /\(v([\d.]+)\)/.exec(raw.slice(0, 200))?.[1] ?? '1';
  // The banner is a URL; the page names uPlot and its licence without one.
  const js = `/* uPlot ${version}, MIT License, Copyright (c) Leon Sorokin */\n${raw.replace(/^\/\*![^*]*\*\/\s*/, '').replace(/<\/script/gi, '<\\/script')}`;
  uplotAssets = { js, css: fs.readFileSync(cssFile, 'utf8') };
  return uplotAssets;
}

/** Text safe in HTML content and attribute values. */
export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** JSON that is safe inside a script element: no `</script`, no `<!--`. */
export function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c');
}

/** A table: the first column row headers, numbers right-aligned. */
export function tableHtml(headers: string[], rows: string[][], className: string): string {
  const head = headers.map((h) => `<th>${esc(h)}</th>`).join('');
  // Numbers (and "–") right-aligned, names left-aligned.
  const cell = (c: string) => (/^(?:[-+<∞–]|\d)/.test(c) ? `<td>${esc(c)}</td>` : `<td class="text">${esc(c)}</td>`);
  const body = rows.map((r) => `<tr>${r.map((c, i) => (i === 0 ? `<th>${esc(c)}</th>` : cell(c))).join('')}</tr>`).join('\n');
  return `<div class="table"><table class="${className}"><thead><tr>${head}</tr></thead><tbody>\n${body}\n</tbody></table></div>`;
}

/**
 * The frame every Stoker HTML page shares: uPlot's script and stylesheet inlined, the page's data
 * embedded as JSON in `<script type="application/json" id="stoker-data">`, the page's own script
 * after them. The file references no URL and opens offline.
 */
export function htmlPage(p: { title: string; body: string; data: unknown; script: string }): string {
  const { js, css } = uplot();
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="stoker">
<title>${esc(p.title)}</title>
<style>
${css}
</style>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px auto; max-width: 1400px; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ddd; }
.note { color: #666; margin: 4px 0; }
table { border-collapse: collapse; margin: 12px 0; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th:first-child, thead th, td.text { text-align: left; } tbody th { font-weight: normal; }
.table { overflow-x: auto; }
pre.fit { white-space: pre-wrap; overflow-wrap: anywhere; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; }
.chart { min-width: 0; overflow: hidden; } .chart .u-title { font-size: 14px; }
.chart-note { color: #666; font-size: 12px; margin: 0 0 4px 8px; }
</style>
</head>
<body>
<h1>${esc(p.title)}</h1>
${p.body}
<script type="application/json" id="stoker-data">${scriptJson(p.data)}</script>
<script>
${js}
</script>
<script>
${p.script}
</script>
</body>
</html>
`;
}

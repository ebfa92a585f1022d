/**
 * docs/grafana-dashboard.json uses only metrics the server exports: every metric name in every
 * panel query (and template variable) appears in a scrape of a real server after a job ran.
 */
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { http, useServer } from './helpers.js';

const DASHBOARD = new URL('../../docs/grafana-dashboard.json', import.meta.url);

/** PromQL words that are not metric names. */
const WORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset', 'le']);

/** The metric names a PromQL expression reads: identifiers outside label matchers, ranges and by (...) lists that are not function calls. */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of bare.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?/g)) {
    const [word, call] = [m[0].replace(/\s*\($/, ''), m[1]];
    if (call || WORDS.has(word) || /^\d/.test(word) || /^e\d+$/.test(word)) continue;
    names.add(word);
  }
  return [...names];
}

describe('the Grafana dashboard in docs/', () => {
  const fixture = useServer();

  it('parses metric names out of PromQL', () => {
    expect(metricNames('histogram_quantile(0.99, sum by (kind, le) (rate(stoker_job_seconds_bucket{job=~"$job", state="done"}[5m])))')).toEqual(['stoker_job_seconds_bucket']);
    expect(metricNames('nodejs_heap_size_used_bytes{job=~"$job"} / 1e9')).toEqual(['nodejs_heap_size_used_bytes']);
    expect(metricNames('sum by (device) (rate(a_total[1m])) / sum by (device) (b)')).toEqual(['a_total', 'b']);
  });

  it('reads only metrics a scrape has', async () => {
    expect((await http(fixture.server.url, 'POST', '/v1/jobs', { id: 'g-1', kind: 'sleep', partitions: 2 })).status).toBe(202);
    expect((await http(fixture.server.url, 'GET', '/v1/jobs/g-1/result?wait=20s')).body.state).toBe('done');
    const scrape = await (await fetch(`${fixture.server.url}/metrics`)).text();
    const exported = new Set(scrape.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => /^[A-Za-z_:][A-Za-z0-9_:]*/.exec(l)?.[0]));
    const dash = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8')) as { panels: { title: string; targets: { expr: string }[] }[]; templating: { list: { query?: unknown }[] } };
    const exprs = [...dash.panels.flatMap((p) => p.targets.map((t) => ({ where: p.title, expr: t.expr }))), ...dash.templating.list.filter((v) => typeof v.query === 'string' && v.query.includes('(')).map((v) => ({ where: 'templating', expr: String(v.query).replace(/^label_values\((.*),\s*\w+\)$/, '$1') }))];
    expect(exprs.length).toBeGreaterThan(15);
    let checked = 0;
    for (const { where, expr } of exprs) {
      const names = metricNames(expr);
      expect(names.length, `${where}: ${expr}`).toBeGreaterThan(0);
      for (const n of names) {
        expect(exported.has(n), `${where}: ${n} is not in a scrape`).toBe(true);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(15);
  }, 30_000);
});

/**
 * The metrics as a real Prometheus sees them: Debian's `prometheus` on loopback scraping a real
 * `stoker serve` every second. The first failed job after a start shows in increase() (the series
 * exists at 0 from the start), histogram quantiles of device time are within 20 % of the true
 * ones (the device spans of the server's own timeline) on a run with known stage times, and a
 * scrape passes `promtool check metrics`.
 *
 * Without /usr/bin/prometheus and /usr/bin/promtool the test is skipped with a warning, or fails
 * when STOKER_REQUIRE_PROMETHEUS=1 (CI sets it once it has installed the package).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, http, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess } from './helpers.js';

const PROMETHEUS = '/usr/bin/prometheus';
const PROMTOOL = '/usr/bin/promtool';
const have = fs.existsSync(PROMETHEUS) && fs.existsSync(PROMTOOL);
const required = process.env['STOKER_REQUIRE_PROMETHEUS'] === '1';
if (!have && !required) console.warn('SKIPPED: test/server/prometheus.test.ts: prometheus is not installed (apt-get install prometheus; with STOKER_REQUIRE_PROMETHEUS=1 this fails instead)');

describe.skipIf(!have && !required)('metrics scraped by a real Prometheus', () => {
  let dir: string;
  let server: ServerProcess;
  let prom: ChildProcess | undefined;
  let promUrl: string;
  let promLog = '';

  /** An instant query's single value (undefined when the result is empty). */
  async function query(q: string): Promise<number | undefined> {
    const r = await http(promUrl, 'GET', `/api/v1/query?query=${encodeURIComponent(q)}`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const v = (r.body as { data: { result: { value: [number, string] }[] } }).data.result[0]?.value[1];
    return v === undefined ? undefined : Number(v);
  }

  beforeAll(async () => {
    if (!have) throw new Error('prometheus is not installed and STOKER_REQUIRE_PROMETHEUS=1: apt-get install prometheus');
    dir = tempDataDir();
    server = await startServer(dir, [], { STOKER_DEVICE_WORKERS: '2' });
    const target = new URL(server.url).host;
    const port = await freePort();
    promUrl = `http://127.0.0.1:${port}`;
    fs.writeFileSync(path.join(dir, 'prometheus.yml'), `global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: stoker\n    static_configs:\n      - targets: ['${target}']\n`);
    prom = spawn(PROMETHEUS, [`--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'tsdb')}`, `--web.listen-address=127.0.0.1:${port}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    prom.stdout?.on('data', (b: Buffer) => (promLog += b.toString()));
    prom.stderr?.on('data', (b: Buffer) => (promLog += b.toString()));
    // Two scrapes of the fresh server before anything fails.
    await waitUntil(async () => {
      try {
        return ((await query('count_over_time(up{job="stoker"}[1m])')) ?? 0) >= 2 && (await query('up{job="stoker"}')) === 1 ? true : undefined;
      } catch {
        return undefined;
      }
    }, 30_000, `two scrapes by prometheus:\n${promLog}`, 250);
  }, 60_000);

  afterAll(async () => {
    if (prom && prom.exitCode === null) {
      const exited = new Promise((r) => prom?.once('exit', r));
      prom.kill('SIGTERM');
      await exited;
    }
    await server?.stop();
    if (dir) removeDir(dir);
  }, 30_000);

  it('increase() of the failed-jobs counter sees the first failure after a start', async () => {
    // Already scraped at 0 before any job failed.
    expect(await query('stoker_jobs_ended_total{kind="sleep",state="failed"}')).toBe(0);
    const deadline = new Date(Date.now() + 1500).toISOString();
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'late', kind: 'sleep', partitions: 1, deadline, input: { prepareMs: 10_000 } })).status).toBe(202);
    await waitUntil(async () => ((await http(server.url, 'GET', '/v1/jobs/late')).body.state === 'failed' ? true : undefined), 15_000, 'the job to miss its deadline', 100);
    const seen = await waitUntil(async () => {
      const v = await query('increase(stoker_jobs_ended_total{kind="sleep",state="failed"}[30s])');
      return v !== undefined && v > 0 ? v : undefined;
    }, 15_000, 'increase() to see the failure', 500);
    // One failure; increase() extrapolates to the window's edges, so a little above 1.
    expect(seen).toBeGreaterThanOrEqual(0.9);
    expect(seen).toBeLessThan(3);
  }, 45_000);

  it('device-time quantiles are within 20 % of the true ones, and a scrape passes promtool', async () => {
    // Known stage times: a third of the partitions take 20 ms on the device, a third 40, a third 80.
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) {
      const deviceMs = [20, 40, 80][i % 3] as number;
      const id = `q-${i}`;
      ids.push(id);
      expect((await http(server.url, 'POST', '/v1/jobs', { id, kind: 'sleep', partitions: 5, input: { prepareMs: 5, deviceMs, seed: i } })).status).toBe(202);
    }
    for (const id of ids) expect((await http(server.url, 'GET', `/v1/jobs/${id}/result?wait=30s`)).body.state).toBe('done');
    // The truth: the device spans the server recorded (the worker's own measure is within a ms of them).
    const tl = (await http(server.url, 'GET', '/v1/timeline?since=5m')).body as { spans: { kind: string; jobId: string; start: number; end: number }[] };
    const truthMs = tl.spans.filter((s) => s.kind === 'device' && s.jobId.startsWith('q-')).map((s) => s.end - s.start).sort((a, b) => a - b);
    expect(truthMs).toHaveLength(60);
    const truth = (q: number) => (truthMs[Math.ceil(q * truthMs.length) - 1] as number) / 1000;
    // Let two more scrapes land.
    const done = await waitUntil(async () => {
      const v = await query('stoker_device_seconds_count{kind="sleep"}');
      return v !== undefined && v >= 60 ? v : undefined;
    }, 15_000, 'prometheus to have the device histogram', 500);
    expect(done).toBeGreaterThanOrEqual(60);
    for (const q of [0.25, 0.5, 0.9]) {
      const est = await query(`histogram_quantile(${q}, sum by (le) (stoker_device_seconds_bucket{kind="sleep"}))`);
      const t = truth(q);
      expect(est, `p${q * 100}`).toBeDefined();
      console.log(`device time p${q * 100}: histogram ${((est as number) * 1000).toFixed(1)} ms, true ${(t * 1000).toFixed(1)} ms (${(((est as number) / t - 1) * 100).toFixed(1)} %)`);
      expect(Math.abs((est as number) / t - 1), `p${q * 100}: ${est} vs ${t}`).toBeLessThanOrEqual(0.2);
    }
    const scrape = await fetch(`${server.url}/metrics`).then((r) => r.text());
    const check = spawnSync(PROMTOOL, ['check', 'metrics'], { input: scrape, encoding: 'utf8' });
    expect(`${check.stdout}${check.stderr}`.trim()).toBe('');
    expect(check.status).toBe(0);
  }, 90_000);
});

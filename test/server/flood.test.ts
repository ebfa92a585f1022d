/**
 * Admission never starves execution: a high-priority job of many short partitions runs alone,
 * then again while clients flood the server with submits on 16, 64 and 256 connections. The test
 * prints the job's completion rate (partitions/s, from the server's own timestamps) unloaded and
 * under each flood, their ratio, and what the flood got (accepted, refused, submit latency).
 * Rates are printed, not asserted (machines here are shared and noisy); asserted: every job ends
 * correctly and the priorities hold (no flood job starts before the backlog has all started).
 */
import { describe, expect, it } from 'vitest';
import { http, sleepTotal, useServer } from './helpers.js';

const PARTITIONS = 1500;
const DEVICE_MS = 3;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? NaN;
}

describe('a submit flood', () => {
  const fixture = useServer([], { STOKER_SERVER_MAX_PENDING_JOBS: '100000', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0' });
  const rates: Record<string, number> = {};

  /** Runs the backlog job (and `connections` flooding clients while it runs); returns its partitions/s. */
  async function run(name: string, connections: number): Promise<void> {
    const url = fixture.server.url;
    const id = `backlog-${name}`;
    const seed = connections;
    const submitted = await http(url, 'POST', '/v1/jobs', { id, kind: 'sleep', priority: 'high', partitions: PARTITIONS, input: { seed, prepareMs: 1, deviceMs: DEVICE_MS } });
    expect(submitted.status).toBe(202);
    let ended = false;
    const statuses = new Map<number, number>();
    const latencies: number[] = [];
    const flooded: string[] = [];
    let n = 0;
    const flood = Array.from({ length: connections }, async () => {
      while (!ended) {
        const fid = `flood-${name}-${n++}`;
        const t = performance.now();
        const r = await fetch(new URL('/v1/jobs', url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: fid, kind: 'sleep', partitions: 1, input: { seed: n, prepareMs: 1, deviceMs: 1 } }) });
        await r.text();
        latencies.push(performance.now() - t);
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status === 202) flooded.push(fid);
      }
    });
    const result = await http(url, 'GET', `/v1/jobs/${id}/result?wait=120s`);
    ended = true;
    await Promise.all(flood);
    expect(result.status).toBe(200);
    expect(result.body).toMatchObject({ state: 'done', result: { partitions: PARTITIONS, total: sleepTotal(seed, PARTITIONS) } });
    const job = (await http(url, 'GET', `/v1/jobs/${id}`)).body as { startedAt: string; finishedAt: string };
    const seconds = (Date.parse(job.finishedAt) - Date.parse(job.startedAt)) / 1000;
    rates[name] = PARTITIONS / seconds;
    await drained();
    if (connections > 0) {
      // The flood's jobs queued behind the high-priority backlog: none started preparing before
      // the backlog's last partition had (it finishes its last partitions beside them).
      const spans = ((await http(url, 'GET', '/v1/timeline?since=10m&limit=50000')).body as { spans: { kind: string; jobId: string; start: number }[] }).spans.filter((sp) => sp.kind === 'prepare');
      const lastBacklog = Math.max(...spans.filter((sp) => sp.jobId === id).map((sp) => sp.start));
      const firstFlood = Math.min(...spans.filter((sp) => sp.jobId.startsWith(`flood-${name}-`)).map((sp) => sp.start));
      expect(flooded.length).toBeGreaterThan(0);
      expect(firstFlood).toBeGreaterThanOrEqual(lastBacklog);
      latencies.sort((a, b) => a - b);
      const accepted = statuses.get(202) ?? 0;
      console.log(
        `flood on ${connections} connections: the backlog ran at ${rates[name]?.toFixed(0)} partitions/s, ${((rates[name] ?? 0) / (rates['unloaded'] ?? NaN)).toFixed(2)}× unloaded; ` +
          `the flood got ${accepted} accepted (${(accepted / seconds).toFixed(0)}/s), ${JSON.stringify(Object.fromEntries(statuses))}; submit p50 ${percentile(latencies, 0.5).toFixed(1)} ms, p99 ${percentile(latencies, 0.99).toFixed(1)} ms`,
      );
    } else console.log(`unloaded: the backlog of ${PARTITIONS} partitions (${DEVICE_MS} ms each on 2 workers) ran at ${rates[name]?.toFixed(0)} partitions/s`);
  }

  /** Waits until every accepted job has ended, and checks none failed. */
  async function drained(): Promise<void> {
    for (;;) {
      const s = (await http(fixture.server.url, 'GET', '/v1/status')).body as { jobs: { pending: number; failed: number } };
      expect(s.jobs.failed).toBe(0);
      if (s.jobs.pending === 0) return;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  it('keeps the backlog running, in priority order', { timeout: 300_000 }, async () => {
    await run('unloaded', 0);
    await run('16', 16);
    await run('64', 64);
    await run('256', 256);
  });
});

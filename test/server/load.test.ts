/**
 * "A load test on loopback: 1000 small jobs from concurrent clients all finish; the test prints
 * p50/p99 API latency and jobs/s." 16 client loops submit 1000 one-partition sleep jobs to a real
 * `stoker serve`, then 16 loops long-poll every result. The numbers are printed, not asserted
 * (machines are noisy); that every job finished with the right total is asserted.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { http, metricValue, removeDir, sleepTotal, startServer, tempDataDir, type ServerProcess } from './helpers.js';

const JOBS = 1000;
const CLIENTS = 16;
const dir = tempDataDir();
let server: ServerProcess | undefined;

afterAll(async () => {
  if (server && server.child.exitCode === null && server.child.signalCode === null) await server.crash();
  removeDir(dir);
});

const idOf = (i: number) => `load-${String(i).padStart(4, '0')}`;
const bodyOf = (i: number) => ({ id: idOf(i), kind: 'sleep', partitions: 1, input: { seed: i, prepareMs: i % 6, deviceMs: i % 2 } });

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? NaN;
}

/** Runs `CLIENTS` loops that each take the next index until all `JOBS` are taken. */
async function clients(each: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      for (let i = next++; i < JOBS; i = next++) await each(i);
    }),
  );
}

describe('load on loopback', () => {
  it(`${JOBS} small jobs from ${CLIENTS} concurrent clients all finish`, { timeout: 180_000 }, async () => {
    const s = (server = await startServer(dir, [], { STOKER_SERVER_MAX_PENDING_JOBS: String(10 * JOBS) }));
    const submitMs: number[] = [];
    const statuses = new Map<number, number>();
    const t0 = performance.now();
    await clients(async (i) => {
      const start = performance.now();
      const res = await fetch(new URL('/v1/jobs', s.url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(bodyOf(i)) });
      await res.text();
      submitMs.push(performance.now() - start);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    });
    const tSubmitted = performance.now();
    expect(Object.fromEntries(statuses)).toEqual({ 202: JOBS });

    const results = new Array<{ state: string; result: unknown; durationS?: number } | undefined>(JOBS);
    let polls = 0;
    await clients(async (i) => {
      for (;;) {
        polls++;
        const r = await http(s.url, 'GET', `/v1/jobs/${idOf(i)}/result?wait=30s`);
        expect([200, 202]).toContain(r.status);
        if (r.status === 200) {
          results[i] = r.body;
          return;
        }
      }
    });
    const tEnd = performance.now();

    results.forEach((r, i) => expect(r, idOf(i)).toMatchObject({ state: 'done', error: null, result: { partitions: 1, total: sleepTotal(i, 1) } }));
    const status = await http(s.url, 'GET', '/v1/status');
    expect(status.body.jobs).toMatchObject({ done: JOBS, pending: 0, failed: 0, cancelled: 0 });
    const metrics = (await http(s.url, 'GET', '/metrics')).body as string;
    expect(metricValue(metrics, 'stoker_jobs_ended_total', { kind: 'sleep', state: 'done' })).toBe(JOBS);

    // Job latency (submission to end) as the server measured it, from a sample of the jobs.
    const durations: number[] = [];
    for (let i = 0; i < JOBS; i += 10) durations.push(((await http(s.url, 'GET', `/v1/jobs/${idOf(i)}`)).body.durationS as number) * 1000);
    durations.sort((a, b) => a - b);
    submitMs.sort((a, b) => a - b);
    const f = (ms: number) => ms.toFixed(1);
    console.log(
      `load: ${JOBS} jobs, ${CLIENTS} clients: submit p50 ${f(percentile(submitMs, 0.5))} ms, p99 ${f(percentile(submitMs, 0.99))} ms, max ${f(submitMs.at(-1) ?? NaN)} ms; ` +
        `${Math.round(JOBS / ((tSubmitted - t0) / 1000))} submits/s; job latency p50 ${f(percentile(durations, 0.5))} ms, p99 ${f(percentile(durations, 0.99))} ms; ` +
        `${Math.round(JOBS / ((tEnd - t0) / 1000))} jobs/s end to end (${f(tEnd - t0)} ms, ${polls} result polls)`,
    );
    expect(await s.stop()).toBe(0);
  });
});

/**
 * Bounded cost per request: partitions cost memory from submission on, so the server caps the
 * partitions of unfinished jobs (server.maxPendingPartitions): a job that could never fit gets 400,
 * one that does not fit now 429 with Retry-After. Lists and submit answers give a big job's counts
 * by stage, not a state per partition. The test also prints how long a submit of the default
 * limit's worth of partitions holds the event loop (what a request sent meanwhile waits).
 */
import { describe, expect, it } from 'vitest';
import { http, useServer } from './helpers.js';

describe('server.maxPendingPartitions', () => {
  const fixture = useServer([], { STOKER_SERVER_MAX_PENDING_PARTITIONS: '10', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0' });

  it('refuses a job larger than the limit (400), and one that does not fit beside the pending ones (429)', async () => {
    const job = (id: string, partitions: number) => ({ id, kind: 'sleep', partitions, input: { prepareMs: 600_000 } });
    const big = await http(fixture.server.url, 'POST', '/v1/jobs', job('p-big', 11));
    expect(big.status).toBe(400);
    expect(big.body.detail).toBe('partitions is 11, more than server.maxPendingPartitions (10): split the job, or raise the limit');
    expect((await http(fixture.server.url, 'POST', '/v1/jobs', job('p-1', 6))).status).toBe(202);
    const full = await http(fixture.server.url, 'POST', '/v1/jobs', job('p-2', 6));
    expect(full.status).toBe(429);
    expect(full.headers.get('retry-after')).toBe('5');
    expect(full.body.detail).toContain('6 partitions are pending and this job has 6');
    expect((await http(fixture.server.url, 'GET', '/v1/jobs/p-2')).status).toBe(404);
    expect((await http(fixture.server.url, 'POST', '/v1/jobs', job('p-3', 4))).status).toBe(202);
    // Room again once a job ends.
    expect((await http(fixture.server.url, 'DELETE', '/v1/jobs/p-1')).status).toBe(200);
    expect((await http(fixture.server.url, 'POST', '/v1/jobs', job('p-2', 6))).status).toBe(202);
  });
});

describe('a submit at the default limit', () => {
  const fixture = useServer([], { STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0' });

  it('prints how long a 200,000-partition submit holds the event loop', async () => {
    const t0 = performance.now();
    const submit = http(fixture.server.url, 'POST', '/v1/jobs', { id: 'huge', kind: 'sleep', partitions: 200_000, input: { prepareMs: 600_000 } });
    // Sent right after: it waits for whatever the submit holds the loop for.
    await new Promise((r) => setTimeout(r, 5));
    const s0 = performance.now();
    const status = await http(fixture.server.url, 'GET', '/v1/status');
    const waited = performance.now() - s0;
    expect((await submit).status).toBe(202);
    expect(status.status).toBe(200);
    console.log(`a 200,000-partition submit: answered after ${(performance.now() - t0).toFixed(0)} ms; a status request sent meanwhile waited ${waited.toFixed(0)} ms`);
    const over = await http(fixture.server.url, 'POST', '/v1/jobs', { kind: 'sleep', partitions: 1 });
    expect(over.status).toBe(429);
    // Lists and submit answers stay small: counts by stage, the states only on the job's own view.
    const submitted = (await submit).body as { partitionStates: unknown; partitionCounts: Record<string, number> };
    expect(submitted.partitionStates).toBeNull();
    expect(Object.values(submitted.partitionCounts).reduce((a, b) => a + b, 0)).toBe(200_000);
    const list = await fetch(`${fixture.server.url}/v1/jobs?limit=50`).then((r) => r.text());
    const listed = (JSON.parse(list) as { id: string; partitionStates: unknown; partitionCounts: Record<string, number> }[]).find((j) => j.id === 'huge');
    expect(listed?.partitionStates).toBeNull();
    expect(Object.values(listed?.partitionCounts ?? {}).reduce((a, b) => a + b, 0)).toBe(200_000);
    expect(list.length).toBeLessThan(10_000);
    const one = (await http(fixture.server.url, 'GET', '/v1/jobs/huge')).body as { partitionStates: string[] };
    expect(one.partitionStates).toHaveLength(200_000);
    console.log(`GET /v1/jobs?limit=50 with the 200,000-partition job: ${list.length} bytes`);
  }, 60_000);
});

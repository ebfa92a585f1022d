/**
 * Bounded cost per request: a job's partitions are made lazily (O(1) until dispatched), and the
 * server caps the partitions of unfinished jobs (server.maxPendingPartitions): a job that could
 * never fit gets 400, one that does not fit now 429 with Retry-After. Lists and submit answers give
 * a big job's counts by stage, not a state per partition. The tests print how long a submit of the
 * default limit's worth of partitions holds the event loop (what a request sent meanwhile waits).
 */
import { describe, expect, it } from 'vitest';
import { http, metricValue, useServer } from './helpers.js';

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
    const status = async () => {
      const s0 = performance.now();
      expect((await http(fixture.server.url, 'GET', '/v1/status')).status).toBe(200);
      return performance.now() - s0;
    };
    const alone = await status();
    const t0 = performance.now();
    const submit = http(fixture.server.url, 'POST', '/v1/jobs', { id: 'huge', kind: 'sleep', partitions: 200_000, input: { prepareMs: 600_000 } });
    // Sent right after: it waits for whatever the submit holds the loop for.
    await new Promise((r) => setTimeout(r, 1));
    const waited = await status();
    expect((await submit).status).toBe(202);
    console.log(`a 200,000-partition submit: answered after ${(performance.now() - t0).toFixed(0)} ms; a status request sent meanwhile took ${waited.toFixed(0)} ms (alone: ${alone.toFixed(0)} ms)`);
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
    // The job's own view gives the states a page at a time: 100,000 at most.
    const one = (await http(fixture.server.url, 'GET', '/v1/jobs/huge')).body as { partitionStates: string[]; partitionCounts: Record<string, number> };
    expect(one.partitionStates).toHaveLength(100_000);
    const rest = (await http(fixture.server.url, 'GET', '/v1/jobs/huge?statesFrom=100000&statesLimit=100000')).body as { partitionStates: string[] };
    expect(rest.partitionStates).toHaveLength(100_000);
    expect(rest.partitionStates.every((st) => st === 'queued')).toBe(true);
    const page = (await http(fixture.server.url, 'GET', '/v1/jobs/huge?statesFrom=2&statesLimit=3')).body as { partitionStates: string[] };
    expect(page.partitionStates).toEqual(one.partitionStates.slice(2, 5));
    expect((await http(fixture.server.url, 'GET', '/v1/jobs/huge?statesLimit=100001')).status).toBe(400);
    // Dispatched in partition order: the first ones preparing, the rest (never made yet) queued.
    const preparing = one.partitionCounts.preparing as number;
    expect(preparing).toBeGreaterThan(0);
    expect(one.partitionStates.slice(0, preparing).every((st) => st === 'preparing')).toBe(true);
    expect(one.partitionStates.slice(preparing).every((st) => st === 'queued')).toBe(true);
    console.log(`GET /v1/jobs?limit=50 with the 200,000-partition job: ${list.length} bytes`);
  }, 60_000);
});

describe('jobs of 10⁶ partitions', () => {
  const fixture = useServer([], { STOKER_SERVER_MAX_PENDING_PARTITIONS: '10000000', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0' });

  it('cost O(1) memory until their partitions are dispatched (the issue saw ~300 MB each)', async () => {
    const metrics = async () => (await http(fixture.server.url, 'GET', '/metrics')).body as string;
    // Settle the first requests' allocations, and reset prom-client's event-loop delay window.
    for (let i = 0; i < 3; i++) await metrics();
    const before = metricValue(await metrics(), 'process_resident_memory_bytes');
    const ms: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t = performance.now();
      const r = await http(fixture.server.url, 'POST', '/v1/jobs', { id: `m-${i}`, kind: 'sleep', partitions: 1_000_000, input: { prepareMs: 600_000 } });
      ms.push(performance.now() - t);
      expect(r.status).toBe(202);
    }
    const after = await metrics();
    const grew = metricValue(after, 'process_resident_memory_bytes') - before;
    console.log(
      `five 10⁶-partition submits: answered in ${ms.map((m) => m.toFixed(0)).join(', ')} ms; RSS grew ${(grew / 1e6).toFixed(1)} MB; ` +
        `the event loop's longest delay meanwhile: ${(metricValue(after, 'nodejs_eventloop_lag_max_seconds') * 1000).toFixed(1)} ms`,
    );
    expect(grew).toBeLessThan(100e6);
    const status = (await http(fixture.server.url, 'GET', '/v1/status')).body as { partitions: { queued: number; preparing: number } };
    expect(status.partitions.queued).toBe(5_000_000 - status.partitions.preparing);
    // The single-job view gives a page of states (computed when asked), the last page too.
    const one = (await http(fixture.server.url, 'GET', '/v1/jobs/m-4?statesFrom=950000')).body as { partitionStates: string[]; partitionCounts: Record<string, number> };
    expect(one.partitionStates).toHaveLength(50_000);
    expect((one.partitionCounts.queued as number) + (one.partitionCounts.preparing as number)).toBe(1_000_000);
  }, 60_000);
});

/** The service's Prometheus gauges read from a stand-in source (src/server/metrics.ts): what a gauge shows once what it reads is gone. */
import { describe, expect, it } from 'vitest';
import type { PacerState, ReadonlySnapshot } from '../../src/core/index.js';
import { HeldTime, ServiceMetrics, type MetricsSource } from '../../src/server/metrics.js';

/** A source whose pacer state the test sets. */
function source(state: () => PacerState): MetricsSource {
  return {
    config: { engine: { pacer: 'stoker', targetWaiting: 4, budgetBytes: Infinity, retries: 1, deviceTimeoutS: Infinity, prepareTimeoutS: Infinity, pacerOptions: {} } },
    pool: { stats: () => ({ leasedBytes: 0, idleBytes: 0 }) as never },
    counters: { devices: [{ busyMs: 0, completions: 0 }], waiting: 0, dispatched: 0, deviceCompletions: 0, budgetUsedBytes: 0, budgetTotalBytes: Infinity } as unknown as ReadonlySnapshot,
    kindNames: () => ['k'],
    deviceNames: () => ['gpu'],
    jobCounts: () => [],
    journalFullRefusals: () => 0,
    endedCounts: () => [],
    partitionsByKind: () => ({}),
    workerStates: () => [[{ alive: true, item: null }]],
    workerBusyMs: () => [[0]],
    pacerState: state,
    devicesUnreachable: () => [false],
    budgetBlockedMs: () => 0,
    jobsOnHold: () => 0,
    journalSizes: () => ({ used: 4096, free: 0 }),
  };
}

/** The value lines of one metric in the exposition text. */
async function lines(m: ServiceMetrics, name: string): Promise<string[]> {
  return (await m.registry.metrics()).split('\n').filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
}

describe('gauges that read the pacer', () => {
  it('a limit released, a kind no longer estimated: gone at the next scrape, not kept at their last value', async () => {
    let st: PacerState = { mode: 'steady', ratePerSec: 10, intervalMs: 100, terms: { prepareLimit: 12 }, devices: [{ estimatedPerSec: 10, observedRatio: null, trusted: 'estimate', workerLimit: 1 }], kinds: [{ name: 'k', estimatedPerSec: 10 }] };
    const m = new ServiceMetrics(source(() => st));
    expect(await lines(m, 'stoker_pacer_prepare_limit_partitions')).toEqual(['stoker_pacer_prepare_limit_partitions 12']);
    expect(await lines(m, 'stoker_device_worker_limit')).toEqual(['stoker_device_worker_limit{device="gpu"} 1']);
    expect(await lines(m, 'stoker_kind_estimated_capacity_per_second')).toEqual(['stoker_kind_estimated_capacity_per_second{kind="k"} 10']);
    expect(await lines(m, 'stoker_pacer_target_dispatch_partitions_per_second')).toEqual(['stoker_pacer_target_dispatch_partitions_per_second 10']);
    st = { mode: 'idle', ratePerSec: 10, intervalMs: 100, terms: {}, devices: [{ estimatedPerSec: 10, observedRatio: null, trusted: 'estimate', workerLimit: null }], kinds: [{ name: 'k', estimatedPerSec: null }] };
    expect(await lines(m, 'stoker_pacer_prepare_limit_partitions')).toEqual(['stoker_pacer_prepare_limit_partitions 0']);
    expect(await lines(m, 'stoker_device_worker_limit')).toEqual([]);
    expect(await lines(m, 'stoker_kind_estimated_capacity_per_second')).toEqual([]);
    // Idle: no work is dispatched at the rate it last planned.
    expect(await lines(m, 'stoker_pacer_target_dispatch_partitions_per_second')).toEqual(['stoker_pacer_target_dispatch_partitions_per_second 0']);
  });
});

describe('HeldTime', () => {
  it('sums the time from the step that set the condition to the one that cleared it, and to now while it holds', () => {
    const t = new HeldTime();
    t.step(0, false);
    t.step(100, true);
    t.step(150, true);
    expect(t.totalMs(170)).toBe(70);
    t.step(300, false);
    t.step(400, false);
    expect(t.totalMs(1000)).toBe(200);
    t.step(1000, true);
    expect(t.totalMs(1010)).toBe(210);
  });
});

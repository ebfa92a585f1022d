/**
 * The measurement self-check, end to end: two device processes share one lock (one item at a
 * time) and report only the time they held it as their busy time, so the busy time says twice
 * the device's real capacity. While the device stays saturated the pacer sees it complete half as
 * fast, says so (a `device.measurement` event naming the device and the likely cause, a line on
 * stderr, `stoker_device_observed_capacity_ratio`) and plans with the observed rate.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { MeasurementCheck, slowPreparations, slowSteps } from '../../src/server/measurement-check.js';
import { collectEvents, http, metricValue, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess } from './helpers.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));
const dir = tempDataDir();
const lock = path.join(os.tmpdir(), `stoker-measure-lock-${process.pid}`);
let server: ServerProcess | undefined;
afterAll(async () => {
  if (server && server.child.exitCode === null && server.child.signalCode === null) await server.crash();
  removeDir(dir);
  fs.rmSync(lock, { force: true });
});

describe('a device whose busy time leaves out its lock wait', () => {
  it('is found out: an event and a metric name it, and the pacer plans with the observed rate', async () => {
    server = await startServer(dir, ['--kind', path.join(FIXTURES, 'kinds', 'lock-kind.mjs')], {
      STOKER_DEVICE_WORKERS: '2',
      STOKER_DEVICE_PROCESS: JSON.stringify({ command: process.execPath, args: [path.join(FIXTURES, 'devices', 'lock-device.mjs')] }),
      STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0',
    });
    const stream = await collectEvents(server.url);
    expect((await http(server.url, 'POST', '/v1/jobs', { id: 'm-1', kind: 'lock', partitions: 1500, input: { lock, holdMs: 20 } })).status).toBe(202);
    const event = await waitUntil(async () => stream.events.find((e) => e.type === 'device.measurement'), 60_000, 'a device.measurement event', 200);
    await stream.close();
    expect(event).toMatchObject({ device: 'default', trusted: 'observed' });
    expect(String(event['reason'])).toMatch(/^device default: the pacer now plans with the observed rate: it completes \d\.\d\d× slower than its 2 workers' busy time says: the workers are not really concurrent/);
    const estimated = event['estimatedPerSec'] as number;
    const observed = event['observedPerSec'] as number;
    console.log(`self-check: busy time says ${estimated.toFixed(1)} items/s, the device completed ${observed.toFixed(1)}/s while saturated`);
    // One 20 ms hold at a time: at most 50/s (less the lock's polling), where the busy time says ~100/s.
    expect(observed / estimated).toBeGreaterThan(0.3);
    expect(observed / estimated).toBeLessThan(0.65);
    const metrics = (await http(server.url, 'GET', '/metrics')).body as string;
    expect(metricValue(metrics, 'stoker_device_observed_capacity_ratio', { device: 'default' })).toBeLessThan(0.65);
    const pacer = ((await http(server.url, 'GET', '/v1/status')).body as { pacer: { ratePerSec: number } }).pacer;
    expect(pacer.ratePerSec / observed).toBeGreaterThan(0.8);
    expect(pacer.ratePerSec / observed).toBeLessThan(1.25);
    expect(server.output()).toContain('device default: the pacer now plans with the observed rate');
  }, 90_000);
});

describe('preparations that may never end (no prepareTimeoutS)', () => {
  it('are said once the preparations in flight are on average 10 × the measured latency old, and a minute at least', () => {
    // One preparation started at 0 with a measured latency of 2 s: said past 60 s, not at 59.
    const one = { preparing: 1, preparingStartMsTotal: 0 };
    expect(slowPreparations(one, 59_000, 2000)).toBeUndefined();
    expect(slowPreparations(one, 61_000, 2000)).toBe('the 1 preparation in flight has run 61 s on average, 31 × the measured latency (2.0 s): one that never ends holds its slot, its memory and its place under the preparation limit for good — set engine.prepareTimeoutS (none is set)');
    // A 30 s latency: 10 × it, 300 s.
    expect(slowPreparations(one, 290_000, 30_000)).toBeUndefined();
    expect(slowPreparations(one, 310_000, 30_000)).toMatch(/^the 1 preparation in flight has run 310 s/);
    // A hung one among three young ones: their mean.
    expect(slowPreparations({ preparing: 4, preparingStartMsTotal: 0 + 3 * 250_000 }, 260_000, 1000)).toMatch(/^the 4 preparations in flight have run 73 s on average/);
    // Nothing preparing, or nothing measured: nothing said.
    expect(slowPreparations({ preparing: 0, preparingStartMsTotal: 0 }, 1e9, 1000)).toBeUndefined();
    expect(slowPreparations(one, 1e9, 0)).toBeUndefined();
  });
});

describe('device steps that may never end (no deviceTimeoutS)', () => {
  const item = (jobId: string, partition: number) => ({ jobId, partition });
  it('are those 20 × the device’s time per item old, and a minute at least; batches and idle workers are not', () => {
    const workers = [
      [
        { item: item('a', 3), since: 0 },
        { item: item('b', 0), since: 50_000 },
      ],
      [{ item: null }, { item: item('c', 1) /* a batch: no since */ }],
    ];
    // 80 ms a step: past a minute, the first.
    expect(slowSteps(workers, 61_000, [80, NaN])).toEqual([{ device: 0, worker: 0, job: 'a', partition: 3, ageS: 61, times: 762.5 }]);
    expect(slowSteps(workers, 59_000, [80, NaN])).toEqual([]);
    // 5 s a step: 20 × is 100 s.
    expect(slowSteps(workers, 99_000, [5000, NaN])).toEqual([]);
    expect(slowSteps(workers, 101_000, [5000, NaN]).map((x) => x.job)).toEqual(['a']);
    // Unknown time per item: a minute alone.
    expect(slowSteps(workers, 111_000, [NaN, NaN]).map((x) => x.job)).toEqual(['a', 'b']);
  });

  it('name a hung step as a cause of a device slower than its busy time (a fleet trial read it as workers behind a lock)', () => {
    const lines: string[] = [];
    const devices = [{ name: 'default', config: { workers: 2 } }] as unknown as ConstructorParameters<typeof MeasurementCheck>[0];
    const hung = [{ device: 0, worker: 1, job: 'hang-1', partition: 3, ageS: 76, times: 950 }];
    const check = new MeasurementCheck(devices, () => {}, (l) => lines.push(l), () => hung);
    const state = (trusted: 'estimate' | 'observed') => ({ mode: 'steady', ratePerSec: 1, intervalMs: 1, terms: {}, devices: [{ estimatedPerSec: 25, observedRatio: 0.5, trusted, workerLimit: null }] }) as Parameters<MeasurementCheck['check']>[0];
    check.check(state('estimate'));
    check.check(state('observed'));
    expect(lines).toEqual(['stoker serve: device default: the pacer now plans with the observed rate: it completes 2.00× slower than its 2 workers\' busy time says: a step that does not end holds a worker (worker 1: job hang-1 partition 3, 76 s: set engine.deviceTimeoutS to end such a step) — or the workers are not really concurrent (one GPU behind a lock?), or the busy time leaves out a wait (a lock, a queue) — report the time each item occupied its worker, or declare fewer workers']);
  });
});

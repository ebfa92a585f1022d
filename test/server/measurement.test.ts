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
import { slowPreparations } from '../../src/server/measurement-check.js';
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

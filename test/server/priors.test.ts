/**
 * Remembered rates: a server saves what it measured (device time per item, preparation latency)
 * beside its journal and its next start begins the pacer from them — no bootstrap, a rate before
 * the first completion, said on the start line. `[device] priorServiceMs` in the config wins.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { measuredPriors, readPriors, writePriors } from '../../src/server/priors.js';
import { snapshot } from '../core/helpers.js';
import { http, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess } from './helpers.js';

const dirs: string[] = [];
const servers: ServerProcess[] = [];
afterAll(async () => {
  for (const s of servers) if (s.child.exitCode === null && s.child.signalCode === null) await s.crash();
  for (const d of dirs) removeDir(d);
});

describe('the priors file', () => {
  it('round-trips; keeps what the run did not measure; ignores a file that is not one', () => {
    const dir = tempDataDir();
    dirs.push(dir);
    expect(readPriors(dir)).toBeUndefined();
    // Two kinds on the default device: 3 × 40 ms and 1 × 280 ms.
    const kinds = [
      { name: 'small', devices: [0, 1], preparing: 0, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions: [3, 0], busyMs: [120, 0] },
      { name: 'big', devices: [0, 1], preparing: 0, waiting: 0, onDevice: 0, prepareCompletions: 0, prepareLatencyMsTotal: 0, prepareLatencySqTotal: 0, completions: [1, 0], busyMs: [280, 0] },
    ];
    const s = snapshot({ devices: [{ workers: 2, busy: 0, completions: 4, busyMs: 400 }, { workers: 1, busy: 0, completions: 0, busyMs: 0 }], kinds, prepareCompletions: 2, prepareLatencyMsTotal: 600, prepareLatencySqTotal: 100 ** 2 + 500 ** 2 });
    const p = measuredPriors(s, ['default', 'gpu'], { devices: { gpu: { serviceMs: 7 } }, kinds: { big: { gpu: { serviceMs: 9 } } }, prepareLimit: 40, savedAt: '' }, 25);
    expect(p).toMatchObject({ devices: { default: { serviceMs: 100 }, gpu: { serviceMs: 7 } }, kinds: { small: { default: { serviceMs: 40 } }, big: { default: { serviceMs: 280 }, gpu: { serviceMs: 9 } } }, latencyMs: 300, latencySdMs: 200, prepareLimit: 25 });
    // Each device's setup is kept with what was measured on it.
    expect(measuredPriors(s, ['default', 'gpu'], undefined, undefined, ['s0', 's1']).devices).toEqual({ default: { serviceMs: 100, setup: 's0' } });
    // A run that prepared and held no limit forgets the remembered one.
    expect(measuredPriors(s, ['default', 'gpu'], p).prepareLimit).toBeUndefined();
    expect(writePriors(dir, p)).toBe(true);
    expect(readPriors(dir)).toEqual(p);
    fs.writeFileSync(path.join(dir, 'stoker.priors.json'), '{"devices": {"default": {"serviceMs": -1}}, "latencyMs": "soon"}');
    expect(readPriors(dir)).toEqual({ devices: {}, savedAt: '' });
    const said: string[] = [];
    fs.writeFileSync(path.join(dir, 'stoker.priors.json'), 'not json');
    expect(readPriors(dir, (why) => said.push(why))).toBeUndefined();
    fs.writeFileSync(path.join(dir, 'stoker.priors.json'), '[1, 2]');
    expect(readPriors(dir, (why) => said.push(why))).toBeUndefined();
    // An object of other fields (another program's file): said too, not taken as an empty one.
    fs.writeFileSync(path.join(dir, 'stoker.priors.json'), '{"hello": 1}');
    expect(readPriors(dir, (why) => said.push(why))).toBeUndefined();
    // (It was passed over without a word.)
    expect(said).toEqual([
      expect.stringMatching(/stoker\.priors\.json is not JSON \(.*\): it starts without remembered rates \(the file is written anew within 10 s of work\)$/),
      expect.stringMatching(/stoker\.priors\.json is not a JSON object: it starts without remembered rates/),
      expect.stringMatching(/stoker\.priors\.json holds none of the fields this server writes \(devices, kinds, latencyMs, latencySdMs, prepareLimit, savedAt\): it starts without remembered rates/),
    ]);
    fs.rmSync(path.join(dir, 'stoker.priors.json'));
    expect(readPriors(dir, (why) => said.push(why))).toBeUndefined();
    expect(said).toHaveLength(3);
  });
});

describe('a restarted server', () => {
  it('starts its pacer from the rates the last run measured', async () => {
    const dir = tempDataDir();
    dirs.push(dir);
    const env = { STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '5' };
    const first = await startServer(dir, [], env);
    servers.push(first);
    expect(first.output()).not.toContain('the pacer starts from');
    // Cold: no rate before the first completion.
    expect(((await http(first.url, 'GET', '/v1/status')).body as { pacer: { ratePerSec: number | null } }).pacer.ratePerSec).toBeNull();
    for (let j = 0; j < 3; j++) {
      expect((await http(first.url, 'POST', '/v1/jobs', { id: `p-${j}`, kind: 'sleep', partitions: 4, input: { seed: j, prepareMs: 200, deviceMs: 50 } })).status).toBe(202);
    }
    for (let j = 0; j < 3; j++) expect((await http(first.url, 'GET', `/v1/jobs/p-${j}/result?wait=30s`)).body.state).toBe('done');
    expect(await first.stop()).toBe(0);
    const saved = readPriors(dir);
    // The sleep kind's device step reports its 50 ms; preparations take their 200 ms and a little more.
    expect(saved?.devices['default']?.serviceMs).toBeGreaterThanOrEqual(50);
    expect(saved?.devices['default']?.serviceMs).toBeLessThan(100);
    // One kind: its own time on the device is the device's.
    expect(saved?.kinds?.['sleep']?.['default']?.serviceMs).toBe(saved?.devices['default']?.serviceMs);
    expect(saved?.latencyMs).toBeGreaterThanOrEqual(200);
    expect(saved?.latencyMs).toBeLessThan(1000);

    const second = await startServer(dir, [], env);
    servers.push(second);
    await waitUntil(async () => (second.output().includes('the pacer starts from') ? true : undefined), 5000, 'the start line about the priors');
    expect(second.output()).toMatch(/the pacer starts from device "default" 0\.0\d\d s per item, preparation 0\.\d\d\d s \(what the last run measured: .*stoker\.priors\.json \(delete it to measure afresh, e\.g\. after a model change\)\)/);
    // Before any job, the pacer shows the remembered rate, idle (it read "bootstrap" and no rate
    // till the first job: a restarted server's capacity panel fell to 0).
    const before = ((await http(second.url, 'GET', '/v1/status')).body as { pacer: { mode: string; ratePerSec: number | null } }).pacer;
    expect(before).toMatchObject({ mode: 'idle', ratePerSec: expect.closeTo(2000 / (saved?.devices['default']?.serviceMs as number), 6) });
    // A job arrives; before any of it completes the pacer has a rate (2 workers at the remembered
    // time per item) and the remembered latency, and does not bootstrap.
    expect((await http(second.url, 'POST', '/v1/jobs', { id: 'q-0', kind: 'sleep', partitions: 4, input: { seed: 9, prepareMs: 3000, deviceMs: 50 } })).status).toBe(202);
    const pacer = ((await http(second.url, 'GET', '/v1/status')).body as { pacer: { mode: string; ratePerSec: number | null; terms: { latencyMs: number } } }).pacer;
    expect(pacer.mode).toBe('steady');
    expect(pacer.ratePerSec).toBeCloseTo(2000 / (saved?.devices['default']?.serviceMs as number), 6);
    expect(pacer.terms.latencyMs).toBeCloseTo(saved?.latencyMs as number, 6);
    expect((await http(second.url, 'GET', '/v1/jobs/q-0/result?wait=30s')).body.state).toBe('done');
    expect(await second.stop()).toBe(0);

    // The config's prior wins over the remembered one.
    const third = await startServer(dir, [], { ...env, STOKER_DEVICE_PRIOR_SERVICE_MS: '500', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0' });
    servers.push(third);
    await waitUntil(async () => (third.output().includes('the pacer starts from') ? true : undefined), 5000, 'the start line about the priors');
    expect(third.output()).toContain('the pacer starts from device "default" 0.500 s per item');
    expect((await http(third.url, 'POST', '/v1/jobs', { id: 'r-0', kind: 'sleep', partitions: 4, input: { seed: 9, prepareMs: 3000, deviceMs: 50 } })).status).toBe(202);
    expect(((await http(third.url, 'GET', '/v1/status')).body as { pacer: { ratePerSec: number } }).pacer.ratePerSec).toBeCloseTo(4, 6);
    expect(await third.stop()).toBe(0);

    // The device made an HTTP endpoint: the device time measured on its threads is not its own.
    const fourth = await startServer(dir, [], { ...env, STOKER_DEVICE_HTTP: '{"url":"http://127.0.0.1:9/run"}', STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0' });
    servers.push(fourth);
    await waitUntil(async () => (fourth.output().includes('is left out') ? true : undefined), 5000, 'the start line about the priors');
    expect(fourth.output()).toContain('the device time the last run measured on device "default" is left out: it runs on another setup now (type, program or URL), and the pacer measures it afresh');
    expect(fourth.output()).not.toContain('the pacer starts from device "default"');
    expect(((await http(fourth.url, 'GET', '/v1/status')).body as { pacer: { ratePerSec: number | null } }).pacer.ratePerSec).toBeNull();
    expect(await fourth.stop()).toBe(0);
  }, 60_000);
});

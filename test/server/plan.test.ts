/** `stoker plan --server URL`: a scenario fitted from a running server's recent history (its trace), then the sweep. */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../cli/helpers.js';
import { http, removeDir, startServer, tempDataDir, type ServerProcess } from './helpers.js';

describe('stoker plan --server', () => {
  let server: ServerProcess;
  let dir: string;
  beforeAll(async () => {
    dir = tempDataDir();
    server = await startServer(dir, [], { STOKER_PREPARE_THREADS: '1', STOKER_ENGINE_BUDGET_BYTES: String(2 ** 30) });
  });
  afterAll(async () => {
    await server?.stop();
    removeDir(dir);
  });

  it("fits the server's last minutes of sleep jobs and recommends a setting", async () => {
    for (let i = 0; i < 3; i++) expect((await http(server.url, 'POST', '/v1/jobs', { id: `s${i}`, kind: 'sleep', partitions: 8, input: { seed: i, prepareMs: 30, deviceMs: 5 } })).status).toBe(202);
    for (let i = 0; i < 3; i++) expect((await http(server.url, 'GET', `/v1/jobs/s${i}/result?wait=30s`)).body.state).toBe('done');
    const out = path.join(dir, 'fitted.json');
    const r = await run('plan', '--server', server.url, '--since', '5m', '--seeds', '1', '--targets', '2', '--threads', '1', '--scenario-out', out);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/^fitted from 3 jobs \(24 partitions\)/);
    expect(r.out).toMatch(/kind sleep: 3 jobs, 24 preparations/);
    expect(r.out).toMatch(/recommended/);
    // The server's budget is the machine's memory the plan keeps to (it swept budgets past it before).
    expect((JSON.parse(fs.readFileSync(out, 'utf8')) as { budgetBytes?: number }).budgetBytes).toBe(2 ** 30);
    // --budget-bytes gives it instead; a bad one is refused before anything runs.
    const given = await run('plan', '--server', server.url, '--since', '5m', '--seeds', '1', '--targets', '2', '--threads', '1', '--budget-bytes', '1000000', '--json');
    expect(given.code, given.err).toBe(0);
    const rows = (JSON.parse(given.out) as { rows: { budgetBytes: number | null }[] }).rows;
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) expect(row.budgetBytes).not.toBeNull();
    for (const row of rows) expect(row.budgetBytes as number).toBeLessThanOrEqual(1_000_000);
    // A span with no job in it: widen it (it said to record the run again with this version).
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const none = await run('plan', '--server', server.url, '--since', '1s', '--seeds', '1');
    expect(none.code).toBe(2);
    expect(none.err).toContain(`${server.url}'s last 1s: no job was submitted in it: give a --since that reaches back over the run to fit`);
    const bad = await run('plan', 'seed', '--budget-bytes', '64GiB');
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/--budget-bytes must be a whole number of bytes > 0, e\.g\. 412316860416 for 384 GiB \(got 64GiB\)/);
  });

  it('says what to give when neither a scenario nor --server is', async () => {
    const r = await run('plan');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/give a scenario, a trace file .* or --server URL/);
  });
});

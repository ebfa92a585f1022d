/**
 * The demo's per-second progress line on a real run: occupancy counts the running part of items
 * in flight, so no line reads above 1 (it did: 1.05–1.28 when a whole item was booked into the
 * second it ended in). Short progress windows (100 ms) against device steps of tens of ms (2^18 coefficients) make
 * the old error show on almost every run.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
// Thread entry points exist only as compiled JavaScript: the runtime is imported from dist/.
import { runDemo } from '../../dist/runtime/demo.js';
import { DEMO_DEFAULTS } from '../../dist/runtime/demo-options.js';

describe('demo progress lines', () => {
  it('never show occupancy above 1, and show the devices busy', async () => {
    const lines: string[] = [];
    const summary = await runDemo({ ...DEMO_DEFAULTS, seconds: 4, logN: 18, synthesisMs: 30, partitions: 4, jobsInFlight: 8, progressMs: 100, seed: 7 }, (l) => lines.push(l));
    const occ = lines.map((l) => /occupancy (\d+\.\d+)/.exec(l)?.[1]).filter((v): v is string => v !== undefined).map(Number);
    expect(occ.length).toBeGreaterThanOrEqual(10);
    for (const v of occ) expect(v).toBeLessThanOrEqual(1);
    expect(Math.max(...occ)).toBeGreaterThan(0.3);
    expect(summary.occupancy).toBeLessThanOrEqual(1);
    expect(summary.jobsFailed).toBe(0);
    expect(summary.queueEmptyShare).toBeGreaterThanOrEqual(0);
    expect(summary.queueEmptyShare).toBeLessThanOrEqual(1);
  }, 60_000);

  it('say where the load, not the pacer, held the devices idle (a user read occupancy 0.03 of 4 jobs × 4 partitions as a bad result)', () => {
    const args = ['demo', '--seconds', '2', '--log-n', '10', '--synthesis-ms', '200', '--partitions', '2', '--jobs-in-flight', '1', '--quiet'];
    const text = execFileSync(process.execPath, [path.resolve('dist/cli/main.js'), ...args], { encoding: 'utf8' });
    expect(text).toMatch(/note: stoker: nothing was queued \d+ % of the time, the devices \d+ % busy: the load held them idle, not the pacer — at most --jobs-in-flight × --partitions = 2 partitions in flight/);
  }, 60_000);
});

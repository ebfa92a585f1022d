/**
 * Every measuring command runs from the built CLI with small arguments and prints what it says it
 * does (the benchmarks themselves are not judged here: these only prove the commands work), and a
 * pacer module that cannot be loaded is refused with exit 2 naming it.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from './helpers.js';

const CLI = path.resolve('dist/cli/main.js');
const tmp = tempDir();
afterAll(() => tmp.cleanup());

function stoker(args: string[], timeout = 60_000): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => execFile(process.execPath, [CLI, ...args], { timeout }, (e, out, err) => resolve({ code: e ? ((e as { code?: number }).code ?? 1) : 0, out, err })));
}

const redis = process.env['STOKER_REQUIRE_REDIS'] === '1' || fs.existsSync('/usr/bin/redis-server');

describe('the measuring commands, from the built CLI', () => {
  it('speed --json: events, simulated time and rates per pacer', async () => {
    const r = await stoker(['speed', '--scenario', 'seed', '--pacers', 'stoker,classic', '--runs', '1', '--json']);
    expect(r.code, r.err).toBe(0);
    const rows = JSON.parse(r.out) as { pacer: string; events: number; eventsPerSecBest: number }[];
    expect(rows.map((x) => x.pacer)).toEqual(['stoker', 'classic']);
    for (const x of rows) expect(x.events).toBeGreaterThan(0);
  });

  it('overhead --json: the runtime in process, on threads, and the engine alone', async () => {
    const r = await stoker(['overhead', '--items', '300', '--json']);
    expect(r.code, r.err).toBe(0);
    const rows = JSON.parse(r.out) as { what: string; items: number }[];
    expect(rows.length).toBeGreaterThanOrEqual(3);
    for (const x of rows) expect(x.items).toBe(300);
  });

  it('device-bench --json: a handoff by file and through the pipe, and items/s per device', async () => {
    const r = await stoker(['device-bench', '--bytes', String(2 ** 20), '--items', '200', '--json']);
    expect(r.code, r.err).toBe(0);
    const out = JSON.parse(r.out) as { handoff: { how: string }[] };
    expect(out.handoff.map((h) => h.how).sort()).toEqual(['file', 'pipe']);
  });

  it.skipIf(!redis)('cluster-bench with one node: jobs/s and its occupancy', async () => {
    const r = await stoker(['cluster-bench', '--nodes', '1', '--seconds', '2', '--prepare-ms', '20', '--device-ms', '5'], 120_000);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/nodes\s+jobs\s+jobs\/s/);
    expect(r.out).toMatch(/^\s+1\s+\d+\s+[\d.]+\s+1\.00×/m);
  });

  it('refuses a pacer module with a syntax error (saying where), and a directory, naming them', async () => {
    const bad = tmp.file('bad.mjs', 'export default {{\n');
    const syntax = await stoker(['simulate', 'seed', '--pacer', bad]);
    expect(syntax.code).toBe(2);
    expect(syntax.err).toContain(`could not load pacer module ${bad}`);
    // Where: the file and line (Node's import error names neither).
    expect(syntax.err).toContain(`, at\n${bad}:1\nexport default {{`);
    const dir = await stoker(['simulate', 'seed', '--pacer', tmp.dir]);
    expect(dir.code).toBe(2);
    expect(dir.err).toMatch(/is not a file; give the path of the \.js\/\.mjs module itself/);
  });
});

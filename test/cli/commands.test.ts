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
import { printable } from '../../src/cli/client-commands.js';

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

describe('stoker wait without -o, of a bytes result', () => {
  const fields = { id: 'j', state: 'done', error: null, finishedAt: '2026-01-01T00:00:00.000Z' };
  const io = () => {
    const err: string[] = [];
    return { err, io: { out: () => {}, err: (s: string) => void err.push(s) } as unknown as Parameters<typeof printable>[3] };
  };
  it('prints it as the JSON answer has it (base64), up to the limit', async () => {
    const { io: x } = io();
    const res = new Response(new Uint8Array([1, 2, 3, 250]), { headers: { 'content-type': 'application/octet-stream' } });
    expect(await printable(res, 4, fields, x)).toEqual({ id: 'j', state: 'done', result: 'AQID+g==', resultEncoding: 'base64', error: null, finishedAt: fields.finishedAt });
  });
  it('leaves a larger one out by its size, and says to use -o (as one JSON string, 384 MiB or more could not be read: exit 1 for a job done)', async () => {
    for (const headers of [{ 'content-length': '5' }, {}] as Record<string, string>[]) {
      const { io: x, err } = io();
      const body = new ReadableStream<Uint8Array>({ start: (c) => (c.enqueue(new Uint8Array([1, 2, 3])), c.enqueue(new Uint8Array([4, 5])), c.close()) });
      expect(await printable(new Response(body, { headers }), 4, fields, x)).toEqual({ id: 'j', state: 'done', result: null, resultOmittedBytes: 5, error: null, finishedAt: fields.finishedAt });
      expect(err.join('')).toBe('job j: its result is 5 bytes, too many to print: write it to a file with -o FILE\n');
    }
  });
});

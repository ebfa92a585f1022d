/**
 * Outputs and results over 1 MiB of bytes are journaled in pieces (a piece per turn of the event
 * loop: see test/server/journal-blobs.test.ts), through a real `stoker serve` (dist/): the outputs
 * journaled before a kill -9 are read back from their pieces when the job resumes, and its result
 * comes whole from GET …/result, as bytes and as base64.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { collectEvents, http, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess, type StreamedEvent } from './helpers.js';

const PROBE = path.resolve(import.meta.dirname, '../fixtures/kinds/probe-kind.mjs');

describe('large bytes through a crash', () => {
  const dir = tempDataDir();
  const markers = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-markers-'));
  const servers: ServerProcess[] = [];
  const streams: { close(): Promise<void> }[] = [];
  afterAll(async () => {
    for (const e of streams) await e.close();
    for (const s of servers) await s.stop();
    removeDir(dir);
    removeDir(markers);
  });

  it('resumes a job from its outputs in pieces after a kill -9, and answers its result whole', { timeout: 60_000 }, async () => {
    const first = await startServer(dir, ['--kind', PROBE]);
    servers.push(first);
    const events = await collectEvents(first.url);
    streams.push(events);
    // Partitions 0 and 1 finish (1.2 MB each); 2 and 3 wait in prepare for the marker.
    expect((await http(first.url, 'POST', '/v1/jobs', { id: 'huge', kind: 'probe', input: { items: 4, mode: 'huge', markerDir: markers } })).status).toBe(202);
    // (job.partition: said once the output is in the journal.)
    const recorded = (e: StreamedEvent[]) => e.filter((x) => x.type === 'job.partition' && x.id === 'huge').map((x) => x.partition as number).sort((a, b) => a - b);
    expect(await waitUntil(async () => (recorded(events.events).length === 2 ? recorded(events.events) : undefined), 30_000, 'two outputs journaled')).toEqual([0, 1]);
    await first.crash();
    const second = await startServer(dir, ['--kind', PROBE]);
    servers.push(second);
    const again = await collectEvents(second.url);
    streams.push(again);
    fs.writeFileSync(path.join(markers, 'go'), '');
    // Only the two partitions not journaled run again; the result has the other two from their pieces.
    expect(await waitUntil(async () => (again.events.some((e) => e.type === 'job.done' && e.id === 'huge') ? recorded(again.events) : undefined), 30_000, 'the job done')).toEqual([2, 3]);
    const want = Buffer.concat([0, 1, 2, 3].map((p) => Buffer.alloc(1_200_000, p)));
    const raw = await fetch(new URL('/v1/jobs/huge/result?wait=30s', second.url), { headers: { accept: 'application/octet-stream' } });
    expect(raw.status).toBe(200);
    expect(Buffer.from(await raw.arrayBuffer()).equals(want)).toBe(true);
    const json = await http(second.url, 'GET', '/v1/jobs/huge/result');
    expect(json.body).toMatchObject({ state: 'done', resultEncoding: 'base64' });
    expect(Buffer.from(json.body.result as string, 'base64').equals(want)).toBe(true);
    const view = await http(second.url, 'GET', '/v1/jobs/huge');
    expect(view.body).toMatchObject({ state: 'done', resumes: 1, result: null, resultOmittedBytes: want.length });
  });
});

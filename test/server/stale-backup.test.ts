/**
 * A copy of the journal (GET /v1/backup) is made in the data dir and removed once sent; a server
 * stopped meanwhile left it there, as large as the journal, for good. The next server on that data
 * dir removes it, and says so.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../../dist/server/config.js';
import { Journal } from '../../dist/server/journal.js';
import { loadServerKinds, startServer } from '../../dist/server/serve.js';
import { Service } from '../../dist/server/service.js';

const PROBE = path.resolve('test/fixtures/kinds/probe-kind.mjs');

describe('a copy of the journal an earlier server left in the data dir', () => {
  let dir = '';
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('is removed when the next server opens the journal, and said; other files stay', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-stale-backup-'));
    const config = loadConfig({ env: {}, cwd: dir, values: { dataDir: dir, prepare: { threads: 1 }, kinds: { probe: { module: PROBE } } } });
    const kinds = await loadServerKinds(config);
    // A first server makes a copy as GET /v1/backup does, and stops before it is sent.
    const first = Service.open(config, kinds, { log: () => {} });
    const copy = await first.backup();
    await first.close(0);
    expect(path.dirname(copy)).toBe(dir);
    fs.writeFileSync(path.join(dir, 'stoker.db.backup-notes.txt'), 'mine');
    // (A kill mid-copy leaves SQLite's rollback journal of the copy beside it: a user trial found it left.)
    fs.writeFileSync(`${copy}-journal`, 'x');
    const lines: string[] = [];
    const second = Service.open(config, kinds, { log: (l) => lines.push(l) });
    try {
      expect(fs.existsSync(copy)).toBe(false);
      expect(fs.existsSync(path.join(dir, 'stoker.db.backup-notes.txt'))).toBe(true);
      expect(lines).toContain(`stoker serve: removed ${path.basename(copy)} from the data dir: a copy of the journal an earlier server was making or sending (GET /v1/backup) when it stopped`);
      expect(fs.existsSync(`${copy}-journal`)).toBe(false);
      expect(lines).toContain(`stoker serve: removed ${path.basename(copy)}-journal from the data dir: the rollback journal of a copy of the journal an earlier server was making or sending (GET /v1/backup) when it stopped`);
    } finally {
      await second.close(0);
    }
  });
});

describe('a backup download when the server stops', () => {
  let dir = '';
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('is cut short: a slow one held the stop past server.shutdownTimeoutS (exit 1, the WAL and the copy left in the data dir)', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-backup-stop-'));
    // A 24 MB journal: more than the socket buffers take while the client reads nothing.
    const j = Journal.open(dir);
    const pad = 'x'.repeat(800_000);
    for (let i = 0; i < 30; i++) {
      j.insert({ id: `big-${i}`, kind: 'sleep', priority: 'normal', partitions: 1, input: {}, deadline: null });
      j.finish(`big-${i}`, { state: 'done', result: { pad } });
    }
    j.close();
    const server = await startServer(loadConfig({ env: {}, cwd: dir, values: { dataDir: dir, server: { port: 0, shutdownTimeoutS: 30 }, prepare: { threads: 1 } } }), { log: () => {} });
    // A client that starts the download and reads no more of it.
    const response = await new Promise<http.IncomingMessage>((resolve, reject) => http.get(`${server.url}/v1/backup`, resolve).on('error', reject));
    expect(response.statusCode).toBe(200);
    response.pause();
    const broken = new Promise<boolean>((resolve) => response.on('close', () => resolve(!response.complete)));
    const t0 = Date.now();
    await Promise.race([server.close(), new Promise((_, reject) => setTimeout(() => reject(new Error('close() still waiting on the download after 10 s')), 10_000))]);
    expect(Date.now() - t0).toBeLessThan(10_000);
    response.resume();
    expect(await broken).toBe(true);
    // The copy removed, the WAL checkpointed: the data dir as a clean stop leaves it.
    expect(fs.readdirSync(dir).filter((f) => f.includes('backup') || f.endsWith('-wal'))).toEqual([]);
  }, 60_000);
});

describe('a start with many unfinished jobs', () => {
  let dir = '';
  afterEach(() => {
    vi.restoreAllMocks();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('counts their resumes in one write, not one sync of the disk each (20,000 held a start 27 s before it listened)', async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-resume-'));
    const j = Journal.open(dir);
    for (let i = 0; i < 50; i++) j.insert({ id: `q-${i}`, kind: 'probe', priority: 'normal', partitions: 1, input: {}, deadline: null });
    j.close();
    const config = loadConfig({ env: {}, cwd: dir, values: { dataDir: dir, prepare: { threads: 1 }, kinds: { probe: { module: PROBE } } } });
    const marks = vi.spyOn(Journal.prototype, 'markResumed');
    const service = Service.open(config, await loadServerKinds(config), { log: () => {} });
    try {
      expect(marks).toHaveBeenCalledTimes(1);
      expect(marks.mock.calls[0]?.[0]).toHaveLength(50);
      expect((await service.job('q-7'))?.resumes).toBe(1);
    } finally {
      await service.close(0);
    }
  }, 60_000);
});

/**
 * Journal integrity after a crash: a damaged WAL or a file that went back in time is refused at
 * start with a message that says what happened and how to go on, instead of resuming fewer jobs
 * silently (before: a garbled WAL header after kill -9 gave "0 unfinished jobs resumed" with 20
 * acknowledged jobs gone). Real server processes, kill -9, and the files as a crash leaves them.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Journal } from '../../src/server/journal.js';
import { CLI, http, removeDir, startServer, tempDataDir } from './helpers.js';

function serveOnce(dir: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--data', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const onData = (b: Buffer) => {
      out += b.toString();
      // It started: stop it (this is the case the test does not expect).
      if (out.includes('listening on')) child.kill('SIGTERM');
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => resolve({ code, out }));
  });
}

describe('journal integrity at start', () => {
  it('refuses a garbled WAL, then a journal behind its acknowledged jobs, and starts once the operator accepts the loss', async () => {
    const dir = tempDataDir();
    try {
      const s = await startServer(dir);
      for (let i = 0; i < 20; i++) expect((await http(s.url, 'POST', '/v1/jobs', { id: `w-${i}`, kind: 'sleep', partitions: 1, input: { prepareMs: 600_000 } })).status).toBe(202);
      await s.crash();
      const wal = path.join(dir, 'stoker.db-wal');
      expect(fs.statSync(wal).size).toBeGreaterThan(32);
      // A crash that garbles the WAL's header.
      const fd = fs.openSync(wal, 'r+');
      fs.writeSync(fd, Buffer.alloc(16, 0xab), 0, 16, 0);
      fs.closeSync(fd);

      const garbled = await serveOnce(dir);
      expect(garbled.code).toBe(1);
      expect(garbled.out).toContain('is damaged: its header is not a SQLite WAL header');
      expect(garbled.out).toContain(`move ${wal} away`);

      // The operator moves the WAL away: the file now holds fewer jobs than were acknowledged.
      fs.renameSync(wal, `${wal}.bad`);
      const behind = await serveOnce(dir);
      expect(behind.code).toBe(1);
      expect(behind.out).toMatch(/holds jobs up to number 0, but job number 20 was acknowledged: 20 accepted job\(s\) are gone/);
      expect(behind.out).toContain('.mark away');

      // Accepting the loss (the mark moved away), it starts with what the file holds.
      fs.renameSync(path.join(dir, 'stoker.db.mark'), path.join(dir, 'stoker.db.mark.old'));
      const s2 = await startServer(dir, [], { STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0' });
      expect(s2.output()).toContain('0 unfinished jobs resumed');
      await s2.stop();
    } finally {
      removeDir(dir);
    }
  }, 60_000);

  it('a clean crash resumes every acknowledged job, and the mark follows the journal across restarts and purges', async () => {
    const dir = tempDataDir();
    try {
      const s = await startServer(dir);
      for (let i = 0; i < 10; i++) expect((await http(s.url, 'POST', '/v1/jobs', { id: `c-${i}`, kind: 'sleep', partitions: 1, input: { prepareMs: 600_000 } })).status).toBe(202);
      await s.crash();
      const s2 = await startServer(dir, [], { STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '0' });
      expect(s2.output()).toContain('10 unfinished jobs resumed');
      await s2.stop();
      expect(Number(fs.readFileSync(path.join(dir, 'stoker.db.mark'), 'utf8'))).toBe(10);
      // Purged jobs do not lower the number the journal has given: it opens again.
      const now = { t: Date.now() };
      const j = Journal.open(dir, { now: () => now.t });
      for (const id of j.unfinished().map((x) => x.id)) j.finish(id, { state: 'cancelled', code: 'E_CANCELLED', reason: 'test' });
      now.t += 10 * 86_400_000;
      expect(j.purgeFinished(86_400_000)).toBe(10);
      j.close();
      Journal.open(dir).close();
    } finally {
      removeDir(dir);
    }
  }, 60_000);
});

/**
 * Journal integrity after a crash: a damaged WAL or a file that went back in time is refused at
 * start with a message that says what happened and how to go on, instead of resuming fewer jobs
 * silently (before: a garbled WAL header after kill -9 gave "0 unfinished jobs resumed" with 20
 * acknowledged jobs gone). Real server processes, kill -9, and the files as a crash leaves them.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Journal, JournalError, type JournalJobInput } from '../../src/server/journal.js';
import { CLI, http, removeDir, startServer, tempDataDir } from './helpers.js';

/** A server on `dir` that accepted 20 unfinished jobs (`prefix`-0 …) and was killed (kill -9): its WAL, which holds them. */
async function crashedWithJobs(dir: string, prefix: string): Promise<string> {
  const s = await startServer(dir);
  for (let i = 0; i < 20; i++) expect((await http(s.url, 'POST', '/v1/jobs', { id: `${prefix}-${i}`, kind: 'sleep', partitions: 1, input: { prepareMs: 600_000 } })).status).toBe(202);
  await s.crash();
  return path.join(dir, 'stoker.db-wal');
}

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

function job(id: string): JournalJobInput {
  return { id, kind: 'sleep', priority: 'normal', partitions: 1, input: { prepareMs: 600_000 }, deadline: null };
}

/**
 * A data dir as kill -9 leaves it: the files copied while the journal that wrote `ids` is still
 * open (no close, so no checkpoint: the jobs are committed frames of the WAL only). `markAfter`:
 * copy the mark as it was after that many jobs (a crash in the middle of the next write).
 */
function crashedCopy(ids: string[], markAfter = ids.length): string {
  const src = tempDataDir();
  const copy = tempDataDir();
  const j = Journal.open(src);
  try {
    let mark = '';
    ids.forEach((id, i) => {
      j.insert(job(id));
      if (i + 1 === markAfter) mark = fs.readFileSync(path.join(src, 'stoker.db.mark'), 'utf8');
    });
    for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(copy, f));
    fs.writeFileSync(path.join(copy, 'stoker.db.mark'), mark);
  } finally {
    j.close();
    removeDir(src);
  }
  return copy;
}

/** Every file of `dir`, by name, as bytes. */
function snapshot(dir: string): Map<string, Buffer> {
  return new Map(fs.readdirSync(dir).sort().map((f) => [f, fs.readFileSync(path.join(dir, f))]));
}

describe('journal integrity at start', () => {
  it.each([
    [8, "its header's page size 16909060 is not a power of two from 512 to 65536"],
    [16, "its header's checksum does not match the header (bytes 0–23)"],
    [24, "its header's checksum does not match the header (bytes 0–23)"],
  ])('refuses a WAL whose header is damaged at byte %i before the database is opened, and leaves the WAL byte for byte as it was', (offset, what) => {
    const crashed = crashedCopy(Array.from({ length: 20 }, (_, i) => `d-${i}`));
    // With the mark (the failed open used to reset the WAL, then say the jobs were gone) and without (it started with none).
    for (const keepMark of [true, false]) {
      const dir = tempDataDir();
      try {
        for (const f of fs.readdirSync(crashed)) if (keepMark || f !== 'stoker.db.mark') fs.copyFileSync(path.join(crashed, f), path.join(dir, f));
        const wal = path.join(dir, 'stoker.db-wal');
        expect(fs.statSync(wal).size).toBeGreaterThan(32 + 20 * 4096);
        const fd = fs.openSync(wal, 'r+');
        fs.writeSync(fd, Buffer.from([1, 2, 3, 4]), 0, 4, offset);
        fs.closeSync(fd);
        const before = snapshot(dir);

        let err: unknown;
        try {
          Journal.open(dir).close();
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(JournalError);
        expect((err as JournalError).code).toBe('E_JOURNAL_DAMAGED');
        const message = (err as JournalError).message;
        expect(message).toContain(`the journal's write-ahead log ${wal} (${before.get('stoker.db-wal')?.length} bytes) is damaged: ${what}`);
        expect(message).toContain('Keep a copy of the data dir');
        expect(message).toContain(`move ${wal} away`);
        // Nothing opened the database: no file changed, none was made (no -shm), the WAL is intact.
        expect(snapshot(dir)).toEqual(before);
      } finally {
        removeDir(dir);
      }
    }
    removeDir(crashed);
  });

  it('refuses a high-water mark that is not a job number (read as none, it was written over and the check was off); an empty or zeroed one is none', () => {
    for (const [mark, refused] of [['xyz\n', true], ['99999999999999999999\n', true], ['9007199254740993\n', true], ['', false], ['\0'.repeat(21), false], ['00000000000000000003\n', false]] as const) {
      const dir = crashedCopy(['m-0', 'm-1', 'm-2']);
      try {
        fs.writeFileSync(path.join(dir, 'stoker.db.mark'), mark);
        if (refused) {
          expect(() => Journal.open(dir), JSON.stringify(mark)).toThrow(/high-water mark .*stoker\.db\.mark is damaged \(it holds ".*", not a job number\): the journal cannot tell whether accepted jobs are gone\. Keep a copy of the data dir; to start with what the journal holds \(a new mark is written\), move .* away/);
          // (Left as it was: the operator decides.)
          expect(fs.readFileSync(path.join(dir, 'stoker.db.mark'), 'utf8')).toBe(mark);
        } else {
          const j = Journal.open(dir);
          expect(j.unfinished()).toHaveLength(3);
          j.close();
        }
      } finally {
        removeDir(dir);
      }
    }
  });

  it('opens a WAL whose last frame is torn (a crash in the middle of a write), keeping the jobs of the complete frames', () => {
    // 10 jobs acknowledged (the mark says 10); the crash tore the write of the 11th.
    const dir = crashedCopy(Array.from({ length: 11 }, (_, i) => `t-${i}`), 10);
    try {
      const wal = path.join(dir, 'stoker.db-wal');
      fs.truncateSync(wal, fs.statSync(wal).size - 3);
      const j = Journal.open(dir);
      try {
        expect(j.unfinished().map((x) => x.id)).toEqual(Array.from({ length: 10 }, (_, i) => `t-${i}`));
        expect(j.get('t-10')).toBeUndefined();
      } finally {
        j.close();
      }
    } finally {
      removeDir(dir);
    }
  });


  it('a refused start leaves the files as they were (a torn copy was refused as damaged after its WAL had been checkpointed into the file and deleted: the copy to keep was gone)', async () => {
    const dir = tempDataDir();
    try {
      const wal = await crashedWithJobs(dir, 't');
      expect(fs.statSync(wal).size).toBeGreaterThan(4096 * 4);
      // Frames past the first few garbled (a torn copy's, or a disk's): SQLite reads the WAL up to the first bad frame.
      const fd = fs.openSync(wal, 'r+');
      fs.writeSync(fd, Buffer.alloc(4096, 0xab), 0, 4096, 32 + 3 * (24 + 4096));
      fs.closeSync(fd);
      const sums = () => ['stoker.db', 'stoker.db-wal', 'stoker.db.mark'].map((f) => `${f} ${fs.statSync(path.join(dir, f)).size} ${createHash('sha256').update(fs.readFileSync(path.join(dir, f))).digest('hex')}`);
      const before = sums();
      const refused = await serveOnce(dir);
      expect(refused.code).toBe(1);
      expect(refused.out).toMatch(/accepted job\(s\) are gone/);
      expect(sums()).toEqual(before);
    } finally {
      removeDir(dir);
    }
  }, 30_000);

  it('refuses a garbled WAL, then a journal behind its acknowledged jobs, and starts once the operator accepts the loss', async () => {
    const dir = tempDataDir();
    try {
      const wal = await crashedWithJobs(dir, 'w');
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

import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Journal, JournalError, type JournalJobInput } from '../../src/server/journal.js';

const dirs: string[] = [];
const journals: Journal[] = [];

afterEach(() => {
  for (const j of journals.splice(0)) j.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'stoker-journal-'));
  dirs.push(dir);
  return dir;
}

/** Whether this machine can make a file immutable (chattr +i: root, on a file system that has the flag). */
/** Whether this process may mount a tmpfs (root, where the container lets it): a full disk made to order. */
function tmpfsWorks(): boolean {
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return false;
  const dir = mkdtempSync(join(tmpdir(), 'stoker-mount-'));
  try {
    const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir]).status === 0;
    if (mounted) spawnSync('umount', [dir]);
    return mounted;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function chattrWorks(): boolean {
  const dir = mkdtempSync(join(tmpdir(), 'stoker-chattr-'));
  const f = join(dir, 'probe');
  writeFileSync(f, '');
  try {
    const set = spawnSync('chattr', ['+i', f]).status === 0;
    if (set) spawnSync('chattr', ['-i', f]);
    return set;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A manual clock. */
function clock(start = 1_000_000): { now: () => number; advance: (ms: number) => void } {
  let t = start;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

function open(dir: string, now?: () => number): Journal {
  const j = Journal.open(dir, now ? { now } : {});
  journals.push(j);
  return j;
}

function job(id: string, over: Partial<JournalJobInput> = {}): JournalJobInput {
  return { id, kind: 'ntt-proof', priority: 'normal', partitions: 3, input: { log2: 18, seed: [1, 2] }, deadline: null, ...over };
}

/** The JournalError `fn` throws (undefined when it throws nothing). */
function errorOf(fn: () => unknown): JournalError | undefined {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(JournalError);
    return err as JournalError;
  }
  return undefined;
}

function codeOf(fn: () => unknown): string | undefined {
  return errorOf(fn)?.code;
}

describe('Journal', () => {
  it('round-trips an inserted job', () => {
    const c = clock();
    const j = open(tempDir(), c.now);
    const { job: got, created } = j.insert(job('a', { deadline: 2_000_000, priority: 'high' }));
    expect(created).toBe(true);
    const expected = {
      id: 'a', kind: 'ntt-proof', priority: 'high', partitions: 3, input: { log2: 18, seed: [1, 2] },
      deadline: 2_000_000, bodyHash: Journal.hash(job('a', { deadline: 2_000_000, priority: 'high' })), sentHash: null, moduleHash: null,
      state: 'queued', submittedAt: 1_000_000, startedAt: null, finishedAt: null, result: null, resultBytes: 4,
      errorCode: null, errorReason: null, partitionsDone: 0, resumes: 0,
    };
    expect(got).toEqual(expected);
    expect(j.get('a')).toEqual(expected);
    expect(got.bodyHash).toMatch(/^[0-9a-f]{64}$/);
    expect(j.get('nope')).toBeUndefined();
  });

  it('is idempotent for the same body and rejects a different body with E_JOURNAL_CONFLICT', () => {
    const c = clock();
    const j = open(tempDir(), c.now);
    j.insert(job('a'));
    c.advance(10);
    const again = j.insert(job('a'));
    expect(again.created).toBe(false);
    expect(again.job.submittedAt).toBe(1_000_000);
    // Idempotent whatever the state, even after the job ended.
    j.finish('a', { state: 'done', result: 42 });
    expect(j.insert(job('a'))).toMatchObject({ created: false, job: { state: 'done', result: 42 } });
    expect(codeOf(() => j.insert(job('a', { partitions: 4 })))).toBe('E_JOURNAL_CONFLICT');
    expect(() => j.insert(job('a', { input: { log2: 19 } }))).toThrow(/different body.*new id/);
    expect(j.counts().done).toBe(1);
  });

  it('hashes canonically: key order does not matter, values do', () => {
    const a = Journal.hash({ kind: 'k', priority: 'low', partitions: 1, input: { b: 1, a: { d: [1, { y: 2, x: 1 }], c: 'z' } }, deadline: null });
    const b = Journal.hash({ deadline: null, input: { a: { c: 'z', d: [1, { x: 1, y: 2 }] }, b: 1 }, partitions: 1, priority: 'low', kind: 'k' });
    expect(a).toBe(b);
    expect(Journal.hash({ kind: 'k', priority: 'low', partitions: 1, input: { b: 1, a: { d: [{ x: 1, y: 2 }, 1], c: 'z' } }, deadline: null })).not.toBe(a);
    expect(Journal.hash({ kind: 'k', priority: 'low', partitions: 1, input: [1, 2], deadline: 5 })).not.toBe(
      Journal.hash({ kind: 'k', priority: 'low', partitions: 1, input: [1, 2], deadline: null }),
    );
  });

  it('rejects malformed jobs and values JSON cannot hold with E_JOURNAL_BAD_INPUT', () => {
    const j = open(tempDir());
    expect(codeOf(() => j.insert(job('')))).toBe('E_JOURNAL_BAD_INPUT');
    expect(codeOf(() => j.insert(job('a', { partitions: 0 })))).toBe('E_JOURNAL_BAD_INPUT');
    expect(codeOf(() => j.insert(job('a', { input: { n: 1n } })))).toBe('E_JOURNAL_BAD_INPUT');
    expect(j.pending()).toBe(0);
  });

  it('names the whole path of what JSON would change in an output or a result', () => {
    const j = open(tempDir());
    j.insert(job('a'));
    const reason = (v: unknown) => {
      try {
        j.recordPartition('a', 0, v);
      } catch (e) {
        return (e as Error).message;
      }
      return 'stored';
    };
    expect(reason({ outer: { list: [0, new Uint8Array(2)] } })).toMatch(/bytes at "outer\.list\[1\]"/);
    expect(reason({ outputs: [1, 2, { score: NaN }] })).toMatch(/NaN at "outputs\[2\]\.score"/);
    expect(reason([[1, new Set()]])).toMatch(/a Set at "\[0\]\[1\]"/);
    expect(reason({ 'odd key': { x: Infinity } })).toMatch(/Infinity at "\['odd key'\]\.x"/);
    expect(reason(new Map())).toMatch(/a Map at the top/);
    // The same object twice is plain JSON (only a cycle is not).
    const shared = { v: 1 };
    expect(reason({ a: shared, b: [shared] })).toBe('stored');
  });

  it('says whether its latest write was refused for want of room: full, and not once one is written again', () => {
    const c = clock();
    const small = Journal.open(tempDir(), { now: c.now, maxBytes: 65_536 });
    journals.push(small);
    const pad = 'x'.repeat(6000);
    // Some jobs that have ended (the room a purge frees later), then more until it is full.
    for (let i = 0; i < 4; i++) {
      small.insert(job(`old${i}`, { input: { pad } }));
      small.finish(`old${i}`, { state: 'cancelled', code: 'E_CANCELLED', reason: 'room' });
    }
    /** New jobs until a write is refused for want of room; their ids. */
    const fill = (prefix: string) => {
      const ids: string[] = [];
      for (let n = 0; !small.full && n < 100; n++) {
        try {
          small.insert(job(`${prefix}${n}`, { input: { pad } }));
          ids.push(`${prefix}${n}`);
        } catch (e) {
          expect((e as JournalError).code).toBe('E_JOURNAL_FULL');
        }
      }
      return ids;
    };
    fill('j');
    expect(small.full).toBe(true);
    expect(small.fullFix()).toMatch(/raise journal\.maxBytes/);
    // Room again: the ended jobs purged, the next write lands.
    c.advance(10);
    small.purgeFinished(0);
    // (A purge, an update: no news of room; a new job written is.)
    expect(small.full).toBe(true);
    small.insert(job('after', { input: { pad } }));
    expect(small.full).toBe(false);
    // Full again, then room made with no submission to say so (a load balancer sends none to a
    // server /readyz shows not ready): a look at the free pages says it.
    const added = fill('k');
    expect(small.full).toBe(true);
    expect(small.checkRoom()).toBe(false);
    expect(small.full).toBe(true);
    for (const id of added) small.forget(id);
    expect(small.full).toBe(true);
    expect(small.checkRoom()).toBe(true);
    expect(small.full).toBe(false);
    small.insert(job('after-check', { input: { pad } }));
    // Room for the job refused, not a few pages: a large input read room again, and was refused
    // again, every few seconds (/readyz and the log flapping while every submit got 507).
    const big = 'y'.repeat(40_000);
    let refused = false;
    for (let n = 0; !refused && n < 100; n++) {
      try {
        small.insert(job(`big${n}`, { input: { big } }));
      } catch (e) {
        expect((e as JournalError).code).toBe('E_JOURNAL_FULL');
        refused = true;
      }
    }
    expect(refused).toBe(true);
    small.forget('after-check');
    expect(small.checkRoom()).toBe(false);
  });

  it('journal.maxBytes bounds new jobs only: the starts, outputs and ends of jobs accepted are written past it (capped too, an end waited for a purge; with nothing to purge, for good)', () => {
    const small = Journal.open(tempDir(), { maxBytes: 65_536 });
    journals.push(small);
    const pad = 'x'.repeat(6000);
    const accepted: string[] = [];
    for (let n = 0; !small.full && n < 100; n++) {
      try {
        small.insert(job(`j${n}`, { partitions: 2, input: { pad } }));
        accepted.push(`j${n}`);
      } catch (e) {
        expect((e as JournalError).code).toBe('E_JOURNAL_FULL');
      }
    }
    expect(small.full).toBe(true);
    for (const id of accepted) {
      small.markRunning(id);
      expect(small.recordPartition(id, 0, { out: pad })).toBe(true);
      expect(small.finish(id, { state: 'done', result: { pad, more: pad } })).toBe(true);
    }
    expect(accepted.every((id) => small.get(id)?.state === 'done')).toBe(true);
    // New jobs are refused again once they fill what is left: the cap holds for them.
    let more = 0;
    for (; more < 100; more++) {
      try {
        small.insert(job(`late${more}`, { input: { pad } }));
      } catch (e) {
        expect((e as JournalError).code).toBe('E_JOURNAL_FULL');
        break;
      }
    }
    expect(more).toBeLessThan(100);
  });

  it('journal.maxBytes holds when results outgrow inputs: a new job is refused once the pages in use pass it, though free pages would hold it (all 1,000 jobs of 4 KB results were accepted, the file at 12 × the cap)', () => {
    const dir = tempDir();
    const capped = Journal.open(dir, { maxBytes: 200_000 });
    journals.push(capped);
    const result = 'r'.repeat(4000);
    let accepted = 0;
    let refused = 0;
    for (let n = 0; n < 300; n++) {
      try {
        capped.insert(job(`b${n}`, { partitions: 2 }));
      } catch (e) {
        expect((e as JournalError).code).toBe('E_JOURNAL_FULL');
        refused++;
        continue;
      }
      accepted++;
      // (Each partition's output recorded as it ends, then dropped at the job's end: the pages they free held the next job.)
      capped.recordPartition(`b${n}`, 0, result);
      capped.recordPartition(`b${n}`, 1, result);
      capped.finish(`b${n}`, { state: 'done', result: [result, result] });
    }
    expect(refused).toBeGreaterThan(0);
    expect(accepted).toBeLessThan(300);
    expect(capped.full).toBe(true);
    // The file (its write-ahead log checkpointed into it on close) stays near the cap: past it by the last job's end at most.
    capped.close();
    journals.splice(journals.indexOf(capped), 1);
    const size = statSync(join(dir, 'stoker.db')).size;
    expect(size).toBeLessThan(200_000 + 64 * 1024);
  });

  it('a journal that cannot be written (an I/O error, a read-only remount) is taken as full — refused writes name the cause — until a write goes through again (it threw out of a timer and ended the server)', () => {
    const j = open(tempDir());
    j.insert(job('a'));
    const stmts = (j as unknown as { stmts: Record<string, { run: (...a: unknown[]) => unknown }> }).stmts;
    const run = stmts['markRunning']?.run as (...a: unknown[]) => unknown;
    const ioError = Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR_WRITE' });
    (stmts['markRunning'] as { run: unknown }).run = () => {
      throw ioError;
    };
    let refused: unknown;
    try {
      j.markRunning('a');
    } catch (e) {
      refused = e;
    }
    expect(refused).toBeInstanceOf(JournalError);
    expect((refused as JournalError).code).toBe('E_JOURNAL_FULL');
    expect((refused as JournalError).message).toBe(
      'the journal cannot be written: disk I/O error (SQLITE_IOERR_WRITE) — its disk failed or was remounted read-only, or its files were made read-only: the start of job "a" was not written — check the data dir\'s disk, its mount and the permissions of its files (stoker.db and its -wal, -shm and .mark files): writes resume by themselves once they go through',
    );
    expect(j.full).toBe(true);
    expect(j.fullRefusals).toBe(1);
    // Writable again: a write of its own says so (a server not ready gets no submission to say it).
    (stmts['markRunning'] as { run: unknown }).run = run;
    expect(j.checkRoom()).toBe(true);
    expect(j.full).toBe(false);
    expect(j.fullReason()).toBe('the disk of the data dir is full');
    j.markRunning('a');
    expect(j.get('a')?.state).toBe('running');
    // A write that lands clears the cause too: a later full journal is not said as the old I/O error.
    (stmts['markRunning'] as { run: unknown }).run = () => {
      throw ioError;
    };
    j.insert(job('b'));
    expect(() => j.markRunning('b')).toThrow(/disk I\/O error/);
    (stmts['markRunning'] as { run: unknown }).run = run;
    j.insert(job('c'));
    expect(j.full).toBe(false);
    expect(j.fullReason()).toBe('the disk of the data dir is full');
  });

  it('a journal whose file is removed under it (its data dir deleted) refuses new jobs for good: they went to a file no longer there, and were lost at the next start', () => {
    const dir = tempDir();
    const j = open(dir);
    j.insert(job('before'));
    expect(j.checkFile()).toBe(false);
    rmSync(join(dir, 'stoker.db'));
    expect(j.checkFile()).toBe(true);
    expect(j.checkFile()).toBe(false); // (found once)
    expect(j.full).toBe(true);
    expect(() => j.insert(job('after'))).toThrow(expect.objectContaining({ code: 'E_JOURNAL_FULL', message: expect.stringMatching(/^the journal is gone: its file .*stoker\.db was removed or moved away while the server ran: job "after" was not written — restart the server/) }));
    expect(j.checkRoom()).toBe(false);
    // The jobs it holds go on (their writes land in the open file).
    j.markRunning('before');
    expect(j.get('before')?.state).toBe('running');
  });

  it('a new job is refused the moment the file is gone, not at the next look a second later (jobs acknowledged in that second were lost at the restart)', () => {
    const dir = tempDir();
    const j = open(dir);
    j.insert(job('before'));
    rmSync(join(dir, 'stoker.db'));
    // No checkFile() between: the insert looks itself.
    expect(() => j.insert(job('after'))).toThrow(expect.objectContaining({ code: 'E_JOURNAL_FULL', message: expect.stringMatching(/^the journal is gone: its file .*stoker\.db was removed or moved away/) }));
    expect(j.full).toBe(true);
  });

  it.runIf(tmpfsWorks())('a journal on a full disk is refused at open saying so, the jobs intact (it read "disk I/O error … move the file away", which drops them)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stoker-fulldisk-'));
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]).status).toBe(0);
    try {
      const data = join(dir, 'd');
      const j = Journal.open(data);
      j.insert(job('kept'));
      j.close();
      // The disk filled to its last byte.
      spawnSync('dd', ['if=/dev/zero', `of=${join(dir, 'filler')}`, 'bs=4k']);
      expect(() => Journal.open(data)).toThrow(expect.objectContaining({ code: 'E_JOURNAL_FULL', message: expect.stringMatching(/the disk of the data dir .* has \d+ bytes free, and opening the journal needs a little room .* the journal and its jobs are intact: do not move them away$/) }));
      rmSync(join(dir, 'filler'));
      const again = Journal.open(data);
      expect(again.get('kept')?.state).toBe('queued');
      again.close();
    } finally {
      spawnSync('umount', [dir]);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.runIf(chattrWorks())("a journal file this user cannot write is refused at open naming the file and the fix, not advised to be moved away (it read 'disk I/O error … move the file away', which drops its jobs)", () => {
    const dir = tempDir();
    open(dir).close();
    journals.length = 0;
    const file = join(dir, 'stoker.db');
    expect(spawnSync('chattr', ['+i', file]).status).toBe(0);
    try {
      expect(() => Journal.open(dir)).toThrow(expect.objectContaining({ code: 'E_JOURNAL_DIR', message: `the journal's file ${file} cannot be written (no permission): give it back to the user the server runs as (chown; its -wal, -shm and .mark files too), or make it writable (chmod u+w, chattr -i) — not moved away: it holds the jobs` }));
    } finally {
      spawnSync('chattr', ['-i', file]);
    }
  });

  it('leaves only its own files once closed, reopened or not (the check on a read-only connection left a -shm at every stop)', () => {
    const dir = tempDir();
    for (let i = 0; i < 2; i++) {
      const j = Journal.open(dir);
      j.insert(job(`a${i}`));
      j.close();
      expect(readdirSync(dir).sort()).toEqual(['stoker.db', 'stoker.db.mark']);
    }
  });

  it('makes the data dir it creates readable by its user alone (it holds every job\'s input and result)', () => {
    const dir = join(tempDir(), 'above', 'data');
    open(dir);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
  });

  it('marks a queued job running once, stamping startedAt', () => {
    const c = clock();
    const j = open(tempDir(), c.now);
    j.insert(job('a'));
    c.advance(5);
    j.markRunning('a');
    c.advance(5);
    j.markRunning('a');
    expect(j.get('a')).toMatchObject({ state: 'running', startedAt: 1_000_005 });
    expect(codeOf(() => j.markRunning('zz'))).toBe('E_JOURNAL_UNKNOWN_JOB');
  });

  it('finishes a job exactly once', () => {
    const c = clock();
    const j = open(tempDir(), c.now);
    j.insert(job('a'));
    j.insert(job('b'));
    c.advance(100);
    expect(j.finish('a', { state: 'done', result: { commitment: 'abc', n: [1, 2] } })).toBe(true);
    const done = j.get('a');
    expect(done).toMatchObject({ state: 'done', finishedAt: 1_000_100, result: { commitment: 'abc', n: [1, 2] }, errorCode: null });
    c.advance(100);
    expect(j.finish('a', { state: 'cancelled', code: 'E_CANCELLED', reason: 'late cancel' })).toBe(false);
    expect(j.finish('a', { state: 'done', result: 'other' })).toBe(false);
    expect(j.get('a')).toEqual(done);

    expect(j.finish('b', { state: 'failed', code: 'E_DEVICE', reason: 'device lost' })).toBe(true);
    expect(j.get('b')).toMatchObject({ state: 'failed', result: null, errorCode: 'E_DEVICE', errorReason: 'device lost' });
    j.markRunning('b');
    j.markResumed('b');
    expect(j.get('b')).toMatchObject({ state: 'failed', startedAt: null, resumes: 0 });
    expect(codeOf(() => j.finish('zz', { state: 'done', result: 1 }))).toBe('E_JOURNAL_UNKNOWN_JOB');
  });

  it('records partition outputs idempotently and deletes them when the job ends', () => {
    const j = open(tempDir());
    j.insert(job('a'));
    j.markRunning('a');
    j.recordPartition('a', 2, { root: 'r2' });
    j.recordPartition('a', 0, [0, 1]);
    j.recordPartition('a', 0, [0, 1, 2]); // replaced, counted once
    expect(j.partitionOutputs('a')).toEqual(new Map<number, unknown>([[0, [0, 1, 2]], [2, { root: 'r2' }]]));
    expect(j.get('a')?.partitionsDone).toBe(2);
    expect(codeOf(() => j.recordPartition('a', 3, null))).toBe('E_JOURNAL_BAD_INPUT');
    expect(codeOf(() => j.recordPartition('a', -1, null))).toBe('E_JOURNAL_BAD_INPUT');
    expect(codeOf(() => j.recordPartition('zz', 0, null))).toBe('E_JOURNAL_UNKNOWN_JOB');

    expect(j.finish('a', { state: 'cancelled', code: 'E_CANCELLED', reason: 'by client' })).toBe(true);
    expect(j.partitionOutputs('a').size).toBe(0);
    expect(j.recordPartition('a', 1, 'late')).toBe(false);
    expect(j.partitionOutputs('a').size).toBe(0);
    expect(j.get('a')?.partitionsDone).toBe(2);
  });

  it('lists unfinished jobs in submission order and keeps everything across a restart', () => {
    const dir = tempDir();
    const j = open(dir, () => 5); // the same timestamp for all: the order must come from the sequence
    for (const id of ['z', 'a', 'm', 'b']) j.insert(job(id));
    j.markRunning('m');
    j.recordPartition('m', 1, { part: 1 });
    j.finish('a', { state: 'done', result: null });
    expect(j.unfinished().map((x) => x.id)).toEqual(['z', 'm', 'b']);
    j.close();
    j.close(); // idempotent
    expect(codeOf(() => j.get('z'))).toBe('E_JOURNAL_CLOSED');

    const k = open(dir);
    expect(k.unfinished().map((x) => x.id)).toEqual(['z', 'm', 'b']);
    expect(k.get('m')).toMatchObject({ state: 'running', partitionsDone: 1 });
    expect(k.partitionOutputs('m')).toEqual(new Map([[1, { part: 1 }]]));
    k.markResumed('m');
    k.markResumed('m');
    expect(k.get('m')?.resumes).toBe(2);
    // Several at once (a start's resumes, in one transaction): each counted once; none is nothing.
    k.markResumed(['z', 'm', 'b']);
    k.markResumed([]);
    expect(['z', 'm', 'b'].map((id) => k.get(id)?.resumes)).toEqual([1, 3, 1]);
    k.insert(job('c'));
    expect(k.unfinished().map((x) => x.id)).toEqual(['z', 'm', 'b', 'c']);
  });

  it('keeps an inserted job when the process dies without closing', () => {
    const dir = tempDir();
    const j = open(dir);
    j.insert(job('a', { input: 'durable' }));
    // Copy the files as they are on disk while the journal is still open (no close, no
    // checkpoint): what a restart after a crash finds.
    const copy = join(tempDir(), 'after-crash');
    mkdirSync(copy);
    for (const f of readdirSync(dir)) copyFileSync(join(dir, f), join(copy, f));
    const k = open(copy);
    expect(k.get('a')).toMatchObject({ state: 'queued', input: 'durable' });
  });

  it('refuses a second open of a data dir in use with E_JOURNAL_LOCKED', () => {
    const dir = tempDir();
    const j = open(dir);
    j.insert(job('a'));
    const err = errorOf(() => open(dir));
    expect(err?.code).toBe('E_JOURNAL_LOCKED');
    expect(err?.message).toContain(`data dir ${dir} is in use by another stoker serve`);
    expect(j.get('a')?.state).toBe('queued'); // the first is unaffected
    j.close();
    expect(open(dir).get('a')?.state).toBe('queued');
  });

  it('counts jobs by state', () => {
    const j = open(tempDir());
    for (const id of ['a', 'b', 'c', 'd', 'e']) j.insert(job(id));
    j.markRunning('b');
    j.finish('c', { state: 'done', result: 1 });
    j.finish('d', { state: 'failed', code: 'E_X', reason: 'x' });
    j.finish('e', { state: 'cancelled', code: 'E_CANCELLED', reason: 'y' });
    expect(j.counts()).toEqual({ queued: 1, running: 1, done: 1, failed: 1, cancelled: 1 });
    expect(j.pending()).toBe(2);
  });

  it('lists recent jobs newest first, by state, up to a limit', () => {
    const j = open(tempDir());
    for (const id of ['a', 'b', 'c', 'd', 'e', 'f']) j.insert(job(id));
    j.markRunning('b');
    j.finish('c', { state: 'done', result: 1 });
    j.finish('d', { state: 'failed', code: 'E_X', reason: 'x' });
    j.finish('e', { state: 'cancelled', code: 'E_CANCELLED', reason: 'y' });
    const ids = (jobs: { id: string }[]) => jobs.map((x) => x.id);
    expect(ids(j.list())).toEqual(['f', 'e', 'd', 'c', 'b', 'a']);
    expect(ids(j.list({ limit: 2 }))).toEqual(['f', 'e']);
    expect(j.list({ limit: 0 })).toEqual([]);
    expect(ids(j.list({ states: ['queued', 'running'] }))).toEqual(['f', 'b', 'a']);
    expect(ids(j.list({ states: ['running', 'running', 'done'], limit: 5 }))).toEqual(['c', 'b']);
    expect(ids(j.list({ states: ['failed', 'cancelled'], limit: 1 }))).toEqual(['e']);
    expect(j.list({ states: [] })).toEqual([]);
    // Full records, as get() returns them.
    expect(j.list({ states: ['done'] })[0]).toEqual(j.get('c'));
    // A finish does not move a job in the order: the order is submission order.
    j.finish('a', { state: 'done', result: 2 });
    expect(ids(j.list({ states: ['done'] }))).toEqual(['c', 'a']);
    // Lots of jobs: the limit holds.
    for (let i = 0; i < 120; i++) j.insert(job(`n${i}`));
    expect(j.list().length).toBe(50);
    expect(j.list()[0]?.id).toBe('n119');
    expect(j.list({ limit: 1000 }).length).toBe(126);
    expect(codeOf(() => j.list({ limit: -1 }))).toBe('E_JOURNAL_BAD_INPUT');
    expect(codeOf(() => j.list({ limit: 1.5 }))).toBe('E_JOURNAL_BAD_INPUT');
    expect(codeOf(() => j.list({ states: ['nope' as 'done'] }))).toBe('E_JOURNAL_BAD_INPUT');
  });

  it('purges ended jobs by age', () => {
    const c = clock();
    const j = open(tempDir(), c.now);
    for (const id of ['old', 'new', 'live']) j.insert(job(id));
    j.finish('old', { state: 'done', result: 1 }); // at 1_000_000
    c.advance(1_000);
    j.finish('new', { state: 'failed', code: 'E_X', reason: 'x' }); // at 1_001_000
    c.advance(1_000); // now 1_002_000
    expect(j.purgeFinished(2_000)).toBe(0); // finishedAt < 1_000_000: none
    expect(j.purgeFinished(1_500)).toBe(1); // finishedAt < 1_000_500: old
    expect(j.get('old')).toBeUndefined();
    expect(j.purgeFinished(0)).toBe(1);
    expect(j.get('new')).toBeUndefined();
    expect(j.get('live')?.state).toBe('queued'); // unfinished jobs are never purged
  });

  it('reports a file that is not a database with E_JOURNAL_OPEN naming the path', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'stoker.db'), 'this is not a database '.repeat(200));
    const err = errorOf(() => open(dir));
    expect(err?.code).toBe('E_JOURNAL_OPEN');
    expect(err?.message).toContain(join(dir, 'stoker.db'));
    // Moving the database alone away was refused next for its mark (a user trial): the message names every file to move.
    expect(err?.message).toContain(`the file is damaged; keep a copy of the data dir ${dir}, then start afresh by moving ${join(dir, 'stoker.db')} and its ${join(dir, 'stoker.db')}.mark, -wal and -shm files away`);
  });

  it('a data dir that is a file, or under one, is E_JOURNAL_DIR naming the dir and where to set it (it said EEXIST … mkdir, and to move the file away)', () => {
    const file = join(tempDir(), 'afile');
    writeFileSync(file, 'x');
    for (const dir of [file, join(file, 'sub')]) {
      const err = errorOf(() => open(dir));
      expect(err?.code).toBe('E_JOURNAL_DIR');
      expect(err?.message).toMatch(new RegExp(`^(cannot create the data dir|the data dir) ${dir.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}(: a file, not a directory, is in the way| is a file, not a directory) — give a directory you can write \\(dataDir in the config, --data, STOKER_DATA_DIR\\)$`));
    }
  });

  it.skipIf(!existsSync('/proc/self'))('a data dir that cannot be made under /proc is E_JOURNAL_DIR (Node\'s recursive mkdir looped there for ever at 100 % CPU); missing levels above a dir are made', () => {
    const err = errorOf(() => open('/proc/stoker-no-such-dir/sub'));
    expect(err?.code).toBe('E_JOURNAL_DIR');
    expect(err?.message).toMatch(/^cannot create the data dir \/proc\/stoker-no-such-dir\/sub: .*ENOENT/);
    const deep = join(tempDir(), 'a', 'b', 'c');
    open(deep).close();
    expect(existsSync(join(deep, 'stoker.db'))).toBe(true);
  });

  it('upgrades a version-2 journal (no sent_hash): its jobs read as before, a retry of their checked body is still the same job', async () => {
    const dir = tempDir();
    const { default: Database } = await import('better-sqlite3');
    const { SCHEMA } = await import('../../src/server/journal-schema.js');
    const db = new Database(join(dir, 'stoker.db'));
    const v2 = SCHEMA.replace('  sent_hash TEXT,\n  module_hash TEXT,\n', '');
    expect(v2).not.toContain('_hash TEXT,\n  state');
    db.exec(v2);
    const job: JournalJobInput = { id: 'old', kind: 'sleep', priority: 'normal', partitions: 2, input: { seed: 1 }, deadline: null };
    db.prepare(`INSERT INTO jobs (id, kind, priority, partitions, input, deadline, body_hash, state, submitted_at) VALUES ('old', 'sleep', 'normal', 2, '{"seed":1}', NULL, ?, 'queued', 1)`).run(Journal.hash(job));
    db.pragma('user_version = 2');
    db.close();
    const j = open(dir);
    expect(j.get('old')).toMatchObject({ id: 'old', input: { seed: 1 }, sentHash: null, moduleHash: null, state: 'queued' });
    expect(j.insert(job).created).toBe(false);
    // New rows keep the hash of the body as sent: the same body is the same job though its checked form differs.
    const sent = Journal.sentHash({ id: 'new', kind: 'sleep', partitions: 1, input: {} });
    expect(j.insert({ id: 'new', kind: 'sleep', priority: 'normal', partitions: 1, input: { seed: 0 }, deadline: null, sentHash: sent }).created).toBe(true);
    expect(j.get('new')?.sentHash).toBe(sent);
    expect(j.insert({ id: 'new', kind: 'sleep', priority: 'normal', partitions: 1, input: { seed: 5 }, deadline: null, sentHash: sent }).created).toBe(false);
    expect(() => j.insert({ id: 'new', kind: 'sleep', priority: 'normal', partitions: 1, input: { seed: 5 }, deadline: null })).toThrow(/different body/);
    j.close();
    expect(Journal.sentHash({ id: 'x', kind: 'k', input: { b: 1, a: 2 } })).toBe(Journal.sentHash({ input: { a: 2, b: 1 }, kind: 'k', id: 'y' }));
    expect(Journal.sentHash('not an object')).toBeUndefined();
  });

  it('refuses a journal with a newer schema with E_JOURNAL_VERSION', async () => {
    const dir = tempDir();
    open(dir).close();
    const { default: Database } = await import('better-sqlite3');
    const db = new Database(join(dir, 'stoker.db'));
    db.pragma('user_version = 99');
    db.close();
    expect(codeOf(() => open(dir))).toBe('E_JOURNAL_VERSION');
    // The failed open released the file.
    const db2 = new Database(join(dir, 'stoker.db'));
    db2.pragma('user_version = 1');
    db2.close();
    expect(open(dir).counts().queued).toBe(0);
  });
});

/**
 * Large bytes in the journal (schema 4): over BLOB_MIN_BYTES they are written and read a piece
 * per turn of the event loop — written in one go, a 100 MiB result held the server ~3 s — and
 * their pieces are deleted, a few a turn, once no row refers to them.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { BLOB_CHUNK_BYTES } from '../../src/server/journal-schema.js';
import { Journal, JournalError, type JournalJobInput } from '../../src/server/journal.js';

const dirs: string[] = [];
const journals: Journal[] = [];

afterEach(() => {
  for (const j of journals.splice(0)) j.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function open(dir: string, now?: () => number): Journal {
  const j = Journal.open(dir, now ? { now } : {});
  journals.push(j);
  return j;
}

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'stoker-blobs-'));
  dirs.push(dir);
  return dir;
}

function job(id: string, partitions = 2): JournalJobInput {
  return { id, kind: 'k', priority: 'normal', partitions, input: null, deadline: null };
}

/** Bytes that tell their pieces apart. */
function bytes(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7 + (i >> 12)) & 0xff;
  return b;
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Counts the turns of the event loop while `work` runs. */
async function turnsDuring<T>(work: Promise<T>): Promise<{ value: T; turns: number }> {
  let turns = 0;
  let on = true;
  const tick = () => {
    turns++;
    if (on) setImmediate(tick);
  };
  setImmediate(tick);
  const value = await work;
  on = false;
  return { value, turns };
}

/** The pieces and blobs the closed journal in `dir` holds. */
function held(dir: string): { chunks: number; blobs: number } {
  const db = new Database(join(dir, 'stoker.db'), { readonly: true });
  try {
    return { chunks: db.prepare('SELECT count(*) FROM blob_chunks').pluck().get() as number, blobs: db.prepare('SELECT count(*) FROM blobs').pluck().get() as number };
  } finally {
    db.close();
  }
}

const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe('large bytes in the journal', () => {
  it('writes and reads them a piece per turn; a job refers to them as its output and its result, and drops them at its end and its purge', async () => {
    const dir = tempDir();
    let t = 1_000_000;
    const j = open(dir, () => t);
    j.insert(job('a'));
    j.markRunning('a');
    const output = bytes(3 * BLOB_CHUNK_BYTES + 1000, 1);
    const pieces = Math.ceil(output.byteLength / BLOB_CHUNK_BYTES);
    const stored = await turnsDuring(j.storeBlob('the output', output));
    // A piece a turn: the counter ticks once a turn (written in one go: no turn between them, 1 at most).
    expect(stored.turns).toBeGreaterThanOrEqual(pieces - 1);
    expect(j.recordStored('a', 0, '', stored.value)).toBe(true);
    expect(j.get('a')?.partitionsDone).toBe(1);
    expect(same(j.partitionOutputs('a').get(0) as Uint8Array, output)).toBe(true);

    const result = bytes(4 * BLOB_CHUNK_BYTES + 5, 2);
    const blob = await j.storeBlob('the result', result);
    expect(j.finish('a', { state: 'done', result, blob })).toBe(true);
    for (const read of [j.get('a'), j.view('a'), j.list()[0]]) {
      expect(read).toMatchObject({ id: 'a', state: 'done', result: undefined, resultBytes: result.byteLength, resultBlob: blob });
    }
    const back = await turnsDuring(j.readBlob(blob));
    expect(same(back.value, result)).toBe(true);
    // (The first piece is read at once: a turn before each of the others.)
    expect(back.turns).toBeGreaterThanOrEqual(Math.ceil(result.byteLength / BLOB_CHUNK_BYTES) - 2);
    expect(same(j.readBlobNow(blob), result)).toBe(true);

    // The end dropped the output: its pieces are swept, the result's kept.
    for (let i = 0; i < 10; i++) await turn();
    j.close();
    expect(held(dir)).toEqual({ chunks: 5, blobs: 1 });

    // The purge drops the result.
    const again = open(dir, () => t);
    t += 10_000;
    expect(again.purgeFinished(1000)).toBe(1);
    await expect(again.readBlob(blob)).rejects.toMatchObject({ code: 'E_JOURNAL_UNKNOWN_JOB' });
    for (let i = 0; i < 10; i++) await turn();
    again.close();
    expect(held(dir)).toEqual({ chunks: 0, blobs: 0 });
  });

  it('drops bytes no row came to refer to: a job ended meanwhile, a stop cut their writing short, an output replaced', async () => {
    const dir = tempDir();
    const j = open(dir);
    j.insert(job('b'));
    j.markRunning('b');
    const first = await j.storeBlob('an output', bytes(BLOB_CHUNK_BYTES + 1, 3));
    expect(j.recordStored('b', 1, '', first)).toBe(true);
    // The same partition again (a retry after a restart): the first blob is dropped.
    const second = await j.storeBlob('an output', bytes(BLOB_CHUNK_BYTES + 2, 4));
    expect(j.recordStored('b', 1, '', second)).toBe(true);
    expect((j.partitionOutputs('b').get(1) as Uint8Array).byteLength).toBe(BLOB_CHUNK_BYTES + 2);
    j.finish('b', { state: 'cancelled', code: 'E_CANCELLED', reason: 'test' });
    // An output of the job that ended meanwhile is not recorded, and dropped.
    const late = await j.storeBlob('an output', bytes(BLOB_CHUNK_BYTES + 3, 5));
    expect(j.recordStored('b', 0, '', late)).toBe(false);
    // A stop while bytes are written: the write fails, and what was written is dropped at the next open.
    const cut = j.storeBlob('an output', bytes(5 * BLOB_CHUNK_BYTES, 6));
    await turn();
    await turn();
    j.close();
    await expect(cut).rejects.toBeInstanceOf(JournalError);
    expect(held(dir).blobs).toBeGreaterThan(0);
    const reopened = open(dir);
    for (let i = 0; i < 10; i++) await turn();
    reopened.close();
    expect(held(dir)).toEqual({ chunks: 0, blobs: 0 });
  });

  it('upgrades a version-3 journal: its jobs and outputs read as before, and large bytes can be written', async () => {
    const dir = tempDir();
    const j = open(dir);
    j.insert(job('old'));
    j.markRunning('old');
    j.recordPartition('old', 0, { v: 1 });
    j.close();
    // As a version-3 file was: no blob tables or columns.
    const db = new Database(join(dir, 'stoker.db'));
    db.exec('DROP TABLE blobs; DROP TABLE blob_chunks; ALTER TABLE jobs DROP COLUMN result_blob; ALTER TABLE partition_outputs DROP COLUMN output_blob');
    db.pragma('user_version = 3');
    db.close();
    const up = open(dir);
    expect(up.partitionOutputs('old').get(0)).toEqual({ v: 1 });
    const blob = await up.storeBlob('the result', bytes(BLOB_CHUNK_BYTES * 2, 7));
    expect(up.finish('old', { state: 'done', result: null, blob })).toBe(true);
    expect(up.get('old')).toMatchObject({ resultBytes: BLOB_CHUNK_BYTES * 2, resultBlob: blob });
  });
});

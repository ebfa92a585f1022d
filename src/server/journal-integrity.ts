import { closeSync, constants, fstatSync, fsyncSync, ftruncateSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import type Database from 'better-sqlite3';
import { JournalError } from './journal-types.js';

/**
 * A WAL file starts with a 32-byte header (https://www.sqlite.org/fileformat2.html#walformat), all
 * big-endian: the magic (0x377f0682, or 0x377f0683 whose low bit says the checksums are computed
 * on big-endian words rather than little-endian ones), the format version 3007000, the page size,
 * the checkpoint sequence, two salts, and a checksum of bytes 0–23.
 */
const WAL_MAGIC = new Set([0x377f0682, 0x377f0683]);
const WAL_VERSION = 3007000;
const WAL_HEADER_BYTES = 32;
/** The high-water mark: the seq of the last acknowledged job, as 20 digits and a newline, beside the journal. */
const MARK_BYTES = 21;

/**
 * SQLite's WAL checksum over `data` (a multiple of 8 bytes), from the initial pair (0, 0 for the
 * header): for each pair of 32-bit words x0, x1, s0 += x0 + s1 and s1 += x1 + s0, modulo 2^32.
 */
function walChecksum(data: Buffer, bigEndian: boolean, s0 = 0, s1 = 0): [number, number] {
  for (let i = 0; i + 8 <= data.length; i += 8) {
    const x0 = bigEndian ? data.readUInt32BE(i) : data.readUInt32LE(i);
    const x1 = bigEndian ? data.readUInt32BE(i + 4) : data.readUInt32LE(i + 4);
    s0 = (s0 + x0 + s1) >>> 0;
    s1 = (s1 + x1 + s0) >>> 0;
  }
  return [s0, s1];
}

/** What is wrong with a WAL header, or undefined when it is one SQLite would replay. */
function walHeaderProblem(head: Buffer): string | undefined {
  const magic = head.readUInt32BE(0);
  if (!WAL_MAGIC.has(magic)) return `its header is not a SQLite WAL header (magic 0x${magic.toString(16).padStart(8, '0')})`;
  const version = head.readUInt32BE(4);
  if (version !== WAL_VERSION) return `its header is not a SQLite WAL header (format version ${version}, not ${WAL_VERSION})`;
  const page = head.readUInt32BE(8);
  if (page < 512 || page > 65536 || (page & (page - 1)) !== 0) return `its header's page size ${page} is not a power of two from 512 to 65536`;
  const [c0, c1] = walChecksum(head.subarray(0, 24), (magic & 1) === 1);
  if (c0 !== head.readUInt32BE(24) || c1 !== head.readUInt32BE(28)) return `its header's checksum does not match the header (bytes 0–23)`;
  return undefined;
}

/**
 * Before SQLite opens the file (which it must not, not even to create the -shm: opening the
 * database resets a WAL whose header it rejects): a WAL whose header SQLite would reject holds
 * transactions it would drop without a word (jobs that were acknowledged). Refuse, and say how to
 * go on, leaving the file as it is.
 *
 * Only the header is checked strictly: the magic, the format version, the page size and the
 * header's checksum. The frames are not: SQLite replays frames up to the first whose salt or
 * checksum does not match, and a torn last frame is what a crash in the middle of a write leaves
 * (a transaction that never committed, so never acknowledged: synchronous = FULL syncs before 202).
 * A frame damaged further back loses acknowledged jobs too; the high-water mark (checkIntegrity)
 * is what catches that, after the open.
 */
export function checkWal(path: string): void {
  const wal = `${path}-wal`;
  let fd: number;
  try {
    fd = openSync(wal, 'r');
  } catch {
    return; // no WAL: nothing to check
  }
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return;
    const head = Buffer.alloc(WAL_HEADER_BYTES);
    const n = readSync(fd, head, 0, WAL_HEADER_BYTES, 0);
    const problem = n === WAL_HEADER_BYTES ? walHeaderProblem(head) : `it is shorter than a SQLite WAL header (${WAL_HEADER_BYTES} bytes)`;
    if (problem === undefined) return;
    throw new JournalError('E_JOURNAL_DAMAGED', `the journal's write-ahead log ${wal} (${size} bytes) is damaged: ${problem}, so SQLite would drop the jobs acknowledged since the last checkpoint without a word, resetting the WAL as it opens the database. Nothing was opened: the WAL is as it was. Keep a copy of the data dir (the WAL may be recoverable); to start with what ${path} holds, and lose those jobs, move ${wal} away`);
  } finally {
    closeSync(fd);
  }
}

/** PRAGMA quick_check, and the acknowledged high-water mark against the jobs the file holds. */
export function checkIntegrity(db: Database.Database, path: string): void {
  const rows = db.pragma('quick_check') as { quick_check: string }[];
  if (rows.length !== 1 || rows[0]?.quick_check !== 'ok') {
    throw new JournalError('E_JOURNAL_DAMAGED', `the journal ${path} is damaged (PRAGMA quick_check: ${rows.slice(0, 3).map((r) => r.quick_check).join('; ')}): keep a copy of the data dir, then recover it with \`sqlite3 ${path} .recover\` into a new file (and move ${path}.mark away to start with what it holds), or move ${path} with its .mark, -wal and -shm files away to start afresh`);
  }
  const acknowledged = readMark(`${path}.mark`);
  const held = heldSeq(db);
  if (acknowledged > held) {
    throw new JournalError('E_JOURNAL_DAMAGED', `the journal ${path} holds jobs up to number ${held}, but job number ${acknowledged} was acknowledged: ${acknowledged - held} accepted job(s) are gone (the file went back in time: a damaged or deleted WAL, or a restored copy). Keep a copy of the data dir; to start with what the file holds, and accept the loss, move ${path}.mark away`);
  }
}

/**
 * The acknowledged high-water mark; 0 where there is none (no file, or one never written: empty,
 * or the zeros it is made with). Anything else that is not a job number refuses: read as 0, a
 * damaged mark was written over with the file's own and the check was off without a word.
 */
function readMark(file: string): number {
  let text: string;
  try {
    text = readFileSync(file, 'latin1');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw new JournalError('E_JOURNAL_DAMAGED', `the journal's high-water mark ${file} cannot be read (${(e as NodeJS.ErrnoException).code ?? String(e)}): without it the journal cannot tell whether accepted jobs are gone. Make it readable; or, to start without that check (a new mark is written), move it away`);
  }
  if (/^\0*$/.test(text)) return 0;
  const n = /^\d{1,20}\n?$/.test(text) ? Number(text.trim()) : NaN;
  if (Number.isSafeInteger(n)) return n;
  throw new JournalError('E_JOURNAL_DAMAGED', `the journal's high-water mark ${file} is damaged (it holds ${JSON.stringify(text.slice(0, 40))}, not a job number): the journal cannot tell whether accepted jobs are gone. Keep a copy of the data dir; to start with what the journal holds (a new mark is written), move ${file} away`);
}

/**
 * Opens the mark file for writing, with the file's own high-water mark in it (a fresh or
 * moved-away mark starts there). Undefined when it cannot be written (a full disk): the journal
 * then opens without the check, as it did before there was one.
 */
export function openMark(path: string, db: Database.Database): number | undefined {
  const before = readMark(`${path}.mark`);
  let fd: number | undefined;
  try {
    fd = openSync(`${path}.mark`, constants.O_RDWR | constants.O_CREAT, 0o644);
    ftruncateSync(fd, MARK_BYTES);
    writeMark(fd, Math.max(heldSeq(db), before));
    fsyncSync(fd);
    return fd;
  } catch {
    if (fd !== undefined) closeSync(fd);
    return undefined;
  }
}

/** The mark: fixed width, written in place (a failed write leaves the older, lower mark: never a false alarm). */
export function writeMark(fd: number | undefined, seq: number): void {
  if (fd === undefined) return;
  try {
    writeSync(fd, `${String(seq).padStart(MARK_BYTES - 1, '0')}\n`, 0);
  } catch {
    // a full disk: the journal's own writes say so
  }
}

/** The highest job number the file has ever given (AUTOINCREMENT's: purges do not lower it). */
function heldSeq(db: Database.Database): number {
  // (A file with no table yet — its schema was in a WAL that is gone — holds none.)
  if (!db.prepare(`SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'`).get()) return 0;
  return (db.prepare(`SELECT seq FROM sqlite_sequence WHERE name = 'jobs'`).get() as { seq: number } | undefined)?.seq ?? 0;
}

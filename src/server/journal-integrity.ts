import { closeSync, constants, fstatSync, fsyncSync, ftruncateSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import type Database from 'better-sqlite3';
import { JournalError } from './journal-types.js';

/** A WAL file starts with one of these magic numbers (big-endian), then the format version 3007000. */
const WAL_MAGIC = new Set([0x377f0682, 0x377f0683]);
const WAL_HEADER_BYTES = 32;
/** The high-water mark: the seq of the last acknowledged job, as 20 digits and a newline, beside the journal. */
const MARK_BYTES = 21;

/**
 * Before SQLite opens the file: a WAL whose header is not a WAL header holds transactions SQLite
 * would drop without a word (jobs that were acknowledged). Refuse, and say how to go on.
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
    if (n === WAL_HEADER_BYTES && WAL_MAGIC.has(head.readUInt32BE(0)) && head.readUInt32BE(4) === 3007000) return;
    throw new JournalError('E_JOURNAL_DAMAGED', `the journal's write-ahead log ${wal} (${size} bytes) is damaged: its header is not a SQLite WAL header, so SQLite would drop the jobs acknowledged since the last checkpoint without a word. Keep a copy of the data dir; to start with what ${path} holds, and lose those jobs, move ${wal} away`);
  } finally {
    closeSync(fd);
  }
}

/** PRAGMA quick_check, and the acknowledged high-water mark against the jobs the file holds. */
export function checkIntegrity(db: Database.Database, path: string): void {
  const rows = db.pragma('quick_check') as { quick_check: string }[];
  if (rows.length !== 1 || rows[0]?.quick_check !== 'ok') {
    throw new JournalError('E_JOURNAL_DAMAGED', `the journal ${path} is damaged (PRAGMA quick_check: ${rows.slice(0, 3).map((r) => r.quick_check).join('; ')}): keep a copy of the data dir, then recover it with \`sqlite3 ${path} .recover\` into a new file, or move it away to start afresh`);
  }
  const acknowledged = readMark(`${path}.mark`);
  const held = heldSeq(db);
  if (acknowledged > held) {
    throw new JournalError('E_JOURNAL_DAMAGED', `the journal ${path} holds jobs up to number ${held}, but job number ${acknowledged} was acknowledged: ${acknowledged - held} accepted job(s) are gone (the file went back in time: a damaged or deleted WAL, or a restored copy). Keep a copy of the data dir; to start with what the file holds, and accept the loss, move ${path}.mark away`);
  }
}

function readMark(file: string): number {
  try {
    const n = Number(readFileSync(file, 'utf8').trim());
    return Number.isSafeInteger(n) && n > 0 ? n : 0;
  } catch {
    return 0;
  }
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
  return (db.prepare(`SELECT seq FROM sqlite_sequence WHERE name = 'jobs'`).get() as { seq: number } | undefined)?.seq ?? 0;
}

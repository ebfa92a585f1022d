import { losslessJson } from '../runtime/lossless-json.js';
import { JournalError, type JobState, type JournalJob } from './journal-types.js';

/** The journal's SQLite schema and how values are stored in it. */

/**
 * The schema version this code writes (`PRAGMA user_version`). 2: outputs and results may be
 * BLOBs (bytes); the tables are those of 1, so a version-1 file is upgraded by the number alone.
 * 3: `jobs.sent_hash`, the hash of a submission's body as sent, and `jobs.module_hash`, the content
 * hash of its kind's module when it was accepted (NULL in rows written before).
 * 4: large bytes in pieces (`blobs`, `blob_chunks`; `jobs.result_blob`, `partition_outputs.output_blob`):
 * see BLOB_MIN_BYTES.
 */
export const SCHEMA_VERSION = 4;

/**
 * Bytes (an output or a result that is a Uint8Array) over this size are journaled in pieces of
 * BLOB_CHUNK_BYTES, one piece per turn of the event loop, and referenced by their row once all
 * are written: written in one go, SQLite held the event loop ~20 ms a MiB — a 100 MiB result
 * held the server, its health probes and its dispatch to the devices for almost 3 s (a user
 * trial). The same size as VIEW_RESULT_MAX_BYTES: a result in pieces is never in a view.
 */
export const BLOB_MIN_BYTES = 1 << 20;
/** A piece of large bytes: 768 KiB, a multiple of 3 (a result's base64 is sent piece by piece). */
export const BLOB_CHUNK_BYTES = 768 * 1024;

/**
 * The tables of large bytes in pieces (schema 4; made where missing as an older file is upgraded).
 * A blob is `dead` once no row refers to it: its pieces are then deleted (a few blobs at most: no index).
 */
export const BLOB_TABLES = `
CREATE TABLE IF NOT EXISTS blobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  bytes INTEGER NOT NULL,
  dead INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS blob_chunks (
  blob INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (blob, seq)
) WITHOUT ROWID;
`;

/** The columns that refer to a blob (schema 4), by table. */
export const BLOB_COLUMNS: readonly (readonly [table: string, column: string])[] = [
  ['jobs', 'result_blob'],
  ['partition_outputs', 'output_blob'],
];

export const SCHEMA = `
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL,
  priority TEXT NOT NULL,
  partitions INTEGER NOT NULL,
  input TEXT NOT NULL,
  deadline INTEGER,
  body_hash TEXT NOT NULL,
  sent_hash TEXT,
  module_hash TEXT,
  state TEXT NOT NULL,
  submitted_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,
  result TEXT NOT NULL DEFAULT 'null',
  error_code TEXT,
  error_reason TEXT,
  partitions_done INTEGER NOT NULL DEFAULT 0,
  resumes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_state ON jobs (state, seq);
CREATE TABLE partition_outputs (
  job_id TEXT NOT NULL,
  partition INTEGER NOT NULL,
  output TEXT NOT NULL,
  PRIMARY KEY (job_id, partition)
) WITHOUT ROWID;
`;

export const UNFINISHED = `state IN ('queued', 'running')`;
export const PRIORITIES: ReadonlySet<string> = new Set(['critical', 'high', 'normal', 'low']);
export const STATE_LIST: readonly JobState[] = ['queued', 'running', 'done', 'failed', 'cancelled'];
export const JOB_STATES: ReadonlySet<string> = new Set(STATE_LIST);

export interface JobRow {
  id: string; kind: string; priority: JournalJob['priority']; partitions: number; input: string;
  deadline: number | null; body_hash: string; sent_hash: string | null; module_hash: string | null; state: JobState; submitted_at: number;
  /** (NULL only where a read for a view left a large result out: see VIEW_COLUMNS.) */
  started_at: number | null; finished_at: number | null; result: string | Buffer | null; error_code: string | null;
  error_reason: string | null; partitions_done: number; resumes: number;
  /** The stored result's size (octet_length, or its pieces' bytes), where the query asked for it. */
  result_bytes?: number;
  /** The blob holding the result in pieces (then `result` is empty), or NULL. */
  result_blob: number | null;
  /** Whether the stored result is bytes (1) or JSON (0), where the query asked (a view's: its result may be left out). */
  result_is_bytes?: number;
}

/**
 * The largest result a job's view carries, bytes as stored (JSON text, or bytes); a larger one is
 * left out of views and lists, and fetched whole from GET /v1/jobs/:id/result. (A list of jobs
 * whose results were hundreds of MB, base64 in JSON, took 15 s to answer and held the server —
 * the dashboard polls that list every 2 s.)
 */
export const VIEW_RESULT_MAX_BYTES = 1 << 20;

/**
 * The largest result a list of jobs carries, bytes as stored; a larger one is left out by its size,
 * as an input over BRIEF_INPUT_MAX_BYTES is (a list of 1,000 jobs of 1 MB results was 300 MB, read
 * and sent per request: the dashboard's poll of 50, 50 MB every 2 s).
 */
export const LIST_RESULT_MAX_BYTES = 64 * 1024;

/** A stored result's size: its column's, or its pieces' (see BLOB_MIN_BYTES). */
export const RESULT_BYTES = `CASE WHEN result_blob IS NULL THEN octet_length(result) ELSE (SELECT bytes FROM blobs WHERE id = result_blob) END`;

/** A job's columns for a view: the result only up to `maxResult` bytes (NULL past it, and in pieces), and its size. */
const columns = (maxResult: number) => `seq, id, kind, priority, partitions, input, deadline, body_hash, sent_hash, module_hash, state, submitted_at, started_at, finished_at,
  CASE WHEN result_blob IS NOT NULL OR octet_length(result) > ${maxResult} THEN NULL ELSE result END AS result, ${RESULT_BYTES} AS result_bytes, result_blob,
  (result_blob IS NOT NULL OR typeof(result) = 'blob') AS result_is_bytes,
  error_code, error_reason, partitions_done, resumes`;
/** A job's columns for its view: the result up to VIEW_RESULT_MAX_BYTES. */
export const VIEW_COLUMNS = columns(VIEW_RESULT_MAX_BYTES);
/** A job's columns for a list: the result up to LIST_RESULT_MAX_BYTES. */
export const LIST_COLUMNS = columns(LIST_RESULT_MAX_BYTES);

/** Bytes are stored as they are (a BLOB); anything else as JSON text. */
export function toStored(value: unknown, what: string): string | Buffer {
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  return toJson(value, what);
}

/** A stored value back: a BLOB as a Uint8Array, TEXT parsed as JSON. */
export function fromStored(v: string | Buffer): unknown {
  return typeof v === 'string' ? (JSON.parse(v) as unknown) : new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

/** JSON text of a value (`undefined` → `null`); a value JSON cannot hold throws `E_JOURNAL_BAD_INPUT`. */
export function toJson(value: unknown, what: string): string {
  try {
    return losslessJson(value);
  } catch (cause) {
    throw new JournalError('E_JOURNAL_BAD_INPUT', `${what} is not JSON-serialisable (${String(cause)}): pass plain JSON data`, { cause });
  }
}

/** JSON text with object keys sorted recursively, of a value that is already plain JSON. */
export function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export function fromRow(r: JobRow): JournalJob {
  return {
    id: r.id, kind: r.kind, priority: r.priority, partitions: r.partitions,
    input: JSON.parse(r.input) as unknown, deadline: r.deadline, bodyHash: r.body_hash, sentHash: r.sent_hash, moduleHash: r.module_hash,
    state: r.state, submittedAt: r.submitted_at, startedAt: r.started_at, finishedAt: r.finished_at,
    result: r.result === null || r.result_blob !== null ? undefined : fromStored(r.result), ...(r.result_bytes === undefined ? {} : { resultBytes: r.result_bytes }),
    ...(r.result_blob === null ? {} : { resultBlob: r.result_blob }),
    // (Said only where the result was left out: otherwise the result itself says.)
    ...(r.result === null && r.result_is_bytes !== undefined ? { resultIsBytes: r.result_is_bytes === 1 } : {}),
    errorCode: r.error_code, errorReason: r.error_reason,
    partitionsDone: r.partitions_done, resumes: r.resumes,
  };
}

/** The journal's records, outcomes, options and errors (journal.ts is the journal itself). */

/** Where a job is in its life: `queued` and `running` are unfinished, the others are final. */
export type JobState = 'queued' | 'running' | 'done' | 'failed' | 'cancelled';

/** A job as submitted: what {@link Journal.insert} takes. */
export interface JournalJobInput {
  /** The client's id of the job; the idempotency key of a submission. */
  id: string;
  /** The workload that runs the job. */
  kind: string;
  /** The job's priority class. */
  priority: 'critical' | 'high' | 'normal' | 'low';
  /** How many partitions the job has (a positive integer). */
  partitions: number;
  /** The job's input; any JSON value. */
  input: unknown;
  /** When the job should be done, epoch ms, or `null` for none. */
  deadline: number | null;
  /** {@link Journal.sentHash} of the submission as the client sent it (absent: a record not submitted over the API, a cluster's). */
  sentHash?: string | null;
  /** The content hash of the kind's module that accepted it (absent: unknown). */
  moduleHash?: string | null;
}

/** A job as the journal holds it. */
export interface JournalJob extends JournalJobInput {
  /** {@link Journal.hash} of the job's body: tells a retried submission from a conflicting one. */
  bodyHash: string;
  /**
   * {@link Journal.sentHash} of the body as the client sent it, or `null` (a row from before schema
   * 3, a cluster's record): the same body sent again is the same job, whatever the kind's defaults
   * or schema have become since.
   */
  sentHash: string | null;
  /** The content hash of the kind's module that accepted it, or `null` (a row from before schema 3, a record not submitted here). */
  moduleHash: string | null;
  /** Where the job is in its life. */
  state: JobState;
  /** When the job was inserted, epoch ms by the journal's clock. */
  submittedAt: number;
  /** When its first partition started ({@link Journal.markRunning}), or `null`. */
  startedAt: number | null;
  /** When it ended ({@link Journal.finish}), or `null`. */
  finishedAt: number | null;
  /**
   * The result of a `done` job; `null` otherwise. `undefined` where a read for a view
   * ({@link Journal.view}, {@link Journal.list}) left out a result over VIEW_RESULT_MAX_BYTES.
   */
  result: unknown;
  /** The stored result's size in bytes (its JSON text, or its bytes), as the journal read it. */
  resultBytes?: number;
  /**
   * Where a result of bytes over BLOB_MIN_BYTES is journaled in pieces: its blob, read with
   * {@link Journal.readBlob} (`result` is then undefined, and `resultBytes` its size).
   */
  resultBlob?: number;
  /** Whether the stored result is bytes, where a read for a view left it out (`result` undefined): the view says `resultEncoding` all the same. */
  resultIsBytes?: boolean;
  /** The error code of a `failed` or `cancelled` job; `null` otherwise. */
  errorCode: string | null;
  /** The reason of a `failed` or `cancelled` job; `null` otherwise. */
  errorReason: string | null;
  /** How many partitions have their output recorded ({@link Journal.recordPartition}). */
  partitionsDone: number;
  /** How many times the job was resumed after a restart ({@link Journal.markResumed}). */
  resumes: number;
}

/** The body of a job, what {@link Journal.hash} covers: everything submitted but the id. */
export type JournalJobBody = Omit<JournalJobInput, 'id'>;

/** How a job ends: what {@link Journal.finish} takes. */
export type JournalOutcome =
  /** `blob`: the result's bytes already journaled in pieces ({@link Journal.storeBlob}); `result` is then those bytes. */
  | { state: 'done'; result: unknown; blob?: number }
  | { state: 'failed' | 'cancelled'; code: string; reason: string };

/** Options of {@link Journal.open}. */
export interface JournalOptions {
  /**
   * The journal's clock, epoch ms: stamps `submittedAt`, `startedAt`, `finishedAt` and is the
   * "now" of {@link Journal.purgeFinished}.
   * @default Date.now
   */
  now?: () => number;
  /** The journal's largest size, bytes (SQLite's max_page_count): beyond it writes fail as on a full disk. @default unlimited */
  maxBytes?: number;
}

/** Stable codes of {@link JournalError}. */
export type JournalErrorCode =
  /** Another connection (another `stoker serve`) holds the data dir. */
  | 'E_JOURNAL_LOCKED'
  /** The file was written by a newer stoker with a schema this one does not know. */
  | 'E_JOURNAL_VERSION'
  /** The file cannot be opened, read or written, or is not a database. */
  | 'E_JOURNAL_OPEN'
  /** The data dir cannot be used: a file in the way, a read-only file system, no permission (the --data given). */
  | 'E_JOURNAL_DIR'
  /** A job with this id exists with a different body. */
  | 'E_JOURNAL_CONFLICT'
  /** No job has this id. */
  | 'E_JOURNAL_UNKNOWN_JOB'
  /** A job or a partition index is malformed, or a value is not JSON-serialisable. */
  | 'E_JOURNAL_BAD_INPUT'
  /** The journal was closed. */
  | 'E_JOURNAL_CLOSED'
  /** The disk (or the journal's maxBytes) is full: the write did not happen; retry once there is room. */
  | 'E_JOURNAL_FULL'
  /** The file is damaged, or holds fewer jobs than were acknowledged (a damaged WAL dropped some): the journal refuses to open rather than resume fewer jobs silently. */
  | 'E_JOURNAL_DAMAGED';

/** The error class of the journal: `code` is stable, `message` says what to do. */
export class JournalError extends Error {
  override readonly name = 'JournalError';
  constructor(
    readonly code: JournalErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Whether `e` is the journal's error with this code. */
export function isJournalError(e: unknown, code: JournalErrorCode): e is JournalError {
  return e instanceof JournalError && e.code === code;
}

/** Runs a journal write whose failure on a full disk can wait (the state it records is also in memory); undefined then. */
export function ignoreFull<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch (e) {
    if (isJournalError(e, 'E_JOURNAL_FULL')) return undefined;
    throw e;
  }
}

/**
 * A job's view on this node: the journal's record, with the engine's partition states and counts
 * while the job runs here (a resumed job runs only the partitions it had left, numbered anew).
 */
import type { Engine, PartitionState } from '../core/index.js';
import { jobView, type JobView } from './api.js';
import type { JournalJob } from './journal.js';
import { VIEW_RESULT_MAX_BYTES } from './journal-schema.js';
import { countPartitions, isFinal, STATES_PAGE_MAX, type PartitionCounts, type StatesPage } from './progress.js';

/** What a view reads of the engine: a live job's counts and states by engine partition. */
export type LiveJobs = Pick<Engine, 'jobCounts' | 'jobStates'>;

/**
 * The API's view of a job. `run`: the job's partition behind each engine partition of its run here
 * (null: the same partition; undefined: not running here); `maxStates`: the most partitions whose
 * states it lists (more: counts only); `page`: which partitions' states to give.
 */
export function localJobView(j: JournalJob, engine: LiveJobs, run: readonly number[] | null | undefined, maxStates = Infinity, page: StatesPage = { from: 0, limit: STATES_PAGE_MAX }, doneUnrecorded = false, full: ResultForm = false): JobView {
  // Every partition done here, its end (and outputs) waiting for a full journal: the journal's
  // counts read as most of them queued again, beside a status that counted them complete.
  // (Its states too, every one done, as while it ran: null read as no states kept.)
  const partitions = doneUnrecorded && !isFinal(j.state) ? { partitionStates: j.partitions <= maxStates ? new Array<PartitionState>(Math.max(0, Math.min(j.partitions, page.from + page.limit) - page.from)).fill('done') : null, partitionCounts: { ...countPartitions([]), done: j.partitions } } : partitionsOf(j, engine, run, maxStates, page);
  const c = partitions.partitionCounts;
  // Started here before the journal has recorded it (its write comes after, or waits for room on
  // a full disk): a job whose partitions prepare, or are done, is running, not queued.
  const started = j.state === 'queued' && c !== null && c.preparing + c.waiting + c['on-device'] + c.done > 0;
  return jobView({
    record: j,
    state: started ? 'running' : j.state,
    submittedAt: j.submittedAt,
    startedAt: j.startedAt,
    finishedAt: j.finishedAt,
    partitionsDone: j.partitionsDone,
    ...partitions,
    resumes: j.resumes,
    result: resultFields(j, full),
    error: j.errorCode === null ? null : { code: j.errorCode, reason: j.errorReason ?? '' },
  });
}

/**
 * How a view holds its result: false, one over VIEW_RESULT_MAX_BYTES only by its size; true, whole,
 * bytes as base64; `'raw'`, whole, bytes as they are (a Uint8Array, with `resultEncoding` base64
 * saying how JSON gives them: GET …/result sends them, or their base64 piece by piece — as one
 * string, a result of 410 MB or more could not be answered at all).
 */
export type ResultForm = boolean | 'raw';

/**
 * A bytes result journaled in pieces, in a `'raw'` view: its size, and its pieces, read from the
 * journal as they are sent (GET …/result holds one at a time; read whole, each request held a copy
 * of it — four downloads of a 400 MiB result, 1.7 GB).
 */
export class ResultPieces {
  constructor(
    readonly bytes: number,
    readonly pieces: () => AsyncIterable<Buffer>,
  ) {}
}

/**
 * A result for a view: JSON as it is, bytes as base64 with `resultEncoding`; one over
 * VIEW_RESULT_MAX_BYTES as stored only by its size (`resultOmittedBytes`) unless `full` (see ResultForm).
 */
function resultFields(j: JournalJob, full: ResultForm): { result: unknown; resultEncoding?: 'base64'; resultOmittedBytes?: number } {
  const { result } = j;
  const bytes = j.resultBytes ?? storedBytes(result);
  // (Left out, a bytes result still says so: a client knows to ask …/result for bytes.)
  if (!full && (result === undefined || bytes > VIEW_RESULT_MAX_BYTES)) return { result: null, resultOmittedBytes: bytes, ...(j.resultIsBytes || result instanceof Uint8Array ? { resultEncoding: 'base64' as const } : {}) };
  if (result instanceof Uint8Array) return { result: full === 'raw' ? result : Buffer.from(result.buffer, result.byteOffset, result.byteLength).toString('base64'), resultEncoding: 'base64' };
  return { result: result ?? null };
}

/** A result's size as the journal stores it (an end not yet journaled: a full disk). */
function storedBytes(result: unknown): number {
  return result instanceof Uint8Array ? result.byteLength : Buffer.byteLength(JSON.stringify(result) ?? 'null');
}

/** The job's partitions by stage, and each one's state where they are few enough (none for an ended job). */
function partitionsOf(j: JournalJob, engine: LiveJobs, run: readonly number[] | null | undefined, maxStates: number, page: StatesPage): { partitionStates: PartitionState[] | null; partitionCounts: PartitionCounts | null } {
  const counts = isFinal(j.state) || run === undefined ? undefined : engine.jobCounts(j.id);
  // Run here, and the engine has let go of it: it ended, its end is being recorded. The journal's
  // count of done partitions lags it, and read as the rest queued, a finished partition went back
  // to queued for a moment (on-device → queued → done in its progress stream): nothing is shown.
  if (run !== undefined && !counts && !isFinal(j.state)) return { partitionStates: null, partitionCounts: null };
  if (run === undefined || !counts) {
    // Not running here: what the journal counts.
    return { partitionStates: null, partitionCounts: isFinal(j.state) ? null : { ...countPartitions([]), done: j.partitionsDone, queued: j.partitions - j.partitionsDone } };
  }
  // Partitions outside this run finished before a restart.
  const partitionCounts = { ...countPartitions([]), ...counts, done: counts.done + j.partitions - (run?.length ?? j.partitions) };
  return { partitionCounts, partitionStates: j.partitions <= maxStates ? statesOf(j, engine, run, page) : null };
}

/** A live job's partition states in `page`, by the job's own numbering. */
function statesOf(j: JournalJob, engine: LiveJobs, run: readonly number[] | null, page: StatesPage): PartitionState[] | null {
  const to = Math.min(j.partitions, page.from + page.limit);
  if (run === null) return engine.jobStates(j.id, page.from, to) ?? null;
  // A resumed job: engine partition i is the job's partition run[i].
  const all = new Array<PartitionState>(j.partitions).fill('done');
  (engine.jobStates(j.id, 0, run.length) ?? []).forEach((st, i) => (all[run[i] as number] = st));
  return all.slice(page.from, to);
}

/**
 * Journaled jobs on the runtime: a job starts (a resumed one with only the partitions it had
 * left), its start and each partition's output are journaled as they come, and it ends exactly
 * once in the journal, then is announced. An end a full journal cannot take waits in
 * {@link PendingEnds}; a finish that settles after the journal closed is left for the next start.
 */
import { StokerError } from '../core/index.js';
import { sizeClass } from '../runtime/buffer-pool.js';
import type { Runtime } from '../runtime/runtime.js';
import type { GroupCommit, WriteResult } from './group-commit.js';
import { BLOB_MIN_BYTES } from './journal-schema.js';
import { ignoreFull, isJournalError, Journal, type JournalJob, type JournalOutcome } from './journal.js';
import type { LoadedKind } from './kind-module.js';
import type { KindRouter, RoutedInput } from './kinds.js';
import type { ServerLog } from './log.js';
import { PendingEnds, type Announce } from './pending-ends.js';

/** Resumed jobs whose partition numbering is remembered for the timeline after they end. */
const MAX_REMEMBERED_RUNS = 1000;

/** A partition's pooled buffer over what memory() counts by up to this is not said: the smallest size class is 4 KiB, and a preparation allocates more than that beside it anyway. */
const UNDERCOUNT_SAID = 1 << 20;

/** What the runs are made of: the journal and its group commit, the kinds, the runtime and its workload. */
export interface JobRunsParts {
  journal: Journal;
  commits: GroupCommit;
  kinds: ReadonlyMap<string, LoadedKind>;
  runtime: Runtime<RoutedInput, unknown, unknown, unknown>;
  router: KindRouter;
  /** See `Service.open`. */
  endsRecordedElsewhere: boolean;
  /** Says a job started, or a partition's output was journaled. */
  emit(e: { type: 'job.started'; id: string } | { type: 'job.partition'; id: string; partition: number }): void;
  announce: Announce;
  /** Where the engine's own failure is said. */
  log: ServerLog;
}

/** The jobs of one service on its runtime, from their start (or resume) to their end. */
export class JobRuns {
  /** Jobs marked running by this run (at their first partition's start). */
  /** Jobs started here, and when (epoch ms): a view shows them running from then, before the journal has recorded it. */
  private readonly started = new Map<string, number>();
  /** Of those, the jobs whose start a full journal did not take (the journal has them queued, readers running), with their kind and submission time. */
  private readonly startsKept = new Map<string, { kind: string; submittedAt: number }>();
  /** Live jobs: the job's partition behind each engine partition of this run (null: the same partition). */
  private readonly runs = new Map<string, readonly number[] | null>();
  /** Resumed jobs (engine partition i is the job's partition run[i]): kept after the end for the timeline. */
  private readonly resumedRuns = new Map<string, number[]>();
  private readonly pending: PendingEnds;
  private journalClosed = false;

  /** Whether the runtime failed (E_RUNTIME_FAILED), said once. */
  private runtimeFailed = false;
  /** The kinds whose memory() was found to count less than the pooled buffer each partition is lent, said once each. */
  private readonly underCounted = new Set<string>();
  /** Large bytes being journaled in pieces (see storeLarge): a stop waits for them. */
  private readonly storing = new Set<Promise<void>>();

  constructor(private readonly p: JobRunsParts) {
    // (An end that lands later: the journal has the job ended, started or not.)
    this.pending = new PendingEnds(p.journal, p.endsRecordedElsewhere, p.announce, (id) => {
      this.started.delete(id);
      this.startsKept.delete(id);
    });
  }

  /** A partition of the job starts preparing: the first one marks the job running. */
  markStarted(jobId: string): void {
    if (this.started.has(jobId)) return;
    const at = Date.now();
    this.started.set(jobId, at);
    this.later(
      () => this.p.journal.markRunning(jobId, at),
      (_, ok) => {
        // (A resumed job's row may say running already: only a queued one is kept out.)
        const row = !ok && this.started.has(jobId) ? this.p.journal.view(jobId) : undefined;
        if (row?.state === 'queued') this.startsKept.set(jobId, { kind: row.kind, submittedAt: row.submittedAt });
        this.p.emit({ type: 'job.started', id: jobId });
      },
    );
  }

  /**
   * A partition's output, journaled (on a full disk it stays in memory only: after a crash that
   * partition runs again). One the journal cannot hold (bytes nested in JSON, a BigInt…) throws
   * `E_JOURNAL_BAD_INPUT` here, at once, so that its partition fails saying so (thrown from the
   * group commit, it ended the process, and again on every restart) — its job at once, without
   * the retries, which would return the same output.
   */
  partitionDone(jobId: string, partition: number, output: unknown): void {
    let stored: string | Buffer;
    try {
      stored = Journal.storedOutput(jobId, partition, output);
    } catch (e) {
      // The same output again would fail the same way: no retry.
      throw Object.assign(e as Error, { retry: false });
    }
    const said = (recorded: boolean | undefined) => recorded && this.p.emit({ type: 'job.partition', id: jobId, partition });
    if (typeof stored !== 'string' && stored.length > BLOB_MIN_BYTES) {
      // (Not journaled — a full disk, a stop — it stays in memory only, as any output on a full disk.)
      this.storeLarge(`the output of partition ${partition} of job ${JSON.stringify(jobId)}`, stored, (blob) =>
        this.later(
          () => this.p.journal.recordStored(jobId, partition, '', blob),
          (recorded, ok) => (ok ? said(recorded) : ignoreFull(() => this.p.journal.dropBlob(blob))),
        ),
      );
      return;
    }
    this.later(() => this.p.journal.recordStored(jobId, partition, stored), said);
  }

  /**
   * Journals large bytes in pieces, a piece per turn of the event loop (Journal.storeBlob), then
   * `then` with their blob; `otherwise` where they could not be (a full disk). A stop waits for
   * what is under way (see settled); one after the journal closed is left (nothing refers to it:
   * dropped at the next open).
   */
  private storeLarge(what: string, bytes: Uint8Array, then: (blob: number) => void, otherwise?: () => void): void {
    if (this.journalClosed) return;
    const stored = this.p.journal.storeBlob(what, bytes).then(
      (blob) => {
        if (!this.journalClosed) then(blob);
      },
      (e: unknown) => {
        if (this.journalClosed || isJournalError(e, 'E_JOURNAL_CLOSED')) return;
        if (!isJournalError(e, 'E_JOURNAL_FULL')) this.p.log(`stoker serve: error: ${what} could not be journaled (${e instanceof Error ? e.message : String(e)}): it is kept in memory only`);
        otherwise?.();
      },
    );
    this.storing.add(stored);
    const done = () => this.storing.delete(stored);
    stored.then(done, (e: unknown) => {
      done();
      this.p.log(`stoker serve: error: ${what}: ${e instanceof Error ? e.message : String(e)}`);
    });
  }

  /** Once the large bytes being journaled are (a stop, before the journal closes). */
  async settled(): Promise<void> {
    while (this.storing.size > 0) await Promise.allSettled([...this.storing]);
  }

  /** A job from the journal, unfinished at the last stop: its unfinished partitions start again (its resume is counted by the caller: Journal.markResumed, all at once). */
  resume(job: JournalJob): void {
    this.startWith(job, this.p.journal.partitionOutputs(job.id));
  }

  /** Starts a job whose partitions in `recorded` already finished: only the others run. */
  startWith(job: JournalJob, recorded: Map<number, unknown>): void {
    if (recorded.size === 0) return this.start(job, null, recorded);
    const left: number[] = [];
    for (let p = 0; p < job.partitions; p++) if (!recorded.has(p)) left.push(p);
    if (left.length > 0) {
      this.resumedRuns.set(job.id, left);
      if (this.resumedRuns.size > MAX_REMEMBERED_RUNS) this.resumedRuns.delete(this.resumedRuns.keys().next().value as string);
      this.start(job, left, recorded);
      return;
    }
    // Every partition finished before the stop: only the finish is left.
    Promise.resolve()
      .then(() => this.p.router.finish({ jobId: job.id, input: { kind: job.kind, input: job.input, total: job.partitions, partitions: [], recorded }, outputs: [] }))
      .then(
        (result) => this.end(job.id, { state: 'done', result }),
        (e: unknown) => this.end(job.id, { state: 'failed', code: 'E_FINISH_FAILED', reason: e instanceof Error ? e.message : String(e) }),
      );
  }

  /** Ends a job in the journal (once the group commit ran, it is announced, or kept for a full disk). */
  end(id: string, outcome: JournalOutcome): void {
    this.runs.delete(id);
    // A finish that settles after shutdown closed the journal: the job stays unfinished there and
    // its finish runs again, from the recorded outputs, on the next start.
    if (this.journalClosed) return;
    if (outcome.state === 'done' && outcome.blob === undefined && outcome.result instanceof Uint8Array && outcome.result.byteLength > BLOB_MIN_BYTES) {
      // (Not in pieces — a full disk — it is written whole, or kept until it fits.)
      this.storeLarge(`the result of job ${JSON.stringify(id)}`, outcome.result, (blob) => this.commitEnd(id, { ...outcome, blob }), () => this.commitEnd(id, outcome));
      return;
    }
    this.commitEnd(id, outcome);
  }

  private commitEnd(id: string, outcome: JournalOutcome): void {
    if (this.journalClosed) return;
    this.p.commits.add({ write: () => this.p.journal.finish(id, outcome), after: (r) => this.ended(id, outcome, r) });
  }

  /** The job as the journal has it (with an end a full disk kept out, where ends are recorded elsewhere too). */
  stored(id: string): JournalJob | undefined {
    const j = this.p.journal.get(id);
    return j && this.overlay(j);
  }

  /**
   * A journaled job as readers see it (see {@link stored}): started here before the journal
   * has recorded it (its write comes after, or waits for room on a full disk), it is running
   * since then — read `running` with no `startedAt`, a view contradicted itself.
   */
  overlay(j: JournalJob): JournalJob {
    const at = this.started.get(j.id);
    const started = j.state === 'queued' && at !== undefined ? { ...j, state: 'running' as const, startedAt: at } : j;
    return this.pending.overlay(started);
  }

  /** Ends a full journal could not take yet (retried every second): while there are, their retries say whether there is room. */
  get endsKept(): number {
    return this.pending.size;
  }

  /** Whether the job ended here with every partition done, its end kept until the (full) journal takes it. */
  doneUnrecorded(jobId: string): boolean {
    return this.pending.kept(jobId) === 'done';
  }

  /** A job running here: its partition behind each engine partition (null: the same); undefined when not running here. */
  live(jobId: string): readonly number[] | null | undefined {
    return this.runs.get(jobId);
  }

  /** The job's own partition behind an engine partition (they differ for a resumed job). */
  jobPartition(jobId: string, enginePartition: number): number {
    const run = this.runs.get(jobId) ?? this.resumedRuns.get(jobId);
    return run?.[enginePartition] ?? enginePartition;
  }

  /** Shutdown, once the runtime stopped: the ends a full disk kept from the journal get one more try; the rest resume on the next start. */
  landPending(): void {
    this.pending.close();
  }

  /** Closes the journal: what settles later is not journaled (see {@link end}). */
  closeJournal(): void {
    this.journalClosed = true;
    this.p.journal.close();
  }

  private start(job: JournalJob, partitions: readonly number[] | null, recorded: Map<number, unknown>): void {
    const kind = this.p.kinds.get(job.kind);
    if (!kind) {
      // (Never resumed: Service.resumeUnfinished leaves such jobs for a server with the kind. A cluster job whose kind this node lost.)
      this.end(job.id, { state: 'failed', code: 'E_UNKNOWN_KIND', reason: `kind ${JSON.stringify(job.kind)} is not loaded on this server: start it with --kind <module> (or [kinds.${job.kind}] in the config)` });
      return;
    }
    let memory: ReturnType<LoadedKind['memory']>;
    try {
      memory = kind.memory(job.input);
      this.checkCounted(kind, job.input, memory.prepareBytes);
    } catch (e) {
      this.end(job.id, { state: 'failed', code: 'E_KIND_FAILED', reason: (e as Error).message });
      return;
    }
    const runtime = this.p.runtime;
    const deadline = job.deadline === null ? undefined : runtime.now() + (job.deadline - Date.now());
    const routed: RoutedInput = { kind: job.kind, input: job.input, total: job.partitions, partitions, recorded };
    this.runs.set(job.id, partitions);
    // A resumed job's failure reasons name its own partition numbers, not the engine's of this run.
    const spec = { id: job.id, kind: job.kind, priority: job.priority, partitions: partitions?.length ?? job.partitions, memory, ...(deadline === undefined ? {} : { deadline }), ...(partitions ? { partitionNumbers: partitions } : {}) };
    runtime.submit(spec, routed).then(
      (result) => this.end(job.id, { state: 'done', result }),
      (e: unknown) => this.failed(job, e),
    );
  }

  /**
   * Says once per kind where memory() counts fewer preparation bytes than the pooled buffer each
   * partition is lent (buffer(input) rounded up to its size class) by more than UNDERCOUNT_SAID:
   * the memory budget then holds more than it counts (a trial's 80 MiB partitions were lent 128
   * MiB each, 1.6× its budget).
   */
  private checkCounted(kind: LoadedKind, input: unknown, prepareBytes: number): void {
    if (this.underCounted.has(kind.name)) return;
    const bytes = kind.bufferBytes(input);
    const lent = bytes > 0 ? sizeClass(bytes) : 0;
    if (lent - prepareBytes <= UNDERCOUNT_SAID) return;
    this.underCounted.add(kind.name);
    this.p.log(`stoker serve: kind ${kind.name}: memory() counts ${prepareBytes} preparation bytes a partition, but each is lent a pooled buffer of ${lent} bytes (buffer() asks ${bytes}, rounded up to its size class): the memory budget holds more than it counts — return prepareBytes of at least ${lent} from memory(), or leave memory() out (it then counts what is lent)`);
  }

  /** A job the runtime failed: its end, but for a cancel (journaled by whoever cancelled, or a shutdown's: not the job's end). */
  private failed(job: JournalJob, e: unknown): void {
    const code = e instanceof StokerError ? e.code : 'E_INTERNAL';
    const reason = e instanceof Error ? e.message : String(e);
    // A client's cancel is journaled by Service.cancel itself; a shutdown's is not the job's end:
    // the job stays unfinished and resumes on the next start. Nor is the engine's own failure
    // (E_RUNTIME_FAILED: a step that threw — a bug, not the job's doing): said once; the jobs stay
    // unfinished, to resume when the server starts again.
    if (code === 'E_CANCELLED') return;
    if (code === 'E_RUNTIME_FAILED') {
      if (!this.runtimeFailed) this.p.log(`stoker serve: error: ${reason}; the unfinished jobs are kept in the journal and resume when the server starts again: restart it`);
      this.runtimeFailed = true;
      return;
    }
    // The engine names the deadline in its own clock: say it as the client gave it.
    const said = code === 'E_DEADLINE' && job.deadline !== null ? `job ${job.id} missed its deadline ${new Date(job.deadline).toISOString()}` : reason;
    this.end(job.id, { state: 'failed', code, reason: said });
  }

  /** A job's end, once the group commit that journals it ran: announced, or kept for a full disk. */
  private ended(id: string, outcome: JournalOutcome, r: WriteResult<boolean>): void {
    if (r.ok) {
      // (Until its end is in the journal, a view shows it started: forgotten before, a job read running, queued, done.)
      this.started.delete(id);
      this.startsKept.delete(id);
      // (Its view: the announcement needs no result — one of 128 MiB read back whole held the event loop a second.)
      const job = this.p.journal.view(id);
      if (r.value && job) this.p.announce(job, job.finishedAt ?? Date.now(), outcome);
      return;
    }
    const e = r.error;
    // The job has ended; the journal cannot say so yet: it stays unfinished, and its end is
    // retried until it lands, then announced (after a crash meanwhile, the job runs again).
    if (isJournalError(e, 'E_JOURNAL_FULL')) return this.pending.keep(id, outcome);
    // A result the journal cannot hold (bytes nested in JSON, a BigInt…) is the kind's fault:
    // the job fails saying so (before, the error escaped and ended the process, on every restart).
    if (!(outcome.state === 'done' && isJournalError(e, 'E_JOURNAL_BAD_INPUT'))) throw e;
    this.end(id, { state: 'failed', code: 'E_FINISH_FAILED', reason: `job ${id}: its result cannot be stored: ${e.message}` });
  }

  /**
   * A journal write that can wait for the next group commit (the state it records is in memory
   * meanwhile); on a full disk it is skipped (see ignoreFull), `then` gets undefined.
   */
  private later<T>(write: () => T, then: (value: T | undefined, ok: boolean) => void): void {
    if (this.journalClosed) return;
    this.p.commits.add({
      write,
      after: (r) => {
        if (!r.ok && !isJournalError(r.error, 'E_JOURNAL_FULL')) throw r.error;
        then(r.ok ? r.value : undefined, r.ok);
      },
    });
  }

  /** The jobs started here whose start a full journal kept out: the journal has them queued, their views running (see {@link overlay}). */
  get startsUnrecorded(): ReadonlyMap<string, { kind: string; submittedAt: number }> {
    return this.startsKept;
  }

  /** The jobs whose ends are kept where readers see them (recorded elsewhere too): ended in their views, not in the journal. */
  endsShown(): string[] {
    return this.pending.ids();
  }
}

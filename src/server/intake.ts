/**
 * Taking in submissions: the checks before a job is journaled (the same job again, a past
 * deadline, the pending limits), the insert (in the next group commit, or at once), and the
 * answers to the ways it can fail. Accepted jobs are journaled before they are acknowledged.
 */
import type { Engine, PartitionMemory } from '../core/index.js';
import { AdmissionGate } from './admission.js';
import type { JobView } from './api.js';
import type { ServerConfig } from './config.js';
import { conflict, quoted, refusePastDeadline, ServiceError, shuttingDown, tooManyJobs } from './errors.js';
import type { GroupCommit } from './group-commit.js';
import { isJournalError, Journal, type JournalJob, type JournalJobInput } from './journal.js';
import type { LoadedKind } from './kind-module.js';
import { checkedByKind, invalid, parseSubmission } from './submission.js';

/** A submission's answer: the job's view, and whether this submission created it. */
export type Submitted = { job: JobView; created: boolean };

/** What the intake works with: the limits, the journal and its group commit, the kinds and the engine, and the service's side. */
export interface IntakeParts {
  server: ServerConfig;
  journal: Journal;
  commits: GroupCommit;
  kinds: ReadonlyMap<string, LoadedKind>;
  engine: Engine;
  /** Whether shutdown began (nothing more is accepted). */
  closing(): boolean;
  /** Unfinished jobs this server leaves on hold (a kind not loaded, partitions over the budget, an input the module now refuses: they wait for a start that runs them): not counted against server.maxPendingJobs. */
  onHold(): number;
  /** The content hash of a kind's module (journaled with each job it accepts), undefined where unknown. */
  moduleHash(kind: string): string | undefined;
  /** The job as readers see it (see `JobRuns.stored`). */
  stored(id: string): JournalJob | undefined;
  /** The answer for a journaled job, new (it starts, `recorded`: outputs of partitions finished elsewhere) or the same one again. */
  admitted(inserted: { job: JournalJob; created: boolean }, recorded: ReadonlyMap<number, unknown>): Submitted;
}

/** The intake of one service: its admission gate and the submissions between their checks and their commit. */
export class Intake {
  /** Submissions checked and waiting for their group commit (they count as pending). */
  private readonly admitting = { jobs: 0, partitions: 0 };
  /** Paces submissions while the engine has work (a flood must not starve it). */
  private readonly gate: AdmissionGate;

  constructor(private readonly p: IntakeParts) {
    this.gate = new AdmissionGate(() => {
      const s = p.engine.snapshot;
      return s.backlog + s.preparing + s.waiting + s.onDevice > 0;
    });
  }

  /** See `Service.submit`. */
  async submit(raw: unknown): Promise<Submitted> {
    await this.gate.enter();
    const checked = this.admission(raw);
    if ('answer' in checked) return checked.answer;
    const { record } = checked;
    this.admitting.jobs++;
    this.admitting.partitions += record.partitions;
    return new Promise((resolve, reject) => {
      this.p.commits.add({
        write: () => this.p.journal.insert(record),
        after: (r) => {
          this.admitting.jobs--;
          this.admitting.partitions -= record.partitions;
          if (r.ok) resolve(this.p.admitted(r.value, new Map()));
          else reject(this.insertError(r.error, record.id));
        },
      });
    });
  }

  /** See `Service.submitNow`. */
  submitNow(raw: unknown, recorded: ReadonlyMap<number, unknown>): Submitted {
    return this.insertNow(this.admission(raw), recorded);
  }

  /** See `Service.submitRecord`. */
  submitRecord(record: JournalJobInput, recorded: ReadonlyMap<number, unknown>): Submitted {
    if (this.p.closing()) throw shuttingDown(this.p.server.retryAfterS);
    const kind = this.p.kinds.get(record.kind);
    if (!kind) throw invalid([{ path: 'kind', message: `kind ${quoted(record.kind)} is not loaded on this server: use one of ${[...this.p.kinds.keys()].join(', ')}` }]);
    const { memory, ...checked } = checkedByKind(kind, record.input, record.partitions);
    return this.insertNow(this.admit({ ...record, ...checked, moduleHash: this.p.moduleHash(record.kind) ?? null }, true, memory), recorded);
  }

  /** A job ended: the admission gate counts the rate they end at. */
  ended(): void {
    this.gate.ended();
  }

  /** Shutdown: every submission waiting at the gate goes on (and is refused). */
  close(): void {
    this.gate.close();
  }

  private insertNow(checked: ReturnType<Intake['admit']>, recorded: ReadonlyMap<number, unknown>): Submitted {
    if ('answer' in checked) return checked.answer;
    let inserted: { job: JournalJob; created: boolean };
    try {
      inserted = this.p.journal.insert(checked.record);
    } catch (e) {
      throw this.insertError(e, checked.record.id);
    }
    return this.p.admitted(inserted, recorded);
  }

  /** A submission's checks before it is journaled: the record to journal, or the answer for a job that exists. */
  private admission(raw: unknown): { record: JournalJobInput } | { answer: Submitted } {
    if (this.p.closing()) throw shuttingDown(this.p.server.retryAfterS);
    // The same body sent again is the same job, before any check that a kind's new version (its
    // defaults, its schema) or a start without its module would answer otherwise.
    const sentHash = Journal.sentHash(raw);
    const id = (raw as { id?: unknown } | null)?.id;
    if (sentHash !== undefined && typeof id === 'string') {
      const existing = this.p.stored(id);
      if (existing && existing.sentHash === sentHash) return { answer: this.p.admitted({ job: existing, created: false }, new Map()) };
    }
    const { record, explicitId, memory } = parseSubmission(raw, this.p.kinds);
    return this.admit({ ...record, sentHash: sentHash ?? null, moduleHash: this.p.moduleHash(record.kind) ?? null }, explicitId, memory);
  }

  /**
   * A partition that needs more than the whole memory budget can never start: refused (400, naming
   * the input and engine.budgetBytes) rather than accepted and failed at once with E_OVERSIZE.
   */
  private refuseOversize(record: JournalJobInput, { prepareBytes, deviceBytes }: PartitionMemory): void {
    const budget = this.p.engine.budget.totalBytes;
    if (!Number.isFinite(budget)) return;
    const need = Math.max(prepareBytes, deviceBytes);
    if (need > budget) {
      throw invalid([{ path: 'input', message: `each partition of this input needs ${need} bytes (kind ${record.kind}'s memory(input): the larger of prepareBytes ${prepareBytes} and deviceBytes ${deviceBytes}), more than the whole memory budget, engine.budgetBytes = ${budget}: raise engine.budgetBytes, or submit smaller partitions` }]);
    }
  }

  /** The checks of a parsed submission: an existing job's answer (or 409), a past deadline, partitions over the memory budget, too many partitions or jobs pending. */
  private admit(record: JournalJobInput, explicitId: boolean, memory: PartitionMemory): { record: JournalJobInput } | { answer: Submitted } {
    if (explicitId) {
      const existing = this.p.stored(record.id);
      if (existing) {
        if (existing.bodyHash !== Journal.hash(record)) throw conflict(record.id);
        return { answer: this.p.admitted({ job: existing, created: false }, new Map()) };
      }
    }
    refusePastDeadline(record.deadline);
    this.refuseOversize(record, memory);
    this.refuseTooManyPartitions(record.partitions);
    const { maxPendingJobs, retryAfterS } = this.p.server;
    if (this.p.journal.pending() - this.p.onHold() + this.admitting.jobs >= maxPendingJobs) throw tooManyJobs(maxPendingJobs, 'pending', retryAfterS);
    return { record };
  }

  /**
   * Bounds the backlog (a partition costs memory only once dispatched, but a backlog of millions
   * is a mistake): a job larger than server.maxPendingPartitions is refused (400: it never fits),
   * one that does not fit beside the pending ones gets 429.
   */
  private refuseTooManyPartitions(partitions: number): void {
    const { maxPendingPartitions: max, retryAfterS } = this.p.server;
    if (partitions > max) throw new ServiceError(400, 'too-many-partitions', 'Too many partitions', `partitions is ${partitions}, more than server.maxPendingPartitions (${max}): split the job, or raise the limit`);
    const s = this.p.engine.snapshot;
    const pending = s.backlog + s.preparing + s.waiting + s.onDevice + this.admitting.partitions;
    if (pending + partitions > max) {
      throw new ServiceError(429, 'too-many-partitions', 'Too many pending partitions', `${pending} partitions are pending and this job has ${partitions}: more than server.maxPendingPartitions (${max}); retry after ${retryAfterS} s`, { retryAfterS });
    }
  }

  private insertError(e: unknown, id: string): unknown {
    if (isJournalError(e, 'E_JOURNAL_CONFLICT')) return conflict(id);
    if (isJournalError(e, 'E_JOURNAL_FULL')) {
      return new ServiceError(507, 'insufficient-storage', 'Insufficient storage', `the journal cannot take the job (${e.message}): nothing was accepted; retry later (once the journal takes writes again: /readyz says when)`, { retryAfterS: this.p.server.retryAfterS });
    }
    return e;
  }
}

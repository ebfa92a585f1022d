/**
 * Ends of jobs a full journal could not record yet, retried every second. Such a job stays
 * unfinished for readers until its end lands (then it is announced): an end announced before it
 * is durable would be announced again should a crash make the job run again. (Unless its end is
 * recorded elsewhere too — a cluster node's, in Redis: then readers see it from memory, and it is
 * announced at once.)
 */
import { isJournalError, type Journal, type JournalJob, type JournalOutcome } from './journal.js';
import { isFinal } from './progress.js';

/** Announces a job's end (`finishedAt`: epoch ms). */
export type Announce = (job: JournalJob, finishedAt: number, outcome: JournalOutcome) => void;

/** The kept ends of one journal, and their retry timer. */
export class PendingEnds {
  private readonly ends = new Map<string, { outcome: JournalOutcome; at: number }>();
  private timer: NodeJS.Timeout | undefined;
  /** After close: an end kept then waits for the next start (a retry would write to a closed journal). */
  private closed = false;

  constructor(
    private readonly journal: Journal,
    /** See `Service.open`. */
    private readonly recordedElsewhere: boolean,
    private readonly announce: Announce,
    /** A kept end is in the journal now (or moot: the job is gone). */
    private readonly landed: (id: string) => void = () => {},
  ) {}

  /** Keeps the end of a job the journal could not take, until it lands (a job already ended, or kept, is left as it is). */
  keep(id: string, outcome: JournalOutcome): void {
    const job = this.journal.get(id);
    if (!job || isFinal(job.state) || this.ends.has(id)) return;
    this.ends.set(id, { outcome, at: Date.now() });
    if (!this.closed) this.timer ??= setInterval(() => this.land(), 1000).unref();
    if (this.recordedElsewhere) this.announce(job, Date.now(), outcome);
  }

  /** Tries to journal the ends kept; those that land are announced, the moot forgotten. */
  private land(): void {
    for (const [id, { outcome }] of this.ends) {
      let landed = false;
      try {
        landed = this.journal.finish(id, outcome);
      } catch (e) {
        if (isJournalError(e, 'E_JOURNAL_FULL')) return;
        if (!isJournalError(e, 'E_JOURNAL_UNKNOWN_JOB')) throw e;
      }
      this.ends.delete(id);
      this.landed(id);
      const j = landed && !this.recordedElsewhere ? this.journal.get(id) : undefined;
      if (j) this.announce(j, j.finishedAt ?? Date.now(), outcome);
    }
    if (this.ends.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** The jobs whose ends are kept where readers see them (recorded elsewhere too: see {@link overlay}). */
  ids(): string[] {
    return this.recordedElsewhere ? [...this.ends.keys()] : [];
  }

  /** How many ends are kept, not yet journaled. */
  get size(): number {
    return this.ends.size;
  }

  /** The state of the end kept for a job (ended here, not yet journaled), if any. */
  kept(id: string): JournalOutcome['state'] | undefined {
    return this.ends.get(id)?.outcome.state;
  }

  /** The job as readers see it: with its kept end, where ends are recorded elsewhere too. */
  overlay(j: JournalJob): JournalJob {
    const u = this.recordedElsewhere ? this.ends.get(j.id) : undefined;
    if (!u || isFinal(j.state)) return j;
    const o = u.outcome;
    if (o.state !== 'done') return { ...j, state: o.state, finishedAt: u.at, errorCode: o.code, errorReason: o.reason };
    // (The row's size was its 'null''s: a view would have carried a result of any size.)
    const done: JournalJob = { ...j, state: 'done', finishedAt: u.at, result: o.result };
    delete done.resultBytes;
    return done;
  }

  /** Shutdown: one more try, then no more retries (the ends left resume on the next start). */
  close(): void {
    this.land();
    this.closed = true;
    clearInterval(this.timer);
    this.timer = undefined;
  }
}

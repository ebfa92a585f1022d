/**
 * Group commit for the journal: writes asked for while the event loop handles one batch of I/O
 * (a flood of submits, the completions of a busy engine) are committed together on the next turn
 * (`setImmediate`), in one transaction: one sync of the disk for all of them instead of one each,
 * which under a flood was most of the event loop's time. What depends on a write being durable
 * (a submit's 202, a job's end being announced) runs in its `after`, once the group committed.
 */
import { isJournalError, type Journal } from './journal.js';

/** The outcome of one write in a group. */
export type WriteResult<T> = { ok: true; value: T } | { ok: false; error: unknown };

/** A journal write, and what follows it once it is durable (or has failed). */
export interface GroupWrite<T> {
  /** The journal calls (run inside the group's transaction; may throw). */
  write(): T;
  /** Runs after the group committed (or the write failed): answers the client, announces the end. */
  after(result: WriteResult<T>): void;
}

/** The most writes committed in one group (the rest go in the next turn's). */
const MAX_GROUP = 1024;

export class GroupCommit {
  private pending: GroupWrite<unknown>[] = [];
  private scheduled: NodeJS.Immediate | undefined;

  constructor(private readonly journal: Journal) {}

  /** Writes waiting for the next group. */
  get size(): number {
    return this.pending.length;
  }

  add<T>(w: GroupWrite<T>): void {
    this.pending.push(w as GroupWrite<unknown>);
    this.scheduled ??= setImmediate(() => this.flush(1));
  }

  /** Commits what is pending, `groups` groups at most (all of it: at close, before the journal closes). */
  flush(groups = Infinity): void {
    if (this.scheduled) clearImmediate(this.scheduled);
    this.scheduled = undefined;
    for (let g = 0; g < groups && this.pending.length > 0; g++) {
      const batch = this.pending.splice(0, MAX_GROUP);
      let results: WriteResult<unknown>[];
      try {
        results = this.journal.group(() => batch.map((w) => attempt(w, true)));
      } catch {
        // The group rolled back (a full disk): each write alone, as it would go without grouping,
        // so that the writes that fit land and each failure reaches its own caller.
        results = batch.map((w) => attempt(w, false));
      }
      batch.forEach((w, i) => w.after(results[i] as WriteResult<unknown>));
    }
    // More than a group's worth: the rest on the next turn, after the I/O waiting meanwhile.
    if (this.pending.length > 0) this.scheduled ??= setImmediate(() => this.flush(1));
  }
}

/** Runs one write; in a group a full journal aborts the whole group (rethrown), else it is the write's result. */
function attempt(w: GroupWrite<unknown>, inGroup: boolean): WriteResult<unknown> {
  try {
    return { ok: true, value: w.write() };
  } catch (error) {
    if (inGroup && isJournalError(error, 'E_JOURNAL_FULL')) throw error;
    return { ok: false, error };
  }
}

/**
 * PendingEnds: ends a full journal could not take are retried every second until they land —
 * but not after shutdown, when the journal is closed (a retry then threw inside a timer and
 * ended the process; the end resumes on the next start instead).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Journal, JournalJob, JournalOutcome } from '../../src/server/journal.js';
import { JournalError } from '../../src/server/journal.js';
import { PendingEnds } from '../../src/server/pending-ends.js';

/** A journal that is full until `room` is set, with one unfinished job "a". */
function fakeJournal() {
  const state = { room: false, closed: false, finishes: 0 };
  const job = { id: 'a', kind: 'k', state: 'running', submittedAt: 0, finishedAt: null } as unknown as JournalJob;
  const journal = {
    get: (id: string) => (id === 'a' ? job : undefined),
    finish: () => {
      state.finishes++;
      if (state.closed) throw new Error('the journal is closed');
      if (!state.room) throw new JournalError('E_JOURNAL_FULL', 'disk full');
      return true;
    },
  } as unknown as Journal;
  return { journal, state };
}

const done: JournalOutcome = { state: 'done', result: 1 };

describe('PendingEnds', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('retries a kept end every second until it lands, then announces it', () => {
    vi.useFakeTimers();
    const { journal, state } = fakeJournal();
    const announced: string[] = [];
    const ends = new PendingEnds(journal, false, (j) => announced.push(j.id));
    ends.keep('a', done);
    vi.advanceTimersByTime(1000);
    expect(state.finishes).toBe(1);
    expect(announced).toEqual([]);
    expect(ends.kept('a')).toBe('done');
    state.room = true;
    vi.advanceTimersByTime(1000);
    expect(announced).toEqual(['a']);
    expect(ends.kept('a')).toBeUndefined();
    vi.advanceTimersByTime(5000);
    expect(state.finishes).toBe(2);
  });

  it('after close, keeps an end without retrying it on the closed journal', () => {
    vi.useFakeTimers();
    const { journal, state } = fakeJournal();
    const ends = new PendingEnds(journal, false, () => {});
    ends.close();
    state.closed = true;
    ends.keep('a', done);
    expect(() => vi.advanceTimersByTime(5000)).not.toThrow();
    expect(state.finishes).toBe(0);
  });
});

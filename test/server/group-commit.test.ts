/**
 * Group commit: the journal writes of one event-loop turn land in one transaction; a write that
 * fails alone fails alone; a full journal rolls the group back and each write is tried by itself,
 * so those that fit land and the others get E_JOURNAL_FULL, each at its own caller.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { GroupCommit, type WriteResult } from '../../src/server/group-commit.js';
import { Journal, JournalError, type JournalJobInput } from '../../src/server/journal.js';

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0).reverse()) f();
});

function open(maxBytes?: number): Journal {
  const dir = mkdtempSync(join(tmpdir(), 'stoker-group-'));
  const j = Journal.open(dir, maxBytes === undefined ? {} : { maxBytes });
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }), () => j.close());
  return j;
}

const job = (id: string, input: unknown = null): JournalJobInput => ({ id, kind: 'k', priority: 'normal', partitions: 2, input, deadline: null });
const codeOf = (r: WriteResult<unknown> | undefined) => (r && !r.ok && r.error instanceof JournalError ? r.error.code : r?.ok ? 'ok' : String(r));

describe('Journal.group', () => {
  it('commits its writes together; one that throws (caught) rolls back only itself; counts change once it committed', () => {
    const j = open();
    j.insert(job('a'));
    const seen: number[] = [];
    j.group(() => {
      j.insert(job('b'));
      expect(() => j.insert(job('a', { other: true }))).toThrow(/different body/);
      j.markRunning('a');
      seen.push(j.counts().queued); // not yet committed: counts as before
    });
    expect(seen).toEqual([1]);
    expect(j.counts()).toMatchObject({ queued: 1, running: 1 });
    expect(j.get('b')?.state).toBe('queued');
    expect(j.get('a')?.state).toBe('running');
  });

  it('a group that throws writes nothing and changes no count', () => {
    const j = open();
    expect(() =>
      j.group(() => {
        j.insert(job('x'));
        throw new Error('boom');
      }),
    ).toThrow('boom');
    expect(j.get('x')).toBeUndefined();
    expect(j.counts().queued).toBe(0);
    j.insert(job('x'));
    expect(j.counts().queued).toBe(1);
  });
});

describe('GroupCommit', () => {
  it('runs the writes asked for in one turn in one group, on the next turn, then each after()', async () => {
    const j = open();
    const commits = new GroupCommit(j);
    const order: string[] = [];
    const results: WriteResult<unknown>[] = [];
    for (const id of ['a', 'b', 'c']) {
      commits.add({ write: () => (order.push(`write ${id}`), j.insert(job(id)).created), after: (r) => (order.push(`after ${id}`), results.push(r)) });
    }
    commits.add({ write: () => j.insert(job('a', 'different')), after: (r) => results.push(r) });
    expect(order).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['write a', 'write b', 'write c', 'after a', 'after b', 'after c']);
    expect(results.map(codeOf)).toEqual(['ok', 'ok', 'ok', 'E_JOURNAL_CONFLICT']);
    expect(j.counts().queued).toBe(3);
  });

  it('on a full journal: the group rolls back, each write is tried alone — those that fit land, the rest get E_JOURNAL_FULL', () => {
    const j = open(64 * 1024);
    const big = 'x'.repeat(6000);
    const commits = new GroupCommit(j);
    const results: WriteResult<unknown>[] = [];
    for (let i = 0; i < 40; i++) commits.add({ write: () => j.insert(job(`j${i}`, big)), after: (r) => results.push(r) });
    commits.flush();
    const codes = results.map(codeOf);
    const landed = codes.filter((c) => c === 'ok').length;
    expect(landed).toBeGreaterThan(0);
    expect(landed).toBeLessThan(40);
    expect(codes.slice(landed).every((c) => c === 'E_JOURNAL_FULL')).toBe(true);
    expect(j.counts().queued).toBe(landed);
    for (let i = 0; i < 40; i++) expect(j.get(`j${i}`) !== undefined).toBe(i < landed);
  });
});

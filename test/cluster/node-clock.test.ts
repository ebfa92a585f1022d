import { describe, expect, it } from 'vitest';
import { NodeClock } from '../../src/cluster/node-clock.js';

describe('a node reading its clock in Redis', () => {
  it('takes readings that come back out of order as ahead: each is judged against what was seen when its command was sent', () => {
    const c = new NodeClock(9);
    // A take (10) and an end recorded just after it (11); the end's reply is handled first.
    const take = c.send();
    const end = c.send();
    expect(c.read(11, end)).toBe('ahead');
    expect(c.read(10, take)).toBe('ahead');
    expect(c.value).toBe(11);
    // Judged on arrival instead, 10 after 11 read as Redis gone back in time.
    expect(c.read(12, c.send())).toBe('ahead');
  });

  it('sees Redis go back in time once, counts on from there, and calls the readings sent before it stale', () => {
    const c = new NodeClock(0);
    for (let n = 1; n <= 20; n++) expect(c.read(n, c.send())).toBe('ahead');
    // Redis restarted from a snapshot taken at 12: three commands in flight read 13, 14, 15.
    // (One more, sent before and answered by the old dataset, read 21: stale, not kept.)
    const old = c.send();
    const inFlight = [c.send(), c.send(), c.send()];
    expect(c.read(14, inFlight[1]!)).toBe('back');
    expect(c.value).toBe(14);
    expect(c.read(13, inFlight[0]!)).toBe('stale');
    expect(c.read(15, inFlight[2]!)).toBe('stale');
    expect(c.read(21, old)).toBe('stale');
    // A stale reading of the dataset it went back to still counts (a second restore, to a snapshot
    // taken at 15, must read back); one above what was seen when it was sent is the old dataset's.
    expect(c.value).toBe(15);
    // The count goes on from the snapshot's.
    expect(c.read(16, c.send())).toBe('ahead');
    expect(c.value).toBe(16);
    // A reading equal to the last one seen is not above it: back again.
    expect(c.read(16, c.send())).toBe('back');
  });

  it('a node with no reading yet (a fresh data dir) never reads back; a failed command reads nothing', () => {
    const c = new NodeClock(0);
    expect(c.read(1, c.send())).toBe('ahead');
    const t = c.send();
    expect(c.read(Number.NaN, t)).toBe('ahead');
    expect(c.value).toBe(1);
    // From a data dir that remembers 50, Redis at 3 (restored from an older snapshot): back.
    const restarted = new NodeClock(50);
    expect(restarted.read(3, restarted.send())).toBe('back');
  });
});

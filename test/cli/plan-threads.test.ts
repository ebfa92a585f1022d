import { describe, expect, it } from 'vitest';
import { threadsLine } from '../../src/cli/plan-command.js';

describe("stoker plan's thread split for a cap past the cores", () => {
  it('keeps threads × concurrency at the cap (5 was told as threads 2 × concurrency 3: 6), and says what every core would make', () => {
    expect(threadsLine(5, 2)).toBe("# threads = 5 is more than this machine's 2 cores: for preparations that compute, keep threads ≤ the cores of the machine that serves (here threads = 1, concurrency = 5, or threads = 2, concurrency = 3: a cap of 6, 1 more than planned); the cap is threads × concurrency");
    expect(threadsLine(24, 8)).toContain('(here threads = 8, concurrency = 3); the cap');
    expect(threadsLine(12, 8)).toContain('(here threads = 6, concurrency = 2, or threads = 7, concurrency = 2: a cap of 14, 2 more than planned)');
    // A prime cap splits exactly only on one thread: the nearest split over more (a review: 12 threads, a cap of 24, for 13).
    expect(threadsLine(13, 12)).toContain('(here threads = 1, concurrency = 13, or threads = 7, concurrency = 2: a cap of 14, 1 more than planned)');
  });
});

/** The sweep on worker threads (the built package: threads load dist/plan/sweep-worker.js) gives the rows one thread gives, in the grid's order. */
import { describe, expect, it } from 'vitest';
import { sweep } from '../../dist/plan/parallel.js';
import { planGrid } from '../../dist/plan/sweep.js';
import { SCENARIOS } from '../../dist/sim/index.js';

describe('a sweep on several threads', () => {
  it('gives the same rows as on one, in the grid order, and reports each as it finishes', async () => {
    const s = SCENARIOS.get('jitter');
    if (!s) throw new Error('no jitter scenario');
    const grid = planGrid(s, { peakMemoryBytes: 80 * 2 ** 30, littleItems: 60 }, { targets: [1, 4] });
    const seen: number[] = [];
    const one = await sweep(s, grid, [1, 2], { threads: 1 });
    const two = await sweep(s, grid, [1, 2], { threads: 2, onRow: (_r, done) => seen.push(done) });
    expect(two).toEqual(one);
    expect(seen).toEqual(grid.map((_, i) => i + 1));
  });
});

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EventQueue, PREP, type SimEvent } from '../../src/sim/events.js';

/** A model of the queue: pending events with the key (time, order of their last scheduling). */
class Model {
  private readonly keys = new Map<SimEvent, [number, number]>();
  private n = 0;
  set(ev: SimEvent, time: number): void {
    this.keys.set(ev, [time, this.n++]);
  }
  delete(ev: SimEvent): boolean {
    return this.keys.delete(ev);
  }
  has(ev: SimEvent): boolean {
    return this.keys.has(ev);
  }
  time(ev: SimEvent): number | undefined {
    return this.keys.get(ev)?.[0];
  }
  first(): SimEvent | undefined {
    let best: SimEvent | undefined;
    let key: [number, number] = [Infinity, Infinity];
    for (const [ev, k] of this.keys) {
      if (k[0] < key[0] || (k[0] === key[0] && k[1] < key[1])) {
        best = ev;
        key = k;
      }
    }
    return best;
  }
}

type Op = { op: 'push' | 'schedule' | 'move' | 'remove' | 'pop'; pick: number; time: number };

describe('EventQueue', () => {
  it('pops by time, ties in the order of their last (re)scheduling, under any mix of push, schedule, move, remove and pop', () => {
    const op = fc.record({ op: fc.constantFrom<Op['op']>('push', 'schedule', 'move', 'remove', 'pop'), pick: fc.nat(), time: fc.integer({ min: 0, max: 20 }) });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 300 }), (ops) => {
        const q = new EventQueue();
        const model = new Model();
        const all: SimEvent[] = [];
        for (const { op, pick, time } of ops) {
          const ev = all.length ? (all[pick % all.length] as SimEvent) : undefined;
          if (op === 'push' || !ev) {
            const e = q.push(time, PREP, all.length);
            all.push(e);
            model.set(e, time);
          } else if (op === 'schedule') {
            if (model.has(ev)) expect(() => q.schedule(ev, time)).toThrow(/already pending/);
            else {
              q.schedule(ev, time);
              model.set(ev, time);
            }
          } else if (op === 'move') {
            // Unchanged when pending at that time already (its order among ties kept).
            if (model.time(ev) !== time) model.set(ev, time);
            q.move(ev, time);
          } else if (op === 'remove') {
            expect(q.remove(ev)).toBe(model.delete(ev));
            expect(ev.heapIndex).toBe(-1);
          } else {
            const want = model.first();
            expect(q.pop()).toBe(want);
            if (want) model.delete(want);
          }
          expect(q.peek()).toBe(model.first());
        }
        for (let want = model.first(); want; want = model.first()) {
          const got = q.pop() as SimEvent;
          expect(got).toBe(want);
          expect(got.time).toBe(model.time(want));
          model.delete(want);
        }
        expect(q.pop()).toBeUndefined();
      }),
      { seed: 7, numRuns: 300 },
    );
  });
});

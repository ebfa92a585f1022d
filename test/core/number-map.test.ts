import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { NumberMap } from '../../src/core/number-map.js';

describe('NumberMap', () => {
  type Op = { op: 'set' | 'delete' | 'get'; key: number; value: number };
  // Few distinct keys (collisions, long runs, re-use after delete) or keys up to 2^53 (both hash halves).
  const key = fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 2 ** 40 }).map((k) => k * 2048 + 3), fc.maxSafeInteger());
  const op: fc.Arbitrary<Op> = fc.record({ op: fc.constantFrom('set' as const, 'delete' as const, 'get' as const), key, value: fc.integer() });

  it('behaves like a Map through growth, shrinking and deletes inside runs', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
        const m = new NumberMap<number>();
        const model = new Map<number, number>();
        for (const o of ops) {
          if (o.op === 'set') {
            m.set(o.key, o.value);
            model.set(o.key, o.value);
          } else if (o.op === 'delete') expect(m.delete(o.key)).toBe(model.delete(o.key));
          else expect(m.get(o.key)).toBe(model.get(o.key));
          expect(m.size).toBe(model.size);
        }
        for (const [k, v] of model) {
          expect(m.has(k)).toBe(true);
          expect(m.get(k)).toBe(v);
        }
      }),
    );
  });

  it('keeps every key through many inserts and deletes in id order (as the engine makes and finishes items)', () => {
    const m = new NumberMap<number>();
    for (let id = 0; id < 20_000; id++) {
      m.set(id, id * 2);
      if (id >= 500) expect(m.delete(id - 500)).toBe(true);
    }
    expect(m.size).toBe(500);
    for (let id = 19_500; id < 20_000; id++) expect(m.get(id)).toBe(id * 2);
    expect(m.get(19_499)).toBeUndefined();
  });
});

/**
 * What a preparation thread refuses to send (src/runtime/threads/prepare-worker.ts): the pool
 * posts the reply itself, and a value structured clone refuses crashes the thread, failing every
 * preparation on it — so it is found first, and named by its path.
 */
import { describe, expect, it } from 'vitest';
import { uncloneable } from '../../src/runtime/threads/prepare-worker.js';

describe('uncloneable', () => {
  it('finds what structured clone refuses, by its path', () => {
    const cases: [unknown, string][] = [
      [() => 1, 'the prepared value (a function)'],
      [{ a: [1, { f: () => 1 }] }, 'the prepared value.a[1].f (a function)'],
      [{ p: Promise.resolve(1) }, 'the prepared value.p (a promise: await it in prepare)'],
      [new Map([['k', Symbol('s')]]), 'the prepared value.get("k") (a symbol)'],
      [new Set([new WeakMap()]), 'the prepared value: a member of the Set (a WeakMap)'],
      [{ p: new Proxy({}, {}) }, 'the prepared value.p (a Proxy)'],
      [{ e: new Error('m', { cause: () => 1 }) }, 'the prepared value.e.cause (a function)'],
      [[new FinalizationRegistry(() => undefined)], 'the prepared value[0] (a FinalizationRegistry)'],
    ];
    for (const [v, where] of cases) {
      expect(uncloneable(v)).toBe(where);
      expect(() => structuredClone(v)).toThrow();
    }
  });

  it('passes what it can send: plain data, bytes, dates, errors, cycles', () => {
    const cycle: Record<string, unknown> = { n: 1 };
    cycle['self'] = cycle;
    for (const v of [null, undefined, 1, 'x', [1, 2], { a: { b: [new Date(0), /x/, new Error('e')] } }, new Float32Array(4), new ArrayBuffer(8), new Map([[1, { x: 2 }]]), cycle]) {
      expect(uncloneable(v)).toBeNull();
      expect(() => structuredClone(v)).not.toThrow();
    }
  });
});

import { describe, expect, it } from 'vitest';
import { IndexedHeap, type HeapNode } from '../../src/core/index.js';

interface Node extends HeapNode {
  v: number;
}

const node = (v: number): Node => ({ v, heapIndex: -1 });
const byValue = () => new IndexedHeap<Node>((a, b) => a.v < b.v);

function drain(h: IndexedHeap<Node>): number[] {
  const out: number[] = [];
  for (let n = h.pop(); n; n = h.pop()) out.push(n.v);
  return out;
}

/** Every node's heapIndex points at its own slot, and the heap property holds. */
function expectConsistent(h: IndexedHeap<Node>): void {
  const vs = h.values();
  vs.forEach((n, i) => {
    expect(n.heapIndex).toBe(i);
    if (i > 0) expect(vs[(i - 1) >> 1]!.v).toBeLessThanOrEqual(n.v);
  });
}

describe('IndexedHeap', () => {
  it('starts empty: size 0, peek and pop undefined', () => {
    const h = byValue();
    expect(h.size).toBe(0);
    expect(h.peek()).toBeUndefined();
    expect(h.pop()).toBeUndefined();
  });

  it('pops in ascending order whatever the push order', () => {
    const h = byValue();
    for (const v of [5, 3, 9, 1, 7, 2, 8, 6, 4, 0]) h.push(node(v));
    expect(h.size).toBe(10);
    expect(h.peek()!.v).toBe(0);
    expectConsistent(h);
    expect(drain(h)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(h.size).toBe(0);
  });

  it('keeps equal elements (no de-duplication)', () => {
    const h = byValue();
    for (const v of [2, 1, 2, 1]) h.push(node(v));
    expect(drain(h)).toEqual([1, 1, 2, 2]);
  });

  it('peek does not remove', () => {
    const h = byValue();
    h.push(node(4));
    h.push(node(2));
    expect(h.peek()!.v).toBe(2);
    expect(h.peek()!.v).toBe(2);
    expect(h.size).toBe(2);
  });

  it('sets heapIndex to -1 on pop', () => {
    const h = byValue();
    const a = node(1);
    const b = node(2);
    h.push(a);
    h.push(b);
    expect(a.heapIndex).toBe(0);
    expect(b.heapIndex).toBe(1);
    expect(h.pop()).toBe(a);
    expect(a.heapIndex).toBe(-1);
    expect(b.heapIndex).toBe(0);
  });

  it('removes arbitrary nodes (head, middle, last) and keeps order and bookkeeping', () => {
    const h = byValue();
    const nodes = [8, 3, 10, 1, 6, 14, 4, 7, 13, 2].map(node);
    nodes.forEach((n) => h.push(n));
    const removed: number[] = [];
    const last = h.values()[h.size - 1]!;
    expect(h.remove(last)).toBe(true); // the last slot
    removed.push(last.v);
    const head = h.peek()!;
    expect(h.remove(head)).toBe(true); // the head
    removed.push(head.v);
    const middle = h.values()[2]!;
    expect(h.remove(middle)).toBe(true); // somewhere inside
    removed.push(middle.v);
    for (const n of [last, head, middle]) expect(n.heapIndex).toBe(-1);
    expect(head.v).toBe(1);
    expectConsistent(h);
    const expected = nodes.map((n) => n.v).filter((v) => !removed.includes(v)).sort((a, b) => a - b);
    expect(expected).toHaveLength(7);
    expect(drain(h)).toEqual(expected);
  });

  it('a removal that must move the last element up keeps the heap valid', () => {
    // Removing a deep node from one subtree and moving a small last element from the other subtree into it needs sift-up.
    const h = byValue();
    const nodes = [0, 10, 1, 11, 12, 2, 3].map(node);
    nodes.forEach((n) => h.push(n));
    // Layout: [0, 10, 1, 11, 12, 2, 3]; removing 11 (index 3) moves 3 there, which is smaller than its parent 10.
    expect(h.values().map((n) => n.v)).toEqual([0, 10, 1, 11, 12, 2, 3]);
    expect(h.remove(nodes[3]!)).toBe(true);
    expectConsistent(h);
    expect(drain(h)).toEqual([0, 1, 2, 3, 10, 12]);
  });

  it('remove of a node that is not in the heap returns false and changes nothing', () => {
    const h = byValue();
    const a = node(1);
    const b = node(2);
    h.push(a);
    h.push(b);
    const stranger = node(0);
    expect(h.remove(stranger)).toBe(false);
    expect(h.size).toBe(2);
    // A node removed once cannot be removed twice.
    expect(h.remove(a)).toBe(true);
    expect(h.remove(a)).toBe(false);
    expect(h.size).toBe(1);
    expect(h.peek()).toBe(b);
  });

  it('remove of a node that sits in another heap at a valid index returns false', () => {
    const h1 = byValue();
    const h2 = byValue();
    const a = node(1);
    const b = node(2);
    h1.push(a);
    h2.push(b); // b.heapIndex === 0, a valid index in h1 too
    expect(h1.remove(b)).toBe(false);
    expect(h1.size).toBe(1);
    expect(h2.size).toBe(1);
    expect(b.heapIndex).toBe(0);
  });

  it('pushing a node already in a heap throws and leaves the heap unchanged', () => {
    const h = byValue();
    const a = node(1);
    h.push(a);
    expect(() => h.push(a)).toThrow(/already in a heap/);
    expect(h.size).toBe(1);
    const other = byValue();
    expect(() => other.push(a)).toThrow(/already in a heap/);
    expect(other.size).toBe(0);
  });

  it('a popped or removed node can be pushed again', () => {
    const h = byValue();
    const a = node(3);
    const b = node(1);
    h.push(a);
    h.push(b);
    h.remove(a);
    h.push(a);
    expect(h.pop()).toBe(b);
    h.push(b);
    expect(drain(h)).toEqual([1, 3]);
  });

  it('agrees with a sorted array over many interleaved operations', () => {
    // A small deterministic LCG so this stays reproducible without a library.
    let x = 12345;
    const rnd = (n: number) => {
      x = (x * 1103515245 + 12345) % 2 ** 31;
      return x % n;
    };
    const h = byValue();
    let model: Node[] = [];
    for (let step = 0; step < 3000; step++) {
      const r = rnd(10);
      if (r < 5) {
        const n = node(rnd(50));
        h.push(n);
        model.push(n);
      } else if (r < 7) {
        const top = h.pop();
        if (model.length === 0) expect(top).toBeUndefined();
        else {
          const min = Math.min(...model.map((n) => n.v));
          expect(top!.v).toBe(min);
          model = model.filter((n) => n !== top);
        }
      } else if (model.length > 0) {
        const victim = model[rnd(model.length)]!;
        expect(h.remove(victim)).toBe(true);
        model = model.filter((n) => n !== victim);
      }
      expect(h.size).toBe(model.length);
    }
    expectConsistent(h);
  });
});

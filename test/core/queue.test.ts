import { describe, expect, it } from 'vitest';
import { MAX_PARTITIONS, PartitionQueue, keyLess, type KeyedNode } from '../../src/core/index.js';
import { expectStokerError } from './helpers.js';

interface Part extends KeyedNode {
  label: string;
}

const part = (rank: number, seq: number, partition: number, label = `${rank}/${seq}/${partition}`): Part => ({ rank, seq, partition, label, heapIndex: -1 });

function drain(q: PartitionQueue<Part>): string[] {
  const out: string[] = [];
  for (let n = q.pop(); n; n = q.pop()) out.push(n.label);
  return out;
}

describe('keyLess', () => {
  it('orders by rank first, then job sequence, then partition', () => {
    expect(keyLess(part(0, 9, 9), part(1, 0, 0))).toBe(true);
    expect(keyLess(part(1, 0, 0), part(0, 9, 9))).toBe(false);
    expect(keyLess(part(1, 1, 9), part(1, 2, 0))).toBe(true);
    expect(keyLess(part(1, 2, 0), part(1, 1, 9))).toBe(false);
    expect(keyLess(part(1, 1, 3), part(1, 1, 4))).toBe(true);
    expect(keyLess(part(1, 1, 4), part(1, 1, 3))).toBe(false);
    expect(keyLess(part(1, 1, 4), part(1, 1, 4))).toBe(false);
  });
});

describe('PartitionQueue', () => {
  it('pops by (rank, seq, partition)', () => {
    const q = new PartitionQueue<Part>();
    // (In the engine one job has one class, so seq alone never repeats across ranks.)
    const nodes = [part(2, 1, 1), part(2, 0, 2), part(0, 5, 0), part(2, 0, 0), part(3, 2, 0), part(2, 1, 0), part(1, 7, 3), part(0, 4, 9), part(3, 3, 0)];
    nodes.forEach((n) => q.push(n));
    expect(q.size).toBe(nodes.length);
    expect(q.peek()!.label).toBe('0/4/9');
    expect(drain(q)).toEqual(['0/4/9', '0/5/0', '1/7/3', '2/0/0', '2/0/2', '2/1/0', '2/1/1', '3/2/0', '3/3/0']);
    expect(q.size).toBe(0);
    expect(q.pop()).toBeUndefined();
    expect(q.peek()).toBeUndefined();
  });

  it('serves the oldest job before a newer one of the same class (all of job 0 before job 1)', () => {
    const q = new PartitionQueue<Part>();
    for (let p = 0; p < 3; p++) q.push(part(2, 1, p));
    for (let p = 0; p < 3; p++) q.push(part(2, 0, p));
    expect(drain(q)).toEqual(['2/0/0', '2/0/1', '2/0/2', '2/1/0', '2/1/1', '2/1/2']);
  });

  it('a duplicate key throws E_DUPLICATE_KEY and does not overwrite the first node', () => {
    const q = new PartitionQueue<Part>();
    const first = part(2, 3, 4, 'first');
    q.push(first);
    const dup = part(2, 3, 4, 'second');
    expectStokerError(() => q.push(dup), 'E_DUPLICATE_KEY', /sequence 3 partition 4/);
    expect(q.size).toBe(1);
    expect(dup.heapIndex).toBe(-1);
    expect(q.pop()).toBe(first);
    expect(q.size).toBe(0);
  });

  it('the key is (seq, partition): the same job and partition under another rank is still a duplicate', () => {
    const q = new PartitionQueue<Part>();
    q.push(part(2, 3, 4));
    expectStokerError(() => q.push(part(0, 3, 4)), 'E_DUPLICATE_KEY');
    expect(q.size).toBe(1);
  });

  it('keys that differ only in seq or partition do not collide (packing is exact)', () => {
    const q = new PartitionQueue<Part>();
    q.push(part(2, 0, MAX_PARTITIONS - 1));
    q.push(part(2, 1, 0));
    q.push(part(2, 1, MAX_PARTITIONS - 1));
    q.push(part(2, 2, 0));
    // Large sequences stay exact.
    q.push(part(2, 2 ** 30, 1));
    q.push(part(2, 2 ** 30, 2));
    expect(q.size).toBe(6);
  });

  it('a popped key can be pushed again', () => {
    const q = new PartitionQueue<Part>();
    const a = part(1, 1, 1);
    q.push(a);
    expect(q.pop()).toBe(a);
    q.push(part(1, 1, 1, 'again'));
    expect(q.pop()!.label).toBe('again');
  });

  it('remove takes out one node, frees its key, and returns false for a node not queued', () => {
    const q = new PartitionQueue<Part>();
    const a = part(2, 0, 0);
    const b = part(2, 0, 1);
    const c = part(2, 0, 2);
    [a, b, c].forEach((n) => q.push(n));
    expect(q.remove(b)).toBe(true);
    expect(b.heapIndex).toBe(-1);
    expect(q.size).toBe(2);
    expect(q.remove(b)).toBe(false);
    expect(q.remove(part(2, 0, 0))).toBe(false); // same key, different node: not in the queue
    expect(q.size).toBe(2);
    // b's key is free again; a's is still taken.
    q.push(part(2, 0, 1, 'b2'));
    expectStokerError(() => q.push(part(2, 0, 0)), 'E_DUPLICATE_KEY');
    expect(drain(q)).toEqual(['2/0/0', 'b2', '2/0/2']);
  });

  it('remove of the head makes the next key the head', () => {
    const q = new PartitionQueue<Part>();
    const a = part(0, 1, 0);
    const b = part(1, 0, 0);
    q.push(b);
    q.push(a);
    expect(q.peek()).toBe(a);
    q.remove(a);
    expect(q.peek()).toBe(b);
  });
});

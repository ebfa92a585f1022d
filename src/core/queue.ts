import type { HeapNode } from './heap.js';
import { StokerError } from './errors.js';
import { NumberMap } from './number-map.js';

/** The ordering key of a partition: priority class rank, then job sequence, then partition index. */
export interface KeyedNode extends HeapNode {
  readonly rank: number;
  readonly seq: number;
  readonly partition: number;
}

/** Partition indices live below this bound, so (seq, partition) packs into one exact number. */
export const MAX_PARTITIONS = 1_000_000;

export function keyLess(a: KeyedNode, b: KeyedNode): boolean {
  if (a.rank !== b.rank) return a.rank < b.rank;
  if (a.seq !== b.seq) return a.seq < b.seq;
  return a.partition < b.partition;
}

/**
 * A binary min-heap of keyed nodes in {@link keyLess} order: {@link IndexedHeap}'s algorithm with
 * the comparison written in. IndexedHeap calls its comparator through a field, and the engine's
 * queues, its deadlines and the simulator's events share that call site, so the call is never
 * inlined; here it is, which saves instructions on every push and pop of a partition.
 */
export class KeyHeap<T extends KeyedNode> {
  private readonly items: T[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(node: T): void {
    if (node.heapIndex !== -1) throw new Error('KeyHeap.push: node is already in a heap');
    node.heapIndex = this.items.length;
    this.items.push(node);
    this.up(node.heapIndex);
  }

  pop(): T | undefined {
    const top = this.items[0];
    if (top !== undefined) this.removeAt(0);
    return top;
  }

  /** Removes `node` if it is in this heap; returns whether it was. */
  remove(node: T): boolean {
    const i = node.heapIndex;
    if (i < 0 || this.items[i] !== node) return false;
    this.removeAt(i);
    return true;
  }

  /**
   * Pops the top of a heap that is not empty and pushes `node`, in one step: when `node` sorts near
   * the top, as a job's next partition does where its previous one was the top, this costs one
   * short sift down, not a pop's full sift down and a push's full sift up. Returns the old top.
   */
  replaceTop(node: T): T {
    if (node.heapIndex !== -1) throw new Error('KeyHeap.replaceTop: node is already in a heap');
    const items = this.items;
    const top = items[0];
    if (top === undefined) throw new Error('KeyHeap.replaceTop: the heap is empty');
    top.heapIndex = -1;
    items[0] = node;
    node.heapIndex = 0;
    this.down(0);
    return top;
  }

  private removeAt(i: number): void {
    const items = this.items;
    const node = items[i] as T;
    const last = items.pop() as T;
    node.heapIndex = -1;
    if (last !== node) {
      items[i] = last;
      last.heapIndex = i;
      this.down(i);
      this.up(last.heapIndex);
    }
  }

  private up(i: number): void {
    const items = this.items;
    const node = items[i] as T;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = items[p] as T;
      if (!keyLess(node, parent)) break;
      items[i] = parent;
      parent.heapIndex = i;
      i = p;
    }
    items[i] = node;
    node.heapIndex = i;
  }

  private down(i: number): void {
    const items = this.items;
    const n = items.length;
    const node = items[i] as T;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      let c = l;
      if (r < n && keyLess(items[r] as T, items[l] as T)) c = r;
      const child = items[c] as T;
      if (!keyLess(child, node)) break;
      items[i] = child;
      child.heapIndex = i;
      i = c;
    }
    items[i] = node;
    node.heapIndex = i;
  }
}

/**
 * A priority queue of partitions keyed by (priority class, job sequence, partition index).
 * Keys are unique: pushing a key that is present throws instead of overwriting (the field
 * engine's map silently dropped a job that way). All operations are O(log n).
 */
export class PartitionQueue<T extends KeyedNode> {
  private readonly heap = new KeyHeap<T>();
  /** The keys present (to refuse a duplicate) in a table that, unlike a Set, does not re-allocate as keys come and go. */
  private readonly keys = new NumberMap<T>();

  get size(): number {
    return this.heap.size;
  }

  peek(): T | undefined {
    return this.heap.peek();
  }

  push(node: T): void {
    const k = node.seq * MAX_PARTITIONS + node.partition;
    if (this.keys.has(k)) {
      throw new StokerError('E_DUPLICATE_KEY', `queue already holds job sequence ${node.seq} partition ${node.partition}; keys are unique and never overwritten`);
    }
    this.heap.push(node);
    this.keys.set(k, node);
  }

  pop(): T | undefined {
    const node = this.heap.pop();
    if (node !== undefined) this.keys.delete(node.seq * MAX_PARTITIONS + node.partition);
    return node;
  }

  remove(node: T): boolean {
    if (!this.heap.remove(node)) return false;
    this.keys.delete(node.seq * MAX_PARTITIONS + node.partition);
    return true;
  }
}

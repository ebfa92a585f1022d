import { BinaryHeap, type HeapNode } from './heap.js';
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

/** Partitions in {@link keyLess} order. */
export class KeyHeap<T extends KeyedNode> extends BinaryHeap<T> {
  protected less(a: T, b: T): boolean {
    return keyLess(a, b);
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

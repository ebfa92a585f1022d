/** An element that knows its own position, so it can be removed in O(log n). -1 when in no heap. */
export interface HeapNode {
  heapIndex: number;
}

/**
 * A binary min-heap of intrusive nodes: push, pop, peek, remove and update are O(log n). A
 * subclass gives the order as its `less` method: the sifts call it through `this`, a call V8
 * inlines while a few heap classes share the sifts (a comparator held in a field is a different
 * closure per heap, a call it never inlines — the comparison is most of a sift).
 */
export abstract class BinaryHeap<T extends HeapNode> {
  private readonly items: T[] = [];

  /** Whether `a` comes before `b`. */
  protected abstract less(a: T, b: T): boolean;

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(node: T): void {
    if (node.heapIndex !== -1) throw new Error('heap push: node is already in a heap');
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
   * the top, this costs one short sift down, not a pop's full sift down and a push's full sift up.
   * Returns the old top.
   */
  replaceTop(node: T): T {
    if (node.heapIndex !== -1) throw new Error('heap replaceTop: node is already in a heap');
    const items = this.items;
    const top = items[0];
    if (top === undefined) throw new Error('heap replaceTop: the heap is empty');
    top.heapIndex = -1;
    items[0] = node;
    node.heapIndex = 0;
    this.down(0);
    return top;
  }

  /** Puts `node`, in this heap, back in order after its key changed. */
  update(node: T): void {
    this.up(node.heapIndex);
    this.down(node.heapIndex);
  }

  /** The elements in heap order (not sorted). */
  values(): readonly T[] {
    return this.items;
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
      if (!this.less(node, parent)) break;
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
      if (r < n && this.less(items[r] as T, items[l] as T)) c = r;
      const child = items[c] as T;
      if (!this.less(child, node)) break;
      items[i] = child;
      child.heapIndex = i;
      i = c;
    }
    items[i] = node;
    node.heapIndex = i;
  }
}

/** A heap in the order of a comparator given at construction (for orders used once). */
export class IndexedHeap<T extends HeapNode> extends BinaryHeap<T> {
  constructor(private readonly order: (a: T, b: T) => boolean) {
    super();
  }

  protected less(a: T, b: T): boolean {
    return this.order(a, b);
  }
}

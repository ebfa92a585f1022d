/** An element that knows its own position, so it can be removed in O(log n). -1 when in no heap. */
export interface HeapNode {
  heapIndex: number;
}

/** A binary min-heap of intrusive nodes: push, pop, peek and remove are O(log n). */
export class IndexedHeap<T extends HeapNode> {
  private readonly items: T[] = [];

  constructor(private readonly less: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(node: T): void {
    if (node.heapIndex !== -1) throw new Error('IndexedHeap.push: node is already in a heap');
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

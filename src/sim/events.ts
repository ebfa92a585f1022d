import type { HeapNode } from '../core/index.js';

/**
 * Kinds of events in the simulator's heap. Arrivals and scenario events are already sorted and
 * are read from cursors, and the engine's single timer is a variable, so the heap holds only the
 * work in flight. At equal times: arrivals, then scenario events, then the heap, then the timer.
 */
export const PREP = 1;
export const DEV = 2;
/** A preparation batch's end: `a` its engine batch id. */
export const PREP_BATCH = 3;

/** An event in flight: a preparation's end (`a` its item, `b` attempt × 2 + failed) or a device worker's (`a` device, `b` worker). */
export class SimEvent implements HeapNode {
  /** Its place in the queue's heap; −1 while in none. */
  heapIndex = -1;
  // Numbers from the start, not parameter properties: those are first defined as undefined (ES2022
  // class fields), after which V8 stores every new `time` as a freshly allocated heap number.
  /** When it happens, and its tie-breaking sequence number (both given by the queue at each scheduling). */
  time = 0;
  seq = 0;
  readonly kind: number = 0;
  readonly a: number = 0;
  b = 0;

  constructor(kind: number, a: number, b: number) {
    this.kind = kind;
    this.a = a;
    this.b = b;
  }
}

/** Whether `x` comes before `y`: by time, ties by sequence number. */
function before(x: SimEvent, y: SimEvent): boolean {
  return x.time < y.time || (x.time === y.time && x.seq < y.seq);
}

/**
 * The events in flight, by time; ties by a sequence number given at each (re)scheduling, so the
 * order is deterministic (a total order: the pops do not depend on the heap's layout).
 *
 * Its own 4-ary heap rather than the core's BinaryHeap: a pop or re-time happens at nearly every
 * step, and here the order is one inlined comparison, in half the levels (a sift down compares
 * four children at each, but they sit side by side in the array).
 */
export class EventQueue {
  private readonly heap: SimEvent[] = [];
  private seq = 0;

  push(time: number, kind: number, a = 0, b = 0): SimEvent {
    const ev = new SimEvent(kind, a, b);
    this.schedule(ev, time);
    return ev;
  }

  /** Puts an event that is in no heap back in at `time`. */
  schedule(ev: SimEvent, time: number): void {
    if (ev.heapIndex !== -1) throw new Error('EventQueue.schedule: the event is already pending');
    ev.time = time;
    ev.seq = this.seq++;
    this.heap.push(ev);
    this.up(ev, this.heap.length - 1);
  }

  /** Moves an event to `time` (a fresh sequence number keeps ties deterministic): unchanged when it is pending there already, scheduled when not pending. */
  move(ev: SimEvent, time: number): void {
    if (ev.heapIndex < 0) return this.schedule(ev, time);
    if (ev.time === time) return;
    const earlier = time < ev.time;
    ev.time = time;
    ev.seq = this.seq++;
    if (earlier) this.up(ev, ev.heapIndex);
    else this.down(ev, ev.heapIndex);
  }

  /** Takes a pending event out; false when it was not pending. */
  remove(ev: SimEvent): boolean {
    const i = ev.heapIndex;
    if (i < 0 || this.heap[i] !== ev) return false;
    this.removeAt(i);
    return true;
  }

  peek(): SimEvent | undefined {
    return this.heap[0];
  }

  pop(): SimEvent | undefined {
    const top = this.heap[0];
    if (top !== undefined) this.removeAt(0);
    return top;
  }

  private removeAt(i: number): void {
    const heap = this.heap;
    const ev = heap[i] as SimEvent;
    const last = heap.pop() as SimEvent;
    ev.heapIndex = -1;
    if (last === ev) return;
    if (i > 0 && before(last, heap[(i - 1) >> 2] as SimEvent)) this.up(last, i);
    else this.down(last, i);
  }

  /** Sifts `ev`, to be placed at `i`, up toward the root. */
  private up(ev: SimEvent, i: number): void {
    const heap = this.heap;
    while (i > 0) {
      const p = (i - 1) >> 2;
      const parent = heap[p] as SimEvent;
      if (!before(ev, parent)) break;
      heap[i] = parent;
      parent.heapIndex = i;
      i = p;
    }
    heap[i] = ev;
    ev.heapIndex = i;
  }

  /** Sifts `ev`, to be placed at `i`, down toward the leaves. */
  private down(ev: SimEvent, i: number): void {
    const heap = this.heap;
    const n = heap.length;
    for (;;) {
      const first = 4 * i + 1;
      if (first >= n) break;
      let c = first;
      let child = heap[first] as SimEvent;
      const end = Math.min(first + 4, n);
      for (let k = first + 1; k < end; k++) {
        const other = heap[k] as SimEvent;
        if (before(other, child)) {
          c = k;
          child = other;
        }
      }
      if (!before(child, ev)) break;
      heap[i] = child;
      child.heapIndex = i;
      i = c;
    }
    heap[i] = ev;
    ev.heapIndex = i;
  }
}

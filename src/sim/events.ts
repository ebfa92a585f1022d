import { IndexedHeap, type HeapNode } from '../core/index.js';

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
  heapIndex = -1;
  // Numbers from the start, not parameter properties: those are first defined as undefined (ES2022
  // class fields), after which V8 stores every new `time` as a freshly allocated heap number.
  time = 0;
  seq = 0;
  readonly kind: number = 0;
  readonly a: number = 0;
  b = 0;

  constructor(time: number, seq: number, kind: number, a: number, b: number) {
    this.time = time;
    this.seq = seq;
    this.kind = kind;
    this.a = a;
    this.b = b;
  }
}

/**
 * The events in flight, by time; ties by a sequence number given at each (re)scheduling, so the
 * order is deterministic.
 */
export class EventQueue {
  private readonly heap = new IndexedHeap<SimEvent>((x, y) => x.time < y.time || (x.time === y.time && x.seq < y.seq));
  private seq = 0;

  push(time: number, kind: number, a = 0, b = 0): SimEvent {
    const ev = new SimEvent(time, this.seq++, kind, a, b);
    this.heap.push(ev);
    return ev;
  }

  /** Puts an event that is in no heap back in at `time`. */
  schedule(ev: SimEvent, time: number): void {
    ev.time = time;
    ev.seq = this.seq++;
    this.heap.push(ev);
  }

  /** Moves a pending event to `time` (a fresh sequence number keeps ties deterministic); unchanged when it is already there. */
  move(ev: SimEvent, time: number): void {
    if (ev.time === time) return;
    this.heap.remove(ev);
    this.schedule(ev, time);
  }

  remove(ev: SimEvent): boolean {
    return this.heap.remove(ev);
  }

  peek(): SimEvent | undefined {
    return this.heap.peek();
  }

  pop(): SimEvent | undefined {
    return this.heap.pop();
  }
}

import { BinaryHeap, type HeapNode } from '../core/index.js';

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

/** Events by time, ties by sequence number. */
class EventHeap extends BinaryHeap<SimEvent> {
  protected less(x: SimEvent, y: SimEvent): boolean {
    return x.time < y.time || (x.time === y.time && x.seq < y.seq);
  }
}

/**
 * The events in flight, by time; ties by a sequence number given at each (re)scheduling, so the
 * order is deterministic (a total order: the pops do not depend on the heap's layout).
 */
export class EventQueue {
  private readonly heap = new EventHeap();
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
  }

  /** Moves an event to `time` (a fresh sequence number keeps ties deterministic): unchanged when it is pending there already, scheduled when not pending. */
  move(ev: SimEvent, time: number): void {
    if (ev.heapIndex < 0) return this.schedule(ev, time);
    if (ev.time === time) return;
    ev.time = time;
    ev.seq = this.seq++;
    this.heap.update(ev);
  }

  /** Takes a pending event out; false when it was not pending. */
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

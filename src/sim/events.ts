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
export class SimEvent {
  /** Its place in the queue's heap; −1 while in none. */
  heapIndex = -1;
  // Numbers from the start, not parameter properties: those are first defined as undefined (ES2022
  // class fields), after which V8 stores every new `time` as a freshly allocated heap number.
  /** When it happens (while pending). */
  time = 0;
  readonly kind: number = 0;
  readonly a: number = 0;
  b = 0;

  constructor(kind: number, a: number, b: number) {
    this.kind = kind;
    this.a = a;
    this.b = b;
  }
}

/**
 * The events in flight, by time; ties by a sequence number given at each (re)scheduling, so the
 * order is deterministic (a total order: the pops do not depend on the heap's layout). A binary
 * heap whose keys sit in typed arrays beside the events: a comparison reads two numbers in a row
 * rather than a field of each of two objects (a pop is mostly comparisons).
 */
export class EventQueue {
  /** The heap: events, and their keys at the same index. */
  private readonly evs: SimEvent[] = [];
  private times = new Float64Array(64);
  private seqs = new Float64Array(64);
  private seq = 0;

  push(time: number, kind: number, a = 0, b = 0): SimEvent {
    const ev = new SimEvent(kind, a, b);
    this.schedule(ev, time);
    return ev;
  }

  /** Puts an event that is in no heap back in at `time`. */
  schedule(ev: SimEvent, time: number): void {
    if (ev.heapIndex !== -1) throw new Error('EventQueue.schedule: the event is already pending');
    const i = this.evs.length;
    if (i === this.times.length) this.grow();
    ev.time = time;
    this.evs.push(ev);
    this.up(ev, time, this.seq++, i);
  }

  /** Moves an event to `time` (a fresh sequence number keeps ties deterministic): unchanged when it is pending there already, scheduled when not pending. */
  move(ev: SimEvent, time: number): void {
    const i = ev.heapIndex;
    if (i < 0) return this.schedule(ev, time);
    if (ev.time === time) return;
    const later = time > ev.time;
    ev.time = time;
    // Later (or, at the same time, a larger sequence number) can only sink; earlier only rise.
    if (later) this.down(ev, time, this.seq++, i);
    else this.up(ev, time, this.seq++, i);
  }

  /** Takes a pending event out; false when it was not pending. */
  remove(ev: SimEvent): boolean {
    const i = ev.heapIndex;
    if (i < 0 || this.evs[i] !== ev) return false;
    this.removeAt(i);
    return true;
  }

  peek(): SimEvent | undefined {
    return this.evs[0];
  }

  pop(): SimEvent | undefined {
    const top = this.evs[0];
    if (top !== undefined) this.removeAt(0);
    return top;
  }

  private grow(): void {
    const times = new Float64Array(this.times.length * 2);
    const seqs = new Float64Array(this.seqs.length * 2);
    times.set(this.times);
    seqs.set(this.seqs);
    this.times = times;
    this.seqs = seqs;
  }

  private removeAt(i: number): void {
    const evs = this.evs;
    (evs[i] as SimEvent).heapIndex = -1;
    const n = evs.length - 1;
    const last = evs.pop() as SimEvent;
    if (i === n) return;
    // The last event takes the hole: it sinks from there, or rises when it comes before the hole's parent.
    const t = this.times[n] as number;
    const q = this.seqs[n] as number;
    const p = (i - 1) >> 1;
    if (i > 0 && (t < (this.times[p] as number) || (t === this.times[p] && q < (this.seqs[p] as number)))) this.up(last, t, q, i);
    else this.down(last, t, q, i);
  }

  /** Places `ev`, keyed (t, q), at hole `i` or above. */
  private up(ev: SimEvent, t: number, q: number, i: number): void {
    const { evs, times, seqs } = this;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const pt = times[p] as number;
      if (!(t < pt || (t === pt && q < (seqs[p] as number)))) break;
      const parent = evs[p] as SimEvent;
      evs[i] = parent;
      times[i] = pt;
      seqs[i] = seqs[p] as number;
      parent.heapIndex = i;
      i = p;
    }
    evs[i] = ev;
    times[i] = t;
    seqs[i] = q;
    ev.heapIndex = i;
  }

  /** Places `ev`, keyed (t, q), at hole `i` or below. */
  private down(ev: SimEvent, t: number, q: number, i: number): void {
    const { evs, times, seqs } = this;
    const n = evs.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      let c = l;
      let ct = times[l] as number;
      let cq = seqs[l] as number;
      if (l + 1 < n) {
        const rt = times[l + 1] as number;
        const rq = seqs[l + 1] as number;
        if (rt < ct || (rt === ct && rq < cq)) {
          c = l + 1;
          ct = rt;
          cq = rq;
        }
      }
      if (!(ct < t || (ct === t && cq < q))) break;
      const child = evs[c] as SimEvent;
      evs[i] = child;
      times[i] = ct;
      seqs[i] = cq;
      child.heapIndex = i;
      i = c;
    }
    evs[i] = ev;
    times[i] = t;
    seqs[i] = q;
    ev.heapIndex = i;
  }
}

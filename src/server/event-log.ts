import { randomBytes } from 'node:crypto';

/** An event as the stream sends it: its SSE `id:` is `<boot>-<seq>`, unique across restarts. */
export interface LoggedEvent<E = unknown> {
  eventId: string;
  event: E;
}

/** What a client reconnecting with a Last-Event-ID gets: the events it missed, or a gap it must know of. */
export type Replay<E = unknown> = { events: LoggedEvent<E>[] } | { gap: { lastEventId: string; reason: string }; now: string };

/**
 * Numbers the service's events and keeps at least the last `size` job events (up to 1.25 × as
 * many: they are dropped in chunks) for clients that reconnect
 * (`Last-Event-ID`): they get what they missed, or an explicit gap when the buffer no longer holds
 * it or the server restarted (the boot part of the id differs). Periodic `pacer` events get ids
 * (a client's last id moves on) but are not kept: a reconnect gets the next one within a second.
 */
export class EventLog<E> {
  /** This process's part of every id: a restart is told apart from a reconnect. */
  readonly boot = randomBytes(4).toString('hex');
  private seq = 0;
  private readonly kept: { seq: number; logged: LoggedEvent<E> }[] = [];
  /** The highest seq of a kept event that was dropped to keep the buffer bounded (0: none). */
  private droppedUpTo = 0;

  constructor(private readonly size = 10_000) {}

  /** Gives the event its id; keeps it for replay unless `transient`. */
  add(event: E, transient = false): LoggedEvent<E> {
    const seq = ++this.seq;
    const logged = { eventId: `${this.boot}-${seq}`, event };
    if (!transient) {
      this.kept.push({ seq, logged });
      if (this.kept.length > this.size * 1.25) this.droppedUpTo = (this.kept.splice(0, this.kept.length - this.size).at(-1) as { seq: number }).seq;
    }
    return logged;
  }

  /** The id of the latest event (`<boot>-0` before any): where a client told of a gap stands now. */
  lastId(): string {
    return `${this.boot}-${this.seq}`;
  }

  /** The kept events after `lastEventId`, oldest first; a gap when they cannot all be given. */
  since(lastEventId: string): Replay<E> {
    const m = /^([0-9a-f]+)-(\d+)$/.exec(lastEventId.trim());
    if (!m) return { gap: { lastEventId, reason: 'the Last-Event-ID is not one this server sends (<boot>-<seq>): events before this connection are unknown' }, now: this.lastId() };
    // (A past run of this server and another server are one case here: no boot id but this process's is known.)
    if (m[1] !== this.boot) return { gap: { lastEventId, reason: `the Last-Event-ID is of another run of this server (it restarted since) or of another server (this one's ids are ${this.boot}-<seq>): events between the last one received and this connection are not known here; read job states with GET /v1/jobs` }, now: this.lastId() };
    const last = Number(m[2]);
    if (last > this.seq) return { gap: { lastEventId, reason: `the Last-Event-ID is ahead of this server's last event (${this.boot}-${this.seq})` }, now: this.lastId() };
    if (last < this.droppedUpTo) return { gap: { lastEventId, reason: `the replay buffer (at least the last ${this.size} job events) no longer holds the events after it; read job states with GET /v1/jobs` }, now: this.lastId() };
    let lo = 0;
    let hi = this.kept.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((this.kept[mid] as { seq: number }).seq <= last) lo = mid + 1;
      else hi = mid;
    }
    return { events: this.kept.slice(lo).map((k) => k.logged) };
  }
}

/** What a node's clock read when a command that advances it was sent (see {@link NodeClock.send}). */
export interface ClockTicket {
  readonly seen: number;
  readonly timeline: number;
}

/**
 * This node's count in Redis's clock (a field per node that only the node advances), as the node
 * reads it back: a count not above what it had seen means Redis went back in time (restarted from
 * an older snapshot). Replies to commands sent one after the other are not handled in that order
 * (their awaits differ in depth: an end recorded read 11 before a take sent earlier read 10), so
 * each reading is judged against what was seen when its command was sent, not when it came back —
 * judged on arrival, a busy node saw Redis go back in time where it had not, and the cluster
 * stalled for a data loss that never happened (4–5 s, a clean-clone CI run's cluster test).
 */
export class NodeClock {
  private timeline = 0;

  constructor(private seen: number) {}

  /** The highest count read (the last one where Redis went back): what the node keeps on disk. */
  get value(): number {
    return this.seen;
  }

  /** Call just before sending a command that advances the clock; give its reading to {@link read}. */
  send(): ClockTicket {
    return { seen: this.seen, timeline: this.timeline };
  }

  /**
   * A reading of the clock by the command sent with `ticket`: `back` when it is not above what was
   * seen when that command was sent (Redis went back in time; the count goes on from there),
   * `stale` for a command sent before such a reading was handled (what it read is the old
   * timeline's or already judged), else `ahead`. Not a number (a failed command): `ahead`, unchanged.
   */
  read(clock: number, ticket: ClockTicket): 'ahead' | 'back' | 'stale' {
    if (ticket.timeline !== this.timeline) {
      // Not above what was seen when it was sent: read on the dataset Redis went back to, whose
      // count it advances (kept, or a second restore to a snapshot taken just after it would pass unseen).
      if (Number.isFinite(clock) && clock <= ticket.seen) this.seen = Math.max(this.seen, clock);
      return 'stale';
    }
    if (!Number.isFinite(clock)) return 'ahead';
    if (ticket.seen > 0 && clock <= ticket.seen) {
      this.timeline++;
      this.seen = clock;
      return 'back';
    }
    this.seen = Math.max(this.seen, clock);
    return 'ahead';
  }
}

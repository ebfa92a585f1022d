/**
 * A log that must not flood: at most `lines` lines per window of `windowMs`; the rest are counted
 * and said once their window is over (`unsaid(n)` words that line) — at the next line, or at
 * `flush()`, which a caller with no next line in sight calls now and then.
 */
export class LineLimit {
  private windowAt = -Infinity;
  private written = 0;
  private held = 0;

  constructor(
    private readonly write: (line: string) => void,
    private readonly lines: number,
    private readonly windowMs: number,
    private readonly unsaid: (n: number) => string,
    private readonly now: () => number = Date.now,
  ) {}

  /** Writes the line, or counts it where its window has had its lines. */
  line(text: string): void {
    if (this.now() - this.windowAt >= this.windowMs) {
      this.flush();
      this.windowAt = this.now();
      this.written = 0;
    }
    if (this.written >= this.lines) {
      this.held++;
      return;
    }
    this.written++;
    this.write(text);
  }

  /** Whether lines of the current window went unwritten (a flush will say so once it is over). */
  get holding(): boolean {
    return this.held > 0;
  }

  /** When the current window ends (ms on the limit's clock). */
  get windowEnd(): number {
    return this.windowAt + this.windowMs;
  }

  /** Says how many lines went unwritten, once their window is over. */
  flush(): void {
    if (this.held === 0 || this.now() - this.windowAt < this.windowMs) return;
    this.write(this.unsaid(this.held));
    this.held = 0;
  }
}

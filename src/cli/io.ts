// What every command shares, kept apart from the commands themselves: main loads a command's module
// only when that command runs (the client commands start in a fraction of the time the whole CLI took).

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  /** Whether err is a terminal (progress then redraws one line). */
  errIsTTY?: boolean;
}

/** Bad input from the command line (exit code 2); the message says what to write instead. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

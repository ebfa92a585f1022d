import type { StepFailure } from '../runtime/index.js';
import { LineLimit } from '../runtime/line-limit.js';
import { printable } from '../runtime/printable.js';

/** Lines per window, and the window, ms: a device that fails every item must not flood the log. */
const LINES = 20;
const WINDOW_MS = 60_000;

/**
 * The server log's lines for failed steps (a retried failure leaves no other trace but the
 * counter): one per failure, at most LINES a minute; the rest are counted and said once the
 * minute is over.
 */
export class FailureLog {
  private readonly limit: LineLimit;

  constructor(write: (line: string) => void, now: () => number = Date.now) {
    this.limit = new LineLimit(write, LINES, WINDOW_MS, (n) => `stoker serve: ${n} more failed steps in that minute were not logged (stoker_step_failures_total counts every one)`, now);
  }

  /** `device`: the device's name, for a device step. */
  failed(f: StepFailure, device: string | undefined): void {
    const where = f.stage === 'prepare' ? 'in preparation' : `on device ${JSON.stringify(device ?? String(f.device))}${f.worker === undefined ? '' : `/${f.worker}`}`;
    this.limit.line(`stoker serve: job ${JSON.stringify(f.jobId)} (kind ${JSON.stringify(f.kind)}) partition ${f.partition} failed ${where} (attempt ${f.attempt}): ${printable(f.reason)} — ${!f.retried ? 'its job fails' : f.counted ? 'it is prepared again' : f.stage === 'prepare' ? 'its preparation batch failed as a whole: it is prepared again alone, no try spent' : 'its batch failed as a whole: it is prepared again and runs alone, no try spent'}`);
  }

  /** Says how many failures went unlogged, once their minute is over (call it every second or so: the failures may have stopped). */
  flush(): void {
    this.limit.flush();
  }
}

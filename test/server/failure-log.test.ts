/** The server log's lines for failed steps: one per failure, at most 20 a minute, the rest counted and said after. */
import { describe, expect, it } from 'vitest';
import { FailureLog } from '../../src/server/failure-log.js';
import type { StepFailure } from '../../src/runtime/index.js';

const failure = (partition: number, extra: Partial<StepFailure> = {}): StepFailure => ({ stage: 'device', jobId: 'j', kind: 'k', partition, attempt: 1, device: 0, worker: 1, reason: 'CUDA error', retried: true, counted: true, ...extra });

describe('FailureLog', () => {
  it('says where, which try and what follows; past 20 lines a minute it counts the rest and says how many once the minute is over', () => {
    const lines: string[] = [];
    let now = 0;
    const log = new FailureLog((l) => lines.push(l), () => now);
    log.failed(failure(0), 'gpu');
    log.failed(failure(1, { stage: 'prepare', device: undefined, worker: undefined, attempt: 2, retried: false, reason: 'out of memory' }), undefined);
    // (A batch that failed without naming its item: each item runs again alone, no try spent — it read as a retry.)
    log.failed(failure(2, { counted: false, reason: 'batch crashed' }), 'gpu');
    log.failed(failure(3, { stage: 'prepare', device: undefined, worker: undefined, counted: false, reason: 'batch crashed' }), undefined);
    expect(lines).toEqual([
      'stoker serve: job "j" (kind "k") partition 0 failed on device "gpu"/1 (attempt 1): CUDA error — it is prepared again',
      'stoker serve: job "j" (kind "k") partition 1 failed in preparation (attempt 2): out of memory — its job fails',
      'stoker serve: job "j" (kind "k") partition 2 failed on device "gpu"/1 (attempt 1): batch crashed — its batch failed as a whole: it is prepared again and runs alone, no try spent',
      'stoker serve: job "j" (kind "k") partition 3 failed in preparation (attempt 1): batch crashed — its preparation batch failed as a whole: it is prepared again alone, no try spent',
    ]);
    for (let p = 4; p < 30; p++) log.failed(failure(p), 'gpu');
    expect(lines).toHaveLength(20);
    now = 59_999;
    log.failed(failure(30), 'gpu');
    expect(lines).toHaveLength(20);
    now = 60_000;
    log.failed(failure(31), 'gpu');
    expect(lines.slice(20)).toEqual(['stoker serve: 11 more failed steps in that minute were not logged (stoker_step_failures_total counts every one)', 'stoker serve: job "j" (kind "k") partition 31 failed on device "gpu"/1 (attempt 1): CUDA error — it is prepared again']);
  });

  it('escapes control characters in the reason: an endpoint body with a NUL made the log a binary file to grep, a newline split the line', () => {
    const lines: string[] = [];
    new FailureLog((l) => lines.push(l)).failed(failure(0, { reason: 'POST http://x answered 500: \u0000\uFFFDoops\nsecond\tline\u001b[31m \\n\u0085\u2028' }), 'gpu');
    // (A backslash doubled: an escaped newline is told from the two characters \ n.)
    expect(lines).toEqual(['stoker serve: job "j" (kind "k") partition 0 failed on device "gpu"/1 (attempt 1): POST http://x answered 500: \\x00\uFFFDoops\\nsecond\\tline\\x1b[31m \\\\n\\x85\\u2028 — it is prepared again']);
  });

  it('says the count once the minute is over even where no failure comes after (flush, called every second)', () => {
    const lines: string[] = [];
    let now = 0;
    const log = new FailureLog((l) => lines.push(l), () => now);
    for (let p = 0; p < 25; p++) log.failed(failure(p), 'gpu');
    log.flush();
    expect(lines).toHaveLength(20);
    now = 60_000;
    log.flush();
    log.flush();
    expect(lines.slice(20)).toEqual(['stoker serve: 5 more failed steps in that minute were not logged (stoker_step_failures_total counts every one)']);
  });
});

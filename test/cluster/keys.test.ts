/** How a failed cluster job's code and reason travel through BullMQ's failedReason string. */
import { describe, expect, it } from 'vitest';
import { failure, failureOf } from '../../src/cluster/keys.js';

describe('failure codes in BullMQ', () => {
  it('a code and a reason read back as they were written, whatever the reason holds', () => {
    for (const [code, reason] of [
      ['E_DEVICE_FAILED', 'partition 3 failed on device 0: E_OTHER: not a code'],
      ['E_CANCELLED', 'cancelled on request'],
      ['E_INTERNAL', ''],
      ['E_KIND', 'line one\nline two: {"json": true}'],
    ] as const) {
      expect(failureOf(failure(code, reason).message)).toEqual({ code, reason });
    }
  });

  it('writes the "E_X: reason" form every node version reads, and gives anything else as E_INTERNAL', () => {
    expect(failure('E_DEADLINE', 'job j missed its deadline').message).toBe('E_DEADLINE: job j missed its deadline');
    expect(failureOf('E_DEADLINE: job j missed its deadline')).toEqual({ code: 'E_DEADLINE', reason: 'job j missed its deadline' });
    expect(failureOf('job stalled more than allowable limit')).toEqual({ code: 'E_INTERNAL', reason: 'job stalled more than allowable limit' });
    expect(failureOf('')).toEqual({ code: 'E_INTERNAL', reason: '' });
  });
});

/** A cluster node's job views leave a large result out, by its size, as a local node's do (GET …/result gives it whole). */
import { describe, expect, it } from 'vitest';
import { withoutResultOver, type JobView } from '../../src/server/api.js';
import { VIEW_RESULT_MAX_BYTES } from '../../src/server/journal-schema.js';

const withoutLargeResult = (v: JobView) => withoutResultOver(v, VIEW_RESULT_MAX_BYTES);

const view = (result: unknown, resultEncoding?: 'base64'): JobView =>
  ({ id: 'j', kind: 'k', priority: 'normal', partitions: 1, state: 'done', input: null, deadline: null, submittedAt: '', startedAt: null, finishedAt: null, durationS: null, partitionsDone: 1, partitionStates: null, partitionCounts: null, resumes: 0, result, ...(resultEncoding ? { resultEncoding } : {}), error: null }) as JobView;

describe('withoutResultOver(v, VIEW_RESULT_MAX_BYTES)', () => {
  it('leaves a result over 1 MiB as stored (bytes, or JSON text) out, by its size; a smaller one stays', () => {
    const big = Buffer.alloc((1 << 20) + 1, 7).toString('base64');
    // (Its encoding stays: a client knows the left-out result is bytes.)
    expect(withoutLargeResult(view(big, 'base64'))).toEqual({ ...view(null, 'base64'), resultOmittedBytes: (1 << 20) + 1 });
    const small = Buffer.alloc(1 << 20, 7).toString('base64');
    expect(withoutLargeResult(view(small, 'base64'))).toEqual(view(small, 'base64'));
    const json = ['x'.repeat(1 << 20)];
    expect(withoutLargeResult(view(json))).toEqual({ ...view(null), resultOmittedBytes: (1 << 20) + 4 });
    expect(withoutLargeResult(view({ total: 3 }))).toEqual(view({ total: 3 }));
  });
});

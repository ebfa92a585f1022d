import { describe, expect, it } from 'vitest';
import { statusText, type StatusBody } from '../../src/cli/client-commands.js';
import { formatJson, formatMetric, formatTable } from '../../src/cli/table.js';

describe('formatMetric', () => {
  it('prints each kind of measure in its unit', () => {
    expect(formatMetric('throughputRatio', 0.99843)).toBe('0.998');
    expect(formatMetric('occupancy', 1)).toBe('1.000');
    expect(formatMetric('jobLatencyP50Ms', 194_400)).toBe('194.4 s');
    expect(formatMetric('rampMs', 0)).toBe('0.0 s');
    expect(formatMetric('jobLatencyP50Ms', 29.4)).toBe('29 ms');
    expect(formatMetric('jobLatencyP50Ms', 2.25)).toBe('2.3 ms');
    expect(formatMetric('jobLatencyP50Ms', 960)).toBe('1.0 s');
    expect(formatMetric('peakMemoryBytes', 76.3 * 1024 ** 3)).toBe('76.3 GiB');
    expect(formatMetric('leakedBytes', 0)).toBe('0.0 GiB');
    expect(formatMetric('leakedBytes', 4096)).toBe('<0.1 GiB');
    expect(formatMetric('waitingMean', 6.8228)).toBe('6.82');
    expect(formatMetric('waitingP95', 12)).toBe('12');
    expect(formatMetric('jobsDone', 40)).toBe('40');
    expect(formatMetric('settleCompletions', null)).toBe('–');
    expect(formatMetric('throughputRatio', Number.NaN)).toBe('–');
  });
});

describe('formatTable', () => {
  it('aligns text left and numbers right, with a rule under the headers', () => {
    const t = formatTable(
      ['metric', 'stoker', 'classic'],
      [
        ['throughputRatio', '0.998', '0.778'],
        ['jobLatencyP50Ms', '193.3 s', '–'],
      ],
    );
    expect(t).toBe(
      [
        'metric            stoker  classic',
        '───────────────  ───────  ───────',
        'throughputRatio    0.998    0.778',
        'jobLatencyP50Ms  193.3 s        –',
        '',
      ].join('\n'),
    );
  });

  it('pads short rows and never leaves trailing spaces', () => {
    const t = formatTable(['a', 'bb'], [['x'], ['yyyy', 'z']]);
    for (const line of t.split('\n')) expect(line).toBe(line.trimEnd());
    expect(t.split('\n')[2]).toBe('x');
  });
});

describe('stoker status’s lines', () => {
  const status = (kinds?: { name: string; estimatedPerSec: number | null }[]): StatusBody => ({
    jobs: { pending: 3, queued: 1, running: 2, done: 5, failed: 0, cancelled: 0 },
    partitions: { queued: 183, preparing: 3, waiting: 0, onDevice: 2 },
    targetWaiting: 4,
    pacer: { name: 'stoker', mode: 'steady', ratePerSec: 20.13, intervalMs: 1000 / 42.59, ...(kinds ? { kinds } : {}) },
    devices: [{ device: 0, name: 'gpu', workers: [{ state: 'busy' }, { state: 'idle' }] }],
    budget: { usedBytes: 1024, totalBytes: null },
  });

  it('give the capacity of each kind where kinds differ (one figure was the next queued kind’s: 20/s, then 4/s)', () => {
    const text = statusText(status([{ name: 'small', estimatedPerSec: 22.3 }, { name: 'synth-a', estimatedPerSec: 4.14 }, { name: 'idle-kind', estimatedPerSec: null }]));
    expect(text).toContain('pacer       stoker steady  capacity by kind small 22.30/s, synth-a 4.14/s  target dispatch 42.59/s\n');
    expect(statusText(status([{ name: 'small', estimatedPerSec: 22.3 }]))).toContain('capacity 20.13/s  target dispatch');
    expect(statusText(status())).toContain('devices     1/2 workers busy\n');
  });

  it('say "all dispatched" where the pacer is idle with partitions in flight, "idle" where nothing is (it said idle while jobs ran)', () => {
    const idle = (partitions: StatusBody['partitions']): StatusBody => ({ ...status(), partitions, pacer: { ...status().pacer, mode: 'idle' } });
    expect(statusText(idle({ queued: 0, preparing: 0, waiting: 2, onDevice: 2 }))).toContain('pacer       stoker all dispatched  capacity 20.13/s  target dispatch –\n');
    expect(statusText(idle({ queued: 0, preparing: 0, waiting: 0, onDevice: 0 }))).toContain('pacer       stoker idle  capacity');
  });

  it('count the jobs on hold among the pending (a job of a kind not loaded read as running)', () => {
    expect(statusText(status())).toContain('jobs        pending 3  (queued 1, running 2)  done 5');
    expect(statusText({ ...status(), jobs: { ...status().jobs, onHold: 2 } })).toContain("jobs        pending 3  (queued 1, running 2; 2 on hold: see their views' onHold)  done 5");
  });

  it('give the budget in the unit that reads (it was raw bytes: 1992294400 bytes of 2147483648)', () => {
    expect(statusText(status())).toContain('budget      1.0 KiB of unlimited\n');
    expect(statusText({ ...status(), budget: { usedBytes: 1992294400, totalBytes: 2 * 1024 ** 3 } })).toContain('budget      1.9 GiB of 2.0 GiB\n');
  });
});

describe('formatJson', () => {
  it('writes JSON as JSON.stringify(v, null, 2) does, but arrays of scalars on one line (a vector result was one number per line)', () => {
    const v = { id: 'j', result: [[0.5, -1, 2e-9], [3, null, 'x"y']], empty: [], none: {}, nested: [{ a: [true, false] }], skipped: undefined };
    const text = formatJson(v);
    expect(text).toBe('{\n  "id": "j",\n  "result": [\n    [0.5, -1, 2e-9],\n    [3, null, "x\\"y"]\n  ],\n  "empty": [],\n  "none": {},\n  "nested": [\n    {\n      "a": [true, false]\n    }\n  ]\n}');
    expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify(v)));
    // A hole is null, as JSON.stringify writes it (map skipped it: "[1, , 3]").
    // eslint-disable-next-line no-sparse-arrays
    expect(formatJson([1, , 3])).toBe('[1, null, 3]');
    // Nested past 64 levels: the rest on one line, still the same JSON.
    let deep: unknown = [1];
    for (let i = 0; i < 300; i++) deep = { d: deep };
    expect(JSON.parse(formatJson(deep))).toEqual(deep);
  });
});

/**
 * Property tests for batches, on the device and in preparation: random sequences of submits,
 * cancels, lost and returned workers, timer ticks and answers (done, some items failed, the whole
 * batch failed, stale answers) against an engine with a batching device and a kind prepared in
 * batches. After every step the engine's counters must match the steps the driver holds (from the
 * commands alone); every batch is of one kind and within its size; no item is in two steps; the
 * preparation steps never exceed maxPreparing. Finally every step is answered until nothing is
 * left: every job ends exactly once and all memory is free. Seeded, so every run checks the same
 * cases.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Engine, createPacer, type Command, type EngineEvent, type ItemView } from '../../src/core/index.js';

interface Config {
  prepItems: number;
  prepWaitMs: number;
  devItems: number;
  devWaitMs: number;
  workers: number[];
  maxPreparing: number;
  budget: number;
  retries: number;
  pacer: 'unpaced' | 'stoker';
}

type Op =
  | { op: 'submit'; kind: 'a' | 'b'; partitions: number; bytes: number; dt: number }
  | { op: 'answer'; pick: number; how: 'done' | 'some' | 'whole' | 'stale'; dt: number }
  | { op: 'cancel'; pick: number; dt: number }
  | { op: 'lose' | 'return'; device: number; worker: number; dt: number }
  | { op: 'tick'; dt: number };

const configArb: fc.Arbitrary<Config> = fc.record({
  prepItems: fc.integer({ min: 1, max: 4 }),
  prepWaitMs: fc.constantFrom(0, 50),
  devItems: fc.integer({ min: 1, max: 4 }),
  devWaitMs: fc.constantFrom(0, 30),
  workers: fc.array(fc.integer({ min: 1, max: 2 }), { minLength: 1, maxLength: 2 }),
  maxPreparing: fc.oneof(fc.constant(Infinity), fc.integer({ min: 1, max: 3 })),
  budget: fc.oneof(fc.constant(Infinity), fc.integer({ min: 100, max: 600 })),
  retries: fc.integer({ min: 0, max: 1 }),
  pacer: fc.constantFrom('unpaced' as const, 'stoker' as const),
});

const dt = fc.integer({ min: 0, max: 60 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ op: fc.constant('submit' as const), kind: fc.constantFrom('a' as const, 'b' as const), partitions: fc.integer({ min: 1, max: 5 }), bytes: fc.integer({ min: 0, max: 100 }), dt }) },
  { weight: 6, arbitrary: fc.record({ op: fc.constant('answer' as const), pick: fc.nat(), how: fc.constantFrom('done' as const, 'done' as const, 'some' as const, 'whole' as const, 'stale' as const), dt }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('cancel' as const), pick: fc.nat(), dt }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constantFrom('lose' as const, 'return' as const), device: fc.nat({ max: 1 }), worker: fc.nat({ max: 1 }), dt }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('tick' as const), dt }) },
);

/** A step the engine started and has not withdrawn: what answers it, and the items still in it. */
interface Step {
  key: string;
  stage: 'prepare' | 'device';
  /** Engine batch id, or −1 for a single item. */
  batch: number;
  items: ItemView[];
  attempts: number[];
  device: number;
}

class Driver {
  now = 0;
  readonly steps = new Map<string, Step>();
  readonly ended = new Map<string, number>();
  readonly submitted: string[] = [];
  /** Batch ids answered, by stage: a stale answer names one of them. */
  readonly answered: Record<Step['stage'], number[]> = { prepare: [], device: [] };
  private seq = 0;
  constructor(
    readonly e: Engine,
    readonly c: Config,
  ) {}

  apply(ev: EngineEvent): void {
    this.carryOut(this.e.apply(ev));
    this.check();
  }

  private carryOut(cmds: readonly Command[]): void {
    for (const c of cmds) {
      switch (c.type) {
        case 'startPrepare':
          expect(c.item.kind).toBe('b');
          this.add({ key: `p${c.item.id}`, stage: 'prepare', batch: -1, items: [c.item], attempts: [c.attempt], device: -1 });
          break;
        case 'startPrepareBatch': {
          expect(c.items.length).toBeGreaterThanOrEqual(1);
          expect(c.items.length).toBeLessThanOrEqual(this.c.prepItems);
          expect(new Set(c.items.map((i) => i.kind))).toEqual(new Set(['a']));
          const bytes = c.items.reduce((n, i) => n + i.reservedBytes, 0);
          expect(bytes).toBeLessThanOrEqual(this.c.budget);
          this.add({ key: `P${c.batch}`, stage: 'prepare', batch: c.batch, items: [...c.items], attempts: c.items.map((i) => i.attempt), device: -1 });
          break;
        }
        case 'startDevice':
          this.add({ key: `d${c.item.id}`, stage: 'device', batch: -1, items: [c.item], attempts: [c.attempt], device: c.device });
          break;
        case 'startBatch':
          expect(c.items.length).toBeLessThanOrEqual(this.c.devItems);
          expect(new Set(c.items.map((i) => i.kind)).size).toBe(1);
          this.add({ key: `D${c.batch}`, stage: 'device', batch: c.batch, items: [...c.items], attempts: c.items.map((i) => i.attempt), device: c.device });
          break;
        case 'abort': {
          const stage = c.stage === 'preparing' ? 'prepare' : c.stage === 'on-device' ? 'device' : null;
          if (!stage) break;
          const key = c.batch ? `${stage === 'prepare' ? 'P' : 'D'}${c.batch.id}` : `${stage === 'prepare' ? 'p' : 'd'}${c.item.id}`;
          const s = [...this.steps.values()].find((x) => x.stage === stage && x.items.some((i) => i.id === c.item.id));
          if (!s) break; // a step already answered
          expect(s.key).toBe(key);
          s.items = s.items.filter((i) => i.id !== c.item.id);
          if (c.batch) expect(c.batch.remaining).toBe(s.items.length);
          if (s.items.length === 0) this.steps.delete(s.key);
          break;
        }
        case 'finishJob':
          this.ended.set(c.jobId, (this.ended.get(c.jobId) ?? 0) + 1);
          break;
        default:
          break;
      }
    }
  }

  private add(s: Step): void {
    for (const it of s.items) for (const o of this.steps.values()) expect(o.items.some((x) => x.id === it.id), `item ${it.id} in two steps`).toBe(false);
    this.steps.set(s.key, s);
  }

  /** The engine's counters against the steps the driver holds. */
  private check(): void {
    const snap = this.e.snapshot;
    const steps = [...this.steps.values()];
    const prep = steps.filter((s) => s.stage === 'prepare');
    const dev = steps.filter((s) => s.stage === 'device');
    expect(snap.preparing).toBe(prep.reduce((n, s) => n + s.items.length, 0));
    expect(snap.preparingSteps).toBe(prep.length);
    expect(snap.preparingSteps).toBeLessThanOrEqual(this.c.maxPreparing);
    expect(snap.onDevice).toBe(dev.reduce((n, s) => n + s.items.length, 0));
    snap.devices.forEach((d, i) => expect(d.busy).toBe(dev.filter((s) => s.device === i).length));
    expect(this.e.budget.used).toBeGreaterThanOrEqual(0);
    expect(this.e.budget.used).toBeLessThanOrEqual(this.c.budget);
    for (const n of this.ended.values()) expect(n).toBe(1);
  }

  submit(kind: 'a' | 'b', partitions: number, bytes: number): void {
    const id = `j${this.seq++}`;
    this.submitted.push(id);
    this.apply({ type: 'submit', time: this.now, job: { id, kind, partitions, memory: { prepareBytes: bytes, deviceBytes: Math.floor(bytes / 2) } } });
  }

  /** Answers a step: all done, some items failed, the whole step failed, or a stale answer (an older attempt, an unknown batch). */
  answer(s: Step, how: 'done' | 'some' | 'whole' | 'stale'): void {
    const t = this.now;
    if (how === 'stale') {
      // (Of a step the engine gave and no longer holds: an id or attempt it never gave is refused.)
      const it = s.items[0] as ItemView;
      const answered = this.answered[s.stage];
      const attempt = (s.attempts[0] as number) - 1;
      if (s.batch >= 0 && answered.length > 0) this.apply({ type: s.stage === 'prepare' ? 'prepareBatchDone' : 'batchDone', time: t, batch: answered[s.batch % answered.length] as number });
      else if (s.batch < 0 && attempt >= 1) this.apply({ type: s.stage === 'prepare' ? 'prepared' : 'deviceDone', time: t, item: it.id, attempt });
      return;
    }
    this.steps.delete(s.key);
    if (s.batch >= 0) this.answered[s.stage].push(s.batch);
    if (s.batch < 0) {
      const it = s.items[0] as ItemView;
      const attempt = s.attempts[0] as number;
      const fail = how !== 'done';
      if (s.stage === 'prepare') this.apply(fail ? { type: 'prepareFailed', time: t, item: it.id, attempt, reason: 'x' } : { type: 'prepared', time: t, item: it.id, attempt });
      else this.apply(fail ? { type: 'deviceFailed', time: t, item: it.id, attempt, reason: 'x' } : { type: 'deviceDone', time: t, item: it.id, attempt, busyMs: 5 });
      return;
    }
    if (how === 'whole') {
      this.apply({ type: s.stage === 'prepare' ? 'prepareBatchFailed' : 'batchFailed', time: t, batch: s.batch, reason: 'x' });
      return;
    }
    const failed = how === 'some' ? s.items.filter((_, i) => i % 2 === 0).map((it) => ({ item: it.id, reason: 'x' })) : undefined;
    if (s.stage === 'prepare') this.apply({ type: 'prepareBatchDone', time: t, batch: s.batch, ...(failed ? { failed } : {}) });
    else this.apply({ type: 'batchDone', time: t, batch: s.batch, busyMs: 5, ...(failed ? { failed } : {}) });
  }
}

describe('batches on the device and in preparation: invariants under random operations', () => {
  it('counters match the steps in flight after every step; in the end every job ends exactly once and all memory is free', () => {
    fc.assert(
      fc.property(configArb, fc.array(opArb, { minLength: 1, maxLength: 80 }), (c, ops) => {
        const e = new Engine({
          devices: c.workers.map((workers) => ({ workers, batch: { maxItems: c.devItems, maxWaitMs: c.devWaitMs } })),
          kinds: { a: { prepareBatch: { maxItems: c.prepItems, maxWaitMs: c.prepWaitMs } } },
          pacer: createPacer(c.pacer, { targetWaiting: 2, priorServiceMs: 10 }),
          budgetBytes: c.budget,
          maxPreparing: c.maxPreparing,
          retries: c.retries,
        });
        const d = new Driver(e, c);
        for (const o of ops) {
          d.now += o.dt;
          const steps = [...d.steps.values()];
          switch (o.op) {
            case 'submit':
              if (o.bytes <= c.budget) d.submit(o.kind, o.partitions, o.bytes);
              break;
            case 'answer':
              if (steps.length) d.answer(steps[o.pick % steps.length] as Step, o.how);
              else d.apply({ type: 'tick', time: d.now });
              break;
            case 'cancel':
              if (d.submitted.length) d.apply({ type: 'cancel', time: d.now, jobId: d.submitted[o.pick % d.submitted.length] as string });
              break;
            case 'lose':
            case 'return':
              if (o.device < c.workers.length && o.worker < (c.workers[o.device] as number)) d.apply({ type: o.op === 'lose' ? 'workerLost' : 'workerReturned', time: d.now, device: o.device, worker: o.worker });
              break;
            case 'tick':
              d.apply({ type: 'tick', time: d.now });
              break;
          }
        }
        // Every worker back, then every step answered done (timers let held batches go) until nothing is left.
        c.workers.forEach((n, device) => {
          for (let worker = 0; worker < n; worker++) d.apply({ type: 'workerReturned', time: d.now, device, worker });
        });
        for (let round = 0; round < 10_000 && e.activeJobs > 0; round++) {
          d.now += 20;
          const s = d.steps.values().next().value as Step | undefined;
          if (s) d.answer(s, 'done');
          else d.apply({ type: 'tick', time: d.now });
        }
        expect(e.activeJobs).toBe(0);
        for (const id of d.submitted) expect(d.ended.get(id), `job ${id} ended once`).toBe(1);
        expect(e.budget.used).toBe(0);
        const snap = e.snapshot;
        expect([snap.preparing, snap.preparingSteps, snap.waiting, snap.onDevice, snap.backlog]).toEqual([0, 0, 0, 0, 0]);
      }),
      { seed: 17, numRuns: 300 },
    );
  });
});

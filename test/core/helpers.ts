/** Shared helpers for the core tests: command filters, an engine driver, a controllable pacer, snapshots. */
import { expect } from 'vitest';
import { StokerError, type Command, type Engine, type EngineEvent, type ItemView, type Pacer, type PacerSnapshot, type PacerState, type StokerErrorCode } from '../../src/core/index.js';

/** Feeds an engine and keeps its commands, and each item it started preparing (alone or in a batch) by `job:partition`. */
export class EngineDriver {
  readonly items = new Map<string, ItemView>();
  readonly log: Command[] = [];
  constructor(readonly e: Engine) {}

  apply(event: EngineEvent): Command[] {
    const out = this.e.apply(event);
    for (const c of out) {
      if (c.type === 'startPrepare') this.items.set(`${c.item.jobId}:${c.item.partition}`, c.item);
      if (c.type === 'startPrepareBatch') for (const it of c.items) this.items.set(`${it.jobId}:${it.partition}`, it);
    }
    this.log.push(...out);
    return out;
  }

  item(key: string): ItemView {
    const it = this.items.get(key);
    if (!it) throw new Error(`item ${key} was never dispatched`);
    return it;
  }
}

export type CommandOf<T extends Command['type']> = Extract<Command, { type: T }>;

/** The commands of one type, in order. */
export function ofType<T extends Command['type']>(cmds: readonly Command[], type: T): CommandOf<T>[] {
  return cmds.filter((c): c is CommandOf<T> => c.type === type);
}

/** `jobId:partition` for each startPrepare, in order. */
export function prepared(cmds: readonly Command[]): string[] {
  return ofType(cmds, 'startPrepare').map((c) => `${c.item.jobId}:${c.item.partition}`);
}

/** `jobId:partition@device/worker` for each startDevice, in order. */
export function started(cmds: readonly Command[]): string[] {
  return ofType(cmds, 'startDevice').map((c) => `${c.item.jobId}:${c.item.partition}@${c.device}/${c.worker}`);
}

/** `jobId:partition/stage` for each abort, in order. */
export function aborts(cmds: readonly Command[]): string[] {
  return ofType(cmds, 'abort').map((c) => `${c.item.jobId}:${c.item.partition}/${c.stage}`);
}

/** Asserts that `fn` throws a StokerError with this code (and, optionally, a message matching `message`). */
export function expectStokerError(fn: () => unknown, code: StokerErrorCode, message?: RegExp | string): StokerError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught, `expected a StokerError ${code}`).toBeInstanceOf(StokerError);
  const err = caught as StokerError;
  expect(err.code).toBe(code);
  expect(err.name).toBe('StokerError');
  if (message !== undefined) expect(err.message).toMatch(message);
  return err;
}

/**
 * A pacer the test opens and closes by hand: `nextDispatchAt` returns `openAt`
 * (default 0, i.e. always open once time ≥ 0). Records what the engine told it.
 */
export class GatePacer implements Pacer {
  readonly name = 'gate';
  openAt = 0;
  observed: number[] = [];
  dispatchedAt: number[] = [];

  observe(s: PacerSnapshot): void {
    this.observed.push(s.now);
  }

  nextDispatchAt(): number {
    return this.openAt;
  }

  onDispatch(s: PacerSnapshot): void {
    this.dispatchedAt.push(s.now);
  }

  state(): PacerState {
    return { mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} };
  }
}

/** A hand-made pacer snapshot: one device with `workers` workers, no kinds listed (pacers read the device counters), everything else empty, overridable. */
export function snapshot(over: Partial<PacerSnapshot> = {}): PacerSnapshot {
  const workers = over.workers ?? 2;
  return {
    now: 0,
    waiting: 0,
    preparing: 0,
    preparingSteps: 0,
    onDevice: 0,
    backlog: 0,
    workers,
    dispatched: 0,
    deviceCompletions: 0,
    deviceBusyMs: 0,
    devices: [{ workers, busy: 0, completions: 0, busyMs: 0 }],
    kinds: [],
    nextKind: -1,
    prepareCompletions: 0,
    prepareLatencyMsTotal: 0,
    prepareLatencySqTotal: 0,
    preparingStartMsTotal: 0,
    preparingMsTotal: 0,
    prepareConcurrencyTotal: 0,
    budgetBlocked: false,
    budgetUsedBytes: 0,
    budgetTotalBytes: Infinity,
    maxPreparing: Infinity,
    ...over,
  };
}

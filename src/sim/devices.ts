import { DEV, SimEvent, type EventQueue } from './events.js';
import { factor, meanMs, type Dist, type Scenario } from './scenario.js';

export interface SimWorker {
  alive: boolean;
  item: number;
  attempt: number;
  /** Work left, in ms of service at rate 1. */
  remaining: number;
  startedAt: number;
  /** The item's own service time at the device's speed when it started, ms (what a busyTime "own" device reports). */
  own: number;
  fail: boolean;
  /** Its completion event, made once and reused for every step it runs: pending while in the heap. */
  ev: SimEvent;
  /** The engine's batch it runs (−1: a single item), the batch's items still in it, and those that will fail. */
  batch: number;
  batchItems: number[];
  batchFailed: number[];
}

export interface SimDevice {
  speed: number;
  contention: number[];
  service: Dist;
  /** By kind index (SimItem.kindIndex): its service time on this device (kinds.<name>.service, else the device's). */
  serviceOf: Dist[];
  /** By kind index: its mean service time ÷ workUnitMs (the work an item of it counts for in the throughput ratio). */
  workOf: number[];
  /** The device time work is counted in here (see workUnitMs). */
  workUnitMs: number;
  /** Reports each item's own service time instead of the time it held its worker (scenario busyTime "own"). */
  ownBusy: boolean;
  /** Batches (scenario devices[].batch): the most items in one, and the fixed part of a batch's time. */
  batch: { maxItems: number; fixed: Dist } | null;
  workers: SimWorker[];
  busy: number;
  lastUpdate: number;
  /** Contention changed at this instant; completions not yet re-timed. */
  dirty: boolean;
}

/** The scenario's device groups, one entry per device. */
export function deviceGroups(s: Scenario): Scenario['devices'][number][] {
  return s.devices.flatMap((g) => Array.from({ length: g.count }, () => g));
}

/**
 * The device time an item's work is counted in on a device (the throughput ratio's unit): its own
 * mean service time; where that is 0 — a placeholder beside kinds that each give their own — the
 * mean of the kinds' own (counted in 0, the capacity read infinite: the steady window empty, or the
 * ratio NaN).
 */
export function workUnitMs(g: { service: Dist }, s: Scenario): number {
  const own = meanMs(g.service);
  if (own > 0) return own;
  const kinds = Object.values(s.kinds).flatMap((k) => (k.service ? [meanMs(k.service)] : []));
  return kinds.length > 0 ? kinds.reduce((a, b) => a + b, 0) / kinds.length : own;
}

/**
 * The work an item of a kind counts for on a device: its mean service time there (`service`, the
 * kind's own, else the device's) in the device's work unit (workUnitMs). A device with no service
 * time at all — 0 throughout: zero busy time — counts each item as one.
 */
export function itemWork(g: { service: Dist }, service: Dist | undefined, unit: number): number {
  return unit > 0 ? meanMs(service ?? g.service) / unit : 1;
}

/** One simulated device per device of the scenario, all workers alive and idle. */
export function buildDevices(s: Scenario): SimDevice[] {
  const kinds = Object.values(s.kinds);
  return deviceGroups(s).map((g, d) => {
    const unit = workUnitMs(g, s);
    return {
      speed: g.speed,
      contention: g.contention,
      service: g.service,
      serviceOf: kinds.map((k) => k.service ?? g.service),
      workOf: kinds.map((k) => itemWork(g, k.service, unit)),
      workUnitMs: unit,
      ownBusy: g.busyTime === 'own',
      batch: g.batch ? { maxItems: g.batch.maxItems, fixed: g.batch.fixed } : null,
      busy: 0,
      lastUpdate: 0,
      dirty: false,
      workers: Array.from({ length: g.workers }, (_, wi) => ({ alive: true, item: -1, attempt: 0, remaining: 0, startedAt: 0, own: 0, fail: false, ev: new SimEvent(DEV, d, wi), batch: -1, batchItems: [], batchFailed: [] })),
    };
  });
}

/** Mean device time per item, ms: a batching device's at full batches (its fixed part shared by maxItems). */
export function unitMs(service: Dist, batch: { maxItems: number; fixed: Dist } | null | undefined): number {
  return batch ? (meanMs(batch.fixed) + batch.maxItems * meanMs(service)) / batch.maxItems : meanMs(service);
}

/**
 * Device capacity of the whole fleet for the given speeds and live workers, in items/ms of each
 * device's own service time t: Σ max_k k·speed / (t·f(k)). An item of a kind with its own service
 * time counts for its share of work (workOf), so the throughput ratio weighs the mix.
 */
export function capacityOf(devices: SimDevice[]): number {
  let total = 0;
  for (const d of devices) {
    const alive = d.workers.reduce((n, w) => n + (w.alive ? 1 : 0), 0);
    const unit = d.batch ? (meanMs(d.batch.fixed) + d.batch.maxItems * d.workUnitMs) / d.batch.maxItems : d.workUnitMs;
    let best = 0;
    for (let k = 1; k <= alive; k++) best = Math.max(best, (k * d.speed) / (unit * factor(d.contention, k)));
    total += best;
  }
  return total;
}

/**
 * The devices as a fluid: with k workers busy each item progresses at speed ÷ factor(contention,
 * k), so a change in the number busy slows or speeds the items already running. A device whose
 * contention changed is re-timed once all events at that instant are handled (a finish and the
 * next start at the same time cost one re-time).
 */
export class DeviceFluid {
  private readonly dirty: number[] = [];

  constructor(
    readonly devices: SimDevice[],
    private readonly events: EventQueue,
  ) {}

  /** Brings a device's work done up to `now` at the contention it ran with. */
  advance(d: SimDevice, now: number): void {
    const elapsed = now - d.lastUpdate;
    if (elapsed > 0 && d.busy > 0) {
      const rate = d.speed / factor(d.contention, d.busy);
      for (const w of d.workers) if (w.item >= 0) w.remaining = Math.max(0, w.remaining - elapsed * rate);
    }
    d.lastUpdate = now;
  }

  /** Marks device `index` for re-timing at the end of this instant. */
  touch(d: SimDevice, index: number): void {
    if (!d.dirty) {
      d.dirty = true;
      this.dirty.push(index);
    }
  }

  /** Re-times every busy worker's completion on the devices touched at this instant. */
  retimeTouched(now: number): void {
    while (this.dirty.length) this.retime(this.dirty.pop() as number, now);
  }

  /** Frees a worker (its item done or withdrawn): its pending completion goes. */
  release(d: SimDevice, index: number, w: SimWorker, now: number): void {
    this.advance(d, now);
    this.events.remove(w.ev);
    w.item = -1;
    w.batch = -1;
    d.busy--;
    this.touch(d, index);
  }

  private retime(index: number, now: number): void {
    const d = this.devices[index] as SimDevice;
    d.dirty = false;
    const rate = d.speed / factor(d.contention, d.busy);
    for (let wi = 0; wi < d.workers.length; wi++) {
      const w = d.workers[wi] as SimWorker;
      if (w.item < 0) continue;
      this.events.move(w.ev, now + w.remaining / rate);
    }
  }
}

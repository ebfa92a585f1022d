/**
 * The pacer's measurement self-check, said once per change: a device whose completion rate while
 * saturated kept disagreeing with its feed-forward capacity (workers ÷ busy time per item) gets a
 * `device.measurement` event naming it, the two rates and the likely cause, and a line on stderr;
 * the pacer then plans with the observed rate.
 */
import type { PacerState, ReadonlySnapshot } from '../core/index.js';
import type { ServiceDevice } from './device-runners.js';
import type { ServerLog } from './log.js';

/** The `device.measurement` event, without its time. */
export type MeasurementEvent = {
  type: 'device.measurement';
  device: string;
  estimatedPerSec: number | null;
  observedPerSec: number | null;
  trusted: 'estimate' | 'observed';
  reason: string;
};

type DeviceCheck = NonNullable<PacerState['devices']>[number];

/** The self-check of one server's pacer: remembers what it last said of each device. */
export class MeasurementCheck {
  /** Per device, what the pacer last planned with. */
  private readonly trusted: ('estimate' | 'observed')[] = [];

  constructor(
    private readonly devices: readonly ServiceDevice[],
    private readonly say: (e: MeasurementEvent) => void,
    private readonly log: ServerLog,
    /** The steps running long now (see slowSteps, from 10 s): a cause of a device slower than its busy time. */
    private readonly slow: () => readonly SlowStep[] = () => [],
  ) {}

  /** Looks at the pacer's state: each device whose trust changed is said (a first `estimate` is not news). */
  check(st: PacerState): void {
    st.devices?.forEach((d, i) => {
      if (this.trusted[i] === d.trusted) return;
      const first = this.trusted[i] === undefined;
      this.trusted[i] = d.trusted;
      if (!(first && d.trusted === 'estimate')) this.tell(d, i);
    });
  }

  private tell(d: DeviceCheck, i: number): void {
    const name = this.devices[i]?.name ?? String(i);
    const ratio = d.observedRatio ?? 1;
    const observedPerSec = d.estimatedPerSec === null ? null : d.estimatedPerSec * ratio;
    const line = `device ${name}: ${d.trusted === 'observed' ? 'the pacer now plans with the observed rate' : 'the pacer plans with the busy time again'}: ${this.cause(d, i)}`;
    this.log(`stoker serve: ${line}`);
    this.say({ type: 'device.measurement', device: name, estimatedPerSec: d.estimatedPerSec, observedPerSec, trusted: d.trusted, reason: line });
  }

  /** Why the observed rate and the busy time disagree (or that they agree again). */
  private cause(d: DeviceCheck, i: number): string {
    const ratio = d.observedRatio ?? 1;
    if (d.trusted === 'estimate') return 'the observed rate agrees with the busy time again';
    if (ratio < 1) {
      const hung = this.slow().filter((x) => x.device === i);
      const held = hung.length === 0 ? '' : `a step that does not end holds ${hung.length === 1 ? 'a worker' : `${hung.length} workers`} (${hung.map((x) => `worker ${x.worker}: job ${x.job} partition ${x.partition}, ${x.ageS.toFixed(0)} s`).join('; ')}: set engine.deviceTimeoutS to end such a step) — or `;
      return `it completes ${(1 / ratio).toFixed(2)}× slower than its ${this.devices[i]?.config.workers ?? '?'} workers' busy time says: ${held}the workers are not really concurrent (one GPU behind a lock?), or the busy time leaves out a wait (a lock, a queue) — report the time each item occupied its worker, or declare fewer workers`;
    }
    return `it completes ${ratio.toFixed(2)}× faster than its busy time says: the busy time counts more than the item occupied (a wait before it started?), or more workers run than declared`;
  }
}

/** A device step's age, in the device's measured time per item, past which slowSteps speaks (and a minute at least). */
const SLOW_STEPS = 20;

/** A step on a device worker that has run long: its device, worker, job, partition and age (s). */
export interface SlowStep {
  device: number;
  worker: number;
  job: string;
  partition: number;
  ageS: number;
  /** Its age in the device's measured time per item. */
  times: number;
}

/**
 * The steps that have run on their device workers SLOW_STEPS × the device's measured time per
 * item, and at least `minMs` (a minute: what is said of them; a cause of a slow device is looked
 * for sooner, the self-check judging in seconds) (a device timeout unset: a step that never ends holds its worker for
 * good — a fleet trial's held one for minutes, nothing said, and the self-check then read the
 * device as two workers behind a lock). `perItemMs[d]`: a worker's measured time per item on
 * device d (NaN: unknown, then a minute alone). Batches are left out (their size sets their time).
 */
export function slowSteps(workers: readonly (readonly { item: { jobId: string; partition: number } | null; since?: number }[])[], now: number, perItemMs: readonly number[], minMs = 60_000): SlowStep[] {
  const out: SlowStep[] = [];
  workers.forEach((ws, device) => {
    const per = perItemMs[device] ?? NaN;
    ws.forEach((w, worker) => {
      if (!w.item || w.since === undefined) return;
      const age = now - w.since;
      // (An unknown time per item, NaN: the age alone.)
      if (age <= minMs || age <= SLOW_STEPS * per) return;
      out.push({ device, worker, job: w.item.jobId, partition: w.item.partition, ageS: age / 1000, times: per > 0 ? age / per : NaN });
    });
  });
  return out;
}

/** The mean age of the preparations in flight, in measured latencies, past which slowPreparations speaks (and a minute at least). */
const SLOW_PREPARATIONS = 10;

/**
 * With no preparation timeout, a prepare that never settles holds its slot, its memory and a place
 * under the pacer's preparation limit for good (a fault trial: 29 partitions queued behind one,
 * the devices idle, nothing said). What to say once the preparations in flight are on average
 * SLOW_PREPARATIONS × the measured latency old, and at least a minute (undefined: nothing). The
 * mean, from the engine's counters: a hung one among many is said later, by their number.
 */
export function slowPreparations(c: Pick<ReadonlySnapshot, 'preparing' | 'preparingStartMsTotal'>, now: number, latencyMs: number): string | undefined {
  if (!(c.preparing > 0 && latencyMs > 0)) return undefined;
  const age = now - c.preparingStartMsTotal / c.preparing;
  if (!(age > Math.max(60_000, SLOW_PREPARATIONS * latencyMs))) return undefined;
  const n = c.preparing;
  return `the ${n} preparation${n === 1 ? '' : 's'} in flight ${n === 1 ? 'has' : 'have'} run ${(age / 1000).toFixed(0)} s on average, ${(age / latencyMs).toFixed(0)} × the measured latency (${(latencyMs / 1000).toFixed(1)} s): one that never ends holds its slot, its memory and its place under the preparation limit for good — set engine.prepareTimeoutS (none is set)`;
}

import { numberOption, type Pacer, type PacerMode, type PacerOptions, type PacerSnapshot, type PacerState } from '../pacer.js';

/**
 * Options of the `stoker` pacer (beyond {@link PacerOptions}). The defaults are the ones the
 * built-in scenarios were tuned on (`stoker bench`); each has one job.
 *
 * Estimates
 * - `serviceSmoothing` — weight of each device completion in the busy-time-per-item estimate
 *   (after n completions an old value keeps (1 − w)^n of its weight). @default 0.3
 * - `slowerSmoothing` — the same weight for a sample slower than the estimate: a slower device
 *   must shrink the inventory at once. @default 0.5
 * - `starvedWeight` — relative weight of a faster-than-estimated sample taken while the device had
 *   idle workers: under contention an item runs faster on a starved device, so such a sample
 *   overstates the saturated rate. @default 0.05
 * - `latencySmoothing` — weight of each preparation completion in the latency estimate. @default 0.03
 * - `occupancyTauMs` — time constant of the smoothed device occupancy. @default 5000
 * - `waitingTauMs` — time constant of the smoothed waiting queue (feedback input). @default 10000
 *
 * Control
 * - `fillFraction` — the inventory gap closes with time constant fillFraction × latency. @default 0.25
 * - `safetyZ` — the inventory target uses the latency estimate plus safetyZ standard errors of it
 *   (σ ÷ √samples): safety stock against an estimate made from few samples. @default 2
 * - `catchUp` — the dispatch rate never exceeds max(λ, what the devices drain + catchUp × λ): an
 *   empty pipeline fills at the service rate (a faster fill only piles the surplus up one latency
 *   later), a running one closes a gap at up to catchUp × λ more than it drains. @default 0.2
 * - `headStart` — an emptied pipeline may take headStart × σ(latency) × λ items at up to 4λ
 *   first: the quickest preparations then cover the devices while slow ones still run. @default 3
 * - `integralFraction` — the waiting feedback integrates with time constant integralFraction ×
 *   latency, and only after the inventory target has held within 10 % for `settleLatencies`
 *   latencies (transients pass through the waiting queue one dead time later). @default 4
 * - `settleLatencies` — see integralFraction. @default 2
 * - `burst` — most dispatches back to back after a pause (token bucket size). @default 2
 * - `bootstrapItems` — items sent before anything is measured (no prior). @default workers + targetWaiting
 * - `bootstrapSpacingMs` — they go in groups of one item per worker, so the devices can show
 *   their contended speed, groups this far apart. @default 1000
 */
export interface StokerPacerOptions extends PacerOptions {
  serviceSmoothing?: number;
  slowerSmoothing?: number;
  headStart?: number;
  starvedWeight?: number;
  latencySmoothing?: number;
  occupancyTauMs?: number;
  waitingTauMs?: number;
  fillFraction?: number;
  integralFraction?: number;
  catchUp?: number;
  safetyZ?: number;
  settleLatencies?: number;
  burst?: number;
  bootstrapItems?: number;
  bootstrapSpacingMs?: number;
}

interface DeviceEstimate {
  completions: number;
  busyMs: number;
  /** Smoothed device time per item, ms; NaN until measured. */
  serviceMs: number;
  /** Smoothed fraction of this device's workers that are busy. */
  occupancy: number;
  lastBusy: number;
  lastWorkers: number;
}

/**
 * Stoker's default pacer (DESIGN §3): inventory control with a measured feed-forward.
 *
 * - Service rate λ = Σ_d workers_d / busy-ms-per-item_d, from the busy-time accumulators.
 * - Inventory J = preparing + waiting + on-device. By Little's law the pipeline needs
 *   J* = λ·L + workers + target items (L: preparation latency, plus a safety margin for its
 *   estimation error and a slow integral that trims the mean waiting queue to target).
 * - Dispatch rate u = λ + (J* − J)/T, capped at max(λ, drain + catchUp·λ). J counts the items
 *   in preparation, so the controller sees its own dispatches at once: the 20–60 s of dead time
 *   that made the field engine's queue-only controller overshoot does not exist for it.
 * - u drives a token bucket (credit grows at u, capped at `burst`): an absolute schedule that
 *   events may shift but never re-arm.
 */
export function createStokerPacer(options: StokerPacerOptions = {}): Pacer {
  const target = numberOption(options, 'targetWaiting', 4);
  const prior = numberOption(options, 'priorServiceMs', NaN);
  const serviceW = numberOption(options, 'serviceSmoothing', 0.3);
  const starvedWeight = numberOption(options, 'starvedWeight', 0.05);
  const slowerWeight = numberOption(options, 'slowerSmoothing', 0.5);
  const headStart = numberOption(options, 'headStart', 3);
  const latencyW = numberOption(options, 'latencySmoothing', 0.03);
  const occTau = numberOption(options, 'occupancyTauMs', 5_000, 1);
  const waitTau = numberOption(options, 'waitingTauMs', 10_000, 1);
  const fillFraction = numberOption(options, 'fillFraction', 0.25, 0.01);
  const integralFraction = numberOption(options, 'integralFraction', 4, 0.01);
  const settleLatencies = numberOption(options, 'settleLatencies', 2);
  const safetyZ = numberOption(options, 'safetyZ', 2);
  const catchUp = numberOption(options, 'catchUp', 0.2);
  const burst = numberOption(options, 'burst', 2, 1);
  const bootstrapItems = options['bootstrapItems'] === undefined ? undefined : numberOption(options, 'bootstrapItems', 0, 1);
  const bootstrapSpacing = numberOption(options, 'bootstrapSpacingMs', 1000);

  let devices: DeviceEstimate[] = [];
  let last = NaN;
  let prepCompletions = 0;
  let prepLatencyTotal = 0;
  let prepLatencySq = 0;
  /** Smoothed second moment of preparation latency, ms². */
  let latencySq = 0;
  /** Smoothed preparation latency, ms; 0 until measured. */
  let latency = 0;
  let waitingAvg = target;
  let integral = 0;
  let credit = 1;
  let rate = 0; // dispatch rate u, items/ms
  let maxRate = 0;
  let inventoryTarget = 0;
  let busySince = NaN; // first dispatch of the current busy period
  let sentInBootstrap = 0;
  let lastBootstrapAt = -Infinity;
  let settledSince = NaN; // since when the inventory target has stayed within 10 % of settledTarget
  let settledTarget = NaN;
  let mode: PacerMode = 'bootstrap';

  /** Whether any service time is known (measured or prior). */
  let hasEstimate = prior > 0;
  const measured = () => hasEstimate;

  // Derived from the estimates, refreshed when they change.
  let lambda = 0; // λ, items/ms
  let draining = 0; // λ weighted by device occupancy, items/ms
  let spread = 0; // σ of preparation latency, ms
  let margin = 0; // safety margin on the latency, ms

  /** λ: sum of per-device rates; a device not measured yet borrows the mean service time of the others. */
  function estimateRates(s: PacerSnapshot): void {
    let known = 0;
    let knownMs = 0;
    for (const d of devices) {
      if (d.serviceMs > 0) {
        known++;
        knownMs += d.serviceMs;
      }
    }
    const fallbackMs = known > 0 ? knownMs / known : prior;
    lambda = 0;
    draining = 0;
    for (let i = 0; i < devices.length; i++) {
      const d = devices[i] as DeviceEstimate;
      const ms = d.serviceMs > 0 ? d.serviceMs : fallbackMs;
      const workers = (s.devices[i] as PacerSnapshot['devices'][number]).workers;
      if (ms > 0 && workers > 0) {
        lambda += workers / ms;
        draining += (workers / ms) * d.occupancy;
      }
    }
  }

  /** Safety stock for the error of the latency estimate: z standard errors of its mean. */
  function estimateSpread(): void {
    spread = Math.sqrt(Math.max(0, latencySq - latency * latency));
    const samples = Math.min(prepCompletions, 2 / latencyW - 1);
    margin = samples > 0 ? (safetyZ * spread) / Math.sqrt(samples) : 0;
  }

  /** The dispatch rate u for the current inventory. */
  function recompute(s: PacerSnapshot): void {
    if (!(lambda > 0)) {
      rate = 0;
      return;
    }
    // Preparation latency: measured, else (with a prior service time) the age of the current busy period.
    const lat = latency > 0 ? latency : Number.isFinite(busySince) ? s.now - busySince : 0;
    const inventory = s.preparing + s.waiting + s.onDevice;
    inventoryTarget = lambda * (lat + margin) + s.workers + target + integral;
    const u = lambda + (inventoryTarget - inventory) / Math.max(1000, fillFraction * lat);
    maxRate = inventory < headStart * spread * lambda ? 4 * lambda : Math.max(lambda, draining + catchUp * lambda);
    rate = Math.min(Math.max(u, 0), maxRate);
  }

  return {
    name: 'stoker',
    observe(s) {
      const dt = Number.isNaN(last) ? 0 : s.now - last;
      last = s.now;
      if (devices.length !== s.devices.length) {
        devices = s.devices.map((d) => ({ completions: d.completions, busyMs: d.busyMs, serviceMs: prior, occupancy: 0, lastBusy: d.busy, lastWorkers: d.workers }));
      }
      // Service time per item from the accumulator deltas, weighted per completion.
      const occKeep = dt > 0 ? Math.exp(-dt / occTau) : 1;
      for (let i = 0; i < devices.length; i++) {
        const d = devices[i] as DeviceEstimate;
        const c = s.devices[i] as PacerSnapshot['devices'][number];
        const dc = c.completions - d.completions;
        if (dc > 0) {
          const sample = (c.busyMs - d.busyMs) / dc;
          // Under contention an item runs faster when its device is short of work, so a fast
          // sample taken while workers sit idle overstates the saturated rate: weigh it less.
          // A slower device is believed at once (memory first); a faster one only when it is full.
          const slower = sample > d.serviceMs;
          const starvedFast = !slower && c.busy < c.workers;
          const w = (1 - Math.pow(1 - (slower ? slowerWeight : serviceW), dc)) * (starvedFast ? starvedWeight : 1);
          d.serviceMs = d.serviceMs > 0 ? d.serviceMs + w * (sample - d.serviceMs) : sample;
          hasEstimate = true;
          d.completions = c.completions;
          d.busyMs = c.busyMs;
        }
        // Occupancy held since the last event, smoothed in time.
        if (dt > 0) {
          const held = d.lastWorkers > 0 ? d.lastBusy / d.lastWorkers : 0;
          d.occupancy += (1 - occKeep) * (held - d.occupancy);
        }
        d.lastBusy = c.busy;
        d.lastWorkers = c.workers;
      }
      // Preparation latency (mean and second moment) from its accumulators.
      const dp = s.prepareCompletions - prepCompletions;
      if (dp > 0) {
        const sample = (s.prepareLatencyMsTotal - prepLatencyTotal) / dp;
        const sampleSq = (s.prepareLatencySqTotal - prepLatencySq) / dp;
        // Weighted per sample (an idle hour says nothing new about latency), never less than a
        // running mean's while few samples exist.
        const w = Math.max(1 - Math.pow(1 - latencyW, dp), dp / s.prepareCompletions);
        // While a pipeline fills (two latencies from the start of a busy period) the quick
        // preparations finish first: a shorter sample then is survivorship, not news.
        const filling = s.now - busySince < 2 * latency;
        if (!(filling && sample < latency)) {
          latency += w * (sample - latency);
          latencySq += w * (sampleSq - latencySq);
        }
        prepCompletions = s.prepareCompletions;
        prepLatencyTotal = s.prepareLatencyMsTotal;
        prepLatencySq = s.prepareLatencySqTotal;
        estimateSpread();
      }
      estimateRates(s);
      const work = s.backlog > 0;
      // Nothing measured and nothing in flight (the bootstrap items were withdrawn): bootstrap again.
      if (!measured() && s.preparing + s.waiting + s.onDevice === 0) sentInBootstrap = 0;
      const saturated = s.budgetBlocked || s.preparing >= s.maxPreparing;
      // Waiting feedback: slow, and only while the loop is really in control (anti-windup).
      if (dt > 0) waitingAvg += (1 - Math.exp(-dt / waitTau)) * (s.waiting - waitingAvg);
      const inControl = work && !saturated && measured() && latency > 0 && rate > 0 && rate < maxRate;
      if (!inControl || !(Math.abs(inventoryTarget - settledTarget) <= 0.1 * settledTarget)) {
        settledSince = s.now;
        settledTarget = inventoryTarget;
      } else if (dt > 0 && s.now - settledSince >= settleLatencies * latency) {
        // Transients (start-up, speed changes) pass through the waiting queue after a dead time;
        // integrating them would wind the trim up, so only a settled loop's bias is integrated.
        const error = Math.min(Math.max(target - waitingAvg, -target), target);
        integral += (error * dt) / (integralFraction * latency);
        integral = Math.min(Math.max(integral, -target), target + s.workers);
      }
      if (work) {
        if (Number.isNaN(busySince)) busySince = s.now;
        credit = Math.min(burst, credit + rate * dt);
      } else {
        // Idle: restart cleanly when work comes back (one item at once, no stored-up burst).
        busySince = s.preparing + s.waiting + s.onDevice > 0 ? busySince : NaN;
        credit = 1;
      }
      recompute(s);
      mode = !work ? 'idle' : saturated ? 'blocked' : !measured() ? 'bootstrap' : rate > 0 ? 'steady' : 'hold';
    },
    nextDispatchAt(s) {
      if (!measured()) {
        const n = bootstrapItems ?? s.workers + target;
        if (sentInBootstrap >= n) return Infinity;
        return sentInBootstrap % Math.max(1, s.workers) === 0 ? Math.max(s.now, lastBootstrapAt + bootstrapSpacing) : s.now;
      }
      if (credit >= 1) return s.now;
      return rate > 0 ? s.now + (1 - credit) / rate : Infinity;
    },
    onDispatch(s) {
      if (!measured()) {
        if (sentInBootstrap % Math.max(1, s.workers) === 0) lastBootstrapAt = s.now;
        sentInBootstrap++;
        return;
      }
      credit -= 1;
      recompute(s);
    },
    state(): PacerState {
      return {
        mode,
        ratePerSec: lambda > 0 ? lambda * 1000 : null,
        intervalMs: rate > 0 ? 1 / rate : null,
        terms: { latencyMs: latency, inventoryTarget, integral, waitingAvg, credit },
      };
    },
  };
}

import type { PacerOptions } from '../pacer.js';

/**
 * Options of the `stoker` pacer (beyond {@link PacerOptions}); their defaults are
 * {@link STOKER_DEFAULTS}. Each has one job.
 *
 * Estimates
 * - `serviceSmoothing` — weight of each device completion in the busy-time-per-item estimate
 *   (after n completions an old value keeps (1 − w)^n of its weight) when the sample is news:
 *   beyond the device's measured noise (3 σ of its samples; on a noisy device, two samples in a
 *   row on the same side). A sample within the noise weighs less, so that the estimate's own noise
 *   moves the inventory by at most half the waiting target: min(w, 2 / (n + 1)) with
 *   n = (2 · λ_device · latency · cv / targetWaiting)².
 * - `slowerSmoothing` — the weight of news that the device is slower: it must shrink the
 *   inventory at once. (On a skewed device, cv > 0.5, there is no news, and no
 *   starved discount: see SKEWED_CV2.)
 * - `starvedWeight` — relative weight of a sample taken while the device had idle workers (once
 *   it has been seen saturated), unless it is news of a slower device: under contention an item
 *   runs faster on a starved device, so such a sample overstates the saturated rate.
 * - `latencySmoothing` — weight of each preparation completion in the latency estimate.
 * - `occupancyTauMs` — time constant of the smoothed device occupancy, and of the devices'
 *   observed completion rate (see catchUp).
 * - `waitingTauMs` — time constant of the smoothed waiting queue (feedback input).
 *
 * Control
 * - `fillFraction` — the inventory gap closes with time constant fillFraction × latency.
 * - `safetyZ` — the inventory target uses the latency estimate plus safetyZ standard errors of it
 *   (σ ÷ √samples): safety stock against an estimate made from few samples.
 * - `catchUp` — the dispatch rate never exceeds max(λ, what the devices drain + catchUp × λ): an
 *   empty pipeline fills at the service rate (a faster fill only piles the surplus up one latency
 *   later), a running one closes a gap at up to catchUp × λ more than it drains. What they drain:
 *   λ by their occupancy; with a skewed device, the completions they were seen to make (smoothed
 *   over occupancyTauMs) where more — its run of short items takes more than λ, and what it took
 *   is replaced at once — and that, not λ, is the feed-forward with a skewed device.
 * - `headStart` — an emptied pipeline may take headStart × σ(latency) × λ items at up to 4λ
 *   first: the quickest preparations then cover the devices while slow ones still run. Not with
 *   a skewed device: its λ, read from a few samples, may be several times the truth, and 4λ of it
 *   over-fills the pipeline for minutes (its stock fills under the catchUp cap instead).
 * - `integralFraction` — the waiting feedback integrates with time constant integralFraction ×
 *   latency, and only after the inventory target has held within `settleBand` for `settleLatencies`
 *   latencies (transients pass through the waiting queue one dead time later).
 * - `settleLatencies` — see integralFraction.
 * - `settleBand` — how far (a fraction) the inventory target may move and still count as the same
 *   regime; a speed change moves it far more, measurement noise less.
 * - `burst` — most dispatches back to back after a pause (token bucket size).
 * - `bootstrapItems` — items sent before anything is measured (no prior).
 * - `bootstrapSpacingMs` — they go in groups of one item per worker, so the devices can show
 *   their contended speed, groups this far apart.
 * - `targetBatches` — on devices that batch, the waiting target in batches (× the largest
 *   batch) instead of `targetWaiting` items.
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
  settleBand?: number;
  burst?: number;
  bootstrapItems?: number;
  bootstrapSpacingMs?: number;
  targetBatches?: number;
}

/**
 * The stoker pacer's defaults, one place (the reasons are in {@link StokerPacerOptions}; the
 * built-in scenarios were tuned on them: `stoker bench`). `bootstrapItems` defaults to
 * workers + targetWaiting, known only from the snapshot.
 */
export const STOKER_DEFAULTS = {
  targetWaiting: 4,
  serviceSmoothing: 0.3,
  slowerSmoothing: 0.5,
  starvedWeight: 0.05,
  headStart: 3,
  latencySmoothing: 0.03,
  occupancyTauMs: 5_000,
  waitingTauMs: 10_000,
  fillFraction: 0.25,
  integralFraction: 4,
  settleLatencies: 2,
  settleBand: 0.25,
  safetyZ: 2,
  catchUp: 0.2,
  burst: 2,
  bootstrapSpacingMs: 1000,
} as const;

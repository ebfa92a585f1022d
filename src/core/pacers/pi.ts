import { numberOption, type Pacer, type PacerMode, type PacerOptions, type PacerState } from '../pacer.js';

/** What a PI pacer measures as its base interval. */
export type PiInput =
  /** Time between device completions (idle gaps included). */
  | 'interval'
  /** Time between device completions, sampled only when items were waiting at the completion. */
  | 'gated-interval';

/** The PI constants of `classic` and the PI baselines. */
export interface PiOptions extends PacerOptions {
  /** Proportional gain on the waiting queue's error. @default 0.5 */
  kp?: number;
  /** Integral gain, per second of error. @default 0.001 */
  ki?: number;
}

export interface PiPacerConfig {
  name: string;
  input: PiInput;
}

const clamp = (v: number, lo: number, hi: number) => Math.min(Math.max(v, lo), hi);

/**
 * The textbook alternative to the field engine's pacer (`classic`): the same PI constants on the
 * waiting queue (per-event EMAs: α 0.15 on waiting, 0.2 on the input; kp 0.5, ki 0.001 per second
 * of error, integral clamped to [−20, 100], rate multiplier to [0.3, 3], interval to [50 ms, 60 s];
 * bootstrap spacing 3 s, after the pipeline runs dry max(2 s, the input)), fed by the time between
 * device completions instead of the devices' busy time, on an absolute schedule.
 */
export function createPiPacer(config: PiPacerConfig, options: PiOptions = {}): Pacer {
  const target = numberOption(options, 'targetWaiting', 4);
  const kp = numberOption(options, 'kp', 0.5);
  const ki = numberOption(options, 'ki', 0.001);
  let waitingEma = NaN;
  let inputEma = NaN;
  let integral = 0;
  let lastObserve = NaN;
  let lastDispatch = -Infinity;
  let lastCompletion = -Infinity;
  let completions = 0;
  let multiplier = 1;
  let interval = 3000;
  let mode: PacerMode = 'bootstrap';

  return {
    name: config.name,
    observe(s) {
      const dtSec = Number.isNaN(lastObserve) ? 0 : (s.now - lastObserve) / 1000;
      lastObserve = s.now;
      waitingEma = Number.isNaN(waitingEma) ? s.waiting : 0.15 * s.waiting + 0.85 * waitingEma;
      const dc = s.deviceCompletions - completions;
      if (dc > 0) {
        let sample = NaN;
        if (Number.isFinite(lastCompletion) && (config.input === 'interval' || s.waiting > 0)) sample = (s.now - lastCompletion) / dc;
        if (sample >= 0) inputEma = Number.isNaN(inputEma) ? sample : 0.2 * sample + 0.8 * inputEma;
        completions = s.deviceCompletions;
        lastCompletion = s.now;
      }
      const error = target - waitingEma;
      integral = clamp(integral + error * dtSec, -20, 100);
      multiplier = clamp(1 + kp * error + ki * integral, 0.3, 3);
      const dry = s.preparing + s.waiting + s.onDevice === 0;
      if (Number.isNaN(inputEma)) {
        mode = 'bootstrap';
        interval = 3000;
      } else if (dry) {
        mode = 'bootstrap';
        interval = Math.max(2000, inputEma);
      } else {
        mode = s.backlog > 0 ? 'steady' : 'idle';
        interval = clamp(inputEma / multiplier, 50, 60_000);
      }
    },
    nextDispatchAt() {
      return lastDispatch + interval;
    },
    onDispatch(s) {
      lastDispatch = s.now;
    },
    state(): PacerState {
      return {
        mode,
        // Both inputs are a device-wide interval per item, so their inverse is the believed rate.
        ratePerSec: inputEma > 0 ? 1000 / inputEma : null,
        intervalMs: interval,
        terms: { waitingEma: Number.isNaN(waitingEma) ? 0 : waitingEma, integral, multiplier },
      };
    },
  };
}

import { numberOption, type Pacer, type PacerMode, type PacerOptions, type PacerState } from '../pacer.js';

function simpleState(mode: PacerMode, terms: Record<string, number> = {}): PacerState {
  return { mode, ratePerSec: null, intervalMs: null, terms };
}

/** No pacing: dispatch whenever the budget (and the preparation cap) allows. */
export function createUnpacedPacer(): Pacer {
  return {
    name: 'unpaced',
    observe() {},
    nextDispatchAt: (s) => s.now,
    onDispatch() {},
    state: () => simpleState('steady'),
  };
}

/** A fixed window: at most `window` items in flight (preparing + waiting + on device). @default window 32 */
export function createWindowPacer(options: PacerOptions & { window?: number } = {}): Pacer {
  const window = numberOption(options, 'window', 32, 1);
  return {
    name: 'window',
    observe() {},
    nextDispatchAt: (s) => (s.preparing + s.waiting + s.onDevice < window ? s.now : Infinity),
    onDispatch() {},
    state: () => simpleState('steady', { window }),
  };
}

/**
 * The burst controller: on each device completion, dispatch `target − waiting` items at once;
 * when the pipeline is empty, dispatch `target` (at least one).
 */
export function createBurstPacer(options: PacerOptions = {}): Pacer {
  const target = numberOption(options, 'targetWaiting', 4);
  let allowance = 0;
  let completions = 0;
  return {
    name: 'burst',
    observe(s) {
      if (s.deviceCompletions > completions) {
        completions = s.deviceCompletions;
        allowance = Math.max(0, target - s.waiting);
      }
      // An empty pipeline gets at least one item (a target below 1 would otherwise never dispatch).
      if (s.preparing + s.waiting + s.onDevice === 0) allowance = Math.max(allowance, target, 1);
    },
    nextDispatchAt: (s) => (allowance >= 1 ? s.now : Infinity),
    onDispatch() {
      allowance--;
    },
    state: () => simpleState('steady', { allowance }),
  };
}

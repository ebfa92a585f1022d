import { StokerError } from '../errors.js';
import { suggest } from '../suggest.js';
import type { Pacer, PacerFactory, PacerOptions } from '../pacer.js';
import { createBurstPacer, createUnpacedPacer, createWindowPacer } from './baselines.js';
import { createClassicPacer } from './classic.js';
import { createGradientPacer, createVegasPacer } from './limits.js';
import { createPiPacer } from './pi.js';
import { createStokerPacer } from './stoker.js';

export { createStokerPacer, STOKER_DEFAULTS, type StokerPacerOptions } from './stoker.js';
export { createPiPacer, type PiInput, type PiPacerConfig } from './pi.js';
export { createClassicPacer } from './classic.js';
export { createGradientPacer, createVegasPacer } from './limits.js';
export { createBurstPacer, createUnpacedPacer, createWindowPacer } from './baselines.js';

/** The built-in pacers by name, with one line each. */
export const PACERS: Record<string, { describe: string; create: PacerFactory }> = {
  stoker: { describe: 'default: measured service rate + inventory (Little’s law) control + slow waiting feedback', create: createStokerPacer },
  classic: { describe: 'the field engine’s dispatch pacer (curio cuzk DispatchPacer), step for step: PI on the waiting queue, busy-time feed-forward', create: createClassicPacer },
  unpaced: { describe: 'no pacing: the memory budget alone limits dispatch', create: () => createUnpacedPacer() },
  window: { describe: 'a fixed maximum of items in flight (option window, default 32)', create: createWindowPacer },
  burst: { describe: 'on each completion dispatch target − waiting items at once', create: createBurstPacer },
  'interval-pi': { describe: 'PI fed by the time between completions (idle gaps included)', create: (o) => createPiPacer({ name: 'interval-pi', input: 'interval' }, o) },
  gradient: { describe: 'Netflix concurrency-limits Gradient2 on the in-flight window (RTT: dispatch to device completion)', create: createGradientPacer },
  vegas: { describe: 'Netflix concurrency-limits Vegas on the in-flight window (RTT: dispatch to device completion)', create: createVegasPacer },
  'gated-interval': { describe: 'interval-pi, sampling only when items were waiting at a completion', create: (o) => createPiPacer({ name: 'gated-interval', input: 'gated-interval' }, o) },
};

export const PACER_NAMES = Object.keys(PACERS);

/** Creates a built-in pacer by name; the error lists the names. */
export function createPacer(name: string, options: PacerOptions = {}): Pacer {
  const entry = Object.hasOwn(PACERS, name) ? PACERS[name] : undefined;
  if (!entry) throw new StokerError('E_UNKNOWN_PACER', `unknown pacer ${JSON.stringify(name)}: use one of ${PACER_NAMES.join(', ')} (a pacer of your own: pass the Pacer object, or its module's path to \`stoker simulate --pacer\` or \`stoker bench --pacers\`)`);
  return entry.create(options);
}

/** The option names a pacer reads when it is created with `options` (a built-in pacer reads each of its options then). */
export function optionsRead(create: PacerFactory, options: Readonly<PacerOptions> = {}): Set<string> {
  const read = new Set<string>();
  const note = (k: string | symbol) => typeof k === 'string' && read.add(k);
  create(
    new Proxy({ ...options }, {
      get: (t, k, r) => (note(k), Reflect.get(t, k, r)),
      has: (t, k) => (note(k), Reflect.has(t, k)),
      getOwnPropertyDescriptor: (t, k) => (note(k), Reflect.getOwnPropertyDescriptor(t, k)),
    }),
  );
  return read;
}

/**
 * The options in `options` that none of the pacers `creates` makes reads when it is created: most
 * likely misspelt, since an option no pacer reads changes nothing. `targetWaiting` is left out
 * (the engine's, given to every pacer).
 */
export function unreadOptions(creates: readonly PacerFactory[], options: Readonly<PacerOptions>): string[] {
  const read = new Set<string>(['targetWaiting']);
  for (const create of creates) for (const k of optionsRead(create, options)) read.add(k);
  return Object.keys(options).filter((k) => !read.has(k));
}

/**
 * The options in `options` the built-in pacer `pacer` does not read (see unreadOptions), each with
 * what to say of it, listing the options it has (without targetWaiting where the caller sets it
 * elsewhere, `setElsewhere`); none for a pacer that is not built in. Throws what the pacer throws
 * for a value it refuses.
 */
export function unknownPacerOptions(pacer: string, options: Readonly<PacerOptions>, setElsewhere = false): { option: string; message: string }[] {
  const create = Object.hasOwn(PACERS, pacer) ? (PACERS[pacer] as (typeof PACERS)[string]).create : undefined;
  if (!create || Object.keys(options).length === 0) return [];
  const unread = unreadOptions([create], options);
  if (unread.length === 0) return [];
  // (targetWaiting, the engine's, is every pacer's: listed first — unless the caller sets it elsewhere, as the server does from engine.targetWaiting.)
  const own = [...optionsRead(create)].filter((k) => k !== 'targetWaiting');
  const known = setElsewhere ? own : ['targetWaiting', ...own];
  return unread.map((option) => {
    const near = suggest(option, known);
    return { option, message: `the ${pacer} pacer has no option ${option}${near ? ` — did you mean ${near}?` : ''} (${known.length > 0 ? `its options are ${known.join(', ')}` : 'it has no options'}): check the spelling, or remove it` };
  });
}

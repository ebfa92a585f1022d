import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { PACER_NAMES, PACERS, StokerError, type Pacer, type PacerFactory, type PacerMode, type PacerOptions, type ReadonlySnapshot, type PacerState } from '../core/index.js';

/** A user pacer module that cannot be used; the message names the file and what to change. */
export class PacerModuleError extends Error {
  override readonly name = 'PacerModuleError';
  readonly code = 'E_PACER_MODULE';
}

const REQUIRED = ['observe', 'nextDispatchAt', 'onDispatch'] as const;
const OPTIONAL = ['workerLimit', 'observeAgainAt'] as const;
const OPTIONAL_SHAPE: Record<(typeof OPTIONAL)[number], string> = { workerLimit: 'workerLimit(device) → the most workers to run at once', observeAgainAt: 'observeAgainAt(snapshot) → time in ms' };

const SHAPE = 'export default function createPacer(options) { return { name, observe(snapshot) {}, nextDispatchAt(snapshot) { return snapshot.now; }, onDispatch(snapshot) {}, state() {…} }; }';

/** True when a pacer spec names a file rather than a built-in pacer. */
export function isPacerPath(spec: string): boolean {
  return spec.includes('/') || spec.includes(path.sep) || /\.m?js$/.test(spec);
}

/**
 * Resolves a pacer spec: a built-in name (see PACERS), or a path (relative to `cwd`, or absolute)
 * to an ES module whose default export is `createPacer(options) => Pacer`. The factory of a
 * module checks each pacer it creates: missing methods throw a PacerModuleError naming them;
 * a missing `state()` is filled in, a missing `name` defaults to the file's basename.
 */
export async function resolvePacer(spec: string, cwd = process.cwd()): Promise<PacerFactory> {
  if (!isPacerPath(spec)) {
    if (Object.hasOwn(PACERS, spec)) return (PACERS[spec] as (typeof PACERS)[string]).create;
    throw unknownPacer(spec);
  }
  const file = path.resolve(cwd, spec);
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch {
    throw new PacerModuleError(`pacer module ${spec} not found (looked for ${file}); give a path to an ES module, or one of the built-in pacers: ${PACER_NAMES.join(', ')}`);
  }
  if (!stat.isFile()) throw new PacerModuleError(`pacer module ${file} is not a file; give the path of the .js/.mjs module itself`);
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
  } catch (e) {
    throw new PacerModuleError(`could not load pacer module ${file}: ${e instanceof Error ? e.message : String(e)}`);
  }
  const create = mod.default;
  if (typeof create !== 'function') {
    const what = create === undefined ? 'has no default export' : `has a default export of type ${create === null ? 'null' : typeof create}`;
    throw new PacerModuleError(`pacer module ${file} ${what}; it must export its factory as the default export:\n  ${SHAPE}`);
  }
  const fallbackName = path.basename(file).replace(/\.[cm]?js$/, '');
  return (options: PacerOptions) => checkPacer((create as (o: PacerOptions) => unknown)(options), file, fallbackName);
}

/** Where a module path is accepted (simulate, bench), the error says so; the core's lists the names alone. */
function unknownPacer(spec: string): Error {
  return new StokerError('E_UNKNOWN_PACER', `unknown pacer ${JSON.stringify(spec)}: use one of ${PACER_NAMES.join(', ')}, or a path to a module whose default export is createPacer(options)`);
}

function steadyState(): PacerState {
  return { mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} };
}

/** Checks what a user factory returned and fills in `name` and `state` where missing. */
function checkPacer(value: unknown, file: string, fallbackName: string): Pacer {
  if (typeof value !== 'object' || value === null) {
    throw new PacerModuleError(`the default export of ${file} returned ${value === null ? 'null' : typeof value}, not a pacer object; return { observe, nextDispatchAt, onDispatch } (state and name are optional)`);
  }
  const p = value as Partial<Record<string, unknown>>;
  const missing = REQUIRED.filter((m) => typeof p[m] !== 'function');
  if (missing.length) {
    throw new PacerModuleError(`the pacer created by ${file} is missing the method${missing.length > 1 ? 's' : ''} ${missing.join(', ')}; a pacer needs observe(snapshot), nextDispatchAt(snapshot) → time in ms, and onDispatch(snapshot)`);
  }
  if (p.state !== undefined && typeof p.state !== 'function') throw new PacerModuleError(`the pacer created by ${file} has a state that is not a function; make state() return { mode, ratePerSec, intervalMs, terms } or leave it out`);
  for (const m of OPTIONAL) {
    if (p[m] !== undefined && typeof p[m] !== 'function') throw new PacerModuleError(`the pacer created by ${file} has a ${m} that is not a function; make it a method (${OPTIONAL_SHAPE[m]}) or leave it out`);
  }
  const name = typeof p.name === 'string' && p.name !== '' ? p.name : fallbackName;
  const pacer = value as Pacer;
  /** One of the module's methods called: what it throws names the module and the method (a failure of the run, not a module that does not fit). */
  const call = <T>(method: string, f: () => T): T => {
    try {
      return f();
    } catch (e) {
      if (e instanceof PacerModuleError) throw e;
      throw new Error(`the pacer created by ${file} threw in ${method}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
  };
  /** A time it returned: a number, Infinity for none (NaN or another type once stalled a run silently). */
  const time = (method: string, v: unknown): number => {
    if (typeof v !== 'number' || Number.isNaN(v)) throw new PacerModuleError(`the pacer created by ${file}: ${method}(snapshot) must return a time in ms (a number; Infinity for none) (got ${typeof v === 'number' || v === undefined ? String(v) : (JSON.stringify(v) ?? String(v))})`);
    return v;
  };
  // Delegate rather than copy, so that class instances keep their prototype methods and `this`;
  // what state() returns is checked on every call (the measures and the dashboard read it).
  const out: Pacer = {
    name,
    observe: (s: ReadonlySnapshot) => call('observe', () => pacer.observe(s)),
    nextDispatchAt: (s: ReadonlySnapshot) => time('nextDispatchAt', call('nextDispatchAt', () => pacer.nextDispatchAt(s))),
    onDispatch: (s: ReadonlySnapshot) => call('onDispatch', () => pacer.onDispatch(s)),
    state: typeof p.state === 'function' ? () => checkState(call('state', () => pacer.state()), file) : steadyState,
  };
  // The optional methods only where the module has them (the engine asks for them only then).
  if (typeof p.workerLimit === 'function') {
    out.workerLimit = (device: number) => {
      const v = call('workerLimit', () => pacer.workerLimit?.(device)) ?? Infinity;
      if (typeof v !== 'number' || !(v >= 0)) throw new PacerModuleError(`the pacer created by ${file}: workerLimit(device) must return the most workers to run at once (a number ≥ 0; Infinity for all) (got ${JSON.stringify(v) ?? String(v)})`);
      return v;
    };
  }
  if (typeof p.observeAgainAt === 'function') out.observeAgainAt = (s: ReadonlySnapshot) => time('observeAgainAt', call('observeAgainAt', () => pacer.observeAgainAt?.(s)) ?? Infinity);
  // Its shape checked once, at creation (a status request may ask before anything is observed), not
  // only when something reads it: a simulation may never read it, and a wrong shape would pass.
  out.state();
  return out;
}

const MODES: readonly PacerMode[] = ['bootstrap', 'steady', 'idle', 'blocked', 'hold'];

/** A user pacer's state(), checked field by field (a wrong shape once made the settle measure read 0). */
function checkState(st: unknown, file: string): PacerState {
  const bad = (field: string, want: string, got: unknown) =>
    new PacerModuleError(`the pacer created by ${file}: state().${field} must be ${want} (got ${got === undefined ? 'undefined' : JSON.stringify(got)}); state() returns { mode, ratePerSec, intervalMs, terms }`);
  if (typeof st !== 'object' || st === null) throw bad('', 'an object', st);
  const o = st as Record<string, unknown>;
  if (!MODES.includes(o['mode'] as PacerMode)) throw bad('mode', `one of ${MODES.join(', ')}`, o['mode']);
  for (const f of ['ratePerSec', 'intervalMs']) {
    const v = o[f];
    if (v !== null && !(typeof v === 'number' && v >= 0 && !Number.isNaN(v))) throw bad(f, 'a number ≥ 0 or null', v);
  }
  const terms = o['terms'];
  if (typeof terms !== 'object' || terms === null || Array.isArray(terms)) throw bad('terms', 'an object of numbers', terms);
  for (const [k, v] of Object.entries(terms)) if (typeof v !== 'number') throw bad(`terms.${k}`, 'a number', v);
  const rate = (v: unknown) => v === null || (typeof v === 'number' && v >= 0);
  for (const [list, check] of [
    ['devices', (d: Record<string, unknown>, f: string) => (!rate(d['estimatedPerSec']) ? bad(`${f}.estimatedPerSec`, 'a number ≥ 0 or null', d['estimatedPerSec']) : !rate(d['observedRatio']) ? bad(`${f}.observedRatio`, 'a number ≥ 0 or null', d['observedRatio']) : d['trusted'] !== 'estimate' && d['trusted'] !== 'observed' ? bad(`${f}.trusted`, '"estimate" or "observed"', d['trusted']) : d['workerLimit'] !== undefined && d['workerLimit'] !== null && !(typeof d['workerLimit'] === 'number' && d['workerLimit'] >= 1) ? bad(`${f}.workerLimit`, 'a number ≥ 1 or null', d['workerLimit']) : null)],
    ['kinds', (k: Record<string, unknown>, f: string) => (typeof k['name'] !== 'string' ? bad(`${f}.name`, 'a kind name', k['name']) : !rate(k['estimatedPerSec']) ? bad(`${f}.estimatedPerSec`, 'a number ≥ 0 or null', k['estimatedPerSec']) : null)],
  ] as const) {
    const v = o[list];
    if (v === undefined) continue;
    if (!Array.isArray(v)) throw bad(list, 'an array (or absent)', v);
    v.forEach((e: unknown, i) => {
      const err = typeof e === 'object' && e !== null ? check(e as Record<string, unknown>, `${list}[${i}]`) : bad(`${list}[${i}]`, 'an object', e);
      if (err) throw err;
    });
  }
  return st as PacerState;
}

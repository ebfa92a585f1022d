/** The checks of a pacer of the user's (a module loaded by path, or an object given to the Runtime): see {@link checkedPacer}. */
import type { Pacer, PacerMode, PacerState, ReadonlySnapshot } from './pacer.js';
import { shown } from './checks.js';
import { suggest } from './suggest.js';

const REQUIRED = ['observe', 'nextDispatchAt', 'onDispatch'] as const;
const OPTIONAL = ['workerLimit', 'observeAgainAt'] as const;
const OPTIONAL_SHAPE: Record<(typeof OPTIONAL)[number], string> = { workerLimit: 'workerLimit(device) → the most workers to run at once', observeAgainAt: 'observeAgainAt(snapshot) → time in ms' };

function steadyState(): PacerState {
  return { mode: 'steady', ratePerSec: null, intervalMs: null, terms: {} };
}

/** Where a pacer came from, for the errors that name it, and the error to throw where it does not fit. */
export interface PacerOrigin {
  /** Completes "the pacer …", e.g. "created by /path/my-pacer.mjs". */
  origin: string;
  /** Begins "… null, not a pacer object", e.g. "the default export of /path/my-pacer.mjs returned". */
  made: string;
  /** Its name where it has none. */
  fallbackName: string;
  /** The error for a pacer that does not fit the contract. */
  error: (message: string) => Error;
}

/**
 * A pacer of the user's, checked (the Pacer contract: src/core/pacer.ts): missing methods are an
 * error naming them, a missing `state()` is filled in and a missing `name` defaulted; the pacer
 * returned delegates to it, checking what it answers — a time that is not a number, a negative
 * worker limit, a `state()` of the wrong shape are errors naming the method or field (a NaN from
 * nextDispatchAt once stalled a run silently), a snapshot field it reads that is not there is an
 * error naming it, and what a method throws names the pacer and the method.
 */
export function checkedPacer(value: unknown, o: PacerOrigin): Pacer {
  if (typeof value !== 'object' || value === null) {
    throw o.error(`${o.made} ${value === null ? 'null' : typeof value}, not a pacer object; return { observe, nextDispatchAt, onDispatch } (state and name are optional)`);
  }
  const p = value as Partial<Record<string, unknown>>;
  const missing = REQUIRED.filter((m) => typeof p[m] !== 'function');
  if (missing.length) {
    throw o.error(`the pacer ${o.origin} is missing the method${missing.length > 1 ? 's' : ''} ${missing.join(', ')}; a pacer needs observe(snapshot), nextDispatchAt(snapshot) → time in ms, and onDispatch(snapshot)`);
  }
  if (p.state !== undefined && typeof p.state !== 'function') throw o.error(`the pacer ${o.origin} has a state that is not a function; make state() return { mode, ratePerSec, intervalMs, terms } or leave it out`);
  for (const m of OPTIONAL) {
    if (p[m] !== undefined && typeof p[m] !== 'function') throw o.error(`the pacer ${o.origin} has a ${m} that is not a function; make it a method (${OPTIONAL_SHAPE[m]}) or leave it out`);
  }
  const name = typeof p.name === 'string' && p.name !== '' ? p.name : o.fallbackName;
  const pacer = value as Pacer;
  /** Errors of the checks themselves (thrown from inside a method: a snapshot field that is not there), passed on as they are. */
  const own = new WeakSet<Error>();
  /** One of the pacer's methods called: what it throws names the pacer and the method (a failure of the run, not a pacer that does not fit). */
  const call = <T>(method: string, f: () => T): T => {
    let v: T;
    try {
      v = f();
    } catch (e) {
      if (e instanceof Error && own.has(e)) throw e;
      // (structuredClone and postMessage cannot copy the checked view of the snapshot it was given.)
      const hint = e instanceof Error && e.name === 'DataCloneError' ? ' — the snapshot is a checked view of the engine’s counters, its devices and kinds too: copy it with JSON.parse(JSON.stringify(snapshot))' : '';
      // (The pacer's own fault, as a wrong answer is: the same kind of error, named the same way.)
      const err = o.error(`the pacer ${o.origin} threw in ${method}: ${e instanceof Error ? e.message : String(e)}${hint}`);
      err.cause = e;
      throw err;
    }
    // An async method: the engine reads no promise (an observe awaited nothing: the pacer saw no
    // event; one that threw after its await ended the process with an unhandled rejection).
    if (typeof (v as { then?: unknown } | null)?.then === 'function') {
      (v as unknown as Promise<unknown>).then(undefined, () => undefined);
      throw o.error(`the pacer ${o.origin}: ${method} returned a Promise (an async method): a pacer's methods are synchronous — compute and return at once, with no await`);
    }
    return v;
  };
  // The snapshot as the pacer sees it: a field it does not have is an error naming it (a misspelt
  // one read undefined, its arithmetic NaN, and the run stalled without a word), and it is read-only
  // through and through: a write is an error naming the field (one wrote snapshot.waiting = 0: the
  // engine's own counter, which then read 0 for the measures, or crashed the engine on a device's).
  const views = new WeakMap<object, object>();
  /** Throws an error of the checks themselves (passed on as it is by `call`). */
  const fail = (message: string): never => {
    const e = o.error(message);
    own.add(e);
    throw e;
  };
  const refuse = (path: string): never => fail(`the pacer ${o.origin} wrote ${path}: the snapshot is the engine's own counters, read-only; keep what you compute in the pacer (to change a copy: JSON.parse(JSON.stringify(snapshot)))`);
  const readOnly = <T extends object>(target: T, path: string, top: boolean): T => {
    let v = views.get(target) as T | undefined;
    if (!v) {
      v = new Proxy(target, {
        get: (t, k, r) => {
          if (top && typeof k === 'string' && !(k in t) && k !== 'toJSON' && k !== 'then') {
            const near = suggest(k, Object.keys(t));
            fail(`the pacer ${o.origin} read snapshot.${k}, which a snapshot does not have${near ? ` (did you mean ${near}?)` : ''}: its fields are ${Object.keys(t).join(', ')}`);
          }
          const value = Reflect.get(t, k, r) as unknown;
          if (typeof value !== 'object' || value === null || typeof k !== 'string') return value;
          return readOnly(value, Array.isArray(t) ? `${path}[${k}]` : `${path}.${k}`, false);
        },
        set: (t, k) => refuse(Array.isArray(t) ? `${path}[${String(k)}]` : `${path}.${String(k)}`),
        defineProperty: (t, k) => refuse(Array.isArray(t) ? `${path}[${String(k)}]` : `${path}.${String(k)}`),
        deleteProperty: (t, k) => refuse(`${path}.${String(k)} (a delete)`),
      });
      views.set(target, v);
    }
    return v;
  };
  const view = (s: ReadonlySnapshot): ReadonlySnapshot => readOnly(s, 'snapshot', true);
  /** A time it returned: a number, Infinity for none (NaN or another type once stalled a run silently). */
  const time = (method: string, v: unknown): number => {
    if (typeof v !== 'number' || Number.isNaN(v)) throw o.error(`the pacer ${o.origin}: ${method}(snapshot) must return a time in ms (a number; Infinity for none) (got ${shown(v)})`);
    return v;
  };
  // Delegate rather than copy, so that class instances keep their prototype methods and `this`;
  // what state() returns is checked on every call (the measures and the dashboard read it).
  const out: Pacer = {
    name,
    observe: (s: ReadonlySnapshot) => call('observe', () => pacer.observe(view(s))),
    nextDispatchAt: (s: ReadonlySnapshot) => time('nextDispatchAt', call('nextDispatchAt', () => pacer.nextDispatchAt(view(s)))),
    onDispatch: (s: ReadonlySnapshot) => call('onDispatch', () => pacer.onDispatch(view(s))),
    state: typeof p.state === 'function' ? () => checkState(call('state', () => pacer.state()), o) : steadyState,
  };
  // The optional methods only where the module has them (the engine asks for them only then).
  if (typeof p.workerLimit === 'function') {
    out.workerLimit = (device: number) => {
      const v = call('workerLimit', () => pacer.workerLimit?.(device)) ?? Infinity;
      if (typeof v !== 'number' || !(v >= 0)) throw o.error(`the pacer ${o.origin}: workerLimit(device) must return the most workers to run at once (a number ≥ 0; Infinity for all) (got ${shown(v)})`);
      return v;
    };
  }
  if (typeof p.observeAgainAt === 'function') out.observeAgainAt = (s: ReadonlySnapshot) => time('observeAgainAt', call('observeAgainAt', () => pacer.observeAgainAt?.(view(s))));
  // Its shape checked once, at creation (a status request may ask before anything is observed), not
  // only when something reads it: a simulation may never read it, and a wrong shape would pass.
  out.state();
  return out;
}

const MODES: readonly PacerMode[] = ['bootstrap', 'steady', 'idle', 'blocked', 'hold'];

/** A user pacer's state(), checked field by field (a wrong shape once made the settle measure read 0). */
function checkState(st: unknown, origin: PacerOrigin): PacerState {
  const bad = (field: string, want: string, got: unknown) =>
    origin.error(`the pacer ${origin.origin}: state()${field === '' ? '' : `.${field}`} must be ${want} (got ${shown(got)}); state() returns { mode, ratePerSec, intervalMs, terms }`);
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

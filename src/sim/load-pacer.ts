import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { checkedPacer, PACER_NAMES, PACERS, StokerError, type PacerFactory, type PacerOptions } from '../core/index.js';
import { suggest } from '../core/suggest.js';

/** A user pacer module that cannot be used; the message names the file and what to change. */
export class PacerModuleError extends Error {
  override readonly name = 'PacerModuleError';
  readonly code = 'E_PACER_MODULE';
}

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
    throw new PacerModuleError(`could not load pacer module ${file}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  const create = mod.default;
  if (typeof create !== 'function') {
    const what = create === undefined ? 'has no default export' : `has a default export of type ${create === null ? 'null' : typeof create}`;
    throw new PacerModuleError(`pacer module ${file} ${what}; it must export its factory as the default export:\n  ${SHAPE}`);
  }
  const fallbackName = path.basename(file).replace(/\.[cm]?js$/, '');
  return (options: PacerOptions) => {
    let made: unknown;
    try {
      made = (create as (o: PacerOptions) => unknown)(options);
    } catch (e) {
      throw new PacerModuleError(`the default export of ${file} threw: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (made instanceof Promise) throw new PacerModuleError(`the default export of ${file} returned a Promise: make createPacer(options) return the pacer object itself (not an async function)`);
    return checkedPacer(made, { origin: `created by ${file}`, made: `the default export of ${file} returned`, fallbackName, error: (message: string) => new PacerModuleError(message) });
  };
}

/** Where a module path is accepted (simulate, bench), the error says so; the core's lists the names alone. */
function unknownPacer(spec: string): Error {
  const near = suggest(spec, PACER_NAMES);
  return new StokerError('E_UNKNOWN_PACER', `unknown pacer ${JSON.stringify(spec)}${near ? ` (did you mean ${JSON.stringify(near)}?)` : ''}: use one of ${PACER_NAMES.join(', ')}, or a path to a module whose default export is createPacer(options)`);
}


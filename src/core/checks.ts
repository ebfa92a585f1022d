/** What the core's errors share: how a value is shown, and the refusal of a field nobody reads. */
import { StokerError, type StokerErrorCode } from './errors.js';
import { suggest } from './suggest.js';

/** A value as an error shows it: numbers as they are (JSON would show NaN as null), strings quoted, the rest as JSON. */
export function shown(v: unknown): string {
  return typeof v === 'number' || v === undefined || typeof v === 'function' || typeof v === 'symbol' || typeof v === 'bigint' ? String(v) : (JSON.stringify(v) ?? String(v));
}

/**
 * Refuses a field of `value` that `known` does not list (a misspelt `budgetbytes` or
 * `memory.prepareByte` was read as absent: no limit, silently): the error names it as
 * `${prefix}${key}`, the nearest known name, and the known ones, fields of `owner`.
 */
export function checkKeys(value: object, known: readonly string[], prefix: string, owner: string, code: StokerErrorCode): void {
  for (const key in value) {
    if (!Object.hasOwn(value, key) || known.includes(key)) continue;
    const near = suggest(key, known);
    throw new StokerError(code, `${prefix}${key} is not a field of ${owner}${near ? ` (did you mean ${near}?)` : ''}: its fields are ${known.join(', ')}`);
  }
}

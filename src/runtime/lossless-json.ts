import type { BatchItemReply } from './threads/protocol.js';

/**
 * JSON that reads back as the value it was made from, or an error saying where it would not: what
 * crosses into the journal (outputs, results) and into a process or HTTP device (prepared values).
 */

/**
 * A JSON.stringify replacer that refuses what JSON would change without a word: bytes inside a
 * JSON value (an object of indices), a Map or a Set (an empty object), a number that is not
 * finite (null). Stored or sent so, a value would read back as other data than the stage returned. Its
 * errors name the value's whole path (`outer.list[1]`): each object it passes on is noted with
 * its own, as JSON.stringify visits holders before what they hold.
 */
function refuseLossy(named: boolean): (this: unknown, key: string, value: unknown) => unknown {
  const paths = new Map<unknown, string>();
  return function (this: unknown, key: string, value: unknown): unknown {
    const holder = named ? paths.get(this) : undefined;
    // (The first call is the top itself, under the key "" of a wrapper object. Not named: the key alone.)
    const path = !named ? key : holder === undefined ? '' : Array.isArray(this) ? `${holder}[${key}]` : /^[A-Za-z_$][\w$]*$/.test(key) ? (holder ? `${holder}.${key}` : key) : `${holder}[${JSON.stringify(key).replace(/^"|"$/g, "'")}]`;
    const at = path === '' ? 'the top' : JSON.stringify(path);
    if (value instanceof ArrayBuffer || ArrayBuffer.isView(value) || (value !== null && typeof value === 'object' && (value as { type?: unknown }).type === 'Buffer' && Array.isArray((value as { data?: unknown }).data))) {
      throw new Error(`it holds bytes at ${at}: bytes may only be the whole value — return them alone, or encode them (base64) inside the JSON`);
    }
    if (value instanceof Map || value instanceof Set) {
      throw new Error(`it holds a ${value instanceof Map ? 'Map' : 'Set'} at ${at}, which JSON would store as {}: return ${value instanceof Map ? 'an object (Object.fromEntries(map))' : 'an array ([...set])'} instead`);
    }
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new Error(`it holds ${value} at ${at}, which JSON would store as null: return null, or a string, where a number is missing`);
    }
    if (named && value !== null && typeof value === 'object') paths.set(value, path);
    return value;
  };
}

/**
 * JSON text of `value` (`undefined` → `null`), refusing what JSON would change without a word (see
 * refuseLossy); the error names the value's path ("it holds bytes at \"ids\": …"). A value JSON
 * cannot hold at all (a BigInt, a cycle) throws JSON.stringify's own error.
 */
export function losslessJson(value: unknown): string {
  try {
    return JSON.stringify(value, refuseLossy(false)) ?? 'null';
  } catch (first) {
    // Again, noting each value's path (3 × slower: only where the quick pass refused it): it throws, naming it.
    JSON.stringify(value, refuseLossy(true));
    throw first;
  }
}

/**
 * Checks a prepared value bound for a process or HTTP device as JSON (bytes go as they are):
 * one that JSON would change or cannot hold fails its item without retries (prepared again, it
 * would be the same), saying where. Returns its JSON text.
 */
export function preparedJson(value: unknown): string {
  try {
    return losslessJson(value ?? null);
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    const said = why.startsWith('it holds') ? why : `it is not JSON (${why}): return plain JSON data, or bytes as the whole value`;
    throw Object.assign(new Error(`the prepared value (what prepare() returned) cannot be sent to the device as JSON: ${said}`), { retry: false as const });
  }
}

/**
 * A batch step over the items whose prepared value can be sent (`check` throws for one that cannot):
 * each of the others gets its own `{ error }` in its place, the rest run as one step; none: no step.
 */
export async function sendable<C>(calls: C[], check: (call: C) => void, run: (calls: C[]) => Promise<{ results: BatchItemReply[]; busyMs: number }>): Promise<{ results: BatchItemReply[]; busyMs: number }> {
  const refused = new Map<number, BatchItemReply>();
  calls.forEach((c, i) => {
    try {
      check(c);
    } catch (e) {
      refused.set(i, { error: (e as Error).message, retry: false });
    }
  });
  if (refused.size === 0) return run(calls);
  const ok = calls.filter((_, i) => !refused.has(i));
  const r = ok.length ? await run(ok) : { results: [], busyMs: 0 };
  let next = 0;
  return { results: calls.map((_, i) => refused.get(i) ?? (r.results[next++] as BatchItemReply)), busyMs: r.busyMs };
}

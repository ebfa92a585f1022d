import type { BatchItemReply } from './threads/protocol.js';

/**
 * JSON that reads back as the value it was made from, or an error saying where it would not: what
 * crosses into the journal (outputs, results) and into a process or HTTP device (prepared values).
 */

/** What JSON would change without a word, found in a value: it, and the keys down to it (innermost first). */
interface Found {
  what: unknown;
  path: (string | number)[];
}

/** Deeper than this, a value is left to JSON.stringify (a cycle: it throws). */
const MAX_DEPTH = 1000;

/**
 * Walks a value as JSON.stringify would (own enumerable keys, toJSON) for what it would change
 * without a word: bytes inside a JSON value (an object of indices), a Map, a Set or an Error (an
 * empty object: a `run` that returned its Error read as done with `{}`; a Promise not awaited, in a
 * `finish` result, read as done with `{}` too), a number that is not finite (null), a function or a symbol as the value or in an array
 * (null: a finish that returned a function was stored as null, the job done; as a property it is
 * left out, as undefined is) — and a BigInt (JSON.stringify throws, saying not where). A plain walk, the path kept only on the way back
 * from a find: a JSON.stringify replacer did this 30–40 × slower than the stringify itself.
 */
function walk(v: unknown, depth: number): Found | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? undefined : { what: v, path: [] };
  if (typeof v === 'bigint' || typeof v === 'function' || typeof v === 'symbol') return { what: v, path: [] };
  if (v === null || typeof v !== 'object' || depth > MAX_DEPTH) return undefined;
  if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer || v instanceof Map || v instanceof Set || v instanceof Error || v instanceof Promise) return { what: v, path: [] };
  const toJSON = (v as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return walk((toJSON as () => unknown).call(v), depth + 1);
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const f = walk(v[i], depth + 1);
      if (f) return (f.path.push(i), f);
    }
    return undefined;
  }
  for (const k of Object.keys(v)) {
    const x = (v as Record<string, unknown>)[k];
    // (A method or symbol as a property is left out, as undefined is: objects with methods are common.)
    if (typeof x === 'function' || typeof x === 'symbol') continue;
    const f = walk(x, depth + 1);
    if (f) return (f.path.push(k), f);
  }
  return undefined;
}

/** The message for a find: where (`outer.list[1]`, `the top`), what JSON would make of it, the fix. */
function said(f: Found): string {
  let path = '';
  for (let i = f.path.length - 1; i >= 0; i--) {
    const k = f.path[i] as string | number;
    path += typeof k === 'number' ? `[${k}]` : /^[A-Za-z_$][\w$]*$/.test(k) ? (path ? `.${k}` : k) : `[${JSON.stringify(k).replace(/^"|"$/g, "'")}]`;
  }
  const at = path === '' ? 'the top' : JSON.stringify(path);
  const v = f.what;
  if (v instanceof Map || v instanceof Set) return `it holds a ${v instanceof Map ? 'Map' : 'Set'} at ${at}, which JSON would store as {}: return ${v instanceof Map ? 'an object (Object.fromEntries(map))' : 'an array ([...set])'} instead`;
  if (typeof v === 'number') return `it holds ${v} at ${at}, which JSON would store as null: return null, or a string, where a number is missing`;
  if (v instanceof Promise) return `it holds a Promise at ${at}, which JSON would store as {}: await it (and return what it resolves to)`;
  if (v instanceof Error) return `it holds an Error at ${at} (${JSON.stringify(v.message)}), which JSON would store as {}: throw it to fail the step, or return its message`;
  if (typeof v === 'bigint') return `it holds a BigInt at ${at}, which JSON cannot hold: return a number, or a string (String(n))`;
  if (typeof v === 'function' || typeof v === 'symbol') return `it holds a ${typeof v} at ${at}, which JSON would store as null: return data`;
  return `it holds bytes at ${at}: bytes may only be the whole value — return them alone, or encode them (base64) inside the JSON`;
}

/**
 * JSON text of `value` (`undefined` → `null`); what JSON would change without a word throws an
 * Error naming where ("it holds bytes at \"ids\": …"), and a value JSON cannot hold at all (a
 * BigInt, a cycle) JSON.stringify's own error.
 */
export function losslessJson(value: unknown): string {
  const f = walk(value, 0);
  if (f) throw new Error(said(f));
  return JSON.stringify(value) ?? 'null';
}

/**
 * Checks an output a process device's helper (`stoker/worker`) sends as JSON: one that JSON would
 * change fails its item without retries (its step would return the same again), saying where.
 */
export function checkOutput(value: unknown): void {
  const f = walk(value, 0);
  if (f) throw Object.assign(new Error(`the output cannot be sent as JSON: ${said(f)}`), { retry: false as const });
}

/**
 * Checks a prepared value bound for a process or HTTP device as JSON (bytes go as they are):
 * one that JSON would change or cannot hold fails its item without retries (prepared again, it
 * would be the same), saying where. Returns its JSON text.
 */
export function preparedJson(value: unknown): string {
  checkPrepared(value);
  try {
    return JSON.stringify(value ?? null);
  } catch (e) {
    throw refusedPrepared(`it is not JSON (${e instanceof Error ? e.message : String(e)}): return plain JSON data, or bytes as the whole value`);
  }
}

/** preparedJson's check alone, for a value that is stringified with others (a process device's frame). */
export function checkPrepared(value: unknown): void {
  const f = walk(value, 0);
  if (f) throw refusedPrepared(said(f));
}

function refusedPrepared(why: string): Error {
  return Object.assign(new Error(`the prepared value (what prepare() returned) cannot be sent to the device as JSON: ${why}`), { retry: false as const });
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

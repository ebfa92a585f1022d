/**
 * JSON for request bodies, stricter than JSON.parse: a key that appears twice in one object (JSON
 * says nothing; JSON.parse keeps the last, so two readers of one body can disagree) and the key
 * `__proto__` (it sets an object's prototype in code that merges objects) are refused, each with
 * the path of the key, and so are nesting deeper than MAX_DEPTH, a number out of a double's range
 * and an integer a double would round (JSON.parse changes it); NaN and Infinity, not JSON, are named where
 * they are. Returns the value, or throws a StrictJsonError saying what to send instead.
 */
import { roundsInteger, walkJson } from '../runtime/json-walk.js';
import { clip } from './errors.js';

export class StrictJsonError extends Error {
  override readonly name = 'StrictJsonError';
}

/** The most objects and arrays nested in one another in a body. */
export const MAX_DEPTH = 256;

/** A path or a key as a message quotes it: at most 100 characters (a 500 kB key came back whole in the answer). */
const at = (path: string) => clip(path === '' ? '$' : `$${path}`, 100);
const quoted = (key: string) => clip(JSON.stringify(key), 100);

export function parseStrictJson(text: string): unknown {
  if (text.trim() === '') throw new StrictJsonError('the body is empty: send a JSON object, e.g. {"kind":"KIND","partitions":1} with KIND one of GET /v1/kinds');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    // (Python's json.dumps writes NaN and Infinity by default: say where, not only "Unexpected token 'N'".)
    const bad = nonFinite(text);
    if (bad) throw new StrictJsonError(`${bad.token} at ${at(bad.path)} is not JSON (JSON has no NaN or Infinity): send null or a finite number there — in Python, json.dumps(body, allow_nan=False) finds these before sending`);
    throw new StrictJsonError(`the body is not valid JSON (${(e as Error).message}): send a JSON object, e.g. {"kind":"KIND","partitions":1} with KIND one of GET /v1/kinds`);
  }
  // The text is valid JSON: walk its tokens for the keys of each object and its numbers.
  walkJson(text, {
    key(top, key, path) {
      if (key === '__proto__') throw new StrictJsonError(`the key "__proto__" at ${at(path())} is not allowed: remove it`);
      if (top.keys.has(key)) throw new StrictJsonError(`the key ${quoted(key)} appears twice at ${at(path())}: give each key once`);
      top.keys.add(key);
    },
    open(depth, path) {
      // (Deeper, code that walks the value recursively — validation, hashing — runs out of stack: a 500.)
      if (depth >= MAX_DEPTH) throw new StrictJsonError(`the body nests deeper than ${MAX_DEPTH} levels of objects and arrays at ${at(path())}: send flatter JSON`);
    },
    number(literal, path) {
      const problem = numberProblem(literal);
      if (problem) throw new StrictJsonError(problem.replace('$PATH', at(path())));
    },
  });
  return value;
}

/**
 * What is wrong with a JSON number literal, with `$PATH` where its path goes, or undefined.
 * Out of a double's range: JSON.parse reads 1e400 as Infinity, which no JSON can hold (the body was
 * accepted and its journaling failed, a 500). An integer no double holds exactly: JSON.parse rounds it
 * (an int64 id 2⁶⁴ + 1 was kept as 18446744073709552000, and a body with 2⁶⁴ + 2 was the same job);
 * one it holds (2⁶⁰), or the digits JSON.stringify writes for a double (1e20, 2.105416613021971e16
 * as 21054166130219710), reads as written.
 */
function numberProblem(literal: string): string | undefined {
  const n = Number(literal);
  if (!Number.isFinite(n)) return `the number ${clip(literal, 40)} at $PATH is out of range: a JSON number here is at most ±1.7976931348623157e308`;
  if (roundsInteger(literal, n)) {
    return `the integer ${clip(literal, 40)} at $PATH has more digits than a number here holds exactly (a double: whole numbers to 2^53 = 9007199254740992 and some beyond; it would read ${String(n)}): send it as a string`;
  }
  return undefined;
}

/**
 * The first NaN, Infinity or -Infinity outside strings in text that is not JSON, and where. Walked
 * only where the text holds one of those words where a value goes, and no deeper than MAX_DEPTH
 * (walked whole, 1 MB of "[" took 630 ms and 100 MB to say it was not JSON).
 */
function nonFinite(text: string): { token: string; path: string } | undefined {
  if (!/(?:^|[[,:\s])-?(?:NaN|Infinity)(?![\w])/.test(text)) return undefined;
  let found: { token: string; path: string } | undefined;
  walkJson(
    text,
    {
      other(i, path) {
        const token = /^-?(NaN|Infinity)/.exec(text.slice(i, i + 9))?.[0];
        if (token) found = { token, path: path() };
        return token !== undefined;
      },
    },
    MAX_DEPTH,
  );
  return found;
}

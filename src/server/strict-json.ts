/**
 * JSON for request bodies, stricter than JSON.parse: a key that appears twice in one object (JSON
 * says nothing; JSON.parse keeps the last, so two readers of one body can disagree) and the key
 * `__proto__` (it sets an object's prototype in code that merges objects) are refused, each with
 * the path of the key, and so are nesting deeper than MAX_DEPTH and a number out of a double's range. Returns the value, or throws a StrictJsonError saying what to send instead.
 */
import { clip } from './errors.js';

export class StrictJsonError extends Error {
  override readonly name = 'StrictJsonError';
}

interface Frame {
  /** An object's keys so far; null for an array. */
  keys: Set<string> | null;
  path: string;
  /** The key whose value comes next (objects), or the index of the next element (arrays). */
  key: string;
  index: number;
}

/** The most objects and arrays nested in one another in a body. */
export const MAX_DEPTH = 256;

/** A path or a key as a message quotes it: at most 100 characters (a 500 kB key came back whole in the answer). */
const at = (path: string) => clip(path === '' ? '$' : `$${path}`, 100);
const quoted = (key: string) => clip(JSON.stringify(key), 100);
const member = (path: string, key: string) => (/^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`);

export function parseStrictJson(text: string): unknown {
  if (text.trim() === '') throw new StrictJsonError('the body is empty: send a JSON object, e.g. {"kind":"KIND","partitions":1} with KIND one of GET /v1/kinds');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new StrictJsonError(`the body is not valid JSON (${(e as Error).message}): send a JSON object, e.g. {"kind":"KIND","partitions":1} with KIND one of GET /v1/kinds`);
  }
  // The text is valid JSON: walk its tokens for the keys of each object.
  const stack: Frame[] = [];
  let expectKey = false;
  const childPath = () => {
    const top = stack.at(-1);
    if (!top) return '';
    return top.keys ? member(top.path, top.key) : `${top.path}[${top.index}]`;
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      const top = stack.at(-1);
      if (expectKey && top?.keys) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (key === '__proto__') throw new StrictJsonError(`the key "__proto__" at ${at(member(top.path, key))} is not allowed: remove it`);
        if (top.keys.has(key)) throw new StrictJsonError(`the key ${quoted(key)} appears twice at ${at(member(top.path, key))}: give each key once`);
        top.keys.add(key);
        top.key = key;
        expectKey = false;
      }
      i = j;
    } else if (c === '{' || c === '[') {
      const path = childPath();
      // (Deeper, code that walks the value recursively — validation, hashing — runs out of stack: a 500.)
      if (stack.length >= MAX_DEPTH) throw new StrictJsonError(`the body nests deeper than ${MAX_DEPTH} levels of objects and arrays at ${at(path)}: send flatter JSON`);
      stack.push({ keys: c === '{' ? new Set() : null, path, key: '', index: 0 });
      expectKey = c === '{';
    } else if (c === '}' || c === ']') {
      stack.pop();
    } else if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) {
      let j = i + 1;
      while (j < text.length && /[0-9eE+\-.]/.test(text[j] as string)) j++;
      // (JSON.parse reads 1e400 as Infinity, which no JSON can hold: the body was accepted and its
      // journaling failed, a 500.)
      if (!Number.isFinite(Number(text.slice(i, j)))) throw new StrictJsonError(`the number ${clip(text.slice(i, j), 40)} at ${at(childPath())} is out of range: a JSON number here is at most ±1.7976931348623157e308`);
      i = j - 1;
    } else if (c === ',') {
      const top = stack.at(-1);
      if (top?.keys) expectKey = true;
      else if (top) top.index++;
    }
  }
  return value;
}

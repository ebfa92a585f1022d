/**
 * JSON text read token by token, for what JSON.parse does not say: where a key, a number or a
 * token that is not JSON is (a path like `$.input.ids[1]`). The request bodies' strict parse uses
 * it, and so do the device outputs' check for integers a double rounds. A path is built only when
 * asked for (built for every number, a body of a million numbers parsed 15–30 % slower).
 */

/** An object or an array being read. */
export interface JsonFrame {
  /** An object's keys so far; null for an array. */
  keys: Set<string> | null;
  /** The key whose value comes next (objects), or the index of the next element (arrays). */
  key: string;
  index: number;
}

/** `path.key`, or `path["key"]` for a key that is not a name. */
export const member = (path: string, key: string): string => (/^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`);

/**
 * Whether JSON.parse changes the integer written as `literal` (read as `n`): one no double holds
 * exactly (2⁶⁴ + 1 reads 18446744073709551616) — not one it holds (2⁶⁰), nor the digits
 * JSON.stringify writes for a double (1e20; 2.105416613021971e16 as 21054166130219710).
 */
export function roundsInteger(literal: string, n = Number(literal)): boolean {
  return !Number.isSafeInteger(n) && Number.isFinite(n) && /^-?\d+$/.test(literal) && String(n) !== literal && BigInt(literal) !== BigInt(n);
}

/** A rounded integer as a message shows it: `the integer N` (`of D digits` past 40), and what stoker makes of it and the fix. */
export function roundedWords(literal: string): { integer: string; rest: string } {
  return {
    integer: `the integer ${literal.length > 40 ? `of ${literal.replace('-', '').length} digits` : literal}`,
    rest: `which stoker reads rounded (as ${String(Number(literal))}: JSON numbers are doubles here, whole numbers exact to 2^53): send it as a string`,
  };
}

/** An integer token of 16 digits or more (where JSON puts a number: after [ , : or space; not in a string's text, a float's digits). */
const LONG_INTEGER = /(?:^|[[,:\s])-?\d{16,}(?=$|[\s,\]}])/;

/** Whether a parsed value holds a whole number beyond 2⁵³ − 1 (what a rounded integer reads as): a walk of the value, cheaper than of its text. */
function holdsLargeInteger(v: unknown): boolean {
  if (typeof v === 'number') return Number.isInteger(v) && !Number.isSafeInteger(v);
  if (v === null || typeof v !== 'object') return false;
  if (Array.isArray(v)) {
    for (const x of v) if (holdsLargeInteger(x)) return true;
    return false;
  }
  for (const k in v) if (holdsLargeInteger((v as Record<string, unknown>)[k])) return true;
  return false;
}

/**
 * The integers in JSON text that JSON.parse rounded, and where (`$.output.ids[1]`): a device's
 * output is JSON read by JSON.parse, and an int64 id came back rounded, the job done. `value` is
 * the text as parsed: the text is walked only where it holds such a number.
 */
export function roundedIntegers(text: string, value: unknown): { literal: string; path: string }[] {
  if (!LONG_INTEGER.test(text) || !holdsLargeInteger(value)) return [];
  const found: { literal: string; path: string }[] = [];
  walkJson(text, {
    number(literal, path) {
      if (roundsInteger(literal)) found.push({ literal, path: `$${path()}` });
    },
  });
  return found;
}

export interface JsonVisitor {
  /** A key of the object `top` (before its value); `path` gives the key's. */
  key?(top: JsonFrame & { keys: Set<string> }, key: string, path: () => string): void;
  /** An object or array opens, inside `depth` others; `path` gives where. */
  open?(depth: number, path: () => string): void;
  /** A number literal as written. */
  number?(literal: string, path: () => string): void;
  /** Any other character outside strings at `i` (text that is not JSON): true stops the walk. */
  other?(i: number, path: () => string): boolean;
}

/**
 * Walks the tokens of JSON text (of text that is not JSON too, as far as it reads like it, and no
 * deeper than `maxDepth`: past it the walk stops).
 */
export function walkJson(text: string, visit: JsonVisitor, maxDepth = Infinity): void {
  const stack: JsonFrame[] = [];
  let expectKey = false;
  /** The path of what comes next in the innermost open object or array ('' at the top). */
  const childPath = () => {
    let p = '';
    for (const f of stack) p = f.keys ? member(p, f.key) : `${p}[${f.index}]`;
    return p;
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      const top = stack.at(-1);
      if (expectKey && top?.keys) {
        let key: string;
        try {
          key = JSON.parse(text.slice(i, j + 1)) as string;
        } catch {
          return; // (only in text that is not JSON)
        }
        top.key = key;
        visit.key?.(top as JsonFrame & { keys: Set<string> }, key, childPath);
        expectKey = false;
      }
      i = j;
    } else if (c === '{' || c === '[') {
      if (stack.length >= maxDepth) return;
      visit.open?.(stack.length, childPath);
      stack.push({ keys: c === '{' ? new Set() : null, key: '', index: 0 });
      expectKey = c === '{';
    } else if (c === '}' || c === ']') {
      stack.pop();
    } else if ((c === '-' && text[i + 1] !== 'I') || (c >= '0' && c <= '9')) {
      let j = i + 1;
      while (j < text.length && /[0-9eE+\-.]/.test(text[j] as string)) j++;
      visit.number?.(text.slice(i, j), childPath);
      i = j - 1;
    } else if (c === ',') {
      const top = stack.at(-1);
      if (top?.keys) expectKey = true;
      else if (top) top.index++;
    } else if (visit.other && !/\s|:/.test(c) && visit.other(i, childPath)) return;
  }
}

/**
 * JSON text read token by token, for what JSON.parse does not say: where a key, a number or a
 * token that is not JSON is (a path like `$.input.ids[1]`). The request bodies' strict parse uses
 * it, and so do the device outputs' check for integers a double rounds.
 */

/** An object or an array being read. */
export interface JsonFrame {
  /** An object's keys so far; null for an array. */
  keys: Set<string> | null;
  path: string;
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

/** An integer of 16 digits or more, written as one (not a float's): only then are numbers looked at one by one. */
const LONG_INTEGER = /(?:^|[^\d.eE+-])-?\d{16,}(?![\d.eE])/;

/**
 * The first integer in JSON text that JSON.parse rounds, and where (`$.output.ids[1]`), or
 * undefined. A device's output is JSON read by JSON.parse: an int64 id came back rounded, the job done.
 */
export function roundedInteger(text: string): { literal: string; path: string } | undefined {
  if (!LONG_INTEGER.test(text)) return undefined;
  let found: { literal: string; path: string } | undefined;
  walkJson(text, {
    number(literal, path) {
      if (!found && roundsInteger(literal)) found = { literal, path: path === '' ? '$' : `$${path}` };
    },
  });
  return found;
}

export interface JsonVisitor {
  /** A key of the object `top` (before its value). */
  key?(top: JsonFrame & { keys: Set<string> }, key: string): void;
  /** An object or array opens at `path`, inside `depth` others. */
  open?(path: string, depth: number): void;
  /** A number literal as written. */
  number?(literal: string, path: string): void;
  /** Any other character outside strings at `i` (text that is not JSON): true stops the walk. */
  other?(i: number, path: string): boolean;
}

/** Walks the tokens of JSON text (of text that is not JSON too, as far as it reads like it). */
export function walkJson(text: string, visit: JsonVisitor): void {
  const stack: JsonFrame[] = [];
  let expectKey = false;
  const childPath = () => {
    const top = stack.at(-1);
    if (!top) return '';
    return top.keys ? member(top.path, top.key) : `${top.path}[${top.index}]`;
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
        visit.key?.(top as JsonFrame & { keys: Set<string> }, key);
        top.key = key;
        expectKey = false;
      }
      i = j;
    } else if (c === '{' || c === '[') {
      const path = childPath();
      visit.open?.(path, stack.length);
      stack.push({ keys: c === '{' ? new Set() : null, path, key: '', index: 0 });
      expectKey = c === '{';
    } else if (c === '}' || c === ']') {
      stack.pop();
    } else if ((c === '-' && text[i + 1] !== 'I') || (c >= '0' && c <= '9')) {
      let j = i + 1;
      while (j < text.length && /[0-9eE+\-.]/.test(text[j] as string)) j++;
      visit.number?.(text.slice(i, j), childPath());
      i = j - 1;
    } else if (c === ',') {
      const top = stack.at(-1);
      if (top?.keys) expectKey = true;
      else if (top) top.index++;
    } else if (visit.other && !/\s|:/.test(c) && visit.other(i, childPath())) return;
  }
}

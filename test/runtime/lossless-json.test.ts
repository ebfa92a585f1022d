import { describe, expect, it } from 'vitest';
import { checkPrepared, losslessJson } from '../../src/runtime/lossless-json.js';

describe('losslessJson: JSON that reads back as the value, or where it would not', () => {
  it('is JSON.stringify for plain data (toJSON followed, undefined as null)', () => {
    const v = { a: [1, 'x', null, { b: true }], when: new Date(0), 'odd key': -0.5 };
    expect(losslessJson(v)).toBe(JSON.stringify(v));
    expect(losslessJson(undefined)).toBe('null');
  });

  it('names the path of bytes, a Map or Set, a number that is not finite, a BigInt, a function or symbol — inside arrays, odd keys and toJSON results', () => {
    const at = (v: unknown) => (() => losslessJson(v)) as () => string;
    expect(at({ outer: { list: [1, Int32Array.of(7)] } })).toThrow('it holds bytes at "outer.list[1]": bytes may only be the whole value');
    expect(at({ 'a b': { m: new Map() } })).toThrow(`it holds a Map at "['a b'].m", which JSON would store as {}: return an object (Object.fromEntries(map)) instead`);
    expect(at([new Set([1])])).toThrow('it holds a Set at "[0]", which JSON would store as {}: return an array ([...set]) instead');
    expect(at({ score: NaN })).toThrow('it holds NaN at "score", which JSON would store as null');
    expect(at({ x: { toJSON: () => ({ y: -Infinity }) } })).toThrow('it holds -Infinity at "x.y"');
    expect(at({ n: 1n })).toThrow('it holds a BigInt at "n", which JSON cannot hold');
    // A run that returned its Error read as done with {} (a user trial).
    expect(at(new TypeError('no GPU'))).toThrow('it holds an Error at the top ("no GPU"), which JSON would store as {}: throw it to fail the step, or return its message');
    expect(at(Infinity)).toThrow('it holds Infinity at the top');
    // A finish that returned { p: Promise } was stored as { p: {} }, the job done (a user trial).
    expect(at({ p: Promise.resolve(1) })).toThrow('it holds a Promise at "p", which JSON would store as {}: await it (and return what it resolves to)');
    // Dropped without a word: a finish that returned a function was stored as null, the job done.
    expect(at(() => 1)).toThrow('it holds a function at the top, which JSON would store as null: return data');
    expect(at({ tags: [Symbol('x')] })).toThrow('it holds a symbol at "tags[0]", which JSON would store as null');
    // As a property it is left out, as undefined is (a method on a plain object).
    expect(losslessJson({ n: 1, show() {}, tag: Symbol('x') })).toBe('{"n":1}');
  });

  it('leaves a cycle to JSON.stringify, which refuses it (no endless walk)', () => {
    const o: Record<string, unknown> = {};
    o['self'] = o;
    expect(() => losslessJson(o)).toThrow(/circular/i);
  });

  it('checkPrepared: a refused prepared value fails without retries (retry: false), naming the field', () => {
    let e: unknown;
    try {
      checkPrepared({ ids: Uint8Array.of(1) });
    } catch (x) {
      e = x;
    }
    expect(e).toMatchObject({ retry: false, message: 'the prepared value (what prepare() returned) cannot be sent to the device as JSON: it holds bytes at "ids": bytes may only be the whole value — return them alone, or encode them (base64) inside the JSON' });
    expect(() => checkPrepared({ ok: [1, 2] })).not.toThrow();
  });
});

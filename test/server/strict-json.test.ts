/**
 * Request bodies: a key twice in one object and `__proto__` are refused with the key's path;
 * every other JSON parses as JSON.parse does (fast-check over arbitrary JSON, whose strings may
 * hold braces, quotes and escapes that a key scanner must not trip on).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_DEPTH, parseStrictJson, StrictJsonError } from '../../src/server/strict-json.js';
import { http, useServer } from './helpers.js';

const refused = (text: string) => {
  try {
    parseStrictJson(text);
  } catch (e) {
    expect(e).toBeInstanceOf(StrictJsonError);
    return (e as Error).message;
  }
  throw new Error(`accepted: ${text}`);
};

describe('parseStrictJson', () => {
  it('parses what JSON.parse parses when no object repeats a key', () => {
    fc.assert(
      fc.property(fc.jsonValue().filter((v) => !JSON.stringify(v).includes('"__proto__"')), (v) => {
        const text = JSON.stringify(v);
        expect(parseStrictJson(text)).toEqual(JSON.parse(text));
        expect(parseStrictJson(JSON.stringify(v, null, 2))).toEqual(JSON.parse(text));
      }),
      { seed: 20261201, numRuns: 500 },
    );
  });

  it('names a repeated key and where it is, at any depth', () => {
    expect(refused('{"kind":"sleep","partitions":1,"partitions":2}')).toBe('the key "partitions" appears twice at $.partitions: give each key once');
    expect(refused('{"input":{"a":[1,{"b":"}\\"{","b":2}]}}')).toBe('the key "b" appears twice at $.input.a[1].b: give each key once');
    expect(refused('[0, {"odd key":1, "odd key":2}]')).toBe('the key "odd key" appears twice at $[1]["odd key"]: give each key once');
    // The same key in sibling objects is fine.
    expect(parseStrictJson('[{"a":1},{"a":2}]')).toEqual([{ a: 1 }, { a: 2 }]);
    // A long key is quoted cut to 100 characters (a 500 kB key came back whole).
    const long = 'q'.repeat(500_000);
    expect(refused(`{"${long}":1,"${long}":2}`).length).toBeLessThan(300);
  });

  it('refuses a number no double holds, naming where (it read as Infinity, and the body failed later: a 500)', () => {
    expect(refused('{"kind":"sleep","partitions":1e400}')).toBe('the number 1e400 at $.partitions is out of range: a JSON number here is at most ±1.7976931348623157e308');
    expect(refused('{"input":{"x":[0,-2E+999]}}')).toMatch(/^the number -2E\+999 at \$\.input\.x\[1\] is out of range/);
    expect(refused('1e309')).toMatch(/^the number 1e309 at \$ is out of range/);
    // Tiny numbers round to 0, as JSON.parse reads them: in range.
    expect(parseStrictJson('{"a":1e-400,"b":-0,"c":1.7976931348623157e308}')).toEqual({ a: 0, b: -0, c: 1.7976931348623157e308 });
  });

  it('refuses an integer that a double would round, naming where (an int64 id 2^64 + 1 was kept as 18446744073709552000, and 2^64 + 2 was the same job)', () => {
    expect(refused('{"kind":"raw","input":{"user_id":18446744073709551617}}')).toBe(
      'the integer 18446744073709551617 at $.input.user_id has more digits than a number here holds exactly (a double: whole numbers to 2^53 = 9007199254740992 and some beyond; it would read 18446744073709552000): send it as a string',
    );
    expect(refused('{"ids":[10000000000000000,10000000000000001]}')).toMatch(/^the integer 10000000000000001 at \$\.ids\[1\] has more digits/);
    expect(refused('[-9007199254740993]')).toMatch(/^the integer -9007199254740993 at \$\[0\]/);
    // Integers a double holds read as written (2^53 + 2, 2^60, 10^21), and so do the digits JSON.stringify writes for a double (1e20, -2.105416613021971e16); a fraction or an exponent is a float, rounded as ever.
    expect(parseStrictJson('[9007199254740991,9007199254740994,1152921504606846976,1000000000000000000000,100000000000000000000,-21054166130219710,1.00000000000000001,1e16]')).toEqual([2 ** 53 - 1, 2 ** 53 + 2, 2 ** 60, 1e21, 1e20, -2.105416613021971e16, 1, 1e16]);
  });

  it("names NaN and Infinity where they are (Python's json.dumps writes them by default)", () => {
    const fix = 'is not JSON (JSON has no NaN or Infinity): send null or a finite number there — in Python, json.dumps(body, allow_nan=False) finds these before sending';
    expect(refused('{"kind": "raw", "input": {"x": NaN}}')).toBe(`NaN at $.input.x ${fix}`);
    expect(refused('{"input":{"v":[1, 2, -Infinity]}}')).toBe(`-Infinity at $.input.v[2] ${fix}`);
    expect(refused('[Infinity]')).toBe(`Infinity at $[0] ${fix}`);
    // Inside a string they are text; other malformed text is said as JSON.parse says it.
    expect(refused('{"a": "NaN", "b": nope}')).toMatch(/^the body is not valid JSON \(.*\): send a JSON object/);
    expect(refused('{"a": "unterminated')).toMatch(/^the body is not valid JSON/);
  });

  it('refuses __proto__ anywhere, and says what malformed or empty bodies are', () => {
    expect(refused('{"kind":"sleep","__proto__":{"x":1}}')).toBe('the key "__proto__" at $.__proto__ is not allowed: remove it');
    expect(refused('{"input":{"\\u005f_proto__":{}}}')).toBe('the key "__proto__" at $.input.__proto__ is not allowed: remove it');
    expect(refused('{"kind": ')).toMatch(/^the body is not valid JSON \(.*\): send a JSON object/);
    expect(refused('  ')).toMatch(/^the body is empty/);
  });

  it(`refuses nesting deeper than ${MAX_DEPTH} levels, naming where (deeper, a 10 KB body ran the server out of stack: a 500)`, () => {
    const deep = (n: number) => `{"kind":"sleep","input":{"x":${'['.repeat(n)}${']'.repeat(n)}}}`;
    // The body and input objects are two levels: arrays up to MAX_DEPTH − 2 deep pass.
    expect(parseStrictJson(deep(MAX_DEPTH - 2))).toMatchObject({ kind: 'sleep' });
    // (The path cut to 100 characters.)
    expect(refused(deep(MAX_DEPTH - 1))).toBe(`the body nests deeper than ${MAX_DEPTH} levels of objects and arrays at ${`$.input.x${'[0]'.repeat(MAX_DEPTH - 2)}`.slice(0, 100)}…: send flatter JSON`);
    expect(refused(deep(5000))).toMatch(/^the body nests deeper than/);
  });
});

describe('POST /v1/jobs with such bodies', () => {
  const fixture = useServer();

  it('answers 400 naming the key; nothing is journaled', async () => {
    const dup = await http(fixture.server.url, 'POST', '/v1/jobs', '{"id":"d-1","kind":"sleep","partitions":1,"partitions":2}');
    expect(dup.status).toBe(400);
    expect(dup.body).toMatchObject({ title: 'Bad request', detail: 'the key "partitions" appears twice at $.partitions: give each key once' });
    const proto = await http(fixture.server.url, 'POST', '/v1/jobs', '{"id":"d-2","kind":"sleep","partitions":1,"input":{"__proto__":{"prepareMs":5}}}');
    expect(proto.status).toBe(400);
    expect(proto.body.detail).toBe('the key "__proto__" at $.input.__proto__ is not allowed: remove it');
    const deep = await http(fixture.server.url, 'POST', '/v1/jobs', `{"id":"d-3","kind":"sleep","partitions":1,"input":{"x":${'['.repeat(5000)}${']'.repeat(5000)}}}`);
    expect(deep.status).toBe(400);
    expect(deep.body.detail).toMatch(/^the body nests deeper than 256 levels of objects and arrays at \$\.input\.x\[0\]/);
    // Bytes that are not UTF-8: refused (read with U+FFFD in their place, two such bodies were one job).
    const bad = await fetch(`${fixture.server.url}/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: Buffer.concat([Buffer.from('{"id":"d-4","kind":"sleep","partitions":1,"input":{"s":"a'), Buffer.from([0xff]), Buffer.from('b"}}')]) });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { detail: string }).detail).toBe('the body is not valid UTF-8: send JSON as UTF-8 text');
    expect((await http(fixture.server.url, 'GET', '/v1/jobs/d-4')).status).toBe(404);
    // A number no double holds: 400, not a 500 when it was journaled.
    expect((await http(fixture.server.url, 'POST', '/v1/jobs', '{"id":"d-5","kind":"sleep","partitions":1e400}')).body).toMatchObject({ status: 400, detail: expect.stringMatching(/^the number 1e400 at \$\.partitions is out of range/) });
    expect((await http(fixture.server.url, 'GET', '/v1/jobs/d-1')).status).toBe(404);
    expect((await http(fixture.server.url, 'GET', '/v1/jobs/d-2')).status).toBe(404);
  });
});

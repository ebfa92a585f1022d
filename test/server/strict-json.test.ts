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
    expect(refused(deep(MAX_DEPTH - 1))).toBe(`the body nests deeper than ${MAX_DEPTH} levels of objects and arrays at $.input.x${'[0]'.repeat(MAX_DEPTH - 2)}: send flatter JSON`);
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
    expect((await http(fixture.server.url, 'GET', '/v1/jobs/d-1')).status).toBe(404);
    expect((await http(fixture.server.url, 'GET', '/v1/jobs/d-2')).status).toBe(404);
  });
});

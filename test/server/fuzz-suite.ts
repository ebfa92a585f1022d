/**
 * "A fuzz test sends thousands of random and mutated bodies: no 5xx, no crash, no lost or
 * corrupted job." One real `stoker serve` process takes (a) arbitrary JSON, (b) mutations of a
 * valid job body, (c) raw bytes and truncated JSON, (d) random methods, paths and query strings,
 * eight requests at a time, while 30 valid sleep jobs with known results are submitted in between.
 *
 * Every reply: status < 500; every 4xx (but to HEAD) a problem+json body with type, title,
 * status and detail. Every 2xx submission: the job it returns reads back the same (id, kind,
 * priority, partitions, input, deadline, submittedAt), and is then cancelled (a fuzzed body may
 * ask for a 10-minute sleep) — at the end each such job has ended and still reads back the same.
 * The 30 valid jobs all finish with the right totals, and the server is still up.
 *
 * The suite runs twice (fuzz.test.ts, fuzz-token.test.ts): with no token, and with server.token
 * set, where every seventh request goes without the token and must get a 401 problem (the
 * dashboard's page and files excepted).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, removeDir, sleepTotal, startServer, tempDataDir, waitUntil, type ServerProcess } from './helpers.js';

/** Defines the fuzz suite against a server started with `token` as its server.token (none: no token). */
export function defineFuzz(token?: string): void {
  /** One fuzzed request. */
  interface Req {
    method: string;
    /** Starts with `/`; sent as is (after WHATWG URL parsing). */
    path: string;
    body?: string | Uint8Array;
    contentType?: string;
  }

  const BODY_LIMIT = 65_536;
  const BATCH = 8;
  const dir = tempDataDir();
  let server: ServerProcess;
  /** With a token: the header every request of the suite sends (but every seventh fuzzed one). */
  const auth: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const call = (method: string, p: string, body?: unknown) => http(server.url, method, p, body, auth);
  let sent = 0;

  beforeAll(async () => {
    server = await startServer(dir, [], { STOKER_SERVER_MAX_WAIT_S: '2', STOKER_SERVER_BODY_LIMIT_BYTES: String(BODY_LIMIT), ...(token ? { STOKER_SERVER_TOKEN: token } : {}) });
  });

  afterAll(async () => {
    if (server && server.child.exitCode === null && server.child.signalCode === null) await server.crash();
    removeDir(dir);
  });

  // ─── Bookkeeping ──────────────────────────────────────────────────────────────────────────────

  const stats = { requests: 0, byClass: new Map<string, number>(), byStatus: new Map<number, number>(), accepted: 0, resubmits: 0 };
  /** What a job must keep reading back: fixed at submission. */
  type Core = Record<'id' | 'kind' | 'priority' | 'partitions' | 'input' | 'deadline' | 'submittedAt', unknown>;
  const fuzzJobs = new Map<string, Core>();
  const coreOf = (j: Record<string, unknown>): Core => ({ id: j.id, kind: j.kind, priority: j.priority, partitions: j.partitions, input: j.input, deadline: j.deadline, submittedAt: j.submittedAt });

  /** JSON with sorted keys: equality of JSON values as the wire carries them (-0 is 0). */
  function canonical(v: unknown): string {
    if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
    if (v !== null && typeof v === 'object') {
      const keys = Object.keys(v).sort();
      return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`).join(',')}}`;
    }
    return JSON.stringify(v) ?? 'undefined';
  }
  const same = (a: unknown, b: unknown) => canonical(a) === canonical(b);

  function show(req: Req): string {
    const body = req.body === undefined ? '' : typeof req.body === 'string' ? req.body : `bytes[${Buffer.from(req.body).toString('hex')}]`;
    return `${req.method} ${req.path}${req.contentType === undefined ? '' : ` (${req.contentType})`}${body ? ` ${body.length > 300 ? `${body.slice(0, 300)}… (${body.length} chars)` : body}` : ''}`;
  }

  function ensure(cond: unknown, req: Req, what: string): asserts cond {
    if (!cond) throw new Error(`${what}\n  request: ${show(req)}`);
  }

  function parseBody(body: Req['body']): unknown {
    const text = typeof body === 'string' ? body : body === undefined ? '' : new TextDecoder().decode(body);
    try {
      return JSON.parse(text.replace(/^\uFEFF/, '')) as unknown;
    } catch {
      return undefined;
    }
  }

  /** Whether a path's percent-escapes decode (one that does not cannot be routed at all). */
  const decodable = (p: string) => {
    try {
      decodeURIComponent(p);
      return true;
    } catch {
      return false;
    }
  };

  /** Sends one request and checks the reply; a 2xx submission is read back and cancelled. */
  async function exercise(req: Req): Promise<void> {
    let url: URL;
    let request: Request;
    let anonymous = false;
    try {
      url = new URL(server.url + req.path);
      const hasBody = req.body !== undefined && req.method !== 'GET' && req.method !== 'HEAD';
      // With a token, every seventh request goes without it: it must be refused (401).
      anonymous = token !== undefined && ++sent % 7 === 0;
      request = new Request(url, { method: req.method, headers: { ...(anonymous ? {} : auth), ...(req.contentType === undefined ? {} : { 'content-type': req.contentType }) }, ...(hasBody ? { body: req.body } : {}) });
    } catch {
      return; // no client can send this (e.g. a URL that does not parse): nothing reaches the server
    }
    // The event stream never ends by itself: it has a test of its own.
    if (url.pathname === '/v1/events' && req.method === 'GET') return;
    let res: Response;
    let text: string;
    try {
      res = await fetch(request);
      text = await res.text();
    } catch (e) {
      const cause = (e as { cause?: unknown }).cause;
      throw new Error(`no reply (${String(e)}${cause ? `: ${String(cause)}` : ''})\n  request: ${show(req)}`);
    }
    stats.requests++;
    const cls = `${Math.floor(res.status / 100)}xx`;
    stats.byClass.set(cls, (stats.byClass.get(cls) ?? 0) + 1);
    stats.byStatus.set(res.status, (stats.byStatus.get(res.status) ?? 0) + 1);
    const reply = `${res.status} ${text.slice(0, 500)}`;
    ensure(res.status < 500, req, `5xx: ${reply}`);
    // Only the dashboard's page and files answer without the token; a URL that cannot be decoded
    // is refused before any route (400 bad-url), which tells nothing either.
    const open = (req.method === 'GET' || req.method === 'HEAD') && (url.pathname === '/' || url.pathname.startsWith('/assets/'));
    if (anonymous && !open) ensure(res.status === 401 || (res.status === 400 && !decodable(url.pathname)), req, `without the token: ${reply}`);
    if (res.status >= 400 && req.method !== 'HEAD') {
      ensure(res.headers.get('content-type')?.startsWith('application/problem+json'), req, `a ${res.status} that is not problem+json (${res.headers.get('content-type')}): ${reply}`);
      const p = JSON.parse(text) as Record<string, unknown>;
      ensure(typeof p.type === 'string' && p.type.startsWith('https://stoker.dev/problems/'), req, `problem without type: ${reply}`);
      ensure(typeof p.title === 'string' && p.title !== '', req, `problem without title: ${reply}`);
      ensure(p.status === res.status, req, `problem status ≠ HTTP status: ${reply}`);
      ensure(typeof p.detail === 'string' && p.detail !== '', req, `problem without detail: ${reply}`);
    }
    if (req.method === 'POST' && url.pathname === '/v1/jobs' && res.status < 300) await checkSubmitted(req, res.status, JSON.parse(text) as Record<string, unknown>);
  }

  async function checkSubmitted(req: Req, status: number, job: Record<string, unknown>): Promise<void> {
    ensure(status === 202 || status === 200, req, `a submission answered ${status}`);
    const sent = parseBody(req.body) as Record<string, unknown> | undefined;
    ensure(sent !== null && typeof sent === 'object', req, `a submission of a non-object was accepted: ${JSON.stringify(job)}`);
    ensure(typeof job.id === 'string' && job.id !== '', req, `accepted without an id: ${JSON.stringify(job)}`);
    const id = job.id;
    if (sent.id !== undefined) ensure(job.id === sent.id, req, `id ${JSON.stringify(sent.id)} came back as ${JSON.stringify(job.id)}`);
    ensure(job.kind === sent.kind, req, `kind changed: ${JSON.stringify(job.kind)}`);
    ensure(same(job.partitions, sent.partitions), req, `partitions changed: ${JSON.stringify(job.partitions)}`);
    ensure(job.priority === (sent.priority ?? 'normal'), req, `priority changed: ${JSON.stringify(job.priority)}`);
    const input = job.input as Record<string, unknown>;
    ensure(input !== null && typeof input === 'object', req, `input is not an object: ${JSON.stringify(job.input)}`);
    for (const [k, v] of Object.entries((sent.input ?? {}) as Record<string, unknown>)) ensure(same(input[k], v), req, `input.${k} changed: ${JSON.stringify(input[k])}`);
    if (typeof sent.deadline === 'number') ensure(job.deadline === new Date(sent.deadline).toISOString(), req, `deadline changed: ${JSON.stringify(job.deadline)}`);
    if (typeof sent.deadline === 'string') ensure(Date.parse(job.deadline as string) === Date.parse(sent.deadline), req, `deadline changed: ${JSON.stringify(job.deadline)}`);
    const core = coreOf(job);
    const known = fuzzJobs.get(id);
    if (status === 200) {
      stats.resubmits++;
      if (known) ensure(same(core, known), req, `a resubmission returned another job: ${canonical(core)} ≠ ${canonical(known)}`);
    }
    const got = await call('GET', `/v1/jobs/${encodeURIComponent(id)}`);
    ensure(got.status === 200, req, `GET of accepted job ${id} answered ${got.status}: ${JSON.stringify(got.body).slice(0, 300)}`);
    ensure(same(coreOf(got.body as Record<string, unknown>), core), req, `job ${id} reads back differently: ${canonical(coreOf(got.body as Record<string, unknown>))} ≠ ${canonical(core)}`);
    if (status === 202) {
      stats.accepted++;
      fuzzJobs.set(id, core);
      const del = await call('DELETE', `/v1/jobs/${encodeURIComponent(id)}`);
      ensure(del.status === 200 || (del.status === 409 && del.body.type === 'https://stoker.dev/problems/job-finished'), req, `cancel of ${id} answered ${del.status}: ${JSON.stringify(del.body).slice(0, 300)}`);
    }
  }

  // ─── Valid jobs interleaved with the fuzzing ──────────────────────────────────────────────────

  const VALID = 30;
  const validId = (i: number) => `valid-${String(i).padStart(2, '0')}`;
  const validInput = (i: number) => ({ seed: 500 + 13 * i, prepareMs: 5, deviceMs: 2 });
  let validSent = 0;
  let batches = 0;

  async function submitValid(): Promise<void> {
    const i = validSent++;
    const r = await call('POST', '/v1/jobs', { id: validId(i), kind: 'sleep', partitions: 3, input: validInput(i) });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
  }

  /** Sends a batch of requests at once, and every 14th batch one of the valid jobs alongside. */
  async function batch(reqs: Req[]): Promise<void> {
    const extra = batches++ % 14 === 0 && validSent < VALID ? [submitValid()] : [];
    await Promise.all([...reqs.map(exercise), ...extra]);
  }

  // ─── Generators ───────────────────────────────────────────────────────────────────────────────

  const VALID_BODY = { kind: 'sleep', partitions: 2, input: { prepareMs: 1, deviceMs: 1 } };

  const deep = (n: number): unknown => {
    let v: unknown = 1;
    for (let i = 0; i < n; i++) v = i % 2 ? [v] : { a: v };
    return v;
  };

  /** Values that break fields: other JSON types, edge numbers, NaN as a string, deep nesting, long and odd strings. */
  const weird: fc.Arbitrary<unknown> = fc.oneof(
    { arbitrary: fc.jsonValue({ maxDepth: 3 }), weight: 3 },
    {
      arbitrary: fc.constantFrom<unknown>(
        1e308, -1e308, 0, -0, -1, 1.5, 2 ** 31, 2 ** 53, 2 ** 53 + 2, 1_000_001, 8.64e15, 8.64e15 + 1, 9e15, Number.MAX_SAFE_INTEGER, 5e-324,
        'NaN', 'Infinity', '-Infinity', '1', '', ' ', 'sleep', 'ntt-proof', 'SLEEP', null, true, false, [], {}, [1, 2], { seed: 1 },
        '\u0000', '__proto__', 'constructor', '2030-01-01T00:00:00Z', '2020-01-01T00:00:00Z', '0000-01-01T00:00:00Z', '9999-12-31T23:59:59-23:59',
        '2020-02-30T00:00:00Z', '2030-01-01', 'critical', 'high', 'low', 'normal', 'fz-a',
      ),
      weight: 4,
    },
    { arbitrary: fc.integer({ min: 1, max: 3000 }).map(deep), weight: 1 },
    { arbitrary: fc.integer({ min: 1000, max: BODY_LIMIT + 5000 }).map((n) => 'x'.repeat(n)), weight: 1 },
    { arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }), weight: 2 },
    { arbitrary: fc.string({ unit: 'binary', maxLength: 20 }), weight: 1 },
    { arbitrary: fc.double(), weight: 1 },
    { arbitrary: fc.integer({ min: -10, max: 1000 }), weight: 2 },
    { arbitrary: fc.bigInt().map(String), weight: 1 },
  );

  /** Ids: a small pool (resubmits and conflicts), valid ids up to 200 characters, and odd ones. */
  const ids = fc.oneof(
    fc.constantFrom('fz-a', 'fz-b', 'fz-c', 'fz.d:e_f-1'),
    fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/),
    fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._:-]{99,199}$/),
    fc.string({ unit: 'grapheme', minLength: 1, maxLength: 30 }),
    fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._:-]{200,210}$/),
  );

  const deadlines = fc.oneof(
    fc.constantFrom<unknown>('2030-01-01T00:00:00Z', '2099-12-31T23:59:59+14:00', '2000-01-01T00:00:00Z', 8.64e15, 1, Date.UTC(2031, 0, 1)),
    fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
    fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
  );

  const TOP_KEYS = ['id', 'kind', 'priority', 'partitions', 'input', 'deadline'];
  const INPUT_KEYS = ['seed', 'prepareMs', 'deviceMs', 'logN', 'synthesisMs'];

  type Mutation = { at: 'top' | 'input'; key: string; op: 'drop' | 'set'; value: unknown };
  const mutation: fc.Arbitrary<Mutation> = fc.record({
    at: fc.constantFrom('top', 'input'),
    key: fc.oneof({ arbitrary: fc.constantFrom(...TOP_KEYS, ...INPUT_KEYS), weight: 5 }, { arbitrary: fc.string({ maxLength: 12 }), weight: 1 }),
    op: fc.constantFrom('drop', 'set', 'set'),
    value: weird,
  }) as fc.Arbitrary<Mutation>;

  /** A valid body with optional valid extras, then 0–4 mutations. */
  const mutatedBody = fc
    .tuple(
      fc.record(
        { id: ids, priority: fc.constantFrom('critical', 'high', 'normal', 'low'), deadline: deadlines, seed: fc.integer({ min: 0, max: 1_000_000 }), partitions: fc.integer({ min: 1, max: 6 }) },
        { requiredKeys: [] },
      ),
      fc.array(mutation, { maxLength: 4 }),
    )
    .map(([extra, mutations]) => {
      const { seed, ...top } = extra;
      const body: Record<string, unknown> = { ...VALID_BODY, ...top, input: { ...VALID_BODY.input, ...(seed === undefined ? {} : { seed }) } };
      for (const m of mutations) {
        const target = m.at === 'top' ? body : body.input;
        if (target === null || typeof target !== 'object' || Array.isArray(target)) continue;
        if (m.op === 'drop') delete (target as Record<string, unknown>)[m.key];
        else Object.defineProperty(target, m.key, { value: m.value, enumerable: true, writable: true, configurable: true });
      }
      return body;
    });

  const jsonPost = (text: string): Req => ({ method: 'POST', path: '/v1/jobs', body: text, contentType: 'application/json' });

  /** (a) arbitrary JSON: values, JSON texts, objects with random keys, objects near a job. */
  const arbitraryJson: fc.Arbitrary<Req> = fc.oneof(
    fc.jsonValue().map((v) => jsonPost(JSON.stringify(v))),
    fc.json().map(jsonPost),
    fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 8 }).map((o) => jsonPost(JSON.stringify(o))),
    fc.record({ kind: fc.oneof(fc.constant('sleep'), fc.jsonValue()), partitions: fc.jsonValue(), input: fc.jsonValue() }, { requiredKeys: [] }).map((o) => jsonPost(JSON.stringify(o))),
  );

  /** (b) mutations of a valid body; now and then the valid body itself under a pooled id (a resubmit or a conflict). */
  const mutated: fc.Arbitrary<Req> = fc.oneof(
    { arbitrary: mutatedBody.map((b) => jsonPost(JSON.stringify(b))), weight: 9 },
    { arbitrary: fc.record({ id: fc.constantFrom('fz-a', 'fz-b', 'fz-c'), priority: fc.constantFrom('normal', 'low') }).map((x) => jsonPost(JSON.stringify({ ...VALID_BODY, ...x }))), weight: 1 },
  );

  const contentTypes = fc.constantFrom(
    'application/json', 'application/json; charset=utf-8', 'Application/JSON', 'application/json; charset=latin1', 'application/json;', 'application/problem+json',
    'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/octet-stream', '',
  );
  const validText = mutatedBody.map((b) => JSON.stringify(b));

  /** (c) raw bytes, truncated or garbled JSON, under various content types. */
  const rawBodies: fc.Arbitrary<Req> = fc
    .tuple(
      fc.oneof(
        fc.uint8Array({ maxLength: 300 }),
        validText.chain((t) => fc.nat({ max: Math.max(0, t.length - 1) }).map((n) => t.slice(0, n))),
        validText.map((t) => `${t}}`),
        validText.map((t) => `${t},`),
        validText.map((t) => `\uFEFF${t}`),
        validText.map((t) => t.replace(':', '')),
        validText.map((t) => t.replace(/"/g, "'")),
        fc.string({ unit: 'binary', maxLength: 100 }),
        fc.constantFrom('', ' ', 'null', '[]', '{}', '"x"', '1', '{"__proto__":{"x":1}}', '{"constructor":{"prototype":{"x":1}}}', '{"kind":"sleep","partitions":1,"input":{"__proto__":{}}}', '[{"kind":"sleep","partitions":1}]'),
      ),
      fc.option(contentTypes, { nil: undefined }),
    )
    .map(([body, contentType]) => ({ method: 'POST', path: '/v1/jobs', body, ...(contentType === undefined ? {} : { contentType }) }));

  const segment = fc.oneof(
    fc.constantFrom('v1', 'jobs', 'result', 'status', 'kinds', 'metrics', 'openapi.json', 'events', '', '.', '..', '%', '%ZZ', '%00', '%2F', '%E0%A4%A', '~', 'fz-a', 'fz-b', '%F0%9F%98%80'),
    fc.string({ unit: 'grapheme', maxLength: 12 }).map(encodeURIComponent),
    fc.string({ maxLength: 12 }),
    fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,400}$/),
  );
  const query = fc.oneof(
    fc.constant(''),
    fc.constantFrom('?wait=1s', '?wait=0', '?wait=150ms', '?wait=2.5s', '?wait=3s', '?wait=-1', '?wait=1e3', '?wait=NaN', '?wait=1s&wait=2s', '?wait=', '?wait', '?wait[]=1', '?wait[a]=1', '?wait=99999999999999999999m', '?wait=%FF', '?wait=0.0000001ms'),
    fc.tuple(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 })).map(([k, v]) => `?${encodeURIComponent(k)}=${encodeURIComponent(v)}`),
    fc.string({ maxLength: 20 }).map((s) => `?wait=${s}`),
  );
  const method = fc.constantFrom('GET', 'GET', 'POST', 'DELETE', 'PUT', 'PATCH', 'HEAD', 'OPTIONS');

  /** (d) random methods on random paths, some under /v1/jobs/:id, with query strings and bodies. */
  const randomRequests: fc.Arbitrary<Req> = fc
    .tuple(
      method,
      fc.oneof(
        fc.array(segment, { maxLength: 5 }).map((s) => `/${s.join('/')}`),
        fc.tuple(segment, fc.constantFrom('', '/result', '/', '/result/x')).map(([id, rest]) => `/v1/jobs/${id}${rest}`),
      ),
      query,
      fc.option(fc.json({ maxDepth: 2 }), { nil: undefined }),
      fc.option(contentTypes, { nil: undefined }),
    )
    .map(([m, p, q, body, contentType]) => ({ method: m, path: p + q, ...(body === undefined ? {} : { body }), ...(contentType === undefined ? {} : { contentType }) }));

  const runs = (arb: fc.Arbitrary<Req>, numRuns: number) =>
    fc.assert(
      fc.asyncProperty(fc.array(arb, { minLength: BATCH, maxLength: BATCH }), (reqs) => batch(reqs)),
      {
        seed: 42,
        numRuns,
        endOnFailure: true,
        // The failing request is in the error; the whole batch (deep nesting, 70 kB strings) would drown it.
        reporter: (d) => {
          if (d.failed) throw new Error(`fuzz property failed on run ${d.numRuns} (seed ${d.seed}, path ${d.counterexamplePath}): ${d.errorInstance instanceof Error ? d.errorInstance.message : String(d.errorInstance)}`);
        },
      },
    );

  // ─── Tests ────────────────────────────────────────────────────────────────────────────────────

  describe(`fuzzing the HTTP API of a real server${token ? ', with server.token set' : ''}`, () => {
    it('(a) arbitrary JSON bodies', { timeout: 60_000 }, () => runs(arbitraryJson, 80));
    it('(b) mutated valid bodies', { timeout: 60_000 }, () => runs(mutated, 160));
    it('(c) raw bytes and truncated JSON', { timeout: 60_000 }, () => runs(rawBodies, 80));
    it('(d) random methods, paths and query strings', { timeout: 60_000 }, () => runs(randomRequests, 110));

    it('lost no job, corrupted none, and is still up', { timeout: 60_000 }, async () => {
      while (validSent < VALID) await submitValid();
      console.log(
        `fuzz${token ? ' (with a token)' : ''}: ${stats.requests} requests (${[...stats.byStatus].sort(([a], [b]) => a - b).map(([c, n]) => `${c}: ${n}`).join(', ')}); ${stats.accepted} fuzzed jobs accepted, ${stats.resubmits} idempotent resubmits; ${VALID} valid jobs`,
      );
      expect(stats.requests).toBeGreaterThanOrEqual(3000);
      expect(stats.byClass.get('5xx') ?? 0).toBe(0);

      for (let i = 0; i < VALID; i++) {
        const r = await waitUntil(
          async () => {
            const res = await call('GET', `/v1/jobs/${validId(i)}/result?wait=2s`);
            expect([200, 202]).toContain(res.status);
            return res.status === 200 ? res.body : undefined;
          },
          30_000,
          `valid job ${i}`,
          0,
        );
        expect(r).toMatchObject({ id: validId(i), state: 'done', error: null, result: { partitions: 3, total: sleepTotal(validInput(i).seed, 3) } });
        const job = await call('GET', `/v1/jobs/${validId(i)}`);
        expect(job.body).toMatchObject({ id: validId(i), kind: 'sleep', priority: 'normal', partitions: 3, input: validInput(i), state: 'done', partitionsDone: 3 });
      }

      // Every fuzzed job that was accepted has ended (cancelled, or done/failed first) and reads back unchanged.
      await waitUntil(async () => ((await call('GET', '/v1/status')).body.jobs.pending === 0 ? true : undefined), 30_000, 'no pending jobs', 50);
      for (const [id, core] of fuzzJobs) {
        const job = await call('GET', `/v1/jobs/${encodeURIComponent(id)}`);
        expect(job.status).toBe(200);
        expect(canonical(coreOf(job.body))).toBe(canonical(core));
        expect(['done', 'failed', 'cancelled']).toContain(job.body.state);
      }

      const status = await call('GET', '/v1/status');
      expect(status.status).toBe(200);
      expect(status.body.jobs.done).toBeGreaterThanOrEqual(VALID);
      expect(status.body.jobs.queued + status.body.jobs.running).toBe(0);
      expect(server.child.exitCode).toBeNull();
      expect(server.child.signalCode).toBeNull();
      expect(server.output()).not.toMatch(/TimeoutOverflowWarning|Unhandled|uncaught|Error:/i);
    });
  });

}

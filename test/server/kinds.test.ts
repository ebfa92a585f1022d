/**
 * Job kinds from the user's modules, through real `stoker serve` processes (dist/): a kind with a
 * thread device runs end to end (contexts, partitions from the input, bytes results, a withdrawn
 * preparation's signal), and every kind of bad module is refused at start with exit 2, naming the
 * module and the export.
 */
import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, collectEvents, http, metricValue, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess } from './helpers.js';

const FIXTURES = path.resolve(import.meta.dirname, '../fixtures/kinds');
const PROBE = path.join(FIXTURES, 'probe-kind.mjs');
const DOUBLER = path.join(FIXTURES, 'default-kind.mjs');

function run(args: string[], cwd?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { cwd, timeout: 30_000, env: { ...process.env, STOKER_PREPARE_THREADS: '1' } }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe('a kind module with a thread device', () => {
  let server: ServerProcess;
  let dir: string;
  let markers: string;

  beforeAll(async () => {
    dir = tempDataDir();
    markers = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-markers-'));
    server = await startServer(dir, ['--kind', PROBE, '--kind', DOUBLER]);
  });
  afterAll(async () => {
    await server?.stop();
    removeDir(dir);
    removeDir(markers);
  });

  it('is listed by GET /v1/kinds with its schema and memory, beside the built-ins', async () => {
    expect(server.output()).toContain('kinds ntt-proof, sleep, probe, doubler');
    const r = await http(server.url, 'GET', '/v1/kinds');
    const probe = (r.body as { name: string }[]).find((k) => k.name === 'probe');
    expect(probe).toEqual({ name: 'probe', description: 'reports what its stages see (tests)', input: expect.objectContaining({ required: ['items'] }), memory: null, partitionsFromInput: true });
    const doubler = (r.body as { name: string }[]).find((k) => k.name === 'doubler');
    expect(doubler).toEqual({ name: 'doubler', description: `kind from ${DOUBLER}`, input: null, memory: { prepareBytes: 0, deviceBytes: 0 }, partitionsFromInput: false });
  });

  it('runs prepare in a preparation thread and run in a device thread with the contexts the README names', async () => {
    const sub = await http(server.url, 'POST', '/v1/jobs', { id: 'p1', kind: 'probe', input: { items: 3 } });
    expect(sub.status).toBe(202);
    expect(sub.body).toMatchObject({ partitions: 3, input: { items: 3, mode: 'probe' } });
    const r = await http(server.url, 'GET', '/v1/jobs/p1/result?wait=20s');
    expect(r.body.state, JSON.stringify(r.body)).toBe('done');
    const { job, outputs } = r.body.result as { job: string; outputs: Record<string, unknown>[] };
    expect(job).toBe('p1');
    expect(outputs).toHaveLength(3);
    outputs.forEach((o, p) => {
      expect(o).toMatchObject({
        prepared: { job: 'p1', partition: p, partitions: 3, bufferBytes: expect.any(Number), aborted: false, mainThread: false },
        // The device read what the preparation wrote into the shared buffer.
        sum: 4 * p * 1000 + 6,
        job: 'p1',
        partition: p,
        partitions: 3,
        items: 3,
        device: 0,
        worker: expect.any(Number),
        deviceKind: 'cpu',
        mainThread: false,
      });
      expect((o['prepared'] as { bufferBytes: number }).bufferBytes).toBeGreaterThanOrEqual(64);
      expect(o['threadId']).not.toBe((o['prepared'] as { threadId: number }).threadId);
    });
  });

  it('checks the input against the schema and the partitions against partitions(input)', async () => {
    const bad = await http(server.url, 'POST', '/v1/jobs', { kind: 'probe', input: { items: 0, extra: 1 } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual(expect.arrayContaining([{ path: 'input.items', message: 'items must be ≥ 1' }, { path: 'input.extra', message: expect.stringMatching(/unknown field "extra"/) }]));
    const missing = await http(server.url, 'POST', '/v1/jobs', { kind: 'probe', input: {} });
    expect(missing.body.errors).toEqual([{ path: 'input.items', message: 'items is required' }]);
    const disagree = await http(server.url, 'POST', '/v1/jobs', { kind: 'probe', partitions: 5, input: { items: 2 } });
    expect(disagree.body.errors).toEqual([{ path: 'partitions', message: 'kind probe makes 2 partitions of this input: leave partitions out, or give 2' }]);
    const agree = await http(server.url, 'POST', '/v1/jobs', { kind: 'probe', partitions: 2, input: { items: 2 } });
    expect(agree.status).toBe(202);
    const none = await http(server.url, 'POST', '/v1/jobs', { kind: 'doubler' });
    expect(none.body.errors).toEqual([{ path: 'partitions', message: expect.stringMatching(/whole number.*kind doubler does not derive it/) }]);
  });

  it('runs a default-export module without finish: the outputs in partition order', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'd1', kind: 'doubler', partitions: 4, input: { base: 10 } });
    const r = await http(server.url, 'GET', '/v1/jobs/d1/result?wait=20s');
    expect(r.body).toMatchObject({ state: 'done', result: [20, 22, 24, 26] });
  });

  it('keeps bytes results as bytes: base64 in JSON, raw with Accept: application/octet-stream', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'b1', kind: 'probe', input: { items: 3, mode: 'bytes' } });
    const r = await http(server.url, 'GET', '/v1/jobs/b1/result?wait=20s');
    expect(r.body).toMatchObject({ state: 'done', resultEncoding: 'base64' });
    expect([...Buffer.from(r.body.result as string, 'base64')]).toEqual([0, 1, 2, 1, 2, 3, 2, 3, 4]);
    const view = await http(server.url, 'GET', '/v1/jobs/b1');
    expect(view.body).toMatchObject({ resultEncoding: 'base64', result: r.body.result });
    const raw = await fetch(new URL('/v1/jobs/b1/result', server.url), { headers: { accept: 'application/octet-stream' } });
    expect(raw.status).toBe(200);
    expect(raw.headers.get('content-type')).toBe('application/octet-stream');
    expect([...new Uint8Array(await raw.arrayBuffer())]).toEqual([0, 1, 2, 1, 2, 3, 2, 3, 4]);
    // A JSON result asked for as bytes: 406, saying what to ask for.
    const json = await http(server.url, 'GET', '/v1/jobs/d1/result', undefined, { accept: 'application/octet-stream' });
    expect(json.status).toBe(406);
    expect(json.body.detail).toMatch(/JSON value, not bytes: ask with Accept: application\/json/);
    // Bytes preferred, JSON taken too: the JSON.
    const either = await http(server.url, 'GET', '/v1/jobs/d1/result', undefined, { accept: 'application/octet-stream, application/json;q=0.5' });
    expect(either.status).toBe(200);
    expect(either.body).toMatchObject({ id: 'd1', state: 'done' });
  });

  it('answers a bytes result larger than one piece of its base64 as whole JSON, made piece by piece (as one string, one of 410 MB could not be answered)', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'pieces', kind: 'probe', input: { items: 12, mode: 'large' } });
    const want = Buffer.concat(Array.from({ length: 12 }, (_, p) => Buffer.alloc(300_000, p)));
    const res = await fetch(new URL('/v1/jobs/pieces/result?wait=20s', server.url));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
    const body = JSON.parse(await res.text()) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual(['id', 'state', 'result', 'resultEncoding', 'error', 'finishedAt']);
    expect(body).toMatchObject({ id: 'pieces', state: 'done', resultEncoding: 'base64', error: null });
    expect(Buffer.from(body['result'] as string, 'base64').equals(want)).toBe(true);
    const raw = await fetch(new URL('/v1/jobs/pieces/result', server.url), { headers: { accept: 'application/octet-stream' } });
    expect(Buffer.from(await raw.arrayBuffer()).equals(want)).toBe(true);
  });

  it('leaves a result over 1 MiB out of job views, lists and the end event (by its size); GET …/result and wait -o give it whole', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'big-bytes', kind: 'probe', input: { items: 4, mode: 'large' } });
    await http(server.url, 'POST', '/v1/jobs', { id: 'big-json', kind: 'probe', input: { items: 4, mode: 'large-json' } });
    const bytes = await http(server.url, 'GET', '/v1/jobs/big-bytes/result?wait=20s');
    expect(bytes.body).toMatchObject({ state: 'done', resultEncoding: 'base64' });
    // (Buffer.equals: toEqual walks 1.2 MB element by element, 7 s.)
    expect(Buffer.from(bytes.body.result as string, 'base64').equals(Buffer.concat([0, 1, 2, 3].map((p) => Buffer.alloc(300_000, p))))).toBe(true);
    const json = await http(server.url, 'GET', '/v1/jobs/big-json/result?wait=20s');
    expect((json.body.result as string[]).map((s) => s.length)).toEqual([300_000, 300_000, 300_000, 300_000]);
    // Views and lists: the size, no result (JSON text: 4 × 300,002 characters, the commas and brackets).
    const view = await http(server.url, 'GET', '/v1/jobs/big-bytes');
    // (Left out, a bytes result still says it is bytes: a client knows how to ask …/result for it.)
    expect(view.body).toMatchObject({ state: 'done', result: null, resultOmittedBytes: 1_200_000, resultEncoding: 'base64' });
    expect((await http(server.url, 'GET', '/v1/jobs/big-json')).body).toMatchObject({ result: null, resultOmittedBytes: 4 * 300_002 + 5 });
    expect((await http(server.url, 'GET', '/v1/jobs/big-json')).body).not.toHaveProperty('resultEncoding');
    const list = await http(server.url, 'GET', '/v1/jobs?limit=1000');
    const listed = (list.body as { id: string; result: unknown; resultOmittedBytes?: number }[]).filter((j) => j.id.startsWith('big-'));
    expect(listed.map((j) => [j.id, j.result, j.resultOmittedBytes])).toEqual([['big-json', null, 4 * 300_002 + 5], ['big-bytes', null, 1_200_000]]);
    expect(JSON.stringify(list.body).length).toBeLessThan(200_000);
    // The job's event stream of an ended job: progress, then end with its view, and it closes.
    const stream = await (await fetch(new URL('/v1/jobs/big-json/events', server.url))).text();
    const end = stream.split('\n\n').find((b) => b.includes('event: end'));
    expect(JSON.parse(end?.split('\n').find((l) => l.startsWith('data: '))?.slice(6) ?? 'null')).toMatchObject({ type: 'end', job: { result: null, resultOmittedBytes: 4 * 300_002 + 5 } });
    // One over 64 KiB but under 1 MiB: in its view, not in lists (1,000 jobs of such results were a 300 MB list).
    await http(server.url, 'POST', '/v1/jobs', { id: 'mid-bytes', kind: 'probe', input: { items: 1, mode: 'large' } });
    await http(server.url, 'POST', '/v1/jobs', { id: 'mid-json', kind: 'probe', input: { items: 1, mode: 'large-json' } });
    for (const id of ['mid-bytes', 'mid-json']) await http(server.url, 'GET', `/v1/jobs/${id}/result?wait=20s`);
    expect((await http(server.url, 'GET', '/v1/jobs/mid-bytes')).body).toMatchObject({ resultEncoding: 'base64', result: Buffer.alloc(300_000, 0).toString('base64') });
    expect(((await http(server.url, 'GET', '/v1/jobs/mid-json')).body.result as string[])[0]).toHaveLength(300_000);
    const mids = ((await http(server.url, 'GET', '/v1/jobs?limit=1000')).body as Record<string, unknown>[]).filter((j) => String(j['id']).startsWith('mid-'));
    expect(mids.map((j) => [j['id'], j['result'], j['resultOmittedBytes'], j['resultEncoding']])).toEqual([['mid-json', null, 300_002 + 2, undefined], ['mid-bytes', null, 300_000, 'base64']]);
    // A smaller result stays in the view.
    await http(server.url, 'POST', '/v1/jobs', { id: 'small-bytes', kind: 'probe', input: { items: 2, mode: 'bytes' } });
    await http(server.url, 'GET', '/v1/jobs/small-bytes/result?wait=20s');
    expect((await http(server.url, 'GET', '/v1/jobs/small-bytes')).body).toMatchObject({ resultEncoding: 'base64', result: Buffer.from([0, 1, 2, 1, 2, 3]).toString('base64') });
    // stoker wait -o: the bytes to the file, the answer without them.
    const out = path.join(dir, 'big.bin');
    const w = await run(['wait', 'big-bytes', '--server', server.url, '-o', out]);
    expect(w.code, w.stderr).toBe(0);
    expect(fs.readFileSync(out).equals(Buffer.from(bytes.body.result as string, 'base64'))).toBe(true);
    expect(w.stderr).toBe(`wrote ${out}: 1200000 bytes (the result's bytes)\n`);
    const printed = JSON.parse(w.stdout) as Record<string, unknown>;
    expect(printed).toMatchObject({ id: 'big-bytes', state: 'done', resultFile: out, resultBytes: 1_200_000 });
    expect(printed).not.toHaveProperty('result');
    // A JSON result: as JSON text.
    const outJson = path.join(dir, 'big.json');
    const wj = await run(['wait', 'big-json', '--server', server.url, '-o', outJson]);
    expect(wj.code, wj.stderr).toBe(0);
    expect((JSON.parse(fs.readFileSync(outJson, 'utf8')) as string[]).map((x) => x.length)).toEqual([300_000, 300_000, 300_000, 300_000]);
    expect(wj.stderr).toMatch(/^wrote .*big\.json: \d+ bytes \(the result as JSON\)\n$/);
    expect(JSON.parse(wj.stdout)).toMatchObject({ id: 'big-json', state: 'done', resultFile: outJson, resultBytes: fs.statSync(outJson).size });
    expect(JSON.parse(wj.stdout)).not.toHaveProperty('result');
  });

  it('keeps a bytes output that is a view of the pooled buffer as it was (the buffer is reused)', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'v1', kind: 'probe', input: { items: 6, mode: 'view' } });
    const r = await http(server.url, 'GET', '/v1/jobs/v1/result?wait=20s');
    expect(r.body.state).toBe('done');
    expect([...Buffer.from(r.body.result as string, 'base64')]).toEqual([1, 2, 3, 4, 5, 6].flatMap((p) => [p, p, p, p]));
  });

  it('a result the journal cannot hold (bytes inside JSON) fails the job with E_FINISH_FAILED; the server stays up', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'n1', kind: 'probe', input: { items: 2, mode: 'nested' } });
    const r = await http(server.url, 'GET', '/v1/jobs/n1/result?wait=20s');
    expect(r.body).toMatchObject({ state: 'failed', error: { code: 'E_FINISH_FAILED', reason: expect.stringMatching(/its result cannot be stored: .*bytes at "first": bytes may only be the whole value/) } });
    expect((await http(server.url, 'GET', '/v1/status')).status).toBe(200);
  });

  it('stoker submit leaves -n out for a kind that derives its partitions from its input', async () => {
    const r = await run(['submit', '--server', server.url, '-k', 'probe', '--id', 'no-n', '--input', '{"items":3}']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^accepted: no-n \((queued|running)\)\n$/);
    expect((await http(server.url, 'GET', '/v1/jobs/no-n')).body).toMatchObject({ partitions: 3 });
  });

  it('a partition output the journal cannot hold (bytes inside JSON) fails its job, naming the output; the server stays up', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'n2', kind: 'probe', input: { items: 2, mode: 'nested-output' } });
    const r = await http(server.url, 'GET', '/v1/jobs/n2/result?wait=20s');
    expect(r.body).toMatchObject({ state: 'failed', error: { code: 'E_DEVICE_FAILED', reason: expect.stringMatching(/the output of partition \d of job "n2" is not JSON-serialisable .*bytes at "bytes"/) } });
    expect((await http(server.url, 'GET', '/v1/status')).status).toBe(200);
    // What JSON would change without a word — a Map into {}, NaN into null — fails it too (it was stored so).
    await http(server.url, 'POST', '/v1/jobs', { id: 'm2', kind: 'probe', input: { items: 1, mode: 'map-output' } });
    expect((await http(server.url, 'GET', '/v1/jobs/m2/result?wait=20s')).body).toMatchObject({ state: 'failed', error: { reason: expect.stringMatching(/a Map at "counts", which JSON would store as \{\}: return an object \(Object.fromEntries\(map\)\)/) } });
    const events = await collectEvents(server.url);
    const before = metricValue((await http(server.url, 'GET', '/metrics')).body as string, 'stoker_step_failures_total', { kind: 'probe', stage: 'device' });
    await http(server.url, 'POST', '/v1/jobs', { id: 'nan2', kind: 'probe', input: { items: 1, mode: 'nan-output' } });
    const nan = (await http(server.url, 'GET', '/v1/jobs/nan2/result?wait=20s')).body;
    expect(nan).toMatchObject({ state: 'failed', error: { reason: expect.stringMatching(/NaN at "score", which JSON would store as null/) } });
    // At once: the same output again would fail the same way (it was run again, "after 2 attempts").
    expect(nan.error.reason).not.toMatch(/attempts/);
    // Every failed step is logged, counted and sent as an event (a retried one leaves no other trace).
    expect(server.output()).toMatch(/stoker serve: job "nan2" \(kind "probe"\) partition 0 failed on device "default"\/\d \(attempt 1\): .*NaN at "score".* — its job fails\n/);
    expect(metricValue((await http(server.url, 'GET', '/metrics')).body as string, 'stoker_step_failures_total', { kind: 'probe', stage: 'device' })).toBe(before + 1);
    const failed = await waitUntil(async () => events.events.find((e) => e.type === 'step.failed' && e.id === 'nan2'), 5000, 'the step.failed event');
    await events.close();
    expect(failed).toMatchObject({ partition: 0, stage: 'device', device: 'default', attempt: 1, retried: false, reason: expect.stringMatching(/NaN at "score"/) });
  });

  it('a prepared value or an output that cannot be sent between threads (a function) fails its job at once, saying what to return; the device thread lives on', async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'f1', kind: 'probe', input: { items: 1, mode: 'function-output' } });
    const out = await http(server.url, 'GET', '/v1/jobs/f1/result?wait=20s');
    expect(out.body).toMatchObject({ state: 'failed', error: { code: 'E_DEVICE_FAILED', reason: expect.stringMatching(/its output could not be sent from the device thread \(.*could not be cloned.*\): return plain data/) } });
    await http(server.url, 'POST', '/v1/jobs', { id: 'f2', kind: 'probe', input: { items: 1, mode: 'function-prepared' } });
    const prepared = await http(server.url, 'GET', '/v1/jobs/f2/result?wait=20s');
    expect(prepared.body).toMatchObject({ state: 'failed', error: { code: 'E_PREPARE_FAILED', reason: expect.stringMatching(/prepare returned a value that cannot be sent between threads: the prepared value \(a function\): return plain data/) } });
    // At once: the same step would return the same value (they were retried).
    for (const r of [out, prepared]) expect((r.body as { error: { reason: string } }).error.reason).not.toMatch(/after \d+ attempts/);
    // The device thread still runs steps.
    await http(server.url, 'POST', '/v1/jobs', { id: 'f3', kind: 'probe', input: { items: 2 } });
    expect((await http(server.url, 'GET', '/v1/jobs/f3/result?wait=20s')).body.state).toBe('done');
  });

  it("fires a withdrawn preparation's ctx.signal in its thread", async () => {
    await http(server.url, 'POST', '/v1/jobs', { id: 'h1', kind: 'probe', input: { items: 2, mode: 'hang', markerDir: markers } });
    await waitUntil(async () => ((await http(server.url, 'GET', '/v1/jobs/h1')).body.state === 'running' ? true : undefined), 10_000, 'h1 running');
    expect((await http(server.url, 'DELETE', '/v1/jobs/h1')).body.state).toBe('cancelled');
    const seen = await waitUntil(async () => {
      const files = fs.readdirSync(markers).sort();
      return files.length === 2 ? files : undefined;
    }, 10_000, 'both preparations to see their signal');
    expect(seen).toEqual(['aborted-0', 'aborted-1']);
    expect(fs.readFileSync(path.join(markers, 'aborted-0'), 'utf8')).toBe('true');
  });
});

it("a prepared value that cannot be sent fails its own job only, not another job's preparations on the same thread", async () => {
  // One preparation thread, no retries: g1's two preparations are in flight on it when g2's
  // returns a function. The pool posting that value crashed the thread, and g1 failed with "its
  // thread gave no reason" (a user trial: 1 run in 5; with a retry, the retry was spent).
  const dir = tempDataDir();
  const s = await startServer(dir, ['--kind', PROBE], { STOKER_PREPARE_THREADS: '1', STOKER_ENGINE_RETRIES: '0' });
  try {
    await http(s.url, 'POST', '/v1/jobs', { id: 'g1', kind: 'probe', input: { items: 2, mode: 'slow', delayMs: 1000 } });
    await waitUntil(async () => ((await http(s.url, 'GET', '/v1/jobs/g1')).body.state === 'running' ? true : undefined), 10_000, 'g1 running');
    await http(s.url, 'POST', '/v1/jobs', { id: 'g2', kind: 'probe', input: { items: 1, mode: 'function-prepared' } });
    expect((await http(s.url, 'GET', '/v1/jobs/g2/result?wait=20s')).body).toMatchObject({ state: 'failed', error: { reason: expect.stringMatching(/\(a function\)/) } });
    expect((await http(s.url, 'GET', '/v1/jobs/g1/result?wait=20s')).body).toMatchObject({ state: 'done' });
  } finally {
    await s.stop();
    removeDir(dir);
  }
});

it('a job whose partitions need more than the whole memory budget is refused at submit (400 naming the input and engine.budgetBytes), not accepted and failed', async () => {
  // The probe kind's partitions need max(1000, 10) bytes; the budget is 999.
  const dir = tempDataDir();
  const s = await startServer(dir, ['--kind', PROBE], { STOKER_ENGINE_BUDGET_BYTES: '999' });
  try {
    const r = await http(s.url, 'POST', '/v1/jobs', { id: 'big', kind: 'probe', input: { items: 1 } });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual([{ path: 'input', message: expect.stringMatching(/^each partition of this input needs 1000 bytes .*more than the whole memory budget, engine\.budgetBytes = 999: raise engine\.budgetBytes, or submit smaller partitions$/) }]);
    expect((await http(s.url, 'GET', '/v1/jobs/big')).status).toBe(404);
  } finally {
    await s.stop();
    removeDir(dir);
  }
});

it('the same body sent again is the same job after the kind changed its defaults or its schema, or is not loaded (it read as another body: 409, or failed the new schema: 400)', async () => {
  const dir = tempDataDir();
  const kind = path.join(dir, 'thumb.mjs');
  const version = (props: string, required: string) =>
    fs.writeFileSync(kind, `export const name = 'thumb';\nexport const input = { type: 'object', additionalProperties: false, properties: { ${props} }, required: [${required}] };\nexport const prepare = (input) => new Promise((r) => setTimeout(() => r(input), 30_000));\nexport const run = (x) => x;\n`);
  const body = { id: 'j1', kind: 'thumb', partitions: 1, input: { image: 'a' } };
  try {
    version(`image: { type: 'string' }, size: { type: 'integer', default: 128 }`, `'image'`);
    const first = await startServer(dir, ['--kind', kind]);
    expect((await http(first.url, 'POST', '/v1/jobs', body)).status).toBe(202);
    await first.crash();
    for (const [props, required, other, said, hold] of [
      // Another default: the job resumes on this version (its stored input keeps the default it was given), and the start says so.
      [`image: { type: 'string' }, size: { type: 'integer', default: 256 }`, `'image'`, { image: 'b' }, "stoker serve: 1 unfinished job was accepted under another version of kind thumb's module: it resumes with this one, the partitions done before keeping the outputs of the old", undefined],
      // A new required field its input lacks: on hold (its prepare would run on an input it refuses).
      [`image: { type: 'string' }, fmt: { type: 'string' }, size: { type: 'integer', default: 128 }`, `'image', 'fmt'`, { image: 'a', fmt: 'png' }, "stoker serve: 1 unfinished job accepted under another version of its kind's module has an input the version loaded now refuses (its view says why)", `its input does not pass kind "thumb"'s module as loaded now, a version other than the one that accepted it (input.fmt:`],
    ] as const) {
      version(props, required);
      const s = await startServer(dir, ['--kind', kind]);
      try {
        await waitUntil(async () => (s.output().includes(said) ? true : undefined), 5000, 'the note');
        const again = await http(s.url, 'POST', '/v1/jobs', body);
        expect(again).toMatchObject({ status: 200, body: { id: 'j1', input: { image: 'a', size: 128 } } });
        if (hold === undefined) expect(again.body.onHold).toBeUndefined();
        else expect(again.body.onHold).toContain(hold);
        // Another body (valid for this version) under the same id is still a conflict.
        expect((await http(s.url, 'POST', '/v1/jobs', { ...body, input: other })).status).toBe(409);
      } finally {
        await s.crash();
      }
    }
    const without = await startServer(dir, []);
    try {
      expect(await http(without.url, 'POST', '/v1/jobs', body)).toMatchObject({ status: 200, body: { id: 'j1', onHold: expect.stringContaining('is not loaded') } });
    } finally {
      await without.crash();
    }
  } finally {
    removeDir(dir);
  }
});

it('a job resumed under the module that accepted it is not checked again: its stored input, defaults filled in, may not pass a schema with if/then beside its defaults (it was held for good)', async () => {
  const dir = tempDataDir();
  const kind = path.join(dir, 'ift.mjs');
  fs.writeFileSync(kind, "export const name = 'ift';\nexport const input = { type: 'object', properties: { mode: { type: 'string', default: 'fast' }, n: { type: 'integer' } }, if: { properties: { mode: { const: 'fast' } }, required: ['mode'] }, then: { required: ['n'] } };\nexport const prepare = (input) => new Promise((r) => setTimeout(() => r(input), 30_000));\nexport const run = (x) => x;\n");
  try {
    const first = await startServer(dir, ['--kind', kind]);
    expect(await http(first.url, 'POST', '/v1/jobs', { id: 'ift-1', kind: 'ift', partitions: 1, input: {} })).toMatchObject({ status: 202, body: { input: { mode: 'fast' } } });
    await first.crash();
    const second = await startServer(dir, ['--kind', kind]);
    try {
      expect(second.output()).toContain('1 unfinished job resumed');
      expect((await http(second.url, 'GET', '/v1/jobs/ift-1')).body.onHold).toBeUndefined();
    } finally {
      await second.crash();
    }
  } finally {
    removeDir(dir);
  }
});

it('a journaled job whose partitions need more than a budget lowered since is on hold, not failed: it resumes on a start with the budget back', async () => {
  // The probe kind's partitions need max(1000, 10) bytes.
  const dir = tempDataDir();
  try {
    const first = await startServer(dir, ['--kind', PROBE], { STOKER_ENGINE_BUDGET_BYTES: '4000', STOKER_PREPARE_THREADS: '1' });
    await http(first.url, 'POST', '/v1/jobs', { id: 'hold-1', kind: 'probe', input: { items: 2 } });
    await first.crash();
    const second = await startServer(dir, ['--kind', PROBE], { STOKER_ENGINE_BUDGET_BYTES: '999' });
    try {
      await waitUntil(async () => (second.output().includes('more memory per partition') ? true : undefined), 5000, 'the note');
      expect(second.output()).toContain('stoker serve: 1 unfinished job needs more memory per partition than the whole budget, engine.budgetBytes = 999 (up to 1000 bytes): left as it is, to resume once the server starts with a budget of at least 1000; cancel it to end it');
      expect((await http(second.url, 'GET', '/v1/jobs/hold-1')).body).toMatchObject({ error: null, onHold: expect.stringContaining('each of its partitions needs 1000 bytes, more than the whole memory budget, engine.budgetBytes = 999') });
    } finally {
      await second.crash();
    }
    const third = await startServer(dir, ['--kind', PROBE], { STOKER_ENGINE_BUDGET_BYTES: '4000' });
    try {
      expect((await http(third.url, 'GET', '/v1/jobs/hold-1/result?wait=20s')).body).toMatchObject({ state: 'done' });
    } finally {
      await third.crash();
    }
  } finally {
    removeDir(dir);
  }
});

it('a journaled job whose kind module is no longer given waits, untouched, for a start with it (the start line says so); the others resume', async () => {
  const dir = tempDataDir();
  try {
    const first = await startServer(dir, ['--kind', PROBE]);
    await http(first.url, 'POST', '/v1/jobs', { id: 'orphan', kind: 'probe', input: { items: 2 } });
    await http(first.url, 'POST', '/v1/jobs', { id: 'orphan-2', kind: 'probe', input: { items: 1 } });
    await http(first.url, 'POST', '/v1/jobs', { id: 'kept', kind: 'sleep', partitions: 1, input: { prepareMs: 60_000 } });
    await first.crash();
    // Restarted without --kind (before, its jobs failed E_UNKNOWN_KIND for good), room for 2 pending jobs.
    const second = await startServer(dir, [], { STOKER_SERVER_MAX_PENDING_JOBS: '2' });
    try {
      await waitUntil(async () => (second.output().includes('has not loaded') ? true : undefined), 5000, 'the note');
      expect(second.output()).toContain('1 unfinished job resumed');
      expect(second.output()).toContain("stoker serve: 2 unfinished jobs are of a kind this server has not loaded (probe: 2): left as they are, to resume once the server starts with its module (--kind FILE, or [kinds.NAME] in the config); cancel them to end them");
      expect((await http(second.url, 'GET', '/v1/jobs/kept')).body).toMatchObject({ state: 'running', resumes: 1 });
      expect((await http(second.url, 'GET', '/v1/jobs/orphan')).body).toMatchObject({ error: null, resumes: 0, onHold: expect.stringMatching(/^its kind "probe" is not loaded on this server: it resumes on a start with its module .*; cancel it to end it$/) });
      expect((await http(second.url, 'GET', '/v1/jobs/kept')).body.onHold).toBeUndefined();
      // Its result is asked for: answered at once (nothing here ends it), saying why.
      const t0 = performance.now();
      expect(await http(second.url, 'GET', '/v1/jobs/orphan/result?wait=20s')).toMatchObject({ status: 202, body: { onHold: expect.stringContaining('is not loaded') } });
      expect(performance.now() - t0).toBeLessThan(10_000);
      expect((await http(second.url, 'GET', '/v1/status')).body.jobs).toMatchObject({ pending: 3, onHold: 2 });
      // A gauge too: an alert on stuck running jobs tells them apart.
      expect(metricValue(await fetch(new URL('/metrics', second.url)).then((r) => r.text()), 'stoker_jobs_on_hold', {})).toBe(2);
      // The waiting ones do not count against server.maxPendingJobs: 'kept' and one more fit.
      expect((await http(second.url, 'POST', '/v1/jobs', { id: 'new', kind: 'sleep', partitions: 1, input: { prepareMs: 1 } })).status).toBe(202);
      // One is cancelled meanwhile: it ends so.
      expect((await http(second.url, 'DELETE', '/v1/jobs/orphan-2')).body).toMatchObject({ state: 'cancelled' });
    } finally {
      await second.crash();
    }
    const third = await startServer(dir, ['--kind', PROBE]);
    try {
      const orphan = await http(third.url, 'GET', '/v1/jobs/orphan/result?wait=20s');
      expect(orphan.body).toMatchObject({ state: 'done' });
      expect((await http(third.url, 'GET', '/v1/jobs/orphan-2')).body).toMatchObject({ state: 'cancelled' });
      expect(third.output()).not.toContain('has not loaded');
    } finally {
      await third.crash();
    }
  } finally {
    removeDir(dir);
  }
});

describe('bad kind modules are refused at start', () => {
  let dir: string;
  const write = (file: string, text: string) => {
    const p = path.join(dir, file);
    fs.writeFileSync(p, text);
    return p;
  };
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-kinds-'));
  });
  afterAll(() => removeDir(dir));

  const ok = 'export const name = "k"; export async function prepare() { return 1; } export function run(p) { return p; }';
  const cases: [file: string, source: string | null, exportName: string | undefined, message: RegExp][] = [
    ['missing.mjs', null, undefined, /file not found: check the path/],
    // A package or a file it imports that is missing is not the module itself: Node's message (it said "file not found: check the path").
    ['missing-package.mjs', `import "no-such-package-here"; ${ok}`, undefined, /does not load: Cannot find package 'no-such-package-here' imported from .*missing-package\.mjs/],
    ['missing-import.mjs', `import "./no-such-tokenizer.mjs"; ${ok}`, undefined, /does not load: Cannot find module '.*no-such-tokenizer\.mjs' imported from .*missing-import\.mjs/],
    ['syntax.mjs', 'export const name = ;', undefined, /does not load: Unexpected token ';', at\n.*syntax.mjs:1\nexport const name = ;\n +\^/],
    ['throws.mjs', 'throw new Error("no GPU here");', undefined, /does not load: no GPU here/],
    // Nothing left to settle it: Node exited with code 0 and no word (a supervisor saw a clean stop).
    ['await-never.mjs', `await new Promise(() => {}); ${ok}`, undefined, /does not load: its top-level await never settles/],
    ['no-name.mjs', 'export async function prepare() {} export function run() {}', 'name', /missing: export const name = "my-kind"/],
    ['bad-name.mjs', 'export const name = "has space"; export async function prepare() {} export function run() {}', 'name', /got "has space"/],
    ['no-prepare.mjs', 'export const name = "k"; export function run() {}', 'prepare', /missing: export async function prepare\(input, ctx\)/],
    ['prepare-value.mjs', 'export const name = "k"; export const prepare = 3; export function run() {}', 'prepare', /must be a function \(got number\)/],
    ['no-run.mjs', 'export const name = "k"; export async function prepare() {}', 'run', /missing: export async function run\(prepared, ctx\) .*; or, where a process or an HTTP endpoint does the step, its device "default" needs \[device\.process\] or \[device\.http\] in the config/],
    ['device-unknown.mjs', `${ok} export const device = "gpu9";`, 'device', /"gpu9" names no device: this server has "default"/],
    ['device-number.mjs', `${ok} export const device = 42;`, 'device', /42 names no device/],
    ['input-array.mjs', `${ok} export const input = [1];`, 'input', /must be a JSON Schema object/],
    ['input-bad.mjs', `${ok} export const input = { type: "nope" };`, 'input', /is not a valid JSON Schema/],
    ['memory-value.mjs', `${ok} export const memory = { prepareBytes: 1 };`, 'memory', /must be a function \(got object\)/],
    ['clash.mjs', 'export const name = "sleep"; export async function prepare() {} export function run() {}', 'name', /"sleep" is already the name of built-in sleep/],
    // A misspelt export is read by nothing (no finish, no schema): refused, with the name it is near.
    ['typo-finish.mjs', `${ok} export function finsh(outputs) { return outputs; }`, 'finsh', /is not an export stoker reads — did you mean finish\?/],
    ['typo-input.mjs', `${ok} export const inputs = { type: "object" };`, 'inputs', /did you mean input\?/],
    ['default-function.mjs', 'export default function () { return 1; }', 'default', /is a function: export the kind as named exports .* or as one default object/],
  ];

  // (Concurrently: each is a server start that fails, a second or so of one core.)
  it.concurrent.for(cases)('%s', async ([file, source, exportName, message], { expect }) => {
    const module = source === null ? path.join(dir, file) : write(file, source);
    const r = await run(['serve', '--port', '0', '--data', path.join(dir, `data-${file}`), '--kind', module]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stdout).not.toContain('listening');
    expect(r.stderr).toContain(`error: kind module ${module}${exportName ? `: export ${exportName}:` : ':'}`);
    expect(r.stderr).toMatch(message);
  });

  it('helper exports that only look like a kind export load (memo, buf, fn, devices, a constant runs)', async () => {
    const module = write('helpers.mjs', `${ok} export function memo() {} export const buf = 1; export const fn = () => 1; export const devices = ["a"]; export const runs = 3;`);
    const r = await run(['config', 'print', '--kind', module]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  });

  it('a [kinds.NAME] in the config file whose module has another name', async () => {
    write('named.mjs', ok);
    const config = write('stoker.toml', '[kinds.embed]\nmodule = "./named.mjs"\n');
    const r = await run(['serve', '--config', config, '--port', '0', '--data', path.join(dir, 'data-named')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`kind module ${path.join(dir, 'named.mjs')}: export name: is "k" but the config calls it [kinds.embed]`);
  });

  it("a [kinds.NAME] module that is not there: the config's field, and what its path is taken from", async () => {
    const config = write('gone.toml', '[kinds.gone]\nmodule = "./gone.mjs"\n');
    const r = await run(['serve', '--config', config, '--port', '0', '--data', path.join(dir, 'data-gone')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`kind module ${path.join(dir, 'gone.mjs')}: file not found: fix [kinds.gone] module (a relative path in a config file is taken from that file's folder`);
  });

  it('the same module twice', async () => {
    const module = write('twice.mjs', ok);
    const r = await run(['serve', '--port', '0', '--data', path.join(dir, 'data-twice'), '--kind', module, '--kind', module]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/export name: is given twice \(as \[kinds\.k\] in the config and --kind, say\): give it once/);
    // Two modules of one name: a clash.
    const other = write('twice-2.mjs', ok);
    const clash = await run(['serve', '--port', '0', '--data', path.join(dir, 'data-twice'), '--kind', module, '--kind', other]);
    expect(clash.stderr).toMatch(/export name: "k" is already the name of .*twice\.mjs: give each kind its own name/);
  });

  it('config print names --kind modules by their own name, and loads back the same', async () => {
    const module = write('printed.mjs', ok.replace('"k"', '"printed"'));
    const r = await run(['config', 'print', '--kind', module]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`[kinds.printed]\nmodule = ${JSON.stringify(module)}\n`);
    const file = write('printed.toml', r.stdout);
    const again = await run(['config', 'print', '--config', file]);
    expect(again.stdout).toBe(r.stdout);
    // What serve says of a module at start, config print says too (a config is checked with it before a deploy).
    const typo = write('typo.mjs', `${ok.replace('"k"', '"typo"')} export const input = { type: 'object', propertis: {} };`);
    const warned = await run(['config', 'print', '--kind', typo]);
    expect(warned.code, warned.stderr).toBe(0);
    expect(warned.stderr).toMatch(/^stoker config print: warning: kind module .*typo\.mjs: export input: input: unknown keyword "propertis"/m);
  });
});

describe('deadlines', () => {
  let server: ServerProcess;
  let dir: string;
  beforeAll(async () => {
    dir = tempDataDir();
    server = await startServer(dir);
  });
  afterAll(async () => {
    await server?.stop();
    removeDir(dir);
  });

  it('a deadline that has passed is refused at submit, naming the field and the time', async () => {
    const r = await http(server.url, 'POST', '/v1/jobs', { kind: 'sleep', partitions: 1, deadline: '2000-01-01T00:00:00Z' });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual([{ path: 'deadline', message: expect.stringMatching(/^deadline 2000-01-01T00:00:00\.000Z has passed \(now \d{4}-.*Z\): give a time in the future, or leave deadline out$/) }]);
    // Epoch seconds (Python's int(time.time()) + 3600) read as ms: a day in 1970, said so.
    const seconds = Math.floor(Date.now() / 1000) + 3600;
    const s = await http(server.url, 'POST', '/v1/jobs', { kind: 'sleep', partitions: 1, deadline: seconds });
    expect(s.status).toBe(400);
    expect(s.body.errors[0].message).toMatch(new RegExp(`^deadline 1970-.* has passed \\(now .*\\) — ${seconds} looks like epoch seconds: deadline is epoch milliseconds \\(× 1000\\): give a time in the future`));
  });

  it('a job that misses its deadline fails with the deadline as an ISO time; its retry answers as before', async () => {
    const deadline = new Date(Date.now() + 800).toISOString();
    const body = { id: 'late-1', kind: 'sleep', partitions: 1, input: { prepareMs: 5000 }, deadline };
    expect((await http(server.url, 'POST', '/v1/jobs', body)).status).toBe(202);
    const r = await http(server.url, 'GET', '/v1/jobs/late-1/result?wait=10s');
    expect(r.body).toMatchObject({ state: 'failed', error: { code: 'E_DEADLINE', reason: `job late-1 missed its deadline ${deadline}` } });
    // The same body again, its deadline now past: the existing job, not a 400.
    const again = await http(server.url, 'POST', '/v1/jobs', body);
    expect(again.status).toBe(200);
    expect(again.body.state).toBe('failed');
  });
});

it('a full journal (journal.maxBytes) answers submits 507 and keeps going: the jobs it accepted record their ends past the cap and finish (capped too, they stayed running for good); a restart on it starts and answers 507', async () => {
  const dir = tempDataDir();
  const conf = path.join(dir, 'small.toml');
  fs.writeFileSync(conf, '[journal]\nmaxBytes = 65536\n');
  const pad = 'x'.repeat(6000);
  const accepted: string[] = [];
  let full: Awaited<ReturnType<typeof http>> | undefined;
  const s = await startServer(dir, ['--config', conf, '--kind', DOUBLER]);
  try {
    for (let i = 0; i < 60 && !full; i++) {
      const r = await http(s.url, 'POST', '/v1/jobs', { id: `f${i}`, kind: 'doubler', partitions: 2, input: { base: i, pad } });
      if (r.status === 202) accepted.push(`f${i}`);
      else full = r;
    }
    expect(full?.status).toBe(507);
    expect(full?.headers.get('retry-after')).toBe('5');
    expect(full?.body).toMatchObject({ type: 'https://stoker.dev/problems/insufficient-storage', detail: expect.stringMatching(/the journal is full: it reached journal\.maxBytes \(65536 bytes.*raise journal\.maxBytes, or let finished jobs be purged sooner \(server\.resultTtlS\).*nothing was accepted; retry later \(once the journal takes writes again: \/readyz says when\)/) });
    // The operator sees it: a line on stderr (within the second) and a counter to alert on.
    await waitUntil(async () => (/stoker serve: the journal is full: it reached journal\.maxBytes .* journal writes refused \(a submission it cannot write gets 507.* — raise journal\.maxBytes, or let finished jobs be purged sooner/.test(s.output()) ? true : undefined), 5000, 'the journal-full line, with what to do');
    const metrics = await fetch(new URL('/metrics', s.url)).then((r) => r.text());
    // One 507, one refusal (a group that rolled back counted it again as its writes were made alone).
    expect(Number(/^stoker_journal_full_writes_total (\d+)$/m.exec(metrics)?.[1])).toBe(1);
    expect(accepted.length).toBeGreaterThan(2);
    // Not ready: a load balancer sends new jobs elsewhere (the only signs had been the 507s, a metric and a log line).
    const ready = await http(s.url, 'GET', '/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.why).toEqual([expect.stringMatching(/^the journal is full: .*: a submission it cannot write gets 507$/)]);
    // Every accepted job ends, done, with its result — no restart, no room made.
    for (const id of accepted) {
      const r = await http(s.url, 'GET', `/v1/jobs/${id}/result?wait=10s`);
      expect(r.body, id).toMatchObject({ state: 'done', result: [2 * Number(id.slice(1)), 2 * Number(id.slice(1)) + 2] });
    }
    expect(s.child.exitCode).toBeNull();
  } finally {
    await s.crash();
  }
  // Durable: in the file.
  const { default: Database } = await import('better-sqlite3');
  const db = new Database(path.join(dir, 'stoker.db'), { readonly: true, fileMustExist: true });
  const rows = new Map(db.prepare<[], { id: string; state: string }>('SELECT id, state FROM jobs').all().map((r) => [r.id, r.state]));
  db.close();
  expect(accepted.map((id) => rows.get(id))).toEqual(accepted.map(() => 'done'));
  // A restart on the still-full journal starts (it does not crash-loop), reads, and answers 507.
  const stillFull = await startServer(dir, ['--config', conf, '--kind', DOUBLER]);
  try {
    expect((await http(stillFull.url, 'GET', '/v1/status')).status).toBe(200);
    expect((await http(stillFull.url, 'POST', '/v1/jobs', { id: 'late', kind: 'doubler', partitions: 1, input: { pad } })).status).toBe(507);
    expect((await http(stillFull.url, 'GET', `/v1/jobs/${accepted[0]}`)).body.state).toBe('done');
  } finally {
    await stillFull.stop();
    removeDir(dir);
  }
}, 60_000);

it('a kind whose prepare computes on its thread is named on stderr, once, with the setting that lets priorities act (with concurrency 64, a critical job waited 15 s behind 52 queued in the thread); with concurrency 1 nothing is said', async () => {
  const modules = tempDataDir();
  const kind = path.join(modules, 'synth.mjs');
  fs.writeFileSync(kind, "export const name = 'synth';\nexport const prepare = (input) => { const end = performance.now() + 150; while (performance.now() < end); return input.n; };\nexport const run = (n) => n + 1;\n");
  const said = async (env: Record<string, string>) => {
    const dir = tempDataDir();
    const s = await startServer(dir, ['--kind', kind], env);
    try {
      for (let i = 0; i < 3; i++) expect((await http(s.url, 'POST', '/v1/jobs', { id: `s${i}`, kind: 'synth', partitions: 2, input: { n: i } })).status).toBe(202);
      for (let i = 0; i < 3; i++) expect((await http(s.url, 'GET', `/v1/jobs/s${i}/result?wait=20s`)).body).toMatchObject({ state: 'done', result: [i + 1, i + 1] });
      return s.output().split('\n').filter((l) => l.includes('computed on its preparation thread'));
    } finally {
      await s.stop();
      removeDir(dir);
    }
  };
  try {
    expect(await said({})).toEqual([expect.stringMatching(/^stoker serve: kind synth's prepare computed on its preparation thread for \d+ ms before it returned: with \[prepare\] concurrency = 64, .*give \[prepare\] concurrency = 1/)]);
    expect(await said({ STOKER_PREPARE_CONCURRENCY: '1' })).toEqual([]);
  } finally {
    removeDir(modules);
  }
}, 60_000);

/** Whether this machine can make a file immutable (chattr +i: root, on a file system that has the flag). */
function canChattr(): boolean {
  const dir = tempDataDir();
  const f = path.join(dir, 'probe');
  fs.writeFileSync(f, '');
  try {
    const set = spawnSync('chattr', ['+i', f]).status === 0;
    if (set) spawnSync('chattr', ['-i', f]);
    return set;
  } catch {
    return false;
  } finally {
    removeDir(dir);
  }
}

it.runIf(canChattr())('a journal that cannot be written (made immutable under the server, as a disk remounted read-only is) is taken as full: 507s naming the cause, not ready, said on stderr, accepted jobs kept in memory — and once it can be written again, every one is done (the server answered 500s, ready, then died of an uncaught SqliteError)', async () => {
  const dir = tempDataDir();
  const files = [dir, ...['stoker.db', 'stoker.db-wal', 'stoker.db.mark'].map((f) => path.join(dir, f))];
  const s = await startServer(dir, []);
  const accepted: string[] = [];
  /** Each accepted job's state in its view while the journal could not be written. */
  const viewed = new Map<string, string>();
  try {
    for (let i = 0; i < 6; i++) {
      const r = await http(s.url, 'POST', '/v1/jobs', { id: `u${i}`, kind: 'sleep', partitions: 2, input: { seed: i, prepareMs: 800 + 200 * i, deviceMs: 50 } });
      expect(r.status).toBe(202);
      accepted.push(`u${i}`);
    }
    expect(spawnSync('chattr', ['+i', ...files]).status).toBe(0);
    const refused = await waitUntil(async () => {
      const r = await http(s.url, 'POST', '/v1/jobs', { kind: 'sleep', partitions: 1, input: { seed: 99, prepareMs: 10, deviceMs: 10 } });
      return r.status === 507 ? r : undefined;
    }, 10_000, 'a submission refused');
    expect(refused.body.detail).toMatch(/^the journal cannot take the job \(the journal cannot be written: .* — its disk failed or was remounted read-only, or its files were made read-only: .* was not written — check the data dir's disk, its mount and the permissions of its files/);
    await waitUntil(async () => (/stoker serve: the journal cannot be written: .*journal writes refused/.test(s.output()) ? true : undefined), 5000, 'the line on stderr');
    const ready = await http(s.url, 'GET', '/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.why).toEqual([expect.stringMatching(/^the journal cannot be written: .*: a submission it cannot write gets 507$/)]);
    // Every accepted job runs to its end in memory: it reads done only once its end is durable.
    await waitUntil(async () => {
      const counts = await Promise.all(accepted.map(async (id) => (await http(s.url, 'GET', `/v1/jobs/${id}`)).body.partitionCounts?.done ?? 2));
      return counts.every((n) => n === 2) ? true : undefined;
    }, 20_000, 'every partition done');
    for (const id of accepted) viewed.set(id, (await http(s.url, 'GET', `/v1/jobs/${id}`)).body.state as string);
    expect([...viewed.values()].every((st) => st === 'running' || st === 'queued')).toBe(true);
    // Listed and counted by state as each job's view says (a start the journal could not record: its row says queued).
    const counted = (await http(s.url, 'GET', '/v1/status')).body.jobs as Record<string, number>;
    for (const state of ['queued', 'running']) {
      const listed = ((await http(s.url, 'GET', `/v1/jobs?state=${state}&limit=1000`)).body as { id: string; state: string }[]).filter((j) => accepted.includes(j.id));
      expect(listed.map((j) => j.id).sort(), state).toEqual(accepted.filter((id) => viewed.get(id) === state).sort());
      expect(counted[state], state).toBe(listed.length);
    }
    expect(s.child.exitCode).toBeNull();
  } finally {
    spawnSync('chattr', ['-i', ...files]);
  }
  try {
    // Writable again: the ends kept land, the server is ready and takes jobs — nothing to restart.
    for (const id of accepted) expect((await http(s.url, 'GET', `/v1/jobs/${id}/result?wait=15s`)).body, id).toMatchObject({ state: 'done' });
    await waitUntil(async () => ((await http(s.url, 'GET', '/readyz')).status === 200 ? true : undefined), 5000, 'ready again');
    expect((await http(s.url, 'POST', '/v1/jobs', { id: 'after', kind: 'sleep', partitions: 1, input: { seed: 1, prepareMs: 10, deviceMs: 10 } })).status).toBe(202);
    expect(s.output()).toMatch(/stoker serve: the journal takes writes again/);
  } finally {
    await s.stop();
    removeDir(dir);
  }
}, 60_000);

it('a partitions(input) answer out of range is the input’s 400 (too large or empty a job), a non-number the module’s 500', async () => {
  const { loadKind } = await import('../../src/server/kind-module.js');
  const { checkedByKind } = await import('../../src/server/submission.js');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-kind-'));
  try {
    const file = path.join(dir, 'rows-kind.mjs');
    fs.writeFileSync(file, "export const name = 'rows';\nexport const partitions = (input) => (input.bad ? 'many' : Math.ceil(input.rows / 1));\nexport async function prepare() { return 1; }\nexport function run(p) { return p; }\n");
    const kind = await loadKind(new URL(`file://${file}`).href);
    const status = (input: unknown) => {
      try {
        checkedByKind(kind, input, undefined);
        return 'accepted';
      } catch (e) {
        const err = e as { status: number; detail: string };
        return `${err.status} ${err.detail}`;
      }
    };
    expect(status({ rows: 10_000_000 })).toBe('400 input: kind rows refused the input: it makes 10000000 partitions of this input: more than 1000000, the most one job may have — split the work into several jobs');
    expect(status({ rows: 0 })).toBe('400 input: kind rows refused the input: it makes 0 partitions of this input: a job needs at least 1');
    expect(status({ bad: true })).toMatch(/^500 kind module .*rows-kind\.mjs: export partitions: returned "many": it must return a whole number from 1 to 1000000 — fix the kind module/);
    // (NaN read as "returned null".)
    expect(status({ rows: 'x' })).toMatch(/^500 kind module .*: export partitions: returned NaN: it must return/);
    expect(status({ rows: 3 })).toBe('accepted');
  } finally {
    removeDir(dir);
  }
});

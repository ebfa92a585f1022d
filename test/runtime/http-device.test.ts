/**
 * HTTP devices against a real HTTP server on a loopback port the OS picks: the prepared value is
 * POSTed, the response is the output, the busy time is the request's wall time; a refused
 * connection, a timeout, an error status and an oversized answer each fail the item with a reason
 * naming the worker, and the job once its retries are spent.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { freePort } from '../../src/cluster/redis-server.js';
import { HttpDevice, type HttpDeviceOptions } from '../../src/runtime/http-device.js';
import type { PartitionTask } from '../../src/runtime/runtime.js';
import type { PreparedBuffer } from '../../src/runtime/threaded.js';
import { batchingRuntimeOver, failure, runtimeOver, spec } from './device-helpers.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

/** A server whose handler sees each request with its body. */
async function serve(handler: (req: IncomingMessage, body: Buffer, res: ServerResponse) => void): Promise<string> {
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => handler(req, Buffer.concat(chunks), res));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/run`;
}

function setup(device: Partial<HttpDeviceOptions> & { url: string }, options: { workers?: number; retries?: number } = {}) {
  const workers = options.workers ?? 1;
  const dev = new HttpDevice({ name: 'infer', workers, ...device });
  const prepare = async (t: PartitionTask<{ bytes?: boolean }>): Promise<PreparedBuffer> => ({ meta: t.input.bytes ? Uint8Array.of(1, 2, 3, t.partition) : { p: t.partition } });
  const rt = runtimeOver(dev, prepare, { ...options, workers });
  closers.push(() => rt.close(1000));
  return rt;
}

describe('an HTTP device', () => {
  it('POSTs the prepared value with the item in headers; a JSON answer is the output, and the busy time is the request wall time', async () => {
    const seen: Record<string, unknown>[] = [];
    const url = await serve((req, body, res) => {
      seen.push({ job: req.headers['stoker-job'], kind: req.headers['stoker-kind'], partition: req.headers['stoker-partition'], partitions: req.headers['stoker-partitions'], type: req.headers['content-type'], body: JSON.parse(body.toString()) as unknown });
      // It claims 1 ms of compute but takes 120 ms to answer: the worker was occupied 120 ms.
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json', 'x-compute-ms': '1' }).end(JSON.stringify({ doubled: 2 * Number(req.headers['stoker-partition']) })), 120);
    });
    const rt = setup({ url }, { workers: 2 });
    await expect(rt.submit(spec('h1', 3), {})).resolves.toEqual([{ doubled: 0 }, { doubled: 2 }, { doubled: 4 }]);
    expect(seen.sort((a, b) => Number(a['partition']) - Number(b['partition']))).toEqual([0, 1, 2].map((p) => ({ job: 'h1', kind: 'k', partition: String(p), partitions: '3', type: 'application/json', body: { p } })));
    const c = rt.status().counters.devices[0];
    expect((c?.busyMs ?? 0) / (c?.completions ?? 1)).toBeGreaterThanOrEqual(115);
  });

  it('a prepared value JSON would change (an Int32Array inside it) fails its job at once, saying where, and is not sent (it was, as {"0":7,…}); in a batch only its item fails', async () => {
    const bodies: string[] = [];
    const url = await serve((req, body, res) => {
      bodies.push(body.toString());
      const items = req.headers['stoker-batch'] ? (JSON.parse(body.toString()) as { items: unknown[] }).items : null;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(items ? { results: items.map(() => ({ output: 'ok' })) } : 'ok'));
    });
    const prepare = async (t: PartitionTask<{ typed?: boolean }>): Promise<PreparedBuffer> => ({ meta: t.input.typed && t.partition === 1 ? { ids: Int32Array.of(7, 8, 9) } : { p: t.partition } });
    const rt = runtimeOver(new HttpDevice({ name: 'infer', workers: 1, url }), prepare, { workers: 1, retries: 1 });
    closers.push(() => rt.close(1000));
    const e = await failure(rt.submit(spec('t1', 2), { typed: true }));
    expect(e.message).toMatch(/partition 1 failed on device 0: the prepared value \(what prepare\(\) returned\) cannot be sent to the device as JSON: it holds bytes at "ids": bytes may only be the whole value/);
    expect(e.message).not.toMatch(/after 2 attempts/);
    expect(bodies.some((b) => b.includes('"ids"'))).toBe(false);
    const batching = batchingRuntimeOver<{ typed?: boolean }>(new HttpDevice({ name: 'infer', workers: 1, url }), prepare, 4);
    closers.push(() => batching.close(1000));
    const [good, bad] = await Promise.all([batching.submit(spec('g', 4), {}), failure(batching.submit(spec('t2', 3), { typed: true }))]);
    expect(good).toEqual(['ok', 'ok', 'ok', 'ok']);
    expect(bad.message).toMatch(/partition 1 failed on device 0: the prepared value .*it holds bytes at "ids"/);
    expect(bodies.some((b) => b.includes('"ids"'))).toBe(false);
  });

  it('bytes go as application/octet-stream, and a non-JSON answer is bytes', async () => {
    const url = await serve((req, body, res) => res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(Buffer.from([...body].reverse())));
    const rt = setup({ url });
    const [out] = (await rt.submit(spec('b1'), { bytes: true })) as Uint8Array[];
    expect([...(out as Uint8Array)]).toEqual([0, 3, 2, 1]);
  });

  const faults: [what: string, handler: ((req: IncomingMessage, body: Buffer, res: ServerResponse) => void) | 'refused', options: Partial<HttpDeviceOptions>, reason: RegExp][] = [
    ['a 5xx answer', (_q, _b, res) => res.writeHead(503, { 'content-type': 'text/plain' }).end('model is loading'), {}, /infer\/0: POST .* answered 503 Service Unavailable: model is loading/],
    ['a connection refused past unreachableMs', 'refused', { unreachableMs: 300 }, /infer\/0: POST .* failed: ECONNREFUSED: the endpoint has been unreachable for 0\.\d+ s \(waited for up to unreachableS = 0\.3 s\)/],
    ['no answer within timeoutMs', () => undefined, { timeoutMs: 300 }, /infer\/0: POST .* failed: no answer within 0.3 s \(timeoutS\)/],
    ['a web page answered 200', (_q, _b, res) => res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<html><body>Welcome to nginx!</body></html>'), {}, /infer\/0: POST .* answered 200 text\/html; charset=utf-8, a web page, not an output \("<html><body>Welcome to nginx!<\/body><\/html>"\): check \[device\.http\] url/],
    ['JSON that is not JSON', (_q, _b, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"oops'), {}, /answered application\/json that is not JSON: \{"oops/],
  ];
  it.each(faults)('%s fails the item; once retries are spent the job fails with the reason', async (_what, handler, options, reason) => {
    let requests = 0;
    // (A key in the URL is shown as *** in the reason: job errors are journalled and served.)
    const url = `${handler === 'refused' ? `http://127.0.0.1:${await freePort()}/run` : await serve((q, b, res) => (requests++, handler(q, b, res)))}?api_key=k3y`;
    const rt = setup({ url, ...options }, { retries: 1 });
    const e = await failure(rt.submit(spec('f1'), {}));
    expect(e.code).toBe('E_DEVICE_FAILED');
    expect(e.message).toMatch(reason);
    expect(e.message).toContain('?api_key=***');
    expect(e.message).not.toContain('k3y');
    expect(e.message).toMatch(/after 2 attempts/);
    if (handler !== 'refused') expect(requests).toBe(2);
    expect(rt.engine.budget.used).toBe(0);
  });
});

describe('an HTTP device error page that echoes the request', () => {
  it('shows the credentials it was sent as *** (the job error quoted the bearer token)', async () => {
    const url = await serve((req, _b, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`bad auth header ${String(req.headers.authorization)} for ${req.url}`));
    const rt = setup({ url: `${url}?api_key=q-s3cret-77`, headers: { Authorization: 'Bearer tok-s3cret-99' } }, { retries: 0 });
    const e = await failure(rt.submit(spec('echo'), {}));
    expect(e.message).toMatch(/answered 500 Internal Server Error: bad auth header \*\*\* for \/run\?api_key=\*\*\*/);
    expect(e.message).not.toMatch(/s3cret/);
  });
});

describe('an HTTP device error page holding a credential', () => {
  afterEach(() => {
    delete process.env['TEST_SERVICE_API_KEY'];
  });

  it('masks it before the excerpt is cut (a token across the cut kept its first characters), and masks the server’s own credential-named variables', async () => {
    const token = 'PADSECRETTOKEN0123456789abcdef';
    process.env['TEST_SERVICE_API_KEY'] = 'ENVSECRETVALUE777';
    for (const pad of [180, 190, 199]) {
      const url = await serve((_q, _b, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${'x'.repeat(pad)}${token} and ENVSECRETVALUE777`));
      const rt = setup({ url, headers: { Authorization: `Bearer ${token}` } }, { retries: 0 });
      const e = await failure(rt.submit(spec(`pad${pad}`), {}));
      expect(e.message).not.toMatch(/PADSEC|ENVSECRET/);
      expect(e.message).toContain(`${'x'.repeat(pad)}***`.slice(0, 200));
    }
  });

  it('masks the credentials of a redirect’s target too', async () => {
    const url = await serve((_q, _b, res) => res.writeHead(302, { location: 'https://other.example/v2?api_key=REDIRKEY1234567&n=1' }).end());
    const rt = setup({ url }, { retries: 0 });
    const e = await failure(rt.submit(spec('redir-key'), {}));
    expect(e.message).toContain('a redirect to https://other.example/v2?api_key=***&n=1');
  });
});

const haveOpenssl = spawnSync('openssl', ['version']).status === 0;

describe.skipIf(!haveOpenssl)('an HTTPS endpoint whose certificate the server does not trust', () => {
  it('says so and how to trust it (it said only DEPTH_ZERO_SELF_SIGNED_CERT)', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-https-device-'));
    closers.push(async () => fs.rmSync(dir, { recursive: true, force: true }));
    const [key, cert] = [path.join(dir, 'key.pem'), path.join(dir, 'cert.pem')];
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
    const server = createHttpsServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, (_q, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    closers.push(() => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))));
    const rt = setup({ url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/run` }, { retries: 0 });
    const e = await failure(rt.submit(spec('tls'), {}));
    expect(e.message).toMatch(/infer\/0: POST https:\/\/127\.0\.0\.1:\d+\/run failed: the endpoint's certificate is not trusted \(DEPTH_ZERO_SELF_SIGNED_CERT\): start the server with NODE_EXTRA_CA_CERTS=\/path\/ca\.pem naming its CA/);
  });
});

describe('an HTTP device answer with an integer a double rounds', () => {
  it('fails its job at once, naming the integer and where (an int64 id came back rounded, the job done)', async () => {
    let requests = 0;
    const url = await serve((_q, _b, res) => (requests++, res.writeHead(200, { 'content-type': 'application/json' }).end('{"ids":[1152921504606846976,18446744073709551617],"score":0.30000000000000004}')));
    const rt = setup({ url }, { retries: 2 });
    const e = await failure(rt.submit(spec('int64'), {}));
    expect(e.message).toMatch(/infer\/0: POST .* answered the integer 18446744073709551617 at \$\.ids\[1\], which stoker reads rounded \(as 18446744073709552000: JSON numbers are doubles here, whole numbers exact to 2\^53\): send it as a string$/);
    expect(requests).toBe(1);
  });
});

describe('an HTTP device endpoint that redirects', () => {
  it('is not followed: its job fails at once, naming where it pointed (a 302 became a GET whose answer was every output, a 307 sent the body and the credentials on)', async () => {
    for (const status of [302, 307]) {
      const seen: string[] = [];
      const url = await serve((req, _b, res) => {
        seen.push(`${req.method} ${req.url}`);
        if (req.url === '/run') return res.writeHead(status, { location: '/elsewhere' }).end();
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      });
      const rt = setup({ url, headers: { 'x-api-key': 'k-s3cret' } }, { retries: 2 });
      const e = await failure(rt.submit(spec(`r${status}`), {}));
      expect(e.message).toMatch(new RegExp(`infer/0: POST .*/run answered ${status} [A-Za-z ]+, a redirect to /elsewhere: stoker follows none \\(the prepared data and the configured headers would go where the answer says\\) — give the URL that answers in \\[device\\.http\\] url$`));
      expect(seen).toEqual(['POST /run']);
    }
  });
});

describe('an HTTP device answer over maxResponseBytes', () => {
  it('fails its job at once (it would come again), naming the setting to raise', async () => {
    let requests = 0;
    const url = await serve((_q, _b, res) => (requests++, res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(Buffer.alloc(4096))));
    const rt = setup({ url, maxResponseBytes: 1024 }, { retries: 2 });
    const e = await failure(rt.submit(spec('big'), {}));
    expect(e.message).toMatch(/infer\/0: POST .*: a response (of 4096 bytes is )?over the 1024-byte limit \(maxResponseBytes\): raise \[device\.http\] maxResponseBytes, or return less$/);
    expect(requests).toBe(1);
    expect(rt.engine.budget.used).toBe(0);
  });
});

describe('a 4xx answer of an HTTP device', () => {
  it('waits for an endpoint that refuses connections (down, restarting) and sends again once it answers; the busy time is the last request\'s', async () => {
    const port = await freePort();
    const lines: string[] = [];
    const rt = setup({ url: `http://127.0.0.1:${port}/run`, unreachableMs: 30_000, log: (l) => lines.push(l) }, { retries: 0, workers: 2 });
    const result = rt.submit(spec('w1', 3), {});
    // Down for about a second (refused), then up.
    await new Promise((r) => setTimeout(r, 1000));
    // Said once, at start (a connection tried when the device is made), not again by the steps refused after it.
    expect(lines).toEqual([expect.stringMatching(/^\[device infer\] http:\/\/127\.0\.0\.1:\d+\/run is unreachable \(ECONNREFUSED\): steps wait for it \(sent again every ≤ 5 s\) for up to 30 s \(unreachableS\)$/)]);
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ p: Number(req.headers['stoker-partition']) })), 20));
    });
    await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
    closers.push(() => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))));
    // With no retries: each item waited on its worker, none failed.
    await expect(result).resolves.toEqual([{ p: 0 }, { p: 1 }, { p: 2 }]);
    expect(lines[1]).toMatch(/^\[device infer\] http:\/\/127\.0\.0\.1:\d+\/run answers again: it was unreachable for \d+\.\d–\d+\.\d s \(to its last failure, and to this answer\)$/);
    expect(lines).toHaveLength(2);
    const c = rt.status().counters.devices[0];
    // (Each item's busy time is its answered request's, about 20 ms, not the second it waited.)
    expect((c?.busyMs ?? 0) / (c?.completions ?? 1)).toBeLessThan(500);
  });

  it('an endpoint not there is said when the device is made, shown as unreachable, and seen back with no step sent (a connection tried every 5 s)', async () => {
    const port = await freePort();
    const lines: string[] = [];
    const dev = new HttpDevice({ name: 'infer', workers: 1, url: `http://127.0.0.1:${port}/run`, log: (l) => lines.push(l) });
    closers.push(() => dev.close());
    await vi.waitFor(() => expect(dev.unreachable()).toEqual({ code: 'ECONNREFUSED', since: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) }));
    expect(lines).toEqual([expect.stringMatching(/is unreachable \(ECONNREFUSED\): steps wait for it/)]);
    const bound = await new Promise<string>((r) => {
      const server = createServer((_q, res) => res.end());
      server.listen(port, '127.0.0.1', () => r(String(port)));
      closers.push(() => new Promise((done) => (server.closeAllConnections(), server.close(() => done()))));
    });
    expect(bound).toBe(String(port));
    await vi.waitFor(() => expect(dev.unreachable()).toBeUndefined(), { timeout: 8000, interval: 100 });
    expect(lines[1]).toMatch(/^\[device infer\] http:\/\/127\.0\.0\.1:\d+\/run takes connections again: it was unreachable for \d+\.\d–\d+\.\d s/);
    // Refused once, then found back by the try 5 s later: up to 5 s unreachable (said as 0.0 s before).
    const [, upper] = /for [\d.]+–([\d.]+) s/.exec(lines[1] as string) ?? [];
    expect(Number(upper)).toBeGreaterThanOrEqual(4.9);
  });

  it('a step sent long into an outage no step saw (the endpoint down since the device was made, probed meanwhile) still waits its own unreachableS (it failed at once: the probes kept the outage fresh)', async () => {
    const rt = setup({ url: `http://127.0.0.1:${await freePort()}/run`, unreachableMs: 1500 }, { retries: 0 });
    await new Promise((r) => setTimeout(r, 2000));
    const t0 = performance.now();
    await failure(rt.submit(spec('late'), {}));
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1400);
  });

  it('an endpoint refused past unreachableS: the step fails once unreachableS is up (it failed at 7.8 s of 10, a pause before it), saying how long', async () => {
    const url = `http://127.0.0.1:${await freePort()}/run`;
    // (From the device's making: its first refusal, a connection tried then, starts the wait.)
    const t0 = performance.now();
    const rt = setup({ url, unreachableMs: 1300 }, { retries: 0 });
    const e = await failure(rt.submit(spec('u1'), {}));
    // Sent at 0, 0.25, 0.75 s, then at 1.3 s (not a 1 s pause past it, nor a failure at 0.75 s).
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1290);
    expect(e.message).toMatch(/the endpoint has been unreachable for 1\.\d s \(waited for up to unreachableS = 1\.3 s\)/);
  });

  it('a connection the server breaks after taking the request (an input that crashes it) fails the item: it is not sent again and again', async () => {
    let requests = 0;
    const url = await serve((req) => {
      requests++;
      req.socket.destroy();
    });
    const rt = setup({ url, unreachableMs: 30_000 }, { retries: 0 });
    const e = await failure(rt.submit(spec('crash1'), {}));
    // Said in words, the library's code after it (a user trial read "failed: UND_ERR_SOCKET" alone).
    expect(e.message).toMatch(/infer\/0: POST .* failed: the endpoint (closed|reset) the connection (before it answered|while the request was sent) \((UND_ERR_SOCKET|ECONNRESET|EPIPE)\)/);
    expect(requests).toBe(1);
  });

  it('a step withdrawn while it waits for an unreachable endpoint ends at once', async () => {
    const rt = setup({ url: `http://127.0.0.1:${await freePort()}/run`, unreachableMs: 60_000 }, { retries: 0 });
    const job = failure(rt.submit(spec('c1'), {}));
    await new Promise((r) => setTimeout(r, 600));
    const t0 = Date.now();
    rt.cancel('c1');
    expect((await job).code).toBe('E_CANCELLED');
    await rt.close(5000);
    expect(Date.now() - t0).toBeLessThan(3000);
  });

  it('fails its job at once (the same request would be refused again); a 408, 409 or 429 is retried', async () => {
    let requests = 0;
    const url = await serve((req, _b, res) => {
      requests++;
      const status = Number(req.headers['stoker-job']);
      res.writeHead(requests === 1 || status === 400 ? status : 200, { 'content-type': 'application/json' }).end(status === 400 ? '{"detail":"text is empty"}' : '{"ok":true}');
    });
    const rt = setup({ url }, { retries: 2 });
    const e = await failure(rt.submit(spec('400'), {}));
    expect(e.message).toMatch(/^job 400: partition 0 failed on device 0: infer\/0: POST .* answered 400 Bad Request: \{"detail":"text is empty"\}$/);
    expect(requests).toBe(1);
    for (const status of ['408', '409', '429']) {
      requests = 0;
      await expect(rt.submit(spec(status), {})).resolves.toEqual([{ ok: true }]);
      expect(requests).toBe(2);
    }
  });
});

describe('an HTTP device past the runtime device timeout', () => {
  it('the retry waits for the timed-out request to end, then goes out on the same worker (it was refused as "already busy")', async () => {
    // One worker; the first request is never answered, the second at once.
    let requests = 0;
    const url = await serve((_q, _b, res) => {
      if (++requests > 1) res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
    const dev = new HttpDevice({ name: 'infer', workers: 1, url });
    const rt = runtimeOver(dev, async () => ({ meta: { p: 0 } }), { workers: 1, retries: 1, deviceTimeoutMs: 300 });
    closers.push(() => rt.close(1000));
    await expect(rt.submit(spec('t1'), {})).resolves.toEqual([{ ok: true }]);
    expect(requests).toBe(2);
  });
});

describe('batches on an HTTP device', () => {
  it('one POST per batch: JSON items (bytes as base64), one result per item; an error result fails only its item', async () => {
    const sizes: number[] = [];
    const url = await serve((req, body, res) => {
      const { items } = JSON.parse(body.toString()) as { items: { job: string; partition: number; prepared?: { p: number }; preparedBase64?: string }[] };
      sizes.push(Number(req.headers['stoker-batch']));
      const results = items.map((it) =>
        it.job === 'bad' && it.partition === 1 ? { error: 'bad row\n' } : it.preparedBase64 !== undefined ? { outputBase64: Buffer.from([...Buffer.from(it.preparedBase64, 'base64')].reverse()).toString('base64') } : { output: { p: it.prepared?.p, n: items.length } },
      );
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ results })), 30);
    });
    const dev = new HttpDevice({ name: 'infer', workers: 1, url });
    const rt = batchingRuntimeOver<{ bytes?: boolean }>(dev, async (t) => ({ meta: t.input.bytes ? Uint8Array.of(1, 2, 3, t.partition) : { p: t.partition } }), 4);
    closers.push(() => rt.close(1000));
    const [good, bytes, bad] = await Promise.all([rt.submit(spec('g', 6), {}), rt.submit(spec('y', 2), { bytes: true }), failure(rt.submit(spec('bad', 2), {}))]);
    expect((good as { p: number }[]).map((o) => o.p)).toEqual([0, 1, 2, 3, 4, 5]);
    expect((bytes as Uint8Array[]).map((b) => [...b])).toEqual([
      [0, 3, 2, 1],
      [1, 3, 2, 1],
    ]);
    // The worker named, as for a single item; the error's trailing newline left off.
    expect(bad.message).toMatch(/partition 1 failed on device 0: infer\/0: bad row \(after \d attempts\)$|partition 1 failed on device 0: infer\/0: bad row$/);
    expect(Math.max(...sizes)).toBeGreaterThan(1);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(10);
  });

  it('an integer a double rounds fails only the item whose output holds it; one elsewhere in the answer (a trace id) fails none (it failed the whole batch)', async () => {
    const url = await serve((_req, body, res) => {
      const { items } = JSON.parse(body.toString()) as { items: { job: string; partition: number }[] };
      // (Written by hand: JSON.stringify cannot write the integers an int64 service sends.)
      const results = items.map((it) => (it.job === 'big' ? `{"output":{"id":18446744073709551617}}` : `{"output":${it.partition}}`));
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(`{"results":[${results.join(',')}],"traceId":18446744073709551999}`), 20);
    });
    const dev = new HttpDevice({ name: 'infer', workers: 1, url });
    const rt = batchingRuntimeOver<Record<string, never>>(dev, async (t) => ({ meta: { p: t.partition } }), 4);
    closers.push(() => rt.close(1000));
    const [good, big] = await Promise.all([rt.submit(spec('g', 3), {}), failure(rt.submit(spec('big', 1), {}))]);
    expect(good).toEqual([0, 1, 2]);
    expect(big.message).toMatch(/infer\/0: POST .* answered the integer 18446744073709551617 at \$\.results\[\d\]\.output\.id, which stoker reads rounded/);
  });

  it('a 400 to a batch: its items run again alone (no retry spent), and the one refused alone fails its job at once (it was retried as a batch of one)', async () => {
    const withBad: number[] = [];
    const url = await serve((_req, body, res) => {
      const { items } = JSON.parse(body.toString()) as { items: { job: string; partition: number }[] };
      if (items.some((it) => it.job === 'bad')) {
        withBad.push(items.length);
        return res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"undecodable"}');
      }
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ results: items.map((it) => ({ output: it.partition })) })), 20);
    });
    const dev = new HttpDevice({ name: 'infer', workers: 1, url });
    const rt = batchingRuntimeOver<object>(dev, async (t) => ({ meta: { p: t.partition } }), 4, undefined, 3);
    closers.push(() => rt.close(1000));
    const [good, bad] = await Promise.all([rt.submit(spec('good', 5), {}), failure(rt.submit(spec('bad', 1), {}))]);
    expect(good).toEqual([0, 1, 2, 3, 4]);
    expect(bad.message).toMatch(/^job bad: partition 0 failed on device 0: infer\/0: POST .* answered 400 Bad Request: \{"error":"undecodable"\}$/);
    // At most once in a batch with others, then once alone.
    expect(withBad.at(-1)).toBe(1);
    expect(withBad.length).toBeLessThanOrEqual(2);
  });

  it('an answer that is not { results } of the right length fails the whole batch, saying what to answer', async () => {
    const url = await serve((_req, _body, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"outputs":[]}'));
    const dev = new HttpDevice({ name: 'infer', workers: 1, url });
    const calls = [0, 1].map((p) => ({ kind: 'k', module: '', style: 'kind' as const, input: {}, jobId: 'j', partition: p, partitions: 2, prepared: { meta: { p } }, device: 0, worker: 0, signal: new AbortController().signal }));
    await expect(dev.runBatch(calls)).rejects.toThrow(/answered "\{\\"outputs\\":\[\]\}" for a batch of 2: answer JSON \{ "results": \[\.\.\.\] \}/);
  });
});

/**
 * Who may call, and slow clients, against real `stoker serve` processes on loopback: a token on
 * every API route (the dashboard's files stay public), the Host header checked (DNS rebinding),
 * foreign Origins refused on state-changing requests, no listening beyond loopback without a
 * token, the start line naming the address really bound, bodies that never come cut off, and a
 * cap on open event streams.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { allowedHostNames, hostName } from '../../src/server/access.js';
import type { ServerConfig } from '../../src/server/config-types.js';
import { CLI, removeDir, startServer, tempDataDir, useServer, waitUntil } from './helpers.js';

const TOKEN = 'test-token-0123456789abcdef';

/** A request with any headers (fetch will not send a Host of our choosing). */
function request(url: string, opts: { method?: string; path: string; headers?: Record<string, string>; body?: string }): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method: opts.method ?? 'GET', path: opts.path, headers: { ...(opts.body ? { 'content-type': 'application/json' } : {}), ...opts.headers } }, (res) => {
      let body = '';
      res.on('data', (b: Buffer) => (body += b.toString()));
      // An event stream does not end: its head is enough.
      if (String(res.headers['content-type']).startsWith('text/event-stream')) {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: '' });
        req.destroy();
        return;
      }
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    if (opts.body) req.write(opts.body);
    req.end();
  });
}

function run(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    child.once('exit', (code) => resolve({ code, out, err }));
  });
}

describe('a server with a token', () => {
  const fixture = useServer([], { STOKER_SERVER_TOKEN: TOKEN, STOKER_SERVER_ALLOWED_HOSTS: 'stoker.internal', STOKER_SERVER_MAX_EVENT_STREAMS: '2' });

  it('answers 401 without the token or with a wrong one, and serves with it; the dashboard files stay public', async () => {
    const none = await request(fixture.server.url, { path: '/v1/status' });
    expect(none.status).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer realm="stoker"');
    expect(JSON.parse(none.body)).toMatchObject({ status: 401, detail: expect.stringContaining('Authorization: Bearer') });
    expect((await request(fixture.server.url, { path: '/v1/status', headers: { authorization: 'Bearer wrong-token-0123456789' } })).status).toBe(401);
    expect((await request(fixture.server.url, { path: '/metrics' })).status).toBe(401);
    expect((await request(fixture.server.url, { method: 'POST', path: '/v1/jobs', body: JSON.stringify({ kind: 'sleep', partitions: 1 }) })).status).toBe(401);
    const auth = { authorization: `Bearer ${TOKEN}` };
    expect((await request(fixture.server.url, { path: '/v1/status', headers: auth })).status).toBe(200);
    expect((await request(fixture.server.url, { path: '/v1/status', headers: { authorization: `bearer ${TOKEN}` } })).status).toBe(200);
    expect((await request(fixture.server.url, { path: '/metrics', headers: auth })).status).toBe(200);
    expect((await request(fixture.server.url, { method: 'POST', path: '/v1/jobs', headers: auth, body: JSON.stringify({ id: 't-1', kind: 'sleep', partitions: 1 }) })).status).toBe(202);
    const page = await request(fixture.server.url, { path: '/' });
    expect(page.status).toBe(200);
    // A backup is not made for another site's page (a cross-site GET on a server without a token made one).
    const fromElsewhere = await request(fixture.server.url, { path: '/v1/backup', headers: { ...auth, 'sec-fetch-site': 'cross-site' } });
    expect(fromElsewhere.status).toBe(403);
    expect(JSON.parse(fromElsewhere.body).detail).toContain('a backup is not made for a page of another site');
    // The page by its path, whatever the query, and to HEAD as to GET (both got 401).
    expect((await request(fixture.server.url, { path: '/?view=jobs' })).status).toBe(200);
    expect((await request(fixture.server.url, { method: 'HEAD', path: '/' })).status).toBe(200);
    expect((await request(fixture.server.url, { method: 'HEAD', path: '/v1/status' })).status).toBe(401);
    // No other site's page may frame it (a click there could cancel jobs: the framed page's requests carry this server's Origin).
    expect(page.headers).toMatchObject({ 'x-frame-options': 'DENY', 'content-security-policy': "frame-ancestors 'none'", 'x-content-type-options': 'nosniff' });
    // The probes need no token (and say no more than live, or ready).
    expect((await request(fixture.server.url, { path: '/livez' })).status).toBe(200);
    expect(JSON.parse((await request(fixture.server.url, { path: '/readyz' })).body)).toEqual({ status: 'ready' });
    expect((await request(fixture.server.url, { path: '/assets/dashboard.js' })).status).toBe(200);
    // An EventSource cannot send a header: the event streams take ?access_token= (and only they).
    expect((await request(fixture.server.url, { path: `/v1/events?access_token=${TOKEN}` })).status).toBe(200);
    expect((await request(fixture.server.url, { path: `/v1/status?access_token=${TOKEN}` })).status).toBe(401);
  });

  it('the CLI sends the token from STOKER_SERVER_TOKEN or --token-file, and says what is missing without it', async () => {
    const ok = await run(['status', 't-1', '--server', fixture.server.url, '--json'], { STOKER_SERVER_TOKEN: TOKEN });
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.out)).toMatchObject({ id: 't-1' });
    const file = `${fixture.server.dataDir}/token`;
    (await import('node:fs')).writeFileSync(file, `${TOKEN}\n`);
    expect((await run(['wait', 't-1', '--server', fixture.server.url, '--token-file', file], { STOKER_SERVER_TOKEN: '' })).code).toBe(0);
    // trace export too, as the README says to use it (it had no --token-file).
    const trace = await run(['trace', 'export', '--server', fixture.server.url, '--token-file', file], { STOKER_SERVER_TOKEN: '' });
    expect(trace.code).toBe(0);
    expect(JSON.parse(trace.out)).toHaveProperty('traceEvents');
    const denied = await run(['status', '--server', fixture.server.url], { STOKER_SERVER_TOKEN: '' });
    expect(denied.code).toBe(2);
    expect(denied.err).toContain('401');
    // It says how a stoker command sends the token, not only which header the server reads.
    expect(denied.err).toContain("stoker's commands send it from --token-file FILE, else $STOKER_SERVER_TOKEN");
  }, 30_000);

  it('server.allowedHosts names hosts as a Host header does: an entry with its port names the host (stoker.internal:7070 matched no request, every one 421)', () => {
    const hosts = allowedHostNames({ host: '127.0.0.1', allowedHosts: ['stoker.internal:7070', 'Other.Example.', '[fe80::1]:8080', 'fe80::2', '10.0.0.5'] } as ServerConfig);
    for (const h of ['stoker.internal:7070', 'stoker.internal', 'other.example:1', '[fe80::1]', 'fe80::2', '10.0.0.5:7070']) expect(hosts.has(hostName(h)), h).toBe(true);
    for (const h of ['stoker.internal.evil.com', 'fe80::3', '10.0.0.6']) expect(hosts.has(hostName(h)), h).toBe(false);
  });

  it('refuses a Host that does not name the server (421), and a state-changing request from a foreign Origin (403)', async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const port = new URL(fixture.server.url).port;
    const foreign = await request(fixture.server.url, { path: '/v1/status', headers: { ...auth, host: 'attacker.example' } });
    expect(foreign.status).toBe(421);
    expect(JSON.parse(foreign.body).detail).toContain('server.allowedHosts');
    expect((await request(fixture.server.url, { path: '/', headers: { host: `attacker.example:${port}` } })).status).toBe(421);
    // Loopback names with something after them are not loopback names.
    for (const host of ['[::1].evil.com', `localhost:${port}.evil.com`, 'localhost:abc', `127.0.0.1:${port}/evil`, `localhost@evil.com:${port}`]) {
      expect((await request(fixture.server.url, { path: '/v1/status', headers: { ...auth, host } })).status, host).toBe(421);
    }
    for (const host of ['[::1]', `[::1]:${port}`, 'LOCALHOST', `127.0.0.1:${port}`, 'localhost:', 'localhost.']) expect((await request(fixture.server.url, { path: '/v1/status', headers: { ...auth, host } })).status, host).toBe(200);
    // Two Host headers: 400 (which one a proxy in front read is anyone's guess).
    const two = await new Promise<string>((resolve) => {
      const sock = net.connect(Number(port), '127.0.0.1', () => sock.write(`GET /livez HTTP/1.1\r\nHost: localhost\r\nHost: evil.com\r\nConnection: close\r\n\r\n`));
      let got = '';
      sock.on('data', (d) => (got += d.toString()));
      sock.on('close', () => resolve(got));
    });
    expect(two).toMatch(/^HTTP\/1\.1 400 /);
    expect((await request(fixture.server.url, { path: '/v1/status', headers: { ...auth, host: `localhost:${port}` } })).status).toBe(200);
    expect((await request(fixture.server.url, { path: '/v1/status', headers: { ...auth, host: 'stoker.internal' } })).status).toBe(200);
    // The probes answer whatever name a load balancer's health check gives (a 421 took the node out of service).
    expect((await request(fixture.server.url, { path: '/livez', headers: { host: 'stoker.lb.internal' } })).status).toBe(200);
    expect(JSON.parse((await request(fixture.server.url, { path: '/readyz', headers: { host: `stoker.lb.internal:${port}` } })).body)).toEqual({ status: 'ready' });
    expect((await request(fixture.server.url, { method: 'HEAD', path: '/readyz?verbose=1', headers: { host: 'stoker.lb.internal' } })).status).toBe(200);
    const post = (origin: string) => request(fixture.server.url, { method: 'POST', path: '/v1/jobs', headers: { ...auth, origin }, body: JSON.stringify({ kind: 'sleep', partitions: 1 }) });
    const evil = await post('http://attacker.example');
    expect(evil.status).toBe(403);
    expect(JSON.parse(evil.body).type).toMatch(/forbidden-origin$/);
    expect((await post('null')).status).toBe(403);
    expect((await post(`http://127.0.0.1:${port}`)).status).toBe(202);
    expect((await request(fixture.server.url, { method: 'DELETE', path: '/v1/jobs/t-1', headers: { ...auth, origin: 'https://attacker.example' } })).status).toBe(403);
  });

  it('keeps at most server.maxEventStreams event streams open: one more gets 503 with Retry-After', async () => {
    const open = () =>
      new Promise<http.ClientRequest>((resolve, reject) => {
        const u = new URL(fixture.server.url);
        const req = http.get({ host: u.hostname, port: u.port, path: '/v1/events', headers: { authorization: `Bearer ${TOKEN}` } }, (res) => (res.statusCode === 200 ? resolve(req) : reject(new Error(String(res.statusCode)))));
      });
    const a = await open();
    const b = await open();
    try {
      const third = await request(fixture.server.url, { path: '/v1/events', headers: { authorization: `Bearer ${TOKEN}` } });
      expect(third.status).toBe(503);
      expect(third.headers['retry-after']).toBe('5');
      expect(JSON.parse(third.body).detail).toContain('server.maxEventStreams');
    } finally {
      a.destroy();
      b.destroy();
    }
    // Closed streams free their places.
    await waitUntil(async () => ((await request(fixture.server.url, { path: '/v1/events', headers: { authorization: `Bearer ${TOKEN}` } })).status === 200 ? true : undefined), 5000, 'a stream place to free', 50);
  });
});

describe('listening beyond loopback', () => {
  it('is refused without a token (exit 2 naming server.token and the opt-out), and the start line names the address bound', async () => {
    const dir = tempDataDir();
    try {
      const r = await run(['serve', '--host', '0.0.0.0', '--port', '0', '--data', dir], { STOKER_SERVER_TOKEN: '' });
      expect(r.code).toBe(2);
      expect(r.err).toContain('server.token');
      expect(r.err).toContain('server.openWithoutToken');
      // A token file whose first line is empty (a secret mount that came up empty) is refused: taken as no token, it opened the API.
      const blank = `${dir}/blank-token`;
      fs.writeFileSync(blank, '\n  \nsecond-line-token-0123456789\n');
      const b = await run(['serve', '--port', '0', '--data', dir, '--token-file', blank], { STOKER_SERVER_TOKEN: '' });
      expect(b.code).toBe(2);
      expect(b.err).toContain(`--token-file ${blank}: its first line is empty: put the token on the first line`);
      const open = await startServer(dir, ['--host', '0.0.0.0'], { STOKER_SERVER_OPEN_WITHOUT_TOKEN: 'true' });
      try {
        expect(open.output()).toMatch(/listening on http:\/\/0\.0\.0\.0:\d+ \(no token needed; /);
      } finally {
        await open.stop();
      }
    } finally {
      removeDir(dir);
    }
  }, 30_000);
});

describe('slow clients', () => {
  const fixture = useServer([], { STOKER_SERVER_REQUEST_TIMEOUT_S: '1', STOKER_SERVER_HEADERS_TIMEOUT_S: '1', STOKER_SERVER_MAX_CONNECTIONS: '20' });

  it('frees the slots of connections it refused as too slow whose clients never close them (they held every slot, and no one was answered)', async () => {
    const u = new URL(fixture.server.url);
    // As many as the server takes: half a request each, then nothing — never read, never closed.
    const sockets = Array.from({ length: 20 }, () => {
      const s = net.connect(Number(u.port), u.hostname);
      s.on('error', () => {});
      s.pause();
      s.write('GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n');
      return s;
    });
    try {
      // Refused at the headers' timeout (1 s), their slots free some 2 s later.
      await waitUntil(
        async () => {
          try {
            return (await request(fixture.server.url, { path: '/livez' })).status === 200 ? true : undefined;
          } catch {
            return undefined;
          }
        },
        8000,
        'a free slot: /livez answered',
        100,
      );
    } finally {
      for (const s of sockets) s.destroy();
    }
  }, 30_000);

  it('cuts the path it quotes in a 414 (a 15,000-character path was quoted whole)', async () => {
    const r = await request(fixture.server.url, { path: `/v1/jobs/${'x'.repeat(15_000)}` });
    expect(r.status).toBe(414);
    expect(r.body.length).toBeLessThan(600);
  }, 30_000);

  it('closes connections whose body or headers never finish, within the timeouts', async () => {
    const u = new URL(fixture.server.url);
    const t0 = performance.now();
    const sockets = Array.from({ length: 40 }, (_, i) => {
      const s = net.connect(Number(u.port), u.hostname);
      s.on('error', () => {});
      s.resume();
      // Half send their headers and promise a body that never comes; half never finish the headers.
      s.write(i % 2 === 0 ? `POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"ki` : 'GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
      return new Promise<number>((resolve) => s.once('close', () => resolve(performance.now() - t0)));
    });
    const closedAfter = await Promise.race([Promise.all(sockets), new Promise<'open'>((r) => setTimeout(() => r('open'), 10_000))]);
    expect(closedAfter, 'every slow connection closed within 10 s').not.toBe('open');
    console.log(`40 slow connections closed after ${Math.max(...(closedAfter as number[])).toFixed(0)} ms (requestTimeoutS = headersTimeoutS = 1)`);
    // The server still answers.
    expect((await request(fixture.server.url, { path: '/v1/status' })).status).toBe(200);
  }, 30_000);

  it('answers requests Node\'s parser refuses, and one without Host, with a problem body (they had none, or fastify\'s own JSON)', async () => {
    const u = new URL(fixture.server.url);
    const raw = (text: string) =>
      new Promise<string>((resolve) => {
        const s = net.connect(Number(u.port), u.hostname);
        let got = '';
        s.on('data', (b: Buffer) => (got += b.toString()));
        s.on('error', () => resolve(got));
        s.on('close', () => resolve(got));
        s.write(text);
        // (The problem answers close the connection, the missing Host one too; a client that keeps it is not waited for.)
        setTimeout(() => s.end(), 5000);
      });
    const problem = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { type: string; status: number; detail: string };
    const t0 = performance.now();
    const noHost = await raw('GET /v1/status HTTP/1.1\r\n\r\n');
    expect(noHost).toMatch(/^HTTP\/1\.1 400 .*content-type: application\/problem\+json/is);
    // Closed by the server after its answer (it was kept alive, and answered a second request on it).
    expect(noHost).toMatch(/\r\nconnection: close\r\n/i);
    expect(performance.now() - t0).toBeLessThan(4000);
    expect(problem(noHost).detail).toMatch(/no Host header: HTTP\/1\.1 needs one/);
    const both = await raw('POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n');
    expect(problem(both)).toMatchObject({ status: 400, detail: expect.stringMatching(/Content-Length .* beside Transfer-Encoding/) });
    const big = await raw(`GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(big).toMatch(/^HTTP\/1\.1 431 /);
    expect(problem(big)).toMatchObject({ type: 'https://stoker.dev/problems/headers-too-large' });
    expect(problem(big).detail).toMatch(/headers are over the 16 KiB/);
    expect(problem(await raw('GARBAGE\r\n\r\n'))).toMatchObject({ status: 400, detail: expect.stringMatching(/not well-formed HTTP\/1\.1 \(HPE_INVALID_METHOD\)/) });
  }, 30_000);
});

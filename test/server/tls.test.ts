/**
 * HTTPS: with server.tlsCert and server.tlsKey the server speaks TLS (a self-signed certificate
 * made by openssl for the test), the start line says https://, and a half-configured or broken
 * pair is refused at start naming the field.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CLI, removeDir, startServer, tempDataDir, type ServerProcess } from './helpers.js';

const haveOpenssl = spawnSync('openssl', ['version']).status === 0;
if (!haveOpenssl) console.warn('SKIPPED: test/server/tls.test.ts: openssl is not installed (apt-get install openssl)');

describe.skipIf(!haveOpenssl)('HTTPS', () => {
  let dir: string;
  let server: ServerProcess;
  let cert: string;
  let key: string;
  beforeAll(async () => {
    dir = tempDataDir();
    cert = path.join(dir, 'cert.pem');
    key = path.join(dir, 'key.pem');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
    server = await startServer(path.join(dir, 'data'), [], { STOKER_SERVER_TLS_CERT: cert, STOKER_SERVER_TLS_KEY: key });
  }, 30_000);
  afterAll(async () => {
    await server?.stop();
    if (dir) removeDir(dir);
  });

  it('serves the API over TLS and says https:// on its start line', async () => {
    expect(server.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    // A certificate a day from its end is said at start (an expired one started without a word, and every client refused it).
    await vi.waitFor(() => expect(server.output()).toMatch(new RegExp(`warning: the certificate ${cert.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\(server\\.tlsCert\\) expires on \\S+, in [01]\\.\\d days: renew it`)));
    const body = await new Promise<string>((resolve, reject) => {
      https
        .get(`${server.url}/v1/status`, { ca: fs.readFileSync(cert) }, (res) => {
          let b = '';
          res.on('data', (d: Buffer) => (b += d.toString()));
          res.on('end', () => (res.statusCode === 200 ? resolve(b) : reject(new Error(String(res.statusCode)))));
        })
        .on('error', reject);
    });
    expect(JSON.parse(body)).toHaveProperty('jobs');
  });

  it('the CLI against a certificate it does not trust says so and how to trust it; with NODE_EXTRA_CA_CERTS it goes through', () => {
    const status = (env: Record<string, string>) => spawnSync(process.execPath, [CLI, 'status', '--server', server.url], { env: { ...process.env, NODE_EXTRA_CA_CERTS: '', ...env }, encoding: 'utf8', timeout: 20_000 });
    const untrusted = status({});
    expect(untrusted.status).toBe(1);
    expect(untrusted.stderr).toMatch(/answered with a certificate this client does not trust \(\w+\): give its CA .* NODE_EXTRA_CA_CERTS/);
    expect(untrusted.stderr).not.toContain('start it with');
    expect(status({ NODE_EXTRA_CA_CERTS: cert }).status).toBe(0);
    // Trusted, but asked by a name the certificate does not list (it names IP 127.0.0.1): said as that — it said to give the CA already given.
    const other = spawnSync(process.execPath, [CLI, 'status', '--server', server.url.replace('127.0.0.1', 'localhost')], { env: { ...process.env, NODE_EXTRA_CA_CERTS: cert }, encoding: 'utf8', timeout: 20_000 });
    expect(other.status).toBe(1);
    expect(other.stderr).toMatch(/answered with a certificate that does not name localhost \(ERR_TLS_CERT_ALTNAME_INVALID\): ask it by a name or address its certificate lists/);
  });

  it('says at start that its certificate has expired', async () => {
    // Valid from 2020-01-01 to 2020-02-01: signed by itself through openssl ca, which takes the dates (req -x509 does not before OpenSSL 3.4).
    const ca = path.join(dir, 'old-ca');
    fs.mkdirSync(ca);
    fs.writeFileSync(path.join(ca, 'ca.cnf'), '[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n');
    fs.writeFileSync(path.join(ca, 'index.txt'), '');
    fs.writeFileSync(path.join(ca, 'serial'), '01\n');
    const oldKey = path.join(ca, 'key.pem');
    const old = path.join(ca, 'cert.pem');
    execFileSync('openssl', ['req', '-new', '-newkey', 'rsa:2048', '-nodes', '-keyout', oldKey, '-out', path.join(ca, 'csr.pem'), '-subj', '/CN=127.0.0.1'], { stdio: 'ignore', cwd: ca });
    execFileSync('openssl', ['ca', '-config', 'ca.cnf', '-selfsign', '-keyfile', oldKey, '-in', 'csr.pem', '-out', old, '-startdate', '20200101000000Z', '-enddate', '20200201000000Z', '-batch'], { stdio: 'ignore', cwd: ca });
    const expired = await startServer(path.join(dir, 'expired'), [], { STOKER_SERVER_TLS_CERT: old, STOKER_SERVER_TLS_KEY: oldKey });
    try {
      await vi.waitFor(() => expect(expired.output()).toContain(`warning: the certificate ${old} (server.tlsCert) expired on 2020-02-01T00:00:00.000Z: clients refuse it — renew it, then restart`));
    } finally {
      await expired.stop();
    }
  }, 30_000);

  it('refuses a certificate without its key, and a file that is not PEM, naming the field', () => {
    const run = (env: Record<string, string>) => spawnSync(process.execPath, [CLI, 'serve', '--port', '0', '--data', path.join(dir, 'other')], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 });
    const half = run({ STOKER_SERVER_TLS_CERT: cert });
    expect(half.status).toBe(2);
    expect(half.stderr).toContain('server.tlsCert is set without server.tlsKey');
    const junk = path.join(dir, 'junk.pem');
    fs.writeFileSync(junk, 'not a certificate\n');
    const bad = run({ STOKER_SERVER_TLS_CERT: junk, STOKER_SERVER_TLS_KEY: key });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain('server.tlsCert: HTTPS cannot start with');
  }, 30_000);
});

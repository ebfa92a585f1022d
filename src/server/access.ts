import { createHash, timingSafeEqual } from 'node:crypto';
import os from 'node:os';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ServerConfig } from './config.js';
import { ServiceError } from './errors.js';

/** Whether a listen address reaches this machine only. */
export function isLoopback(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

const WILDCARDS = new Set(['0.0.0.0', '::', '[::]']);

/**
 * Why the server must not start as configured: listening beyond loopback with no token lets
 * anyone who reaches the port run and cancel jobs. Undefined when it may.
 */
export function exposureProblem(server: ServerConfig): string | undefined {
  if (isLoopback(server.host) || server.token !== '' || server.openWithoutToken) return undefined;
  return `server.host is ${server.host}, which other machines can reach, and server.token is not set: set server.token (STOKER_SERVER_TOKEN, or --token-file FILE) so that callers must send it, or set server.openWithoutToken = true where the network itself keeps strangers out`;
}

/** The host names a request's Host (and a state-changing request's Origin) may give: loopback names, the bound address (every interface's when it is a wildcard), and server.allowedHosts. */
export function allowedHostNames(server: ServerConfig): Set<string> {
  // (An entry read as a Host header is: `stoker.internal:7070` names stoker.internal — with its port kept, it matched no request.)
  const names = new Set(['localhost', '127.0.0.1', '::1', ...server.allowedHosts.map((h) => hostName(h).replace(/^\[|\]$/g, '').replace(/\.$/, ''))]);
  const bound = server.host.toLowerCase().replace(/^\[|\]$/g, '');
  if (WILDCARDS.has(server.host)) {
    for (const list of Object.values(os.networkInterfaces())) for (const a of list ?? []) names.add(a.address.toLowerCase());
    names.add(os.hostname().toLowerCase());
  } else names.add(bound);
  return names;
}

/**
 * The host name of a Host header value (`name`, `name:port`, `[v6]`, `[v6]:port`), lower-case; a
 * value of another form as it is, which names no allowed host (`[::1].evil.com`,
 * `localhost:7070.evil.com` and `localhost:abc` read as loopback names).
 */
export function hostName(value: string): string {
  const v = value.trim().toLowerCase();
  // (An empty port is allowed, `host:`; a name's one trailing dot, `stoker.internal.`, is the same name.)
  const m = /^\[([0-9a-f:.]+)\](?::\d{0,5})?$/.exec(v) ?? /^([^:[\]/@\s]+?)\.?(?::\d{0,5})?$/.exec(v);
  return m ? (m[1] as string) : v;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** The probes: a load balancer's or an orchestrator's health check names the server as it knows it (a 421 took every node out of service). */
const isProbe = (req: FastifyRequest) => (req.method === 'GET' || req.method === 'HEAD') && /^\/(livez|readyz)(\?|$)/.test(req.url);
/** Routes without data, served to anyone: the dashboard's page and files (it asks for the token itself), and the probes. */
const isPublic = (req: FastifyRequest) => {
  if (isProbe(req)) return true;
  if (req.method !== 'GET' && req.method !== 'HEAD') return false;
  // (Its path, not its URL: `/?x=1` and HEAD / got 401 where the page is open.)
  const path = req.url.split('?')[0] ?? '';
  return path === '/' || path.startsWith('/assets/');
};
/** Event streams: a browser's EventSource cannot send a header, so these take `?access_token=` too. */
const isStream = (path: string) => path === '/v1/events' || /^\/v1\/jobs\/[^/]+\/events$/.test(path);

/**
 * Who may call: the Host header must name this server (421 otherwise: a DNS-rebinding page
 * names its own domain) — but for the probes, which say no more than ready or not — a state-changing request from a foreign Origin gets 403, and with a
 * token every route but the dashboard's files needs `Authorization: Bearer <token>` (401,
 * compared in constant time).
 */
export function installAccess(app: FastifyInstance, server: ServerConfig): void {
  const hosts = allowedHostNames(server);
  const token = server.token === '' ? undefined : digest(server.token);
  app.addHook('onRequest', async (req, reply) => {
    const host = req.headers.host;
    // (Node keeps the first of two Host headers: which one a proxy in front read is anyone's guess.)
    if (req.raw.rawHeaders.filter((h, i) => i % 2 === 0 && h.toLowerCase() === 'host').length > 1) throw new ServiceError(400, 'bad-request', 'Bad request', 'the request has more than one Host header: send one');
    if (host === undefined && req.raw.httpVersion === '1.1') {
      // (Closed after its answer, as the parser's refusals are: it was answered keep-alive, and served the next request on the connection.)
      void reply.header('connection', 'close');
      throw new ServiceError(400, 'bad-request', 'Bad request', 'the request has no Host header: HTTP/1.1 needs one (the server\'s own address)');
    }
    if (host !== undefined && !hosts.has(hostName(host)) && !isProbe(req)) {
      throw new ServiceError(421, 'misdirected-request', 'Misdirected request', `this server does not answer for the host ${JSON.stringify(hostName(host))}: use its own address, or add the name to server.allowedHosts`);
    }
    const origin = req.headers.origin;
    if (origin !== undefined && req.method !== 'GET' && req.method !== 'HEAD' && req.method !== 'OPTIONS') {
      let name: string | undefined;
      try {
        name = new URL(origin).hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase();
      } catch {
        name = undefined;
      }
      if (name === undefined || !hosts.has(name)) throw new ServiceError(403, 'forbidden-origin', 'Forbidden origin', `a ${req.method} from the page at ${origin} is refused: only this server's own pages (or server.allowedHosts) may change jobs`);
    }
    // A GET that makes something (a copy of the journal, as large as it, in the data dir) is not one
    // another site's page may send: a browser says where a request comes from (curl and the CLI say nothing).
    if (req.method === 'GET' && req.url.split('?')[0] === '/v1/backup' && /^(cross-site|same-site)$/i.test(String(req.headers['sec-fetch-site'] ?? ''))) {
      throw new ServiceError(403, 'forbidden-origin', 'Forbidden origin', 'a backup is not made for a page of another site: fetch it with `stoker backup -o FILE` or curl');
    }
    if (!token || isPublic(req)) return;
    const path = req.url.split('?')[0] ?? '';
    const auth = req.headers.authorization;
    // (The scheme's name is case-insensitive: RFC 9110 §11.1.)
    let given = auth !== undefined && /^bearer /i.test(auth) ? auth.slice(7).trim() : undefined;
    if (given === undefined && isStream(path)) {
      const q = (req.query as Record<string, unknown> | undefined)?.['access_token'];
      if (typeof q === 'string') given = q;
    }
    if (given === undefined || !timingSafeEqual(digest(given), token)) {
      void reply.header('www-authenticate', 'Bearer realm="stoker"');
      throw new ServiceError(401, 'unauthorized', 'Unauthorized', given === undefined ? 'this server needs a token: send Authorization: Bearer <server.token>' : 'the token is wrong: send the server.token the server was started with');
    }
  });
}

import { readFile } from 'node:fs/promises';
import { createReadStream, readFileSync, rmSync, statSync } from 'node:fs';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { MAX_PARTITIONS, type PartitionState } from '../core/index.js';
import type { JobState } from './journal.js';
import { openApiDocument } from './openapi.js';
import { installAccess } from './access.js';
import { parseStrictJson, StrictJsonError } from './strict-json.js';
import type { EventEmitter } from 'node:events';
import type { Registry } from 'prom-client';
import type { ChromeTrace } from '../report/chrome-trace.js';
import { ConfigError, type ServeConfig } from './config.js';
import type { Replay } from './event-log.js';
import type { HistoryView } from './history.js';
import { briefView, type JobView, type ResultView, type StatusView, type TimelineView } from './api.js';
import { ResultPieces } from './local-view.js';
import { clip, notFound, ServiceError } from './errors.js';
import { parseSince, parseWait } from './durations.js';
import { isFinal, progressEvents, STATES_PAGE_MAX, type JobProgressEvent, type StatesPage } from './progress.js';
import type { KindView } from './kinds.js';
import type { ServiceEvent } from './service.js';
import { eventFrame, EventStreamOut, headOfStream } from './sse.js';

type MaybePromise<T> = T | Promise<T>;

/**
 * What the HTTP API needs of a service: the local {@link Service} (journal + runtime) is one, the
 * cluster mode's `ClusterService` (BullMQ on Redis around a local Service) another.
 */
export interface ApiService {
  readonly config: ServeConfig;
  /** Emits `event` (a ServiceEvent and its SSE id) and `close`. */
  readonly events: EventEmitter;
  /** The events after a client's Last-Event-ID, or the gap it must be told of. */
  replay(lastEventId: string): Replay<ServiceEvent>;
  readonly metrics: { readonly registry: Registry };
  submit(raw: unknown): MaybePromise<{ job: JobView; created: boolean }>;
  job(id: string, page?: StatesPage): MaybePromise<JobView | undefined>;
  jobs(options: { limit?: number; states?: readonly JobState[]; before?: string }): MaybePromise<JobView[]>;
  /** Why new jobs should go elsewhere now (GET /readyz answers 503 with them): shutting down, a full journal, Redis away. */
  notReady(): MaybePromise<string[]>;
  /**
   * The job once it has ended (or after `waitMs`), its result whole (GET …/result): a job view
   * leaves a large one out. `raw`: a bytes result may come as a Uint8Array (resultEncoding base64
   * still), not as its base64, which the route sends piece by piece.
   */
  wait(id: string, waitMs: number, raw?: boolean): Promise<JobView | undefined>;
  cancel(id: string): MaybePromise<JobView>;
  status(): MaybePromise<StatusView>;
  kindList(): MaybePromise<KindView[]>;
  timelineView(sinceMs: number, maxSpans?: number): TimelineView;
  historyView(sinceMs: number): HistoryView;
  trace(sinceMs: number): ChromeTrace;
  /** A consistent copy of the journal in a file (GET /v1/backup sends it, then removes it). */
  backup(): Promise<string>;
  /** One job's progress as it happens (see Service.watchJob); without it, `GET /v1/jobs/:id/events` polls the job's view. */
  watchJob?(id: string, listener: (e: JobProgressEvent) => void): () => void;
  /** Cluster mode only: `GET /v1/cluster`. */
  cluster?(): Promise<object>;
}

/** A problem-details body (RFC 9457). */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors?: { path: string; message: string }[];
}

const PROBLEM_BASE = 'https://stoker.dev/problems/';

function sendProblem(reply: FastifyReply, p: Omit<Problem, 'type'> & { type: string }, retryAfterS?: number): FastifyReply {
  if (retryAfterS !== undefined) void reply.header('retry-after', String(retryAfterS));
  return reply
    .code(p.status)
    .type('application/problem+json')
    .send({ ...p, type: PROBLEM_BASE + p.type });
}

/** What Node's HTTP parser refused, as the problem it answers (the connection then closes). */
const PARSER_PROBLEMS: Record<string, { status: number; title: string; detail: string }> = {
  HPE_HEADER_OVERFLOW: { status: 431, title: 'Headers too large', detail: 'the request headers are over the 16 KiB Node accepts: send fewer or shorter headers' },
  HPE_UNEXPECTED_CONTENT_LENGTH: { status: 400, title: 'Bad request', detail: 'the request has both Transfer-Encoding and Content-Length: send one of them' },
  HPE_INVALID_CONTENT_LENGTH: { status: 400, title: 'Bad request', detail: 'the request\'s Content-Length is not one whole number, or comes beside Transfer-Encoding: send one of them, once' },
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, title: 'Request timeout', detail: 'the request did not arrive within server.requestTimeoutS' },
};

/** The problem type of each status a parser refusal answers (a 431 said bad-request). */
const PARSER_TYPES: Readonly<Record<number, string>> = { 400: 'bad-request', 408: 'request-timeout', 431: 'headers-too-large' };

/** Answers a request Node's HTTP parser refused with a problem body, then closes the connection. */
function clientError(err: Error & { code?: string }, socket: Socket): void {
  // (A reset connection, or one whose response is under way — a pipelined request, an event
  // stream —: nothing can be answered on it; as Node's own handler does.)
  const answering = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
  if (!socket.writable || err.code === 'ECONNRESET' || answering) {
    socket.destroy();
    return;
  }
  const p = PARSER_PROBLEMS[err.code ?? ''] ?? { status: 400, title: 'Bad request', detail: `the request is not well-formed HTTP/1.1 (${err.code ?? err.message})` };
  const body = JSON.stringify({ type: `${PROBLEM_BASE}${PARSER_TYPES[p.status] ?? 'bad-request'}`, ...p });
  socket.end(`HTTP/1.1 ${p.status} ${http.STATUS_CODES[p.status] ?? ''}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  // Ended, the connection stays open until its client closes it too, and counts against
  // maxConnections: a client that never does (a thousand sockets sending half a request, then
  // nothing) held every slot, and the server answered no one, for as long as it liked.
  setTimeout(() => socket.destroy(), CLOSE_GRACE_MS).unref();
}

/** How long a client has to read the answer to a request refused as malformed or too slow before its connection is closed. */
const CLOSE_GRACE_MS = 2000;

/** Job progress by polling the job's view every 500 ms (a service that cannot watch, e.g. a cluster's job on another node). */
function pollJob(service: ApiService, id: string, listener: (e: JobProgressEvent) => void): () => void {
  let last: PartitionState[] = [];
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const tick = async () => {
    const v = await service.job(id);
    if (stopped || !v) return;
    const p = progressEvents(v, last);
    last = p.states;
    for (const e of p.events) listener(e);
    if (!isFinal(v.state)) timer = setTimeout(() => void tick(), 500);
  };
  void tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** Bytes a result's base64 is made from at a time (a multiple of 3: the pieces join into one base64 text). */
const BASE64_PIECE_BYTES = 3 << 20;

/**
 * The JSON of `body` (its `result` given as '') with the base64 of `bytes` as its result, made piece
 * by piece as the client reads it: whole, the base64 of 410 MB or more was longer than a string
 * may be (the result could not be answered at all), and of less it held several times its size.
 */
function base64Body(body: ResultView, pieces: AsyncIterable<Buffer> | Iterable<Buffer>): Readable {
  const text = JSON.stringify(body);
  // (The first "result":"" is the field: a quote inside a string before it is escaped.)
  const at = text.indexOf('"result":""') + '"result":"'.length;
  return Readable.from(
    (async function* () {
      yield text.slice(0, at);
      // (Each piece but the last a multiple of 3 bytes: their base64 joins as the whole's.)
      for await (const piece of pieces) yield piece.toString('base64');
      yield text.slice(at);
    })(),
    { objectMode: false },
  );
}

/** Bytes in pieces of BASE64_PIECE_BYTES. */
function* inPieces(bytes: Buffer): Iterable<Buffer> {
  for (let i = 0; i < bytes.length; i += BASE64_PIECE_BYTES) yield bytes.subarray(i, i + BASE64_PIECE_BYTES);
}

/** Whether an Accept header asks for raw bytes rather than JSON (application/octet-stream ranked above application/json). */
function wantsBytes(accept: string | undefined): boolean {
  const bytes = quality(accept, 'application/octet-stream');
  return bytes > 0 && bytes >= quality(accept, 'application/json');
}

/** Whether an Accept header that prefers bytes takes JSON too (application/json, or any type, at q > 0). */
function acceptsJson(accept: string | undefined): boolean {
  return ['application/json', '*/*', 'application/*'].some((type) => quality(accept, type) > 0);
}

/** The q an Accept header gives a media type (1 where it names it without one; 0 where it does not name it). */
function quality(accept: string | undefined, type: string): number {
  for (const part of (accept ?? '').split(',')) {
    const [t, ...params] = part.trim().split(';');
    if (t?.trim().toLowerCase() !== type) continue;
    const qp = params.map((x) => x.trim()).find((x) => x.startsWith('q='));
    return qp ? Number(qp.slice(2)) : 1;
  }
  return 0;
}

const JOB_STATES: readonly JobState[] = ['queued', 'running', 'done', 'failed', 'cancelled'];

/** A query parameter given at most once: its text, undefined when absent; a ServiceError when repeated. */
function once(value: unknown, name: string, example: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new ServiceError(400, 'bad-query', 'Bad query', `${name} must be given once, e.g. ${example}`);
  return value;
}

/** `?since=` as ms (default 5 minutes). */
function sinceOf(value: unknown): number {
  const text = once(value, 'since', 'since=5m');
  if (text === undefined) return 5 * 60_000;
  const ms = parseSince(text);
  if (typeof ms === 'string') throw new ServiceError(400, 'bad-query', 'Bad query', ms);
  return ms;
}

/** A whole-number query parameter in [min, max]. */
function intOf(value: unknown, name: string, min: number, max: number, fallback: number): number {
  const text = once(value, name, `${name}=${fallback}`);
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < min || n > max) throw new ServiceError(400, 'bad-query', 'Bad query', `${name} must be a whole number from ${min} to ${max} (got ${JSON.stringify(text)})`);
  return n;
}

/** `?state=queued,running` (or repeated): the states, undefined for all. */
function statesOf(value: unknown): JobState[] | undefined {
  if (value === undefined) return undefined;
  const parts = (Array.isArray(value) ? value : [value]).flatMap((v) => String(v).split(',')).map((v) => v.trim()).filter((v) => v !== '');
  const bad = parts.find((p) => !(JOB_STATES as readonly string[]).includes(p));
  if (bad !== undefined) throw new ServiceError(400, 'bad-query', 'Bad query', `unknown state ${JSON.stringify(bad)}: use one or more of ${JOB_STATES.join(', ')}, comma-separated`);
  return parts.length === 0 ? undefined : (parts as JobState[]);
}

/**
 * The dashboard's files: its own page, script modules and style in `web/` at the package root (two
 * levels above both src/server/ and dist/server/), and uPlot's from node_modules. Only these
 * names are served.
 */
const WEB = new URL('../../web/', import.meta.url);
const require = createRequire(import.meta.url);
const ASSETS: Record<string, { file: () => string | URL; type: string }> = {
  ...Object.fromEntries(['dashboard.js', 'format.js', 'api.js', 'charts.js', 'waterfall.js', 'jobs.js', 'feed.js'].map((f) => [f, { file: () => new URL(f, WEB), type: 'text/javascript; charset=utf-8' }])),
  'dashboard.css': { file: () => new URL('dashboard.css', WEB), type: 'text/css; charset=utf-8' },
  'uPlot.iife.min.js': { file: () => require.resolve('uplot/dist/uPlot.iife.min.js'), type: 'text/javascript; charset=utf-8' },
  'uPlot.min.css': { file: () => require.resolve('uplot/dist/uPlot.min.css'), type: 'text/css; charset=utf-8' },
};

/** What is read and dropped of a body refused as too large before the 413 goes out (see dropRestOfBody). */
const DROP_MAX_BYTES = 256 * 2 ** 20;
const DROP_MAX_MS = 10_000;

/**
 * Reads and drops what is left of a request body refused as too large — up to DROP_MAX_BYTES and
 * DROP_MAX_MS — so that the client, done sending, reads the 413 that says why: answered while it
 * still sent, the connection closed under it and it saw a broken pipe (Node's fetch and `stoker
 * submit`: "EPIPE", no status — "cannot reach the server").
 */
function dropRestOfBody(body: IncomingMessage): Promise<void> {
  if (body.readableEnded || body.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let bytes = 0;
    const done = () => {
      clearTimeout(timer);
      body.off('data', onData).off('end', done).off('error', done).off('close', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > DROP_MAX_BYTES) done();
    };
    const timer = setTimeout(done, DROP_MAX_MS);
    body.on('data', onData).once('end', done).once('error', done).once('close', done);
    body.resume();
  });
}

/** The HTTP API over a service (fastify). Every error is a problem-details body. */
export function buildApp(service: ApiService): FastifyInstance {
  /**
   * A streamed answer (a backup, a large result) cut short when the server stops — the client sees
   * it broken, as one it must not trust: a slow reader of a backup held a SIGTERM past
   * server.shutdownTimeoutS, and the server exited 1 "for a step that ignores its withdrawal", its
   * WAL not checkpointed and the copy left in the data dir.
   */
  const cutOnStop = <S extends Readable>(stream: S): S => {
    const stop = () => stream.destroy(new Error('the server is stopping'));
    service.events.once('close', stop);
    stream.once('close', () => service.events.off('close', stop));
    return stream;
  };

  const srv = service.config.server;
  const app = Fastify({
    bodyLimit: srv.bodyLimitBytes,
    // Slow clients: headers must arrive within headersTimeoutS, the whole request within
    // requestTimeoutS, an idle keep-alive connection closes after keepAliveTimeoutS; Node checks
    // every second (its default, 30 s, let a slow client hold a socket that long past its limit).
    // With server.tlsCert and tlsKey: HTTPS.
    serverFactory: (handler) => {
      const limits = {
        requestTimeout: srv.requestTimeoutS * 1000,
        headersTimeout: Math.min(srv.headersTimeoutS, srv.requestTimeoutS) * 1000,
        keepAliveTimeout: srv.keepAliveTimeoutS * 1000,
        connectionsCheckingInterval: 1000,
        // (A request without Host is refused by the access check, with a problem body: Node's own 400 had none.)
        requireHostHeader: false,
      };
      let server: http.Server;
      try {
        server = srv.tlsCert ? https.createServer({ ...limits, cert: readFileSync(srv.tlsCert), key: readFileSync(srv.tlsKey) }, handler) : http.createServer(limits, handler);
      } catch (e) {
        throw new ConfigError([{ source: 'configuration', path: 'server.tlsCert', message: `HTTPS cannot start with ${srv.tlsCert} and ${srv.tlsKey} (${(e as Error).message}) — give a PEM certificate chain and its private key` }]);
      }
      server.maxConnections = srv.maxConnections;
      return server;
    },
    logger: false,
    return503OnClosing: true,
    // Job ids are up to 200 characters, up to 3× that percent-encoded: the default (100) made
    // GET /v1/jobs/:id answer 414 for ids the API accepts.
    routerOptions: { maxParamLength: 1000 },
    // Malformed percent-encoding or an over-long id in the path: a problem body like every error.
    frameworkErrors: (err, _req, reply) =>
      sendProblem(reply, { type: 'bad-url', title: 'Bad URL', status: err.statusCode ?? 400, detail: `${clip(err.message, 200)}: percent-encode the path (job ids are at most 200 characters)` }),
    // A request Node's parser refuses before fastify sees it: a problem body too (it was fastify's own JSON).
    clientErrorHandler: clientError,
  });
  // Bodies are JSON only: without this, fastify's built-in text/plain parser hands a string to
  // the submit validation (a confusing 400 "expected object") instead of answering 415.
  app.removeContentTypeParser('text/plain');

  installAccess(app, srv);
  // No page of another site may frame the dashboard (a framed page's cancel carries this
  // server's own Origin: a click on a hostile page could cancel jobs), and no answer is sniffed
  // as another type than it says.
  app.addHook('onSend', async (_req, reply) => {
    reply.header('x-frame-options', 'DENY').header('content-security-policy', "frame-ancestors 'none'").header('x-content-type-options', 'nosniff');
  });
  // Request bodies: duplicate keys and __proto__ are refused, naming the key (see strict-json.ts).
  app.removeContentTypeParser('application/json');
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    // A body compressed, or in another charset, read as UTF-8 text was "not valid JSON".
    const encoding = req.headers['content-encoding']?.trim().toLowerCase();
    if (encoding && encoding !== 'identity') return done(new ServiceError(415, 'unsupported-media-type', 'Unsupported media type', `a body with Content-Encoding ${clip(encoding, 40)} is not taken: send it uncompressed`), undefined);
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.headers['content-type'] ?? '')?.[1]?.toLowerCase();
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8' && charset !== 'us-ascii') return done(new ServiceError(415, 'unsupported-media-type', 'Unsupported media type', `a body in charset ${clip(charset, 40)} is not taken: send JSON as UTF-8`), undefined);
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      // (Read with U+FFFD in place of the bytes, two bodies that differ only there were one job: a retry, 200.)
      return done(new ServiceError(400, 'bad-request', 'Bad request', 'the body is not valid UTF-8: send JSON as UTF-8 text'), undefined);
    }
    try {
      done(null, parseStrictJson(text));
    } catch (e) {
      done(e instanceof StrictJsonError ? new ServiceError(400, 'bad-request', 'Bad request', e.message) : (e as Error), undefined);
    }
  });
  /** Whether a request's client has gone (its connection closed). */
  const gone = (req: FastifyRequest) => req.raw.socket.destroyed;
  /** Open event streams, at most server.maxEventStreams. */
  let streams = 0;
  const openStream = (): (() => void) => {
    if (streams >= srv.maxEventStreams) throw new ServiceError(503, 'too-many-streams', 'Too many event streams', `${streams} event streams are open (server.maxEventStreams): close one, or retry later`, { retryAfterS: srv.retryAfterS });
    streams++;
    let closed = false;
    return () => {
      if (!closed) streams--;
      closed = true;
    };
  };
  app.setErrorHandler(async (err: FastifyError, req, reply) => {
    if (err instanceof ServiceError) {
      return sendProblem(reply, { type: err.type, title: err.title, status: err.status, detail: err.detail, ...(err.extra.errors ? { errors: err.extra.errors } : {}) }, err.extra.retryAfterS);
    }
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      const type = err.code === 'FST_ERR_CTP_BODY_TOO_LARGE' ? 'body-too-large' : err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ? 'unsupported-media-type' : 'bad-request';
      const detail =
        type === 'body-too-large'
          ? `the body is over ${service.config.server.bodyLimitBytes} bytes (server.bodyLimitBytes): send a smaller job, or raise the limit`
          : type === 'unsupported-media-type'
            ? `send the body as JSON with the header Content-Type: application/json (got ${JSON.stringify(req.headers['content-type'] ?? 'none')}; curl: -H 'content-type: application/json')`
            : `${err.message}: send a JSON object, e.g. {"kind":"KIND","partitions":1} with KIND one of GET /v1/kinds`;
      if (type === 'body-too-large') await dropRestOfBody(req.raw);
      return sendProblem(reply, { type, title: type === 'bad-request' ? 'Bad request' : type === 'body-too-large' ? 'Body too large' : 'Unsupported media type', status, detail });
    }
    return sendProblem(reply, { type: 'internal', title: 'Internal error', status: 500, detail: `the server failed: ${err.message}` });
  });
  // A query parameter a route does not take is a 400 naming it (ignored, `offset` or `timeout=30s`
  // read as the first page again, or as no wait: a client looped on them). `config.query`: the ones it takes.
  app.addHook('preHandler', async (req) => {
    const config = req.routeOptions.config as { query?: readonly string[]; hint?: string };
    if (!config.query || typeof req.query !== 'object' || req.query === null) return;
    const unknown = Object.keys(req.query).filter((k) => !config.query?.includes(k));
    if (unknown.length === 0) return;
    const takes = config.query.length === 1 ? `only ${config.query[0]}` : `${config.query.slice(0, -1).join(', ')} and ${config.query.at(-1)}`;
    throw new ServiceError(400, 'bad-query', 'Unknown query parameter', `${req.routeOptions.url ?? req.url} takes ${takes}, not ${unknown.map((k) => JSON.stringify(k)).join(', ')}${config.hint ? `: ${config.hint}` : ''}`);
  });
  // Each path's methods, as the routes below are added: a known path asked with another method is
  // a 405 naming the ones it takes (Allow), not a 404 that says the path is not there.
  const methodsOf = new Map<string, Set<string>>();
  app.addHook('onRoute', (r) => {
    const set = methodsOf.get(r.url) ?? new Set<string>();
    for (const m of [r.method].flat()) set.add(m);
    methodsOf.set(r.url, set);
  });
  app.setNotFoundHandler((req, reply) =>
    sendProblem(reply, { type: 'not-found', title: 'Not found', status: 404, detail: `no route ${req.method} ${req.url.split('?')[0] ?? ''}: see GET /v1/openapi.json for the API` }),
  );

  app.post('/v1/jobs', async (req, reply) => {
    const { job, created } = await service.submit(req.body);
    return reply
      .code(created ? 202 : 200)
      .header('location', `/v1/jobs/${encodeURIComponent(job.id)}`)
      .send(briefView(job));
  });

  app.get<{ Params: { id: string }; Querystring: { statesFrom?: string; statesLimit?: string } }>('/v1/jobs/:id', { config: { query: ['statesFrom', 'statesLimit'] } }, async (req) => {
    const page = { from: intOf(req.query.statesFrom, 'statesFrom', 0, MAX_PARTITIONS, 0), limit: intOf(req.query.statesLimit, 'statesLimit', 0, STATES_PAGE_MAX, STATES_PAGE_MAX) };
    const job = await service.job(req.params.id, page);
    if (!job) throw notFound(req.params.id);
    return job;
  });

  app.get<{ Params: { id: string }; Querystring: { wait?: string } }>('/v1/jobs/:id/result', { config: { query: ['wait'] } }, async (req, reply) => {
    const wait: unknown = req.query.wait;
    // `?wait=1s&wait=2s` parses to an array: answer 400, not a TypeError's 500.
    const waitMs = wait === undefined ? 0 : typeof wait === 'string' ? parseWait(wait, service.config.server.maxWaitS) : 'wait must be given once, as a duration such as 30s';
    if (typeof waitMs === 'string') throw new ServiceError(400, 'bad-wait', 'Bad wait', waitMs);
    const job = await service.wait(req.params.id, waitMs, true);
    if (!job) throw notFound(req.params.id);
    const raw = job.result instanceof Uint8Array ? Buffer.from(job.result.buffer, job.result.byteOffset, job.result.byteLength) : undefined;
    const pieces = job.result instanceof ResultPieces ? job.result : undefined;
    if (job.state === 'done' && wantsBytes(req.headers.accept)) {
      if (pieces) return reply.code(200).type('application/octet-stream').header('content-length', pieces.bytes).send(cutOnStop(Readable.from(pieces.pieces(), { objectMode: false })));
      if (job.resultEncoding === 'base64') return reply.code(200).type('application/octet-stream').send(raw ?? Buffer.from(job.result as string, 'base64'));
      // (Bytes preferred, JSON taken too — `Accept: application/octet-stream, application/json;q=0.5`: the JSON.)
      if (!acceptsJson(req.headers.accept)) throw new ServiceError(406, 'not-bytes', 'Result is JSON', `job ${job.id}'s result is a JSON value, not bytes: ask with Accept: application/json`);
    }
    const body: ResultView = { id: job.id, state: job.state, result: raw || pieces ? '' : job.result, ...(job.resultEncoding ? { resultEncoding: job.resultEncoding } : {}), error: job.error, finishedAt: job.finishedAt, ...(job.onHold === undefined ? {} : { onHold: job.onHold }) };
    const code = job.state === 'queued' || job.state === 'running' ? 202 : 200;
    if (raw) return reply.code(code).type('application/json; charset=utf-8').send(cutOnStop(base64Body(body, inPieces(raw))));
    if (pieces) return reply.code(code).type('application/json; charset=utf-8').send(cutOnStop(base64Body(body, pieces.pieces())));
    return reply.code(code).send(body);
  });

  app.delete<{ Params: { id: string } }>('/v1/jobs/:id', async (req) => service.cancel(req.params.id));

  app.get<{ Querystring: { limit?: string; state?: string | string[]; before?: string | string[] } }>('/v1/jobs', { config: { query: ['limit', 'state', 'before'], hint: 'the list is the newest jobs, up to limit (at most 1000); the next page is ?before=<the last id listed>' } }, async (req) => {
    const states = statesOf(req.query.state);
    const { before } = req.query;
    if (Array.isArray(before) || before === '') throw new ServiceError(400, 'bad-query', 'Bad query', `before ${before === '' ? 'is empty' : 'must be given once'}: give the id of the last job of the page before (leave it out for the first page)`);
    return (await service.jobs({ limit: intOf(req.query.limit, 'limit', 0, 1000, 50), ...(states === undefined ? {} : { states }), ...(before === undefined ? {} : { before }) })).map(briefView);
  });

  app.get<{ Querystring: { since?: string; limit?: string } }>('/v1/timeline', { config: { query: ['since', 'limit'] } }, (req) => service.timelineView(sinceOf(req.query.since), intOf(req.query.limit, 'limit', 0, 50_000, 10_000)));

  app.get<{ Querystring: { since?: string } }>('/v1/history', { config: { query: ['since'] } }, (req) => service.historyView(req.query.since === undefined ? 600_000 : sinceOf(req.query.since)));
  app.get<{ Querystring: { since?: string } }>('/v1/trace', { config: { query: ['since'] } }, (req, reply) =>
    reply.header('content-disposition', 'inline; filename="stoker-trace.json"').send(service.trace(sinceOf(req.query.since))),
  );

  app.get('/', async (_req, reply) => {
    const html = await readFile(new URL('index.html', WEB), 'utf8');
    return reply.type('text/html; charset=utf-8').header('cache-control', 'no-cache').send(html);
  });

  app.get<{ Params: { file: string } }>('/assets/:file', async (req, reply) => {
    const asset = Object.hasOwn(ASSETS, req.params.file) ? ASSETS[req.params.file] : undefined;
    if (!asset) throw new ServiceError(404, 'not-found', 'Not found', `no asset ${JSON.stringify(req.params.file)}: the dashboard's assets are ${Object.keys(ASSETS).join(', ')}`);
    const body = await readFile(asset.file());
    return reply.type(asset.type).header('cache-control', 'no-cache').send(body);
  });

  // A consistent copy of the journal while the server runs (its exclusive lock keeps sqlite3 .backup out): a stoker.db to start a server on.
  app.get('/v1/backup', async (_req, reply) => {
    const file = await service.backup();
    const stream = cutOnStop(createReadStream(file));
    stream.on('close', () => rmSync(file, { force: true }));
    return reply
      .type('application/vnd.sqlite3')
      .header('content-length', statSync(file).size)
      .header('content-disposition', `attachment; filename="stoker-${new Date().toISOString().replace(/[:.]/g, '-')}.db"`)
      .send(stream);
  });

  app.get('/v1/status', async () => service.status());

  // Probes (no token: a probe seldom carries one, and they say no more than up or not): live while
  // the process answers; ready while it takes new jobs — not while it drains, its journal is full
  // or (cluster mode) Redis is away, so that a load balancer sends them elsewhere.
  app.get('/livez', async () => ({ status: 'live' }));
  app.get('/readyz', async (_req, reply) => {
    const why = await service.notReady();
    return why.length === 0 ? { status: 'ready' } : reply.code(503).send({ status: 'not ready', why });
  });
  const cluster = service.cluster?.bind(service);
  if (cluster) app.get('/v1/cluster', () => cluster());
  app.get('/v1/kinds', () => service.kindList());
  app.get('/v1/openapi.json', () => openApiDocument(service.config.server.maxWaitS, { cluster: cluster !== undefined }));

  app.get('/metrics', async (_req, reply) => {
    const text = await service.metrics.registry.metrics();
    return reply.type(service.metrics.registry.contentType).send(text);
  });

  app.get<{ Params: { id: string } }>('/v1/jobs/:id/events', { config: { query: ['access_token'] } }, async (req, reply) => {
    const id = req.params.id;
    // An unknown job is a 404 problem, before the stream starts.
    if (!(await service.job(id))) throw notFound(id);
    if (req.method === 'HEAD') return headOfStream(reply);
    // (Before the reply is taken over: a 503 for too many streams is answered as a problem.)
    const release = openStream();
    reply.hijack();
    const out = new EventStreamOut(reply.raw, 'stoker job events');
    const ping = setInterval(() => out.write(': ping\n\n'), 15_000);
    let unwatch: (() => void) | undefined;
    let stopped = false;
    const stop = () => {
      if (stopped) return;
      stopped = true;
      release();
      clearInterval(ping);
      unwatch?.();
      service.events.off('close', stop);
      out.end();
    };
    const send = (e: JobProgressEvent) => {
      if (stopped) return;
      out.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
      if (e.type === 'end') stop();
    };
    req.raw.on('close', stop);
    service.events.once('close', stop);
    // (A client gone while the job was looked up — in Redis, in cluster mode — closed before the
    // listener above: its place, its ping and the job's watch were kept for good.)
    if (gone(req)) return stop();
    try {
      const u = service.watchJob ? service.watchJob(id, send) : pollJob(service, id, send);
      if (stopped) u();
      else unwatch = u;
    } catch (e) {
      // The job went (purged) between the check and the watch.
      out.write(`event: error\ndata: ${JSON.stringify({ type: 'error', detail: e instanceof Error ? e.message : String(e) })}\n\n`);
      stop();
    }
  });

  app.get<{ Querystring: { lastEventId?: string } }>('/v1/events', { config: { query: ['lastEventId', 'access_token'] } }, (req, reply) => {
    if (req.method === 'HEAD') return headOfStream(reply);
    // (Repeated, it was read as its first value without a word, where the job list refuses a repeated limit.)
    const asked = once(req.query.lastEventId, 'lastEventId', 'lastEventId=<the id of the last event received>');
    // (Before the reply is taken over: a 503 for too many streams is answered as a problem.)
    const release = openStream();
    reply.hijack();
    // Reconnect after 2 s; every event has an id, so a reconnecting client says where it was.
    const out = new EventStreamOut(reply.raw, 'stoker events');
    const send = (e: ServiceEvent, eventId: string) => out.write(eventFrame(e, eventId));
    // (The header wins over the query parameter, as a browser's EventSource sends the header on its own.)
    const last = req.headers['last-event-id'] ?? asked;
    if (typeof last === 'string' && last !== '') {
      const r = service.replay(last);
      // A gap carries the latest id: the client's position moves to now.
      if ('gap' in r) out.write(`id: ${r.now}\nevent: gap\ndata: ${JSON.stringify({ type: 'gap', time: new Date().toISOString(), ...r.gap })}\n\n`);
      else void out.replay(r.events.map(({ event, eventId }) => eventFrame(event, eventId)));
    }
    const ping = setInterval(() => out.write(': ping\n\n'), 15_000);
    service.events.on('event', send);
    const stop = () => {
      release();
      clearInterval(ping);
      service.events.off('event', send);
      service.events.off('close', stop);
      out.end();
    };
    req.raw.on('close', stop);
    service.events.once('close', stop);
    if (gone(req)) stop();
  });

  for (const [url, methods] of [...methodsOf]) {
    const allow = [...methods].join(', ');
    const others = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'].filter((m) => !methods.has(m));
    if (others.length === 0) continue;
    // (Answered before the body is read: a body the path would never take is no reason for a 400 or 415. The access checks come first.)
    const notAllowed = (req: FastifyRequest, reply: FastifyReply) => sendProblem(reply.header('allow', allow), { type: 'method-not-allowed', title: 'Method not allowed', status: 405, detail: `${req.method} ${req.url.split('?')[0] ?? ''} is not served: it takes ${allow} (see GET /v1/openapi.json)` });
    app.route({
      method: others,
      url,
      onRequest: async (req, reply) => notAllowed(req, reply),
      handler: notAllowed,
    });
  }
  return app;
}

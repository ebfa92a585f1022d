/**
 * A device that is an HTTP endpoint (an inference server, a remote prover): each device worker
 * sends one request at a time; the prepared value is POSTed (JSON, or bytes as
 * application/octet-stream) and the response is the output (JSON when the response says
 * application/json, bytes otherwise). The item's busy time is the request's wall time, from
 * sending it until the whole response has arrived: the time the item occupied the worker —
 * never a compute time the server reports about itself, which leaves out its queueing and the
 * transfer. A timeout, a 4xx/5xx answer or an oversized response fails the item (the engine
 * retries it) — a 400, 401, 403, 404, 405, 410, 413, 414, 415 or 422 with `retry: false`: the
 * same request would be refused the same way (a bad input, a wrong URL or credentials).
 *
 * An endpoint that cannot be reached (no connection made: a server down or restarting) is waited
 * for: the step sends again after 250 ms, doubling to 5 s, until the endpoint has been unreachable
 * for `unreachableMs` (from the first refusal since it last answered, device-wide, and for each
 * step from its own first one); past that a step that is refused fails at once. (Failed at once,
 * each of an item's retries was spent within a second, and a restart of the endpoint failed its
 * jobs.) The item's busy time is its last request's.
 *
 * A batch (a device with `batch`) is one request: JSON `{ items: [{ job, kind, partition,
 * partitions, prepared }] }` (bytes as `{ preparedBase64 }` instead of `prepared`), answered by
 * JSON `{ results: [{ output } | { outputBase64 } | { error, retry? }] }`, one per item, in order; any
 * other answer fails the whole batch.
 */
import { connect, type Socket } from 'node:net';
import { asBytes } from './bytes.js';
import { checkPrepared, preparedJson, sendable } from './lossless-json.js';
import { maskSecrets, redactUrl, secretValues } from './redact.js';
import { batchSignal } from './batch-signal.js';
import type { DeviceRunner, RunCall } from './threaded.js';
import { roundedIntegers, roundedWords } from './json-walk.js';
import { failure } from './no-retry.js';
import { WorkerTurns } from './turns.js';
import type { BatchItemReply } from './threads/protocol.js';

export interface HttpDeviceOptions {
  /** The device's name, in errors. */
  name: string;
  /** Concurrent requests: one per worker. */
  workers: number;
  /** Where items are POSTed. */
  url: string;
  /** Extra request headers (e.g. authorization). @default {} */
  headers?: Readonly<Record<string, string>>;
  /** A request running longer fails its item. @default Infinity */
  timeoutMs?: number;
  /** The largest response accepted, bytes. @default 1 GiB */
  maxResponseBytes?: number;
  /** How long a step waits for an endpoint that refuses connections, ms (see the file's comment). @default 60000 */
  unreachableMs?: number;
  /** Where the device says that its endpoint went unreachable and came back. @default none */
  log?: (line: string) => void;
}

/**
 * Errors of a connection that was never made (refused, no route, no name): the request reached no
 * server, and is sent again while the endpoint is waited for. (Not a reset or a broken pipe: those
 * come after the server took the request too — one that crashes it would be sent again and again.)
 */
const UNREACHED: ReadonlySet<string> = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT']);
/** The first wait before sending again to an unreachable endpoint, and the longest, ms. */
const RESEND_FIRST_MS = 250;
const RESEND_MAX_MS = 5000;

/** Answers that the same request would get again (a bad input, a wrong URL or credentials): the item fails at once, without its retries. Other 4xx (408, 409, 423, 425, 429…) pass. */
const FINAL_STATUS: ReadonlySet<number> = new Set([400, 401, 403, 404, 405, 410, 413, 414, 415, 422]);

/** Characters of an error response's body quoted in the failure. */
const BODY_EXCERPT = 200;

export class HttpDevice implements DeviceRunner {
  private readonly turns = new WorkerTurns();
  private readonly o: Required<HttpDeviceOptions>;
  /** The URL as errors and logs show it (credentials in it read ***). */
  private readonly shown: string;
  /**
   * The steps' outage, which each step's wait is counted in: since when (performance.now()) the
   * endpoint has refused every step's request (NaN while it answers), and the latest refusal. Only
   * steps move it: a probe's refusals would keep an outage fresh that no step saw, and a step sent
   * into it failed at once.
   */
  private downSince = NaN;
  private lastRefusal = -Infinity;
  /** What is shown (status, /readyz) and said: unreachable since (performance.now(); NaN: reachable), why, when last seen so — from steps and probes alike. */
  private shown0 = NaN;
  private shownLast = 0;
  private shownCode = '';
  private shownAt = 0;
  /** While it is shown unreachable: a connection tried every RESEND_MAX_MS, so that its return is seen with no step sent (an idle server, or one its load balancer took out of service). */
  private probe: NodeJS.Timeout | undefined;
  private probing: Socket | undefined;
  private closed = false;
  /** The credentials it sends (credential-named headers and query values): read *** in an answer it quotes (an error page may echo the request). */
  private readonly secrets: string[];

  constructor(options: HttpDeviceOptions) {
    const creds = credentialsProblem(options.url);
    if (creds) throw new Error(`url ${redactUrl(options.url)}: ${creds}`);
    this.o = { headers: {}, timeoutMs: Infinity, maxResponseBytes: 2 ** 30, unreachableMs: 60_000, log: () => {}, ...options };
    this.shown = redactUrl(options.url);
    // (The server's own credential-named variables too, as the README says: an endpoint that echoed
    // an OPENAI_API_KEY it never got — a shared secret — showed it whole.)
    this.secrets = secretValues({ headers: options.headers ?? {}, url: options.url, env: process.env });
    // At start: an endpoint not there (a wrong port, not started yet) is said now, not at the first step.
    this.tryConnect();
  }

  /** While no connection can be made to the endpoint: why (an error code) and since when (ISO); else undefined. */
  unreachable(): { code: string; since: string } | undefined {
    return Number.isNaN(this.shown0) ? undefined : { code: this.shownCode, since: new Date(this.shownAt).toISOString() };
  }

  async run(call: RunCall): Promise<{ output: unknown; busyMs: number }> {
    const label = `${this.o.name}/${call.worker}`;
    if (!(call.worker >= 0 && call.worker < this.o.workers)) throw new Error(`no worker ${call.worker} on device ${this.o.name}`);
    // (Withdrawn while it waited for its turn: nothing is sent.)
    return this.turns.take(call.worker, () => (call.signal.aborted ? Promise.reject(new Error(`${label}: withdrawn before it was sent`)) : this.request(call, label)));
  }

  /** A batch as one POST (see the file's comment): one result per item, the request's wall time once. */
  async runBatch(calls: RunCall[]): Promise<{ results: BatchItemReply[]; busyMs: number }> {
    const first = calls[0] as RunCall;
    if (!(first.worker >= 0 && first.worker < this.o.workers)) throw new Error(`no worker ${first.worker} on device ${this.o.name}`);
    const label = `${this.o.name}/${first.worker}`;
    // An item whose prepared value cannot be sent fails alone; the others run.
    const check = (c: RunCall) => void (asBytes(c.prepared.meta) ?? checkPrepared(c.prepared.meta));
    return sendable(calls, check, (ok) => this.turns.take(first.worker, () => (batchSignal(ok).aborted ? Promise.reject(new Error(`${label}: withdrawn before it was sent`)) : this.batch(ok, label))));
  }

  /** The batch's POST and its results (on the worker's turn). */
  private async batch(calls: RunCall[], label: string): Promise<{ results: BatchItemReply[]; busyMs: number }> {
    const items = calls.map((c) => {
      const bytes = asBytes(c.prepared.meta);
      const head = { job: c.jobId, kind: c.kind ?? '', partition: c.partition, partitions: c.partitions };
      return bytes ? { ...head, preparedBase64: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64') } : { ...head, prepared: c.prepared.meta ?? null };
    });
    const { data, json, busyMs, rounded = [] } = await this.post(label, JSON.stringify({ items }), { 'content-type': 'application/json', 'stoker-batch': String(calls.length) }, batchSignal(calls));
    const results = (json as { results?: unknown } | undefined)?.results;
    if (!Array.isArray(results) || results.length !== calls.length) {
      throw new Error(`${label}: POST ${this.shown} answered ${JSON.stringify(this.excerpt(data))} for a batch of ${calls.length}: answer JSON { "results": [...] }, one { "output" }, { "outputBase64" } or { "error" } per item, in order`);
    }
    return {
      busyMs,
      results: results.map((r: unknown, i): BatchItemReply => {
        const x = (typeof r === 'object' && r !== null ? r : {}) as Record<string, unknown>;
        // (The worker named, as a single item's failure names it; a trailing newline left off.)
        if (typeof x['error'] === 'string') {
          const error = `${label}: ${maskSecrets(x['error'].trimEnd(), this.secrets)}`;
          return x['retry'] === false ? { error, retry: false } : { error };
        }
        if (typeof x['outputBase64'] === 'string') return { output: new Uint8Array(Buffer.from(x['outputBase64'], 'base64')) };
        // (Only an item's own output fails it: a number elsewhere in the answer is no item's.)
        const changed = rounded.find((n) => within(n.path, `$.results[${i}].output`));
        if (changed) return { error: roundedError(label, this.shown, changed), retry: false };
        if ('output' in x) return { output: x['output'] };
        return { error: `${label}: the batch's result ${i} is ${JSON.stringify(r)}: give { "output" }, { "outputBase64" } or { "error" }` };
      }),
    };
  }

  close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.probe);
    this.probing?.destroy();
    return Promise.resolve();
  }

  /** No connection could be made (a step's request, or a probe's): shown unreachable from the first, said once; probed until it is back. */
  private markDown(code: string, said: string): void {
    const now = performance.now();
    if (Number.isNaN(this.shown0)) {
      this.shown0 = now;
      this.shownCode = code;
      this.shownAt = Date.now();
      this.o.log(`[device ${this.o.name}] ${said}`);
    }
    this.shownLast = now;
    if (!this.probe && !this.probing && !this.closed) this.probe = setTimeout(() => this.tryConnect(), RESEND_MAX_MS).unref();
  }

  /** A step's request was answered, or a probe connected: shown reachable again, said once. */
  private markUp(how: string): void {
    clearTimeout(this.probe);
    this.probe = undefined;
    if (Number.isNaN(this.shown0)) return;
    // Unreachable from its first failure until some time between its last and now: said as that
    // range (the time to its last failure alone read "0.0 s" of an outage of 4 s seen once, and
    // "108.3 s" of one that lasted minutes).
    const now = performance.now();
    const s = (ms: number) => (ms / 1000).toFixed(1);
    this.o.log(`[device ${this.o.name}] ${this.shown} ${how}: it was unreachable for ${s(this.shownLast - this.shown0)}–${s(now - this.shown0)} s (to its last failure, and to this answer)`);
    this.shown0 = NaN;
  }

  /** Opens a TCP connection to the endpoint and closes it: up when it connects, down (and tried again) on any error or no connection within RESEND_MAX_MS. */
  private tryConnect(): void {
    this.probe = undefined;
    if (this.closed || this.probing) return;
    let url: URL;
    try {
      url = new URL(this.o.url);
    } catch {
      return;
    }
    const socket = connect({ host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || (url.protocol === 'https:' ? 443 : 80)) });
    this.probing = socket;
    socket.unref();
    const failed = (code: string) => {
      socket.destroy();
      this.probing = undefined;
      if (!this.closed) this.markDown(code, `${this.shown} is unreachable (${code}): steps wait for it (sent again every ≤ ${RESEND_MAX_MS / 1000} s) for up to ${this.o.unreachableMs / 1000} s (unreachableS)`);
    };
    socket.setTimeout(RESEND_MAX_MS, () => failed('no connection within 5 s'));
    socket.once('connect', () => {
      socket.destroy();
      this.probing = undefined;
      if (!this.closed) this.markUp('takes connections again');
    });
    socket.once('error', (e: NodeJS.ErrnoException) => failed(e.code ?? e.message));
  }

  /**
   * The first BODY_EXCERPT characters of what the endpoint answered, its credentials read `***` —
   * masked before the cut: cut first, a token across the cut kept the characters before it.
   */
  private excerpt(data: Uint8Array): string {
    const longest = this.secrets[0]?.length ?? 0;
    return maskSecrets(new TextDecoder().decode(data.subarray(0, BODY_EXCERPT + 4 * longest)), this.secrets).slice(0, BODY_EXCERPT);
  }

  /** POSTs a body; the response's bytes (its JSON, when it says application/json) and the request's wall time. */
  private async post(label: string, body: string | Uint8Array, extra: Record<string, string>, signal: AbortSignal): Promise<{ data: Uint8Array; json: unknown; busyMs: number; rounded?: Rounded[] }> {
    let t0 = 0;
    let res: Response | undefined;
    /** This step's first refusal: it waits unreachableMs from then at the most, whatever the other steps see. */
    let refusedAt = NaN;
    for (let wait = RESEND_FIRST_MS; !res; wait = Math.min(2 * wait, RESEND_MAX_MS)) {
      const signals = [signal, ...(Number.isFinite(this.o.timeoutMs) ? [AbortSignal.timeout(this.o.timeoutMs)] : [])];
      t0 = performance.now();
      try {
        // (Not followed: a 302 was taken as a GET whose answer became every output, the job done; a 307
        // sent the body and the configured headers — credentials — to the origin it named.)
        res = await fetch(this.o.url, { method: 'POST', headers: { ...this.o.headers, ...extra }, body, signal: AbortSignal.any(signals), redirect: 'manual' });
      } catch (e) {
        const code = (e as { cause?: { code?: unknown } }).cause?.code;
        if (signal.aborted || typeof code !== 'string' || !UNREACHED.has(code)) throw new Error(`${label}: POST ${this.shown} failed: ${reason(e, this.o.timeoutMs)}`);
        const now = performance.now();
        // (A refusal long after the last one, nothing sent between: a new outage, not the old one's.)
        if (Number.isNaN(this.downSince) || now - this.lastRefusal > 2 * RESEND_MAX_MS) this.downSince = now;
        this.lastRefusal = now;
        this.markDown(code, `POST ${this.shown} failed: ${code}: the endpoint is waited for (sent again every ≤ ${RESEND_MAX_MS / 1000} s) for up to ${this.o.unreachableMs / 1000} s (unreachableS)`);
        if (Number.isNaN(refusedAt)) refusedAt = now;
        // Since the outage began, or this step's first refusal if that came first (another step's answer ended the outage meanwhile).
        const down = now - Math.min(this.downSince, refusedAt);
        if (down >= this.o.unreachableMs) {
          throw new Error(`${label}: POST ${this.shown} failed: ${code}: the endpoint has been unreachable for ${(down / 1000).toFixed(down < 1000 ? 2 : 1)} s (waited for up to unreachableS = ${this.o.unreachableMs / 1000} s)`);
        }
        // (The last try comes when unreachableS is up, not a pause before it: it failed at 7.8 s of 10.)
        await pause(Math.min(wait, this.o.unreachableMs - down), signal);
        if (signal.aborted) throw new Error(`${label}: POST ${this.shown} failed: the step was withdrawn`);
      }
    }
    this.downSince = NaN;
    this.markUp('answers again');
    let data: Uint8Array;
    try {
      data = await readLimited(res, this.o.maxResponseBytes);
    } catch (e) {
      // (An output over the limit would come again: its job fails at once, saying what to raise. An
      // error page over it says only that the endpoint failed: retried as its status says.)
      if (e instanceof RangeError) {
        if (!res.ok) throw failure(`${label}: POST ${this.shown} answered ${res.status} ${res.statusText}: ${e.message}`, FINAL_STATUS.has(res.status) ? false : undefined);
        throw failure(`${label}: POST ${this.shown}: ${e.message}: raise [device.http] maxResponseBytes, or return less`, false);
      }
      throw new Error(`${label}: POST ${this.shown}: the response broke off: ${reason(e, this.o.timeoutMs)}`);
    }
    const busyMs = performance.now() - t0;
    const text = () => this.excerpt(data).trim();
    if (res.status >= 300 && res.status < 400) {
      const to = res.headers.get('location');
      throw failure(`${label}: POST ${this.shown} answered ${res.status} ${res.statusText}, a redirect${to ? ` to ${maskSecrets(redactUrl(to), this.secrets)}` : ''}: stoker follows none (the prepared data and the configured headers would go where the answer says) — give the URL that answers in [device.http] url`, false);
    }
    if (!res.ok) throw failure(`${label}: POST ${this.shown} answered ${res.status} ${res.statusText}: ${text()}`, FINAL_STATUS.has(res.status) ? false : undefined);
    const type = res.headers.get('content-type') ?? '';
    // (A web page is not an output: a proxy's or a wrong route's page was taken as bytes, and its
    // job failed later, at finish, saying only that it held bytes.)
    if (/^text\/html\b/i.test(type)) throw new Error(`${label}: POST ${this.shown} answered ${res.status} ${type}, a web page, not an output (${JSON.stringify(text().slice(0, 120))}): check [device.http] url — an output is JSON (application/json) or bytes (any other type)`);
    if (!/^application\/(.+\+)?json\b/i.test(type)) return { data, json: undefined, busyMs };
    const answer = new TextDecoder().decode(data);
    let json: unknown;
    try {
      json = JSON.parse(answer);
    } catch {
      throw new Error(`${label}: POST ${this.shown} answered application/json that is not JSON: ${text()}`);
    }
    return { data, json, busyMs, rounded: roundedIntegers(answer, json) };
  }

  private async request(call: RunCall, label: string): Promise<{ output: unknown; busyMs: number }> {
    const { meta } = call.prepared;
    const body = asBytes(meta);
    const headers: Record<string, string> = {
      'content-type': body ? 'application/octet-stream' : 'application/json',
      'stoker-job': encodeURIComponent(call.jobId),
      'stoker-kind': encodeURIComponent(call.kind ?? ''),
      'stoker-partition': String(call.partition),
      'stoker-partitions': String(call.partitions),
    };
    // (Refused, retry: false, where JSON would change it: an Int32Array inside it became {"0":…}.)
    const { data, json, busyMs, rounded = [] } = await this.post(label, body ?? preparedJson(meta), headers, call.signal);
    // (JSON.parse rounds an integer no double holds: an int64 id came back changed, the job done. The same answer would come again: no retry.)
    const r = rounded[0];
    if (r) throw failure(roundedError(label, this.shown, r), false);
    return { output: json === undefined ? data : json, busyMs };
  }
}

type Rounded = { literal: string; path: string };

/** Whether a JSON path is `at` or inside it. */
function within(path: string, at: string): boolean {
  return path === at || path.startsWith(`${at}.`) || path.startsWith(`${at}[`);
}

/** An output's integer that JSON.parse rounded, said. */
function roundedError(label: string, url: string, r: Rounded): string {
  const w = roundedWords(r.literal);
  return `${label}: POST ${url} answered ${w.integer} at ${r.path}, ${w.rest}`;
}

/**
 * Why a URL with credentials in it (`http://user:pw@host/…`) cannot be an endpoint, or undefined:
 * fetch refuses it at every step, its error quoting the URL — password and all — into job errors
 * and logs (a container deployer's trial).
 */
export function credentialsProblem(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined;
  }
  if (u.username === '' && u.password === '') return undefined;
  return 'a URL with user:password@ in it cannot be sent (fetch refuses credentials in a URL): give them as a header instead, e.g. headers = { Authorization = "Basic …" } (the base64 of user:password), and leave them out of the url';
}

/** Resolves after `ms`, or at once when `signal` fires. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

function reason(e: unknown, timeoutMs: number): string {
  const err = e as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (err.name === 'TimeoutError') return `no answer within ${timeoutMs / 1000} s (timeoutS)`;
  if (err.name === 'AbortError') return 'the step was withdrawn';
  const code = err.cause?.code;
  if (code !== undefined && Object.hasOwn(PLAIN, code)) return `${PLAIN[code]} (${code})`;
  // (A certificate refused read as its bare code: DEPTH_ZERO_SELF_SIGNED_CERT, and nothing of what to do.)
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return `the endpoint's certificate does not name the host of [device.http] url (${code}): use a name or address it lists, or give it a certificate that lists this one`;
  if (code !== undefined && /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER/.test(code)) return `the endpoint's certificate is not trusted (${code}): start the server with NODE_EXTRA_CA_CERTS=/path/ca.pem naming its CA (or the self-signed certificate itself)`;
  return code ?? err.cause?.message ?? err.message ?? String(e);
}

/** What the network errors a POST can end with mean, in words (the code follows in parentheses). */
const PLAIN: Readonly<Record<string, string>> = {
  UND_ERR_SOCKET: 'the endpoint closed the connection before it answered',
  ECONNRESET: 'the endpoint reset the connection before it answered',
  EPIPE: 'the endpoint closed the connection while the request was sent',
  UND_ERR_HEADERS_TIMEOUT: 'the endpoint sent no answer headers in time',
  UND_ERR_BODY_TIMEOUT: 'the endpoint stopped sending its answer',
};

/** The body, refusing one over `max` bytes (by Content-Length, or as it streams). */
async function readLimited(res: Response, max: number): Promise<Uint8Array> {
  const declared = Number(res.headers.get('content-length') ?? NaN);
  if (declared > max) throw new RangeError(`a response of ${declared} bytes is over the ${max}-byte limit (maxResponseBytes)`);
  if (!res.body) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    total += chunk.byteLength;
    if (total > max) throw new RangeError(`a response over the ${max}-byte limit (maxResponseBytes)`);
    chunks.push(chunk);
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

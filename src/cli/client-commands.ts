import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { parseDuration } from '../server/durations.js';
import { UsageError, type Io } from './io.js';
import { formatBytes, formatJson } from './table.js';

/** The first line of a token file; a file that cannot be read is a usage error naming it. */
export function readToken(file: string, flag: string): string {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new UsageError(`${flag} ${file}: cannot read it (${(e as NodeJS.ErrnoException).code ?? String(e)}): give a file whose first line is the token`);
  }
  const token = (text.split('\n')[0] ?? '').trim();
  // (Taken as "no token", an empty file — a secret mount that came up empty — opened the API to anyone.)
  if (token === '') throw new UsageError(`${flag} ${file}: its first line is empty: put the token on the first line (a server given no token needs none: leave --token-file out for that)`);
  return token;
}

/** An HTTP reply the client failed on: exit code 2 for a 4xx (the request was wrong), 1 otherwise. */
export class ClientError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
    /** The server could not be reached, or could not answer now (502, 503, 504): a later try may. */
    readonly transient = false,
    /** The request reached the server (it answered, or broke the connection it had taken). */
    readonly reached = true,
    /** The server's problem body (`title`, `status`, `detail`, …) where it answered one: what `--json` prints. */
    readonly problem?: Record<string, unknown>,
  ) {
    super(message);
  }
}

export interface ClientFlags {
  server: string;
  json?: boolean;
  /** --token-file FILE; else $STOKER_SERVER_TOKEN. */
  tokenFile?: string;
}

/** The Authorization header for a server with a token (from --token-file, else STOKER_SERVER_TOKEN). */
function authHeader(flags: ClientFlags): Record<string, string> {
  const token = flags.tokenFile !== undefined ? readToken(flags.tokenFile, '--token-file') : process.env['STOKER_SERVER_TOKEN'];
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** Why a fetch failed: its cause's code (ECONNREFUSED…), else its cause's message, else its own. */
function fetchCause(e: unknown): string {
  const cause = (e as { cause?: { code?: unknown; message?: unknown } }).cause;
  if (typeof cause?.code === 'string') return cause.code;
  if (typeof cause?.message === 'string') return cause.message;
  return e instanceof Error ? e.message : String(e);
}

/**
 * One request to a running server (its token from the flags); throws a ClientError when it cannot
 * be reached. `bytes`: asks for bytes first (JSON too), and a 200 of bytes is handed to it (its
 * answer is the body).
 */
export async function call(flags: ClientFlags, method: string, path: string, body?: unknown, bytes?: (res: Response) => Promise<unknown>, shape: (body: unknown) => boolean = () => true): Promise<{ status: number; body: unknown }> {
  const url = new URL(path, serverUrl(flags.server));
  let res: Response;
  try {
    res = await fetch(url, { method, headers: { ...authHeader(flags), ...(bytes ? { accept: 'application/octet-stream, application/json;q=0.5' } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  } catch (e) {
    const cause = fetchCause(e);
    // A port fetch() never connects to (the Fetch standard's blocked ports: 1, 6000, 10080…): it said only "fetch failed".
    if (cause === 'bad port') throw new ClientError(`cannot use the server at ${flags.server}: Node's fetch refuses that port (a port the Fetch standard blocks, as browsers do): run the server on another port (server.port)`, 2);
    // A certificate of another host: trusting it is not the fix (the message said to give the CA given already).
    if (cause === 'ERR_TLS_CERT_ALTNAME_INVALID') {
      throw new ClientError(`the server at ${flags.server} answered with a certificate that does not name ${url.hostname} (${cause}): ask it by a name or address its certificate lists (its subjectAltName), or give it a certificate that lists this one (openssl req … -addext "subjectAltName=IP:127.0.0.1,DNS:localhost")`, 1);
    }
    // A certificate the client does not trust: the server is there, starting one is not the fix.
    if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ERR_TLS/.test(cause)) {
      throw new ClientError(`the server at ${flags.server} answered with a certificate this client does not trust (${cause}): give its CA (or the self-signed certificate) in NODE_EXTRA_CA_CERTS=/path/cert.pem`, 1);
    }
    // (A connection refused or never made reached nothing; one broken mid-answer — the server ended — did.)
    const reached = !/^(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|UND_ERR_CONNECT_TIMEOUT)$/.test(cause);
    // (One broken before the answer read "cannot reach the server … start it": it was reached, and ended — a restart, say.)
    if (reached) throw new ClientError(`the server at ${flags.server} closed the connection before it answered (${cause}): it stopped or restarted meanwhile — try again once it is back`, 1, true, true);
    throw new ClientError(`cannot reach the server at ${flags.server} (${cause}): start it with \`stoker serve\`, or pass --server / set STOKER_SERVER`, 1, true, false);
  }
  if (bytes && res.status === 200 && /^application\/(octet-stream|vnd\.sqlite3)\b/.test(res.headers.get('content-type') ?? '')) return { status: 200, body: await bytes(res) };
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text) as unknown;
  } catch {
    // not JSON: keep the text
  }
  if (res.status >= 400) {
    const p = (typeof parsed === 'object' && parsed !== null ? parsed : {}) as { title?: string; detail?: string };
    const retry = res.headers.get('retry-after');
    // Not a stoker answer (an HTML page from something else on that port): its first line, not the whole page.
    const said = typeof p.detail === 'string' ? p.detail : notStoker(text, flags.server);
    // (The server names its header; the CLI's way to send it is --token-file or STOKER_SERVER_TOKEN.)
    const detail = res.status === 401 ? `${said} (stoker's commands send it from --token-file FILE, else $STOKER_SERVER_TOKEN)` : said;
    // (The detail may say when to retry itself: then once.) A 429 is "later", as a 5xx: exit 1.
    const problem = record(parsed) && typeof parsed['title'] === 'string' ? parsed : undefined;
    throw new ClientError(`${res.status} ${p.title ?? res.statusText}: ${detail}${retry && !/retry after/i.test(detail) ? ` (retry after ${retry} s)` : ''}`, res.status < 500 && res.status !== 429 ? 2 : 1, res.status === 502 || res.status === 503 || res.status === 504, true, problem);
  }
  // Something else on that port that answers 200 to anything: said so, not read as a job or a status.
  if (!shape(parsed)) throw new ClientError(`${method} ${url.pathname} answered ${res.status}: ${notStoker(text, flags.server)}`, 2);
  return { status: res.status, body: parsed };
}

const record = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
/** What a stoker server answers, as far as the client reads it: a job's view or its result (an id and a state), the status, a trace. */
const isJob = (v: unknown) => record(v) && typeof v['id'] === 'string' && typeof v['state'] === 'string';
const isStatus = (v: unknown) => record(v) && record(v['jobs']) && record(v['partitions']) && record(v['pacer']) && Array.isArray(v['devices']) && record(v['budget']);
export const isTrace = (v: unknown) => record(v) && Array.isArray(v['traceEvents']);

const show = (io: Io, v: unknown) => io.out(`${formatJson(v)}\n`);

/** The server's base URL (with a trailing slash); one that is not a URL is a usage error naming --server. */
function serverUrl(server: string): URL {
  let url: URL | undefined;
  try {
    url = new URL(server.endsWith('/') ? server : `${server}/`);
  } catch {
    // (not a URL: below)
  }
  // (`localhost:7070` parses, as a URL of the scheme "localhost:".)
  if (url?.protocol !== 'http:' && url?.protocol !== 'https:') throw new UsageError(`--server must be the server's http:// or https:// URL, e.g. http://127.0.0.1:8080 (got ${JSON.stringify(server)}; or set STOKER_SERVER)`);
  // (The API's own prefix: every call went to /v1/v1/…, a 404. A path before it — a proxy's — is kept.)
  if (/\/v1\/$/.test(url.pathname)) throw new UsageError(`--server is the server's base URL, without /v1: ${url.origin}${url.pathname.slice(0, -'v1/'.length).replace(/\/$/, '')} (got ${JSON.stringify(server)})`);
  return url;
}

/** What a reply that is not a stoker problem body says: an HTML page's title, else its first line (at most 200 characters), and that it may not be stoker. */
function notStoker(text: string, server: string): string {
  const title = /<title[^>]*>([^<]*)<\/title>/i.exec(text)?.[1]?.trim();
  const line = title || (text.replace(/<[^>]*>/g, ' ').split('\n').map((l) => l.replace(/\s+/g, ' ').trim()).find((l) => l.length > 0) ?? '(empty)');
  return `${line.length > 200 ? `${line.slice(0, 200)}…` : line} (not a stoker answer: is ${server} a stoker server?)`;
}

export interface SubmitFlags extends ClientFlags {
  kind: string;
  partitions?: string;
  id?: string;
  priority?: string;
  input?: string;
  inputFile?: string;
  deadline?: string;
}

/** `--deadline`: epoch ms, an ISO time (sent as it is: the server checks it), or `+DURATION` from now (+90s, +2h). */
function deadlineOf(text: string): number | string {
  if (/^\d+$/.test(text)) return Number(text);
  // (A duration without its +: the server's "epoch ms or ISO time" said nothing of the form the CLI takes.)
  if (!text.startsWith('+') && parseDuration(text) > 0) throw new UsageError(`--deadline ${text}: a duration from now takes a + (--deadline +${text}); or give an ISO 8601 time with its zone (2030-01-01T00:00:00Z), or epoch ms`);
  if (!text.startsWith('+')) return text;
  const ms = parseDuration(text.slice(1));
  if (!(ms > 0)) throw new UsageError(`--deadline ${text}: give a duration from now such as +90s, +30m or +2h, an ISO 8601 time with its zone (2030-01-01T00:00:00Z), or epoch ms`);
  return Date.now() + ms;
}

/** `stoker submit`: prints the accepted job. */
export async function submitCommand(flags: SubmitFlags, io: Io): Promise<void> {
  if (flags.input !== undefined && flags.inputFile !== undefined) throw new UsageError('give --input or --input-file, not both');
  const text = flags.inputFile !== undefined ? readInput(flags.inputFile) : flags.input;
  let input: unknown;
  if (text !== undefined) {
    try {
      input = JSON.parse(text) as unknown;
    } catch (e) {
      throw new UsageError(`${flags.inputFile !== undefined ? `--input-file ${flags.inputFile}` : '--input'} must be JSON, e.g. '{"prepareMs": 100}': ${(e as Error).message}`);
    }
  }
  const deadline = flags.deadline === undefined ? undefined : deadlineOf(flags.deadline);
  const body = { kind: flags.kind, ...(flags.partitions === undefined ? {} : { partitions: Number(flags.partitions) }), ...(flags.id ? { id: flags.id } : {}), ...(flags.priority ? { priority: flags.priority } : {}), ...(input === undefined ? {} : { input }), ...(deadline === undefined ? {} : { deadline }) };
  const r = await call(flags, 'POST', 'v1/jobs', body, undefined, isJob);
  if (flags.json) return show(io, r.body);
  const job = r.body as { id: string; state: string };
  io.out(`${r.status === 202 ? 'accepted' : 'already submitted'}: ${job.id} (${job.state})\n`);
}

function readInput(file: string): string {
  try {
    // (Without its byte order mark — Windows editors and PowerShell 5 write one: JSON.parse read it as an unexpected token no one could see.)
    return fs.readFileSync(file, 'utf8').replace(/^\uFEFF/, '');
  } catch (e) {
    throw new UsageError(`cannot read --input-file ${file}: ${(e as Error).message}`);
  }
}

/** `stoker status [id]`: the engine, or one job. */
export async function statusCommand(id: string | undefined, flags: ClientFlags, io: Io): Promise<void> {
  if (id !== undefined) {
    const r = await call(flags, 'GET', `v1/jobs/${encodeURIComponent(id)}`, undefined, undefined, isJob);
    return show(io, r.body);
  }
  const r = await call(flags, 'GET', 'v1/status', undefined, undefined, isStatus);
  if (flags.json) return show(io, r.body);
  io.out(statusText(r.body as StatusBody));
}

/** What `stoker status` reads of GET /v1/status. */
export interface StatusBody {
  jobs: Record<string, number>;
  partitions: { queued: number; preparing: number; waiting: number; onDevice: number };
  targetWaiting: number;
  pacer: { name: string; mode: string; ratePerSec: number | null; intervalMs: number | null; kinds?: { name: string; estimatedPerSec: number | null }[] };
  devices: { device: number; name?: string; unreachable?: string; workers: { state: string }[] }[];
  budget: { usedBytes: number; totalBytes: number | null };
  /** A cluster node's: the shared queues (the lines above are this node's own). */
  cluster?: { node: string; queue: Record<string, number>; jobsHeld: number; maxHeld: number };
}

/** `stoker status`'s lines for a server's status. */
export function statusText(s: StatusBody): string {
  // Per device where there are several (a [device] no kind runs on counted with the others read as idle workers).
  const busyOf = (ws: { state: string }[]) => `${ws.filter((w) => w.state === 'busy').length}/${ws.filter((w) => w.state !== 'lost').length}`;
  const lost = s.devices.flatMap((d) => d.workers).filter((w) => w.state === 'lost').length;
  // Kinds of different device times: the capacity of each (one figure was the next queued item's kind's, and jumped 20/s → 4/s between kinds — a user trial).
  const byKind = (s.pacer.kinds ?? []).filter((k) => k.estimatedPerSec !== null);
  const capacity = byKind.length > 1 ? `by kind ${byKind.map((k) => `${k.name} ${(k.estimatedPerSec as number).toFixed(2)}/s`).join(', ')}` : s.pacer.ratePerSec === null ? '–' : `${s.pacer.ratePerSec.toFixed(2)}/s`;
  const devices = s.devices.length === 1 ? busyOf(s.devices[0]?.workers ?? []) : s.devices.map((d) => `${d.name ?? d.device} ${busyOf(d.workers)}`).join(', ');
  return (
    [
      `jobs        pending ${s.jobs['pending']}  (queued ${s.jobs['queued']}, running ${s.jobs['running']}${s.jobs['onHold'] ? `; ${s.jobs['onHold']} on hold: see their views' onHold` : ''})  done ${s.jobs['done']}  failed ${s.jobs['failed']}  cancelled ${s.jobs['cancelled']}`,
      `partitions  queued ${s.partitions.queued}  preparing ${s.partitions.preparing}  waiting ${s.partitions.waiting} (target ${s.targetWaiting})  on device ${s.partitions.onDevice}`,
      `devices     ${devices} workers busy${lost > 0 ? ` (${lost} lost)` : ''}`,
      ...s.devices.flatMap((d) => (d.unreachable ? [`            device ${d.name ?? d.device} unreachable: ${d.unreachable}`] : [])),
      `pacer       ${s.pacer.name} ${pacerMode(s)}  capacity ${capacity}  target dispatch ${s.pacer.intervalMs === null || s.pacer.mode === 'idle' ? '–' : `${(1000 / s.pacer.intervalMs).toFixed(2)}/s`}`,
      `budget      ${formatBytes(s.budget.usedBytes)} of ${s.budget.totalBytes === null ? 'unlimited' : formatBytes(s.budget.totalBytes)}`,
      ...(s.cluster ? [clusterLine(s.cluster)] : []),
    ].join('\n') + '\n'
  );
}

/** The pacer's mode, but "all dispatched" where it is idle with nothing queued and partitions in flight (as the dashboard says it: "idle" read as a stall while jobs ran — a user trial). */
function pacerMode(s: StatusBody): string {
  const p = s.partitions;
  return s.pacer.mode === 'idle' && p.queued === 0 && p.preparing + p.waiting + p.onDevice > 0 ? 'all dispatched' : s.pacer.mode;
}

/** A cluster node's status line: the shared queues of every kind (the other lines are the node's own work). */
function clusterLine(c: { node: string; queue: Record<string, number>; jobsHeld: number; maxHeld: number }): string {
  const q = (k: string) => c.queue[k] ?? 0;
  return `cluster     node ${c.node} holds ${c.jobsHeld} of at most ${c.maxHeld} jobs; the queues: queued ${q('waiting') + q('prioritized') + q('delayed')}, running ${q('active')} (GET /v1/cluster: every node)`;
}

/** Parses `30s`, `500ms`, `5m`, `1h` or seconds into ms. */
export function durationMs(text: string, what: string): number {
  const ms = parseDuration(text);
  if (Number.isNaN(ms)) throw new UsageError(`${what} must be a duration such as 30s, 500ms, 5m or 1h (got ${JSON.stringify(text)})`);
  return ms;
}

/** `stoker wait <id>`: long-polls until the job ends; exit 0 when done, 1 when failed or cancelled, 3 on timeout. */
export async function waitCommand(id: string, flags: ClientFlags & { timeout: string; progress?: boolean; output?: string }, io: Io): Promise<number> {
  const deadline = Date.now() + durationMs(flags.timeout, '--timeout');
  const ended = (body: { state: string; result?: unknown; resultEncoding?: string }) => {
    show(io, flags.output === undefined || 'resultFile' in body ? body : writeResult(body, flags.output, io));
    return body.state === 'done' ? 0 : 1;
  };
  // -o: a bytes result comes as bytes, streamed to the file (not base64 in JSON, in memory whole).
  // Without it, as bytes too: printed as base64 up to PRINT_MAX_BYTES, past that left out (read as
  // one JSON string, a result of 384 MiB or more could not be read at all: "error: Cannot create a
  // string longer than 0x1fffffe8 characters", exit 1 for a job done).
  const file = flags.output;
  const bytes = file === undefined ? async (res: Response) => printable(res, PRINT_MAX_BYTES, await resultFields(flags, id), io) : async (res: Response) => ({ ...(await streamResult(res, file, io)), ...(await resultFields(flags, id)) });
  if (flags.progress) {
    const end = await followProgress(id, flags, io, deadline);
    if (end) {
      // What `wait` prints without --progress (the result's shape, not the job's view): a script reads one shape.
      const r = await call(flags, 'GET', `v1/jobs/${encodeURIComponent(id)}/result`, undefined, bytes, isJob);
      return ended(r.body as { state: string });
    }
    io.err(`job ${id} is still running after --timeout ${flags.timeout}\n`);
    return 3;
  }
  let reached = false;
  let away = false;
  let held = false;
  for (;;) {
    const left = deadline - Date.now();
    // In ms: whole seconds would round the last second down to wait=0s and poll in a busy loop.
    const waitMs = Math.max(0, Math.min(60_000, Math.ceil(left)));
    let r: { status: number; body: unknown };
    try {
      r = await call(flags, 'GET', `v1/jobs/${encodeURIComponent(id)}/result?wait=${waitMs}ms`, undefined, bytes, isJob);
    } catch (e) {
      // Reached once, then gone or not answering (a restart: the job resumes there): waited for,
      // until --timeout. (Never reached: a wrong --server, said at once.)
      if (!(e instanceof ClientError && e.transient && (reached || e.reached))) throw e;
      reached = true;
      if (Date.now() >= deadline) {
        io.err(`job ${id}: the server was still away at --timeout ${flags.timeout} (${e.message})\n`);
        return 3;
      }
      if (!away) io.err(`stoker wait: ${e.message.replace(/: (start it with|it stopped or restarted meanwhile) .*$/, '')} — waiting for it to come back (a restarted server resumes the job), until --timeout\n`);
      away = true;
      await new Promise((resolve) => setTimeout(resolve, Math.min(1000, Math.max(0, deadline - Date.now()))));
      continue;
    }
    if (away) io.err('stoker wait: the server answers again\n');
    reached = true;
    away = false;
    const body = r.body as { state: string; onHold?: unknown };
    if (r.status === 200) return ended(body);
    if (Date.now() >= deadline) {
      io.err(`job ${id} is still ${body.state} after --timeout ${flags.timeout}${typeof body.onHold === 'string' ? ', on hold' : ''}\n`);
      return 3;
    }
    // On hold: the server answers at once (nothing there will end it) — said once, then asked every 2 s.
    if (typeof body.onHold === 'string') {
      if (!held) io.err(onHoldLine(id, body.onHold));
      held = true;
      await new Promise((resolve) => setTimeout(resolve, Math.min(2000, Math.max(0, deadline - Date.now()))));
    }
  }
}

/** What `stoker wait` says of a job the server leaves on hold (its view's `onHold`). */
function onHoldLine(id: string, why: string): string {
  return `stoker wait: job ${id} is on hold: ${why} — waiting for a start that runs it, until --timeout\n`;
}

/** `wait -o FILE` of a bytes result: the answer's bytes streamed to FILE. */
async function streamResult(res: Response, file: string, io: Io): Promise<{ resultFile: string; resultBytes: number }> {
  let n = 0;
  try {
    const out = fs.createWriteStream(file);
    const counted = Readable.fromWeb(res.body as WebReadableStream<Uint8Array>).on('data', (c: Buffer) => (n += c.length));
    await pipeline(counted, out);
  } catch (e) {
    throw new UsageError(`cannot write -o ${file}: ${(e as Error).message}`);
  }
  io.err(`wrote ${file}: ${n} bytes (the result's bytes)\n`);
  return { resultFile: file, resultBytes: n };
}

/** The rest of a done job's …/result answer (id, state, error, finishedAt), from its view. */
async function resultFields(flags: ClientFlags, id: string): Promise<{ id: string; state: string; error: unknown; finishedAt: unknown }> {
  let v: { id: string; state: string; error: unknown; finishedAt: unknown };
  try {
    v = (await call(flags, 'GET', `v1/jobs/${encodeURIComponent(id)}`, undefined, undefined, isJob)).body as typeof v;
  } catch (e) {
    // The result came whole (only a done job's comes as bytes); the view did not (a server that
    // stopped meanwhile): done, the rest unknown — not "the server is away" until --timeout, exit 3.
    if (!(e instanceof ClientError && e.transient)) throw e;
    return { id, state: 'done', error: null, finishedAt: null };
  }
  return { id: v.id, state: v.state, error: v.error, finishedAt: v.finishedAt };
}

/** The most bytes of a result `stoker wait` prints (as base64) without -o: 64 MiB. */
const PRINT_MAX_BYTES = 64 * 2 ** 20;

/**
 * `wait` without -o, of a bytes result (asked for as bytes): the …/result answer as the server's
 * JSON has it (its base64), up to `max` bytes; a larger one is left out by its size, as a job
 * view leaves it (`result: null`, `resultOmittedBytes`), and stderr says to use -o.
 */
export async function printable(res: Response, max: number, fields: { id: string; state: string; error: unknown; finishedAt: unknown }, io: Io): Promise<object> {
  const pieces: Buffer[] = [];
  let n = 0;
  let over = false;
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const length = Number(res.headers.get('content-length') ?? NaN);
  if (length > max) {
    // (Its size is said: no need to read it.)
    await reader.cancel();
    n = length;
    over = true;
  } else {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      n += value.byteLength;
      if (n > max) over = true;
      if (!over) pieces.push(Buffer.from(value.buffer, value.byteOffset, value.byteLength));
    }
  }
  if (over) {
    io.err(`job ${fields.id}: its result is ${n} bytes, too many to print: write it to a file with -o FILE\n`);
    return { id: fields.id, state: fields.state, result: null, resultOmittedBytes: n, error: fields.error, finishedAt: fields.finishedAt };
  }
  return { id: fields.id, state: fields.state, result: Buffer.concat(pieces, n).toString('base64'), resultEncoding: 'base64', error: fields.error, finishedAt: fields.finishedAt };
}

/**
 * `wait -o FILE`: a done job's result written to FILE (bytes as they are, JSON as text); what is
 * printed then is the answer without its result, naming the file and its size (`resultFile`,
 * `resultBytes`: a `result: null` beside them read as an empty result to a script).
 */
function writeResult(body: { state: string; result?: unknown; resultEncoding?: string }, file: string, io: Io): object {
  if (body.state !== 'done') return body;
  const data = body.resultEncoding === 'base64' && typeof body.result === 'string' ? Buffer.from(body.result, 'base64') : Buffer.from(`${formatJson(body.result)}\n`);
  try {
    fs.writeFileSync(file, data);
  } catch (e) {
    throw new UsageError(`cannot write -o ${file}: ${(e as Error).message}`);
  }
  io.err(`wrote ${file}: ${data.length} bytes (${body.resultEncoding === 'base64' ? 'the result\'s bytes' : 'the result as JSON'})\n`);
  const out: { state: string; result?: unknown; resultEncoding?: string; resultFile: string; resultBytes: number } = { ...body, resultFile: file, resultBytes: data.length };
  delete out.result;
  delete out.resultEncoding;
  return out;
}

interface ProgressEvent {
  type: 'progress' | 'end';
  state?: string;
  partitions?: number;
  counts?: Record<string, number>;
  job?: { state: string; partitions: number };
}

/** One progress line: a bar of done partitions on a terminal, the counts after it. */
export function progressLine(e: Required<Pick<ProgressEvent, 'state' | 'partitions' | 'counts'>>, bar: boolean): string {
  const c = e.counts;
  const done = c['done'] ?? 0;
  const parts = [['preparing', 'preparing'], ['waiting', 'waiting'], ['on-device', 'on device'], ['queued', 'queued'], ['failed', 'failed'], ['cancelled', 'cancelled']]
    .filter(([k]) => (c[k as string] ?? 0) > 0)
    .map(([k, label]) => `${c[k as string]} ${label}`);
  const width = 30;
  const filled = e.partitions > 0 ? Math.round((done / e.partitions) * width) : 0;
  const head = bar ? `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ` : '';
  return `${head}${done}/${e.partitions} done${parts.length ? ` · ${parts.join(' · ')}` : ''} · ${e.state}`;
}

/**
 * Follows GET /v1/jobs/:id/events until the job ends (returns its view) or the deadline (returns
 * undefined), drawing progress on stderr; a dropped stream is opened again (its first event is
 * the whole picture, so nothing is missed), saying so, as plain `wait` does. A server not reached
 * at the start is said at once.
 */
async function followProgress(id: string, flags: ClientFlags, io: Io, deadline: number): Promise<{ state: string } | undefined> {
  const url = new URL(`v1/jobs/${encodeURIComponent(id)}/events`, serverUrl(flags.server));
  const tty = io.errIsTTY === true;
  let lastLine = '';
  let away = false;
  // (Unreachable, no token, no such job: said at once, in the words of every other command.)
  const first = (await call(flags, 'GET', `v1/jobs/${encodeURIComponent(id)}`, undefined, undefined, isJob)).body as { onHold?: unknown };
  if (typeof first.onHold === 'string') io.err(onHoldLine(id, first.onHold));
  const say = (line: string) => {
    // (A drawn progress line is ended first; the next one is drawn anew.)
    if (tty && lastLine) io.err('\n');
    lastLine = '';
    io.err(line);
  };
  while (Date.now() < deadline) {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), Math.max(0, deadline - Date.now()));
    try {
      const res = await fetch(url, { signal: ac.signal, headers: { accept: 'text/event-stream', ...authHeader(flags) } });
      if (res.status === 401) throw new ClientError('401 Unauthorized: this server needs a token: pass --token-file FILE or set STOKER_SERVER_TOKEN', 2);
      if (res.status === 404) {
        // The server's own words, as every other command shows them.
        const detail = ((await res.json().catch(() => ({}))) as { detail?: unknown }).detail;
        throw new ClientError(`404 Not found: ${typeof detail === 'string' ? detail : `no job ${JSON.stringify(id)}`}`, 2);
      }
      if (res.status !== 200 || !res.body) throw new Error(`GET ${url.pathname} answered ${res.status}`);
      if (away) say('stoker wait: the server answers again\n');
      away = false;
      let buf = '';
      for await (const chunk of res.body.pipeThrough(new TextDecoderStream())) {
        buf += chunk;
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const data = buf.slice(0, i).split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
          buf = buf.slice(i + 2);
          if (!data) continue;
          const e = JSON.parse(data) as ProgressEvent;
          if (e.type === 'end' && e.job) {
            if (tty && lastLine) io.err('\n');
            return e.job;
          }
          if (e.type === 'progress' && e.counts && e.partitions !== undefined && e.state) {
            const line = progressLine({ state: e.state, partitions: e.partitions, counts: e.counts }, tty);
            if (line === lastLine) continue;
            lastLine = line;
            io.err(tty ? `\r\x1b[2K${id}: ${line}` : `${id}: ${line}\n`);
          }
        }
      }
    } catch (e) {
      if (e instanceof ClientError) throw e;
      if (ac.signal.aborted) break;
      // The server went away or restarted: try again in a second (until the deadline).
      const cause = fetchCause(e);
      if (!away) say(`stoker wait: the server at ${flags.server} is away (${cause}) — waiting for it to come back (a restarted server resumes the job), until --timeout\n`);
      away = true;
      await new Promise((r) => setTimeout(r, 1000));
    } finally {
      clearTimeout(timer);
    }
  }
  if (tty && lastLine) io.err('\n');
  return undefined;
}

/** `stoker cancel <id>`. */
export async function cancelCommand(id: string, flags: ClientFlags, io: Io): Promise<void> {
  const r = await call(flags, 'DELETE', `v1/jobs/${encodeURIComponent(id)}`, undefined, undefined, isJob);
  if (flags.json) return show(io, r.body);
  io.out(`${id}: ${(r.body as { state: string }).state}\n`);
}

/** `stoker backup -o FILE`: a consistent copy of the server's journal (GET /v1/backup), written to FILE once whole. */
export async function backupCommand(flags: ClientFlags & { output: string }, io: Io): Promise<void> {
  // (A directory was found only at the rename, with the whole copy written beside it and left there.)
  if (fs.statSync(flags.output, { throwIfNoEntry: false })?.isDirectory()) throw new UsageError(`cannot write -o ${flags.output}: it is a directory — give a file in it, e.g. -o ${path.join(flags.output, 'stoker-backup.db')}`);
  const part = `${flags.output}.part-${process.pid}`;
  let n = 0;
  const r = await call(flags, 'GET', 'v1/backup', undefined, async (res) => {
    try {
      const counted = Readable.fromWeb(res.body as WebReadableStream<Uint8Array>).on('data', (c: Buffer) => (n += c.length));
      await pipeline(counted, fs.createWriteStream(part));
    } catch (e) {
      fs.rmSync(part, { force: true });
      throw new UsageError(`cannot write -o ${flags.output}: ${(e as Error).message}`);
    }
    return 'written';
  }, () => false);
  if (r.body !== 'written') throw new ClientError(`GET /v1/backup answered ${r.status} without a journal: is ${flags.server} a stoker server?`, 2);
  // (Whole, or not there: a copy cut short is never left under the name asked for.)
  try {
    fs.renameSync(part, flags.output);
  } catch (e) {
    fs.rmSync(part, { force: true });
    throw new UsageError(`cannot write -o ${flags.output}: ${(e as Error).message}`);
  }
  if (flags.json) show(io, { file: path.resolve(flags.output), bytes: n });
  io.err(`wrote ${flags.output}: ${n} bytes, a copy of the server's journal (to start a server on it, put it as stoker.db in an empty data dir)\n`);
}

export interface TraceExportFlags {
  server: string;
  /** --token-file FILE; else $STOKER_SERVER_TOKEN. */
  tokenFile?: string;
  since: string;
  output?: string;
}

/** `stoker trace export`: the server's recent timeline as Chrome trace JSON (opens in Perfetto), on stdout or to a file. */
export async function traceExportCommand(flags: TraceExportFlags, io: Io): Promise<void> {
  const ms = durationMs(flags.since, '--since');
  const r = await call(flags, 'GET', `v1/trace?since=${Math.round(ms)}ms`, undefined, undefined, isTrace);
  const text = `${JSON.stringify(r.body)}\n`;
  if (flags.output === undefined) return io.out(text);
  try {
    fs.writeFileSync(flags.output, text);
  } catch (e) {
    throw new UsageError(`cannot write -o ${flags.output}: ${(e as Error).message}`);
  }
  const events = (r.body as { traceEvents?: { ph?: string }[] }).traceEvents ?? [];
  io.err(`wrote ${flags.output}: ${events.filter((e) => e.ph === 'X').length} partition slices, ${events.filter((e) => e.ph === 'C').length} counter samples (open it in https://ui.perfetto.dev)\n`);
}

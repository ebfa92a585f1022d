import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { PACER_NAMES } from '../core/index.js';
import { suggest } from '../core/suggest.js';
import { credentialsProblem } from '../runtime/http-device.js';
import { redactUrl } from '../runtime/redact.js';
import type { ClusterConfig, DeviceBatchConfig, DeviceConfig, EngineConfig, HttpDeviceConfig, PrepareConfig, ProcessDeviceConfig, ServeConfig, ServerConfig } from './config-types.js';

/**
 * The configuration's fields, one table per section: each field's schema (what a file, the
 * environment or a flag may give, with the message that names the fix), its default, and its
 * line in `stoker serve --help`. The defaults, the zod shapes, the environment variables and
 * the help table are all derived from these tables; the interfaces (config-types.ts) are the resolved
 * types (every field set, `Infinity` for unlimited / none), and the tables are typed against
 * them, so a field cannot be added to one and forgotten in another.
 *
 * Units: durations of the HTTP server, the engine and the device programs are in seconds
 * (`…S`), the cluster's lock and heartbeat and the batches' waits in milliseconds (`…Ms`), as
 * their field names say; sizes in bytes (`…Bytes`).
 */

// ─── Messages ─────────────────────────────────────────────────────────────────────────────────

/** How a value is shown in a message (a URL's password and credential-named query values read `***`: a bad cluster.redis quoted its password). */
export function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(redactUrl(v));
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  if (v === null || v === undefined) return 'nothing';
  if (Array.isArray(v)) return 'an array';
  if (v instanceof Date) return 'a date';
  return 'a table';
}

/** Zod's error option: "expected <expect>, got <value> — <fix>". */
export const err = (expect: string, fix: string | ((input: unknown) => string)) => ({
  error: (iss: { input?: unknown }) => `expected ${expect}, got ${show(iss.input)} — ${typeof fix === 'string' ? fix : fix(iss.input)}`,
});

/** As {@link err}, for a number: one given as a string in a file (`port = "7070"`) is told to lose its quotes ("use e.g. 7070" did not say so). */
const numErr = (expect: string, fix: string) => err(expect, (input) => (typeof input === 'string' && /^\s*-?\d+(\.\d+)?\s*$/.test(input) ? `write the number without quotes (${input.trim()}, not "${input.trim()}")` : fix));

/** As {@link err}, for a URL: its credentials (a password, a user name, a key in the query) shown as ***. */
const urlErr = (expect: string, fix: string | ((input: unknown) => string)) => ({
  error: (iss: { input?: unknown }) => `expected ${expect}, got ${show(typeof iss.input === 'string' ? redactUrl(iss.input) : iss.input)} — ${typeof fix === 'string' ? fix : fix(iss.input)}`,
});

/** As {@link err}, for a secret: the error says its length and whether it holds white space, never the value (it goes to logs). */
const secretErr = (expect: string, fix: string) => ({
  error: (iss: { input?: unknown }) => {
    const v = iss.input;
    const got = typeof v === 'string' ? `a string of ${v.length} characters${/\s/.test(v) ? ' with white space' : ''} (not shown)` : show(v);
    return `expected ${expect}, got ${got} — ${fix}`;
  },
});

export function int(min: number, max: number | undefined, expect: string, fix: string) {
  const e = numErr(expect, fix);
  const s = z.number(e).int(e).min(min, e);
  return (max === undefined ? s : s.max(max, e)).optional();
}
function positive(expect: string, fix: string, max = Infinity) {
  const e = numErr(expect, fix);
  return z.number(e).positive(e).max(max, e).optional();
}
/**
 * The longest a server timer may be set for, s: Node's setTimeout takes at most 2^31 − 1 ms
 * (24.8 days) and fires at once, with a warning, past it (maxWaitS = 1e12 answered a long poll
 * in 5 ms).
 */
const TIMER_MAX_S = 2_147_483;
/** The longest timer Node keeps (2^31 − 1 ms). */
const TIMER_MAX_MS = 2_147_483_647;
const timerS = (fix: string) => positive(`a number of seconds > 0, at most ${TIMER_MAX_S} (24.8 days)`, fix, TIMER_MAX_S);
function text(expect: string, fix: string) {
  const e = err(expect, fix);
  return z.string(e).min(1, e).optional();
}
/** A positive number, or `word` for Infinity. */
function positiveOr(word: string, expect: string, fix: string, max = Infinity) {
  return z.custom<number | string>((v) => v === word || (typeof v === 'number' && Number.isFinite(v) && v > 0 && v <= max), err(expect, fix)).optional();
}

function pacerFix(input: unknown): string {
  const near = typeof input === 'string' ? suggest(input, PACER_NAMES) : undefined;
  return `${near ? `did you mean ${JSON.stringify(near)}? ` : ''}use one of: ${PACER_NAMES.join(', ')}`;
}
const pacerErr = err('a built-in pacer name', pacerFix);
const numberErr = err('a number', 'write each pacer option as name = number, e.g. window = 32');

// ─── Machine-dependent defaults ───────────────────────────────────────────────────────────────

/** This process's node name, `<host>-<pid>`: the default of cluster.nodeId. */
export function defaultNodeId(): string {
  const host = os.hostname().replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 80) || 'node';
  return `${host}-${process.pid}`;
}

/** A memory-backed folder for handoff files: /dev/shm on Linux, else the temporary folder. */
function defaultHandoffDir(): string {
  return fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
}

function defaultThreads(): number {
  return Math.max(1, os.availableParallelism() - 1);
}

// ─── The tables ───────────────────────────────────────────────────────────────────────────────

/**
 * One field: its schema; its default (a function where it depends on the machine; absent for a
 * field that has none, which is then optional in its interface); how `--help` shows the default
 * (derived from it unless given); and its `--help` line.
 */
interface Field<V> {
  schema: z.ZodType;
  default?: V | (() => V);
  shown?: string;
  doc: string;
}

/** A section's table, typed against its resolved interface: every field, each default of the field's type. */
type Table<T> = { [K in keyof T]-?: Field<Exclude<T[K], undefined>> };

/** Checks a table against interface T (no field missing, none extra) and keeps its schemas' own types. */
const table =
  <T>() =>
  <X extends Table<T> & Record<Exclude<keyof X, keyof T>, never>>(t: X): X =>
    t;

/** A table's zod shape, each field's schema with its own type. */
type ShapeOf<X> = { [K in keyof X]: X[K] extends { schema: infer S } ? S : never };

/** How a default reads in `--help`. */
function shownDefault(f: Field<unknown>): string {
  if (f.shown !== undefined) return f.shown;
  const v = f.default;
  if (v === undefined) return 'none';
  if (Array.isArray(v)) return `[${v.map((x) => JSON.stringify(x)).join(', ')}]`;
  if (typeof v === 'object' && v !== null) return Object.keys(v).length === 0 ? '{}' : JSON.stringify(v);
  return typeof v === 'string' ? JSON.stringify(v) : String(v);
}

/** The defaults of a table (the fields that have one). */
function defaultsOf<T>(t: Table<T>): T {
  const out: Record<string, unknown> = {};
  for (const [k, f] of Object.entries(t) as [string, Field<unknown>][]) {
    if (f.default === undefined) continue;
    const v = typeof f.default === 'function' ? (f.default as () => unknown)() : f.default;
    out[k] = Array.isArray(v) ? [...v] : typeof v === 'object' && v !== null ? { ...v } : v;
  }
  return out as T;
}

function shapeOf<X extends object>(t: X): ShapeOf<X> {
  return Object.fromEntries(Object.entries(t).map(([k, f]) => [k, (f as Field<unknown>).schema])) as ShapeOf<X>;
}

/** A sub-table's fields as `--help` lists them: each name, with its default (or range) in parentheses where it has one. */
function listed(t: object): string {
  return Object.entries(t)
    .map(([k, f]) => ((f as Field<unknown>).shown === undefined ? k : `${k} (${(f as Field<unknown>).shown})`))
    .join(', ');
}

/** `[server]`: the HTTP server and admission. */
const SERVER = table<ServerConfig>()({
  host: {
    schema: (() => {
      // A name (letters, digits, dots, dashes) or an IP address (IPv6 with its colons, in brackets or not, a zone after %).
      const e = err('a host name or IP address', 'use e.g. "127.0.0.1" (this machine only) or "0.0.0.0" (every interface)');
      return z.string(e).regex(/^(\[?[0-9A-Fa-f:.]+(%[\w.-]+)?\]?|[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?)$/, e).optional();
    })(),
    default: '127.0.0.1', doc: 'address to listen on ("0.0.0.0": every interface)' },
  port: { schema: int(0, 65535, 'an integer from 0 to 65535', 'use e.g. 7070, or 0 to pick a free port'), default: 7070, doc: 'TCP port, 0–65535 (0 picks a free port)' },
  bodyLimitBytes: { schema: int(1024, undefined, 'an integer ≥ 1024 (bytes)', 'use e.g. 1048576 (1 MiB)'), default: 1_048_576, doc: 'largest request body in bytes (≥ 1024)' },
  maxPendingJobs: { schema: int(1, undefined, 'an integer ≥ 1', 'use e.g. 10000'), default: 10_000, doc: 'unfinished jobs accepted; beyond it submissions get 429' },
  maxPendingPartitions: { schema: int(1, undefined, 'an integer ≥ 1', 'use e.g. 200000'), default: 200_000, doc: 'partitions of unfinished jobs; beyond it submissions get 429 (a larger job alone: 400)' },
  retryAfterS: { schema: int(1, undefined, 'an integer ≥ 1 (seconds)', 'use e.g. 5'), default: 5, doc: 'the Retry-After (s) of a 429' },
  resultTtlS: { schema: positive('a number of seconds > 0, at most 315360000 (10 years)', 'use e.g. 86400 (one day)', 315_360_000), default: 86_400, doc: 'seconds a finished job is kept' },
  shutdownTimeoutS: {
    schema: (() => {
      const e = err(`a number of seconds ≥ 0, at most ${TIMER_MAX_S}`, 'use e.g. 30 (0 stops at once; unfinished partitions run again after the restart)');
      return z.number(e).min(0, e).max(TIMER_MAX_S, e).optional();
    })(),
    default: 30,
    doc: 'seconds the partitions in flight may finish on shutdown (the rest resume on restart; 0: stop at once)',
  },
  maxWaitS: { schema: timerS('use e.g. 300'), default: 300, doc: 'longest long-poll (s); a longer wait is cut to it' },
  token: {
    schema: z
      .string(secretErr('a token of at least 16 characters, or ""', 'use e.g. the output of `openssl rand -hex 32`, or "" for none'))
      .refine((v) => v === '' || (v.length >= 16 && !/\s/.test(v)), secretErr('a token of at least 16 characters (no spaces), or ""', 'use e.g. the output of `openssl rand -hex 32`, or "" for none'))
      .optional(),
    default: '',
    doc: 'when set (≥ 16 chars), the API needs Authorization: Bearer <token> (flag --token-file)',
  },
  allowedHosts: {
    schema: z
      .preprocess(
        (v) => (typeof v === 'string' ? v.split(',').map((h) => h.trim()).filter((h) => h !== '') : v),
        z.array(
          z.string().regex(/^[A-Za-z0-9.\-:[\]]+$/, err('a host name (a name or an address, a port after it allowed)', 'write e.g. "stoker.internal" — no scheme (http://) nor path')),
          err('a list of host names', 'write e.g. allowedHosts = ["stoker.internal", "10.0.0.5"] (env: comma-separated)'),
        ),
      )
      .optional(),
    default: [],
    doc: 'more names the Host header may give, on any port (env: comma-separated); others get 421',
  },
  openWithoutToken: {
    schema: z.preprocess((v) => (v === 'true' ? true : v === 'false' ? false : v), z.boolean(err('true or false', 'use true only where the network itself keeps strangers out'))).optional(),
    default: false,
    doc: 'listen off loopback without a token (otherwise refused at start)',
  },
  requestTimeoutS: { schema: timerS('use e.g. 30'), default: 30, doc: 'seconds a client may take to send a whole request' },
  headersTimeoutS: { schema: timerS('use e.g. 10'), default: 10, doc: 'seconds a client may take to send the headers' },
  keepAliveTimeoutS: { schema: timerS('use e.g. 5'), default: 5, doc: 'seconds an idle keep-alive connection stays open' },
  maxConnections: { schema: int(1, undefined, 'an integer ≥ 1', 'use e.g. 1024'), default: 1024, doc: 'most open connections' },
  maxEventStreams: { schema: int(1, undefined, 'an integer ≥ 1', 'use e.g. 256'), default: 256, doc: 'most open event streams; more get 503' },
  tlsCert: { schema: z.string(err('a PEM file path, or ""', 'write e.g. tlsCert = "/etc/stoker/cert.pem"')).optional(), default: '', doc: 'HTTPS: certificate chain, a PEM file (with server.tlsKey); "": plain HTTP' },
  tlsKey: { schema: z.string(err('a PEM file path, or ""', 'write e.g. tlsKey = "/etc/stoker/key.pem"')).optional(), default: '', doc: 'HTTPS: private key, a PEM file (with server.tlsCert)' },
});

/** `[engine]`: the pacing engine. */
const ENGINE = table<EngineConfig>()({
  pacer: { schema: z.string(pacerErr).refine((v) => PACER_NAMES.includes(v), pacerErr).optional(), default: 'stoker', doc: `a built-in pacer: ${PACER_NAMES.join(', ')}` },
  targetWaiting: { schema: positive('a number > 0', 'use e.g. 4 (items waiting for a device)'), default: 4, doc: 'items waiting for a device the pacer aims at (> 0)' },
  budgetBytes: { schema: positiveOr('unlimited', 'a number of bytes > 0 or "unlimited"', 'use e.g. 412316860416 (384 GiB), or "unlimited"'), default: Infinity, shown: '"unlimited"', doc: 'memory budget in bytes (> 0) or "unlimited"' },
  // (The engine's own default is 0: a library user opts in; a server retries a partition once.)
  retries: { schema: int(0, 10, 'an integer from 0 to 10', 'use e.g. 1'), default: 1, doc: 'times a failed partition is retried (0–10)' },
  deviceTimeoutS: { schema: positiveOr('none', `a number of seconds > 0 (at most ${TIMER_MAX_S}) or "none"`, 'use e.g. 120, or "none" for no timeout', TIMER_MAX_S), default: Infinity, shown: '"none"', doc: 'device step timeout in seconds (> 0) or "none"' },
  prepareTimeoutS: { schema: positiveOr('none', `a number of seconds > 0 (at most ${TIMER_MAX_S}) or "none"`, 'use e.g. 600, or "none" for no timeout', TIMER_MAX_S), default: Infinity, shown: '"none"', doc: 'preparation timeout in seconds (> 0) or "none" (a preparation batch is timed whole: set it for a full batch)' },
  pacerOptions: {
    schema: z.record(z.string(), z.number(numberErr), err('a table of pacer options', 'write them under an [engine.pacerOptions] header, one name = number per line')).optional(),
    default: {},
    doc: 'pacer options, name = number (env: JSON or name=value,…)',
  },
});

/** `[device.process]`: a process device's program. */
export const PROCESS = table<ProcessDeviceConfig>()({
  command: { schema: z.string(err('a program', 'write e.g. command = "python3"')).min(1, err('a program', 'write e.g. command = "python3"')), doc: 'the program each worker runs' },
  args: { schema: z.array(z.string(err('a string', 'write each argument as a string')), err('an array of strings', 'write e.g. args = ["device.py", "--fp16"]')).optional(), default: [], doc: 'its arguments' },
  env: { schema: z.record(z.string(), z.string(err('a string', 'write each value as a string, e.g. CUDA_VISIBLE_DEVICES = "0"')), err('a table of strings', 'write them under a [device.process.env] header, NAME = "value"')).optional(), default: {}, doc: 'variables added to its environment' },
  cwd: { schema: z.string(err('a directory path', 'write e.g. cwd = "./device"')).min(1, err('a directory path', 'write e.g. cwd = "./device"')).optional(), doc: 'its working directory' },
  readyTimeoutS: {
    schema: (() => {
      const e = err('a number of seconds > 0, at most 86400', 'use e.g. 30');
      return z.number(e).positive(e).max(86_400, e).optional();
    })(),
    default: 30,
    shown: '30',
    doc: 'seconds a new worker has to say ready',
  },
  maxFrameBytes: { schema: int(1, undefined, 'an integer ≥ 1 (bytes)', 'use e.g. 1073741824 (1 GiB)'), default: 2 ** 30, shown: '1 GiB', doc: 'the largest payload a worker may send in one frame' },
  handoffDir: { schema: z.string(err('a directory path', 'write e.g. handoffDir = "/dev/shm"')).min(1, err('a directory path', 'write e.g. handoffDir = "/dev/shm"')).optional(), default: defaultHandoffDir, shown: '/dev/shm', doc: 'where large prepared data is handed over as a file' },
  handoffMinBytes: { schema: int(0, undefined, 'an integer ≥ 0 (bytes)', 'use e.g. 1048576 (1 MiB; 0 sends every payload by file)'), default: 2 ** 20, shown: '1 MiB', doc: 'prepared bytes from this size on go by file' },
  onWithdraw: {
    schema: z.enum(['end', 'finish'], err('"end" or "finish"', 'write onWithdraw = "finish" to let a withdrawn step finish (its output dropped) instead of ending the process')).optional(),
    default: 'end',
    shown: '"end"',
    doc: 'a step withdrawn (its job cancelled or failed): "end" its process, or let it "finish" and drop its output (no reload of a slow-starting model)',
  },
  finishTimeoutS: {
    schema: z.number(err('a number of seconds > 0 (at most 86400)', 'use e.g. 60')).gt(0, err('a number of seconds > 0 (at most 86400)', 'use e.g. 60')).max(86_400, err('a number of seconds > 0 (at most 86400)', 'use e.g. 600')).optional(),
    default: 60,
    shown: '60',
    doc: 'with onWithdraw = "finish": the longest a withdrawn step may take to finish before its process is ended',
  },
});

/** `[device.http]`: an HTTP device's endpoint. */
export const HTTP = table<Omit<HttpDeviceConfig, 'timeoutS'> & { timeoutS: number | string }>()({
  url: {
    schema: z
      .string(urlErr('an http:// or https:// URL', 'write e.g. url = "http://127.0.0.1:8000/embed"'))
      .url(urlErr('an http:// or https:// URL', 'write e.g. url = "http://127.0.0.1:8000/embed"'))
      .regex(/^https?:\/\//i, urlErr('an http:// or https:// URL', 'write e.g. url = "http://127.0.0.1:8000/embed"'))
      .refine((u) => credentialsProblem(u) === undefined, urlErr('a URL without user:password@', (u) => credentialsProblem(String(u)) ?? '')),
    doc: 'where each item is POSTed',
  },
  headers: { schema: z.record(z.string(), z.string(err('a string', 'write each header value as a string')), err('a table of strings', 'write them as headers = { Authorization = "Bearer …" }')).optional(), default: {}, doc: 'extra request headers' },
  timeoutS: {
    schema: z.custom<number | string>((v) => v === 'none' || (typeof v === 'number' && Number.isFinite(v) && v > 0 && v <= 86_400), err('a number of seconds > 0 (at most 86400) or "none"', 'use e.g. 60, or "none"')).optional(),
    default: Infinity,
    shown: '"none"',
    doc: 'a request running longer fails its item',
  },
  maxResponseBytes: { schema: int(1, undefined, 'an integer ≥ 1 (bytes)', 'use e.g. 1073741824 (1 GiB)'), default: 2 ** 30, shown: '1 GiB', doc: 'the largest response accepted' },
  unreachableS: {
    schema: z.number(err('a number of seconds > 0 (at most 86400)', 'use e.g. 60, or 3600 to wait out a long restart')).gt(0, err('a number of seconds > 0 (at most 86400)', 'use e.g. 60')).max(86_400, err('a number of seconds > 0 (at most 86400)', 'use e.g. 3600')).optional(),
    default: 60,
    shown: '60',
    doc: 'how long a step waits for an endpoint that refuses connections (down, restarting) before it fails',
  },
});

/** `[device.batch]` and `[kinds.NAME.prepareBatch]`: batches. */
export const BATCH = table<DeviceBatchConfig>()({
  maxItems: { schema: int(1, 4096, 'an integer from 1 to 4096', 'use e.g. 16 (the most items one step — on the device, or in preparation — takes)'), shown: '1–4096', doc: 'the most items in one batch' },
  maxWaitMs: {
    schema: z.number(err('a number of ms ≥ 0', 'use e.g. 5, or 0 to take what is waiting')).min(0, err('a number of ms ≥ 0', 'use e.g. 5, or 0 to take what is waiting')).max(3_600_000, err('a number of ms ≥ 0 (at most 3600000)', 'use e.g. 5')).optional(),
    default: 0,
    shown: '0',
    doc: 'the longest wait for a fuller batch',
  },
});

export const processShape = shapeOf(PROCESS);
export const httpShape = shapeOf(HTTP);
export const batchShape = shapeOf(BATCH);
/** A batch table: maxItems required. */
export const batchTable = (name: string, example: string) => z.strictObject({ ...batchShape, maxItems: BATCH.maxItems.schema.unwrap() }, err(`a table [${name}]`, `write ${example} under a [${name}] header`)).optional();

/** `[device]` (and each `[devices.NAME]`): the accelerator. */
const DEVICE = table<DeviceConfig>()({
  kind: { schema: z.enum(['cpu', 'webgpu'], err('"cpu" or "webgpu"', 'use "cpu" or "webgpu"')).optional(), default: 'cpu', doc: '"cpu" or "webgpu"' },
  workers: { schema: int(1, 64, 'an integer from 1 to 64', 'use e.g. 2 (pipelined workers on the device)'), default: 2, doc: 'pipelined workers on the device (1–64)' },
  priorServiceMs: {
    schema: positive('a number of ms > 0', 'use e.g. 1200 (the device time per item), or leave it out to use what the last run measured'),
    doc: 'known device time per item (ms): the pacer starts from it (none: what the last run measured, in <dataDir>/stoker.priors.json)',
  },
  process: {
    schema: z.strictObject(processShape, err('a table [device.process]', 'write command = "python3" and args = ["device.py"] under a [device.process] header')).optional(),
    doc: `a process device: [device.process] ${listed(PROCESS)} (env: JSON)`,
  },
  http: {
    schema: z.strictObject(httpShape, err('a table [device.http]', 'write url = "http://127.0.0.1:8000/embed" under a [device.http] header')).optional(),
    doc: `an HTTP device: [device.http] ${listed(HTTP)} (env: JSON)`,
  },
  batch: { schema: batchTable('device.batch', 'maxItems = 16 (and maxWaitMs = 5)'), doc: `batches: [device.batch] ${listed(BATCH)}: a worker takes up to maxItems waiting items of one kind as one step (env: JSON)` },
});

/** `[prepare]`: the CPU preparation pool. */
const PREPARE = table<PrepareConfig>()({
  // (Each a worker thread with its own heap: 100,000 were accepted, and would have been started.)
  threads: { schema: int(1, 1024, 'an integer from 1 to 1024', `use e.g. ${defaultThreads()} (this machine's cores − 1)`), default: defaultThreads, shown: 'cores − 1', doc: 'preparation threads (1–1024)' },
  concurrency: { schema: int(1, undefined, 'an integer ≥ 1', 'use e.g. 64'), default: 64, doc: 'preparations one thread runs at once (≥ 1): more than 1 helps a prepare that awaits; one that computes synchronously wants 1 (more only queue inside the thread)' },
});

/** `[cluster]`: cluster mode (BullMQ on Redis). */
const CLUSTER = table<ClusterConfig>()({
  redis: {
    schema: z
      .string(err('a redis:// URL or "none"', 'use e.g. "redis://127.0.0.1:6379/0", or "none" for local mode'))
      .refine((v) => v === 'none' || /^rediss?:\/\/[^\s/]+(\/\d+)?$/.test(v), err('a redis:// URL or "none"', 'use e.g. "redis://127.0.0.1:6379/0", or "none" for local mode'))
      .optional(),
    default: 'none',
    doc: 'cluster mode: redis://host:port[/db] of the shared Redis (flag --cluster), or "none"',
  },
  // (Timers: past 2^31 − 1 ms Node fires them after 1 ms — a lockMs of 7e9 renewed its locks in a loop.)
  lockMs: { schema: int(100, TIMER_MAX_MS, `an integer from 100 to ${TIMER_MAX_MS} (ms)`, 'use e.g. 6000'), default: 6000, doc: "ms a node's hold on a job lasts unrenewed, renewed every third of it (a dead node's jobs run elsewhere about 1.5× this after its death)" },
  heartbeatMs: { schema: int(50, TIMER_MAX_MS, `an integer from 50 to ${TIMER_MAX_MS} (ms)`, 'use e.g. 2000'), default: 2000, doc: "ms between a node's heartbeats (each lives 3× as long)" },
  nodeId: {
    schema: z
      .string(err('a node name', 'use e.g. "gpu-box-1" (letters, digits, . _ -)'))
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, err('a node name', 'use e.g. "gpu-box-1" (letters, digits, . _ -)'))
      .optional(),
    default: defaultNodeId,
    shown: '"<host>-<pid>"',
    doc: "this node's name in the cluster",
  },
});

/** The journal directory: the one top-level field. */
export const dataDirSchema = text('a directory path', 'give the journal directory, e.g. "./stoker-data"');
const DATA_DIR: Field<string> = { schema: dataDirSchema, default: './stoker-data', doc: 'the journal directory (relative: to the config file, else to the working directory)' };

// ─── Derived ──────────────────────────────────────────────────────────────────────────────────

const TABLES = { server: SERVER, engine: ENGINE, device: DEVICE, prepare: PREPARE, cluster: CLUSTER } as const;
export type SectionName = keyof typeof TABLES;
export const SECTION_NAMES = Object.keys(TABLES) as SectionName[];

/** Each section's zod shape. */
export const SHAPES = { server: shapeOf(SERVER), engine: shapeOf(ENGINE), device: shapeOf(DEVICE), prepare: shapeOf(PREPARE), cluster: shapeOf(CLUSTER) };

const section = <T extends z.core.$ZodLooseShape>(name: string, shape: T) => z.strictObject(shape, err(`a table [${name}]`, `write its settings under a [${name}] header`)).optional();
export const SECTIONS = {
  server: section('server', SHAPES.server),
  engine: section('engine', SHAPES.engine),
  device: section('device', SHAPES.device),
  prepare: section('prepare', SHAPES.prepare),
  cluster: section('cluster', SHAPES.cluster),
};

/** Every field: `dataDir` and `<section>.<field>`. */
export type FieldPath = 'dataDir' | { [S in SectionName]: `${S}.${keyof (typeof TABLES)[S] & string}` }[SectionName];

/** The defaults, fully resolved (relative paths against `cwd`). */
export function defaults(cwd: string): ServeConfig {
  return {
    dataDir: path.resolve(cwd, DATA_DIR.default as string),
    server: defaultsOf<ServerConfig>(SERVER),
    engine: defaultsOf<EngineConfig>(ENGINE),
    device: defaultsOf<DeviceConfig>(DEVICE),
    prepare: defaultsOf<PrepareConfig>(PREPARE),
    cluster: defaultsOf<ClusterConfig>(CLUSTER),
  };
}

/** A process, HTTP or batch table's defaults (its required fields are the layer's). */
export const subDefaults = {
  process: () => defaultsOf<Omit<ProcessDeviceConfig, 'command'>>(PROCESS),
  http: () => defaultsOf<Omit<HttpDeviceConfig, 'url'>>(HTTP as Table<Omit<HttpDeviceConfig, 'url'>>),
  batch: () => defaultsOf<Omit<DeviceBatchConfig, 'maxItems'>>(BATCH),
};

const upperSnake = (key: string) => key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase();

/** The environment variable of each field. */
export const ENV_VARS: ReadonlyMap<string, FieldPath> = new Map<string, FieldPath>([
  ['STOKER_DATA_DIR', 'dataDir'],
  ...SECTION_NAMES.flatMap((s) => Object.keys(SHAPES[s]).map((k): [string, FieldPath] => [`STOKER_${s.toUpperCase()}_${upperSnake(k)}`, `${s}.${k}` as FieldPath])),
]);

function fieldOf(p: FieldPath): Field<unknown> {
  if (p === 'dataDir') return DATA_DIR as Field<unknown>;
  const [s, k] = p.split('.') as [SectionName, string];
  return (TABLES[s] as Record<string, Field<unknown>>)[k] as Field<unknown>;
}

/** Every field with its default and environment variable, for `--help`. */
export const CONFIG_DOC: string = (() => {
  const rows = [...ENV_VARS].map(([env, field]) => [field, shownDefault(fieldOf(field)), env, fieldOf(field).doc] as const);
  const width = (i: 0 | 1 | 2) => Math.max(...rows.map((r) => r[i].length));
  const [w0, w1, w2] = [width(0), width(1), width(2)];
  const lines = rows.map((r) => `  ${r[0].padEnd(w0)}  ${r[1].padEnd(w1)}  ${r[2].padEnd(w2)}  ${r[3]}`);
  const extra = [
    `  ${'journal.maxBytes'.padEnd(w0)}  ${'none'.padEnd(w1)}  ${'STOKER_JOURNAL_MAX_BYTES'.padEnd(w2)}  the journal's largest size in bytes for new jobs (≥ 65536); beyond it submits get 507, accepted jobs go on and record their ends past it`,
    `  ${'devices.NAME'.padEnd(w0)}  ${'none'.padEnd(w1)}  ${''.padEnd(w2)}  more devices by name, each a table like [device] (kind, workers, priorServiceMs, batch, process or http)`,
    `  ${'kinds.NAME.module'.padEnd(w0)}  ${'–'.padEnd(w1)}  ${'(--kind FILE)'.padEnd(w2)}  a kind module (path relative to the config file); --kind adds one, repeatable`,
    `  ${'kinds.NAME.device'.padEnd(w0)}  ${'"default"'.padEnd(w1)}  ${''.padEnd(w2)}  the device that runs the kind (overrides the module's device export)`,
    `  ${'kinds.NAME.prepareBatch'.padEnd(w0)}  ${'none'.padEnd(w1)}  ${''.padEnd(w2)}  prepare up to maxItems (1–4096) partitions together with the kind's prepareBatch, waiting up to maxWaitMs (default 0)`,
  ];
  return ['Configuration (defaults < --config file.toml < environment < flags); field, default, variable:', ...lines, ...extra].join('\n');
})();

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, stringify, TomlError } from 'smol-toml';
import { z } from 'zod';
import { PACER_NAMES } from '../core/index.js';

/**
 * Configuration of the `stoker serve` daemon.
 *
 * Sources, later ones winning field by field: the defaults < a TOML file (`--config path`) <
 * the environment (`STOKER_DATA_DIR`, `STOKER_<SECTION>_<FIELD>` with the field in UPPER_SNAKE,
 * e.g. `STOKER_SERVER_MAX_PENDING_JOBS`) < the command-line flags (`--host`, `--port`,
 * `--data`). Every source is checked completely before anything is thrown: a
 * {@link ConfigError} lists every problem, one line each, naming where it came from, the field,
 * what is wrong and what to write instead. Unknown keys and unknown `STOKER_SERVER_*`,
 * `STOKER_ENGINE_*`, `STOKER_DEVICE_*`, `STOKER_PREPARE_*`, `STOKER_CLUSTER_*` variables are errors (with a
 * "did you mean" hint), so a typo never silently falls back to a default.
 */

/** The HTTP server and admission. */
export interface ServerConfig {
  /** Address to listen on; loopback by default (`"0.0.0.0"` listens on every interface). @default "127.0.0.1" */
  host: string;
  /** TCP port, 0–65535; 0 picks a free port. @default 7070 */
  port: number;
  /** Largest request body accepted, in bytes (≥ 1024). @default 1048576 */
  bodyLimitBytes: number;
  /** Admission: most jobs accepted and not yet finished; beyond it a submission gets 429. @default 10000 */
  maxPendingJobs: number;
  /** Admission: most partitions of unfinished jobs (a bound on the backlog: a partition costs memory only once dispatched); beyond it a submission gets 429, a single job above it 400. @default 200000 */
  maxPendingPartitions: number;
  /** The `Retry-After` (seconds, ≥ 1) of a 429. @default 5 */
  retryAfterS: number;
  /** How long (seconds, > 0) a finished job's result is kept. @default 86400 */
  resultTtlS: number;
  /** On shutdown, how long (seconds, ≥ 0) the partitions in flight may finish; unfinished jobs stay journaled and resume on the next start. @default 30 */
  shutdownTimeoutS: number;
  /** Longest long-poll (seconds, > 0): a client asking for longer gets 202 after this and polls again. @default 300 */
  maxWaitS: number;
  /** When set (≥ 16 characters), every API route needs `Authorization: Bearer <token>` (401 otherwise); the dashboard page and its assets stay public. `""`: none. @default "" */
  token: string;
  /** More names the `Host` header may give (besides loopback names and the bound address); a request naming another host gets 421, a state-changing one from a foreign `Origin` 403. @default [] */
  allowedHosts: string[];
  /** Listen on a non-loopback address without a token (otherwise refused at start). @default false */
  openWithoutToken: boolean;
  /** Seconds (> 0) a client may take to send a whole request; a slower one is cut off (408). @default 30 */
  requestTimeoutS: number;
  /** Seconds (> 0) a client may take to send the request headers. @default 10 */
  headersTimeoutS: number;
  /** Seconds (> 0) an idle keep-alive connection stays open. @default 5 */
  keepAliveTimeoutS: number;
  /** Most open connections (≥ 1); more are refused. @default 1024 */
  maxConnections: number;
  /** Most open event streams (`/v1/events`, `/v1/jobs/:id/events`; ≥ 1); more get 503 with Retry-After. @default 256 */
  maxEventStreams: number;
  /** HTTPS: the certificate chain (PEM file; relative in a file: to the file's directory); with tlsKey. `""`: plain HTTP. @default "" */
  tlsCert: string;
  /** HTTPS: the private key (PEM file); with tlsCert. @default "" */
  tlsKey: string;
}

/** The pacing engine. */
export interface EngineConfig {
  /** A built-in pacer name (see `stoker pacers`). @default "stoker" */
  pacer: string;
  /** Items waiting for a device the pacer aims at (> 0). @default 4 */
  targetWaiting: number;
  /** Memory budget in bytes (> 0); `"unlimited"` in a file or the environment, `Infinity` here. @default Infinity ("unlimited") */
  budgetBytes: number;
  /** Times a failed partition is prepared again before its job fails (0–10). @default 1 */
  retries: number;
  /** A device step running longer (seconds, > 0) fails; `"none"` in a file or the environment, `Infinity` here. @default Infinity ("none") */
  deviceTimeoutS: number;
  /** Extra numeric options of the pacer, by name. @default {} */
  pacerOptions: Record<string, number>;
}

/** The accelerator. */
export interface DeviceConfig {
  /** Thread devices: `"cpu"` (a thread per worker runs the kinds' `run`) or `"webgpu"` (one thread for the device's workers); kinds see it as ctx.deviceKind. @default "cpu" */
  kind: 'cpu' | 'webgpu';
  /** Pipelined workers on the device (1–64). @default 2 */
  workers: number;
  /**
   * A known device time per item (ms, > 0): the pacer starts from it instead of measuring first.
   * Absent: the rate this server remembered from its last run (`<dataDir>/stoker.priors.json`), if any.
   */
  priorServiceMs?: number;
  /** `[device.process]`: the device is a process device, each worker a child process running `command` (docs/process-devices.md). Absent: a thread device. */
  process?: ProcessDeviceConfig;
  /** `[device.http]`: the device is an HTTP endpoint, each worker one request at a time. */
  http?: HttpDeviceConfig;
  /**
   * `[device.batch]`: a free worker takes up to `maxItems` waiting items of one kind as one step
   * (thread devices: the kind's `runBatch`; process devices: a batch of item frames; HTTP devices:
   * one request with every item), waiting up
   * to `maxWaitMs` for more while more are in preparation. Absent: one item per step.
   */
  batch?: DeviceBatchConfig;
}

/** A device's batching (`[device.batch]`), or a kind's preparation batches (`[kinds.NAME.prepareBatch]`). */
export interface DeviceBatchConfig {
  /** Most items in one batch (1–4096). */
  maxItems: number;
  /** Longest wait for a fuller batch, ms (≥ 0). @default 0 */
  maxWaitMs: number;
}

/** An HTTP device's endpoint (`[device.http]`). */
export interface HttpDeviceConfig {
  /** Where each item's prepared value is POSTed, e.g. "http://127.0.0.1:8000/embed". */
  url: string;
  /** Extra request headers. @default {} */
  headers: Record<string, string>;
  /** A request running longer (seconds, > 0) fails its item; Infinity (`"none"` in a file) for none. @default Infinity */
  timeoutS: number;
  /** The largest response accepted, bytes. @default 1073741824 */
  maxResponseBytes: number;
}

/** A process device's program (`[device.process]`). */
export interface ProcessDeviceConfig {
  /** The program each worker runs, e.g. "python3". */
  command: string;
  /** Its arguments. @default [] */
  args: string[];
  /** Variables added to its environment. @default {} */
  env: Record<string, string>;
  /** Its working directory, absolute (relative in a file: to the file's directory). @default the server's */
  cwd?: string;
  /** Seconds a new worker process has to say ready (> 0). @default 30 */
  readyTimeoutS: number;
  /** The largest payload (bytes) a worker may send in one frame. @default 1073741824 */
  maxFrameBytes: number;
  /** Where prepared data of at least handoffMinBytes is handed over as a file (the worker maps it) instead of through the pipe: a memory-backed folder. @default "/dev/shm" where it exists, else the system's temporary folder */
  handoffDir: string;
  /** Prepared bytes from this size on go by file. @default 1048576 */
  handoffMinBytes: number;
}

/** The CPU preparation pool. */
export interface PrepareConfig {
  /** Preparation threads (≥ 1). @default max(1, os.availableParallelism() − 1) */
  threads: number;
  /** Preparations one thread runs at once (≥ 1); they mostly await. @default 64 */
  concurrency: number;
}

/** Cluster mode (BullMQ on Redis): off unless `redis` is a URL. */
export interface ClusterConfig {
  /** `redis://host:port[/db]` of the shared Redis, or `"none"` (local mode: nothing about Redis is touched). @default "none" */
  redis: string;
  /** How long (ms, ≥ 100) a node's hold on a job lasts without renewal; a dead node's jobs return to the queue after it. @default 6000 */
  lockMs: number;
  /** How often (ms, ≥ 50) a node writes its heartbeat (it lives 3× as long). @default 2000 */
  heartbeatMs: number;
  /** This node's name in the cluster. @default "<hostname>-<pid>" */
  nodeId: string;
}

/** A job kind from an ES module (see KindModule in kind-module.ts). */
export interface KindConfig {
  /** The module's path, absolute. Relative in a file: to the file's directory; from `--kind`: to the working directory. */
  module: string;
  /** `[kinds.NAME]`: the name the module must export; absent for `--kind FILE` (the module names itself). */
  name?: string;
  /** `[kinds.NAME] device`: the device that runs it, overriding the module's `device` export. */
  device?: string;
  /**
   * `[kinds.NAME.prepareBatch]`: up to `maxItems` queued partitions of the kind are prepared
   * together by its `prepareBatch(inputs[], ctx[])`, one preparation step with memory reserved for
   * all, waiting up to `maxWaitMs` for more while nothing else is queued.
   */
  prepareBatch?: DeviceBatchConfig;
}

/** The daemon's configuration, fully resolved: every field set, `dataDir` absolute, `Infinity` for unlimited / none. */
export interface ServeConfig {
  /** The journal directory, absolute. Relative in a file: to the file's directory; elsewhere: to the working directory. @default "./stoker-data" */
  dataDir: string;
  server: ServerConfig;
  engine: EngineConfig;
  device: DeviceConfig;
  prepare: PrepareConfig;
  cluster: ClusterConfig;
  /** The journal (`[journal]`): `maxBytes` caps its size (writes beyond fail as on a full disk: submits get 507). Absent: no cap. */
  journal?: { maxBytes: number };
  /** More devices by name (`[devices.NAME]`, each like `[device]`): a kind runs on the one its `device` names. Absent: only `[device]`, named "default". */
  devices?: Record<string, DeviceConfig>;
  /** Job kinds beyond the built-in ntt-proof and sleep: `[kinds.NAME] module = "path"` in a file, `--kind FILE` (repeatable). Absent: none. */
  kinds?: KindConfig[];
}

/** One problem: `source` is the file path, the environment variable or the `--flag`; `path` the field. */
export interface ConfigIssue {
  source: string;
  path: string;
  /** What is wrong — how to fix it. */
  message: string;
}

/** Invalid configuration; `message` has one line per issue: `<source>: <path>: <what is wrong> — <how to fix>`. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly code = 'E_CONFIG';
  constructor(readonly issues: ConfigIssue[]) {
    super(issues.map((i) => (i.path ? `${i.source}: ${i.path}: ${i.message}` : `${i.source}: ${i.message}`)).join('\n'));
  }
}

/** Settings in the shape of the TOML file, every field optional (for {@link loadConfig}'s `values`). */
export interface ConfigValues {
  dataDir?: string;
  server?: Partial<ServerConfig>;
  engine?: Partial<Omit<EngineConfig, 'budgetBytes' | 'deviceTimeoutS'>> & { budgetBytes?: number | 'unlimited'; deviceTimeoutS?: number | 'none' };
  device?: Partial<DeviceConfig>;
  prepare?: Partial<PrepareConfig>;
  cluster?: Partial<ClusterConfig>;
  journal?: { maxBytes?: number };
  devices?: Record<string, Partial<DeviceConfig>>;
  /** Kind modules by name: `{ embed: { module: './embed-kind.mjs' } }` (a path, or a file: URL), optionally on a named device. */
  kinds?: Record<string, { module: string; device?: string }>;
}

/** Options of {@link loadConfig}. */
export interface LoadConfigOptions {
  /** A TOML file (`--config path`), relative to `cwd`. */
  file?: string;
  /** Settings from a program, in the file's shape and checked the same way (relative paths against `cwd`); they override the file. */
  values?: ConfigValues;
  /** The environment; `process.env` when omitted. An empty value counts as unset. */
  env?: NodeJS.ProcessEnv | Record<string, string | undefined>;
  /** Flags already parsed by the CLI. */
  flags?: { host?: string; port?: string | number; dataDir?: string; cluster?: string; kinds?: readonly string[]; /** The token read from --token-file. */ token?: string };
  /** Base of relative paths from the environment, the flags and the defaults. @default process.cwd() */
  cwd?: string;
}

// ─── Schemas ──────────────────────────────────────────────────────────────────────────────────

/** How a value is shown in a message. */
function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  if (v === null || v === undefined) return 'nothing';
  if (Array.isArray(v)) return 'an array';
  if (v instanceof Date) return 'a date';
  return 'a table';
}

/** Zod's error option: "expected <expect>, got <value> — <fix>". */
const err = (expect: string, fix: string | ((input: unknown) => string)) => ({
  error: (iss: { input?: unknown }) => `expected ${expect}, got ${show(iss.input)} — ${typeof fix === 'string' ? fix : fix(iss.input)}`,
});

function int(min: number, max: number | undefined, expect: string, fix: string) {
  const e = err(expect, fix);
  const s = z.number(e).int(e).min(min, e);
  return (max === undefined ? s : s.max(max, e)).optional();
}
function positive(expect: string, fix: string) {
  const e = err(expect, fix);
  return z.number(e).positive(e).optional();
}
function text(expect: string, fix: string) {
  const e = err(expect, fix);
  return z.string(e).min(1, e).optional();
}
/** A positive number, or `word` for Infinity. */
function positiveOr(word: string, expect: string, fix: string) {
  return z.custom<number | string>((v) => v === word || (typeof v === 'number' && Number.isFinite(v) && v > 0), err(expect, fix)).optional();
}

function pacerFix(input: unknown): string {
  const near = typeof input === 'string' ? suggest(input, PACER_NAMES) : undefined;
  return `${near ? `did you mean ${JSON.stringify(near)}? ` : ''}use one of: ${PACER_NAMES.join(', ')}`;
}
const pacerErr = err('a built-in pacer name', pacerFix);
const numberErr = err('a number', 'write each pacer option as name = number, e.g. window = 32');

const serverShape = {
  host: text('a host name or IP address', 'use e.g. "127.0.0.1" (this machine only) or "0.0.0.0" (every interface)'),
  port: int(0, 65535, 'an integer from 0 to 65535', 'use e.g. 7070, or 0 to pick a free port'),
  bodyLimitBytes: int(1024, undefined, 'an integer ≥ 1024 (bytes)', 'use e.g. 1048576 (1 MiB)'),
  maxPendingJobs: int(1, undefined, 'an integer ≥ 1', 'use e.g. 10000'),
  maxPendingPartitions: int(1, undefined, 'an integer ≥ 1', 'use e.g. 200000'),
  retryAfterS: int(1, undefined, 'an integer ≥ 1 (seconds)', 'use e.g. 5'),
  resultTtlS: positive('a number of seconds > 0', 'use e.g. 86400 (one day)'),
  shutdownTimeoutS: (() => {
    const e = err('a number of seconds ≥ 0', 'use e.g. 30 (0 stops at once; unfinished partitions run again after the restart)');
    return z.number(e).min(0, e).optional();
  })(),
  maxWaitS: positive('a number of seconds > 0', 'use e.g. 300'),
  token: z
    .string(err('a token of at least 16 characters, or ""', 'use e.g. the output of `openssl rand -hex 32`, or "" for none'))
    .refine((v) => v === '' || (v.length >= 16 && !/\s/.test(v)), err('a token of at least 16 characters (no spaces), or ""', 'use e.g. the output of `openssl rand -hex 32`, or "" for none'))
    .optional(),
  allowedHosts: z
    .preprocess(
      (v) => (typeof v === 'string' ? v.split(',').map((h) => h.trim()).filter((h) => h !== '') : v),
      z.array(z.string().regex(/^[A-Za-z0-9.\-:[\]]+$/), err('a list of host names', 'write e.g. allowedHosts = ["stoker.internal", "10.0.0.5"] (env: comma-separated)')),
    )
    .optional(),
  openWithoutToken: z
    .preprocess((v) => (v === 'true' ? true : v === 'false' ? false : v), z.boolean(err('true or false', 'use true only where the network itself keeps strangers out')))
    .optional(),
  requestTimeoutS: positive('a number of seconds > 0', 'use e.g. 30'),
  headersTimeoutS: positive('a number of seconds > 0', 'use e.g. 10'),
  keepAliveTimeoutS: positive('a number of seconds > 0', 'use e.g. 5'),
  maxConnections: int(1, undefined, 'an integer ≥ 1', 'use e.g. 1024'),
  maxEventStreams: int(1, undefined, 'an integer ≥ 1', 'use e.g. 256'),
  tlsCert: z.string(err('a PEM file path, or ""', 'write e.g. tlsCert = "/etc/stoker/cert.pem"')).optional(),
  tlsKey: z.string(err('a PEM file path, or ""', 'write e.g. tlsKey = "/etc/stoker/key.pem"')).optional(),
};
const engineShape = {
  pacer: z
    .string(pacerErr)
    .refine((v) => PACER_NAMES.includes(v), pacerErr)
    .optional(),
  targetWaiting: positive('a number > 0', 'use e.g. 4 (items waiting for a device)'),
  budgetBytes: positiveOr('unlimited', 'a number of bytes > 0 or "unlimited"', 'use e.g. 412316860416 (384 GiB), or "unlimited"'),
  retries: int(0, 10, 'an integer from 0 to 10', 'use e.g. 1'),
  deviceTimeoutS: positiveOr('none', 'a number of seconds > 0 or "none"', 'use e.g. 120, or "none" for no timeout'),
  pacerOptions: z
    .record(z.string(), z.number(numberErr), err('a table of pacer options', 'write them under an [engine.pacerOptions] header, one name = number per line'))
    .optional(),
};
const processShape = {
  command: z.string(err('a program', 'write e.g. command = "python3"')).min(1, err('a program', 'write e.g. command = "python3"')),
  args: z.array(z.string(err('a string', 'write each argument as a string')), err('an array of strings', 'write e.g. args = ["device.py", "--fp16"]')).optional(),
  env: z.record(z.string(), z.string(err('a string', 'write each value as a string, e.g. CUDA_VISIBLE_DEVICES = "0"')), err('a table of strings', 'write them under a [device.process.env] header, NAME = "value"')).optional(),
  cwd: z.string(err('a directory path', 'write e.g. cwd = "./device"')).min(1, err('a directory path', 'write e.g. cwd = "./device"')).optional(),
  readyTimeoutS: (() => {
    const e = err('a number of seconds > 0, at most 86400', 'use e.g. 30');
    return z.number(e).positive(e).max(86_400, e).optional();
  })(),
  maxFrameBytes: int(1, undefined, 'an integer ≥ 1 (bytes)', 'use e.g. 1073741824 (1 GiB)'),
  handoffDir: z.string(err('a directory path', 'write e.g. handoffDir = "/dev/shm"')).min(1, err('a directory path', 'write e.g. handoffDir = "/dev/shm"')).optional(),
  handoffMinBytes: int(0, undefined, 'an integer ≥ 0 (bytes)', 'use e.g. 1048576 (1 MiB; 0 sends every payload by file)'),
};
const httpShape = {
  url: z.string(err('an http:// or https:// URL', 'write e.g. url = "http://127.0.0.1:8000/embed"')).url(err('an http:// or https:// URL', 'write e.g. url = "http://127.0.0.1:8000/embed"')).regex(/^https?:\/\//i, err('an http:// or https:// URL', 'write e.g. url = "http://127.0.0.1:8000/embed"')),
  headers: z.record(z.string(), z.string(err('a string', 'write each header value as a string')), err('a table of strings', 'write them as headers = { Authorization = "Bearer …" }')).optional(),
  timeoutS: z.custom<number | string>((v) => v === 'none' || (typeof v === 'number' && Number.isFinite(v) && v > 0 && v <= 86_400), err('a number of seconds > 0 (at most 86400) or "none"', 'use e.g. 60, or "none"')).optional(),
  maxResponseBytes: int(1, undefined, 'an integer ≥ 1 (bytes)', 'use e.g. 1073741824 (1 GiB)'),
};
const batchShape = {
  maxItems: int(1, 4096, 'an integer from 1 to 4096', 'use e.g. 16 (the most items one device step takes)'),
  maxWaitMs: z.number(err('a number of ms ≥ 0', 'use e.g. 5, or 0 to take what is waiting')).min(0, err('a number of ms ≥ 0', 'use e.g. 5, or 0 to take what is waiting')).max(3_600_000, err('a number of ms ≥ 0 (at most 3600000)', 'use e.g. 5')).optional(),
};
const deviceShape = {
  kind: z.enum(['cpu', 'webgpu'], err('"cpu" or "webgpu"', 'use "cpu" or "webgpu"')).optional(),
  workers: int(1, 64, 'an integer from 1 to 64', 'use e.g. 2 (pipelined workers on the device)'),
  priorServiceMs: positive('a number of ms > 0', 'use e.g. 1200 (the device time per item), or leave it out to use what the last run measured'),
  process: z.strictObject(processShape, err('a table [device.process]', 'write command = "python3" and args = ["device.py"] under a [device.process] header')).optional(),
  http: z.strictObject(httpShape, err('a table [device.http]', 'write url = "http://127.0.0.1:8000/embed" under a [device.http] header')).optional(),
  batch: z.strictObject({ ...batchShape, maxItems: batchShape.maxItems.unwrap() }, err('a table [device.batch]', 'write maxItems = 16 (and maxWaitMs = 5) under a [device.batch] header')).optional(),
};
const prepareShape = {
  threads: int(1, undefined, 'an integer ≥ 1', `use e.g. ${defaultThreads()} (this machine's cores − 1)`),
  concurrency: int(1, undefined, 'an integer ≥ 1', 'use e.g. 64'),
};
const clusterShape = {
  redis: z
    .string(err('a redis:// URL or "none"', 'use e.g. "redis://127.0.0.1:6379/0", or "none" for local mode'))
    .refine((v) => v === 'none' || /^rediss?:\/\/[^\s/]+(\/\d+)?$/.test(v), err('a redis:// URL or "none"', 'use e.g. "redis://127.0.0.1:6379/0", or "none" for local mode'))
    .optional(),
  lockMs: int(100, undefined, 'an integer ≥ 100 (ms)', 'use e.g. 6000'),
  heartbeatMs: int(50, undefined, 'an integer ≥ 50 (ms)', 'use e.g. 2000'),
  nodeId: z
    .string(err('a node name', 'use e.g. "gpu-box-1" (letters, digits, . _ -)'))
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, err('a node name', 'use e.g. "gpu-box-1" (letters, digits, . _ -)'))
    .optional(),
};

const section = <T extends z.core.$ZodLooseShape>(name: string, shape: T) =>
  z
    .strictObject(shape, err(`a table [${name}]`, `write its settings under a [${name}] header`))
    .optional();

const SECTIONS = {
  server: section('server', serverShape),
  engine: section('engine', engineShape),
  device: section('device', deviceShape),
  prepare: section('prepare', prepareShape),
  cluster: section('cluster', clusterShape),
};
type SectionName = keyof typeof SECTIONS;
const SECTION_NAMES = Object.keys(SECTIONS) as SectionName[];
const SHAPES: Record<SectionName, Record<string, z.ZodType>> = { server: serverShape, engine: engineShape, device: deviceShape, prepare: prepareShape, cluster: clusterShape };

const dataDirSchema = text('a directory path', 'give the journal directory, e.g. "./stoker-data"');
const KIND_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const kindErr = err('a table [kinds.NAME] with module = "path"', 'write e.g. [kinds.embed] then module = "./embed-kind.mjs" on the next line');
const kindsSchema = z
  .record(
    z.string().regex(KIND_NAME, err('a kind name', 'use letters, digits, . _ - (at most 64), e.g. [kinds.embed]')),
    z.strictObject(
      {
        module: z.string(err('a path to an ES module', 'write module = "./my-kind.mjs" (relative to this file)')).min(1, err('a path to an ES module', 'write module = "./my-kind.mjs"')),
        device: z.string(err('a device name', 'write device = "default" or the NAME of a [devices.NAME]')).regex(KIND_NAME, err('a device name', 'write device = "default" or the NAME of a [devices.NAME]')).optional(),
        prepareBatch: z.strictObject({ ...batchShape, maxItems: batchShape.maxItems.unwrap() }, err('a table [kinds.NAME.prepareBatch]', 'write maxItems = 4 (and maxWaitMs = 10000) under a [kinds.NAME.prepareBatch] header')).optional(),
      },
      kindErr,
    ),
    kindErr,
  )
  .optional();
const devicesSchema = z
  .record(
    z.string().regex(KIND_NAME, err('a device name', 'use letters, digits, . _ - (at most 64), e.g. [devices.gpu]')),
    z.strictObject(deviceShape, err('a table [devices.NAME]', 'write workers = 2 and a [devices.NAME.process] or [devices.NAME.http] table under it')),
    err('tables [devices.NAME]', 'write each device as [devices.gpu] with workers = 2 and its process or http table'),
  )
  .optional();
const journalSchema = z
  .strictObject({ maxBytes: int(65_536, undefined, 'an integer ≥ 65536 (bytes)', 'use e.g. 10737418240 (10 GiB)') }, err('a table [journal]', 'write maxBytes = … under a [journal] header'))
  .optional();
const FileSchema = z.strictObject({ dataDir: dataDirSchema, ...SECTIONS, journal: journalSchema, devices: devicesSchema, kinds: kindsSchema });
/** One source's values, each checked; absent means "not set here". */
type Layer = z.output<typeof FileSchema>;

/** Every field, for the environment and the documentation. */
type FieldPath = 'dataDir' | { [S in SectionName]: `${S}.${keyof NonNullable<Layer[S]> & string}` }[SectionName];

function defaultNodeId(): string {
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

// ─── Suggestions ──────────────────────────────────────────────────────────────────────────────

function levenshtein(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length] ?? 0;
}

/** The closest candidate within edit distance 2 (case, `_` and `-` ignored), if any. */
function suggest(word: string, candidates: readonly string[]): string | undefined {
  const norm = (s: string) => s.toLowerCase().replace(/[_-]/g, '');
  let best: string | undefined;
  let bestD = 3;
  for (const c of candidates) {
    const d = norm(c) === norm(word) ? 0 : levenshtein(word, c);
    if (d < bestD) [best, bestD] = [c, d];
  }
  return best;
}

// ─── Issues ───────────────────────────────────────────────────────────────────────────────────

/** The keys allowed at a path of the file. */
function knownKeys(at: string): string[] {
  if (at === '') return Object.keys(FileSchema.shape);
  if (at === 'device.process') return Object.keys(processShape);
  if (at === 'device.http') return Object.keys(httpShape);
  if (at === 'device.batch' || /^devices\.[^.]+\.batch$/.test(at)) return Object.keys(batchShape);
  if (/^kinds\.[^.]+\.prepareBatch$/.test(at)) return Object.keys(batchShape);
  if (at.startsWith('kinds.')) return ['module', 'device', 'prepareBatch'];
  if (at === 'journal') return ['maxBytes'];
  if (/^devices\.[^.]+$/.test(at)) return Object.keys(deviceShape);
  if (/^devices\.[^.]+\.process$/.test(at)) return Object.keys(processShape);
  if (/^devices\.[^.]+\.http$/.test(at)) return Object.keys(httpShape);
  return Object.hasOwn(SHAPES, at) ? Object.keys(SHAPES[at as SectionName]) : [];
}

function zodIssues(source: string, error: z.ZodError, base: readonly (string | number)[] = []): ConfigIssue[] {
  const out: ConfigIssue[] = [];
  for (const iss of error.issues) {
    const at = [...base, ...iss.path.map(String)].join('.');
    if (iss.code === 'unrecognized_keys') {
      const known = knownKeys(at);
      for (const key of iss.keys) {
        const near = suggest(key, known);
        const where = at === '' ? 'at the top level' : `in [${at}]`;
        out.push({
          source,
          path: at === '' ? key : `${at}.${key}`,
          message: `unknown key ${where} — ${near ? `did you mean ${JSON.stringify(near)}? ` : 'remove it; '}the keys ${where} are: ${known.join(', ')}`,
        });
      }
    } else {
      out.push({ source, path: at, message: iss.message.includes(' — ') ? iss.message : `${iss.message} — see \`stoker serve --help\` for the fields` });
    }
  }
  return out;
}

// ─── Sources ──────────────────────────────────────────────────────────────────────────────────

interface Source {
  layer: Layer;
  /** Kind modules from --kind, relative to `base`. */
  kindFiles?: readonly string[];
  /** Base of a relative dataDir. */
  base: string;
}

function readFileLayer(file: string, cwd: string, issues: ConfigIssue[]): Source | undefined {
  const abs = path.resolve(cwd, file);
  let textIn: string;
  try {
    textIn = fs.readFileSync(abs, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'not found' : code === 'EISDIR' ? 'is a directory' : code === 'EACCES' ? 'not readable (permission denied)' : (e as Error).message;
    issues.push({ source: file, path: '', message: `cannot read the config file: ${why} (${abs}) — check the --config path, or leave --config out to use the defaults and the environment` });
    return undefined;
  }
  let data: unknown;
  try {
    data = parse(textIn);
  } catch (e) {
    if (e instanceof TomlError) {
      const reason = (e.message.split('\n')[0] ?? '').replace(/^Invalid TOML document:\s*/, '');
      issues.push({ source: file, path: `line ${e.line}, column ${e.column}`, message: `invalid TOML: ${reason} — fix the syntax there (strings need double quotes, tables a [header]; see https://toml.io)` });
    } else {
      issues.push({ source: file, path: '', message: `invalid TOML: ${(e as Error).message} — fix the file's syntax (see https://toml.io)` });
    }
    return undefined;
  }
  const r = FileSchema.safeParse(data);
  if (!r.success) {
    issues.push(...zodIssues(file, r.error));
    return undefined;
  }
  return { layer: r.data, base: path.dirname(abs) };
}

const upperSnake = (key: string) => key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase();

/** The environment variable of each field. */
const ENV_VARS: ReadonlyMap<string, FieldPath> = new Map<string, FieldPath>([
  ['STOKER_DATA_DIR', 'dataDir'],
  ...SECTION_NAMES.flatMap((s) => Object.keys(SHAPES[s]).map((k): [string, FieldPath] => [`STOKER_${s.toUpperCase()}_${upperSnake(k)}`, `${s}.${k}` as FieldPath])),
]);
const ENV_PREFIXES = SECTION_NAMES.map((s) => `STOKER_${s.toUpperCase()}_`);

const NUMERIC = /^[+-]?(\d[\d_]*(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i;

/** A string from the environment or a flag: as it is where the field takes it, else as a number. */
function coerce(schema: z.ZodType, raw: string): z.ZodSafeParseResult<unknown> {
  const asText = schema.safeParse(raw);
  if (asText.success || !NUMERIC.test(raw.trim())) return asText;
  return schema.safeParse(Number(raw.trim().replace(/_/g, '')));
}

/** `{"window":32}` or `window=32,gain=0.5`. */
function parsePacerOptions(raw: string): { value: unknown } | { error: string } {
  const t = raw.trim();
  if (t.startsWith('{')) {
    try {
      return { value: JSON.parse(t) };
    } catch (e) {
      return { error: `expected a JSON object, got ${show(raw)} (${(e as Error).message})` };
    }
  }
  const value: Record<string, unknown> = {};
  for (const part of t.split(',').filter((p) => p.trim() !== '')) {
    const eq = part.indexOf('=');
    if (eq <= 0) return { error: `expected name=number pairs, got ${show(part.trim())}` };
    const v = part.slice(eq + 1).trim();
    value[part.slice(0, eq).trim()] = NUMERIC.test(v) ? Number(v.replace(/_/g, '')) : v;
  }
  return { value };
}

function fieldSchema(field: FieldPath): z.ZodType {
  if (field === 'dataDir') return dataDirSchema;
  const [s, k] = field.split('.') as [SectionName, string];
  const schema = SHAPES[s][k];
  if (!schema) throw new Error(`no field ${field}`);
  return schema;
}

function setField(layer: Layer, field: FieldPath, value: unknown): void {
  if (field === 'dataDir') {
    layer.dataDir = value as string;
    return;
  }
  const [s, k] = field.split('.') as [SectionName, string];
  const sec = ((layer as Record<string, Record<string, unknown> | undefined>)[s] ??= {});
  sec[k] = value;
}

/** Sets `field` from the string (or number) `raw` of `source`, or records why not. */
function setFromString(layer: Layer, field: FieldPath, raw: string | number, source: string, issues: ConfigIssue[]): void {
  let r: z.ZodSafeParseResult<unknown>;
  if ((field === 'device.process' || field === 'device.http' || field === 'device.batch') && typeof raw === 'string') {
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch (e) {
      const example = field === 'device.http' ? '{"url":"http://127.0.0.1:8000/embed"}' : field === 'device.batch' ? '{"maxItems":16,"maxWaitMs":5}' : '{"command":"python3","args":["device.py"]}';
      issues.push({ source, path: field, message: `expected a JSON object, got ${show(raw)} (${(e as Error).message}) — write e.g. ${source}='${example}'` });
      return;
    }
    r = fieldSchema(field).safeParse(value);
  } else if (field === 'engine.pacerOptions' && typeof raw === 'string') {
    const p = parsePacerOptions(raw);
    if ('error' in p) {
      issues.push({ source, path: field, message: `${p.error} — write e.g. ${source}='{"window":32}' or ${source}=window=32,gain=0.5` });
      return;
    }
    r = fieldSchema(field).safeParse(p.value);
  } else {
    r = typeof raw === 'number' ? fieldSchema(field).safeParse(raw) : coerce(fieldSchema(field), raw);
  }
  if (!r.success) {
    issues.push(...zodIssues(source, r.error, field.split('.')));
    return;
  }
  setField(layer, field, r.data);
}

function envLayer(env: Record<string, string | undefined>, cwd: string, issues: ConfigIssue[]): Source {
  const layer: Layer = {};
  for (const [name, raw] of Object.entries(env)) {
    if (raw === undefined || raw === '') continue;
    const field = ENV_VARS.get(name);
    if (field) {
      setFromString(layer, field, raw, name, issues);
      continue;
    }
    const prefix = ENV_PREFIXES.find((p) => name.startsWith(p));
    if (!prefix) continue;
    const sec = prefix.slice('STOKER_'.length, -1).toLowerCase();
    const inSection = [...ENV_VARS.keys()].filter((v) => v.startsWith(prefix));
    const near = suggest(name, inSection);
    const guess = name
      .slice(prefix.length)
      .toLowerCase()
      .replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
    issues.push({
      source: name,
      path: `${sec}.${guess}`,
      message: `unknown setting — ${near ? `did you mean ${near}? ` : 'unset it; '}the [${sec}] variables are: ${inSection.join(', ')}`,
    });
  }
  return { layer, base: cwd };
}

const FLAGS = { host: ['server.host', '--host'], port: ['server.port', '--port'], dataDir: ['dataDir', '--data'], cluster: ['cluster.redis', '--cluster'], token: ['server.token', '--token-file'] } as const;

function flagLayer(flags: NonNullable<LoadConfigOptions['flags']>, cwd: string, issues: ConfigIssue[]): Source {
  const layer: Layer = {};
  for (const [key, [field, source]] of Object.entries(FLAGS)) {
    const raw = (flags as Record<string, string | number | undefined>)[key];
    if (raw !== undefined) setFromString(layer, field, raw, source, issues);
  }
  for (const f of flags.kinds ?? []) {
    if (f.trim() === '') issues.push({ source: '--kind', path: '', message: 'expected a path to a kind module, got "" — write e.g. --kind ./my-kind.mjs' });
  }
  return { layer, base: cwd, kindFiles: flags.kinds ?? [] };
}

// ─── Loading ──────────────────────────────────────────────────────────────────────────────────

function defaults(cwd: string): ServeConfig {
  return {
    dataDir: path.resolve(cwd, './stoker-data'),
    server: {
      host: '127.0.0.1', port: 7070, bodyLimitBytes: 1_048_576, maxPendingJobs: 10_000, maxPendingPartitions: 200_000, retryAfterS: 5, resultTtlS: 86_400, shutdownTimeoutS: 30, maxWaitS: 300,
      token: '', allowedHosts: [], openWithoutToken: false, requestTimeoutS: 30, headersTimeoutS: 10, keepAliveTimeoutS: 5, maxConnections: 1024, maxEventStreams: 256, tlsCert: '', tlsKey: '',
    },
    engine: { pacer: 'stoker', targetWaiting: 4, budgetBytes: Infinity, retries: 1, deviceTimeoutS: Infinity, pacerOptions: {} },
    device: { kind: 'cpu', workers: 2 },
    prepare: { threads: defaultThreads(), concurrency: 64 },
    cluster: { redis: 'none', lockMs: 6000, heartbeatMs: 2000, nodeId: defaultNodeId() },
  };
}

/** `"unlimited"` / `"none"` → Infinity. */
const finiteOr = (v: number | string): number => (typeof v === 'number' ? v : Infinity);

/**
 * Loads the daemon's configuration: the defaults, then `file`, then `values`, then `env`, then `flags`, each
 * later source overriding field by field (a table such as `engine.pacerOptions` is replaced
 * whole). Throws a {@link ConfigError} listing every problem of every source.
 */
export function loadConfig(opts: LoadConfigOptions = {}): ServeConfig {
  const cwd = opts.cwd ?? process.cwd();
  const issues: ConfigIssue[] = [];
  const sources: Source[] = [];
  if (opts.file !== undefined) {
    const s = readFileLayer(opts.file, cwd, issues);
    if (s) sources.push(s);
  }
  if (opts.values !== undefined) {
    const r = FileSchema.safeParse(opts.values);
    if (r.success) sources.push({ layer: r.data, base: cwd });
    else issues.push(...zodIssues('loadConfig({ values })', r.error));
  }
  sources.push(envLayer(opts.env ?? process.env, cwd, issues));
  if (opts.flags) sources.push(flagLayer(opts.flags, cwd, issues));
  if (issues.length > 0) throw new ConfigError(issues);

  const c = defaults(cwd);
  for (const { layer, base, kindFiles } of sources) {
    if (layer.dataDir !== undefined) c.dataDir = path.resolve(base, layer.dataDir);
    // [kinds.NAME] of a later source replaces the same NAME of an earlier one; --kind files add.
    const named = Object.entries(layer.kinds ?? {}).map(([name, k]) => ({ name, module: modulePath(base, k.module), ...(k.device === undefined ? {} : { device: k.device }), ...(k.prepareBatch ? { prepareBatch: { maxWaitMs: 0, ...defined(k.prepareBatch) } as DeviceBatchConfig } : {}) }));
    const kinds = [...(c.kinds ?? []).filter((k) => !named.some((n) => n.name === k.name)), ...named, ...(kindFiles ?? []).map((f) => ({ module: modulePath(base, f) }))];
    if (kinds.length > 0) c.kinds = kinds;
    const { budgetBytes, deviceTimeoutS, ...engine } = layer.engine ?? {};
    Object.assign(c.server, defined(layer.server));
    for (const f of ['tlsCert', 'tlsKey'] as const) {
      const v = layer.server?.[f];
      if (v) c.server[f] = path.resolve(base, v);
    }
    Object.assign(c.engine, defined(engine));
    if (budgetBytes !== undefined) c.engine.budgetBytes = finiteOr(budgetBytes);
    if (deviceTimeoutS !== undefined) c.engine.deviceTimeoutS = finiteOr(deviceTimeoutS);
    if (layer.journal?.maxBytes !== undefined) c.journal = { maxBytes: layer.journal.maxBytes };
    mergeDevice(c.device, layer.device, base);
    for (const [name, d] of Object.entries(layer.devices ?? {})) {
      if (name === 'default') throw new ConfigError([{ source: 'configuration', path: 'devices.default', message: '"default" is [device]: give this one another name, or set it under [device]' }]);
      // A [devices.NAME] of a later source replaces the earlier one whole.
      const device: DeviceConfig = { kind: 'cpu', workers: 2 };
      mergeDevice(device, d, base);
      c.devices = { ...(c.devices ?? {}), [name]: device };
    }
    Object.assign(c.prepare, defined(layer.prepare));
    Object.assign(c.cluster, defined(layer.cluster));
  }
  c.engine.pacerOptions = { ...c.engine.pacerOptions };
  const { tlsCert, tlsKey } = c.server;
  if ((tlsCert === '') !== (tlsKey === '')) {
    throw new ConfigError([{ source: 'configuration', path: tlsCert === '' ? 'server.tlsCert' : 'server.tlsKey', message: `server.${tlsCert === '' ? 'tlsKey' : 'tlsCert'} is set without server.${tlsCert === '' ? 'tlsCert' : 'tlsKey'} — HTTPS needs both the certificate chain and its private key (PEM files)` }]);
  }
  for (const [field, file] of [['tlsCert', tlsCert], ['tlsKey', tlsKey]] as const) {
    if (file !== '' && !fs.existsSync(file)) throw new ConfigError([{ source: 'configuration', path: `server.${field}`, message: `${file} does not exist — give a PEM file (relative in a file: to the file's folder)` }]);
  }
  for (const [name, d] of [['device', c.device], ...Object.entries(c.devices ?? {}).map(([n, dv]) => [`devices.${n}`, dv])] as [string, DeviceConfig][]) {
    const deviceCwd = d.process?.cwd;
    if (deviceCwd !== undefined && !fs.existsSync(deviceCwd)) {
      throw new ConfigError([{ source: 'configuration', path: `${name}.process.cwd`, message: `${deviceCwd} does not exist — give the folder the device's program runs in (relative in a file: to the file's folder)` }]);
    }
    if (d.process && d.http) {
      throw new ConfigError([{ source: 'configuration', path: name, message: `both [${name}.process] and [${name}.http] are set — a device is one or the other: keep one of them` }]);
    }
  }
  return c;
}

/** Merges one source's device table (`[device]` or a `[devices.NAME]`) into `d`, with the defaults of its process or http table. */
function mergeDevice(d: DeviceConfig, layer: NonNullable<Layer['device']> | undefined, base: string): void {
  Object.assign(d, defined(layer));
  const http = layer?.http;
  if (http) {
    const { timeoutS, ...rest } = http;
    d.http = { headers: {}, timeoutS: Infinity, maxResponseBytes: 2 ** 30, ...defined(rest), ...(timeoutS === undefined ? {} : { timeoutS: finiteOr(timeoutS) }) } as HttpDeviceConfig;
  }
  if (layer?.batch) d.batch = { maxWaitMs: 0, ...defined(layer.batch) } as DeviceBatchConfig;
  const proc = layer?.process;
  if (proc) {
    const { cwd: dir, handoffDir, ...rest } = proc;
    d.process = {
      args: [],
      env: {},
      readyTimeoutS: 30,
      maxFrameBytes: 2 ** 30,
      handoffDir: defaultHandoffDir(),
      handoffMinBytes: 2 ** 20,
      ...defined(rest),
      ...(dir === undefined ? {} : { cwd: path.resolve(base, dir) }),
      ...(handoffDir === undefined ? {} : { handoffDir: path.resolve(base, handoffDir) }),
    } as ProcessDeviceConfig;
  }
}

/** Where a device runs its steps: on threads, in a process per worker, or behind an HTTP endpoint. */
export function deviceType(d: DeviceConfig): 'thread' | 'process' | 'http' {
  return d.process ? 'process' : d.http ? 'http' : 'thread';
}

/** Where each of a config's devices runs its steps, by name ("default" is `[device]`). */
export function deviceTypes(c: ServeConfig): Map<string, 'thread' | 'process' | 'http'> {
  return new Map([['default', deviceType(c.device)], ...Object.entries(c.devices ?? {}).map(([n, d]): [string, 'thread' | 'process' | 'http'] => [n, deviceType(d)])]);
}

/** A kind module's path, absolute: a file: URL as its path, a relative path against `base`. */
function modulePath(base: string, spec: string): string {
  return spec.startsWith('file:') ? fileURLToPath(spec) : path.resolve(base, spec);
}

function defined<T extends object>(o: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(o ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** A device table as TOML writes it back (Infinity as "none"). */
function deviceToml(d: DeviceConfig): object {
  return {
    ...d,
    ...(d.process ? { process: { ...d.process } } : {}),
    ...(d.http ? { http: { ...d.http, timeoutS: Number.isFinite(d.http.timeoutS) ? d.http.timeoutS : 'none' } } : {}),
    ...(d.batch ? { batch: { ...d.batch } } : {}),
  };
}

/**
 * The effective configuration as TOML (`stoker config print`): every field, `Infinity` printed
 * back as `"unlimited"` / `"none"`. Loading the output gives the same configuration. Kinds from
 * `--kind` need their names (`names[i]` for `c.kinds[i]`, the module's own `name`).
 */
export function configToToml(c: ServeConfig, names: readonly string[] = (c.kinds ?? []).map((k) => k.name ?? '')): string {
  const { budgetBytes, deviceTimeoutS, pacerOptions, ...engine } = c.engine;
  const doc = {
    dataDir: c.dataDir,
    // The token is a secret: it is never printed (set it again from its file or variable).
    server: { ...c.server, token: '' },
    engine: {
      ...engine,
      budgetBytes: Number.isFinite(budgetBytes) ? budgetBytes : 'unlimited',
      deviceTimeoutS: Number.isFinite(deviceTimeoutS) ? deviceTimeoutS : 'none',
      // An empty table is left out (its default); a header with nothing under it reads badly.
      ...(Object.keys(pacerOptions).length > 0 ? { pacerOptions: { ...pacerOptions } } : {}),
    },
    device: deviceToml(c.device),
    prepare: { ...c.prepare },
    cluster: { ...c.cluster },
    ...(c.journal ? { journal: { ...c.journal } } : {}),
    ...(c.devices ? { devices: Object.fromEntries(Object.entries(c.devices).map(([n, d]) => [n, deviceToml(d)])) } : {}),
    ...(c.kinds?.length ? { kinds: Object.fromEntries(c.kinds.map((k, i) => [names[i] ?? k.name ?? '', { module: k.module, ...(k.device === undefined ? {} : { device: k.device }), ...(k.prepareBatch ? { prepareBatch: { ...k.prepareBatch } } : {}) }])) } : {}),
  };
  const secret = c.server.token ? '# server.token is set and not printed: give it again (STOKER_SERVER_TOKEN or --token-file)\n' : '';
  return `# stoker serve: the effective configuration (defaults < file < environment < flags)\n${secret}${stringify(doc).trim()}\n`;
}

// ─── Documentation ────────────────────────────────────────────────────────────────────────────

const DOCS: Record<FieldPath, [def: string, what: string]> = {
  dataDir: ['"./stoker-data"', 'the journal directory (relative: to the config file, else to the working directory)'],
  'server.host': ['"127.0.0.1"', 'address to listen on ("0.0.0.0": every interface)'],
  'server.port': ['7070', 'TCP port, 0–65535 (0 picks a free port)'],
  'server.bodyLimitBytes': ['1048576', 'largest request body in bytes (≥ 1024)'],
  'server.maxPendingJobs': ['10000', 'unfinished jobs accepted; beyond it submissions get 429'],
  'server.maxPendingPartitions': ['200000', 'partitions of unfinished jobs; beyond it submissions get 429 (a larger job alone: 400)'],
  'server.retryAfterS': ['5', 'the Retry-After (s) of a 429'],
  'server.resultTtlS': ['86400', 'seconds a finished job is kept'],
  'server.shutdownTimeoutS': ['30', 'seconds the partitions in flight may finish on shutdown (the rest resume on restart)'],
  'server.maxWaitS': ['300', 'longest long-poll (s); a longer wait is cut to it'],
  'server.token': ['""', 'when set (≥ 16 chars), the API needs Authorization: Bearer <token> (flag --token-file)'],
  'server.allowedHosts': ['[]', 'more names the Host header may give (env: comma-separated); others get 421'],
  'server.openWithoutToken': ['false', 'listen off loopback without a token (otherwise refused at start)'],
  'server.requestTimeoutS': ['30', 'seconds a client may take to send a whole request'],
  'server.headersTimeoutS': ['10', 'seconds a client may take to send the headers'],
  'server.keepAliveTimeoutS': ['5', 'seconds an idle keep-alive connection stays open'],
  'server.maxConnections': ['1024', 'most open connections'],
  'server.maxEventStreams': ['256', 'most open event streams; more get 503'],
  'server.tlsCert': ['""', 'HTTPS: certificate chain, a PEM file (with server.tlsKey); "": plain HTTP'],
  'server.tlsKey': ['""', 'HTTPS: private key, a PEM file (with server.tlsCert)'],
  'engine.pacer': ['"stoker"', `a built-in pacer: ${PACER_NAMES.join(', ')}`],
  'engine.targetWaiting': ['4', 'items waiting for a device the pacer aims at (> 0)'],
  'engine.budgetBytes': ['"unlimited"', 'memory budget in bytes (> 0) or "unlimited"'],
  'engine.retries': ['1', 'times a failed partition is retried (0–10)'],
  'engine.deviceTimeoutS': ['"none"', 'device step timeout in seconds (> 0) or "none"'],
  'engine.pacerOptions': ['{}', 'pacer options, name = number (env: JSON or name=value,…)'],
  'device.kind': ['"cpu"', '"cpu" or "webgpu"'],
  'device.workers': ['2', 'pipelined workers on the device (1–64)'],
  'device.priorServiceMs': ['none', 'known device time per item (ms): the pacer starts from it (none: what the last run measured, in <dataDir>/stoker.priors.json)'],
  'device.process': ['none', 'a process device: [device.process] command, args, env, cwd, readyTimeoutS (30), maxFrameBytes (1 GiB), handoffDir (/dev/shm), handoffMinBytes (1 MiB) (env: JSON)'],
  'device.batch': ['none', 'batches: [device.batch] maxItems (1–4096), maxWaitMs (0): a worker takes up to maxItems waiting items of one kind as one step (env: JSON)'],
  'device.http': ['none', 'an HTTP device: [device.http] url, headers, timeoutS ("none"), maxResponseBytes (1 GiB) (env: JSON)'],
  'prepare.threads': ['cores − 1', 'preparation threads (≥ 1)'],
  'prepare.concurrency': ['64', 'preparations one thread runs at once (≥ 1)'],
  'cluster.redis': ['"none"', 'cluster mode: redis://host:port[/db] of the shared Redis (flag --cluster), or "none"'],
  'cluster.lockMs': ['6000', "ms a node's hold on a job lasts unrenewed, renewed every third of it (a dead node's jobs run elsewhere about 1.5× this after its death)"],
  'cluster.heartbeatMs': ['2000', "ms between a node's heartbeats (each lives 3× as long)"],
  'cluster.nodeId': ['"<host>-<pid>"', "this node's name in the cluster"],
};

/** Every field with its default and environment variable, for `--help`. */
export const CONFIG_DOC: string = (() => {
  const rows = [...ENV_VARS].map(([env, field]) => [field, DOCS[field][0], env, DOCS[field][1]] as const);
  const width = (i: 0 | 1 | 2) => Math.max(...rows.map((r) => r[i].length));
  const [w0, w1, w2] = [width(0), width(1), width(2)];
  const lines = rows.map((r) => `  ${r[0].padEnd(w0)}  ${r[1].padEnd(w1)}  ${r[2].padEnd(w2)}  ${r[3]}`);
  const extra = [
    `  ${'journal.maxBytes'.padEnd(w0)}  ${'none'.padEnd(w1)}  ${''.padEnd(w2)}  the journal's largest size in bytes (≥ 65536); beyond it submits get 507, accepted jobs go on`,
    `  ${'devices.NAME'.padEnd(w0)}  ${'none'.padEnd(w1)}  ${''.padEnd(w2)}  more devices by name, each a table like [device] (kind, workers, process or http)`,
    `  ${'kinds.NAME.module'.padEnd(w0)}  ${'–'.padEnd(w1)}  ${'(--kind FILE)'.padEnd(w2)}  a kind module (path relative to the config file); --kind adds one, repeatable`,
    `  ${'kinds.NAME.device'.padEnd(w0)}  ${'"default"'.padEnd(w1)}  ${''.padEnd(w2)}  the device that runs the kind (overrides the module's device export)`,
    `  ${'kinds.NAME.prepareBatch'.padEnd(w0)}  ${'none'.padEnd(w1)}  ${''.padEnd(w2)}  prepare up to maxItems (1–4096) partitions together with the kind's prepareBatch, waiting up to maxWaitMs (default 0)`,
  ];
  return ['Configuration (defaults < --config file.toml < environment < flags); field, default, variable:', ...lines, ...extra].join('\n');
})();

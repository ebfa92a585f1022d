import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, stringify, TomlError } from 'smol-toml';
import { z } from 'zod';
import { unknownPacerOptions } from '../core/index.js';
import { batchTable, dataDirSchema, defaultNodeId, defaults, ENV_VARS, err, int, SECTION_NAMES, SECTIONS, SHAPES, show, subDefaults, processShape, httpShape, batchShape, type FieldPath, type SectionName } from './config-fields.js';
import { suggest } from '../core/suggest.js';
import { maskSecrets, redactArgs, redactUrl, SECRET_NAME, withSchemeToken } from '../runtime/redact.js';
import type { ClusterConfig, DeviceBatchConfig, DeviceConfig, EngineConfig, HttpDeviceConfig, PrepareConfig, ProcessDeviceConfig, ServeConfig, ServerConfig } from './config-types.js';

export { CONFIG_DOC } from './config-fields.js';
export type { ClusterConfig, DeviceBatchConfig, DeviceConfig, EngineConfig, HttpDeviceConfig, KindConfig, PrepareConfig, ProcessDeviceConfig, ServeConfig, ServerConfig } from './config-types.js';

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
    // (One wrong value can fail two checks with one message: it is said once.)
    super([...new Set(issues.map((i) => (i.path ? `${i.source}: ${i.path}: ${i.message}` : `${i.source}: ${i.message}`)))].join('\n'));
  }
}

/** Settings in the shape of the TOML file, every field optional (for {@link loadConfig}'s `values`). */
export interface ConfigValues {
  dataDir?: string;
  server?: Partial<ServerConfig>;
  engine?: Partial<Omit<EngineConfig, 'budgetBytes' | 'deviceTimeoutS' | 'prepareTimeoutS'>> & { budgetBytes?: number | 'unlimited'; deviceTimeoutS?: number | 'none'; prepareTimeoutS?: number | 'none' };
  device?: DeviceValues;
  prepare?: Partial<PrepareConfig>;
  cluster?: Partial<ClusterConfig>;
  journal?: { maxBytes?: number };
  devices?: Record<string, DeviceValues>;
  /** Kind modules by name: `{ embed: { module: './embed-kind.mjs' } }` (a path, or a file: URL), optionally on a named device, prepared in batches. */
  kinds?: Record<string, { module: string; device?: string; prepareBatch?: BatchValues }>;
}

/** A device's settings as a file gives them: what has a default may be left out (as in TOML). */
export type DeviceValues = Partial<Omit<DeviceConfig, 'process' | 'http' | 'batch'>> & {
  process?: Partial<ProcessDeviceConfig> & Pick<ProcessDeviceConfig, 'command'>;
  http?: Partial<HttpDeviceConfig> & Pick<HttpDeviceConfig, 'url'>;
  batch?: BatchValues;
};

/** A batch table (`[device.batch]`, `[kinds.NAME.prepareBatch]`): `maxWaitMs` defaults. */
export type BatchValues = Partial<DeviceBatchConfig> & Pick<DeviceBatchConfig, 'maxItems'>;

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

const KIND_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const kindErr = err('a table [kinds.NAME] with module = "path"', 'write e.g. [kinds.embed] then module = "./embed-kind.mjs" on the next line');
const kindsSchema = z
  .record(
    z.string().regex(KIND_NAME, err('a kind name', 'use letters, digits, . _ - (at most 64), e.g. [kinds.embed]')),
    z.strictObject(
      {
        module: z.string(err('a path to an ES module', 'write module = "./my-kind.mjs" (in a config file, relative to its folder)')).min(1, err('a path to an ES module', 'write module = "./my-kind.mjs"')),
        device: z.string(err('a device name', 'write device = "default" or the NAME of a [devices.NAME]')).regex(KIND_NAME, err('a device name', 'write device = "default" or the NAME of a [devices.NAME]')).optional(),
        prepareBatch: batchTable('kinds.NAME.prepareBatch', 'maxItems = 4 (and maxWaitMs = 10000)'),
      },
      kindErr,
    ),
    kindErr,
  )
  .optional();
const devicesSchema = z
  .record(
    z.string().regex(KIND_NAME, err('a device name', 'use letters, digits, . _ - (at most 64), e.g. [devices.gpu]')),
    z.strictObject(SHAPES.device, err('a table [devices.NAME]', 'write workers = 2 and a [devices.NAME.process] or [devices.NAME.http] table under it')),
    err('tables [devices.NAME]', 'write each device as [devices.gpu] with workers = 2 and its process or http table'),
  )
  .optional();
const journalMaxBytes = int(65_536, undefined, 'an integer ≥ 65536 (bytes)', 'use e.g. 10737418240 (10 GiB)');
const journalSchema = z.strictObject({ maxBytes: journalMaxBytes }, err('a table [journal]', 'write maxBytes = … under a [journal] header')).optional();
/** journal.maxBytes's variable (the [journal] table is not one of the sections whose fields each have one). */
const JOURNAL_ENV = 'STOKER_JOURNAL_MAX_BYTES';
const FileSchema = z.strictObject({ dataDir: dataDirSchema, ...SECTIONS, journal: journalSchema, devices: devicesSchema, kinds: kindsSchema });
/** One source's values, each checked; absent means "not set here". */
type Layer = z.output<typeof FileSchema>;

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
  if (/^devices\.[^.]+$/.test(at)) return Object.keys(SHAPES.device);
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
        // A key of a section written at the top level (above every [header]): name its section.
        const home = at === '' && !near ? SECTION_NAMES.find((sec) => Object.hasOwn(SHAPES[sec], key)) : undefined;
        // A key of a device's process, http or batch table written in the device's own (url under [device]).
        const sub = /^(device|devices\.[^.]+)$/.test(at) && !near ? (['http', 'process', 'batch'] as const).filter((t) => knownKeys(`${at}.${t}`).includes(key)).map((t) => `[${at}.${t}]`) : [];
        const fix = near ? `did you mean ${JSON.stringify(near)}? ` : home ? `it belongs in [${home}] (${home}.${key}): write it under the [${home}] header; ` : sub.length ? `it is a key of ${sub.join(' or ')}: write it under that header; ` : 'remove it; ';
        out.push({
          source,
          path: at === '' ? key : `${at}.${key}`,
          message: `unknown key ${where} — ${fix}the keys ${where} are: ${known.join(', ')}`,
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
  /** Where it came from, as errors name it: the file, the environment, the command line. */
  name: string;
  layer: Layer;
  /** Kind modules from --kind, relative to `base`. */
  kindFiles?: readonly string[];
  /** Base of a relative dataDir. */
  base: string;
}

/** The last source that set `at` (a dotted path), as errors name it: a check across the merged sources names where its value came from. */
function originOf(sources: readonly Source[], at: string): string {
  for (let i = sources.length - 1; i >= 0; i--) {
    let v: unknown = (sources[i] as Source).layer;
    for (const key of at.split('.')) v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[key] : undefined;
    if (v === undefined) continue;
    const name = (sources[i] as Source).name;
    // (The environment: the variable that set it — STOKER_ENGINE_PACER_OPTIONS for engine.pacerOptions.gain —, as a bad value's own error names it.)
    return name === ENV_SOURCE ? (envVariableOf(at) ?? name) : name;
  }
  return 'configuration';
}

/** The variable that sets `at` or the field it is in (STOKER_ENGINE_PACER_OPTIONS for engine.pacerOptions.gain), if any. */
function envVariableOf(at: string): string | undefined {
  for (const [variable, field] of ENV_VARS) if (at === field || at.startsWith(`${field}.`)) return variable;
  return undefined;
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
      // A table given twice (lines pasted from `stoker plan` after a table of one's own): which one, and where it began.
      const lines = textIn.split('\n');
      const header = /redefine/.test(reason) ? /^\s*\[([^\]]+)\]/.exec(lines[e.line - 1] ?? '')?.[1]?.trim() : undefined;
      const first = header === undefined ? -1 : lines.findIndex((l) => l.trim() === `[${header}]`);
      const fix = header !== undefined && first >= 0 && first !== e.line - 1 ? `[${header}] is already at line ${first + 1}: merge the two into one table` : 'fix the syntax there (strings need double quotes, tables a [header]; see https://toml.io)';
      issues.push({ source: file, path: `line ${e.line}, column ${e.column}`, message: `invalid TOML: ${reason} — ${fix}` });
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
  return { name: file, layer: r.data, base: path.dirname(abs) };
}

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
  const schema = (SHAPES[s] as Record<string, z.ZodType>)[k];
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

/** The values of credential-named keys in JSON text that may not parse (`"Authorization": "Bearer …"`, `"HF_TOKEN": "…"`), and a scheme's token. */
function jsonSecrets(raw: string): string[] {
  const found: string[] = [];
  for (const m of raw.matchAll(/"((?:[^"\\]|\\.)*)"\s*:\s*"((?:[^"\\]|\\.)*)"/g)) {
    if (!SECRET_NAME.test(m[1] as string)) continue;
    found.push(...withSchemeToken(m[2] as string));
  }
  return found.filter((v) => v.length > 0).sort((a, b) => b.length - a.length);
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
      // (Quoted, its headers' and env's credentials masked: found by pattern, the JSON not parsing.)
      const secrets = jsonSecrets(raw);
      issues.push({ source, path: field, message: `expected a JSON object, got ${show(maskSecrets(raw, secrets))} (${maskSecrets((e as Error).message, secrets)}) — write e.g. ${source}='${example}'` });
      return;
    }
    // Partial: the table's required key (url, command, maxItems) may come from the file's table,
    // which this one sets its fields over (checked once merged: requireDeviceKeys).
    r = (fieldSchema(field) as z.ZodOptional<z.ZodObject>).unwrap().partial().optional().safeParse(value);
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

const ENV_SOURCE = 'the environment (STOKER_*)';

/** The variables Kubernetes sets for a Service (NAME_SERVICE_HOST, NAME_SERVICE_PORT[_P], NAME_PORT_7070_TCP[_ADDR…], and NAME_PORT=tcp://…): not settings. */
const K8S_SERVICE_VAR = /_SERVICE_(HOST|PORT)(_\w+)?$|_PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$/;
const K8S_LINK_PORT = /_PORT$/;
const K8S_LINK_VALUE = /^(tcp|udp|sctp):\/\//;

/**
 * The variable of a setting that `name` names without its section — STOKER_TOKEN for
 * STOKER_SERVER_TOKEN (ignored without a word, a server a user believed guarded ran without a
 * token) — or undefined. Not STOKER_PORT: Kubernetes sets it (tcp://…) for a service named stoker;
 * nor STOKER_WORKER(S), which stoker sets for a process device's workers.
 */
function bareField(name: string): string | undefined {
  const field = name.slice('STOKER_'.length);
  if (field === 'PORT' || field === 'WORKERS') return undefined;
  const found = [...ENV_VARS.keys()].filter((v) => ENV_PREFIXES.some((p) => v === `${p}${field}`));
  return found.length > 0 ? found.join(' or ') : undefined;
}

/**
 * Variables named after a flag that has none, and what to do instead: each was ignored without a
 * word — STOKER_TOKEN_FILE left the server open to anyone, its start line saying "no token needed".
 */
const FLAG_ONLY: Readonly<Record<string, string>> = {
  STOKER_TOKEN_FILE: 'the token file is a flag only: give --token-file FILE, or set STOKER_SERVER_TOKEN to the token itself',
  STOKER_CONFIG: 'the config file is a flag only: give --config FILE (-c)',
  STOKER_CLUSTER: 'did you mean STOKER_CLUSTER_REDIS (the Redis URL --cluster takes)?',
  STOKER_DATA: 'did you mean STOKER_DATA_DIR (the directory --data takes)?',
  STOKER_KIND: 'kind modules are given by --kind FILE or [kinds.NAME] module in the config file, not by a variable',
  STOKER_KINDS: 'kind modules are given by --kind FILE or [kinds.NAME] module in the config file, not by a variable',
};

function envLayer(env: Record<string, string | undefined>, cwd: string, issues: ConfigIssue[]): Source {
  const layer: Layer = {};
  for (const [name, raw] of Object.entries(env)) {
    if (raw === undefined || raw === '') continue;
    // (Kubernetes sets NAME_PORT=tcp://ip:port for each Service: one named stoker-server gave
    // STOKER_SERVER_PORT, and the server refused to start. A port is never written so.)
    if (K8S_LINK_PORT.test(name) && K8S_LINK_VALUE.test(raw)) continue;
    const field = ENV_VARS.get(name);
    if (field) {
      setFromString(layer, field, raw, name, issues);
      continue;
    }
    // (It was ignored without a word: config print showed no [journal].)
    if (name === JOURNAL_ENV) {
      const r = journalMaxBytes.safeParse(/^\s*\d+\s*$/.test(raw) ? Number(raw) : raw);
      if (r.success) layer.journal = { ...(r.data === undefined ? {} : { maxBytes: r.data }) };
      else issues.push({ source: name, path: 'journal.maxBytes', message: r.error.issues[0]?.message ?? 'expected an integer ≥ 65536 (bytes)' });
      continue;
    }
    // (Kubernetes sets these for each Service in the namespace: one named stoker-kinds gave STOKER_KINDS_SERVICE_HOST.)
    if (K8S_SERVICE_VAR.test(name)) continue;
    const flagOnly = FLAG_ONLY[name];
    if (flagOnly !== undefined) {
      issues.push({ source: name, path: '', message: `unknown setting — ${flagOnly}` });
      continue;
    }
    const prefix = ENV_PREFIXES.find((p) => name.startsWith(p));
    if (!prefix) {
      // A misspelt section (STOKER_SERVE_PORT) was ignored silently: refused where it is a near miss of
      // a variable (other STOKER_* variables — the client's STOKER_SERVER, say — are not settings).
      const near = name.startsWith('STOKER_') ? suggest(name, [...ENV_VARS.keys(), JOURNAL_ENV]) ?? bareField(name) : undefined;
      if (near) issues.push({ source: name, path: '', message: `unknown setting — did you mean ${near}?` });
      // (Named devices and kinds have no variables: STOKER_DEVICES_GPU was ignored without a word.)
      else if (/^STOKER_(DEVICES|KINDS)_/.test(name)) issues.push({ source: name, path: '', message: `unknown setting — [devices.NAME] and [kinds.NAME] tables are set in the config file (a kind also by --kind), not by variables: unset it` });
      continue;
    }
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
  return { name: ENV_SOURCE, layer, base: cwd };
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
  return { name: 'the command line', layer, base: cwd, kindFiles: flags.kinds ?? [] };
}

// ─── Loading ──────────────────────────────────────────────────────────────────────────────────

/** `"unlimited"` / `"none"` → Infinity. */
const finiteOr = (v: number | string): number => (typeof v === 'number' ? v : Infinity);

/**
 * Loads the daemon's configuration: the defaults, then `file`, then `values`, then `env`, then `flags`, each
 * later source overriding field by field (a table such as `engine.pacerOptions` is replaced
 * whole). Throws a {@link ConfigError} listing every problem of every source.
 */
const LOAD_OPTIONS = ['file', 'values', 'env', 'flags', 'cwd'] as const satisfies readonly (keyof LoadConfigOptions)[];
const FLAG_OPTIONS = ['host', 'port', 'dataDir', 'cluster', 'kinds', 'token'] as const satisfies readonly (keyof NonNullable<LoadConfigOptions['flags']>)[];

/** loadConfig's own options, checked: a misspelt one (`value:`, `flags: { data }`) was read by nothing, silently — a misspelt `env` fell back to process.env. */
function checkLoadOptions(opts: LoadConfigOptions): void {
  const issues: ConfigIssue[] = [];
  for (const [obj, known, at] of [
    [opts, LOAD_OPTIONS, ''],
    [opts.flags ?? {}, FLAG_OPTIONS, 'flags.'],
  ] as const) {
    for (const key of Object.keys(obj)) {
      if ((known as readonly string[]).includes(key)) continue;
      const near = suggest(key, known);
      issues.push({ source: 'loadConfig(options)', path: `${at}${key}`, message: `not an option of loadConfig${near ? ` — did you mean ${at}${near}?` : ''}: ${at === '' ? 'its options' : 'the flags'} are ${known.join(', ')}` });
    }
  }
  if (issues.length > 0) throw new ConfigError(issues);
}

export function loadConfig(opts: LoadConfigOptions = {}): ServeConfig {
  checkLoadOptions(opts);
  const cwd = opts.cwd ?? process.cwd();
  const issues: ConfigIssue[] = [];
  const sources: Source[] = [];
  if (opts.file !== undefined) {
    const s = readFileLayer(opts.file, cwd, issues);
    if (s) sources.push(s);
  }
  if (opts.values !== undefined) {
    const r = FileSchema.safeParse(opts.values);
    if (r.success) sources.push({ name: 'loadConfig({ values })', layer: r.data, base: cwd });
    else issues.push(...zodIssues('loadConfig({ values })', r.error));
  }
  sources.push(envLayer(opts.env ?? process.env, cwd, issues));
  if (opts.flags) sources.push(flagLayer(opts.flags, cwd, issues));
  if (issues.length > 0) throw new ConfigError(issues);

  const c = defaults(cwd);
  for (const { name: from, layer, base, kindFiles } of sources) {
    if (layer.dataDir !== undefined) c.dataDir = path.resolve(base, layer.dataDir);
    // [kinds.NAME] of a later source replaces the same NAME of an earlier one; --kind files add.
    const named = Object.entries(layer.kinds ?? {}).map(([name, k]) => ({ name, module: modulePath(base, k.module), ...(k.device === undefined ? {} : { device: k.device }), ...(k.prepareBatch ? { prepareBatch: { ...subDefaults.batch(), ...defined(k.prepareBatch) } as DeviceBatchConfig } : {}) }));
    const kinds = [...(c.kinds ?? []).filter((k) => !named.some((n) => n.name === k.name)), ...named, ...(kindFiles ?? []).map((f) => ({ module: modulePath(base, f) }))];
    if (kinds.length > 0) c.kinds = kinds;
    const { budgetBytes, deviceTimeoutS, prepareTimeoutS, ...engine } = layer.engine ?? {};
    Object.assign(c.server, defined(layer.server));
    for (const f of ['tlsCert', 'tlsKey'] as const) {
      const v = layer.server?.[f];
      if (v) c.server[f] = path.resolve(base, v);
    }
    Object.assign(c.engine, defined(engine));
    if (budgetBytes !== undefined) c.engine.budgetBytes = finiteOr(budgetBytes);
    if (deviceTimeoutS !== undefined) c.engine.deviceTimeoutS = finiteOr(deviceTimeoutS);
    if (prepareTimeoutS !== undefined) c.engine.prepareTimeoutS = finiteOr(prepareTimeoutS);
    if (layer.journal?.maxBytes !== undefined) c.journal = { maxBytes: layer.journal.maxBytes };
    mergeDevice(c.device, layer.device, base);
    for (const [name, d] of Object.entries(layer.devices ?? {})) {
      if (name === 'default') throw new ConfigError([{ source: from, path: 'devices.default', message: '"default" is [device]: give this one another name, or set it under [device]' }]);
      // A [devices.NAME] of a later source replaces the earlier one whole.
      const device: DeviceConfig = defaults(base).device;
      mergeDevice(device, d, base);
      c.devices = { ...(c.devices ?? {}), [name]: device };
    }
    Object.assign(c.prepare, defined(layer.prepare));
    Object.assign(c.cluster, defined(layer.cluster));
  }
  c.engine.pacerOptions = { ...c.engine.pacerOptions };
  checkPacerOptions(c.engine, (at) => originOf(sources, at));
  const { tlsCert, tlsKey } = c.server;
  if ((tlsCert === '') !== (tlsKey === '')) {
    throw new ConfigError([{ source: originOf(sources, tlsCert === '' ? 'server.tlsKey' : 'server.tlsCert'), path: tlsCert === '' ? 'server.tlsCert' : 'server.tlsKey', message: `server.${tlsCert === '' ? 'tlsKey' : 'tlsCert'} is set without server.${tlsCert === '' ? 'tlsCert' : 'tlsKey'} — HTTPS needs both the certificate chain and its private key (PEM files)` }]);
  }
  for (const [field, file] of [['tlsCert', tlsCert], ['tlsKey', tlsKey]] as const) {
    if (file !== '' && !fs.existsSync(file)) throw new ConfigError([{ source: originOf(sources, `server.${field}`), path: `server.${field}`, message: `${file} does not exist — give a PEM file (relative in a file: to the file's folder)` }]);
  }
  for (const [name, d] of [['device', c.device], ...Object.entries(c.devices ?? {}).map(([n, dv]) => [`devices.${n}`, dv])] as [string, DeviceConfig][]) {
    const deviceCwd = d.process?.cwd;
    if (deviceCwd !== undefined && !fs.existsSync(deviceCwd)) {
      throw new ConfigError([{ source: originOf(sources, `${name}.process.cwd`), path: `${name}.process.cwd`, message: `${deviceCwd} does not exist — give the folder the device's program runs in (relative in a file: to the file's folder)` }]);
    }
    if (d.process && d.http) {
      throw new ConfigError([{ source: originOf(sources, `${name}.http`), path: name, message: `both [${name}.process] and [${name}.http] are set — a device is one or the other: keep one of them` }]);
    }
    // (Read by nothing there: a process or an endpoint runs its own device — it was ignored without a word.)
    if ((d.process || d.http) && d.kind === 'webgpu') {
      throw new ConfigError([{ source: originOf(sources, `${name}.kind`), path: `${name}.kind`, message: `kind = "webgpu" is for a device whose steps run on stoker's threads, but [${name}.${d.process ? 'process' : 'http'}] makes this one ${d.process ? 'a process' : 'an HTTP endpoint'}, which runs its own: remove kind (or the [${name}.${d.process ? 'process' : 'http'}] table)` }]);
    }
    requireDeviceKeys(d, name, (at) => originOf(sources, at));
  }
  return c;
}

/** A device table set only in part by an environment variable (STOKER_DEVICE_HTTP='{"timeoutS":5}') and by no earlier source has no url, command or maxItems. */
function requireDeviceKeys(d: DeviceConfig, name: string, origin: (at: string) => string): void {
  const missing = (at: string, what: string, example: string) => {
    const table = at.slice(0, at.lastIndexOf('.'));
    return new ConfigError([{ source: origin(table), path: at, message: `expected ${what}, got nothing — give it in the same variable (${example}) or in the config file's [${table}]` }]);
  };
  if (d.http && d.http.url === undefined) throw missing(`${name}.http.url`, 'an http:// or https:// URL', '"url":"http://127.0.0.1:8000/embed"');
  if (d.process && d.process.command === undefined) throw missing(`${name}.process.command`, 'a program', '"command":"python3"');
  if (d.batch && d.batch.maxItems === undefined) throw missing(`${name}.batch.maxItems`, 'an integer ≥ 1', '"maxItems":16');
}

/**
 * `[engine.pacerOptions]` against the pacer they are for: a value it refuses, or a name it does
 * not read (a misspelt option changed nothing, silently), is a config error naming the option.
 */
function checkPacerOptions(engine: EngineConfig, origin: (at: string) => string): void {
  // (The server gives every pacer engine.targetWaiting: one in pacerOptions was overridden by it, silently.)
  if (Object.hasOwn(engine.pacerOptions, 'targetWaiting')) {
    throw new ConfigError([{ source: origin('engine.pacerOptions.targetWaiting'), path: 'engine.pacerOptions.targetWaiting', message: `the server sets every pacer's targetWaiting from engine.targetWaiting (now ${engine.targetWaiting}): set engine.targetWaiting = ${JSON.stringify(engine.pacerOptions['targetWaiting'])} instead, and remove it here` }]);
  }
  let unknown: ReturnType<typeof unknownPacerOptions>;
  try {
    unknown = unknownPacerOptions(engine.pacer, engine.pacerOptions, true);
  } catch (e) {
    throw new ConfigError([{ source: origin('engine.pacerOptions'), path: 'engine.pacerOptions', message: e instanceof Error ? e.message : String(e) }]);
  }
  if (unknown.length > 0) throw new ConfigError(unknown.map(({ option, message }) => ({ source: origin(`engine.pacerOptions.${option}`), path: `engine.pacerOptions.${option}`, message })));
}

/** Merges one source's device table (`[device]` or a `[devices.NAME]`) into `d`, with the defaults of its process or http table. */
function mergeDevice(d: DeviceConfig, layer: NonNullable<Layer['device']> | undefined, base: string): void {
  // A later source's [device.http], [device.batch] or [device.process] sets its fields over the
  // earlier one's (an environment variable giving the url dropped the file's headers and timeout).
  const earlier = { http: d.http, batch: d.batch, process: d.process };
  Object.assign(d, defined(layer));
  const http = layer?.http;
  if (http) {
    const { timeoutS, ...rest } = http;
    d.http = { ...(earlier.http ?? subDefaults.http()), ...defined(rest), ...(timeoutS === undefined ? {} : { timeoutS: finiteOr(timeoutS) }) } as HttpDeviceConfig;
  }
  if (layer?.batch) d.batch = { ...(earlier.batch ?? subDefaults.batch()), ...defined(layer.batch) } as DeviceBatchConfig;
  const proc = layer?.process;
  if (proc) {
    const { cwd: dir, handoffDir, ...rest } = proc;
    d.process = {
      ...(earlier.process ?? subDefaults.process()),
      ...defined(rest),
      // (Its working directory where none is given: the folder of the file that names it, as a kind
      // module's path is read there — `args = ["prover.py"]` beside the config failed where the
      // server was started from another folder.)
      ...(dir !== undefined ? { cwd: path.resolve(base, dir) } : earlier.process?.cwd === undefined ? { cwd: base } : {}),
      ...(handoffDir === undefined ? {} : { handoffDir: path.resolve(base, handoffDir) }),
    } as ProcessDeviceConfig;
  }
  // A later source that makes the device an HTTP one (or a process one) replaces what an earlier
  // source made it: STOKER_DEVICE_PROCESS over a file's [device.http] left both, and the error blamed the file.
  if (http && !proc && earlier.process) delete d.process;
  if (proc && !http && earlier.http) delete d.http;
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


/** A URL with credentials in it as `config print` writes it: they read *** and `at` is added to `hidden`. */
function urlToml(url: string, at: string, hidden: string[]): string {
  const shown = redactUrl(url);
  if (shown !== url) hidden.push(`${at} (its *** parts)`);
  return shown;
}

/** A process's arguments as `config print` writes them: a credential flag's value reads *** and `at` is added to `hidden`. */
function argsToml(args: readonly string[], at: string, hidden: string[]): string[] {
  const shown = redactArgs(args);
  if (shown.some((a, i) => a !== args[i])) hidden.push(`${at} (its *** parts)`);
  return shown;
}

/** A device table as TOML writes it back (Infinity as "none"; credential headers blank, their names added to `hidden`). */
function deviceToml(d: DeviceConfig, name: string, hidden: string[]): object {
  const blank = (table: Readonly<Record<string, string>>, at: string) => Object.fromEntries(Object.entries(table).map(([k, v]) => (SECRET_NAME.test(k) ? (hidden.push(`${at}.${k}`), [k, '']) : [k, v])));
  // (An empty table is left out, its default: a header with nothing under it reads badly.)
  const table = (key: string, t: Readonly<Record<string, string>>, at: string) => (Object.keys(t).length > 0 ? { [key]: blank(t, at) } : {});
  return {
    ...d,
    ...(d.process ? { process: (({ env, ...p }) => ({ ...p, args: argsToml(p.args, `${name}.process.args`, hidden), ...table('env', env, `${name}.process.env`) }))(d.process) } : {}),
    ...(d.http ? { http: (({ headers, ...h }) => ({ ...h, url: urlToml(h.url, `${name}.http.url`, hidden), ...table('headers', headers, `${name}.http.headers`), timeoutS: Number.isFinite(h.timeoutS) ? h.timeoutS : 'none' }))(d.http) } : {}),
    ...(d.batch ? { batch: { ...d.batch } } : {}),
  };
}

/**
 * The effective configuration as TOML (`stoker config print`): every field, `Infinity` printed
 * back as `"unlimited"` / `"none"`. Loading the output gives the same configuration. Kinds from
 * `--kind` need their names (`names[i]` for `c.kinds[i]`, the module's own `name`).
 */
export function configToToml(c: ServeConfig, names: readonly string[] = (c.kinds ?? []).map((k) => k.name ?? '')): string {
  const { budgetBytes, deviceTimeoutS, prepareTimeoutS, pacerOptions, ...engine } = c.engine;
  const hidden: string[] = [];
  const doc = {
    dataDir: c.dataDir,
    // The token is a secret: it is never printed (set it again from its file or variable).
    server: { ...c.server, token: '' },
    engine: {
      ...engine,
      budgetBytes: Number.isFinite(budgetBytes) ? budgetBytes : 'unlimited',
      deviceTimeoutS: Number.isFinite(deviceTimeoutS) ? deviceTimeoutS : 'none',
      prepareTimeoutS: Number.isFinite(prepareTimeoutS) ? prepareTimeoutS : 'none',
      // An empty table is left out (its default); a header with nothing under it reads badly.
      ...(Object.keys(pacerOptions).length > 0 ? { pacerOptions: { ...pacerOptions } } : {}),
    },
    device: deviceToml(c.device, 'device', hidden),
    prepare: { ...c.prepare },
    // A node name left to its default is this process's (`<host>-<pid>`): printed, every node
    // started from the file would share the printing process's name.
    cluster: { ...(c.cluster.nodeId === defaultNodeId() ? (({ nodeId: _, ...rest }) => rest)(c.cluster) : c.cluster), redis: urlToml(c.cluster.redis, 'cluster.redis', hidden) },
    ...(c.journal ? { journal: { ...c.journal } } : {}),
    ...(c.devices ? { devices: Object.fromEntries(Object.entries(c.devices).map(([n, d]) => [n, deviceToml(d, `devices.${n}`, hidden)])) } : {}),
    ...(c.kinds?.length ? { kinds: Object.fromEntries(c.kinds.map((k, i) => [names[i] ?? k.name ?? '', { module: k.module, ...(k.device === undefined ? {} : { device: k.device }), ...(k.prepareBatch ? { prepareBatch: { ...k.prepareBatch } } : {}) }])) } : {}),
  };
  const secret =
    (c.server.token ? '# server.token is set and not printed: give it again (STOKER_SERVER_TOKEN or --token-file)\n' : '') +
    (hidden.length > 0 ? `# credentials not printed (blank below, *** in a URL): ${hidden.join(', ')} — give them again\n` : '');
  return `# stoker serve: the effective configuration (defaults < file < environment < flags)\n${secret}${stringify(doc).trim()}\n`;
}

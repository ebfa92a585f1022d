/**
 * Job kinds from ES modules: what a kind module exports, and how the server loads and checks one
 * at start. A kind module is imported three times: by the server (its `input` schema, `memory`,
 * `partitions` and `finish` run there), by the preparation threads (`prepare`) and by the device
 * threads (`run`). Its `prepare` and `run` therefore must not rely on state shared with the
 * server's copy of the module.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import ajvFormats from 'ajv-formats';
import { MAX_PARTITIONS, type PartitionMemory } from '../core/index.js';
import { sizeClass } from '../runtime/buffer-pool.js';
import { kindExports } from '../runtime/threads/protocol.js';
import { importSettled, syntaxErrorAt } from '../runtime/module-syntax.js';
import { editDistance } from '../core/suggest.js';
import { quoted } from './errors.js';

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** What `prepare` gets besides the job's input. */
export interface PrepareContext {
  /** The job's id. */
  job: string;
  /** This partition, 0-based (the job's own numbering, also after a restart). */
  partition: number;
  /** The job's partition count. */
  partitions: number;
  /** Fires when the partition is withdrawn (cancelled, its job failed, or a shutdown once server.shutdownTimeoutS has run out): stop early. */
  signal: AbortSignal;
  /** The partition's pooled shared buffer, when the kind exports `buffer(input)`: write prepared data here, the device step reads it without a copy. */
  buffer?: SharedArrayBuffer;
}

/** What the device step gets besides the prepared value (`Input`: the job's input, as `KindModule<Input>` names it). */
export interface RunContext<Input = unknown> {
  job: string;
  partition: number;
  partitions: number;
  /** The job's input (validated, defaults filled in). */
  input: Input;
  /** Which device runs the step, by index (0: `[device]`, then the `[devices.NAME]` in order), and which of its workers. */
  device: number;
  worker: number;
  /** The device's kind from the config (`[device] kind`): `"cpu"` or `"webgpu"`. */
  deviceKind: string;
  /** The partition's pooled shared buffer, as `prepare` left it. */
  buffer?: SharedArrayBuffer;
}

/**
 * A kind module's exports (named exports, or the same as the default export's properties).
 * Outputs and results are JSON values or bytes (a Uint8Array, Buffer or ArrayBuffer as the whole
 * value; bytes nested inside JSON are refused).
 */
export interface KindModule<Input = unknown, Prepared = unknown, Output = unknown, Result = unknown> {
  /** The kind's name in `POST /v1/jobs {kind}`: letters, digits, `.`, `_`, `-`, at most 64. */
  name: string;
  /** One line for `GET /v1/kinds`. */
  description?: string;
  /** A JSON Schema (2020-12) of the job's input, checked at submit (errors name the field); `default`s are filled in. Absent: any JSON input. */
  input?: object;
  /** Bytes a partition holds while preparing and once on the device. @default `{ prepareBytes: buffer(input), deviceBytes: buffer(input) }`, or 0 and 0 without `buffer` */
  memory?(input: Input): PartitionMemory;
  /** Bytes of pooled shared buffer each partition gets as `ctx.buffer` (0: none). */
  buffer?(input: Input): number;
  /** The job's partition count from its input (then `partitions` may be left out of a submission). */
  partitions?(input: Input): number;
  /** Prepares one partition in a preparation thread (CPU work belongs here, never on the event loop); its value goes to `run`. */
  prepare?(input: Input, ctx: PrepareContext): Prepared | Promise<Prepared>;
  /**
   * Prepares several partitions of this kind together, in one preparation thread, when the config
   * gives the kind `[kinds.NAME.prepareBatch]` (the only step such a kind's preparation calls): one
   * input and one ctx (each with its own buffer) per item; returns one prepared value per item, in
   * order (an `Error` in an item's place fails that item alone; a throw fails the batch, whose items
   * are then prepared again alone, as batches of one). `ctx.signal` fires once every item of the
   * batch is withdrawn.
   */
  prepareBatch?(inputs: Input[], ctx: PrepareContext[]): (Prepared | Error)[] | Promise<(Prepared | Error)[]>;
  /**
   * The device step, in a device worker thread (thread devices only: on a process device the
   * device's program does it); its value is the partition's output. The thread
   * times the call: that time is the worker's busy time (the item occupies the worker until the
   * call returns), so return only once the device is free for the next item.
   */
  run?(prepared: Prepared, ctx: RunContext<Input>): Output | Promise<Output>;
  /**
   * The device step of a batch, on a thread device that batches (`[device.batch]`): several
   * prepared partitions of this kind at once, one ctx each; returns one output per item, in order
   * (an `Error` in an item's place fails that item alone; a throw fails the batch, whose items then
   * run again alone). Timed like `run`, once for the batch. A batching device calls only this.
   */
  runBatch?(prepared: Prepared[], ctx: RunContext<Input>[]): (Output | Error)[] | Promise<(Output | Error)[]>;
  /** The device that runs the step, by name: `"default"` (the server's `[device]`, also when absent) or a `[devices.NAME]`; the config's `[kinds.NAME] device` overrides it. */
  device?: string;
  /**
   * The job's result from the outputs in partition order (in the server's thread).
   * @default the outputs as a JSON array; bytes outputs concatenated into one bytes result
   */
  finish?(outputs: Output[], input: Input, ctx: { job: string }): Result | Promise<Result>;
}

/** A kind module that does not fit; `module` and `export` name what to fix. Exit code 2 at start. */
export class KindModuleError extends Error {
  override readonly name = 'KindModuleError';
  readonly code = 'E_KIND_MODULE';
  constructor(
    readonly module: string,
    readonly exportName: string | undefined,
    readonly problem: string,
  ) {
    super(`kind module ${module}${exportName ? `: export ${exportName}` : ''}: ${problem}`);
  }
}

/** One field's problem with a job input. */
export interface InputIssue {
  path: string;
  message: string;
}

/** A loaded, checked kind. */
export interface LoadedKind {
  readonly name: string;
  readonly description: string;
  /** The module's file: URL (what the threads import). */
  readonly url: string;
  /** The input's JSON Schema, or null (any input). */
  readonly schema: object | null;
  /** Checks the input and fills in its defaults: the normalized input, or the problems (paths under `input`). */
  validate(input: unknown): { ok: true; input: unknown } | { ok: false; issues: InputIssue[] };
  memory(input: unknown): PartitionMemory;
  bufferBytes(input: unknown): number;
  /** The partition count the input implies, or undefined when the kind has no `partitions` export. */
  partitions(input: unknown): number | undefined;
  /** Whether the kind exports `partitions(input)`. */
  readonly derivesPartitions: boolean;
  /** The device that runs its steps, by name ("default": the server's [device]). */
  readonly device: string;
  /** Which steps the module exports: `prepare`, and `prepareBatch` for a kind prepared in batches; (thread devices) `run`, and `runBatch` for a batching device. */
  readonly steps: { prepare: boolean; prepareBatch: boolean; run: boolean; runBatch: boolean };
  /** Its preparation batches as the config gives them (`[kinds.NAME.prepareBatch]`), or null: one partition per step. */
  readonly prepareBatch: { maxItems: number; maxWaitMs: number } | null;
  finish(outputs: unknown[], input: unknown, job: string): Promise<unknown>;
  /** What loading found that a submission will meet (said at start): it does not stop the kind. */
  readonly notes?: readonly string[];
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
/** Where a server's device steps run: the kinds' `run` on threads, a program in a process per worker, or an HTTP endpoint. */
export type DeviceType = 'thread' | 'process' | 'http';

/** A server's devices by name, and where each runs its steps: what a kind's `device` may name. */
export type DeviceTypes = ReadonlyMap<string, DeviceType>;

/** One thread device, "default": a server with only `[device]` and no `[device.process]`/`[device.http]`. */
export const THREAD_DEVICE: DeviceTypes = new Map([['default', 'thread']]);
const FUNCTIONS = ['memory', 'buffer', 'partitions', 'prepare', 'prepareBatch', 'run', 'runBatch', 'finish'] as const;
/** Every export a kind module may give (KindModule's fields). */
const EXPORTS = ['name', 'description', 'input', 'device', ...FUNCTIONS] as const;

/**
 * The export `key` is a misspelling of, if any: one the module lacks, one edit away (or the same
 * but for case, `_` and `-`, or a plural), of its type — a function where a function belongs, an
 * object for `input`, a string for the rest; names under 4 letters are taken for helpers (`fn`,
 * `buf`, `memo` are not `run`, `buffer`, `memory`).
 */
function misspelt(key: string, m: Record<string, unknown>): string | undefined {
  if (key.length < 4 || (EXPORTS as readonly string[]).includes(key)) return undefined;
  const norm = (x: string) => x.toLowerCase().replace(/[_-]/g, '');
  const near = EXPORTS.find((e) => m[e] === undefined && (editDistance(key, e) <= 1 || norm(key) === norm(e) || key === `${e}s`));
  if (near === undefined) return undefined;
  const want = (FUNCTIONS as readonly string[]).includes(near) ? 'function' : near === 'input' ? 'object' : 'string';
  return typeof m[key] === want ? near : undefined;
}

/**
 * Why a module does not load, with what to do for the usual mistakes (CommonJS in an `.mjs`,
 * TypeScript, a directory), and where in the module an error thrown as it loaded was thrown
 * (Node's message names neither).
 */
function loadProblem(e: unknown, url: string): string {
  const err = e as NodeJS.ErrnoException;
  const message = err instanceof Error ? err.message : String(e);
  if (err.code === 'ERR_UNSUPPORTED_DIR_IMPORT') return 'it is a directory: give the module file itself (e.g. its index.mjs)';
  if (err.code === 'ERR_UNKNOWN_FILE_EXTENSION') return `${message}: compile it to JavaScript first (tsc, esbuild) and give the .js or .mjs file`;
  if (/\b(module|exports|require) is not defined in ES module scope/.test(message)) return `${message}: it is written as CommonJS — name it .cjs (stoker loads CommonJS too), or write it as an ES module (export const name = …; export async function prepare …)`;
  let file: string;
  try {
    file = url.startsWith('file:') ? fileURLToPath(url) : url;
  } catch {
    return message;
  }
  // A stack frame in the module itself: "at file:///…/k.mjs:3:17", or "at f (/…/k.mjs:3:17)".
  for (const line of (err.stack ?? '').split('\n')) {
    const m = /((?:file:\/\/)?\/[^\s()]+):(\d+):(\d+)\)?$/.exec(line.trim());
    if (!m) continue;
    const at = (m[1] as string).startsWith('file:') ? fileURLToPath(m[1] as string) : (m[1] as string);
    if (at === file) return `${message} (thrown at ${file}:${m[2]}:${m[3]})`;
  }
  return message;
}

/** What ajv says while it compiles a schema (a format it does not know, which it then does not check): said at start, in the kind's warnings, not printed bare. */
const ajvSaid: string[] = [];
const ajv = new Ajv2020({ allErrors: true, useDefaults: true, strict: false, verbose: true, logger: { log: () => undefined, warn: (...a: unknown[]) => void ajvSaid.push(a.map(String).join(' ')), error: (...a: unknown[]) => void ajvSaid.push(a.map(String).join(' ')) } });
// `format` is checked (email, date-time, uri, uuid, ipv4…): a schema's "format": "email" accepted any string.
// (A CommonJS module: its plugin is module.exports, typed as the default export's `default`, which it also is.)
ajvFormats.default(ajv);

/**
 * Imports and checks a kind module for a server with these devices; `device` (from the config's
 * `[kinds.NAME] device`) overrides the module's own `device` export. Throws a
 * {@link KindModuleError} naming the module and the export.
 */
export async function loadKind(url: string, shown: string = url, devices: DeviceTypes = THREAD_DEVICE, device?: string): Promise<LoadedKind> {
  let mod: Record<string, unknown>;
  try {
    mod = await importSettled(url);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const at = e instanceof SyntaxError ? syntaxErrorAt(url) : '';
    // Not found is the module itself only when Node names it as the missing one ("Cannot find module
    // '/path/k.mjs'"): a package or file it imports that is missing is named as Node says.
    const missing = code === 'ERR_MODULE_NOT_FOUND' && url.startsWith('file:') && (e as Error).message.includes(`'${fileURLToPath(url)}'`);
    const why = missing ? 'file not found: check the path' : `it does not load: ${loadProblem(e, url)}${at ? `, at\n${at}` : ''}`;
    throw new KindModuleError(shown, undefined, why);
  }
  const m = kindExports(mod);
  const fail = (exp: string, what: string) => new KindModuleError(shown, exp, what);
  // (Both styles in one module: the named exports are the kind, and the default object was ignored
  // without a word. Not CommonJS's `exports.name = …`: Node shows its exports object as the default
  // too, holding the very same values.)
  const dflt = mod['default'];
  const defaultIgnored = m === mod && dflt !== null && typeof dflt === 'object' && ['name', 'prepare', 'run'].some((k) => (dflt as Record<string, unknown>)[k] !== undefined && (dflt as Record<string, unknown>)[k] !== mod[k]);
  if (typeof mod['default'] === 'function' && m === mod && m['name'] === undefined) {
    throw fail('default', 'is a function: export the kind as named exports (export const name = "my-kind"; export async function prepare(input, ctx) …) or as one default object ({ name, prepare, run, … })');
  }
  // A misspelt export is read by nothing: it would change nothing, silently (no finish, no schema).
  for (const key of Object.keys(m)) {
    const near = misspelt(key, m);
    if (near !== undefined) throw fail(key, `is not an export stoker reads — did you mean ${near}? (the exports a kind may give: ${EXPORTS.join(', ')})`);
  }
  const name = m['name'];
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw fail('name', `${name === undefined ? 'missing' : `got ${JSON.stringify(name) ?? String(name)}`}: export const name = "my-kind" (letters, digits, . _ -, at most 64), the kind in POST /v1/jobs`);
  }
  for (const f of FUNCTIONS) {
    if (m[f] !== undefined && typeof m[f] !== 'function') throw fail(f, `must be a function (got ${typeof m[f]})`);
  }
  if (typeof m['prepare'] !== 'function' && typeof m['prepareBatch'] !== 'function') throw fail('prepare', 'missing: export async function prepare(input, ctx) — it prepares one partition in a preparation thread (or prepareBatch(inputs[], ctx[]) for a kind prepared in batches)');
  const named = device ?? m['device'] ?? 'default';
  const deviceType = typeof named === 'string' ? devices.get(named) : undefined;
  if (deviceType === undefined) {
    const names = [...devices.keys()].map((d) => JSON.stringify(d)).join(', ');
    throw fail('device', `${JSON.stringify(named) ?? String(named)} names no device: this server has ${names} ([device] is "default", [devices.NAME] the others)${device === undefined ? '' : ` — fix [kinds.${String(name)}] device in the config`}`);
  }
  if (deviceType === 'thread' && typeof m['run'] !== 'function' && typeof m['runBatch'] !== 'function') {
    // (A process or HTTP device of the config it may have been meant for: named.)
    const served = [...devices].filter(([, t]) => t !== 'thread').map(([d]) => d);
    const onServed = served.length === 0 ? '' : ` — or run it on ${served.map((d) => JSON.stringify(d)).join(' or ')}, this server's ${served.length === 1 ? 'device' : 'devices'} served by a process or HTTP: [kinds.${String(name)}] device = ${JSON.stringify(served[0])} in the config (or export const device = ${JSON.stringify(served[0])})`;
    throw fail('run', `missing: export async function run(prepared, ctx) — the device step, run on a device worker thread (or runBatch(prepared[], ctx[]) on a device that batches); or, where a process or an HTTP endpoint does the step, its device ${JSON.stringify(named)} needs [${named === 'default' ? 'device' : `devices.${String(named)}`}.process] or [${named === 'default' ? 'device' : `devices.${String(named)}`}.http] in the config${onServed}`);
  }
  if (deviceType === 'http' && m['buffer'] !== undefined) {
    throw fail('buffer', 'an HTTP device is sent only the value prepare returns, not a pooled buffer: return the bytes (or JSON) from prepare instead');
  }
  for (const step of ['run', 'runBatch']) {
    if (deviceType !== 'thread' && m[step] !== undefined) {
      const what = deviceType === 'process' ? 'a process device: its command does' : 'an HTTP device: its endpoint does';
      throw fail(step, `its device ${JSON.stringify(named)} is ${what} the device step, so a kind has no ${step} — remove ${step}, or serve it on a thread device`);
    }
  }
  const description = m['description'];
  if (description !== undefined && typeof description !== 'string') throw fail('description', `must be a string (got ${typeof description})`);
  const input = inputValidator(m['input'], fail);
  const kind: LoadedKind = {
    name,
    description: description ?? `kind from ${shown}`,
    url,
    schema: (m['input'] as object | undefined) ?? null,
    validate: input.validate,
    memory: memoryOf(m, fail),
    bufferBytes: bufferOf(m, fail),
    partitions: partitionsOf(m, fail),
    device: named as string,
    steps: { prepare: typeof m['prepare'] === 'function', prepareBatch: typeof m['prepareBatch'] === 'function', run: typeof m['run'] === 'function', runBatch: typeof m['runBatch'] === 'function' },
    derivesPartitions: typeof m['partitions'] === 'function',
    prepareBatch: null,
    finish: finishOf(m),
  };
  const schemaNotes = kind.schema === null ? [] : schemaProblems(kind.schema as Record<string, unknown>, 'input');
  const notes = [
    ...(defaultIgnored ? [`warning: kind module ${shown}: it exports both named exports and a default object: the named exports are the kind (${JSON.stringify(name)}), the default object is not read — keep one of the two`] : []),
    ...schemaNotes.map((n) => `warning: kind module ${shown}: export input: ${n}`),
    ...input.said.map((n) => `warning: kind module ${shown}: export input: ${formatNote(n)}`),
    ...defaultInputNotes(kind, shown),
  ];
  return notes.length > 0 ? { ...kind, notes } : kind;
}

/**
 * memory(), partitions() and buffer() on a kind's default input (`{}` with its schema's defaults), where its
 * schema takes that input: what they return that no input may make them return (a string, a
 * fraction), to say at start — found at the first submit, it was a 500 on every one and nothing
 * in the server's log. (Said, not refused: a kind may never be sent its default input.)
 */
function defaultInputNotes(kind: LoadedKind, shown: string): string[] {
  // (Without a schema, `{}` is no input the kind declares: a memory(i) that reads i.n is not wrong.)
  if (kind.schema === null) return [];
  const input = kind.validate({});
  if (!input.ok) return [];
  // (A set: memory() left out asks buffer(), and said its problem again.)
  const notes = new Set<string>();
  for (const f of [kind.memory, kind.partitions, kind.bufferBytes]) {
    try {
      f(input.input);
    } catch (e) {
      if (e instanceof KindModuleError) notes.add(`warning: kind module ${shown}: export ${e.exportName ?? ''} ${e.problem}, on the default input ${JSON.stringify(input.input)}: a submission of it gets a 500 — fix the module`);
    }
  }
  return [...notes];
}

type Fail = (exp: string, what: string) => KindModuleError;

/** A validator for inputs from a JSON Schema (what a kind's `input` export becomes); throws when the schema is invalid. */
export function compileInput(schema: object): LoadedKind['validate'] {
  return compileSaying(schema).validate;
}

/** compileInput, and what ajv said while it compiled (a format it does not know: it checks nothing). */
function compileSaying(schema: object): { validate: LoadedKind['validate']; said: string[] } {
  ajvSaid.length = 0;
  try {
    // (ajv says a format it does not know once per place it is used.)
    return { validate: validatorOf(ajv.compile(schema)), said: [...new Set(ajvSaid)] };
  } finally {
    ajvSaid.length = 0;
  }
}

function validatorOf(check: ValidateFunction): LoadedKind['validate'] {
  return (input) => {
    const copy = structuredClone(input);
    if (check(copy)) return { ok: true, input: copy };
    return { ok: false, issues: (check.errors ?? []).map(describeIssue) };
  };
}

/** The content hash of a kind's module file (sha256 hex): nodes of a cluster must run the same one. */
export function moduleHash(url: string): string {
  return createHash('sha256').update(readFileSync(fileURLToPath(url))).digest('hex');
}

/** A kind's input validator, and what ajv said of its schema. */
function inputValidator(schema: unknown, fail: Fail): { validate: LoadedKind['validate']; said: string[] } {
  if (schema === undefined) return { validate: (input) => ({ ok: true, input }), said: [] };
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) throw fail('input', 'must be a JSON Schema object, e.g. { type: "object", properties: { … } }');
  try {
    return compileSaying(schema);
  } catch (e) {
    throw fail('input', `is not a valid JSON Schema: ${(e as Error).message}`);
  }
}

/** JSON Schema's keywords (2020-12, and those of earlier drafts and OpenAPI a schema may carry). */
const KEYWORDS = new Set(['type', 'properties', 'patternProperties', 'additionalProperties', 'required', 'items', 'prefixItems', 'additionalItems', 'contains', 'minContains', 'maxContains', 'minItems', 'maxItems', 'uniqueItems', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf', 'minLength', 'maxLength', 'pattern', 'format', 'enum', 'const', 'default', 'description', 'title', 'examples', 'allOf', 'anyOf', 'oneOf', 'not', 'if', 'then', 'else', '$ref', '$defs', 'definitions', '$id', '$schema', '$comment', '$anchor', '$dynamicRef', '$dynamicAnchor', '$vocabulary', 'dependentRequired', 'dependentSchemas', 'dependencies', 'propertyNames', 'minProperties', 'maxProperties', 'unevaluatedProperties', 'unevaluatedItems', 'readOnly', 'writeOnly', 'deprecated', 'contentEncoding', 'contentMediaType', 'contentSchema', 'nullable', 'discriminator', 'example']);
const SCHEMA_MAPS = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];
const SCHEMA_ONE = ['items', 'additionalItems', 'additionalProperties', 'contains', 'not', 'if', 'then', 'else', 'propertyNames', 'unevaluatedProperties', 'unevaluatedItems', 'contentSchema'];
const SCHEMA_LISTS = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];

/**
 * What a kind's input schema gets wrong that ajv takes without a word, to say at start: each
 * keyword one or two edits from JSON Schema's (`propertis`: an unknown keyword is an annotation,
 * so nothing was checked — any input was accepted), and each default its own schema refuses (a
 * submission that left the field out got a 400 naming the field it never sent). Each found is
 * said (a trial's schema with four misspelt keywords heard of the first only).
 */
function schemaProblems(schema: Record<string, unknown>, at: string, found: string[] = []): string[] {
  for (const key of Object.keys(schema)) {
    if (KEYWORDS.has(key)) continue;
    const near = [...KEYWORDS].find((k) => k.toLowerCase() === key.toLowerCase() || editDistance(k, key) <= (k.length > 6 ? 2 : 1));
    if (near !== undefined) found.push(`${at}: unknown keyword ${JSON.stringify(key)} — did you mean ${JSON.stringify(near)}? (JSON Schema takes an unknown keyword as a note: it checks nothing)`);
  }
  if ('default' in schema) {
    const { default: value, ...rest } = schema;
    let check: ValidateFunction | undefined;
    try {
      check = ajv.compile(rest);
    } catch {
      check = undefined; // (a $ref to the root's $defs: not checked here)
    } finally {
      ajvSaid.length = 0; // (said once, of the whole schema)
    }
    if (check && !check(structuredClone(value))) found.push(`${at}: its default ${JSON.stringify(value)} does not fit its own schema (${(check.errors ?? []).map((e) => describeIssue(e).message.replace(/^input\b/, 'it')).join('; ')}): fix the default`);
  }
  const sub = (v: unknown, where: string) => {
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) schemaProblems(v as Record<string, unknown>, where, found);
  };
  for (const key of SCHEMA_MAPS) {
    const map = schema[key];
    if (map === null || typeof map !== 'object') continue;
    for (const [name, v] of Object.entries(map)) sub(v, key === 'properties' ? `${at}.${name}` : `${at}.${key}.${name}`);
  }
  for (const key of SCHEMA_ONE) sub(schema[key], `${at} (${key})`);
  for (const key of SCHEMA_LISTS) {
    const list = schema[key];
    if (Array.isArray(list)) list.forEach((v, i) => sub(v, `${at} (${key}[${i}])`));
  }
  return found;
}

/** What ajv said of a schema, as a start warning: a format it does not know is not checked. */
function formatNote(said: string): string {
  const m = /^unknown format "(.*)" ignored in schema at path "(.*)"$/.exec(said);
  if (!m) return said;
  return `format ${JSON.stringify(m[1])} (at ${m[2]}) is not one stoker knows, so it checks nothing: JSON Schema's formats are checked (date-time, date, time, duration, email, hostname, ipv4, ipv6, uri, uri-reference, uuid, regex, …); check a format of your own in prepare`;
}

const ARTICLE: Record<string, string> = { integer: 'an integer', number: 'a number', string: 'a string', object: 'an object', array: 'an array', boolean: 'true or false', null: 'null' };

/** An ajv error as `{path: "input.x", message: "x must be …"}`; type errors add the field's description. */
function describeIssue(e: ErrorObject): InputIssue {
  const segments = e.instancePath.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
  const at = (extra?: string) => ['input', ...segments, ...(extra === undefined ? [] : [extra])].join('.');
  // The field as code would name it: texts[0], options.dim.
  const field = segments.reduce((acc, seg) => (/^\d+$/.test(seg) ? `${acc}[${seg}]` : acc === '' ? seg : `${acc}.${seg}`), '') || 'input';
  const p = e.params as Record<string, unknown>;
  const desc = (e.parentSchema as { description?: unknown } | undefined)?.description;
  switch (e.keyword) {
    case 'additionalProperties':
      return { path: at(String(p['additionalProperty'])), message: `unknown field ${quoted(String(p['additionalProperty']))}: remove it (GET /v1/kinds describes each kind's input)` };
    case 'required':
      return { path: at(String(p['missingProperty'])), message: `${String(p['missingProperty'])} is required` };
    case 'type': {
      const types = String(p['type']).split(',').map((t) => ARTICLE[t] ?? t);
      return { path: at(), message: `${field} must be ${types.join(' or ')}${typeof desc === 'string' ? ` (${desc})` : ''}` };
    }
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum': {
      const op = { minimum: '≥', maximum: '≤', exclusiveMinimum: '>', exclusiveMaximum: '<' }[e.keyword];
      return { path: at(), message: `${field} must be ${op} ${String(p['limit'])}` };
    }
    case 'enum':
      return { path: at(), message: `${field} must be one of ${(p['allowedValues'] as unknown[]).map((v) => JSON.stringify(v)).join(', ')}` };
    default:
      return { path: at(), message: `${field} ${e.message ?? 'is invalid'}` };
  }
}

/** A whole number of bytes ≥ 0 that a number holds exactly. */
const isWholeBytes = (n: unknown) => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;

function bufferOf(m: Record<string, unknown>, fail: Fail): LoadedKind['bufferBytes'] {
  const f = m['buffer'] as ((input: unknown) => unknown) | undefined;
  if (!f) return () => 0;
  return (input) => {
    const n = f(input);
    if (!isWholeBytes(n)) throw fail('buffer', `returned ${JSON.stringify(n) ?? String(n)}: it must return a whole number of bytes ≥ 0`);
    return n as number;
  };
}

function memoryOf(m: Record<string, unknown>, fail: Fail): LoadedKind['memory'] {
  const f = m['memory'] as ((input: unknown) => unknown) | undefined;
  const buffer = bufferOf(m, fail);
  if (!f) {
    // (What the server's pool lends for the buffer: its size class, up to a quarter more.)
    return (input) => {
      const b = buffer(input);
      const lent = b > 0 ? sizeClass(b) : 0;
      return { prepareBytes: lent, deviceBytes: lent };
    };
  }
  return (input) => {
    const r = f(input) as Partial<PartitionMemory> | null;
    // (Whole and safe, as buffer's: 1.5 or 1e300 was accepted here, and the job failed once started.)
    if (r === null || typeof r !== 'object' || !isWholeBytes(r.prepareBytes) || !isWholeBytes(r.deviceBytes)) {
      throw fail('memory', `returned ${JSON.stringify(r) ?? String(r)}: it must return { prepareBytes, deviceBytes }, each a whole number of bytes ≥ 0 (round up with Math.ceil)`);
    }
    return { prepareBytes: r.prepareBytes as number, deviceBytes: r.deviceBytes as number };
  };
}

function partitionsOf(m: Record<string, unknown>, fail: Fail): LoadedKind['partitions'] {
  const f = m['partitions'] as ((input: unknown) => unknown) | undefined;
  if (!f) return () => undefined;
  return (input) => {
    const n = f(input);
    if (typeof n !== 'number' || !Number.isSafeInteger(n)) {
      // (JSON would show NaN and Infinity as null.)
      throw fail('partitions', `returned ${typeof n === 'number' ? String(n) : (JSON.stringify(n) ?? String(n))}: it must return a whole number from 1 to ${MAX_PARTITIONS}`);
    }
    // A whole number out of range is the input's doing (too large or empty a job), not the module's: the client's 400.
    if (n < 1) throw new Error(`it makes ${n} partitions of this input: a job needs at least 1`);
    if (n > MAX_PARTITIONS) throw new Error(`it makes ${n} partitions of this input: more than ${MAX_PARTITIONS}, the most one job may have — split the work into several jobs`);
    return n;
  };
}

function finishOf(m: Record<string, unknown>): LoadedKind['finish'] {
  const f = m['finish'] as KindModule['finish'];
  if (f) return async (outputs, input, job) => f(outputs, input, { job });
  return async (outputs) => {
    const bytes = outputs.filter((o) => o instanceof Uint8Array);
    if (bytes.length === 0) return outputs;
    if (bytes.length !== outputs.length) throw new Error('some partition outputs are bytes and some JSON: export finish(outputs, input) to combine them');
    return concatInTurns(bytes as Uint8Array[]);
  };
}

/** Bytes copied in one turn of the event loop by {@link concatInTurns}: 8 MiB, a few ms. */
const CONCAT_TURN_BYTES = 8 << 20;

/**
 * The outputs one after the other, copied CONCAT_TURN_BYTES a turn of the event loop (one
 * Buffer.concat of 200 MiB held it ~0.1 s); one output is the result as it is.
 */
async function concatInTurns(parts: readonly Uint8Array[]): Promise<Uint8Array> {
  if (parts.length === 1) return parts[0] as Uint8Array;
  const out = Buffer.allocUnsafe(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  let turn = 0;
  for (const p of parts) {
    for (let from = 0; from < p.byteLength; ) {
      if (turn >= CONCAT_TURN_BYTES) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        turn = 0;
      }
      const n = Math.min(p.byteLength - from, CONCAT_TURN_BYTES - turn);
      out.set(p.subarray(from, from + n), at);
      at += n;
      from += n;
      turn += n;
    }
  }
  return out;
}

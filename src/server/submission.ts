import { randomUUID } from 'node:crypto';
import { MAX_PARTITIONS, type PartitionMemory } from '../core/index.js';
import { suggest } from '../core/suggest.js';
import { SubmitBody } from './api.js';
import { clip, MAX_LISTED_ERRORS, quoted, ServiceError } from './errors.js';
import type { JournalJobInput } from './journal.js';
import { KindModuleError, type LoadedKind } from './kind-module.js';
import type { z } from 'zod';

/** Checks of a submission: its body parsed, then checked against its kind (its partitions, the kind's answers); the 400 that names each field. */

/** The job's partition count: given, or derived from the input by the kind (both: they must agree). */
function partitionsOf(kind: LoadedKind, input: unknown, given: number | undefined): number {
  const derived = askKind(kind, () => kind.partitions(input));
  if (derived === undefined) {
    if (given === undefined) throw invalid([{ path: 'partitions', message: `partitions must be a whole number from 1 to ${MAX_PARTITIONS}: kind ${kind.name} does not derive it from its input` }]);
    return given;
  }
  if (given !== undefined && given !== derived) throw invalid([{ path: 'partitions', message: `kind ${kind.name} makes ${derived} partition${derived === 1 ? '' : 's'} of this input: leave partitions out, or give ${derived}` }]);
  return derived;
}

/** Asks the kind about an input: a bad answer (the kind's bug) is the server's 500, a refusal (it throws) the client's 400. */
function askKind<T>(kind: LoadedKind, ask: () => T): T {
  try {
    return ask();
  } catch (e) {
    if (e instanceof KindModuleError) throw new ServiceError(500, 'kind-failed', 'Kind module failed', `${e.message} — fix the kind module and restart the server`);
    throw invalid([{ path: 'input', message: `kind ${kind.name} refused the input: ${(e as Error).message}` }]);
  }
}

/** The submit body's fields, as an unknown field's error lists them. */
const FIELD_NAMES = Object.keys(SubmitBody.shape);
const FIELDS = FIELD_NAMES.join(', ');

/** Zod issues of the body as `errors[]`; an unknown key is named in the path, one error per key. */
export function fieldIssues(error: z.ZodError): { path: string; message: string }[] {
  const join = (p: PropertyKey[]) => p.map(String).join('.');
  return error.issues.flatMap((i) =>
    i.code === 'unrecognized_keys'
      ? i.keys.map((k) => {
          // (Not for a word of a few letters: within 2 edits of "x0" is "id".)
          const near = i.path.length === 0 && k.length >= 4 ? suggest(k, FIELD_NAMES) : undefined;
          return { path: join([...i.path, k]), message: `unknown field ${quoted(k)}${near ? ` (did you mean ${near}?)` : ''}: the fields are ${FIELDS}` };
        })
      : [{ path: join(i.path), message: i.message }],
  );
}

/** The most characters of an error's path (it holds the client's keys) and of its message, as listed. */
const MAX_PATH_CHARS = 200;
const MAX_MESSAGE_CHARS = 1000;

/**
 * The 400 of an invalid job: each error once, the first MAX_LISTED_ERRORS listed (in `detail` and
 * in `errors`), then one line counting the rest, so that a body of 60,000 unknown keys is answered
 * with a few KB naming the first keys, not 12 MB naming each twice. Every error still counts.
 */
export function invalid(all: { path: string; message: string }[]): ServiceError {
  // (One field can fail two checks with one message: a deadline of 1e20 is neither a safe integer nor under the last date.)
  // Once each in one pass, by path (the messages of one path compared): a search of the whole list per error was quadratic, 10 s of a blocked event loop for 60,000 unknown keys.
  const seen = new Map<string, string[]>();
  const errors: { path: string; message: string }[] = [];
  let count = 0;
  let more = 0;
  let moreUnknown = 0;
  for (const e of all) {
    const messages = seen.get(e.path);
    if (messages === undefined) seen.set(e.path, [e.message]);
    else if (messages.includes(e.message)) continue;
    else messages.push(e.message);
    count++;
    if (errors.length < MAX_LISTED_ERRORS) errors.push({ path: clip(e.path, MAX_PATH_CHARS), message: clip(e.message, MAX_MESSAGE_CHARS) });
    else {
      more++;
      if (e.message.startsWith('unknown field')) moreUnknown++;
    }
  }
  if (more > 0) {
    const unknown = moreUnknown === 0 ? '' : `, ${moreUnknown === more ? 'all' : moreUnknown} of them unknown fields`;
    errors.push({ path: '', message: `and ${more} more errors not listed${unknown} (${count} in all; the first ${MAX_LISTED_ERRORS} are listed)` });
  }
  return new ServiceError(400, 'invalid-job', 'Invalid job', errors.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message)).join('; '), { errors });
}

/**
 * A job's input and partitions as its kind takes them: the input checked against the kind's
 * schema (with its defaults filled in), the partition count given or derived, and the kind asked
 * for the memory of that input. Each refusal is a 400 naming the field.
 */
export function checkedByKind(kind: LoadedKind, input: unknown, partitions: number | undefined): { input: unknown; partitions: number; memory: PartitionMemory } {
  const checked = kind.validate(input);
  if (!checked.ok) throw invalid(checked.issues);
  const n = partitionsOf(kind, checked.input, partitions);
  const memory = askKind(kind, () => kind.memory(checked.input));
  // A buffer() that answers badly fails here, not in each preparation after its retries (where memory() does not ask it).
  askKind(kind, () => kind.bufferBytes(checked.input));
  return { input: checked.input, partitions: n, memory };
}

/** Kinds a submission may name beyond this node's own (cluster mode: those other nodes run). */
export interface OtherKinds {
  kind(name: string): LoadedKind | undefined;
  names(): string[];
}

/**
 * Validates a submission's body (400 with every field's problem) against the kinds that may run
 * it: the job's record, with a generated id when none was given.
 */
export function parseSubmission(raw: unknown, kinds: ReadonlyMap<string, LoadedKind>, elsewhere?: OtherKinds): { record: JournalJobInput; explicitId: boolean; memory: PartitionMemory } {
  const parsed = SubmitBody.safeParse(raw);
  if (!parsed.success) throw invalid(fieldIssues(parsed.error));
  const body = parsed.data;
  // A kind this service runs, or (cluster mode) one that other nodes run.
  const kind = kinds.get(body.kind) ?? elsewhere?.kind(body.kind);
  if (!kind) {
    const names = [...new Set([...kinds.keys(), ...(elsewhere?.names() ?? [])])];
    throw invalid([{ path: 'kind', message: `unknown kind ${quoted(body.kind)}: use one of ${names.join(', ')}` }]);
  }
  const { input, partitions, memory } = checkedByKind(kind, body.input ?? {}, body.partitions);
  const deadline = body.deadline === undefined || body.deadline === null ? null : typeof body.deadline === 'number' ? body.deadline : Date.parse(body.deadline);
  const id = body.id ?? randomUUID();
  return { record: { id, kind: kind.name, priority: body.priority, partitions, input, deadline }, explicitId: body.id !== undefined, memory };
}

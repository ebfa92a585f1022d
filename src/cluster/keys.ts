import { randomUUID } from 'node:crypto';
import type { ChainableCommander } from 'ioredis';
import type { JobView } from '../server/api.js';
import { Journal, type JournalJobInput } from '../server/journal.js';
import type { Priority } from '../core/index.js';

/** The cluster's shared state in Redis: its key schema, what the BullMQ jobs carry, and how outputs and failures are written there. */

export const PREFIX = 'stoker';
/** The BullMQ queue of a kind (kind names are letters, digits, `.`, `_`, `-`). */
export const queueName = (kind: string) => `jobs-${kind}`;
export const K = {
  nodes: `${PREFIX}:cluster:nodes`,
  node: (id: string) => `${PREFIX}:cluster:node:${id}`,
  /** A node's hold on its name (JSON {host, pid, token}, living 3 × heartbeatMs, renewed with each heartbeat): set only where absent, so two nodes of one name cannot both join. */
  claim: (id: string) => `${PREFIX}:cluster:claim:${id}`,
  // Per-job bookkeeping: one key per job, each expiring after server.resultTtlS (see `ttlMs`).
  /** A job cancelled while queued (removed from BullMQ): JSON {data, cancelledAt}. */
  cancelled: (id: string) => `${PREFIX}:cluster:cancelled:${id}`,
  /** Index of those for `GET /v1/jobs`: id scored by cancelledAt, trimmed by age. */
  cancelledIndex: `${PREFIX}:cluster:cancelled-index`,
  /** Set when the job's cancel was asked for (a node that takes it fails it as cancelled at once). */
  cancelRequest: (id: string) => `${PREFIX}:cluster:cancel-request:${id}`,
  /** How many times a node recorded the job's completion (1: exactly once). */
  completions: (id: string) => `${PREFIX}:cluster:completions:${id}`,
  /** The ids of the republished results (below), scored by when they were republished: what lists read (the queues lost them). */
  resultIndex: `${PREFIX}:cluster:result-index`,
  /** A finished job's view, republished by the node that ran it after Redis lost its data (JSON JobView). */
  result: (id: string) => `${PREFIX}:cluster:result:${id}`,
  /** Outputs of a running job's finished partitions (hash: partition → JSON {@link SharedOutput}): a node that takes the job over runs only the rest. */
  outputs: (id: string) => `${PREFIX}:cluster:outputs:${id}`,
  /** Each node's clock (a hash: node → count), advanced by the node alone — every sweep, every job it takes, every end it records: a count not above the node's last reading means Redis went back in time (see Recovery). */
  clock: `${PREFIX}:cluster:clock`,
  /** Set once per Redis dataset: a node that sees it change (or vanish) knows Redis lost its data. */
  epoch: `${PREFIX}:cluster:epoch`,
  /**
   * A job a node runs (JSON {@link RunningRecord}), written by that node while it holds the job,
   * each time it renews its lock, expiring after cluster.lockMs: after Redis lost its data (and the
   * job with it) it says the job runs there, so the accepting node does not queue it again.
   */
  running: (id: string) => `${PREFIX}:cluster:running:${id}`,
  /** The ids with a K.running record (a set; an id whose record expired is dropped when a list finds it gone): what GET /v1/jobs lists of them, without a scan of every key. */
  runningIndex: `${PREFIX}:cluster:running-index`,
  /** The node that took the job last. */
  holder: (id: string) => `${PREFIX}:cluster:holder:${id}`,
  /** The kind of a job (which queue holds it), set once at submission. */
  kindOf: (id: string) => `${PREFIX}:cluster:kind:${id}`,
  /** The registry of kinds: name → JSON {@link KindEntry}. */
  kinds: `${PREFIX}:cluster:kinds`,
  cancelChannel: `${PREFIX}:cluster:cancel`,
  /** A job of this kind was queued: the nodes that run it wake. */
  addedChannel: `${PREFIX}:cluster:added`,
};

/** A kind as the cluster knows it. */
export interface KindEntry {
  /** sha256 of the module file. */
  hash: string;
  schema: object | null;
  derivesPartitions: boolean;
  description: string;
  /** The node that registered this version. */
  node: string;
}

/**
 * The largest partition output shared through Redis (bytes of its JSON): a larger one is not
 * shared, and a node that takes the job over runs that partition again.
 */
const MAX_SHARED_OUTPUT_BYTES = 4 * 1024 * 1024;

/** A partition output as Redis keeps it: JSON as it is, bytes as base64. */
type SharedOutput = { json: unknown } | { base64: string };

export function shareOutput(output: unknown): string | undefined {
  const shared: SharedOutput = output instanceof Uint8Array ? { base64: Buffer.from(output.buffer, output.byteOffset, output.byteLength).toString('base64') } : { json: output };
  let text: string | undefined;
  try {
    text = JSON.stringify(shared);
  } catch {
    return undefined; // not JSON (the local journal refuses it too)
  }
  return text !== undefined && text.length <= MAX_SHARED_OUTPUT_BYTES ? text : undefined;
}

export function sharedOutput(text: string): unknown {
  const s = JSON.parse(text) as SharedOutput;
  return 'base64' in s ? new Uint8Array(Buffer.from(s.base64, 'base64')) : s.json;
}

/** BullMQ's priority: lower runs first (0 would mean "none", a separate FIFO). */
export const BULL_PRIORITY: Record<Priority, number> = { critical: 1, high: 2, normal: 3, low: 4 };

/** Our ids may contain `:` and be all digits; BullMQ's may be neither. `~` is not in our alphabet. */
export const bullId = (id: string) => `~${id.replaceAll(':', '~')}`;

export interface JobData {
  record: JournalJobInput;
  /** {@link Journal.hash} of the body: a retried submission vs a conflicting one. */
  hash: string;
  /**
   * {@link Journal.sentHash} of the body as the client sent it: the same body sent again is the
   * same job, whatever a deploy did to the kind's defaults or schema since (absent: queued by a
   * node of an earlier version, or again from an acceptance record that lacks it).
   */
  sentHash?: string;
  submittedAt: number;
  nonce: string;
}

/** The job a node's acceptance record (its `accepted` journal) holds, as it was submitted. */
export function acceptedRecord(j: JournalJobInput): JournalJobInput {
  return { id: j.id, kind: j.kind, priority: j.priority, partitions: j.partitions, input: j.input, deadline: j.deadline };
}

/** What a BullMQ job (or a cancelled record) carries for a job from an acceptance record. */
export function acceptedData(j: JournalJobInput & { submittedAt: number }): JobData {
  const record = acceptedRecord(j);
  return { record, hash: Journal.hash(record), ...(j.sentHash ? { sentHash: j.sentHash } : {}), submittedAt: j.submittedAt, nonce: randomUUID() };
}

/** Adds to `m` the writes that record a job cancelled while queued (K.cancelled, its kind, the index lists read), living `ttlMs`. */
export function writeCancelled(m: ChainableCommander, rec: CancelledRecord, ttlMs: number): ChainableCommander {
  const { id, kind } = rec.data.record;
  return m.set(K.cancelled(id), JSON.stringify(rec), 'PX', ttlMs).set(K.kindOf(id), kind, 'PX', ttlMs).zadd(K.cancelledIndex, rec.cancelledAt, id);
}

/** Adds to `m` the writes that make a job's end readable from any node (K.result, its kind, the index lists read), living `ttlMs`: `view` as the record. */
export function writeResult(m: ChainableCommander, view: JobView, ttlMs: number): ChainableCommander {
  return m.set(K.result(view.id), JSON.stringify(view), 'PX', ttlMs).set(K.kindOf(view.id), view.kind, 'PX', ttlMs).zadd(K.resultIndex, Date.now(), view.id);
}

/** A result as BullMQ keeps it (`returnvalue`): bytes as base64, marked. */
export interface StoredResult {
  result: unknown;
  encoding?: 'base64';
}

export function resultOf(stored: StoredResult | null): Pick<JobView, 'result' | 'resultEncoding'> {
  if (stored === null) return { result: null };
  return stored.encoding ? { result: stored.result, resultEncoding: stored.encoding } : { result: stored.result ?? null };
}

export interface CancelledRecord {
  data: JobData;
  cancelledAt: number;
}

/** A job running on a node (K.running). */
export interface RunningRecord {
  data: JobData;
  node: string;
  startedAt: number;
}

/**
 * A failed job's code and reason as BullMQ keeps them: its failedReason is one string,
 * `"E_CODE: reason"` (the form every node version reads and writes, so a cluster can be
 * upgraded one node at a time); the code is what comes before the first `": "`, the reason is
 * the rest, whatever it holds. Written and read only here.
 */
export function failure(code: string, reason: string): Error {
  return new Error(`${code}: ${reason}`);
}

/** A failed job's code and reason; a reason BullMQ wrote itself (a stalled job given up, say) is E_INTERNAL. */
export function failureOf(failedReason: string): { code: string; reason: string } {
  const m = /^(E_[A-Z0-9_]+): ([\s\S]*)$/.exec(failedReason);
  return m ? { code: m[1] as string, reason: m[2] as string } : { code: 'E_INTERNAL', reason: failedReason };
}

import { z } from 'zod';
import { MAX_PARTITIONS, PRIORITIES } from '../core/index.js';
import { LIST_RESULT_MAX_BYTES } from './journal-schema.js';

/**
 * The HTTP API's wire contract: the submit body and the views the server answers with, as zod
 * schemas. The TypeScript types the server and the cluster build their answers with are inferred
 * from them, and the OpenAPI document's schemas are generated from them (openapi.ts): what the
 * document says is what the code compiles against.
 */

const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;

/** The last epoch ms a Date can hold: a later deadline made every view of the job throw (500). */
const MAX_DATE_MS = 8_640_000_000_000_000;

const DEADLINE_ERROR = { error: 'deadline must be epoch milliseconds or an ISO 8601 time with its zone (Z or ±hh:mm), such as 2030-01-01T00:00:00Z' };

export const JOB_STATES = ['queued', 'running', 'done', 'failed', 'cancelled'] as const;
const PARTITION_STATES = ['queued', 'preparing', 'waiting', 'on-device', 'done', 'failed', 'cancelled'] as const;

/** The body of `POST /v1/jobs`. */
export const SubmitBody = z
  .strictObject(
    {
      id: z
        .string({ error: 'id must be a string' })
        .regex(ID, { error: 'id must be 1–200 characters of A–Z a–z 0–9 . _ : - starting with a letter or digit' })
        .optional()
        .meta({ description: 'Idempotency key; generated when absent' }),
      kind: z.string({ error: 'kind must be a string naming a job kind (GET /v1/kinds lists them)' }).meta({ description: 'A kind this server offers: GET /v1/kinds lists them (with their input schemas)' }),
      priority: z
        .enum(PRIORITIES, { error: `priority must be one of ${PRIORITIES.join(', ')}` })
        .default('normal')
        .meta({ description: 'The queue class (default normal)' }),
      /** Optional only for a kind that derives it from its input (`partitions(input)`). */
      partitions: z
        .number({ error: 'partitions must be a whole number' })
        .int({ error: 'partitions must be a whole number' })
        .min(1, { error: 'partitions must be ≥ 1' })
        .max(MAX_PARTITIONS, { error: `partitions must be ≤ ${MAX_PARTITIONS}` })
        .optional()
        .meta({ description: 'Required unless the kind derives it from its input (GET /v1/kinds: partitionsFromInput)' }),
      input: z.unknown().optional().meta({ description: "The kind's input, checked against its JSON Schema (GET /v1/kinds gives each kind's)" }),
      deadline: z
        .union([z.number(DEADLINE_ERROR).int(DEADLINE_ERROR).positive(DEADLINE_ERROR).max(MAX_DATE_MS, DEADLINE_ERROR), z.iso.datetime({ offset: true, ...DEADLINE_ERROR }), z.null()], DEADLINE_ERROR)
        .optional()
        .meta({ description: 'Epoch milliseconds or an ISO 8601 time with its zone; a job not done by then fails (E_DEADLINE). null: none (as a job view shows it)' }),
    },
    { error: (issue) => (issue.code === 'invalid_type' ? 'the body must be a JSON object such as {"kind": "KIND", "partitions": 4, "input": {}} with KIND one of GET /v1/kinds' : undefined) },
  )
  .meta({ description: 'A job: its kind, its partitions and its input' });
export type SubmitBody = z.input<typeof SubmitBody>;

const JobError = z.object({ code: z.string(), reason: z.string() }).meta({ description: 'Why the job failed or was cancelled' });

/** A job as the API shows it. */
export const JobView = z
  .object({
    id: z.string(),
    kind: z.string(),
    priority: z.enum(PRIORITIES),
    partitions: z.number().int(),
    state: z.enum(JOB_STATES),
    input: z.unknown(),
    deadline: z.string().nullable().meta({ description: 'ISO 8601' }),
    submittedAt: z.string().meta({ description: 'ISO 8601' }),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
    durationS: z.number().nullable().meta({ description: 'Seconds from submission to the end (null while unfinished)' }),
    partitionsDone: z.number().int().meta({ description: 'Partitions whose output is recorded (survives restarts)' }),
    partitionStates: z
      .array(z.enum(PARTITION_STATES))
      .nullable()
      .meta({ description: 'Per partition while the job runs (null once it ended); in lists and submit answers only for jobs of at most 96 partitions; a job view gives a page (statesFrom, statesLimit) of at most 100,000' }),
    partitionCounts: z
      .record(z.enum(PARTITION_STATES), z.number().int())
      .nullable()
      .meta({ description: 'While the job runs: its partitions by stage; null once it ended (or while its end is being recorded)' }),
    resumes: z.number().int().meta({ description: 'How often the job was resumed after a restart' }),
    result: z.unknown().meta({ description: 'A JSON value, or base64 of bytes when resultEncoding is base64' }),
    resultEncoding: z.literal('base64').optional().meta({ description: 'Present only for a bytes result, also where the result is left out by its size (GET …/result with Accept: application/octet-stream gives the raw bytes)' }),
    onHold: z.string().optional().meta({ description: 'Present only for an unfinished job this server will not run: why (its kind not loaded here, its partitions over the whole memory budget, its input refused by another version of its module than the one that accepted it), and what would run it; GET …/result answers at once for it' }),
    inputOmittedBytes: z.number().int().optional().meta({ description: 'Present only in lists and submit answers, where the input is over 64 KiB as JSON text: this many bytes; it is left out there (input null) — GET /v1/jobs/:id gives it' }),
    resultOmittedBytes: z.number().int().optional().meta({ description: 'Present only where the result is left out by its size as stored (its JSON text, or its bytes): over 1 MiB in a job view, over 64 KiB in a list or a submit answer (result null) — GET /v1/jobs/:id/result gives it' }),
    error: JobError.nullable(),
    node: z.string().nullable().optional().meta({ description: 'Cluster mode only: the node that holds or held the job (null: none yet)' }),
  })
  .meta({ description: 'A job: its state, its partitions, its timings and its result' });
export type JobView = z.output<typeof JobView>;

/** `GET /v1/jobs/:id/result`: the job's end (or its state after the wait). */
export const ResultView = z.object({
  id: z.string(),
  state: z.enum(JOB_STATES),
  result: z.unknown().meta({ description: 'A JSON value, or base64 of bytes when resultEncoding is base64 (null until done)' }),
  resultEncoding: z.literal('base64').optional(),
  error: JobError.nullable(),
  finishedAt: z.string().nullable(),
  onHold: z.string().optional().meta({ description: 'As in the job view: why this server will not run the job (answered at once, no wait)' }),
});
export type ResultView = z.output<typeof ResultView>;

/** An error answer (RFC 9457 problem details). */
export const Problem = z.object({
  type: z.string().meta({ description: 'A stable slug, e.g. invalid-job, too-many-jobs' }),
  title: z.string(),
  status: z.number().int(),
  detail: z.string().meta({ description: 'What was wrong and how to fix it' }),
  errors: z.array(z.object({ path: z.string(), message: z.string() })).optional().meta({ description: 'Each invalid field (400): the first 20, then one entry with path "" counting the rest' }),
});

const Counts = z.object({ queued: z.number(), preparing: z.number(), waiting: z.number(), 'on-device': z.number() });
const BatchCounts = z.object({ maxItems: z.number(), batches: z.number(), items: z.number() });

/** `GET /v1/status`: the whole engine. */
export const StatusView = z.object({
  time: z.string(),
  uptimeS: z.number(),
  closing: z.boolean().meta({ description: 'Shutting down: submissions get 503' }),
  jobs: z.object({ queued: z.number(), running: z.number(), done: z.number(), failed: z.number(), cancelled: z.number(), pending: z.number(), onHold: z.number().meta({ description: 'Of the pending jobs, those this server leaves on hold (a kind it has not loaded, partitions over the whole budget, an input another version of the module refuses): each job view says why (onHold)' }), maxPending: z.number() }),
  partitions: z.object({
    queued: z.number(),
    preparing: z.number(),
    waiting: z.number(),
    onDevice: z.number(),
    inFlight: z.number(),
    preparingSteps: z.number().meta({ description: 'Preparation steps running (a preparation batch is one)' }),
    prepareBatches: z.record(z.string(), BatchCounts).optional().meta({ description: 'Kinds prepared in batches: the largest batch, how many finished, the items they started with' }),
    pending: z.number(),
    byKind: z.record(z.string(), Counts),
    dispatched: z.number(),
    completed: z.number(),
  }),
  targetWaiting: z.number(),
  devices: z.array(
    z.object({
      device: z.number(),
      name: z.string(),
      kind: z.string().meta({ description: 'cpu, webgpu, process or http' }),
      completions: z.number(),
      busyS: z.number(),
      unreachable: z.string().optional().meta({ description: 'An HTTP device whose endpoint refuses connections: since when (its steps wait up to unreachableS, then fail; GET /readyz answers 503)' }),
      batch: BatchCounts.optional(),
      workers: z.array(z.object({ state: z.enum(['lost', 'busy', 'idle']), job: z.string().nullable(), partition: z.number().nullable(), busyS: z.number() })),
    }),
  ),
  pacer: z.object({
    name: z.string(),
    mode: z.enum(['bootstrap', 'steady', 'idle', 'blocked', 'hold']),
    ratePerSec: z.number().nullable().meta({ description: 'The device rate the pacer believes in, items/s' }),
    intervalMs: z.number().nullable(),
    terms: z.record(z.string(), z.number()),
    devices: z
      .array(
        z.object({
          estimatedPerSec: z.number().nullable(),
          observedRatio: z.number().nullable(),
          trusted: z.enum(['estimate', 'observed']),
          workerLimit: z.number().nullable().optional(),
          batch: z.object({ fixedMs: z.number(), perItemMs: z.number() }).nullable().optional(),
        }),
      )
      .optional(),
    kinds: z.array(z.object({ name: z.string(), estimatedPerSec: z.number().nullable() })).optional(),
  }),
  budget: z.object({ usedBytes: z.number(), idlePoolBytes: z.number(), totalBytes: z.number().nullable(), peakBytes: z.number(), blocked: z.boolean() }),
  pool: z.object({ leasedBytes: z.number(), idleBytes: z.number(), totalBytes: z.number(), highWaterBytes: z.number(), leased: z.number(), idle: z.number(), fresh: z.number(), reused: z.number(), freed: z.number() }),
  cluster: z
    .object({ node: z.string(), redis: z.string(), queue: z.record(z.string(), z.number()), jobsHeld: z.number(), maxHeld: z.number(), kinds: z.array(z.string()) })
    .optional()
    .meta({ description: 'Cluster mode: this node, its queue counts and the jobs it holds' }),
});
export type StatusView = z.output<typeof StatusView>;

/** `GET /v1/timeline`: what ran where, and the pipeline's levels, over a recent window; every time in epoch ms. */
export const TimelineView = z.object({
  now: z.number().meta({ description: "The server's now, epoch ms (a running span ends here)" }),
  lanes: z.array(z.object({ id: z.number(), kind: z.enum(['prepare', 'device']), name: z.string(), device: z.number().optional(), worker: z.number().optional() })),
  spans: z
    .array(
      z.object({
        lane: z.number(),
        kind: z.enum(['prepare', 'device']),
        jobId: z.string(),
        partition: z.number(),
        start: z.number(),
        end: z.number().nullable().meta({ description: 'null while it runs' }),
        outcome: z.enum(['done', 'failed', 'aborted']).nullable().meta({ description: 'aborted: cancel, timeout, lost worker, shutdown; null while it runs' }),
        items: z.number().optional().meta({ description: 'A batch: how many items it started with (jobId and partition are its first item’s)' }),
        jobs: z.array(z.string()).optional().meta({ description: 'A batch: the jobs of its items, each once, in the batch’s order' }),
      }),
    )
    .meta({ description: 'Spans that ended in the window or still run, oldest start first' }),
  samples: z.array(z.object({ t: z.number(), waiting: z.number(), preparing: z.number(), onDevice: z.number(), inventory: z.number(), budgetUsedBytes: z.number(), budgetHeldBytes: z.number() })),
});
export type TimelineView = z.output<typeof TimelineView>;

/** What a job's view is built from, wherever it lives (the journal, a cluster queue): times in epoch ms. */
export interface JobFacts {
  record: { id: string; kind: string; priority: JobView['priority']; partitions: number; input: unknown; deadline: number | null };
  state: JobView['state'];
  submittedAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  partitionsDone: number;
  partitionStates: JobView['partitionStates'];
  partitionCounts: JobView['partitionCounts'];
  resumes: number;
  result: Pick<JobView, 'result' | 'resultEncoding' | 'resultOmittedBytes'>;
  error: JobView['error'];
  /** Cluster mode: the node that holds or held it. */
  node?: string | null;
}

/**
 * The largest input a list or a submit answer carries, bytes of its JSON text; a larger one is left
 * out by its size (`inputOmittedBytes`): GET /v1/jobs/:id gives it whole. (The client has it; with
 * a raised body limit, a list of 5 jobs of 4 MB inputs was 20 MB and every 202 echoed 4 MB back.)
 */
export const BRIEF_INPUT_MAX_BYTES = 64 * 1024;

/** The bytes of a value's JSON text where it may be over `max` (undefined: it cannot be). */
function overBytes(value: unknown, max: number): number | undefined {
  // (A number, a boolean or a short string cannot be over it: not serialised. A character is at
  // most 6 bytes of JSON, a control character's \u escape.)
  if (typeof value !== 'object' && !(typeof value === 'string' && value.length * 6 + 2 > max)) return undefined;
  const bytes = Buffer.byteLength(JSON.stringify(value));
  return bytes > max ? bytes : undefined;
}

/**
 * A view with its result left out by its size (`resultOmittedBytes`) where that is over `max` bytes
 * as stored (its bytes, or its JSON text): GET …/result gives it whole.
 */
export function withoutResultOver(v: JobView, max: number): JobView {
  if (v.result === null || v.result === undefined) return v;
  const bytes = v.resultEncoding === 'base64' && typeof v.result === 'string' ? Buffer.byteLength(v.result, 'base64') : overBytes(v.result, max);
  if (bytes === undefined || bytes <= max) return v;
  // (resultEncoding stays: a client knows the left-out result is bytes.)
  return { ...v, result: null, resultOmittedBytes: bytes };
}

/**
 * A view for a list or a submit answer: an input over BRIEF_INPUT_MAX_BYTES, and a result over
 * LIST_RESULT_MAX_BYTES, left out by their sizes.
 */
export function briefView(v: JobView): JobView {
  const brief = withoutResultOver(v, LIST_RESULT_MAX_BYTES);
  const input = overBytes(v.input, BRIEF_INPUT_MAX_BYTES);
  return input === undefined ? brief : { ...brief, input: null, inputOmittedBytes: input };
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** The one builder of a job's view, for the local service and the cluster alike. */
export function jobView(f: JobFacts): JobView {
  const r = f.record;
  return {
    id: r.id,
    kind: r.kind,
    priority: r.priority,
    partitions: r.partitions,
    state: f.state,
    input: r.input,
    deadline: iso(r.deadline),
    submittedAt: iso(f.submittedAt) as string,
    startedAt: iso(f.startedAt),
    finishedAt: iso(f.finishedAt),
    durationS: f.finishedAt === null ? null : (f.finishedAt - f.submittedAt) / 1000,
    // (A done job did every partition: those whose outputs a full journal could not record too — it read 3 of 6.)
    partitionsDone: f.state === 'done' ? r.partitions : f.partitionsDone,
    partitionStates: f.partitionStates,
    partitionCounts: f.partitionCounts,
    resumes: f.resumes,
    ...f.result,
    error: f.error,
    ...(f.node === undefined ? {} : { node: f.node }),
  };
}

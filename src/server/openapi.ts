import { z } from 'zod';
import { JobView, Problem, ResultView, StatusView, SubmitBody, TimelineView } from './api.js';

const problem = { $ref: '#/components/schemas/Problem' };
const retryAfter = { 'Retry-After': { description: 'Seconds to wait before trying again', schema: { type: 'integer', minimum: 1 } } };
const problemResponse = (description: string, headers?: object) => ({ description, ...(headers ? { headers } : {}), content: { 'application/problem+json': { schema: problem } } });
/** What a submission gets while the server shuts down. */
const closing = { '503': problemResponse('Shutting down: retry against the restarted server') };

/** A schema as JSON Schema 2020-12 (what OpenAPI 3.1 uses), without its $schema line. */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const out = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
  delete out['$schema'];
  return out;
}

/**
 * A request body's schema: what a client may send. A field with a default is optional (zod's
 * input side); the default is said in its description, not as `default` (client generators
 * make a field with a default required).
 */
function requestSchema(schema: z.ZodType): Record<string, unknown> {
  const strip = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(strip);
    if (typeof v !== 'object' || v === null) return v;
    return Object.fromEntries(Object.entries(v).flatMap(([k, x]) => (k === 'default' ? [] : [[k, strip(x)]])));
  };
  return strip(jsonSchema(schema, 'input')) as Record<string, unknown>;
}

/** A response's schema: every field the server always sends is required. */
function responseSchema(schema: z.ZodType): Record<string, unknown> {
  return jsonSchema(schema, 'output');
}
const json = (description: string, schema: object) => ({ description, content: { 'application/json': { schema } } });
const idParam = { name: 'id', in: 'path', required: true, schema: { type: 'string' } };
const sinceParam = { name: 'since', in: 'query', required: false, schema: { type: 'string', default: '5m', examples: ['30s', '5m', '1h'] }, description: 'How far back to look: 30s, 5m, 1h, or a bare number of seconds' };

/**
 * The OpenAPI 3.1 document of the HTTP API (served at GET /v1/openapi.json). A cluster node's
 * (`cluster`) also has GET /v1/cluster, and the 503 its routes answer while Redis does not.
 */
export function openApiDocument(maxWaitS: number, options: { cluster?: boolean } = {}): object {
  const doc = base(maxWaitS) as { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> };
  // Who may call, on every route (no route listed them: a generated client could not tell a 401 from a server error).
  for (const [p, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const probe = p === '/livez' || p === '/readyz';
      if (!probe) op.responses['421'] ??= problemResponse("The Host header names another server: use this server's own address, or add the name to server.allowedHosts");
      if (!probe && p !== '/' && !p.startsWith('/assets/')) op.responses['401'] ??= problemResponse('With server.token set: the Authorization: Bearer <token> header is missing or wrong (the event streams also take ?access_token=)');
      if (method !== 'get') op.responses['403'] ??= problemResponse("A state-changing request from another origin's page (its Origin header)");
    }
  }
  if (!options.cluster) return doc;
  const away = problemResponse('Cluster mode: Redis did not answer (within 3 s, or it is away): retry after the Retry-After header', retryAfter);
  for (const [p, method] of [['/v1/jobs', 'get'], ['/v1/jobs', 'post'], ['/v1/jobs/{id}', 'get'], ['/v1/jobs/{id}', 'delete'], ['/v1/jobs/{id}/result', 'get'], ['/v1/status', 'get']] as const) {
    const responses = (doc.paths[p]?.[method] as { responses: Record<string, unknown> }).responses;
    responses['503'] = responses['503'] ? problemResponse('Shutting down, or (cluster mode) Redis did not answer: retry after the Retry-After header', retryAfter) : away;
  }
  doc.paths['/v1/cluster'] = {
    get: {
      summary: 'The cluster from this node: every live node (capacity, occupancy, in flight, jobs held, its kinds), the queues by kind, the kinds no live node runs',
      responses: { '200': json('Cluster', { type: 'object', required: ['node', 'queue', 'totals', 'nodes', 'kinds', 'unserved'] }), '503': away },
    } as never,
  };
  return doc;
}

function base(maxWaitS: number): object {
  return {
    openapi: '3.1.0',
    info: { title: 'Stoker', version: '1', description: 'Submit partitioned jobs to a paced CPU-preparation → accelerator pipeline; follow, await and cancel them. Every error is a problem-details body, but in the moment the server stops listening (after its shutdown drain) any route may answer 503 with the HTTP framework\'s own JSON body {error, message, statusCode}.' },
    paths: {
      '/v1/jobs': {
        get: {
          summary: 'Recent jobs, newest first',
          description: 'Each as GET /v1/jobs/{id} shows it (per-partition states while it runs).',
          parameters: [
            { name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 0, maximum: 1000, default: 50 } },
            { name: 'state', in: 'query', required: false, schema: { type: 'string', examples: ['queued,running', 'failed'] }, description: 'Only jobs in these states (comma-separated or repeated)' },
            { name: 'before', in: 'query', required: false, schema: { type: 'string' }, description: 'The next page: only jobs submitted before this one (the last id of the page before). Not in cluster mode' },
          ],
          responses: { '200': json('Jobs', { type: 'array', items: { $ref: '#/components/schemas/Job' } }), '400': problemResponse('A bad limit, an unknown state, a before that names no job here (or any before, in cluster mode), or a query parameter other than limit, state and before') },
        },
        post: {
          summary: 'Submit a job',
          description: 'Durable (journaled) before the reply. The same id with the same body is the same job (200); with a different body, 409.',
          requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/SubmitBody' } } } },
          responses: {
            '202': { ...json('Accepted and journaled', { $ref: '#/components/schemas/Job' }), headers: { Location: { description: 'The job: /v1/jobs/{id}', schema: { type: 'string' } } } },
            '200': { ...json('The same id and body were submitted before: that job', { $ref: '#/components/schemas/Job' }), headers: { Location: { description: 'The job: /v1/jobs/{id}', schema: { type: 'string' } } } },
            '400': problemResponse('Invalid body: `errors` names each field (the first 20, then a count of the rest)'),
            '409': problemResponse('The id exists with a different body'),
            '413': problemResponse('Body over server.bodyLimitBytes'),
            '415': problemResponse('A body that is not application/json'),
            '429': problemResponse('server.maxPendingJobs jobs (or server.maxPendingPartitions partitions) are pending: retry after the Retry-After header', retryAfter),
            '507': problemResponse('The journal is full (the disk, or journal.maxBytes): nothing was accepted; retry after the Retry-After header', retryAfter),
            ...closing,
          },
        },
      },
      '/v1/jobs/{id}': {
        get: {
          summary: 'A job: state, per-partition states, timings',
          parameters: [
            idParam,
            { name: 'statesFrom', in: 'query', required: false, schema: { type: 'integer', minimum: 0 }, description: 'The first partition whose state `partitionStates` gives (default 0)' },
            { name: 'statesLimit', in: 'query', required: false, schema: { type: 'integer', minimum: 0, maximum: 100_000 }, description: 'How many partition states it gives (default and most: 100,000; page with statesFrom)' },
          ],
          responses: { '200': json('The job', { $ref: '#/components/schemas/Job' }), '400': problemResponse('A bad statesFrom or statesLimit, or another query parameter'), '404': problemResponse('No such job') },
        },
        delete: {
          summary: 'Cancel a job',
          description: 'Withdraws its queued and in-flight partitions and frees their memory; waiters get state cancelled.',
          parameters: [idParam],
          responses: { '200': json('The cancelled job', { $ref: '#/components/schemas/Job' }), '404': problemResponse('No such job'), '409': problemResponse('The job already ended (done or failed)') },
        },
      },
      '/v1/jobs/{id}/result': {
        get: {
          summary: 'The result, long-polling',
          description: 'A bytes result is base64 in `result` with `resultEncoding: "base64"`; with `Accept: application/octet-stream` a done job answers the raw bytes (406 when its result is JSON).',
          parameters: [idParam, { name: 'wait', in: 'query', required: false, schema: { type: 'string', examples: ['30s', '500ms', '2m'] }, description: `How long to wait for the end: 500ms, 30s, 2m, 1h, or a bare number of seconds (default 0; a longer wait than ${maxWaitS}s is cut to it)` }],
          responses: {
            // (JSON only: with the raw bytes beside it, a generated client reads every answer as Result | string, and the common JSON case needs a cast.)
            '200': json('The job ended: state done (result) or failed/cancelled (error). With Accept: application/octet-stream, a done job whose result is bytes answers them raw instead', { $ref: '#/components/schemas/Result' }),
            '202': json('Still running after the wait; or on hold, answered at once (onHold says why)', { $ref: '#/components/schemas/Result' }),
            '400': problemResponse('A wait that is not a duration, or a query parameter other than wait'),
            '404': problemResponse('No such job'),
            '406': problemResponse('Accept asks for bytes only (application/octet-stream) and the result is JSON'),
          },
        },
      },
      '/livez': { get: { summary: 'Liveness: 200 while the process answers (no token needed)', responses: { '200': json('Live', { type: 'object', properties: { status: { const: 'live' } }, required: ['status'] }) } } },
      '/readyz': {
        get: {
          summary: 'Readiness: 200 while it takes new jobs; 503 while it shuts down, its journal is full or (cluster mode) Redis is away (no token needed)',
          responses: {
            '200': json('Ready', { type: 'object', properties: { status: { const: 'ready' } }, required: ['status'] }),
            '503': json('Not ready, and why', { type: 'object', properties: { status: { const: 'not ready' }, why: { type: 'array', items: { type: 'string' } } }, required: ['status', 'why'] }),
          },
        },
      },
      '/v1/status': { get: { summary: 'The whole engine: jobs, partitions per kind and stage (pending counted exactly), workers, pacer, budget, buffer pool', responses: { '200': json('Status', { $ref: '#/components/schemas/Status' }) } } },
      '/v1/kinds': {
        get: {
          summary: 'The job kinds this server runs (built in and from kind modules; on a cluster node, every kind the cluster runs), each with its input schema and memory per partition (null for a kind only other nodes run)',
          responses: {
            '200': json('Kinds', {
              type: 'array',
              items: {
                type: 'object',
                properties: {
                  name: { type: 'string' },
                  description: { type: 'string' },
                  input: { type: ['object', 'null'], description: "The input's JSON Schema (null: any JSON)" },
                  memory: { type: ['object', 'null'], properties: { prepareBytes: { type: 'number' }, deviceBytes: { type: 'number' } }, description: 'Bytes per partition for the default input ({} with the schema defaults); null where that input is not valid or memory() throws on it' },
                  partitionsFromInput: { type: 'boolean', description: 'The kind derives the partition count from the input: partitions may be left out' },
                },
              },
            }),
          },
        },
      },
      '/v1/jobs/{id}/events': {
        get: {
          summary: "Server-sent events of one job: 'progress' at once with every partition (counts by stage, changes), again whenever partitions moved (preparing, waiting, on-device, done; at most every 50 ms), then 'end' with the job's view; the stream then closes",
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }, { name: 'access_token', in: 'query', required: false, schema: { type: 'string' }, description: "With server.token set, the token, for a browser's EventSource, which cannot send a header" }],
          responses: { '200': { description: 'text/event-stream' }, '404': problemResponse('No such job'), '503': problemResponse('server.maxEventStreams streams are open: retry after the Retry-After header', retryAfter) },
        },
      },
      '/v1/events': { get: { summary: "Server-sent events, each with its type and time (ISO 8601): job.submitted, job.started, job.partition, step.failed (a preparation or device step failed, retried or not), job.done, job.failed, job.cancelled, device.measurement (the pacer found a device's busy time misleading, or right again), pacer (every second). Every event has an id; a client reconnecting with Last-Event-ID (header, or ?lastEventId= given once; the header wins) gets the job events it missed (at least the last 10,000 are kept), or a 'gap' event saying why it cannot (the id is of another run of this server or of another server, not of this server's form, ahead of its last event, or the buffer no longer holds the events after it)", parameters: [
        { name: 'lastEventId', in: 'query', required: false, schema: { type: 'string' }, description: 'The id of the last event seen, as the Last-Event-ID header: the job events after it are sent first' },
        { name: 'access_token', in: 'query', required: false, schema: { type: 'string' }, description: "With server.token set, the token, for a browser's EventSource, which cannot send a header" },
      ], responses: { '200': { description: 'text/event-stream' }, '503': problemResponse('server.maxEventStreams streams are open: retry after the Retry-After header', retryAfter) } } },
      '/v1/timeline': {
        get: {
          summary: 'What ran where over a recent window, and the pipeline levels (the dashboard waterfall); times in epoch ms',
          parameters: [sinceParam, { name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 0, maximum: 50000, default: 10000 }, description: 'Most spans returned (the newest are kept)' }],
          responses: { '200': json('Timeline', { $ref: '#/components/schemas/Timeline' }), '400': problemResponse('A since that is not a duration') },
        },
      },
      '/v1/history': {
        get: {
          summary: 'One sample a second of the last hour (default since=10m): per-device and per-worker occupancy (≤ 1, running items included), dispatch and completion rates, the pacer (capacity, target dispatch rate, mode), levels, memory, jobs ended, per kind; what the dashboard draws on load',
          parameters: [sinceParam],
          responses: {
            '200': json('History', {
              type: 'object',
              required: ['now', 'intervalS', 'samples'],
              properties: { now: { type: 'number', description: 'epoch ms' }, intervalS: { type: 'number' }, samples: { type: 'array', items: { type: 'object', required: ['t', 'windowS', 'occupancy', 'workerOccupancy', 'dispatchedPerS', 'completedPerS', 'partitions', 'memory', 'jobsEnded', 'kinds'] } } },
            }),
            '400': problemResponse('A since that is not a duration'),
          },
        },
      },
      '/v1/trace': {
        get: {
          summary: 'Chrome trace event JSON of a recent window (opens in Perfetto): a track per preparation slot and device worker, a slice per partition and stage, level counters',
          parameters: [sinceParam],
          responses: { '200': json('Chrome trace', { type: 'object', properties: { traceEvents: { type: 'array', items: { type: 'object' } }, displayTimeUnit: { type: 'string' }, otherData: { type: 'object' } } }), '400': problemResponse('A since that is not a duration') },
        },
      },
      '/v1/backup': {
        get: {
          summary: "A consistent copy of this server's journal, made now (SQLite's online backup): start a server on it as its data dir's stoker.db",
          responses: {
            '200': { description: 'The journal, a SQLite file', content: { 'application/vnd.sqlite3': { schema: { type: 'string', format: 'binary' } } } },
            '409': problemResponse('Another backup is being made: retry once it is done', retryAfter),
            '507': problemResponse('The data dir has no room for the copy', retryAfter),
          },
        },
      },
      '/': { get: { summary: 'The dashboard (HTML)', responses: { '200': { description: 'text/html' } } } },
      '/assets/{file}': {
        get: {
          summary: "The dashboard's script modules and style, and uPlot's",
          parameters: [{ name: 'file', in: 'path', required: true, schema: { enum: ['dashboard.js', 'format.js', 'api.js', 'charts.js', 'waterfall.js', 'jobs.js', 'feed.js', 'dashboard.css', 'uPlot.iife.min.js', 'uPlot.min.css'] } }],
          responses: { '200': { description: 'text/javascript or text/css' }, '404': problemResponse('Not one of the dashboard assets') },
        },
      },
      '/metrics': { get: { summary: 'Prometheus metrics (stoker_*)', responses: { '200': { description: 'text/plain; version=0.0.4' } } } },
      '/v1/openapi.json': { get: { summary: 'This document', responses: { '200': json('OpenAPI 3.1', { type: 'object' }) } } },
    },
    components: {
      schemas: {
        SubmitBody: requestSchema(SubmitBody),
        Job: responseSchema(JobView),
        Timeline: responseSchema(TimelineView),
        Result: responseSchema(ResultView),
        Problem: responseSchema(Problem),
        Status: responseSchema(StatusView),
      },
    },
  };
}

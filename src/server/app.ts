import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply } from 'fastify';
import { openApiDocument } from './openapi.js';
import { notFound, ServiceError, type Service, type ServiceEvent } from './service.js';

/** A problem-details body (RFC 9457). */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors?: { path: string; message: string }[];
}

const PROBLEM_BASE = 'https://stoker.dev/problems/';

function sendProblem(reply: FastifyReply, p: Omit<Problem, 'type'> & { type: string }, retryAfterS?: number): FastifyReply {
  if (retryAfterS !== undefined) void reply.header('retry-after', String(retryAfterS));
  return reply
    .code(p.status)
    .type('application/problem+json')
    .send({ ...p, type: PROBLEM_BASE + p.type });
}

/**
 * Parses a long-poll wait: `30s`, `500ms`, `2m`, or a bare number of seconds. Returns ms — cut to
 * `maxS` (server.maxWaitS: a client asking for longer simply polls again) — or an error message.
 */
export function parseWait(text: string, maxS: number): number | string {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (!m) return `wait must be a duration such as 30s, 500ms or 2m (got ${JSON.stringify(text)})`;
  const ms = Number(m[1]) * (m[2] === 'ms' ? 1 : m[2] === 'm' ? 60_000 : 1000);
  return Math.min(ms, maxS * 1000);
}

/** The HTTP API over a service (fastify). Every error is a problem-details body. */
export function buildApp(service: Service): FastifyInstance {
  const app = Fastify({
    bodyLimit: service.config.server.bodyLimitBytes,
    logger: false,
    return503OnClosing: true,
    // Job ids are up to 200 characters, up to 3× that percent-encoded: the default (100) made
    // GET /v1/jobs/:id answer 414 for ids the API accepts.
    routerOptions: { maxParamLength: 1000 },
    // Malformed percent-encoding or an over-long id in the path: a problem body like every error.
    frameworkErrors: (err, _req, reply) =>
      sendProblem(reply, { type: 'bad-url', title: 'Bad URL', status: err.statusCode ?? 400, detail: `${err.message}: percent-encode the path (job ids are at most 200 characters)` }),
  });
  // Bodies are JSON only: without this, fastify's built-in text/plain parser hands a string to
  // the submit validation (a confusing 400 "expected object") instead of answering 415.
  app.removeContentTypeParser('text/plain');

  app.setErrorHandler((err: FastifyError, _req, reply) => {
    if (err instanceof ServiceError) {
      return sendProblem(reply, { type: err.type, title: err.title, status: err.status, detail: err.detail, ...(err.extra.errors ? { errors: err.extra.errors } : {}) }, err.extra.retryAfterS);
    }
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      const type = err.code === 'FST_ERR_CTP_BODY_TOO_LARGE' ? 'body-too-large' : err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ? 'unsupported-media-type' : 'bad-request';
      const detail =
        type === 'body-too-large'
          ? `the body is over ${service.config.server.bodyLimitBytes} bytes (server.bodyLimitBytes): send a smaller job, or raise the limit`
          : type === 'unsupported-media-type'
            ? 'send the body as application/json'
            : `${err.message}: send a JSON object, e.g. {"kind":"sleep","partitions":1}`;
      return sendProblem(reply, { type, title: type === 'bad-request' ? 'Bad request' : type === 'body-too-large' ? 'Body too large' : 'Unsupported media type', status, detail });
    }
    return sendProblem(reply, { type: 'internal', title: 'Internal error', status: 500, detail: `the server failed: ${err.message}` });
  });
  app.setNotFoundHandler((req, reply) =>
    sendProblem(reply, { type: 'not-found', title: 'Not found', status: 404, detail: `no route ${req.method} ${req.url.split('?')[0] ?? ''}: see GET /v1/openapi.json for the API` }),
  );

  app.post('/v1/jobs', (req, reply) => {
    const { job, created } = service.submit(req.body);
    return reply
      .code(created ? 202 : 200)
      .header('location', `/v1/jobs/${encodeURIComponent(job.id)}`)
      .send(job);
  });

  app.get<{ Params: { id: string } }>('/v1/jobs/:id', (req) => {
    const job = service.job(req.params.id);
    if (!job) throw notFound(req.params.id);
    return job;
  });

  app.get<{ Params: { id: string }; Querystring: { wait?: string } }>('/v1/jobs/:id/result', async (req, reply) => {
    const wait: unknown = req.query.wait;
    // `?wait=1s&wait=2s` parses to an array: answer 400, not a TypeError's 500.
    const waitMs = wait === undefined ? 0 : typeof wait === 'string' ? parseWait(wait, service.config.server.maxWaitS) : 'wait must be given once, as a duration such as 30s';
    if (typeof waitMs === 'string') throw new ServiceError(400, 'bad-wait', 'Bad wait', waitMs);
    const job = await service.wait(req.params.id, waitMs);
    if (!job) throw notFound(req.params.id);
    const body = { id: job.id, state: job.state, result: job.result, error: job.error, finishedAt: job.finishedAt };
    return reply.code(job.state === 'queued' || job.state === 'running' ? 202 : 200).send(body);
  });

  app.delete<{ Params: { id: string } }>('/v1/jobs/:id', (req) => service.cancel(req.params.id));

  app.get('/v1/status', () => service.status());
  app.get('/v1/kinds', () => service.kindList());
  app.get('/v1/openapi.json', () => openApiDocument(service.config.server.maxWaitS));

  app.get('/metrics', async (_req, reply) => {
    const text = await service.metrics.registry.metrics();
    return reply.type(service.metrics.registry.contentType).send(text);
  });

  app.get('/v1/events', (req, reply) => {
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.write(': stoker events\n\n');
    const send = (e: ServiceEvent) => res.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
    const ping = setInterval(() => res.write(': ping\n\n'), 15_000);
    service.events.on('event', send);
    const stop = () => {
      clearInterval(ping);
      service.events.off('event', send);
      res.end();
    };
    req.raw.on('close', stop);
    service.events.once('close', stop);
  });

  return app;
}

/** Every problem the API answers with: the error type, and a factory for each problem that more than one place raises. */

/**
 * An error the API answers with a problem-details body: `status` is the HTTP status, `type` a
 * stable slug, `detail` says what was wrong and how to fix it.
 */
export class ServiceError extends Error {
  override readonly name = 'ServiceError';
  constructor(
    readonly status: number,
    readonly type: string,
    readonly title: string,
    readonly detail: string,
    readonly extra: { errors?: { path: string; message: string }[]; retryAfterS?: number } = {},
  ) {
    super(detail);
  }
}

/** At most this many errors are listed in an invalid job's 400 (in `detail` and in `errors`); a last line counts the rest. */
export const MAX_LISTED_ERRORS = 20;

/** The most characters of a client's value (a key, a kind) that an error message quotes. */
export const MAX_QUOTED_CHARS = 100;

/** The text, cut to `max` characters with "…" when longer (never between the halves of a surrogate pair). */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  const end = /[\uD800-\uDBFF]/.test(text.charAt(max - 1)) ? max - 1 : max;
  return `${text.slice(0, end)}…`;
}

/**
 * A client's string as an error message quotes it: JSON, its first MAX_QUOTED_CHARS characters
 * and "…" when longer. (A 900 KB kind name was quoted whole, twice, in a 1.8 MB reply.)
 */
export function quoted(value: string): string {
  return JSON.stringify(clip(value, MAX_QUOTED_CHARS));
}

/** Refuses a new job whose deadline has already passed (a retry of an accepted job is not new: it answers as before). */
export function refusePastDeadline(deadline: number | null): void {
  if (deadline === null || deadline > Date.now()) return;
  // (Python's int(time.time()) + 3600 is epoch seconds: read as ms, a day in January 1970.)
  const seconds = deadline > 0 && deadline < 1e11 && deadline * 1000 > Date.now() ? ` — ${deadline} looks like epoch seconds: deadline is epoch milliseconds (× 1000)` : '';
  const message = `deadline ${new Date(deadline).toISOString()} has passed (now ${new Date().toISOString()})${seconds}: give a time in the future, or leave deadline out`;
  throw new ServiceError(400, 'invalid-job', 'Invalid job', `deadline: ${message}`, { errors: [{ path: 'deadline', message }] });
}

/** `retryAfterS`: server.retryAfterS, in Retry-After (a client that honours it tries again rather than fail: it had none). */
export function shuttingDown(retryAfterS: number): ServiceError {
  return new ServiceError(503, 'shutting-down', 'Shutting down', `the server is shutting down and accepts no jobs: retry against the restarted server (retry after ${retryAfterS} s)`, { retryAfterS });
}

export function conflict(id: string): ServiceError {
  return new ServiceError(409, 'job-conflict', 'Job id in use', `job ${id} exists with a different body: resubmit the identical body (a no-op) or use a new id`);
}

export function notFound(id: string): ServiceError {
  // (GET /v1/jobs/ read as a job of no id: 'no job ""'.)
  if (id === '') return new ServiceError(404, 'job-not-found', 'No such job', 'no job id given: GET /v1/jobs/ID for a job, GET /v1/jobs for the list');
  return new ServiceError(404, 'job-not-found', 'No such job', `no job ${JSON.stringify(id)}: it was never submitted, or it finished more than server.resultTtlS ago and was purged`);
}

/** 429: the pending jobs are at server.maxPendingJobs (`where`: "pending", or "pending in the cluster"). */
export function tooManyJobs(max: number, where: string, retryAfterS: number): ServiceError {
  return new ServiceError(429, 'too-many-jobs', 'Too many pending jobs', `${max} jobs are ${where} (server.maxPendingJobs): retry after ${retryAfterS} s`, { retryAfterS });
}

/** 409: a cancel of a job that has already ended. */
export function jobFinished(id: string, state: string): ServiceError {
  return new ServiceError(409, 'job-finished', 'Job already finished', `job ${id} has already ended (${state}); there is nothing to cancel`);
}

/**
 * `retry: false` on an error (or on an item's `{ error }` result): trying the partition again would
 * fail the same way — a bad input — so its job fails at once, without its retries. Threads,
 * processes and HTTP endpoints carry it across as a field of their answers (a thread's structured
 * clone of an Error keeps only its message).
 */
export function noRetry(e: unknown): boolean {
  return e !== null && typeof e === 'object' && (e as { retry?: unknown }).retry === false;
}

/** An item's `{ error }` answer for the Error a module returned in its place (its `retry: false` kept). */
export function itemError(e: Error): { error: string; retry?: false } {
  return noRetry(e) ? { error: e.message, retry: false } : { error: e.message };
}

/** The Error for a failure that arrived as a message, `retry: false` when the sender said so. */
export function failure(message: string, retry?: unknown): Error {
  const e = new Error(message);
  return retry === false ? Object.assign(e, { retry: false as const }) : e;
}

/**
 * `workerLost: true` on a device step's error: the worker that ran it is out of service from now
 * (a process device's worker whose next process starts seconds later), told with the failure so
 * that the engine sends it nothing more first.
 */
export function workerLostWith(e: unknown): boolean {
  return e !== null && typeof e === 'object' && (e as { workerLost?: unknown }).workerLost === true;
}

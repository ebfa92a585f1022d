/**
 * A node's link to the cluster's Redis: opening its connections, waiting for Redis at start, an
 * API call's 503 while Redis is away or slow, and what Redis's persistence settings mean for the
 * cluster's jobs.
 */
import { Redis } from 'ioredis';
import { redactUrl } from '../runtime/redact.js';
import { ConfigError } from '../server/config.js';
import { ServiceError } from '../server/errors.js';

/** How long an API call waits for Redis before it answers 503. */
export const REDIS_ANSWER_MS = 3000;

/** Each connection's last error: said when a node cannot reach Redis at start (an unknown host, a TLS handshake refused). */
const lastErrors = new WeakMap<Redis, Error>();

/** Opens a connection named `name` to the Redis at `url`; it reconnects by itself and never throws on its own errors. */
export function connectRedis(url: string, name: string): Redis {
  const r = new Redis(url, { maxRetriesPerRequest: null, connectionName: name, lazyConnect: false });
  r.on('error', (e: Error) => {
    // ioredis reconnects by itself; commands fail while it is away
    lastErrors.set(r, e);
  });
  return r;
}

/**
 * Waits for `ready` (the first answers of `conns`); when it fails, or after 5 s, throws naming
 * cluster.redis, the Redis at `url`, why (the failure, else the connections' last error) and the
 * fix — exit 1, as for the port taken: what is away or broken outside the input (a supervisor's
 * retry may find it).
 */
export async function reachRedis(url: string, conns: readonly Redis[], ready: Promise<unknown>): Promise<void> {
  const refuse = (why: string) => new Error(`cluster: cluster.redis: cannot reach Redis at ${redactUrl(url)} ${why}: start it, or fix --cluster / cluster.redis`);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // (A plain Redis never answers a TLS handshake: no error to tell of.)
      const last = conns.map((c) => lastErrors.get(c)?.message).find((m) => m !== undefined) ?? (url.startsWith('rediss:') ? 'no answer to the TLS handshake of rediss://: is TLS on at that port?' : undefined);
      reject(refuse(`within 5 s${last === undefined ? '' : ` (${last})`}`));
    }, 5000);
  });
  try {
    await Promise.race([ready.catch((e: unknown) => Promise.reject(refuse(`(${e instanceof Error ? e.message : String(e)})`))), timeout]);
  } finally {
    // A pending timer would hold a node that failed to join for 5 s more.
    clearTimeout(timer);
  }
}

/**
 * Refuses (a ConfigError: exit 2) a database the URL names (`redis://host:port/N`) that the server
 * does not have: ioredis only emits the failed SELECT as an error event and goes on in database 0
 * — another cluster's queues (a user trial: `/99` joined database 0's cluster).
 */
export async function checkDatabase(redis: Redis, url: string): Promise<void> {
  const db = redis.options.db ?? 0;
  if (db === 0) return;
  try {
    await redis.select(db);
  } catch (e) {
    const n = await redis.config('GET', 'databases').then((r) => Number((r as string[])[1]), () => NaN);
    const has = Number.isInteger(n) && n > 0 ? `the server has ${n} database${n === 1 ? '' : 's'}: 0..${n - 1}` : `the server has fewer than ${db + 1} databases`;
    throw new ConfigError([
      { source: 'cluster', path: 'cluster.redis', message: `database ${db} of ${redactUrl(url)}: ${e instanceof Error ? e.message : String(e)} — ${has}: name one of those at the end of the URL (redis://host:port/N), or raise "databases" in the server's redis.conf` },
    ]);
  }
}

/**
 * Runs an API call that needs Redis: while Redis is away, or when it does not answer within
 * REDIS_ANSWER_MS, the caller gets 503 with Retry-After at once instead of a request that hangs
 * until Redis returns (ioredis would queue the commands for as long as it takes). `url` and
 * `retryAfterS` are said in the 503.
 */
export async function guardRedis<T>(redis: Redis, how: { url: string; retryAfterS: number }, fn: () => Promise<T>): Promise<T> {
  const down = (why: string) =>
    new ServiceError(503, 'redis-unavailable', 'Redis unavailable', `the cluster's Redis (${redactUrl(how.url)}) ${why}: jobs can be neither taken nor read now; retry after ${how.retryAfterS} s (the jobs this node holds go on)`, { retryAfterS: how.retryAfterS });
  if (redis.status !== 'ready') throw down(`is unreachable (connection ${redis.status})`);
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([fn(), new Promise<never>((_, reject) => (timer = setTimeout(() => reject(down(`did not answer within ${REDIS_ANSWER_MS / 1000} s`)), REDIS_ANSWER_MS)))]);
  } catch (e) {
    if (!(e instanceof ServiceError) && redis.status !== 'ready') throw down(`went away during the request (${e instanceof Error ? e.message : String(e)})`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/** Redis's persistence settings, and what they mean for the jobs (said when a node starts). */
export async function persistenceNote(redis: Redis): Promise<string> {
  let aof: string | undefined;
  let save: string | undefined;
  try {
    const a = (await redis.config('GET', 'appendonly')) as string[];
    const v = (await redis.config('GET', 'save')) as string[];
    aof = a[1];
    save = v[1];
  } catch {
    return `Redis persistence: unknown (CONFIG GET refused); should Redis lose its data, each node queues again the jobs it accepted and republishes the results it holds`;
  }
  if (aof === 'yes') return 'Redis persistence: appendonly yes: the queue survives a Redis restart';
  // (A snapshot restored is the same dataset: the nodes see it went back in time by Redis's clock, see Recovery.)
  if (save) return `Redis persistence: RDB snapshots (save ${save}): a restart goes back to the last snapshot — the nodes up through it see that, queue again the jobs they accepted since and republish those that ended since (nodes all restarted since cannot tell); appendonly yes needs none of it`;
  return 'Redis persistence: none (save "", appendonly no): a restart loses the whole queue; each node then queues again the jobs it accepted (from its journal) and republishes the results it holds';
}

import os from 'node:os';
import { randomUUID } from 'node:crypto';
import { Job, Queue, Worker } from 'bullmq';
import { Gauge } from 'prom-client';
import type { Redis } from 'ioredis';
import { redactUrl } from '../runtime/redact.js';
import { jobView, withoutResultOver, type JobView, type StatusView } from '../server/api.js';
import { VIEW_RESULT_MAX_BYTES } from '../server/journal-schema.js';
import type { ApiService } from '../server/app.js';
import type { ServeConfig } from '../server/config.js';
import { conflict, jobFinished, notFound, refusePastDeadline, ServiceError, shuttingDown, tooManyJobs } from '../server/errors.js';
import { Journal, type JobState, type JournalJobInput } from '../server/journal.js';
import { isFinal, type StatesPage } from '../server/progress.js';
import type { KindView } from '../server/kinds.js';
import { stderrLog, type ServerLog } from '../server/log.js';
import type { Service } from '../server/service.js';
import { Dispatcher } from './dispatcher.js';
import { acceptedData, acceptedRecord, bullId, BULL_PRIORITY, K, PREFIX, queueName, writeCancelled, type CancelledRecord, type JobData, type KindEntry, type RunningRecord } from './keys.js';
import { Recovery } from './recovery.js';
import { checkDatabase, connectRedis, guardRedis, persistenceNote, reachRedis, REDIS_ANSWER_MS } from './redis-link.js';
import { Registry } from './registry.js';
import { ClusterViews } from './views.js';

export type { NodeInfo } from './registry.js';

/**
 * Cluster mode: every node's HTTP API submits into a BullMQ queue per job kind on a shared Redis;
 * each node's dispatcher *pulls* the next job (`getNextJob`) from the queues of the kinds it runs,
 * only when its own engine wants one (no queued partitions left, budget not blocking, fewer than
 * `maxHeld` jobs held), runs it on its local {@link Service} (journal + runtime + pacer), renews
 * the job's lock while it works and completes or fails the BullMQ job with the outcome. A node
 * that dies stops renewing: BullMQ's stalled check (every node runs it for its kinds) returns its
 * jobs to the queue after `cluster.lockMs`, and only the holder of the current lock can record a
 * result, so each job ends exactly once. A job of a kind no live node runs stays queued.
 *
 * The cluster's kinds live in a registry (`stoker:cluster:kinds`: name → content hash of the
 * module, input schema): a node whose module for a kind differs from the one the live nodes run
 * refuses to join, naming the kind; any node validates a submission of a kind it does not run
 * itself against the registry's schema.
 */

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** How often a node checks the jobs it accepted against Redis (ended: forgotten; lost: queued again). */
const SWEEP_MS = 2000;

export class ClusterService implements ApiService {
  readonly nodeId: string;
  private readonly redis: Redis;
  private readonly sub: Redis;
  /** Every kind's queue this node has touched (submitting, reading), by kind. */
  private readonly queues = new Map<string, Queue<JobData>>();
  /** The kinds this node runs: a worker on each one's queue. */
  private readonly workers = new Map<string, Worker<JobData>>();
  private readonly registry: Registry;
  private readonly dispatcher: Dispatcher;
  private readonly maxHeld: number;
  /** How long a finished job's bookkeeping lives: server.resultTtlS, as BullMQ's removeOnComplete/removeOnFail. */
  private readonly ttlMs: number;
  private closing = false;
  private started = false;
  private readonly conns: Redis[] = [];
  private readonly views: ClusterViews;
  private readonly recovery: Recovery;
  private sweeper: NodeJS.Timeout | undefined;
  /** The shared queues' jobs, read every cluster.heartbeatMs for /metrics (a scrape does not wait on Redis). */
  private queueCounts: { queued: number; running: number } | undefined;
  private queueTimer: NodeJS.Timeout | undefined;
  /** What Redis's persistence settings mean for the cluster's jobs (said at start). */
  persistence = '';

  /**
   * `accepted`: this node's journal of the submissions it acknowledged, kept until their jobs end
   * (a Redis restart without persistence loses the queue: each node queues its own again).
   */
  constructor(
    readonly config: ServeConfig,
    readonly local: Service,
    private readonly accepted: Journal,
    log: ServerLog = stderrLog,
  ) {
    const c = config.cluster;
    this.nodeId = c.nodeId;
    this.redis = this.conn('');
    this.sub = this.conn('-sub');
    // Said when Redis goes away and when it is back (nothing was: only /readyz and the 503s showed it).
    let awaySince: number | undefined;
    let wasReady = false;
    this.redis.on('ready', () => {
      if (awaySince !== undefined) log(`stoker serve: the cluster's Redis (${redactUrl(c.redis)}) is back, after ${((performance.now() - awaySince) / 1000).toFixed(1)} s away`);
      awaySince = undefined;
      wasReady = true;
    });
    this.redis.on('close', () => {
      if (!wasReady || awaySince !== undefined || this.closing) return;
      awaySince = performance.now();
      log(`stoker serve: the cluster's Redis (${redactUrl(c.redis)}) went away: calls that need it get 503 until it is back (the jobs this node holds go on); reconnecting`);
    });
    this.ttlMs = Math.max(1, Math.round(config.server.resultTtlS)) * 1000;
    this.maxHeld = Math.max(8, 4 * Math.ceil(config.device.workers + config.engine.targetWaiting));
    // This process's hold on the node name (K.claim): its host and pid (a dead predecessor of this host is told at once), and a token of its own.
    const claim = JSON.stringify({ host: os.hostname(), pid: process.pid, token: randomUUID() });
    this.dispatcher = new Dispatcher(local, this.redis, this.workers, { nodeId: c.nodeId, claim, lockMs: c.lockMs, heartbeatMs: c.heartbeatMs, ttlMs: this.ttlMs, maxHeld: this.maxHeld, endedElsewhere: (id) => this.recovery.endedElsewhere(id), clockWrite: () => this.recovery.clockWrite(), takesWaiting: () => this.recovery.waiting, log: (line) => log(`stoker serve: ${line}`) });
    local.onPartitionOutput = (id, partition, output) => this.dispatcher.share(id, partition, output);
    this.registry = new Registry({ redis: this.redis, nodeId: c.nodeId, local, claim, claimMs: 3 * c.heartbeatMs });
    // The backlog of the whole cluster, for alerts and autoscaling: the nodes' own stoker_jobs count only what each holds.
    const queues = () => this.queueCounts;
    new Gauge({
      name: 'stoker_cluster_queue_jobs',
      help: "Jobs in the cluster's shared queues (every kind, every node), by state: queued, running (read every cluster.heartbeatMs; jobs republished after a Redis data loss are not in them)",
      labelNames: ['state'],
      registers: [local.metrics.registry],
      collect() {
        const q = queues();
        this.set({ state: 'queued' }, q?.queued ?? 0);
        this.set({ state: 'running' }, q?.running ?? 0);
      },
    });
    this.views = new ClusterViews({ redis: this.redis, queueOf: (k) => this.queueOf(k), isHeld: (id) => this.dispatcher.held.has(id), local });
    this.recovery = new Recovery({
      redis: this.redis,
      accepted,
      views: this.views,
      queueOf: (k) => this.queueOf(k),
      register: () => this.registry.register(),
      markHeld: () => this.dispatcher.markHeld(),
      local,
      nodeId: c.nodeId,
      dataDir: config.dataDir,
      ttlMs: this.ttlMs,
      closing: () => this.closing,
      log: (line) => log(`stoker serve: ${line}`),
    });
  }

  /**
   * A BullMQ worker on the queue of each kind this node runs, opened once Redis answers: BullMQ
   * closed while its connection still connects emits that connection's error where no listener
   * is left (an unknown host, or a rediss:// URL to a plain Redis, crashed the node with a stack
   * trace after the error line).
   */
  private openWorkers(): void {
    const c = this.config.cluster;
    for (const kind of this.local.loadedKinds().keys()) {
      const w = new Worker<JobData>(queueName(kind), null, {
        connection: this.conn(`-worker-${kind}`),
        prefix: PREFIX,
        autorun: false,
        lockDuration: c.lockMs,
        stalledInterval: Math.max(100, Math.round(c.lockMs / 2)),
        // A job is never given up for stalling: it goes back to the queue as often as its nodes die.
        maxStalledCount: 1_000_000,
        skipLockRenewal: true,
        name: c.nodeId,
      });
      w.on('error', () => undefined);
      this.workers.set(kind, w);
      this.queueOf(kind);
    }
  }

  private conn(name: string): Redis {
    const r = connectRedis(this.config.cluster.redis, `stoker-${this.config.cluster.nodeId}${name}`);
    this.conns.push(r);
    return r;
  }

  /** The queue of a kind (opened on first use). */
  private queueOf(kind: string): Queue<JobData> {
    let q = this.queues.get(kind);
    if (!q) {
      q = new Queue<JobData>(queueName(kind), { connection: this.redis, prefix: PREFIX });
      q.on('error', () => undefined);
      this.queues.set(kind, q);
    }
    return q;
  }

  /** Every kind the cluster knows (the registry) and this node's own. */
  private async allKinds(): Promise<string[]> {
    const names = await this.redis.hkeys(K.kinds).catch(() => [] as string[]);
    return [...new Set([...this.workers.keys(), ...names])].sort();
  }

  /** Job counts summed over the queues of `kinds`. */
  private async counts(kinds: readonly string[], ...types: ('waiting' | 'prioritized' | 'delayed' | 'active' | 'completed' | 'failed')[]): Promise<Record<string, number>> {
    const sum: Record<string, number> = Object.fromEntries(types.map((t) => [t, 0]));
    for (const k of kinds) {
      const c = await this.queueOf(k).getJobCounts(...types);
      for (const t of types) sum[t] = (sum[t] ?? 0) + (c[t] ?? 0);
    }
    return sum;
  }

  get events() {
    return this.local.events;
  }
  replay(lastEventId: string) {
    return this.local.replay(lastEventId);
  }
  get metrics() {
    return this.local.metrics;
  }

  /**
   * Checks Redis answers (fails fast with a clear message) in the database the URL names (one the
   * server lacks: a ConfigError), registers this node's kinds (a module that differs from the one
   * live nodes run for the same kind refuses to join: a KindModuleError naming it), subscribes to
   * cancels and to jobs added.
   */
  async connect(): Promise<void> {
    const url = this.config.cluster.redis;
    await reachRedis(url, this.conns, Promise.all([this.redis.ping(), this.sub.ping()]));
    await checkDatabase(this.redis, url);
    this.openWorkers();
    await reachRedis(url, this.conns, Promise.all([...this.workers.values()].map((w) => w.waitUntilReady())));
    await this.registry.claimNodeId();
    await this.registry.register();
    this.persistence = await persistenceNote(this.redis);
    await this.sub.subscribe(K.cancelChannel, K.addedChannel);
    this.sub.on('message', (ch: string, msg: string) => {
      if (ch === K.cancelChannel) {
        this.dispatcher.cancelHeld(msg);
        void this.endAcceptedIfCancelled(msg).catch(() => undefined); // Redis away: the sweep ends it
      }
      if (ch === K.addedChannel && this.workers.has(msg)) this.dispatcher.wakeUp();
    });
  }

  /** Starts the heartbeat, the stalled check and the pull loop. */
  start(url: string): void {
    this.started = true;
    for (const w of this.workers.values()) void w.startStalledCheckTimer();
    this.dispatcher.start(url);
    this.sweeper = setInterval(() => void this.recovery.sweep(), SWEEP_MS);
    void this.recovery.sweep();
    this.queueTimer = setInterval(() => void this.readQueues(), this.config.cluster.heartbeatMs);
    void this.readQueues();
  }

  /** The queues' counts over every kind, for the gauge (kept as they were while Redis is away). */
  private async readQueues(): Promise<void> {
    if (this.redis.status !== 'ready') return;
    try {
      const c = await this.counts(await this.allKinds(), 'waiting', 'prioritized', 'delayed', 'active');
      this.queueCounts = { queued: (c['waiting'] ?? 0) + (c['prioritized'] ?? 0) + (c['delayed'] ?? 0), running: c['active'] ?? 0 };
    } catch {
      // Redis went away meanwhile: the next beat reads again.
    }
  }

  /**
   * Every kind the cluster runs: this node's, then those only other nodes run, from the registry
   * (their memory is known only where they run: null). A client asks any node (a 400's hint sent
   * it here from a node that did not run the kind, and it was not listed).
   */
  async kindList(): Promise<KindView[]> {
    const own = this.local.kindList();
    if (this.redis.status !== 'ready') return own;
    const others: KindView[] = [];
    for (const name of await this.allKinds()) {
      if (own.some((k) => k.name === name)) continue;
      const k = await this.registry.remoteKind(name).catch(() => undefined);
      if (k) others.push({ name, description: k.description, input: k.schema ?? null, memory: null, partitionsFromInput: k.derivesPartitions });
    }
    return [...own, ...others];
  }
  timelineView(sinceMs: number, maxSpans?: number) {
    return this.local.timelineView(sinceMs, maxSpans);
  }
  historyView(sinceMs: number) {
    return this.local.historyView(sinceMs);
  }
  /** This node's own journal (its jobs as it runs them; the cluster's queue is Redis's). */
  backup(): Promise<string> {
    return this.local.backup();
  }

  trace(sinceMs: number) {
    return this.local.trace(sinceMs);
  }

  // ─── The API ──────────────────────────────────────────────────────────────────────────────

  /** Runs an API call that needs Redis: a 503 at once while Redis is away or slow to answer (see {@link guardRedis}). */
  private withRedis<T>(fn: () => Promise<T>): Promise<T> {
    return guardRedis(this.redis, { url: this.config.cluster.redis, retryAfterS: this.config.server.retryAfterS }, fn);
  }

  /**
   * A submission without an id gets one here, before Redis: where Redis answers too late (503)
   * the job may still have been queued, and the 503 names the id to retry with — a retry without
   * it would be a second job (a user trial: a submit answered 503 ran).
   */
  submit(raw: unknown): Promise<{ job: JobView; created: boolean }> {
    const body = raw !== null && typeof raw === 'object' && !Array.isArray(raw) && (raw as { id?: unknown }).id === undefined ? { ...raw, id: randomUUID() } : raw;
    const id = (body as { id?: unknown } | null)?.id;
    return this.withRedis(() => this.submitNow(body)).catch((e: unknown) => {
      if (e instanceof ServiceError && e.status === 503 && typeof id === 'string') {
        throw new ServiceError(503, e.type, e.title, `${e.detail}; this job may have been accepted as ${JSON.stringify(id)}: retry with "id": ${JSON.stringify(id)} (the same id and body run once)`, e.extra);
      }
      throw e;
    });
  }

  notReady(): string[] {
    const silentMs = this.dispatcher.waitingForRedisMs();
    const redis = this.redis.status !== 'ready' ? [`the cluster's Redis is away (${this.redis.status})`] : silentMs > REDIS_ANSWER_MS ? [`the cluster's Redis has not answered for ${(silentMs / 1000).toFixed(0)} s (connected, but not answering: every call that needs it gets 503)`] : [];
    return [...this.local.notReady(), ...redis];
  }

  /** The job's view; a result over VIEW_RESULT_MAX_BYTES is left out (by its size) unless `full`. */
  job(id: string, page?: StatesPage, full = false): Promise<JobView | undefined> {
    return this.withRedis(async () => {
      const v = (await this.views.find(id, page))?.view ?? this.acceptedView(id);
      if (!v && (await this.recovery.unsettled())) throw this.republishing(`no job "${id}" in Redis, which lost its data moments ago: the nodes are republishing the jobs they ran`);
      return v && (full ? v : withoutResultOver(v, VIEW_RESULT_MAX_BYTES));
    });
  }

  /** The 503 while a Redis data loss is not settled: `why`, and when to retry. */
  private republishing(why: string): ServiceError {
    const after = this.config.server.retryAfterS;
    return new ServiceError(503, 'republishing', 'Republishing', `${why} — retry after ${after} s`, { retryAfterS: after });
  }

  /**
   * A job this node accepted that Redis no longer has and that is not queued again yet (after a
   * data loss, see Recovery): `queued`, from its acceptance record — not a 404 saying it was
   * never submitted, which a client takes for a lost job.
   */
  private acceptedView(id: string): JobView | undefined {
    const j = this.accepted.get(id);
    if (!j || isFinal(j.state)) return undefined;
    return jobView({ record: acceptedRecord(j), state: 'queued', submittedAt: j.submittedAt, startedAt: null, finishedAt: null, partitionsDone: 0, partitionStates: null, partitionCounts: null, resumes: 0, result: { result: null }, error: null, node: null });
  }

  jobs(options: { limit?: number; states?: readonly JobState[]; before?: string } = {}): Promise<JobView[]> {
    // (A node lists from BullMQ's queues, the newest per state: they give no order to page through.)
    if (options.before !== undefined) throw new ServiceError(400, 'bad-query', 'Bad query', 'before: cluster mode has no pages (a node lists the newest jobs of each state from the queues, up to limit): narrow the list with state, or read a job by its id');
    return this.withRedis(() => this.jobsNow(options));
  }

  cancel(id: string): Promise<JobView> {
    // Not under the answer timeout: a running job's cancel waits up to 10 s for its holder (each read is).
    if (this.redis.status !== 'ready') return this.withRedis(() => this.cancelNow(id));
    return this.cancelNow(id);
  }

  status(): Promise<StatusView> {
    return this.withRedis(() => this.statusNow());
  }

  cluster(): Promise<object> {
    return this.withRedis(() => this.clusterNow());
  }

  private async submitNow(raw: unknown): Promise<{ job: JobView; created: boolean }> {
    if (this.closing) throw shuttingDown(this.config.server.retryAfterS);
    // The same body sent again is the same job, before any check that a kind's new version (its
    // defaults, its schema), or a node without its module, would answer otherwise (as a local
    // server's intake does).
    const sentHash = Journal.sentHash(raw);
    const sentId = (raw as { id?: unknown } | null)?.id;
    // (The job under the id sent, looked up once: below too.)
    let found: Awaited<ReturnType<ClusterViews['find']>> | null = null;
    if (sentHash !== undefined && typeof sentId === 'string') {
      const existing = (found = await this.views.find(sentId));
      if (existing && existing.data.sentHash === sentHash) {
        this.keepAccepted({ ...existing.data.record, sentHash }, existing.view);
        return { job: existing.view, created: false };
      }
    }
    const name = (raw as { kind?: unknown } | null)?.kind;
    const other = typeof name === 'string' && !this.workers.has(name) ? await this.registry.remoteKind(name) : undefined;
    // (Just after Redis lost its data the registry is empty until the nodes register again: a kind
    // this node does not run read as unknown, a 400 a client gives up on.)
    if (typeof name === 'string' && !this.workers.has(name) && other === undefined && (await this.recovery.unsettled())) {
      throw this.republishing(`kind ${JSON.stringify(name)} is not in Redis's registry, which lost its data moments ago: the nodes are registering their kinds again`);
    }
    if (other?.derivesPartitions && (raw as { partitions?: unknown }).partitions === undefined) {
      throw new ServiceError(400, 'invalid-job', 'Invalid job', `partitions: kind ${other.name} derives its partitions from the input on the nodes that run it: give partitions, or submit to one of those nodes`, {
        errors: [{ path: 'partitions', message: `kind ${other.name} derives its partitions from the input on the nodes that run it: give partitions, or submit to one of those nodes` }],
      });
    }
    const kinds = await this.allKinds();
    const parsed = this.local.parseSubmission(raw, { kind: (n) => (other && n === other.name ? other : undefined), names: () => kinds });
    const { explicitId } = parsed;
    const record: JournalJobInput = { ...parsed.record, ...(sentHash === undefined ? {} : { sentHash }) };
    const hash = Journal.hash({ kind: record.kind, priority: record.priority, partitions: record.partitions, input: record.input, deadline: record.deadline });
    if (explicitId) {
      const existing = found !== null && sentId === record.id ? found : await this.views.find(record.id);
      if (existing) {
        if (existing.data.hash !== hash) throw conflict(record.id);
        this.keepAccepted(record, existing.view);
        return { job: existing.view, created: false };
      }
    }
    refusePastDeadline(record.deadline);
    const counts = await this.counts(kinds, 'waiting', 'prioritized', 'delayed', 'active');
    const pending = Object.values(counts).reduce((a, b) => a + b, 0);
    const max = this.config.server.maxPendingJobs;
    if (pending >= max) {
      throw tooManyJobs(max, 'pending in the cluster', this.config.server.retryAfterS);
    }
    const data: JobData = { record: parsed.record, hash, ...(sentHash === undefined ? {} : { sentHash }), submittedAt: Date.now(), nonce: randomUUID() };
    const ttl = { age: this.ttlMs / 1000 };
    // The id names one kind's queue for good: the same id submitted as another kind is a conflict.
    const claimed = await this.redis.set(K.kindOf(record.id), record.kind, 'NX');
    if (claimed === null && (await this.redis.get(K.kindOf(record.id))) !== record.kind) throw conflict(record.id);
    await this.queueOf(record.kind).add('job', data, { jobId: bullId(record.id), priority: BULL_PRIORITY[record.priority], attempts: 1, removeOnComplete: ttl, removeOnFail: ttl });
    void this.redis.publish(K.addedChannel, record.kind).catch(() => undefined);
    // Another node may have added the same id a moment earlier: BullMQ kept the first.
    const now = await this.views.find(record.id);
    if (!now) throw new ServiceError(500, 'internal', 'Internal error', `job ${record.id} vanished right after it was queued`);
    if (now.data.hash !== hash && !(sentHash !== undefined && now.data.sentHash === sentHash)) throw conflict(record.id);
    const created = now.data.nonce === data.nonce;
    this.keepAccepted(record, now.view);
    return { job: now.view, created };
  }

  /**
   * Keeps an unfinished job this node answered for in its accepted journal, so that it queues the
   * job again should Redis lose it — also when the job was already there: the node that queued it
   * may have died before its own journal had it (a client's retry then lands here).
   */
  private keepAccepted(record: JournalJobInput, view: JobView): void {
    if (isFinal(view.state)) return;
    try {
      this.accepted.insert(record);
    } catch {
      // A full disk here: the job is in Redis (as without this journal); only a Redis data loss could lose it.
    }
  }

  private async jobsNow(options: { limit?: number; states?: readonly JobState[] }): Promise<JobView[]> {
    const limit = options.limit ?? 50;
    if (limit === 0) return [];
    const want = new Set<JobState>(options.states ?? ['queued', 'running', 'done', 'failed', 'cancelled']);
    const types = new Set<'waiting' | 'prioritized' | 'delayed' | 'active' | 'completed' | 'failed'>();
    if (want.has('queued')) ['waiting', 'prioritized', 'delayed'].forEach((t) => types.add(t as 'waiting'));
    if (want.has('running')) types.add('active');
    if (want.has('done')) types.add('completed');
    if (want.has('failed') || want.has('cancelled')) types.add('failed');
    const jobs: (Job<JobData> | undefined)[] = [];
    if (types.size > 0) for (const k of await this.allKinds()) jobs.push(...(await this.queueOf(k).getJobs([...types], 0, limit - 1, false)));
    const views: JobView[] = [];
    for (const j of jobs) {
      if (!j) continue;
      const v = await this.views.viewOf(j);
      if (want.has(v.state)) views.push(v);
    }
    // The jobs a node still runs that Redis lost (see K.running): no queue holds them.
    if (want.has('running')) {
      const listed = new Set(views.map((v) => v.id));
      const ids = await this.redis.smembers(K.runningIndex);
      const raws = ids.length === 0 ? [] : await this.redis.mget(ids.map(K.running));
      const gone = ids.filter((_, i) => raws[i] === null);
      if (gone.length > 0) await this.redis.srem(K.runningIndex, ...gone);
      for (const raw of raws) {
        const rec = raw === null ? undefined : (JSON.parse(raw) as RunningRecord);
        if (rec && !listed.has(rec.data.record.id)) views.push(this.views.runningView(rec));
      }
    }
    // An end (a cancel while queued, a republished result) stands for a copy in the queues that has
    // not ended — one queued again, or left from before Redis went back in time, that ends with it
    // when taken — as a read of the job gives it: the list showed it queued beside a done read.
    const at = new Map(views.map((v, i) => [v.id, i]));
    const ended = (v: JobView) => {
      const i = at.get(v.id);
      if (i === undefined) {
        if (want.has(v.state)) at.set(v.id, views.push(v) - 1);
      } else if (!isFinal((views[i] as JobView).state)) views[i] = v;
    };
    if (want.has('cancelled')) {
      await this.redis.zremrangebyscore(K.cancelledIndex, '-inf', Date.now() - this.ttlMs);
      const ids = await this.redis.zrevrange(K.cancelledIndex, 0, limit - 1);
      const raws = ids.length === 0 ? [] : await this.redis.mget(ids.map(K.cancelled));
      for (const raw of raws) if (raw !== null) ended(this.views.cancelledView(JSON.parse(raw) as CancelledRecord));
    }
    // The results the nodes republished after Redis lost its data: the queues no longer hold those jobs.
    if (want.has('done') || want.has('failed') || want.has('cancelled')) {
      await this.redis.zremrangebyscore(K.resultIndex, '-inf', Date.now() - this.ttlMs);
      const ids = await this.redis.zrevrange(K.resultIndex, 0, limit - 1);
      const raws = ids.length === 0 ? [] : await this.redis.mget(ids.map(K.result));
      for (const raw of raws) {
        const v = raw === null ? undefined : (JSON.parse(raw) as JobView);
        if (v) ended(v);
      }
    }
    // (An end put in a copy's place may be of a state not asked for.)
    return views.filter((v) => want.has(v.state)).sort((a, b) => Date.parse(b.submittedAt) - Date.parse(a.submittedAt)).slice(0, limit).map((v) => withoutResultOver(v, VIEW_RESULT_MAX_BYTES));
  }

  async wait(id: string, waitMs: number): Promise<JobView | undefined> {
    const end = performance.now() + waitMs;
    for (;;) {
      const v = await this.job(id, undefined, true);
      if (!v || isFinal(v.state) || performance.now() >= end || this.closing) return v;
      await sleep(Math.min(50, Math.max(1, end - performance.now())));
    }
  }

  /** Queued: removed and recorded cancelled. Running: the holder (whichever node) is told and fails it as cancelled. */
  private async cancelNow(id: string): Promise<JobView> {
    const found = await this.withRedis(() => this.views.find(id));
    if (!found) return this.cancelAccepted(id);
    const { view, job } = found;
    if (view.state === 'cancelled') return view;
    if (isFinal(view.state)) throw jobFinished(id, view.state);
    await this.redis.set(K.cancelRequest(id), '1', 'PX', this.ttlMs);
    if (job && view.state === 'queued') {
      const rec: CancelledRecord = { data: job.data, cancelledAt: Date.now() };
      await this.redis.set(K.cancelled(id), JSON.stringify(rec), 'PX', this.ttlMs);
      try {
        await job.remove();
        await this.redis.multi()
          .del(K.cancelRequest(id))
          .pexpire(K.kindOf(id), this.ttlMs)
          .zadd(K.cancelledIndex, rec.cancelledAt, id)
          .zremrangebyscore(K.cancelledIndex, '-inf', rec.cancelledAt - this.ttlMs)
          .exec();
        const cancelled = this.views.cancelledView(rec);
        this.acceptedCancelled(id, cancelled);
        // (The node that accepted it, if another, ends its acceptance record as well; a message lost, its sweep does.)
        void this.redis.publish(K.cancelChannel, id).catch(() => undefined);
        return cancelled;
      } catch {
        // A node took it meanwhile: tell the holder.
        await this.redis.del(K.cancelled(id));
      }
    }
    await this.redis.publish(K.cancelChannel, id);
    const v = await this.wait(id, 10_000);
    return v ?? view;
  }

  /**
   * The cancel of a job Redis lost that this node accepted and has not queued again yet (see
   * acceptedView): recorded cancelled as one cancelled while queued is, so that it is not queued
   * again (it was a 404); else the job is unknown here.
   */
  private async cancelAccepted(id: string): Promise<JobView> {
    const j = this.accepted.get(id);
    if (!j || isFinal(j.state)) throw notFound(id);
    const rec: CancelledRecord = { data: acceptedData(j), cancelledAt: Date.now() };
    await writeCancelled(this.redis.multi(), rec, this.ttlMs).exec();
    const cancelled = this.views.cancelledView(rec);
    this.acceptedCancelled(id, cancelled);
    return cancelled;
  }

  /**
   * A job cancelled while queued that this node accepted: its acceptance record ends now, not at
   * the next sweep — a Redis data loss in between had it queued again (the cancel undone).
   */
  private acceptedCancelled(id: string, view: JobView): void {
    const j = this.accepted.get(id);
    if (!j || isFinal(j.state)) return;
    try {
      this.accepted.finish(id, { state: 'cancelled', code: view.error?.code ?? 'E_CANCELLED', reason: view.error?.reason ?? '' });
    } catch {
      // A full disk: the sweep ends it once it can write
    }
  }

  /** A cancel announced by another node: where it was of a queued job this node accepted, its acceptance record ends (acceptedCancelled). */
  private async endAcceptedIfCancelled(id: string): Promise<void> {
    const j = this.accepted.get(id);
    if (!j || isFinal(j.state)) return;
    const raw = await this.redis.get(K.cancelled(id));
    if (raw !== null) this.acceptedCancelled(id, this.views.cancelledView(JSON.parse(raw) as CancelledRecord));
  }

  private async statusNow(): Promise<StatusView> {
    const queue = await this.counts(await this.allKinds(), 'waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed');
    return { ...this.local.status(), cluster: { node: this.nodeId, redis: redactUrl(this.config.cluster.redis), queue, jobsHeld: this.dispatcher.held.size, maxHeld: this.maxHeld, kinds: [...this.workers.keys()] } };
  }



  /**
   * `GET /v1/cluster`: live nodes (from their heartbeats), the queues summed, and per kind its
   * module's hash, the nodes that run it and its queue — `unserved` names the kinds with queued
   * jobs that no live node runs (they wait until one joins).
   */
  private async clusterNow(): Promise<object> {
    const nodes = await this.registry.liveNodes();
    const names = await this.allKinds();
    const types = ['waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed'] as const;
    const kinds = [];
    for (const name of names) {
      const raw = await this.redis.hget(K.kinds, name);
      const c = await this.queueOf(name).getJobCounts(...types);
      kinds.push({ name, hash: raw === null ? null : (JSON.parse(raw) as KindEntry).hash, nodes: nodes.filter((n) => n.kinds.includes(name)).map((n) => n.nodeId), queued: (c['waiting'] ?? 0) + (c['prioritized'] ?? 0) + (c['delayed'] ?? 0), running: c['active'] ?? 0 });
    }
    const queue = await this.counts(names, ...types);
    const unserved = kinds.filter((k) => k.nodes.length === 0 && k.queued > 0).map((k) => k.name);
    const workers = nodes.reduce((a, n) => a + n.workers, 0);
    const totals = {
      nodes: nodes.length,
      workers,
      // (null while no node has measured its devices yet: 0 read as a cluster that can do nothing.)
      capacity: nodes.some((n) => n.capacity !== null) ? nodes.reduce((a, n) => a + (n.capacity ?? 0), 0) : null,
      occupancy: workers > 0 ? nodes.reduce((a, n) => a + n.occupancy * n.workers, 0) / workers : null,
      inFlight: nodes.reduce((a, n) => a + n.inFlight, 0),
      jobsHeld: nodes.reduce((a, n) => a + n.jobsHeld, 0),
    };
    return { node: this.nodeId, lockMs: this.config.cluster.lockMs, heartbeatMs: this.config.cluster.heartbeatMs, queue, totals, nodes, kinds, unserved };
  }

  /** How many times each of these jobs' completion was recorded (tests: exactly once). */
  async completions(ids: readonly string[]): Promise<Record<string, number>> {
    const v = ids.length === 0 ? [] : await this.redis.mget(ids.map(K.completions));
    return Object.fromEntries(ids.map((id, i) => [id, Number(v[i] ?? 0)]));
  }

  /**
   * Shutdown: stop pulling, let the held jobs finish (up to server.shutdownTimeoutS; their
   * outcomes are recorded), put the rest back in the queue, leave the cluster, close.
   */
  async close(beforeJournalCloses?: () => Promise<void>): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (!this.started) {
      // Redis never answered (or listening failed): nothing is held; drop the connections.
      await this.local.close(0, beforeJournalCloses);
      for (const w of this.workers.values()) void w.close(true).catch(() => undefined);
      for (const q of this.queues.values()) void q.close().catch(() => undefined);
      for (const r of this.conns) r.disconnect();
      this.accepted.close();
      return;
    }
    this.dispatcher.stop();
    clearInterval(this.sweeper);
    clearInterval(this.queueTimer);
    await this.recovery.idle();
    // Pausing the workers makes later getNextJob calls return nothing and stops their stalled checks.
    await Promise.all([...this.workers.values()].map((w) => w.pause().catch(() => undefined)));
    await this.dispatcher.leave();
    await this.local.close(undefined, beforeJournalCloses);
    await this.dispatcher.settled();
    await Promise.all([...this.workers.values()].map((w) => w.close().catch(() => undefined)));
    await Promise.all([...this.queues.values()].map((q) => q.close().catch(() => undefined)));
    for (const r of this.conns) r.disconnect();
    this.accepted.close();
  }
}

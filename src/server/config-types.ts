/**
 * The configuration of the `stoker serve` daemon, fully resolved: every field set, paths absolute,
 * `Infinity` for unlimited / none. Each field's default, schema and `--help` line are in its
 * table in config-fields.ts (typed against these interfaces); loading is in config.ts.
 */

/** The HTTP server and admission. */
export interface ServerConfig {
  /** Address to listen on; loopback by default (`"0.0.0.0"` listens on every interface). */
  host: string;
  /** TCP port, 0–65535; 0 picks a free port. */
  port: number;
  /** Largest request body accepted, in bytes (≥ 1024). */
  bodyLimitBytes: number;
  /** Admission: most jobs accepted and not yet finished; beyond it a submission gets 429. */
  maxPendingJobs: number;
  /** Admission: most partitions of unfinished jobs (a bound on the backlog: a partition costs memory only once dispatched); beyond it a submission gets 429, a single job above it 400. */
  maxPendingPartitions: number;
  /** The `Retry-After` (seconds, ≥ 1) of a 429. */
  retryAfterS: number;
  /** How long (seconds, > 0) a finished job's result is kept. */
  resultTtlS: number;
  /** On shutdown, how long (seconds, ≥ 0) the partitions in flight may finish; unfinished jobs stay journaled and resume on the next start. */
  shutdownTimeoutS: number;
  /** Longest long-poll (seconds, > 0): a client asking for longer gets 202 after this and polls again. */
  maxWaitS: number;
  /** When set (≥ 16 characters), every API route needs `Authorization: Bearer <token>` (401 otherwise); the dashboard page and its assets stay public. `""`: none. */
  token: string;
  /** More names the `Host` header may give (besides loopback names and the bound address); a request naming another host gets 421, a state-changing one from a foreign `Origin` 403. */
  allowedHosts: string[];
  /** Listen on a non-loopback address without a token (otherwise refused at start). */
  openWithoutToken: boolean;
  /** Seconds (> 0) a client may take to send a whole request; a slower one is cut off (408). */
  requestTimeoutS: number;
  /** Seconds (> 0) a client may take to send the request headers. */
  headersTimeoutS: number;
  /** Seconds (> 0) an idle keep-alive connection stays open. */
  keepAliveTimeoutS: number;
  /** Most open connections (≥ 1); more are refused. */
  maxConnections: number;
  /** Most open event streams (`/v1/events`, `/v1/jobs/:id/events`; ≥ 1); more get 503 with Retry-After. */
  maxEventStreams: number;
  /** HTTPS: the certificate chain (PEM file; relative in a file: to the file's directory); with tlsKey. `""`: plain HTTP. */
  tlsCert: string;
  /** HTTPS: the private key (PEM file); with tlsCert. */
  tlsKey: string;
}

/** The pacing engine. */
export interface EngineConfig {
  /** A built-in pacer name (see `stoker pacers`). */
  pacer: string;
  /** Items waiting for a device the pacer aims at (> 0). */
  targetWaiting: number;
  /** Memory budget in bytes (> 0); `"unlimited"` in a file or the environment, `Infinity` here. */
  budgetBytes: number;
  /** Times a failed partition is prepared again before its job fails (0–10). */
  retries: number;
  /** A device step running longer (seconds, > 0) fails; `"none"` in a file or the environment, `Infinity` here. */
  deviceTimeoutS: number;
  /** A preparation running longer (seconds, > 0) fails; `"none"` in a file or the environment, `Infinity` here. */
  prepareTimeoutS: number;
  /** Extra numeric options of the pacer, by name. */
  pacerOptions: Record<string, number>;
}

/** The accelerator. */
export interface DeviceConfig {
  /** Thread devices: `"cpu"` (a thread per worker runs the kinds' `run`) or `"webgpu"` (one thread for the device's workers); kinds see it as ctx.deviceKind. */
  kind: 'cpu' | 'webgpu';
  /** Pipelined workers on the device (1–64). */
  workers: number;
  /**
   * A known device time per item (ms, > 0): the pacer starts from it instead of measuring first.
   * Absent: the rate this server remembered from its last run (`<dataDir>/stoker.priors.json`), if any.
   */
  priorServiceMs?: number;
  /** `[device.process]`: the device is a process device, each worker a child process running `command` (docs/process-devices.md). Absent: a thread device. */
  process?: ProcessDeviceConfig;
  /** `[device.http]`: the device is an HTTP endpoint, each worker one request at a time. */
  http?: HttpDeviceConfig;
  /**
   * `[device.batch]`: a free worker takes up to `maxItems` waiting items of one kind as one step
   * (thread devices: the kind's `runBatch`; process devices: a batch of item frames; HTTP devices:
   * one request with every item), waiting up
   * to `maxWaitMs` for more while more are in preparation. Absent: one item per step.
   */
  batch?: DeviceBatchConfig;
}

/** A device's batching (`[device.batch]`), or a kind's preparation batches (`[kinds.NAME.prepareBatch]`). */
export interface DeviceBatchConfig {
  /** Most items in one batch (1–4096). */
  maxItems: number;
  /** Longest wait for a fuller batch, ms (≥ 0). */
  maxWaitMs: number;
}

/** An HTTP device's endpoint (`[device.http]`). */
export interface HttpDeviceConfig {
  /** Where each item's prepared value is POSTed, e.g. "http://127.0.0.1:8000/embed". */
  url: string;
  /** Extra request headers. */
  headers: Record<string, string>;
  /** A request running longer (seconds, > 0) fails its item; Infinity (`"none"` in a file) for none. */
  timeoutS: number;
  /** The largest response accepted, bytes. */
  maxResponseBytes: number;
  /** How long (seconds) a step waits for an endpoint that refuses connections before it fails. */
  unreachableS: number;
}

/** A process device's program (`[device.process]`). */
export interface ProcessDeviceConfig {
  /** The program each worker runs, e.g. "python3". */
  command: string;
  /** Its arguments. */
  args: string[];
  /** Variables added to its environment. */
  env: Record<string, string>;
  /** Its working directory, absolute (relative in a file: to the file's directory). */
  cwd?: string;
  /** Seconds a new worker process has to say ready (> 0). */
  readyTimeoutS: number;
  /** The largest payload (bytes) a worker may send in one frame. */
  maxFrameBytes: number;
  /** Where prepared data of at least handoffMinBytes is handed over as a file (the worker maps it) instead of through the pipe: a memory-backed folder. */
  handoffDir: string;
  /** Prepared bytes from this size on go by file. */
  handoffMinBytes: number;
  /** A step withdrawn because its job ended: its process ended ("end"), or let finish with its output dropped ("finish"). */
  onWithdraw: 'end' | 'finish';
  /** With onWithdraw "finish": seconds a withdrawn step may take to finish before its process is ended. */
  finishTimeoutS: number;
}

/** The CPU preparation pool. */
export interface PrepareConfig {
  /** Preparation threads (≥ 1). */
  threads: number;
  /** Preparations one thread runs at once (≥ 1); they mostly await. */
  concurrency: number;
}

/** Cluster mode (BullMQ on Redis): off unless `redis` is a URL. */
export interface ClusterConfig {
  /** `redis://host:port[/db]` of the shared Redis, or `"none"` (local mode: nothing about Redis is touched). */
  redis: string;
  /** How long (ms, ≥ 100) a node's hold on a job lasts without renewal; a dead node's jobs return to the queue after it. */
  lockMs: number;
  /** How often (ms, ≥ 50) a node writes its heartbeat (it lives 3× as long). */
  heartbeatMs: number;
  /** This node's name in the cluster. */
  nodeId: string;
}

/** A job kind from an ES module (see KindModule in kind-module.ts). */
export interface KindConfig {
  /** The module's path, absolute. Relative in a file: to the file's directory; from `--kind`: to the working directory. */
  module: string;
  /** `[kinds.NAME]`: the name the module must export; absent for `--kind FILE` (the module names itself). */
  name?: string;
  /** `[kinds.NAME] device`: the device that runs it, overriding the module's `device` export. */
  device?: string;
  /**
   * `[kinds.NAME.prepareBatch]`: up to `maxItems` queued partitions of the kind are prepared
   * together by its `prepareBatch(inputs[], ctx[])`, one preparation step with memory reserved for
   * all, waiting up to `maxWaitMs` for more while nothing else is queued.
   */
  prepareBatch?: DeviceBatchConfig;
}

/** The daemon's configuration, fully resolved: every section set but the optional ones (`journal`, `devices`, `kinds`: absent when not given), `dataDir` absolute, `Infinity` for unlimited / none. */
export interface ServeConfig {
  /** The journal directory, absolute. Relative in a file: to the file's directory; elsewhere: to the working directory. */
  dataDir: string;
  server: ServerConfig;
  engine: EngineConfig;
  device: DeviceConfig;
  prepare: PrepareConfig;
  cluster: ClusterConfig;
  /** The journal (`[journal]`): `maxBytes` caps its size (writes beyond fail as on a full disk: submits get 507). Absent: no cap. */
  journal?: { maxBytes: number };
  /** More devices by name (`[devices.NAME]`, each like `[device]`): a kind runs on the one its `device` names. Absent: only `[device]`, named "default". */
  devices?: Record<string, DeviceConfig>;
  /** Job kinds beyond the built-in ntt-proof and sleep: `[kinds.NAME] module = "path"` in a file, `--kind FILE` (repeatable). Absent: none. */
  kinds?: KindConfig[];
}

import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { requireOptional } from '../runtime/optional.js';
import { buildApp, type ApiService } from './app.js';
import { exposureProblem } from './access.js';
import { ConfigError, deviceType, deviceTypes, type ServeConfig } from './config.js';
import { KindModuleError, type LoadedKind } from './kind-module.js';
import { loadKinds, type KindSource } from './kinds.js';
import { stderrLog, type ServerLog } from './log.js';
import { Service } from './service.js';
import { redactUrl } from '../runtime/redact.js';

export interface RunningServer {
  /** The local service (in cluster mode: this node's own engine and journal). */
  service: Service;
  /** What the HTTP API serves: `service` itself, or in cluster mode the cluster around it. */
  api: ApiService;
  app: FastifyInstance;
  /** http://host:port the server listens on (the real port when config.server.port is 0). */
  url: string;
  /** Lines to tell the operator at start (cluster mode: what Redis's persistence means for the jobs). */
  notes?: string[];
  /** Whether this start made the data dir's journal (none was there): the start line says so — a mistyped --data started afresh without a word. */
  newJournal: boolean;
  /** Graceful shutdown: stop accepting jobs, let in-flight partitions finish (up to server.shutdownTimeoutS), journal the rest as unfinished, answer every waiter, close. */
  close(): Promise<void>;
}

/** The kind modules a config names (`[kinds.NAME]`, `--kind`), for {@link loadKinds}. */
export function kindSources(config: ServeConfig): KindSource[] {
  return (config.kinds ?? []).map((k) => ({ url: pathToFileURL(k.module).href, shown: k.module, ...(k.name === undefined ? {} : { name: k.name }), ...(k.device === undefined ? {} : { device: k.device }), ...(k.prepareBatch ? { prepareBatch: k.prepareBatch } : {}) }));
}

/** The kinds a server with this config runs: the built-ins (thread devices) and the config's modules, each checked. */
export async function loadServerKinds(config: ServeConfig): Promise<Map<string, LoadedKind>> {
  const kinds = await loadKinds(kindSources(config), deviceTypes(config));
  for (const kind of kinds.values()) {
    // Preparation calls a kind's prepareBatch when it is prepared in batches, its prepare when it is not.
    const shown = (kind as LoadedKind & { shown?: string }).shown ?? kind.url;
    if (kind.prepareBatch && !kind.steps.prepareBatch) {
      throw new KindModuleError(shown, 'prepareBatch', `missing: the config gives it [kinds.${kind.name}.prepareBatch], so its preparation calls export async function prepareBatch(inputs[], ctx[]) — one prepared value (or Error) per item — add it, or leave prepareBatch out`);
    }
    if (!kind.prepareBatch && !kind.steps.prepare) {
      throw new KindModuleError(shown, 'prepare', `missing: it is prepared one partition per step, so its preparation calls export async function prepare(input, ctx) — add it, or give it [kinds.${kind.name}.prepareBatch] in the config`);
    }
  }
  // A thread device calls a kind's runBatch when it batches, its run when it does not.
  for (const kind of kinds.values()) {
    const d = kind.device === 'default' ? config.device : config.devices?.[kind.device];
    if (!d || deviceType(d) !== 'thread') continue;
    const where = kind.device === 'default' ? '[device]' : `[devices.${kind.device}]`;
    const shown = (kind as LoadedKind & { shown?: string }).shown ?? kind.url;
    if (d.batch && !kind.steps.runBatch) {
      throw new KindModuleError(shown, 'runBatch', `missing: its device ${where} batches ([${where.slice(1, -1)}.batch]), so it calls export async function runBatch(prepared[], ctx[]) — one output (or Error) per item — add it, or leave the device's batch out`);
    }
    if (!d.batch && !kind.steps.run) {
      throw new KindModuleError(shown, 'run', `missing: its device ${where} runs one item per step, so it calls export async function run(prepared, ctx) — add it, or give the device a [${where.slice(1, -1)}.batch]`);
    }
  }
  return kinds;
}

/** Refuses (a ConfigError: exit 2) to listen beyond loopback without a token. */
export function refuseExposure(config: ServeConfig): void {
  const why = exposureProblem(config.server);
  if (why) throw new ConfigError([{ source: 'configuration', path: 'server.token', message: why }]);
}

/**
 * Listens and returns the URL to reach the server: the address really bound, e.g.
 * http://0.0.0.0:7070 for every interface (fastify's own answer names 127.0.0.1 there).
 */
export async function listen(app: FastifyInstance, config: ServeConfig): Promise<string> {
  try {
    await app.listen({ host: config.server.host, port: config.server.port });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    // (Its code kept: a program tells a port in use from other failures by it.)
    if (code === 'EADDRINUSE') throw Object.assign(new Error(`${config.server.host}:${config.server.port} is in use (another server?): give another server.port (--port, STOKER_SERVER_PORT), or 0 for any free one`), { code });
    if (code === 'EADDRNOTAVAIL') throw Object.assign(new Error(`${config.server.host} is no address of this machine: give another server.host (--host)`), { code });
    throw e;
  }
  const a = app.server.address();
  if (a === null || typeof a === 'string') return String(a);
  return `${config.server.tlsCert ? 'https' : 'http'}://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`;
}

/** What a program may give `startServer` and `startClusterServer` beside the config. */
export interface StartOptions {
  /** Receives each line the server would write to stderr (failing steps, a full journal, a device restarted, a process device's stderr), without its newline. @default standard error */
  log?: ServerLog;
}

/**
 * The start options' log, checked: one that is no function is refused (it would throw at the first
 * line, amid a failure); one that throws says the line on stderr instead (it runs in timers and
 * stream handlers, where a throw would end the server).
 */
export function startLog(options: StartOptions | undefined): ServerLog {
  const log = options?.log;
  if (log === undefined) return stderrLog;
  if (typeof log !== 'function') throw new TypeError(`options.log must be a function that takes one line of text (got ${typeof log}), e.g. { log: (line) => logger.info(line) }, or absent for standard error`);
  return (line) => {
    try {
      log(line);
    } catch (e) {
      stderrLog(`${line} (options.log threw: ${e instanceof Error ? e.message : String(e)})`);
    }
  };
}

/**
 * Opens the journal in `config.dataDir` with the built-in kinds and the config's kind modules
 * (each checked first: a bad module throws a KindModuleError naming it and the export, before
 * anything starts), resumes its unfinished jobs, and listens. Local mode only: a cluster node is
 * `startClusterServer` (stoker/cluster). `options.log` takes what it says to its operator.
 */
export async function startServer(config: ServeConfig, options?: StartOptions): Promise<RunningServer> {
  const log = startLog(options);
  if (config.cluster.redis !== 'none') throw new Error(`cluster.redis is ${redactUrl(config.cluster.redis)}: start a cluster node with startClusterServer from stoker/cluster`);
  const webgpu = [config.device, ...Object.values(config.devices ?? {})].some((d) => d.kind === 'webgpu' && deviceType(d) === 'thread');
  if (webgpu) requireOptional('the WebGPU device (kind = "webgpu")', ['webgpu']);
  refuseExposure(config);
  const kinds = await loadServerKinds(config);
  // The journaled jobs resume once the devices are known to start (a broken one would fail them for good on the way to exit 2).
  const service = Service.open(config, kinds, { resume: false, log });
  let app: FastifyInstance;
  let address: string;
  try {
    await service.devicesStarted();
    service.resumeUnfinished();
    app = buildApp(service);
    address = await listen(app, config);
  } catch (e) {
    await service.close(0);
    throw e;
  }
  let closed: Promise<void> | undefined;
  return {
    service,
    api: service,
    app,
    url: address,
    notes: [certificateNote(config), service.priorsNote, service.waitingNote, service.idleDevicesNote].filter((n): n is string => n !== undefined),
    newJournal: service.newJournal,
    close: () => (closed ??= service.close(undefined, () => app.close())),
  };
}

/** Days before its end from which a certificate's coming expiry is said at start. */
const CERT_WARN_DAYS = 14;

/**
 * What to say of `server.tlsCert` at start: expired (HTTPS started on it all the same, and every
 * client refused it, with no word here), not valid yet, or expiring within CERT_WARN_DAYS.
 */
function certificateNote(config: ServeConfig): string | undefined {
  const file = config.server.tlsCert;
  if (!file) return undefined;
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(readFileSync(file));
  } catch {
    return undefined; // (HTTPS started on it: Node read it; a form X509Certificate does not is no reason to say more.)
  }
  const now = Date.now();
  const from = Date.parse(cert.validFrom);
  const to = Date.parse(cert.validTo);
  if (now > to) return `warning: the certificate ${file} (server.tlsCert) expired on ${new Date(to).toISOString()}: clients refuse it — renew it, then restart`;
  if (now < from) return `warning: the certificate ${file} (server.tlsCert) is not valid before ${new Date(from).toISOString()}: clients refuse it until then — check the clock, or the certificate`;
  const days = (to - now) / 86_400_000;
  if (days < CERT_WARN_DAYS) return `warning: the certificate ${file} (server.tlsCert) expires on ${new Date(to).toISOString()}, in ${days.toFixed(1)} days: renew it (a restart reads it again)`;
  return undefined;
}

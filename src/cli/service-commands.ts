import { importOptional } from '../runtime/optional.js';
import { redactArgs, redactUrl } from '../runtime/redact.js';
import { configToToml, loadConfig, type DeviceConfig, type ServeConfig } from '../server/config.js';
import { loadServerKinds, startServer, type RunningServer } from '../server/serve.js';
import { readToken } from './client-commands.js';
import type { Io } from './io.js';

export interface ConfigFlags {
  config?: string;
  host?: string;
  port?: string;
  data?: string;
  cluster?: string;
  /** --kind FILE, repeatable. */
  kind?: string[];
  /** --token-file FILE: server.token from a file (its first line). */
  tokenFile?: string;
}

function config(flags: ConfigFlags) {
  return loadConfig({
    ...(flags.config === undefined ? {} : { file: flags.config }),
    env: process.env,
    flags: { ...(flags.host === undefined ? {} : { host: flags.host }), ...(flags.port === undefined ? {} : { port: flags.port }), ...(flags.data === undefined ? {} : { dataDir: flags.data }), ...(flags.cluster === undefined ? {} : { cluster: flags.cluster }), ...(flags.kind === undefined ? {} : { kinds: flags.kind }), ...(flags.tokenFile === undefined ? {} : { token: readToken(flags.tokenFile, '--token-file') }) },
  });
}

/** `stoker config print`: the effective config (defaults < file < environment < flags) as TOML; kind modules are loaded (and checked) for their names. */
export async function configPrintCommand(flags: ConfigFlags, io: Io): Promise<void> {
  const cfg = config(flags);
  // The config's kinds come last, in order (after the built-ins, if any).
  const kinds = await loadServerKinds(cfg);
  const all = [...kinds.keys()];
  const names = all.slice(all.length - (cfg.kinds?.length ?? 0));
  // (What `serve` says of the modules at start, said here too: the check a config is run through before a deploy.)
  for (const kind of kinds.values()) for (const note of kind.notes ?? []) io.err(`stoker config print: ${note}\n`);
  const toml = configToToml(cfg, names);
  io.out(toml.endsWith('\n') ? toml : `${toml}\n`);
}

/** A local server, or with cluster.redis a cluster node (src/cluster, loaded only then). */
async function start(cfg: ServeConfig): Promise<RunningServer> {
  if (cfg.cluster.redis === 'none') return startServer(cfg);
  const { startClusterServer } = await importOptional(() => import('../cluster/serve-cluster.js'), 'cluster mode (--cluster, cluster.redis)', ['bullmq', 'ioredis']);
  return startClusterServer(cfg);
}

/** Past server.shutdownTimeoutS, how long a stop may still take before the process exits anyway. */
const STOP_GRACE_S = 5;

/** `stoker serve`: runs until SIGTERM, SIGINT or SIGHUP, then shuts down gracefully. */
export async function serveCommand(flags: ConfigFlags, io: Io): Promise<void> {
  const cfg = config(flags);
  const server = await start(cfg);
  const resumed = server.service.resumed;
  const cluster = cfg.cluster.redis === 'none' ? '' : `; cluster node ${cfg.cluster.nodeId} on ${redactUrl(cfg.cluster.redis)}`;
  const device = (d: DeviceConfig) => `${d.workers} ${d.process ? `process (${[d.process.command, ...redactArgs(d.process.args)].join(' ')})` : d.http ? `http (${redactUrl(d.http.url)})` : d.kind} device worker${d.workers === 1 ? '' : 's'}`;
  const devices = [device(cfg.device), ...Object.entries(cfg.devices ?? {}).map(([n, d]) => `${n}: ${device(d)}`)].join(', ');
  const auth = cfg.server.token === '' ? 'no token needed' : 'a token needed';
  io.out(`stoker serve: listening on ${server.url} (${auth}; data ${cfg.dataDir}${server.newJournal ? ', a new journal' : ''}; ${resumed} unfinished job${resumed === 1 ? '' : 's'} resumed; pacer ${cfg.engine.pacer}, ${devices}; kinds ${server.service.kindList().map((k) => k.name).join(', ')}${cluster})\n`);
  for (const note of server.notes ?? []) io.out(`stoker serve: ${note}\n`);
  // (In cluster mode the queue holds the jobs: the other nodes take them, not this node's next start.)
  const resumeWhere = cfg.cluster.redis === 'none' ? 'unfinished jobs resume on the next start' : "unfinished jobs stay in the cluster's queue for the other nodes (or this one, restarted)";
  await new Promise<void>((resolve) => {
    let stopping: string | undefined;
    const stop = (signal: string) => {
      // A second signal stops at once (it had killed the process without a word): what is in flight runs again on the next start.
      if (stopping !== undefined) {
        io.err(`stoker serve: ${signal}${signal === stopping ? ' again' : ` after ${stopping}`}: stopping now, without waiting for the partitions in flight (${resumeWhere})\n`);
        process.exit(signal === 'SIGINT' ? 130 : signal === 'SIGHUP' ? 129 : 143);
      }
      stopping = signal;
      const pending = server.service.status().partitions.inFlight;
      io.err(`stoker serve: ${signal}: finishing ${pending} partition${pending === 1 ? '' : 's'} in flight (up to ${cfg.server.shutdownTimeoutS} s), then stopping\n`);
      // A stop bounded whatever it waits on (a cluster node's Redis away: it waited for its return,
      // 77 s past a 30 s timeout): what is left is as after a crash, which the journal and the
      // cluster's queue survive.
      const hard = setTimeout(() => {
        io.err(`stoker serve: not stopped ${STOP_GRACE_S} s past server.shutdownTimeoutS (${cfg.cluster.redis === 'none' ? 'a step that ignores its withdrawal?' : "the cluster's Redis away?"}): exiting now; ${resumeWhere}\n`);
        process.exit(1);
      }, Math.min((cfg.server.shutdownTimeoutS + STOP_GRACE_S) * 1000, 2 ** 31 - 1));
      hard.unref();
      void server.close().then(() => {
        clearTimeout(hard);
        process.off('SIGTERM', onTerm);
        process.off('SIGINT', onInt);
        process.off('SIGHUP', onHup);
        // (A drain the timeout cut short read as one that finished: "stopped" and nothing more.)
        const cut = server.service.cutShort;
        // (Those only unreachable endpoints could run read as cut by the timeout, though the stop went on at once.)
        const why = server.service.cutShortBecause === 'unreachable' ? 'that only devices whose endpoints refuse connections could run' : `still in flight when server.shutdownTimeoutS (${cfg.server.shutdownTimeoutS} s) ran out`;
        io.err(`stoker serve: stopped${cut > 0 ? `; ${cut} partition${cut === 1 ? '' : 's'} ${why} ${cut === 1 ? 'was' : 'were'} withdrawn` : ''}; ${resumeWhere}\n`);
        resolve();
      });
    };
    const onTerm = () => stop('SIGTERM');
    const onInt = () => stop('SIGINT');
    // (A closed terminal's SIGHUP ended the server at once, mid-drain, without a word: it drains as SIGTERM does.)
    const onHup = () => stop('SIGHUP');
    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onInt);
    process.on('SIGHUP', onHup);
  });
}

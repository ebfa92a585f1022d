#!/usr/bin/env node
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';
import { Command, CommanderError } from 'commander';
import { DEMO_DEFAULTS } from '../runtime/demo-options.js';
import type { BenchFlags, SimulateFlags, SpeedFlags } from './commands.js';
import type { DemoFlags } from './demo-commands.js';
import type { PlanFlags } from './plan-command.js';
import type { ConfigFlags } from './service-commands.js';
import { ClientError, type ClientFlags, type SubmitFlags, type TraceExportFlags } from './client-commands.js';
import { UsageError, type Io } from './io.js';
import { formatJson } from './table.js';

/** What bench's columns mean (a user read them with the README open beside): its Measures section, in short. */
const BENCH_LEGEND = `
The table's columns (the steady window: from two passes through the pipeline after the first
arrival to a latency before an ideal drain; – where a run is too short to have one):
  throughputRatio      completions ÷ the devices' capacity over the steady window (1: never idle)
  occupancy            busy ÷ live workers (steady window)
  waitingMean/Std/P95  partitions prepared and waiting for a device, time-weighted (steady window)
  inventoryRatio       the most preparing + waiting ÷ what Little's law needs (capacity × mean
                       preparation latency + target; steady window)
  peakMemory           the most bytes reserved at once (the memory budget's accounting)
  jobLatencyP50        a job's submission to its end, the median
  burstMax             the most dispatches within one service interval (1 ÷ capacity)
  settleCompletions    after a speed change: completions until the pacer's rate estimate stays
                       within 5 % of the new capacity
  rampMs               from the last speed change (else the last arrival) to the first 10 s with
                       occupancy ≥ 0.95
  leakedBytes          bytes still reserved at the end (0 unless something leaked)
  done/failed/cancelled  jobs by how they ended
--json has these and more (every field: the README's Measures).`;

// Each command's module is imported when that command runs: all of them loaded took ~0.7 s of a
// client command's start (the simulator, the server, fastify, zod, ajv…), and `stoker status` needs none.
const sim = () => import('./commands.js');
const demos = () => import('./demo-commands.js');
const service = () => import('./service-commands.js');
const client = () => import('./client-commands.js');

export type { Io } from './io.js';

const defaultIo: Io = {
  out: (s) => void process.stdout.write(s),
  err: (s) => void process.stderr.write(s),
  errIsTTY: process.stderr.isTTY,
};

function version(): string {
  try {
    // src/cli/main.ts and dist/cli/main.js both sit two levels below package.json.
    const pkg = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : '0.0.0';
  } catch {
    return '0.0.0';
  }
}

/** `configDoc`: the config fields' list for `serve --help` (loaded only when the command is serve). */
function program(io: Io, setExit: (code: number) => void, configDoc: string): Command {
  const p = new Command('stoker')
    .description('Keeps accelerators fed: run, serve, simulate and compare pacers of a two-stage preparation → accelerator pipeline.')
    .version(version(), '-V, --version')
    .exitOverride()
    .configureOutput({ writeOut: io.out, writeErr: io.err, outputError: (s, write) => write(s) })
    .showSuggestionAfterError();

  p.command('scenarios')
    .description('list the built-in scenarios')
    .action(async () => (await sim()).scenariosCommand(io));

  p.command('pacers')
    .description('list the built-in pacers')
    .action(async () => (await sim()).pacersCommand(io));

  p.command('simulate')
    .description('run one scenario with one or more pacers and print the benchmark metrics')
    .argument('<scenario>', 'a built-in scenario name (see `stoker scenarios`) or a path to a scenario .json file')
    .option('-p, --pacer <list>', 'comma-separated pacers: built-in names or paths to .js/.mjs modules (default: "stoker")')
    .option('--pacers <list>', 'the same as --pacer (as bench, plan and demo spell it)')
    .option('-s, --seed <n>', "override the scenario's seed (an integer)")
    .option('--json', 'print the results as JSON (deterministic: no timings)')
    .option('-o, --out <dir>', 'write report.json and SVG charts to this directory')
    .option('--trace <file>', 'write a Chrome trace (JSON; open in Perfetto) of each run; several pacers: <file>.<pacer>.json')
    .option('--html <file>', 'write a self-contained HTML report: the metrics and interactive charts')
    .action(async (scenario: string, flags: Omit<SimulateFlags, 'pacer'> & { pacer?: string; pacers?: string }) => {
      // (Both given, one was dropped without a word: --pacers stoker --pacer classic ran stoker alone.)
      if (flags.pacer !== undefined && flags.pacers !== undefined) throw new UsageError('--pacer and --pacers are the same option: give the pacers once, e.g. --pacers stoker,classic');
      return (await sim()).simulateCommand(scenario, { ...flags, pacer: flags.pacers ?? flags.pacer ?? 'stoker' }, io);
    });

  p.command('bench')
    .description('run every scenario × pacer and print one row per pair (progress on stderr)')
    .option('--scenarios <list>', 'comma-separated scenarios (default: all but seed-day)')
    .option('--pacers <list>', 'comma-separated pacers (default: all built-ins)')
    .option('-s, --seed <n>', "override every scenario's seed (an integer)")
    .option('--seeds <n>', 'run each pair over n seeds (from --seed, or each scenario\'s) and print mean ± sd and the jobs\' ends summed (not with --out or --html: their charts are of one run)')
    .option('--json', 'print [{ scenario, pacer, metrics }] as JSON (with --seeds: every metric as { mean, sd }, and jobs { done, failed, cancelled, unfinished } summed)')
    .option('-o, --out <dir>', 'write report.json and SVG charts to this directory')
    .option('--html <file>', 'write a self-contained HTML report: the table, and per scenario its metrics and charts')
    .option('--random <n>', "instead of the built-in scenarios, n random ones (kinds, preparation laws and knees, devices, arrivals; --seed picks the draw, default 1), each pacer's speed, memory and p99 job latency against unpaced's")
    .addHelpText('after', BENCH_LEGEND)
    .action(async (flags: BenchFlags) => (await sim()).benchCommand(flags, io));

  p.command('plan')
    .description('the settings to run: simulate a scenario (or one fitted from a trace of a real run) across target, budget, preparation cap, workers and pacers; print the frontier and the recommended setting with its config lines (progress on stderr)')
    .argument('[scenario|trace.json]', 'a built-in scenario, a scenario .json file, or a Chrome trace of a run (stoker demo --trace, stoker trace export)')
    .option('--server <url>', "instead: fit from a running server's recent history (its trace)")
    .option('--since <duration>', 'with --server: how far back (default: 30m)')
    .option('--token-file <file>', "with --server: the server's token (else $STOKER_SERVER_TOKEN)")
    .option('--seeds <n>', 'seeds per setting (from the scenario\'s own)', '3')
    .option('--pacers <list>', 'comma-separated built-in pacers to try', 'stoker')
    .option('--targets <list>', 'comma-separated waiting targets to try', '1,2,4,8')
    .option('--json', 'print { fit, scenario, seeds, frontier: [...], recommended: {...}, lowerLatency, current, notRecommended?, rows: [every setting] } as JSON (lowerLatency: a setting at the same throughput with a p99 job latency ≥ 1.25× lower, or null; current: the own setting of the run or scenario; notRecommended: settings passed over, and why)')
    .option('--scenario-out <file>', 'write the scenario planned on (the fitted one, from a trace) as JSON')
    .option('--html <file>', 'also write a self-contained HTML page: the fit, the frontier table, charts of every setting by peak memory (throughput, p99 latency), the recommendation')
    .option('--threads <n>', 'worker threads for the sweep (default: every core)')
    .option('--budget-bytes <n>', "the machine's memory, bytes: no setting goes over it (default: the scenario's budget, or the one the traced run had)")
    .action(async (spec: string | undefined, flags: PlanFlags) => {
      const { planCommand } = await import('./plan-command.js');
      await planCommand(spec, flags, io);
    });

  p.command('demo')
    .description('run the ntt-proof workload on real threads (CPU or WebGPU devices) with live progress, then a summary')
    .option('--seconds <n>', 'how long jobs keep arriving; the jobs in flight then finish', String(DEMO_DEFAULTS.seconds))
    .option('--pacers <list>', 'comma-separated built-in pacers, run one after another', DEMO_DEFAULTS.pacer)
    .option('--device <kind>', 'cpu (a thread per worker) or webgpu (WGSL through Dawn: a GPU, or Mesa in software)', DEMO_DEFAULTS.device)
    .option('--workers <n>', 'device worker threads', String(DEMO_DEFAULTS.workers))
    .option('--log-n <n>', 'NTT size 2^n per polynomial (≤ 20)', String(DEMO_DEFAULTS.logN))
    .option('--synthesis-ms <n>', 'simulated synthesis wait per partition (uses no CPU)', String(DEMO_DEFAULTS.synthesisMs))
    .option('--partitions <n>', 'partitions per job', String(DEMO_DEFAULTS.partitions))
    .option('--jobs-in-flight <n>', 'jobs kept in the system (a new one arrives when one finishes)', String(DEMO_DEFAULTS.jobsInFlight))
    .option('--target <n>', "the pacer's waiting target", String(DEMO_DEFAULTS.targetWaiting))
    .option('--budget-bytes <n>', "the engine's memory budget in bytes (default: none)")
    .option('--max-preparing <n>', 'most preparations at once (default: 64)')
    .option('--seed <n>', 'witness seed', String(DEMO_DEFAULTS.seed))
    .option('--json', 'print the summaries as JSON')
    .option('-q, --quiet', 'no progress lines')
    .option('--trace <file>', 'write a Chrome trace (JSON; open in Perfetto) of each run; several pacers: <file>.<pacer>.json')
    .option('--dashboard', 'run the jobs through the service and serve its dashboard at http://<host>:<port>/ while they run')
    .option('--host <host>', 'with --dashboard: interface to listen on', '127.0.0.1')
    .option('--port <n>', 'with --dashboard: port to listen on (0: a free one)', '7070')
    .action(async (flags: DemoFlags) => (await demos()).demoCommand(flags, io));

  p.command('overhead')
    .description("the runtime's own cost per item: no-op stages in process and on threads, the engine alone, and p-queue beside it (when installed)")
    .option('--items <n>', 'items per measurement', '50000')
    .option('--json', 'print the measurements as JSON')
    .action(async (flags: { items: string; json?: boolean }) => (await demos()).overheadCommand(flags, io));

  p.command('device-bench')
    .description('what a process device costs: one large item handed to a Python worker by file vs through the pipe, and no-op items/s of a process device vs a thread device')
    .option('--bytes <n>', 'size of the large item (at most 1 GiB)', String(2 ** 30))
    .option('--items <n>', 'no-op items per device', '5000')
    .option('--json', 'print the measurements as JSON')
    .action(async (flags: { bytes: string; items: string; json?: boolean }) => (await demos()).deviceBenchCommand(flags, io));

  p.command('speed')
    .description('time the simulator itself: events per second and wall time per simulated day')
    .option('--scenario <name>', 'scenario to time (a built-in name or a .json file)', 'seed-day')
    .option('--pacers <list>', 'comma-separated pacers', 'stoker,classic,unpaced')
    .option('--runs <n>', 'runs per pacer (the best and the median are reported)', '5')
    .option('--json', 'print the measurements as JSON')
    .action(async (flags: SpeedFlags) => (await sim()).speedCommand(flags, io));

  const server = (cmd: Command) =>
    cmd
      .option('--server <url>', 'the stoker server (env STOKER_SERVER)', process.env['STOKER_SERVER'] ?? 'http://127.0.0.1:7070')
      .option('--token-file <file>', "the server's token (server.token), from the file's first line; else env STOKER_SERVER_TOKEN")
      .option('--json', 'print the reply as JSON');
  const configured = (cmd: Command) =>
    cmd
      .option('-c, --config <file>', 'a TOML config file (its keys: the README\'s Configuration; `stoker config print` shows the effective values)')
      .option('--host <host>', 'interface to listen on (default 127.0.0.1: this machine only)')
      .option('--port <n>', 'port to listen on (0: a free one)')
      .option('--data <dir>', 'the journal directory')
      .option('--token-file <file>', 'server.token from the first line of this file: every API call then needs Authorization: Bearer <token>')
      .option('-k, --kind <file>', 'a job kind module (an ES module exporting name and prepare, and run when its device is a thread device; see the README); repeatable', (v: string, prev: string[] | undefined) => [...(prev ?? []), v]);

  const clusterFlag = '--cluster <url>';
  const clusterHelp = 'cluster mode: share BullMQ queues (one per kind) on this Redis (redis://host:port[/db]) with other nodes';
  configured(p.command('serve'))
    .option(clusterFlag, clusterHelp)
    .description('run the service: HTTP API, durable journal, metrics; SIGTERM/SIGINT/SIGHUP finish in-flight partitions and stop')
    .addHelpText('after', configDoc ? `\n${configDoc}` : '')
    .action(async (flags: ConfigFlags) => (await service()).serveCommand(flags, io));

  configured(p.command('config').description('show the service configuration').command('print'))
    .option(clusterFlag, clusterHelp)
    .description('print the effective configuration (defaults < file < environment < flags) as TOML')
    .action(async (flags: ConfigFlags) => (await service()).configPrintCommand(flags, io));

  server(p.command('submit'))
    .description('submit a job to a running server')
    .requiredOption('-k, --kind <kind>', 'job kind (GET /v1/kinds lists the server\'s: those of its kind modules, and ntt-proof and sleep where its default device runs threads)')
    .option('-n, --partitions <n>', 'number of partitions; may be left out for a kind that derives it from its input (given, they must agree)')
    .option('--id <id>', 'job id (idempotency key); generated when absent')
    .option('--priority <p>', 'critical, high, normal or low')
    .option('--input <json>', `the kind's input as JSON, e.g. '{"prepareMs":100}'`)
    .option('--input-file <file>', "the kind's input from a JSON file")
    .option('--deadline <time>', 'when the job fails if not done: +DURATION from now (+90s, +2h), an ISO 8601 time with its zone (2030-01-01T00:00:00Z), or epoch ms')
    .action(async (flags: SubmitFlags) => (await client()).submitCommand(flags, io));

  server(p.command('status'))
    .description("a running server's status, or one job's")
    .argument('[id]', 'a job id')
    .action(async (id: string | undefined, flags: ClientFlags) => (await client()).statusCommand(id, flags, io));

  server(p.command('wait'))
    .description("wait for a job's end and print its result (exit 0 done, 1 failed or cancelled, 3 timed out)")
    .argument('<id>', 'a job id')
    .option('--timeout <duration>', 'give up after this long (30s, 5m, 1h)', '1h')
    .option('--progress', "show the job's partitions as they move, on stderr (a bar on a terminal, a line per change otherwise)")
    .option('-o, --output <file>', 'write the result to this file (bytes as they are, JSON as text) rather than print it')
    .action(async (id: string, flags: ClientFlags & { timeout: string; progress?: boolean; output?: string }) => {
      setExit(await (await client()).waitCommand(id, flags, io));
    });

  server(p.command('backup'))
    .description("a consistent copy of a running server's journal, to a file (a stoker.db to start a server on)")
    .requiredOption('-o, --output <file>', 'the file to write (written whole, or not at all)')
    .action(async (flags: ClientFlags & { output: string }) => (await client()).backupCommand(flags, io));

  server(p.command('cancel'))
    .description('cancel a job on a running server')
    .argument('<id>', 'a job id')
    .action(async (id: string, flags: ClientFlags) => (await client()).cancelCommand(id, flags, io));

  p.command('chaos')
    .description('fault injection under a stream of jobs: a stoker serve killed with kill -9 and its disk filled (a small tmpfs, as root), then a cluster of three with nodes killed and Redis restarted empty; every acknowledged job must end once with its result (exit 1 when any is lost, wrong or duplicated, or a server crashed)')
    .option('--seconds <s>', 'how long jobs arrive and faults happen, per phase', '60')
    .option('--seed <n>', 'the seed of the run', '1')
    .option('--json', 'print the reports as JSON')
    .action(async (f: { seconds: string; seed: string; json?: boolean }) => {
      const seconds = Number(f.seconds);
      const seed = Number(f.seed);
      if (!(seconds > 0)) throw new UsageError(`--seconds must be a number > 0 (got ${f.seconds})`);
      if (!Number.isSafeInteger(seed)) throw new UsageError(`--seed must be a whole number (got ${f.seed})`);
      const { chaosRun, chaosCluster } = await import('./chaos.js');
      const progress = (line: string) => io.err(`${line}\n`);
      const reports = { server: await chaosRun({ seconds, seed, progress }), cluster: await chaosCluster({ seconds, seed, progress }) };
      if (f.json) io.out(`${JSON.stringify(reports, null, 2)}\n`);
      else {
        for (const [phase, r] of Object.entries(reports)) {
          const faults = Object.entries(r.faults).map(([k, n]) => `${n} ${k}`).join(', ');
          const failed = Object.entries(r.failed).map(([code, n]) => `${n} ${code}`).join(', ') || '0';
          // (A phase that did not run printed its tally of zeros beside "skipped": it read as a pass.)
          if (!(r.skipped && r.accepted === 0)) io.out(`chaos (${phase}): ${faults} in ${seconds} s · ${r.accepted} jobs acknowledged · ${r.done} done · failed ${failed} · lost ${r.lost} · wrong ${r.wrong} · duplicated ${r.duplicated} · crashes ${r.crashes}\n`);
          if (r.skipped) io.out(`chaos (${phase}): skipped ${r.skipped}\n`);
        }
      }
      const bad = Object.values(reports).reduce((a, r) => a + r.lost + r.wrong + r.duplicated + r.crashes, 0);
      setExit(bad > 0 ? 1 : 0);
    });

  p.command('cluster-bench')
    .description('cluster mode throughput: a private redis-server, then 1, 2, 3 `serve --cluster` nodes with sleep devices; jobs/s and each node\'s occupancy')
    .option('--nodes <n>', 'up to this many nodes', '3')
    .option('--seconds <s>', 'about how long each run keeps the nodes busy', '20')
    .option('--prepare-ms <ms>', 'sleep preparation per partition', '500')
    .option('--device-ms <ms>', 'sleep device time per partition', '100')
    .option('--workers <n>', 'device workers per node', '2')
    .option('--partitions <n>', 'partitions per job', '2')
    .option('--redis-server <path>', 'the redis-server binary', '/usr/bin/redis-server')
    .action(async (f: Record<string, string>) => {
      const { clusterBench } = await import('../cluster/bench.js');
      const num = (k: string) => {
        const v = Number(f[k]);
        if (!Number.isFinite(v) || v <= 0) throw new UsageError(`--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} must be a number > 0`);
        return v;
      };
      if (!fs.existsSync(f['redisServer'] as string)) throw new UsageError(`no redis-server at ${f['redisServer']}: apt-get install redis-server, or pass --redis-server`);
      await clusterBench({ nodes: num('nodes'), seconds: num('seconds'), prepareMs: num('prepareMs'), deviceMs: num('deviceMs'), workers: num('workers'), partitions: num('partitions'), redisServer: f['redisServer'] as string, out: io.out });
    });

  p.command('trace')
    .description("a running server's timeline")
    .command('export')
    .description('the last minutes of a running server as Chrome trace JSON (open it in Perfetto): a track per device worker and preparation slot')
    .option('--server <url>', 'the stoker server (env STOKER_SERVER)', process.env['STOKER_SERVER'] ?? 'http://127.0.0.1:7070')
    .option('--token-file <file>', "the server's token (server.token), from the file's first line; else env STOKER_SERVER_TOKEN")
    .option('--since <duration>', 'how far back (30s, 5m, 1h)', '5m')
    .option('-o, --output <file>', 'write to this file instead of stdout')
    .action(async (flags: TraceExportFlags) => (await client()).traceExportCommand(flags, io));

  return p;
}

/**
 * Exit code for an error: 2 for bad input, 1 for anything unexpected. (The modules of the other
 * errors are imported here, not at start: loaded already when they threw, they cost nothing.)
 */
async function exitCodeOf(e: unknown): Promise<number> {
  if (e instanceof UsageError) return 2;
  if (e instanceof ClientError) return e.exitCode;
  const [{ StokerError }, { ScenarioError }, { PacerModuleError }, { ConfigError }, { KindModuleError }, { OptionalPackageError }, { isJournalError }] = await Promise.all([
    import('../core/errors.js'),
    import('../sim/scenario.js'),
    import('../sim/load-pacer.js'),
    import('../server/config.js'),
    import('../server/kind-module.js'),
    import('../runtime/optional.js'),
    import('../server/journal-types.js'),
  ]);
  if (e instanceof ScenarioError || e instanceof PacerModuleError) return 2;
  if (e instanceof StokerError && (e.code === 'E_UNKNOWN_PACER' || e.code === 'E_INVALID_OPTION')) return 2;
  if (e instanceof ConfigError || e instanceof KindModuleError || e instanceof OptionalPackageError) return 2;
  // A data dir that cannot be used, or is of a newer stoker: the --data given (one in use, or a damaged file, is 1).
  if (isJournalError(e, 'E_JOURNAL_DIR') || isJournalError(e, 'E_JOURNAL_VERSION')) return 2;
  return 1;
}

/** The command argv names (`stoker help serve` names serve), for what only it needs before parsing. */
function commandOf(argv: string[]): string | undefined {
  const words = argv.filter((a) => !a.startsWith('-'));
  return words[0] === 'help' ? words[1] : words[0];
}

/** Runs the CLI with `argv` (without node and the script); returns the exit code, never exits the process. */
export async function main(argv: string[], io: Io = defaultIo): Promise<number> {
  try {
    let code = 0;
    const configDoc = commandOf(argv) === 'serve' ? (await import('../server/config.js')).CONFIG_DOC : '';
    await program(io, (c) => (code = c), configDoc).parseAsync(argv, { from: 'user' });
    return code;
  } catch (e) {
    if (e instanceof CommanderError) {
      // Help and version have printed and succeed (exit code 0); for usage errors (unknown
      // command or option, missing argument, no command at all) commander has printed the message.
      return e.exitCode === 0 ? 0 : 2;
    }
    const code = await exitCodeOf(e);
    const message = e instanceof Error ? e.message : String(e);
    // (--json printed nothing where the server refused: a script reading stdout had no reply to read.)
    if (e instanceof ClientError && e.problem && argv.includes('--json')) io.out(`${formatJson(e.problem)}\n`);
    io.err(`error: ${message}\n`);
    if (process.env.STOKER_DEBUG === '1' && e instanceof Error && e.stack) io.err(`${e.stack}\n`);
    return code;
  }
}

function isMain(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return import.meta.url === pathToFileURL(fs.realpathSync(script)).href;
  } catch {
    return false;
  }
}

if (isMain()) {
  // `stoker bench | head` closes the pipe early: stop quietly. A terminal gone (EIO: closed, its
  // SIGHUP being handled) takes what is written to it no more: a serve drains on without it (its
  // first line after the hangup threw, and the drain ended with exit 1).
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EIO') return;
    if (e.code === 'EPIPE') process.exit(0);
    throw e;
  });
  process.stderr.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EIO' || e.code === 'EPIPE') return;
    throw e;
  });
  void main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}


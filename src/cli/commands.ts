import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { PACER_NAMES, PACERS, TimelineRecorder, unreadOptions, type BatchSetting, type PacerFactory } from '../core/index.js';
import { PacerModuleError, resolvePacer } from '../sim/load-pacer.js';
import { syntaxErrorAt } from '../runtime/module-syntax.js';
import { resolveScenario } from '../sim/load-scenario.js';
import { METRIC_KEYS, resultRecord, toJson, writeReport } from '../sim/report.js';
import { BENCH_SCENARIOS, SCENARIOS } from '../sim/scenarios.js';
import { simulate, type SimResult } from '../sim/simulator.js';
import { meanMs, oversizeKinds, type Dist, type Scenario } from '../sim/scenario.js';
import { deviceGroups } from '../sim/devices.js';
import { measureSpeed } from '../sim/speed.js';
import { toChromeTrace } from '../report/chrome-trace.js';
import { renderHtmlReport } from '../report/report-html.js';
import { formatMetric, formatTable } from './table.js';
import { UsageError, type Io } from './io.js';

/** Where a command writes: `out` is the result (stdout), `err` progress and diagnostics (stderr). */
/** Parses an integer option value; the error names the option. */
export function parseInteger(option: string, value: string): number {
  const n = Number(value);
  if (!/^[-+]?\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) throw new UsageError(`${option} must be an integer (got ${JSON.stringify(value)})`);
  return n;
}

/** Splits a comma-separated list; the error names the option when it is empty. */
export function parseList(option: string, value: string, example = 'stoker,classic'): string[] {
  const items = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (items.length === 0) throw new UsageError(`${option} needs at least one name, e.g. ${option} ${example}`);
  return items;
}

function pad(names: string[]): (s: string) => string {
  const w = Math.max(0, ...names.map((n) => n.length));
  return (s) => s.padEnd(w);
}

export function scenariosCommand(io: Io): void {
  const p = pad([...SCENARIOS.keys()]);
  for (const [name, s] of SCENARIOS) io.out(`${p(name)}  ${s.description}\n`);
}

export function pacersCommand(io: Io): void {
  const p = pad(PACER_NAMES);
  for (const name of PACER_NAMES) io.out(`${p(name)}  ${PACERS[name]?.describe ?? ''}\n`);
}

async function resolvePacers(specs: string[]): Promise<PacerFactory[]> {
  const out: PacerFactory[] = [];
  for (const spec of specs) {
    try {
      out.push(await resolvePacer(spec));
    } catch (e) {
      // A module with a syntax error: where it is (the import's error does not say).
      const at = e instanceof PacerModuleError && e.cause instanceof SyntaxError && fs.existsSync(spec) ? syntaxErrorAt(path.resolve(spec)) : '';
      throw at ? new PacerModuleError(`${e instanceof Error ? e.message : String(e)}, at\n${at}`) : e;
    }
  }
  return out;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

function failureTable(results: SimResult[]): string {
  const rows = results.flatMap((r) => r.failures.map((f) => [r.pacer, f.job, f.state, f.code, f.reason]));
  return rows.length ? `\njobs that did not finish:\n${formatTable(['pacer', 'job', 'state', 'code', 'reason'], rows)}` : '';
}

/**
 * Checks, before a run, that `file` (named by `option`) can be written: its directory exists and
 * is writable, and it is not itself a directory. The error names the option and the file.
 */
export function checkOutputFile(option: string, file: string): void {
  const abs = path.resolve(file);
  const dir = path.dirname(abs);
  let st: fs.Stats | undefined;
  try {
    st = fs.statSync(dir);
  } catch {
    st = undefined;
  }
  if (!st?.isDirectory()) throw new UsageError(`${option} ${file}: directory ${dir} does not exist; create it or name a file in an existing directory`);
  if (fs.existsSync(abs) && fs.statSync(abs).isDirectory()) throw new UsageError(`${option} ${file} is a directory; name a file in it, e.g. ${path.join(file, option === '--html' ? 'report.html' : 'trace.json')}`);
  checkWritable(option, file, dir);
}

/** Refuses a directory this process cannot write into, naming the option and what it was given. */
function checkWritable(option: string, given: string, dir: string): void {
  try {
    fs.accessSync(dir, fs.constants.W_OK);
  } catch {
    throw new UsageError(`${option} ${given}: directory ${dir} is not writable`);
  }
}

/** Checks, before a run, that `dir` is a directory or can be made one (--out ran the whole simulation, then failed with a raw ENOTDIR). */
export function checkOutputDir(option: string, dir: string): void {
  let at = path.resolve(dir);
  // (lstat: a dangling link is there, and no directory can be made through it.)
  const there = (p: string) => {
    try {
      fs.lstatSync(p);
      return true;
    } catch {
      return false;
    }
  };
  while (!there(at)) at = path.dirname(at);
  if (!fs.existsSync(at) || !fs.statSync(at).isDirectory()) throw new UsageError(`${option} ${dir}: ${at} is ${fs.existsSync(at) ? 'a file' : 'a link to nothing'}, not a directory; name a directory (it is made if it does not exist)`);
  checkWritable(option, dir, at);
}

/** Writes a file named by `option` and says so on stderr; a failure names the option and the file. */
export function writeOutputFile(option: string, file: string, text: string, io: Io): void {
  try {
    fs.writeFileSync(file, text);
  } catch (e) {
    throw new UsageError(`${option} ${file}: cannot write it (${(e as Error).message})`);
  }
  io.err(`wrote ${file}\n`);
}

/**
 * Where each pacer's trace goes: `file` itself for one pacer; for several,
 * `<file without .json>.<pacer>.json` (names made file-safe, repeats numbered).
 */
export function traceFiles(file: string, pacers: string[]): string[] {
  if (pacers.length === 1) return [file];
  const base = file.replace(/\.json$/i, '');
  const seen = new Set<string>();
  return pacers.map((p) => {
    const safe = p.replace(/[^A-Za-z0-9._-]+/g, '_');
    let name = safe;
    for (let i = 2; seen.has(name); i++) name = `${safe}-${i}`;
    seen.add(name);
    return `${base}.${name}.json`;
  });
}

/** One scenario's results with repeated pacer names numbered (`cap-80`, `cap-80-2`): two modules of one name made two columns alike. */
function distinctPacers(results: SimResult[]): SimResult[] {
  const seen = new Set<string>();
  return results.map((r) => {
    let name = r.pacer;
    for (let i = 2; seen.has(name); i++) name = `${r.pacer}-${i}`;
    seen.add(name);
    return name === r.pacer ? r : { ...r, pacer: name };
  });
}

/** The run's settings a trace records for `stoker plan`. */
export interface TraceSettings {
  budgetBytes?: number | undefined;
  maxPreparing?: number | undefined;
  targetWaiting?: number | undefined;
  deviceBatches?: readonly (BatchSetting | null)[] | undefined;
  prepareBatches?: Readonly<Record<string, BatchSetting>> | undefined;
  /** The time the trace starts from (ms); absent: its earliest span, sample or submission. */
  originMs?: number | undefined;
}

/** A scenario's settings as its trace records them (its batching per device and per kind, in ms). */
function scenarioSettings(s: Scenario): TraceSettings {
  const setting = (b: { maxItems: number; maxWaitS: number }): BatchSetting => ({ maxItems: b.maxItems, maxWaitMs: b.maxWaitS * 1000 });
  return {
    budgetBytes: s.budgetBytes,
    maxPreparing: s.maxPreparing,
    targetWaiting: s.targetWaiting,
    deviceBatches: deviceGroups(s).map((g) => (g.batch ? setting(g.batch) : null)),
    prepareBatches: Object.fromEntries(Object.entries(s.kinds).flatMap(([name, k]) => (k.prepareBatch ? [[name, setting(k.prepareBatch)]] : []))),
  };
}

/** Writes a timeline as Chrome trace JSON (the format Perfetto opens); `now` ends spans still running. */
export function writeTrace(file: string, title: string, timeline: TimelineRecorder, now: number, limits: TraceSettings, io: Io): void {
  const { budgetBytes, maxPreparing, targetWaiting, deviceBatches, prepareBatches, originMs } = limits;
  const trace = toChromeTrace({
    lanes: timeline.lanes(),
    spans: timeline.spans(),
    samples: timeline.samples(),
    jobs: timeline.jobs(),
    title,
    now,
    ...(budgetBytes === undefined ? {} : { budgetBytes }),
    ...(maxPreparing === undefined ? {} : { maxPreparing }),
    ...(targetWaiting === undefined ? {} : { targetWaiting }),
    ...(deviceBatches === undefined ? {} : { deviceBatches }),
    ...(prepareBatches === undefined ? {} : { prepareBatches }),
    ...(originMs === undefined ? {} : { originMs }),
  });
  writeOutputFile('--trace', file, `${JSON.stringify(trace)}\n`, io);
}

/** The simulator's timeline for a trace: a long run keeps its latest 500,000 spans and 200,000 samples (250 ms apart). */
const SIM_TIMELINE = { maxSpans: 500_000, maxSamples: 200_000, sampleEveryMs: 250 };

export interface SimulateFlags {
  pacer: string;
  seed?: string;
  json?: boolean;
  out?: string;
  /** Chrome trace JSON, one file per pacer. */
  trace?: string;
  /** A self-contained HTML report. */
  html?: string;
}

/**
 * What a scenario probably did not mean: preparation times of 1,000 s or more on average and
 * device times of 100 s or more (its times are seconds: 3 s of device time written in
 * milliseconds reads as 50 minutes; 200 ms as 200 s passed unseen in a user trial), and a kind whose one
 * partition reserves more than budgetBytes (every job of it fails E_OVERSIZE: a budget written in
 * GiB reads as bytes).
 */
function scenarioWarnings(s: Scenario): string[] {
  const LONG_PREPARE_MS = 1_000_000;
  const LONG_SERVICE_MS = 100_000;
  const out: string[] = [];
  const check = (at: string, d: Dist | undefined, longMs: number) => {
    const ms = d === undefined ? 0 : meanMs(d);
    // (A lognormal's mean past a double's range read "averages Infinity s (Infinity min)".)
    if (ms === Infinity) out.push(`${at} has a mean past any number (it overflows: a lognormal's σ this large is probably a slip) — capacity and the steady window are reckoned from the mean`);
    else if (ms >= longMs) out.push(`${at} averages ${(ms / 1000).toFixed(0)} s (${(ms / 60_000).toFixed(1)} min): a scenario's times are in seconds — were these milliseconds?`);
  };
  for (const [name, k] of Object.entries(s.kinds)) {
    check(`kinds.${name}.prepare`, k.prepare, LONG_PREPARE_MS);
    check(`kinds.${name}.service`, k.service, LONG_SERVICE_MS);
  }
  s.devices.forEach((d, i) => {
    check(`devices[${i}].service`, d.service, LONG_SERVICE_MS);
    // (A batch's fixed part is device time too: 200 ms written as 200 passed unseen.)
    check(`devices[${i}].batch.fixed`, d.batch?.fixed, LONG_SERVICE_MS);
  });
  for (const [name, k] of Object.entries(s.kinds)) check(`kinds.${name}.prepareBatch.fixed`, k.prepareBatch?.fixed, LONG_PREPARE_MS);
  const pinned = pinnedWarning(s);
  if (pinned) out.push(pinned);
  for (const { kind, needBytes } of oversizeKinds(s)) out.push(`budgetBytes is ${s.budgetBytes} bytes, less than one ${kind} partition reserves (${needBytes} bytes): every ${kind} job fails E_OVERSIZE — budgetBytes is in bytes (e.g. 412316860416 for 384 GiB)`);
  return out;
}

/**
 * Where devices name their kinds, the measures held against the fleet's capacity (throughputRatio,
 * occupancy) count every device as able to run every kind: they read low while a device has no
 * work of its kinds. Said rather than shown as if they applied (a user trial read 0.198).
 */
export function pinnedWarning(s: Scenario): string | null {
  const kinds = Object.keys(s.kinds);
  // (A device whose list names every kind pins nothing.)
  if (!s.devices.some((d) => d.kinds !== undefined && kinds.some((k) => !d.kinds?.includes(k)))) return null;
  return `${s.name}: devices[].kinds pins kinds to devices, and throughputRatio and occupancy still count every device's capacity as if it ran every kind: they read low whenever a device has no work of its kinds — compare pacers on itemsPerSec, job latency and memory here`;
}

/** The steady window (the same for every pacer), and what it means for the runs that ended inside it or for an empty one. */
function windowLine(w: { fromMs: number; toMs: number }, results: readonly SimResult[]): string {
  if (!(w.toMs > w.fromMs)) return 'steady window empty (the scenario is too short for a steady state: the steady measures are –)';
  const sooner = results.filter((r) => r.simulatedMs < w.toMs && r.simulatedMs > w.fromMs);
  // How much of each run the window measures: the share of its device completions in it.
  const shares = results.map((r) => ({ r, share: r.completions > 0 ? ((r.metrics.itemsPerSec ?? 0) * ((Math.min(w.toMs, r.simulatedMs) - w.fromMs) / 1000)) / r.completions : 1 }));
  const few = shares.filter((x) => x.share < 0.5);
  const held = (x: (typeof shares)[number]) => `${Math.round(x.share * 100)} % of ${x.r.pacer}'s device completions`;
  // Where another pacer's run is mostly inside it, the window is not what is short: that pacer's run went on long past it.
  const small =
    few.length === 0
      ? ''
      : few.length < shares.length
        ? `; it holds ${few.map(held).join(', ')} (its run went on to ${few.map((x) => seconds(x.r.simulatedMs)).join(', ')}: it took that much longer over the same work)`
        : `; it holds ${few.map(held).join(', ')} (it starts once the devices could have reached every kind, and ends before the drain): give the scenario "steady": {"fromS": …, "toS": …} to measure more of the run`;
  return `steady window ${seconds(w.fromMs)} – ${seconds(w.toMs)}${sooner.length ? ` (measured to the run's end where that came sooner: ${sooner.map((r) => r.pacer).join(', ')})` : ''}${small}`;
}

export async function simulateCommand(spec: string, flags: SimulateFlags, io: Io): Promise<void> {
  const seed = flags.seed === undefined ? undefined : parseInteger('--seed', flags.seed);
  const scenario = resolveScenario(spec);
  const pacers = parseList('--pacer', flags.pacer);
  const factories = await resolvePacers(pacers);
  // (Made as the run makes them: with the scenario's targetWaiting, which a module may require. What
  // is watched is what each reads as it is made: a module of yours may read an option later.)
  const mine = pacers.filter((p) => !Object.hasOwn(PACERS, p));
  for (const k of unreadOptions(factories, { ...scenario.pacerOptions, targetWaiting: scenario.targetWaiting })) {
    io.err(`warning: pacerOptions.${k} is read by none of the pacers run (${pacers.join(', ')})${mine.length ? ` as they are made: it changes nothing unless ${mine.join(', ')} read${mine.length === 1 ? 's' : ''} it later` : ': it changes nothing'} — check its spelling\n`);
  }
  if (flags.trace !== undefined) checkOutputFile('--trace', flags.trace);
  if (flags.html !== undefined) checkOutputFile('--html', flags.html);
  if (flags.out !== undefined) checkOutputDir('--out', flags.out);
  for (const w of scenarioWarnings(scenario)) io.err(`warning: ${w}\n`);
  const timelines: TimelineRecorder[] = [];
  const results = distinctPacers(
    factories.map((pacer) => {
      const timeline = flags.trace === undefined ? undefined : new TimelineRecorder(SIM_TIMELINE);
      if (timeline) timelines.push(timeline);
      return simulate(scenario, { pacer, seed, timeline });
    }),
  );
  if (flags.json) {
    const records = results.map(resultRecord);
    io.out(toJson(records.length === 1 ? records[0] : records));
  } else {
    const first = results[0] as SimResult;
    io.out(`scenario ${scenario.name} (seed ${first.seed})${scenario.description ? `: ${scenario.description}` : ''}\n\n`);
    const rows = METRIC_KEYS.map((k) => [k, ...results.map((r) => formatMetric(k, r.metrics[k]))]);
    // With several kinds, each one's job latency (a small kind held behind a heavy one shows here).
    if (first.byKind.length > 1) {
      for (const { kind } of first.byKind) {
        for (const key of ['jobLatencyP50Ms', 'jobLatencyP99Ms'] as const) rows.push([`${key} ${kind}`, ...results.map((r) => formatMetric(key, r.byKind.find((k) => k.kind === kind)?.[key] ?? null))]);
      }
    }
    // With several priority classes, each one's (an urgent class's latency under a bulk load).
    if (first.byPriority.length > 1) {
      for (const { priority } of first.byPriority) {
        for (const key of ['jobLatencyP50Ms', 'jobLatencyP99Ms'] as const) rows.push([`${key} ${priority}`, ...results.map((r) => formatMetric(key, r.byPriority.find((p) => p.priority === priority)?.[key] ?? null))]);
      }
    }
    io.out(formatTable(['metric', ...results.map((r) => r.pacer)], rows));
    const runs = results.map((r) => `${r.pacer} ${r.events} / ${seconds(r.simulatedMs)}`).join(', ');
    io.out(`\n${windowLine(first.window, results)}; events / simulated time: ${runs}\n`);
    io.out(failureTable(results));
  }
  // A run cut short measures only what ran before it: said, whatever the output.
  for (const r of results) cutShort(r, r.pacer, scenario, io);
  if (flags.out !== undefined) for (const file of writeReport(flags.out, results)) io.err(`wrote ${file}\n`);
  if (flags.trace !== undefined) {
    const files = traceFiles(
      flags.trace,
      results.map((r) => r.pacer),
    );
    results.forEach((r, i) => writeTrace(files[i] as string, `${r.scenario} — ${r.pacer} pacer (virtual time)`, timelines[i] as TimelineRecorder, r.simulatedMs, { ...scenarioSettings(scenario), originMs: 0 }, io));
  }
  if (flags.html !== undefined) {
    const title = `stoker simulate ${scenario.name}: ${results.map((r) => r.pacer).join(' vs ')}`;
    writeOutputFile('--html', flags.html, renderHtmlReport(results, { title, descriptions: { [scenario.name]: scenario.description } }), io);
  }
}

export interface BenchFlags {
  scenarios?: string;
  pacers?: string;
  seed?: string;
  /** Runs each pair over this many seeds (from --seed, or the scenario's) and reports mean ± sd. */
  seeds?: string;
  json?: boolean;
  out?: string;
  /** A self-contained HTML report. */
  html?: string;
  /** Instead of the built-in scenarios, this many random ones (randomScenario's family, seed --seed). */
  random?: string;
}

/** The bench table's columns: a header and how to print it from a result. */
const BENCH_COLUMNS: [string, (r: SimResult) => string][] = [
  ['scenario', (r) => r.scenario],
  ['pacer', (r) => r.pacer],
  ['throughputRatio', (r) => formatMetric('throughputRatio', r.metrics.throughputRatio)],
  ['occupancy', (r) => formatMetric('occupancy', r.metrics.occupancy)],
  ['waitingMean', (r) => formatMetric('waitingMean', r.metrics.waitingMean)],
  ['waitingStd', (r) => formatMetric('waitingStd', r.metrics.waitingStd)],
  ['waitingP95', (r) => formatMetric('waitingP95', r.metrics.waitingP95)],
  ['inventoryRatio', (r) => formatMetric('inventoryRatio', r.metrics.inventoryRatio)],
  ['peakMemory', (r) => formatMetric('peakMemoryBytes', r.metrics.peakMemoryBytes)],
  ['jobLatencyP50', (r) => formatMetric('jobLatencyP50Ms', r.metrics.jobLatencyP50Ms)],
  ['burstMax', (r) => formatMetric('burstMax', r.metrics.burstMax)],
  ['settleCompletions', (r) => formatMetric('settleCompletions', r.metrics.settleCompletions)],
  ['rampMs', (r) => formatMetric('rampMs', r.metrics.rampMs)],
  ['leakedBytes', (r) => formatMetric('leakedBytes', r.metrics.leakedBytes)],
  ['done/failed/cancelled', (r) => `${r.metrics.jobsDone}/${r.metrics.jobsFailed}/${r.metrics.jobsCancelled}`],
];

export async function benchCommand(flags: BenchFlags, io: Io): Promise<void> {
  const seed = flags.seed === undefined ? undefined : parseInteger('--seed', flags.seed);
  const seeds = flags.seeds === undefined ? 1 : parseInteger('--seeds', flags.seeds);
  if (seeds < 1) throw new UsageError(`--seeds must be ≥ 1 (got ${seeds})`);
  if (flags.random !== undefined) {
    const n = parseInteger('--random', flags.random);
    if (n < 1) throw new UsageError(`--random must be ≥ 1 (got ${n})`);
    for (const [option, given] of [['--scenarios', flags.scenarios], ['--seeds', flags.seeds], ['--out', flags.out], ['--html', flags.html]] as const) {
      if (given !== undefined) throw new UsageError(`--random with ${option}: --random draws its own scenarios, one run each (--seed picks which); leave out ${option}`);
    }
    const names = flags.pacers === undefined ? [...PACER_NAMES] : parseList('--pacers', flags.pacers);
    if (!names.includes('unpaced')) names.push('unpaced');
    const { randomBench } = await import('./random-bench.js');
    const factories = await resolvePacers(names);
    // Each column by the pacer's own name (as simulate and bench show it), not the path of its module; unpaced by its own.
    const seen = new Set<string>();
    const labels = factories.map((create, i) => {
      const own = names[i] === 'unpaced' ? 'unpaced' : create({ targetWaiting: 4 }).name;
      let label = own;
      for (let k = 2; seen.has(label); k++) label = `${own}-${k}`;
      seen.add(label);
      return label;
    });
    randomBench(n, seed ?? 1, factories, labels, flags.json === true, io);
    return;
  }
  if (seeds > 1 && (flags.out !== undefined || flags.html !== undefined)) throw new UsageError('--seeds with --out or --html: the charts are of one run; leave out --seeds (or use --seed n) for them');
  const scenarios = (flags.scenarios === undefined ? BENCH_SCENARIOS : parseList('--scenarios', flags.scenarios, 'seed,mixed-kinds')).map((s) => resolveScenario(s));
  const pacerSpecs = flags.pacers === undefined ? PACER_NAMES : parseList('--pacers', flags.pacers);
  const factories = await resolvePacers(pacerSpecs);
  for (const w of scenarios.map(pinnedWarning)) if (w) io.err(`warning: ${w}\n`);
  if (seeds > 1) return benchSeeds(scenarios, factories, seed, seeds, flags.json === true, io);
  if (flags.html !== undefined) checkOutputFile('--html', flags.html);
  if (flags.out !== undefined) checkOutputDir('--out', flags.out);
  const total = scenarios.length * factories.length;
  const results: SimResult[] = [];
  for (const scenario of scenarios) {
    const mine: SimResult[] = [];
    for (const pacer of factories) {
      const t0 = performance.now();
      const r = simulate(scenario, { pacer, seed });
      mine.push(r);
      io.err(`[${results.length + mine.length}/${total}] ${scenario.name} × ${r.pacer} … ${Math.round(performance.now() - t0)} ms\n`);
    }
    results.push(...distinctPacers(mine));
  }
  if (flags.json) io.out(toJson(results.map((r) => ({ scenario: r.scenario, pacer: r.pacer, metrics: resultRecord(r).metrics }))));
  else io.out(formatTable(BENCH_COLUMNS.map((c) => c[0]), results.map((r) => BENCH_COLUMNS.map((c) => c[1](r)))) + batchingTable(results));
  // (A pacer that stalled read as one a little slower than the others: said, as simulate says it.)
  for (const r of results) cutShort(r, `${r.scenario} × ${r.pacer}`, scenarios.find((x) => x.name === r.scenario) as Scenario, io);
  if (flags.out !== undefined) for (const file of writeReport(flags.out, results)) io.err(`wrote ${file}\n`);
  if (flags.html !== undefined) {
    const summary = { headers: BENCH_COLUMNS.map((c) => c[0]), rows: results.map((r) => BENCH_COLUMNS.map((c) => c[1](r))) };
    const descriptions = Object.fromEntries(scenarios.map((s) => [s.name, s.description]));
    const title = `stoker bench: ${scenarios.length} scenario${scenarios.length === 1 ? '' : 's'} × ${factories.length} pacer${factories.length === 1 ? '' : 's'}`;
    writeOutputFile('--html', flags.html, renderHtmlReport(results, { title, summary, descriptions }), io);
  }
}

/** A run the horizon cut short or that stalled measures only what ran before it, and so does one that ended before the steady window it was given: a warning on stderr naming `what`. */
function cutShort(r: SimResult, what: string, scenario: Scenario, io: Io): void {
  const { horizonS } = scenario;
  if (r.endedBy === 'horizon') io.err(`warning: ${what}: ${r.unfinishedJobs} of ${r.jobsSubmitted} jobs unfinished when the horizon (horizonS = ${horizonS}) ended the run; the measures cover only what ran before it (jobs still in flight hold their memory: leakedBytes): raise horizonS\n`);
  if (r.endedBy === 'stalled') io.err(`warning: ${what}: ${r.unfinishedJobs} of ${r.jobsSubmitted} jobs unfinished: the run stalled at ${seconds(r.simulatedMs)}, with nothing more to happen — ${r.stall ?? 'the pacer dispatched nothing more, or no live device worker runs what was left (a worker lost for good, a kind no device runs)'}; the measures cover only what ran before it\n`);
  // (A steady window past the run was taken as it was: its measures were of the part the run reached, said nowhere.)
  else if (scenario.steady !== undefined && r.window.toMs > r.simulatedMs && r.endedBy === 'done') io.err(`warning: ${what}: the steady window ends at ${seconds(r.window.toMs)}, after the run's last event at ${seconds(r.simulatedMs)}: its measures are of the part the run reached — end steady.toS within the run\n`);
}

/**
 * Batched against one at a time: for each scenario X run with X-single (the same work, one item
 * per step), per pacer, items/s and p99 job latency side by side with their ratios. Empty when no
 * such pair ran.
 */
function batchingTable(results: readonly SimResult[]): string {
  const rows: string[][] = [];
  for (const r of results) {
    const single = results.find((o) => o.scenario === `${r.scenario}-single` && o.pacer === r.pacer);
    if (!single) continue;
    const a = r.metrics;
    const b = single.metrics;
    const ratio = (x: number | null, y: number | null) => (x !== null && y !== null && y > 0 ? `×${(x / y).toFixed(2)}` : '–');
    rows.push([r.scenario, r.pacer, formatMetric('itemsPerSec', a.itemsPerSec), formatMetric('itemsPerSec', b.itemsPerSec), ratio(a.itemsPerSec, b.itemsPerSec), formatMetric('jobLatencyP99Ms', a.jobLatencyP99Ms), formatMetric('jobLatencyP99Ms', b.jobLatencyP99Ms), ratio(a.jobLatencyP99Ms, b.jobLatencyP99Ms)]);
  }
  return rows.length ? `\nbatched vs one item per step (scenario X against X-single):\n${formatTable(['scenario', 'pacer', 'items/s', 'single items/s', 'ratio', 'latency p99', 'single p99', 'ratio'], rows)}` : '';
}

/** The metrics `--seeds` prints as mean ± sd (its --json has every metric). */
const SEED_METRICS = ['throughputRatio', 'occupancy', 'waitingMean', 'waitingStd', 'inventoryRatio', 'peakMemoryBytes', 'jobLatencyP50Ms', 'jobLatencyP99Ms'] as const;

/** `stoker bench --seeds N`: each scenario × pacer over N seeds, mean ± sd (sample) of each metric, and the jobs' ends summed over the seeds. */
function benchSeeds(scenarios: Scenario[], factories: PacerFactory[], from: number | undefined, n: number, json: boolean, io: Io): void {
  type Jobs = { done: number; failed: number; cancelled: number; unfinished: number };
  const rows: { scenario: string; pacer: string; seeds: number[]; jobs: Jobs; metrics: Record<string, { mean: number; sd: number } | null> }[] = [];
  const total = scenarios.length * factories.length;
  for (const scenario of scenarios) {
    for (const pacer of factories) {
      const t0 = performance.now();
      const list = Array.from({ length: n }, (_, i) => (from ?? scenario.seed) + i);
      const results = list.map((seed) => simulate(scenario, { pacer, seed }));
      const metrics: Record<string, { mean: number; sd: number } | null> = {};
      for (const key of METRIC_KEYS) {
        const xs = results.map((r) => r.metrics[key]);
        if (xs.some((x) => x === null)) metrics[key] = null;
        else {
          const v = xs as number[];
          const mean = v.reduce((a, b) => a + b, 0) / v.length;
          metrics[key] = { mean, sd: Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, v.length - 1)) };
        }
      }
      const sum = (f: (r: SimResult) => number) => results.reduce((a, r) => a + f(r), 0);
      const jobs: Jobs = { done: sum((r) => r.metrics.jobsDone), failed: sum((r) => r.metrics.jobsFailed), cancelled: sum((r) => r.metrics.jobsCancelled), unfinished: sum((r) => r.unfinishedJobs) };
      rows.push({ scenario: scenario.name, pacer: (results[0] as SimResult).pacer, seeds: list, jobs, metrics });
      io.err(`[${rows.length}/${total}] ${scenario.name} × ${(results[0] as SimResult).pacer}, ${n} seeds … ${Math.round(performance.now() - t0)} ms\n`);
    }
  }
  if (json) {
    io.out(toJson(rows));
    return;
  }
  const cell = (key: (typeof SEED_METRICS)[number], m: { mean: number; sd: number } | null) => (m === null ? '–' : `${formatMetric(key, m.mean)} ± ${formatMetric(key, m.sd)}`);
  io.out(`${n} seeds per row (from each scenario's own seed, or --seed): mean ± sd; jobs summed over the seeds\n`);
  io.out(formatTable(['scenario', 'pacer', ...SEED_METRICS, 'done/failed/cancelled', 'unfinished'], rows.map((r) => [r.scenario, r.pacer, ...SEED_METRICS.map((k) => cell(k, r.metrics[k] ?? null)), `${r.jobs.done}/${r.jobs.failed}/${r.jobs.cancelled}`, String(r.jobs.unfinished)])));
}

export interface SpeedFlags {
  scenario: string;
  pacers: string;
  runs: string;
  json?: boolean;
}

/** Wall-clock speed of the simulator (a benchmark: numbers vary with the machine and its load). */
export async function speedCommand(flags: SpeedFlags, io: Io): Promise<void> {
  const runs = parseInteger('--runs', flags.runs);
  if (runs < 1) throw new UsageError(`--runs must be ≥ 1 (got ${runs})`);
  const scenario = resolveScenario(flags.scenario);
  const factories = await resolvePacers(parseList('--pacers', flags.pacers));
  const results = factories.map((pacer) => {
    const r = measureSpeed(scenario, pacer, runs);
    io.err(`${scenario.name} × ${r.pacer}: ${r.runsMs.map((ms) => `${Math.round(ms)} ms`).join(', ')}\n`);
    return r;
  });
  if (flags.json) {
    io.out(toJson(results));
    return;
  }
  const rows = results.map((r) => [
    r.scenario,
    r.pacer,
    String(r.events),
    `${r.simulatedHours.toFixed(1)} h`,
    `${(r.bestEventsPerSec / 1e6).toFixed(2)} M/s`,
    `${(r.medianEventsPerSec / 1e6).toFixed(2)} M/s`,
    `${r.secondsPerSimulatedDay.toFixed(2)} s`,
  ]);
  io.out(formatTable(['scenario', 'pacer', 'events', 'simulated', 'events/s (best)', 'events/s (median)', 'wall per simulated day'], rows));
}

import fs from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { createPacer, PACER_NAMES } from '../core/index.js';
import { fitRun, NO_BUDGET_NOTE, PlanError, type BatchFit, type FitReport } from '../plan/fit.js';
import { sweep } from '../plan/parallel.js';
import { applySetting, close, configLines, frontier, lowerLatency, planGrid, recommend, settle, type PlanRow } from '../plan/sweep.js';
import { resolveScenario } from '../sim/load-scenario.js';
import { oversizeKinds, parseScenario, prepareStep, simulate, type Scenario } from '../sim/index.js';
import { fromChromeTrace } from '../report/chrome-trace.js';
import { renderPlanHtml } from '../report/plan-html.js';
import { checkOutputFile, pinnedWarning, writeOutputFile } from './commands.js';
import { UsageError, type Io } from './io.js';
import { call, ClientError, durationMs, isTrace } from './client-commands.js';
import { formatBytes as bytes, formatMetric, formatTable } from './table.js';

export interface PlanFlags {
  seeds?: string;
  pacers?: string;
  targets?: string;
  json?: boolean;
  /** Write a self-contained HTML page: the fit, the frontier table and chart, the recommendation. */
  html?: string;
  /** Write the scenario planned on (fitted from a trace, or the one given) as JSON. */
  scenarioOut?: string;
  /** Worker threads for the sweep. */
  threads?: string;
  /** Fit from a running server's recent history (its trace) instead of a file. */
  server?: string;
  since?: string;
  tokenFile?: string;
  /** The machine's memory, bytes: the budget no setting may go over (in place of the scenario's, or the one the trace recorded). */
  budgetBytes?: string;
}

/** `stoker plan <scenario | trace.json>` or `stoker plan --server URL`: fit (from a trace), sweep, frontier, recommendation. */
export async function planCommand(spec: string | undefined, flags: PlanFlags, io: Io): Promise<void> {
  if ((spec === undefined) === (flags.server === undefined)) throw new UsageError('give a scenario, a trace file (stoker demo --trace, stoker trace export) or --server URL — one of them');
  if (flags.since !== undefined && flags.server === undefined) throw new UsageError('--since goes with --server (the span of its history to fit); a trace file or scenario holds its own span');
  const seedCount = flags.seeds === undefined ? 3 : Number(flags.seeds);
  if (!Number.isInteger(seedCount) || seedCount < 1 || seedCount > 50) throw new UsageError(`--seeds must be an integer from 1 to 50 (got ${flags.seeds})`);
  const pacers = flags.pacers === undefined ? ['stoker'] : flags.pacers.split(',').map((p) => p.trim());
  for (const p of pacers) if (!(PACER_NAMES as readonly string[]).includes(p)) throw new UsageError(`--pacers: unknown pacer ${JSON.stringify(p)}; plan sweeps the built-in ones (its worker threads load no pacer module: try yours with stoker simulate or bench): ${PACER_NAMES.join(', ')}`);
  const threads = flags.threads === undefined ? undefined : Number(flags.threads);
  if (threads !== undefined && (!Number.isInteger(threads) || threads < 1 || threads > 256)) throw new UsageError(`--threads must be an integer from 1 to 256 (got ${flags.threads})`);
  const targets = flags.targets === undefined ? undefined : flags.targets.split(',').map((t) => Number(t));
  // (stoker serve takes a target > 0.)
  if (targets?.some((t) => !Number.isFinite(t) || t <= 0)) throw new UsageError(`--targets must be numbers > 0, comma-separated (got ${flags.targets})`);
  // Output files are checked before anything runs (a sweep can take minutes).
  if (flags.html !== undefined) checkOutputFile('--html', flags.html);
  if (flags.scenarioOut !== undefined) checkOutputFile('--scenario-out', flags.scenarioOut);
  const budgetBytes = flags.budgetBytes === undefined ? undefined : Number(flags.budgetBytes);
  if (budgetBytes !== undefined && !(Number.isSafeInteger(budgetBytes) && budgetBytes > 0)) throw new UsageError(`--budget-bytes must be a whole number of bytes > 0, e.g. 412316860416 for 384 GiB (got ${flags.budgetBytes})`);
  const loaded = spec === undefined ? await fromServer(flags) : load(spec);
  const { fit } = loaded;
  // The machine's memory given: the budget no setting goes over (the fit's note that none was recorded no longer applies).
  const scenario = budgetBytes === undefined ? loaded.scenario : { ...loaded.scenario, budgetBytes };
  if (budgetBytes !== undefined && fit) fit.notes = fit.notes.filter((n) => !n.startsWith(NO_BUDGET_NOTE));
  if (flags.scenarioOut !== undefined) {
    writeOutputFile('--scenario-out', flags.scenarioOut, `${JSON.stringify(scenario, null, 2)}\n`, io);
  }
  // A budget below one partition of a kind that arrives: every job of that kind would fail (no setting can help).
  const [oversize] = oversizeKinds(scenario);
  if (oversize) {
    const { kind, needBytes } = oversize;
    throw new UsageError(`${budgetBytes === undefined ? "the scenario's budgetBytes" : '--budget-bytes'} (${bytes(scenario.budgetBytes as number)}) is less than one ${kind} partition reserves (${bytes(needBytes)}): every ${kind} job would fail E_OVERSIZE — give the machine's memory in bytes, e.g. 412316860416 for 384 GiB`);
  }
  const pinned = pinnedWarning(scenario);
  if (pinned) io.err(`warning: ${pinned} (the plan recommends on items/s, memory and latency)\n`);
  const seeds = Array.from({ length: seedCount }, (_, i) => scenario.seed + i);
  // The scenario's own setting first: its peak memory sizes the budgets. With no budget and no
  // cap, what it reaches: the items Little's law says the devices need in flight size the caps
  // (under the scenario's budget they would be what that budget lets through, caps that never bind).
  const base = simulate(scenario, { pacer: (o) => createPacer(pacers[0] as string, o) });
  const open = scenario.budgetBytes === undefined && scenario.maxPreparing === undefined ? base : simulate(applySetting(scenario, { pacer: pacers[0] as string, targetWaiting: scenario.targetWaiting, budgetBytes: null, maxPreparing: null, workers: scenario.devices.map((d) => d.workers) }), { pacer: (o) => createPacer(pacers[0] as string, o) });
  const latencyS = Math.max(...Object.values(scenario.kinds).map((k) => prepareStep(k).ms / prepareStep(k).items)) / 1000;
  const littleItems = (open.metrics.itemsPerSec ?? 0) * latencyS;
  // The scenario's own target is always among those tried: its own setting is a row to compare with.
  const tried = [...new Set([...(targets ?? [1, 2, 4, 8]), scenario.targetWaiting])].sort((x, y) => x - y);
  const grid = planGrid(scenario, { peakMemoryBytes: base.metrics.peakMemoryBytes, littleItems }, { pacers, targets: tried });
  // A fit that misses what slowed the run (a slowdown past the concurrency it saw, a cap or a lost worker the trace does not hold) replays it faster than it ran.
  if (fit?.wholeRun) {
    // (Items, not steps: a batch is one step of many items, and the replay counts items.)
    const measured = fit.devices.reduce((n, d) => n + (d.batch ? d.batch.batches * d.batch.meanItems : d.service.samples), 0) / fit.spanS;
    const replayed = base.lastEndMs > 0 ? base.completions / (base.lastEndMs / 1000) : 0;
    if (measured > 0 && Math.abs(replayed / measured - 1) > 0.1) {
      fit.notes.push(`replayed with ${pacers[0] as string} and the run's own setting, the fitted scenario finishes ${replayed.toFixed(3)} items/s on its devices where the run did ${measured.toFixed(3)} (${(replayed / measured).toFixed(2)}×): the fit misses something that slowed (or sped) the run — a preparation slowdown past the most at once it saw, a preparation cap, workers lost, another pacer — so the plan's figures are only as good as that; check them against a real run`);
    }
  }
  // Every setting is a valid scenario before any thread starts (an error keeps its kind here).
  for (const setting of grid) applySetting(scenario, setting);
  const t0 = performance.now();
  const swept = await sweep(scenario, grid, seeds, {
    ...(threads === undefined ? {} : { threads }),
    onRow: (r, done) => io.err(`[${done}/${grid.length}] ${describe(r)}: ${r.itemsPerSec.toFixed(3)} items/s, peak ${bytes(r.peakMemoryBytes)} (${Math.round(performance.now() - t0)} ms so far)\n`),
  });
  const rows = settle(swept);
  // Fewer workers than the run's, read from a busy level the run hardly held: shown, not recommended.
  const thin = fit ? (r: PlanRow) => thinFewer(fit, r, scenario) : () => null;
  const recommendable = rows.filter((r) => thin(r) === null);
  const best = recommend(recommendable);
  const quicker = best ? lowerLatency(recommendable, best) : null;
  const passedOver = best ? rows.filter((r) => thin(r) !== null && r.itemsPerSec > best.itemsPerSec * 1.01) : [];
  // The recommendation is always shown, in its place by memory (folded into a setting within noise of it, it stands for that one).
  let front = frontier(rows);
  if (best && !front.includes(best)) front = [...front.filter((r) => !close(r, best)), best].sort((a, b) => a.peakMemoryBytes - b.peakMemoryBytes);
  const headers = ['pacer', 'target', 'budget', 'prep cap', 'workers', 'items/s', 'occupancy', 'waiting', 'peak memory', 'p99 latency'];
  const summary = `plan for ${scenario.name}: ${rows.length} settings × ${seeds.length} seed${seeds.length === 1 ? '' : 's'} (${seeds.join(', ')}); the frontier (no other setting has more throughput, less peak memory and less p99 latency):`;
  const recommendation = best
    ? `recommended (the least memory, then latency, within 1 % of the best throughput): ${describe(best)}`
    : rows.every((r) => r.horizonRuns > 0)
      ? `no setting finished every job in the simulated runs: the horizon (horizonS = ${scenario.horizonS} s) ended every run with jobs unfinished: raise horizonS, or these settings cannot serve the scenario in that time`
      : 'no setting finished every job in the simulated runs: the scenario is more than these settings can serve';
  const config = best ? configLines(best, scenario) : [];
  const notes: string[] = [];
  // (On a service its arrivals bound, every setting finishes what arrives: the recommendation, on memory first, may cost the jobs' latency — said, with the setting that keeps it.)
  const occupancies = rows.filter((r) => r.unfinished === 0 && r.occupancy !== null).map((r) => r.occupancy as number);
  const busiest = Math.max(...occupancies);
  // (Not where devices name their kinds: occupancy pools every worker, and a busy GPU beside a light kind's device reads low — pinnedWarning says so.)
  if (occupancies.length > 0 && busiest < ARRIVAL_BOUND && !pinned) notes.push(`note: the devices are at most ${(busiest * 100).toFixed(0)} % busy under every setting that finishes every job: what arrives, not the devices, sets the throughput here — the settings differ in memory and job latency`);
  if (best && quicker) notes.push(`lower latency: ${describe(quicker)}: p99 job latency ${formatMetric('jobLatencyP99Ms', quicker.jobLatencyP99Ms)} against the recommendation's ${formatMetric('jobLatencyP99Ms', best.jobLatencyP99Ms)} (${((best.jobLatencyP99Ms as number) / (quicker.jobLatencyP99Ms as number)).toFixed(1)}×), at peak ${bytes(quicker.peakMemoryBytes)} against ${bytes(best.peakMemoryBytes)} and ${quicker.itemsPerSec.toFixed(3)} items/s: where the jobs' latency matters more than memory, run it instead`);
  // More preparation threads than this machine has cores (a user's 2-core machine was told 4): said where the server would run here.
  const cores = os.availableParallelism();
  if (best?.maxPreparing && best.maxPreparing > cores) {
    const at = config.findIndex((l) => l.startsWith('concurrency = '));
    config.splice(at + 1, 0, threadsLine(best.maxPreparing, cores));
  }
  const own = rows.find((r) => r.pacer === pacers[0] && r.targetWaiting === scenario.targetWaiting && r.budgetBytes === (scenario.budgetBytes ?? null) && r.maxPreparing === (scenario.maxPreparing ?? null) && r.workers.every((w, i) => w === scenario.devices[i]?.workers));
  // (With --budget-bytes its budget is that one: it read as what the run had.)
  const current = own ? `the ${fit ? "run's" : "scenario's"} own setting${budgetBytes === undefined ? '' : ' with the --budget-bytes budget'}: ${describe(own)}: ${own.itemsPerSec.toFixed(3)} items/s, peak ${bytes(own.peakMemoryBytes)}, p99 latency ${formatMetric('jobLatencyP99Ms', own.jobLatencyP99Ms)}${own.unfinished > 0 ? `, ${own.unfinished} jobs lost over the seeds` : ''}` : '';
  if (flags.html !== undefined) {
    const table = { headers, rows: front.map((r) => row(r, r === best)) };
    const html = renderPlanHtml({ title: `stoker plan ${spec ?? `--server ${flags.server}`}`, fitLines: fit ? fitText(fit).trimEnd().split('\n') : [], summary, table, rows, frontier: front, recommended: best, recommendation, current, config, notes, describe });
    writeOutputFile('--html', flags.html, html, io);
  }
  if (flags.json) {
    io.out(`${JSON.stringify({ fit, scenario: scenario.name, seeds, frontier: front, recommended: best ? { ...best, config } : null, lowerLatency: quicker ? { ...quicker, config: configLines(quicker, scenario) } : null, current: own ?? null, ...(passedOver.length > 0 ? { notRecommended: passedOver.map((r) => ({ ...r, why: thin(r) })) } : {}), rows }, null, 2)}\n`);
    return;
  }
  if (fit) io.out(fitText(fit));
  io.out(`${summary}\n`);
  io.out(formatTable(headers, front.map((r) => row(r, r === best))));
  // (A short run's "–" said nothing of why — a user trial.)
  if (front.some((r) => r.occupancy === null)) io.out(`${STEADY_NOTE}\n`);
  // (Pasted whole after a config's own tables, TOML refuses a table defined twice: they merge.)
  for (const r of passedOver.slice(0, 1)) io.out(`\nnot recommended: ${describe(r)} (${r.itemsPerSec.toFixed(3)} items/s): ${thin(r) as string}\n`);
  io.out(`\n${current ? `${current}\n` : ''}${recommendation}\n${config.length ? `# merge into your config: each key replaces the same key of the same table\n${config.join('\n')}\n` : ''}`);
  if (notes.length) io.out(`\n${notes.join('\n')}\n`);
}

/** Below this occupancy under every setting, the devices are not what limits the throughput: the plan says so. */
const ARRIVAL_BOUND = 0.8;

/** Said under the table where a setting has no steady measures. */
const STEADY_NOTE = 'occupancy and waiting read – where the simulated runs are too short for a steady window (it starts two passes through the pipeline after the first arrival and ends a latency before an ideal drain would): items/s, peak memory and p99 latency are over the whole run';

/** The fit of a running server's last `--since` (default 30 minutes), from its trace. */
async function fromServer(flags: PlanFlags): Promise<{ scenario: Scenario; fit: FitReport }> {
  const server = flags.server as string;
  const ms = durationMs(flags.since ?? '30m', '--since');
  const r = await call({ server, ...(flags.tokenFile === undefined ? {} : { tokenFile: flags.tokenFile }) }, 'GET', `v1/trace?since=${Math.round(ms)}ms`, undefined, undefined, isTrace);
  if (r.status !== 200) throw new ClientError(`GET ${server}/v1/trace answered ${r.status}: ${JSON.stringify(r.body)}`, 1);
  const from = `${server}'s last ${flags.since ?? '30m'}`;
  // (A span with no job in it read "a trace written before stoker recorded them … record the run again".)
  let jobs = -1;
  try {
    jobs = fromChromeTrace(r.body).jobs.length;
  } catch {
    // (fitted says what is wrong with it.)
  }
  if (jobs === 0) throw new UsageError(`${from}: no job was submitted in it: give a --since that reaches back over the run to fit`);
  return fitted(r.body, from);
}

/** A scenario fitted from Chrome trace JSON; a run too short to fit is a usage error saying so. */
function fitted(raw: unknown, from: string): { scenario: Scenario; fit: FitReport } {
  let run: ReturnType<typeof fromChromeTrace>;
  try {
    run = fromChromeTrace(raw);
  } catch (e) {
    throw new UsageError(`${from}: ${(e as Error).message}`);
  }
  try {
    const { scenario, fit } = fitRun(run, `fitted from ${from}`);
    return { scenario: parseScenario(scenario, `the scenario fitted from ${from}`), fit };
  } catch (e) {
    if (e instanceof PlanError) throw new UsageError(`${from}: ${e.message}`);
    throw e;
  }
}

function load(spec: string): { scenario: Scenario; fit: FitReport | null } {
  if (spec.endsWith('.json') && fs.existsSync(spec)) {
    let raw: unknown;
    try {
      raw = JSON.parse(fs.readFileSync(spec, 'utf8'));
    } catch (e) {
      throw new UsageError(`${spec} is not JSON: ${(e as Error).message}`);
    }
    if (typeof raw === 'object' && raw !== null && 'traceEvents' in raw) return fitted(raw, spec);
  }
  return { scenario: resolveScenario(spec), fit: null };
}

/**
 * The share of a device's steps that must have run with at most k workers busy for the plan to
 * recommend k workers where the run had more: the steps at a level the run hardly held are its
 * edges (the first, the drain, a starved moment), and on a machine whose preparations share the
 * cores they run quicker for the quiet, not for the fewer workers. A user's demo trace: 26 steps
 * of 455 with one busy read a 2.14× slowdown with two; one worker was recommended and finished
 * less than two in each of two runs.
 */
const FEWER_SHARE = 0.1;

/** Why a row's fewer workers are not to be recommended (null: they may be, or it has none fewer). */
function thinFewer(fit: FitReport, r: PlanRow, s: Scenario): string | null {
  for (let i = 0; i < r.workers.length; i++) {
    const k = r.workers[i] as number;
    const own = s.devices[i]?.workers ?? k;
    const service = fit.devices[i]?.service;
    if (k >= own || !service) continue;
    const at = service.bins.filter((b) => b.concurrency <= k).reduce((n, b) => n + b.samples, 0);
    if (at < FEWER_SHARE * service.samples) {
      return `device ${fit.devices[i]?.name ?? i} ran with ${k} or fewer busy in ${at} of its ${service.samples} steps — too few to say that ${k} worker${k === 1 ? ' finishes' : 's finish'} more than the run's ${own} (those are its edges and quiet moments); try it in a real run first`;
    }
  }
  return null;
}

function describe(r: PlanRow): string {
  return `${r.pacer}, target ${r.targetWaiting}, budget ${r.budgetBytes === null ? 'none' : bytes(r.budgetBytes)}, prep cap ${r.maxPreparing ?? 'none'}, workers ${r.workers.join('/')}`;
}

function row(r: PlanRow, mark: boolean): string[] {
  return [
    `${mark ? '→ ' : ''}${r.pacer}`,
    String(r.targetWaiting),
    r.budgetBytes === null ? 'none' : bytes(r.budgetBytes),
    r.maxPreparing === null ? 'none' : String(r.maxPreparing),
    r.workers.join('/'),
    r.itemsPerSec.toFixed(3),
    formatMetric('occupancy', r.occupancy),
    formatMetric('waitingMean', r.waitingMean),
    bytes(r.peakMemoryBytes),
    formatMetric('jobLatencyP99Ms', r.jobLatencyP99Ms),
  ];
}

/**
 * The base time of a stage fit: alone where the run saw it alone, else at the fewest at once it
 * saw, or as measured where no level had enough spans (below what it saw the fit knows no slowdown).
 */
function base(st: FitReport['devices'][number]['service']): string {
  const fewest = st.bins[0]?.concurrency;
  const at = st.unconfirmed ? 'as run (no slowdown: taken as alone)' : fewest === undefined ? 'as run (no level of concurrency had enough spans to tell; taken as alone)' : fewest <= 1 ? 'alone' : `at ${fewest} at once (the fewest seen; taken as alone)`;
  return `${at} ${st.baseMedianS.toFixed(3)} s`;
}

/** A slowdown in words: each level's factor (`all`) or the last's, with the levels it was read from — or none, and why. */
function slowdown(st: FitReport['devices'][number]['service'], all: boolean): string {
  const c = st.contention;
  if (st.unconfirmed) return `none (×${st.unconfirmed.factor.toFixed(2)} at ${st.unconfirmed.level} by the levels they ran at${levelsOf(st)}, but those that started with more running took no longer: a short one fits in a dip of the level where a long one does not)`;
  if (c.length <= 1) return 'none seen';
  return `${all ? c.map((x) => x.toFixed(2)).join(', ') : `×${(c.at(-1) as number).toFixed(2)} at ${c.length}`}${levelsOf(st)}`;
}

/** The levels a slowdown was read from: each concurrency and how many steady spans it had (a few at one level can mislead). */
function levelsOf(st: FitReport['devices'][number]['service']): string {
  return st.bins.length > 1 ? ` (from ${st.bins.map((b) => `${b.samples} at ${b.concurrency}`).join(', ')})` : '';
}

/** A batched stage's fit, in words. */
function batchText(b: BatchFit): string {
  return `batches of ${b.meanItems.toFixed(1)} items on average (maxItems ${b.maxItems}, maxWaitMs ${Math.round(b.maxWaitS * 1000)}${b.recorded ? '' : ', not recorded by the run'}): ${(b.fixedS * 1000).toFixed(1)} ms fixed + ${(b.perItemMedianS * 1000).toFixed(1)} ms per item (median)`;
}

function fitText(f: FitReport): string {
  const lines = [`fitted from ${f.jobs} jobs (${f.partitions} partitions) over ${f.spanS.toFixed(0)} s:`];
  for (const [kind, k] of Object.entries(f.kinds)) {
    lines.push(`  kind ${kind}: ${k.jobs} jobs, ${k.prepare.samples} preparation${k.prepareBatch ? ' batche' : ''}s, median ${k.prepare.medianS.toFixed(3)} s (p90 ${k.prepare.p90S.toFixed(3)} s), ${base(k.prepare)}; slowdown by concurrent preparations ${slowdown(k.prepare, false)}; memory ${k.prepareBytes} + ${k.deviceBytes} bytes per partition${k.service ? `; its own device time median ${k.service.medianS.toFixed(3)} s` : ''}`);
    if (k.prepareBatch) lines.push(`    preparation ${batchText(k.prepareBatch)}`);
  }
  for (const d of f.devices) {
    lines.push(`  device ${d.device}${d.name === undefined ? '' : ` (${d.name})`}: ${d.workers} worker${d.workers === 1 ? '' : 's'}, ${d.service.samples} ${d.batch ? 'batches' : 'steps'}, median ${d.service.medianS.toFixed(3)} s, ${base(d.service)}; slowdown by busy workers ${slowdown(d.service, true)}`);
    if (d.batch) lines.push(`    ${batchText(d.batch)}`);
  }
  for (const n of f.notes) lines.push(`  note: ${n}`);
  return `${lines.join('\n')}\n\n`;
}

/**
 * The config comment for a preparation cap of more threads than the machine's cores: threads ×
 * concurrency that keeps the cap exactly (5 read as threads 2 × concurrency 3 was a cap of 6), and
 * where that takes fewer threads than cores, the split over more threads that overshoots the cap
 * the least, with the cap it makes.
 */
export function threadsLine(cap: number, cores: number): string {
  let threads = cores;
  while (cap % threads !== 0) threads--;
  // More threads than the exact split, the cap overshooting the least (a prime cap split exactly is one thread).
  let more = 0;
  for (let t = threads + 1; t <= cores; t++) if (more === 0 || t * Math.ceil(cap / t) <= more * Math.ceil(cap / more)) more = t;
  const over = more * Math.ceil(cap / more);
  const near = more > 0 ? `, or threads = ${more}, concurrency = ${Math.ceil(cap / more)}: a cap of ${over}, ${over - cap} more than planned` : '';
  return `# threads = ${cap} is more than this machine's ${cores} cores: for preparations that compute, keep threads ≤ the cores of the machine that serves (here threads = ${threads}, concurrency = ${cap / threads}${near}); the cap is threads × concurrency`;
}

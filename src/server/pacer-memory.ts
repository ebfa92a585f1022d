/**
 * The pacer's memory across restarts: a server starts its pacer from what the config says, else
 * from what the last run measured (`priors.ts`), says so on its start line, and saves what this
 * run measures for the next start.
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import type { Engine, PacerOptions } from '../core/index.js';
import type { DeviceConfig } from './config.js';
import type { ServiceDevice } from './device-runners.js';
import { measuredPriors, readPriors, writePriors, type Priors } from './priors.js';

/**
 * What runs a device's steps, as a short hash (a process's arguments or a URL may hold a secret):
 * its type and its thread kind, program and arguments, or URL. A device time measured on one
 * setup says little of another.
 */
function deviceSetup(d: DeviceConfig): string {
  const what = d.process ? ['process', d.process.command, ...d.process.args] : d.http ? ['http', d.http.url] : ['thread', d.kind];
  return createHash('sha256').update(JSON.stringify(what)).digest('hex').slice(0, 16);
}

/** The pacer options a remembered preparation latency and limit give (where the config gives none). */
type Remembered = Pick<PacerOptions, 'priorLatencyMs' | 'priorLatencySdMs' | 'priorPrepareLimit'>;

/** What one server remembers for its pacer: read at start, saved every few seconds and at close. */
export class PacerMemory {
  /** The pacer's options: the config's, over what the last run measured. */
  readonly pacerOptions: PacerOptions;
  /** Where the pacer's starting rates came from, for the start line (undefined: it measures first). */
  readonly note: string | undefined;
  /** What the last run measured, then what this run measures. */
  private priors: Priors | undefined;
  /** Completions (device + preparation) counted at the last save. */
  private savedAt = 0;
  /** Each device's setup, by index (see {@link deviceSetup}). */
  private readonly setups: readonly string[];

  /**
   * `configured`: the config's `engine.pacerOptions`; `reads`: the options the configured pacer
   * reads (undefined: a pacer module's, unknown) — a pacer that reads no priors (classic, unpaced…)
   * is given none (it refused them as misspelt options, and the server did not start).
   */
  constructor(
    private readonly dataDir: string,
    private readonly devices: readonly ServiceDevice[],
    configured: Record<string, number>,
    reads?: ReadonlySet<string>,
  ) {
    let unread: string | undefined;
    this.setups = devices.map((d) => deviceSetup(d.config));
    this.priors = readPriors(dataDir, (why) => (unread = why));
    const moved = this.priors ? this.forgetOtherSetups(this.priors) : [];
    const priorDeviceServiceMs = devices.map((d) => d.config.priorServiceMs ?? this.priors?.devices[d.name]?.serviceMs ?? 0);
    // Each kind's own device time, where the config gives none for the device.
    const priorKindServiceMs = Object.fromEntries(Object.entries(this.priors?.kinds ?? {}).map(([kind, byDevice]) => [kind, devices.map((d) => (d.config.priorServiceMs === undefined ? (byDevice[d.name]?.serviceMs ?? 0) : 0))]));
    const remembered = this.remembered(configured);
    const given = (k: string) => reads === undefined || reads.has(k) || Object.hasOwn(configured, k);
    const all: PacerOptions = { ...remembered, ...configured, priorDeviceServiceMs, priorKindServiceMs };
    this.pacerOptions = Object.fromEntries(Object.entries(all).filter(([k]) => given(k))) as PacerOptions;
    this.note = unread;
    if (!given('priorDeviceServiceMs')) return;
    const notes = [
      ...(priorDeviceServiceMs.some((v) => v > 0) || remembered.priorLatencyMs !== undefined || remembered.priorPrepareLimit !== undefined ? [this.said(priorDeviceServiceMs, priorKindServiceMs, remembered)] : []),
      ...(moved.length === 0 ? [] : [`the device time the last run measured on ${moved.map((n) => `device ${JSON.stringify(n)}`).join(', ')} is left out: ${moved.length === 1 ? 'it runs' : 'they run'} on another setup now (type, program or URL), and the pacer measures ${moved.length === 1 ? 'it' : 'them'} afresh`]),
    ];
    if (notes.length > 0) this.note = notes.join('; ');
  }

  /**
   * Drops from `p` the device times measured on a device that runs on another setup now (a thread
   * device made a Python process device on the same data dir started from the old one's rates);
   * returns the names of those devices.
   */
  private forgetOtherSetups(p: Priors): string[] {
    const moved = this.devices.filter((d, i) => {
      const was = p.devices[d.name]?.setup;
      return was !== undefined && was !== this.setups[i];
    });
    for (const { name } of moved) {
      delete p.devices[name];
      for (const byDevice of Object.values(p.kinds ?? {})) delete byDevice[name];
    }
    return moved.map((d) => d.name);
  }

  /** Saves what this run measured (over what it remembered) for the next start. */
  save(engine: Engine): void {
    const s = engine.snapshot;
    const measured = s.deviceCompletions + s.prepareCompletions;
    if (measured === this.savedAt) return; // nothing new since the last save
    const terms = engine.pacer.state().terms;
    // The best cap the limiter measured (the one in force may be a probe around it).
    this.priors = measuredPriors(s, this.devices.map((d) => d.name), this.priors, terms['prepareLimitBest'] ?? terms['prepareLimit'], this.setups);
    if (writePriors(this.dataDir, this.priors)) this.savedAt = measured;
  }

  /** The remembered preparation latency and limit, where the config gives none. */
  private remembered(o: Record<string, number>): Remembered {
    const p = this.priors;
    return {
      ...(o['priorLatencyMs'] === undefined && p?.latencyMs !== undefined ? { priorLatencyMs: p.latencyMs, ...(p.latencySdMs === undefined ? {} : { priorLatencySdMs: p.latencySdMs }) } : {}),
      ...(o['priorPrepareLimit'] === undefined && p?.prepareLimit !== undefined ? { priorPrepareLimit: p.prepareLimit } : {}),
    };
  }

  /** The start line's note: what the pacer starts from, and where that came from. */
  private said(deviceMs: readonly number[], kindMs: Record<string, number[]>, remembered: Remembered): string {
    const said = this.devices.flatMap((d, i) => ((deviceMs[i] ?? 0) > 0 ? [`device ${JSON.stringify(d.name)} ${((deviceMs[i] as number) / 1000).toFixed(3)} s per item`] : []));
    const kinds = Object.values(kindMs).filter((ms) => ms.some((v) => v > 0)).length;
    if (kinds > 1) said.push(`each of ${kinds} kinds' own device time`);
    // (To the tenth of a second, a preparation of 31 ms read "0.0 s".)
    if (remembered.priorLatencyMs !== undefined) said.push(`preparation ${(remembered.priorLatencyMs / 1000).toFixed(remembered.priorLatencyMs < 1000 ? 3 : 1)} s`);
    if (remembered.priorPrepareLimit !== undefined) said.push(`at most ${remembered.priorPrepareLimit} preparation${remembered.priorPrepareLimit === 1 ? '' : 's'} at once`);
    const file = path.join(this.dataDir, 'stoker.priors.json');
    const from = [...(this.devices.some((d) => d.config.priorServiceMs !== undefined) ? ['the config'] : []), ...(this.priors ? [`what the last run measured: ${file} (delete it to measure afresh, e.g. after a model change)`] : [])];
    return `the pacer starts from ${said.join(', ')} (${from.join(', and ')})`;
  }
}

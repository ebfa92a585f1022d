/**
 * Remembered rates: what the pacer needs to start warm, kept beside the journal
 * (`<dataDir>/stoker.priors.json`) — each device's measured device time per item (and each
 * kind's on each device), the mean and spread of the preparation latency, and the preparation
 * limit the pacer found. A restarted server starts its pacer from them, so the first job after a
 * restart does not pay a cold start (a bootstrap, then a whole preparation latency before the
 * inventory is sized; a preparation stage that contends run to the memory budget again). Config
 * values (`[device] priorServiceMs`, `engine.pacerOptions.priorLatencyMs`, `priorPrepareLimit`)
 * take precedence.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ReadonlySnapshot } from '../core/index.js';

export interface Priors {
  /** By device name: mean device time per item, ms, and the setup it was measured on. */
  devices: Record<string, Measured>;
  /** By kind, then device name: mean device time per item of that kind, ms, and the setup it was measured on. */
  kinds?: Record<string, Record<string, Measured>>;
  /** Mean and standard deviation of the preparation latency, ms. */
  latencyMs?: number;
  latencySdMs?: number;
  /** The preparation limit the pacer held (where more preparations at once stopped finishing more). */
  prepareLimit?: number;
  savedAt: string;
}

/** A device time per item, ms, and what ran it: a hash of the device's type and program or URL (see PacerMemory; absent in a file from an earlier version). */
export interface Measured {
  serviceMs: number;
  setup?: string;
}

const FILE = 'stoker.priors.json';

const positive = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v > 0;

/**
 * The remembered priors, or undefined when there are none; a file that is not what this server
 * writes is said to `problem` (it was passed over without a word) and passed over.
 */
export function readPriors(dataDir: string, problem: (why: string) => void = () => undefined): Priors | undefined {
  const file = path.join(dataDir, FILE);
  const unread = (why: string) => problem(`${file} ${why}: it starts without remembered rates (the file is written anew within 10 s of work)`);
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT') unread(code === undefined ? `is not JSON (${(e as Error).message})` : `cannot be read (${code})`);
    return undefined;
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    unread('is not a JSON object');
    return undefined;
  }
  // (An object of other fields — another program's file of that name — was passed over without a word.)
  const fields = ['devices', 'kinds', 'latencyMs', 'latencySdMs', 'prepareLimit', 'savedAt'];
  if (!Object.keys(raw).some((k) => fields.includes(k))) {
    unread(`holds none of the fields this server writes (${fields.join(', ')})`);
    return undefined;
  }
  const r = raw as Partial<Priors>;
  const byName = (o: unknown) => {
    const out: Record<string, Measured> = {};
    for (const [name, d] of Object.entries(typeof o === 'object' && o !== null ? o : {})) {
      const { serviceMs, setup } = d as { serviceMs?: unknown; setup?: unknown };
      if (positive(serviceMs)) out[name] = { serviceMs, ...(typeof setup === 'string' ? { setup } : {}) };
    }
    return out;
  };
  const kinds: NonNullable<Priors['kinds']> = {};
  for (const [kind, ds] of Object.entries(typeof r.kinds === 'object' && r.kinds !== null ? r.kinds : {})) {
    const devices = byName(ds);
    if (Object.keys(devices).length > 0) kinds[kind] = devices;
  }
  return {
    devices: byName(r.devices),
    ...(Object.keys(kinds).length > 0 ? { kinds } : {}),
    ...(positive(r.latencyMs) ? { latencyMs: r.latencyMs } : {}),
    ...(positive(r.latencySdMs) ? { latencySdMs: r.latencySdMs } : {}),
    ...(positive(r.prepareLimit) ? { prepareLimit: r.prepareLimit } : {}),
    savedAt: typeof r.savedAt === 'string' ? r.savedAt : '',
  };
}

/**
 * What this run measured (from the engine's counters, and the preparation limit the pacer holds
 * now, if any), over what was remembered where it measured nothing; `setups`: each device's setup
 * (by index, as the names), kept with what it measured.
 */
export function measuredPriors(s: ReadonlySnapshot, deviceNames: readonly string[], before: Priors | undefined, prepareLimit?: number, setups: readonly string[] = []): Priors {
  const measured = (serviceMs: number, i: number): Measured => (setups[i] === undefined ? { serviceMs } : { serviceMs, setup: setups[i] });
  const devices: Priors['devices'] = { ...before?.devices };
  deviceNames.forEach((name, i) => {
    const d = s.devices[i];
    if (d && d.completions > 0 && d.busyMs > 0) devices[name] = measured(d.busyMs / d.completions, i);
  });
  const kinds: NonNullable<Priors['kinds']> = { ...before?.kinds };
  for (const k of s.kinds) {
    deviceNames.forEach((name, i) => {
      const n = k.completions[i] ?? 0;
      const ms = k.busyMs[i] ?? 0;
      if (n > 0 && ms > 0) kinds[k.name] = { ...kinds[k.name], [name]: measured(ms / n, i) };
    });
  }
  const n = s.prepareCompletions;
  const mean = n > 0 ? s.prepareLatencyMsTotal / n : before?.latencyMs;
  const sd = n > 1 ? Math.sqrt(Math.max(0, s.prepareLatencySqTotal / n - (s.prepareLatencyMsTotal / n) ** 2)) : before?.latencySdMs;
  const limit = n > 0 ? prepareLimit : before?.prepareLimit;
  return { devices, ...(Object.keys(kinds).length > 0 ? { kinds } : {}), ...(positive(limit) ? { prepareLimit: limit } : {}), ...(positive(mean) ? { latencyMs: mean } : {}), ...(positive(sd) ? { latencySdMs: sd } : {}), savedAt: new Date().toISOString() };
}

/** Writes the priors (a new file renamed over the old: never half written); false when the disk refused. */
export function writePriors(dataDir: string, p: Priors): boolean {
  const file = path.join(dataDir, FILE);
  const tmp = `${file}.tmp`;
  try {
    fs.writeFileSync(tmp, `${JSON.stringify(p, null, 2)}\n`);
    fs.renameSync(tmp, file);
    return true;
  } catch {
    fs.rmSync(tmp, { force: true });
    return false; // a full disk: the journal's own writes say so; these are a convenience
  }
}

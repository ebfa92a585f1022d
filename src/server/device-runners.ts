/** The server's devices and where each one's steps run: their table in engine order, the engine's view of them, their runners and handoff folders. */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { DeviceSpec } from '../core/index.js';
import { HttpDevice } from '../runtime/http-device.js';
import { ProcessDevice } from '../runtime/process-device.js';
import type { DeviceRunner, StageThreads } from '../runtime/threaded.js';
import type { Handoff } from '../runtime/threads/protocol.js';
import { ConfigError, type DeviceConfig, type ServeConfig } from './config.js';
import type { LoadedKind } from './kind-module.js';
import type { ServerLog } from './log.js';

/** A device as the server numbers it. */
export interface ServiceDevice {
  name: string;
  config: DeviceConfig;
}

/** The devices by index, as the engine numbers them: [device] ("default"), then each [devices.NAME]. */
export function serviceDevices(config: ServeConfig): ServiceDevice[] {
  return [['default', config.device] as const, ...Object.entries(config.devices ?? {})].map(([name, d]) => ({ name, config: d }));
}

/** Where a device's settings are in a config: `device` for "default", else `devices.NAME`. */
export function deviceField(name: string): string {
  return name === 'default' ? 'device' : `devices.${name}`;
}

/** The devices as the engine takes them: workers, batching, and (with several devices) the kinds that name each one. */
export function engineDevices(devices: readonly ServiceDevice[], kinds: ReadonlyMap<string, LoadedKind>): DeviceSpec[] {
  const several = devices.length > 1;
  return devices.map(({ name, config: d }) => ({
    workers: d.workers,
    name,
    ...(several ? { kinds: [...kinds.values()].filter((k) => k.device === name).map((k) => k.name) } : {}),
    ...(d.batch ? { batch: { maxItems: d.batch.maxItems, maxWaitMs: d.batch.maxWaitMs } } : {}),
  }));
}

/** Per device, a process device's handoff files: this server's own folder (see {@link handoffFolder}). */
export function deviceHandoffs(devices: readonly ServiceDevice[], dataDir: string): (Handoff | undefined)[] {
  return devices.map(({ name, config: d }) => (d.process ? handoffFolder(d.process.handoffDir, name === 'default' ? dataDir : `${dataDir}#${name}`, d.process.handoffMinBytes, deviceField(name)) : undefined));
}

/** Where a device's steps run: the shared device threads, its processes, or its endpoint. */
export function deviceRunner(name: string, d: DeviceConfig, threads: StageThreads, log: ServerLog): DeviceRunner {
  if (d.http) return new HttpDevice({ name, workers: d.workers, url: d.http.url, headers: d.http.headers, timeoutMs: d.http.timeoutS * 1000, maxResponseBytes: d.http.maxResponseBytes, unreachableMs: d.http.unreachableS * 1000, log });
  const p = d.process;
  if (!p) return threads;
  return new ProcessDevice({ name, workers: d.workers, command: p.command, args: p.args, env: p.env, ...(p.cwd === undefined ? {} : { cwd: p.cwd }), readyTimeoutMs: p.readyTimeoutS * 1000, maxFrameBytes: p.maxFrameBytes, onWithdraw: p.onWithdraw, finishTimeoutMs: p.finishTimeoutS * 1000, log });
}

/**
 * A process device's folder for handoff files, named by the server's data dir (and the device,
 * where it is not the default: see deviceHandoffs) so that a restart after a crash finds and
 * removes what the crashed run left, created empty and private: in a shared folder such as
 * /dev/shm, a folder of that name made by someone else is refused, never used.
 */
export function handoffFolder(base: string, dataDir: string, minBytes: number, field: string): Handoff {
  const dir = path.join(base, `stoker-handoff-${createHash('sha256').update(dataDir).digest('hex').slice(0, 16)}`);
  const fail = (why: string) =>
    new ConfigError([{ source: 'configuration', path: `${field}.process.handoffDir`, message: `cannot use ${dir} for handoff files: ${why} — give a memory-backed folder this user may write (e.g. "/dev/shm"), or raise handoffMinBytes` }]);
  try {
    fs.rmSync(dir, { recursive: true, force: true });
    // Not recursive: the base must exist, and a folder someone made meanwhile fails (EEXIST).
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (e) {
    throw fail((e as Error).message);
  }
  const st = fs.lstatSync(dir);
  if (!st.isDirectory() || (process.getuid && st.uid !== process.getuid())) throw fail('it is not a folder of this user');
  return { dir, minBytes };
}

/**
 * A sweep over every core: each worker thread simulates one setting at a time, as they come (the
 * simulator is single-threaded and each setting independent, so the rows are the same whatever
 * the threads, in the grid's order).
 */
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import type { Scenario } from '../sim/index.js';
import { runSetting, type PlanRow, type PlanSetting } from './sweep.js';

export interface SweepOptions {
  /** Worker threads. @default the machine's available parallelism */
  threads?: number;
  /** Called as each setting finishes (in the order they finish), with how many are done. */
  onRow?: (row: PlanRow, done: number) => void;
}

/** Simulates every setting over the seeds; one row per setting, in the order given. */
export async function sweep(s: Scenario, settings: readonly PlanSetting[], seeds: readonly number[], options: SweepOptions = {}): Promise<PlanRow[]> {
  const threads = Math.max(1, Math.min(options.threads ?? os.availableParallelism(), settings.length));
  const rows: PlanRow[] = new Array<PlanRow>(settings.length);
  let done = 0;
  if (threads === 1) {
    settings.forEach((setting, i) => {
      rows[i] = runSetting(s, setting, seeds);
      options.onRow?.(rows[i] as PlanRow, ++done);
    });
    return rows;
  }
  let next = 0;
  let failed = false;
  const workers: Worker[] = [];
  // The first thread that fails stops them all: no more settings are sent, the others are ended.
  const stopAll = () => {
    failed = true;
    for (const w of workers) {
      w.removeAllListeners('exit');
      void w.terminate();
    }
  };
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const w = new Worker(new URL('./sweep-worker.js', import.meta.url), { workerData: { scenario: s, seeds } });
      workers.push(w);
      const fail = (e: Error) => {
        if (!failed) stopAll();
        reject(e);
      };
      const feed = () => {
        if (failed || next >= settings.length) {
          w.removeAllListeners('exit');
          void w.terminate().then(() => resolve(), reject);
          return;
        }
        const i = next++;
        w.postMessage({ i, setting: settings[i] });
      };
      w.on('message', (m: { i: number; row: PlanRow }) => {
        if (failed) return;
        rows[m.i] = m.row;
        options.onRow?.(m.row, ++done);
        feed();
      });
      w.on('error', fail);
      w.on('exit', (code) => fail(new Error(`a sweep thread exited (code ${code}) before the sweep was done`)));
      feed();
    });
  await Promise.all(Array.from({ length: threads }, one));
  return rows;
}

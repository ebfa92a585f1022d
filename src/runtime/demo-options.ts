// The demo's options and defaults, apart from the demo (the CLI's help shows the defaults without loading the runtime).
import type { TimelineRecorder } from '../core/index.js';

export interface DemoOptions {
  /** How long jobs keep arriving, seconds; then the jobs in flight finish. @default 60 */
  seconds: number;
  pacer: string;
  /** Device workers (threads) on the one device. @default 2 */
  workers: number;
  /** The device kind: CPU threads or WebGPU. @default 'cpu' */
  device: 'cpu' | 'webgpu';
  /** Polynomials of 2^logN coefficients per partition (2^19: about 95 ms of device time on this machine; shorter items make the thread handoff a visible share of the device time). @default 19 */
  logN: number;
  /** Simulated synthesis wait per partition, ms (no CPU used). @default 1000 */
  synthesisMs: number;
  /** Partitions per job. @default 10 */
  partitions: number;
  /** Jobs kept in the system (a closed loop: a new job arrives when one finishes). @default 12 */
  jobsInFlight: number;
  /** The pacer's waiting target. @default 4 */
  targetWaiting: number;
  /** The engine's memory budget, bytes. @default Infinity (none) */
  budgetBytes?: number;
  /** Most preparations at once. @default 64 */
  maxPreparing?: number;
  /** Progress lines (stderr): every this many ms; 0 for none. @default 1000 */
  progressMs: number;
  seed: number;
  /** More options for the pacer (see its documentation). */
  pacerOptions?: Record<string, number>;
  /** Records the run (what ran on which worker, the pipeline's levels); times are performance.now() ms. */
  timeline?: TimelineRecorder;
}

export const DEMO_DEFAULTS: DemoOptions = {
  seconds: 60,
  pacer: 'stoker',
  workers: 2,
  device: 'cpu',
  logN: 19,
  synthesisMs: 1000,
  partitions: 10,
  jobsInFlight: 12,
  targetWaiting: 4,
  progressMs: 1000,
  seed: 1,
};

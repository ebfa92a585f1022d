/** A sweep thread (see parallel.ts): simulates the settings it is sent, one at a time. */
import { parentPort, workerData } from 'node:worker_threads';
import type { Scenario } from '../sim/index.js';
import { runSetting, type PlanSetting } from './sweep.js';

const port = parentPort;
if (!port) throw new Error('sweep-worker.js runs as a worker thread');
const { scenario, seeds } = workerData as { scenario: Scenario; seeds: number[] };
port.on('message', (m: { i: number; setting: PlanSetting }) => port.postMessage({ i: m.i, row: runSetting(scenario, m.setting, seeds) }));

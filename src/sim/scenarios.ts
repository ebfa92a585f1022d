import { parseScenario, type Scenario, type ScenarioInput } from './scenario.js';

const GiB = 1024 ** 3;

/** The `seed` stage model: 1 device, 2 workers, 1.0 s alone / 1.2 s each when both run; preparation 30–50 s. */
function seedLike(name: string, description: string, extra: Partial<ScenarioInput> = {}): ScenarioInput {
  return {
    name,
    description,
    targetWaiting: 6,
    kinds: { proof: { prepare: { type: 'uniform', min: 30, max: 50 }, memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } } },
    devices: [{ workers: 2, service: { type: 'fixed', value: 1 }, contention: [1, 1.2] }],
    arrivals: [{ atS: 0, jobs: 40, partitions: 10, kind: 'proof' }],
    ...extra,
  };
}

/** The field testbed: 3.75 s alone, ×1.73 when both workers run; 36.5 s ± 15 % synthesis; 14 GiB then 1 GiB per partition. */
function fieldTestbed(name: string, description: string, budgetBytes: number): ScenarioInput {
  return {
    name,
    description,
    targetWaiting: 4,
    budgetBytes,
    kinds: { proof: { prepare: { type: 'uniform', min: 36.5 * 0.85, max: 36.5 * 1.15 }, memory: { prepareBytes: 14 * GiB, deviceBytes: 1 * GiB } } },
    devices: [{ workers: 2, service: { type: 'fixed', value: 3.75 }, contention: [1, 1.73] }],
    arrivals: [{ atS: 0, jobs: 20, partitions: 10, kind: 'proof' }],
  };
}

/**
 * An inference-like batching device: CPU preprocessing of ~2 s, 2 GPU workers whose batch costs a
 * fixed 0.2 s (launch, transfer) plus 10 ms per item, up to 16 items: 88.9 items/s at full
 * batches, 9.5 items/s one at a time. 64 MiB per item until it is on the device.
 */
function inference(name: string, description: string, maxItems: number, arrivals: ScenarioInput['arrivals']): ScenarioInput {
  return {
    name,
    description,
    targetWaiting: 4,
    kinds: { req: { prepare: { type: 'lognormal', median: 2, sigma: 0.3 }, memory: { prepareBytes: 64 * 1024 ** 2, deviceBytes: 0 } } },
    devices: [{ workers: 2, service: { type: 'lognormal', median: 0.01, sigma: 0.2 }, batch: { maxItems, fixed: { type: 'lognormal', median: 0.2, sigma: 0.1 } } }],
    arrivals,
  };
}

/**
 * The field engine's batch collector: PoRep-like sectors (1 partition each) arrive one by one; a
 * preparation batch of up to `maxItems` synthesises them together (a 6 s setup once, 8 s per
 * sector), flushed when full, when other work is queued behind it, or after 30 s; two syntheses at
 * once (maxPreparing); the GPU proves a batch in 4 s + 1 s per sector.
 */
function porep(name: string, description: string, maxItems: number): ScenarioInput {
  return {
    name,
    description,
    targetWaiting: 4,
    maxPreparing: 2,
    kinds: {
      porep: {
        prepare: { type: 'lognormal', median: 8, sigma: 0.2 },
        prepareBatch: { maxItems, maxWaitS: 30, fixed: { type: 'lognormal', median: 6, sigma: 0.1 } },
        memory: { prepareBytes: 14 * 1024 ** 3, deviceBytes: 4 * 1024 ** 3 },
      },
    },
    devices: [{ workers: 2, service: { type: 'lognormal', median: 1, sigma: 0.2 }, batch: { maxItems, fixed: { type: 'fixed', value: 4 } } }],
    arrivals: [{ poisson: { ratePerS: 0.18, untilS: 1800 }, partitions: 1, kind: 'porep' }],
  };
}

/** Preparation contention with a knee: 1 up to `knee` concurrent preparations, then (n / knee)^power (to 400 at once). */
function kneeContention(knee: number, power: number): number[] {
  return Array.from({ length: 400 }, (_, i) => Math.max(1, ((i + 1) / knee) ** power));
}

/** Preparation contention with a soft knee and no plateau: (1 + (n / knee)^power)^(1 / power) (to 400 at once): throughput n ÷ that still rises past the knee, ever more slowly. */
function softKneeContention(knee: number, power: number): number[] {
  return Array.from({ length: 400 }, (_, i) => (1 + ((i + 1) / knee) ** power) ** (1 / power));
}

export const GAIN_SWEEP_SERVICE_S = [0.25, 0.5, 1, 2, 4] as const;

function gainSweep(service: number): ScenarioInput {
  const capacityPerS = 2 / (service * 1.2);
  // Enough work for about ten minutes of saturated devices.
  const jobs = Math.ceil((capacityPerS * 600) / 10);
  return {
    name: `gain-sweep-${service}`,
    description: `service ${service} s (×1.2 with both workers busy), preparation fixed 40 s, target 4: ${jobs} jobs × 10`,
    targetWaiting: 4,
    kinds: { proof: { prepare: { type: 'fixed', value: 40 } } },
    devices: [{ workers: 2, service: { type: 'fixed', value: service }, contention: [1, 1.2] }],
    arrivals: [{ atS: 0, jobs, partitions: 10, kind: 'proof' }],
  };
}

const inputs: ScenarioInput[] = [
  seedLike('seed', '1 device × 2 workers, service 1.0 s (1.2 s when both busy), preparation 30–50 s, 40 jobs × 10 at t=0, target 6'),
  fieldTestbed('field-testbed', 'the field engine’s testbed: service 3.75 s (×1.73 both busy), synthesis 36.5 s ± 15 %, 14 GiB → 1 GiB per partition, 384 GiB budget', 384 * GiB),
  seedLike('jitter', 'seed with lognormal preparation (median 40 s, σ 0.4), 100 jobs so the heavy tail leaves a steady window', {
    arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
    kinds: { proof: { prepare: { type: 'lognormal', median: 40, sigma: 0.4 }, memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } } },
  }),
  seedLike('noisy-service', 'seed with a noisy device: lognormal service time (median 1 s, σ 0.3), 100 jobs', {
    arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
    devices: [{ workers: 2, service: { type: 'lognormal', median: 1, sigma: 0.3 }, contention: [1, 1.2] }],
  }),
  {
    name: 'fast-noisy',
    description: 'the demo’s shape: 2 workers, lognormal 40 ms service (σ 0.3), ~1 s preparation, target 4 (≈ 45 items in preparation), 300 jobs × 10',
    targetWaiting: 4,
    kinds: { proof: { prepare: { type: 'uniform', min: 1, max: 1.15 }, memory: { prepareBytes: 2 * 1024 ** 2, deviceBytes: 2 * 1024 ** 2 } } },
    devices: [{ workers: 2, service: { type: 'lognormal', median: 0.04, sigma: 0.3 }, contention: [1, 1.1] }],
    arrivals: [{ atS: 0, jobs: 300, partitions: 10, kind: 'proof' }],
  },
  seedLike('burst-after-idle', 'seed stages: 1 job at t=0, idle 30 min, then 10 jobs at once', {
    arrivals: [
      { atS: 0, jobs: 1, partitions: 10, kind: 'proof' },
      { atS: 1800, jobs: 10, partitions: 10, kind: 'proof' },
    ],
  }),
  seedLike('gaps', 'seed stages: 5 batches of 5 jobs, 3 minutes apart', {
    arrivals: [0, 180, 360, 540, 720].map((atS) => ({ atS, jobs: 5, partitions: 10, kind: 'proof' })),
  }),
  seedLike('slowdown', 'seed stages, 150 jobs; the device’s service time doubles at t=600 s', {
    arrivals: [{ atS: 0, jobs: 150, partitions: 10, kind: 'proof' }],
    events: [{ type: 'speed', atS: 600, speed: 0.5 }],
  }),
  seedLike('speedup', 'seed stages, 200 jobs; the device’s service time halves at t=600 s', {
    arrivals: [{ atS: 0, jobs: 200, partitions: 10, kind: 'proof' }],
    events: [{ type: 'speed', atS: 600, speed: 2 }],
  }),
  ...GAIN_SWEEP_SERVICE_S.map(gainSweep),
  fieldTestbed('budget-bound', 'field-testbed with a budget for 6 partitions in flight (84 GiB)', 6 * 14 * GiB),
  seedLike('oversize', 'seed stages with a 100 GiB budget; job-2’s partitions need 200 GiB each and must fail alone', {
    budgetBytes: 100 * GiB,
    kinds: {
      proof: { prepare: { type: 'uniform', min: 30, max: 50 }, memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } },
      huge: { prepare: { type: 'uniform', min: 30, max: 50 }, memory: { prepareBytes: 200 * GiB, deviceBytes: 1 * GiB } },
    },
    arrivals: [
      { atS: 0, jobs: 2, partitions: 10, kind: 'proof' },
      { atS: 0.001, jobs: 1, partitions: 10, kind: 'huge' },
      { atS: 0.002, jobs: 7, partitions: 10, kind: 'proof' },
    ],
  }),
  seedLike('failure', 'seed stages, 10 jobs: partition 5 of job-3 fails in preparation; partition 2 of job-7 fails on the device', {
    arrivals: [{ atS: 0, jobs: 10, partitions: 10, kind: 'proof' }],
    faults: [
      { job: 'job-3', partition: 5, stage: 'prepare' },
      { job: 'job-7', partition: 2, stage: 'device' },
    ],
  }),
  seedLike('worker-loss', 'seed stages, 120 jobs; worker 1 is lost at t=300 s and back at t=900 s', {
    arrivals: [{ atS: 0, jobs: 120, partitions: 10, kind: 'proof' }],
    events: [
      { type: 'workerLost', atS: 300, device: 0, worker: 1 },
      { type: 'workerReturned', atS: 900, device: 0, worker: 1 },
    ],
  }),
  seedLike('worker-flap', 'seed stages, 150 jobs; worker 1 is down for 30 s of every minute (lost and back within one preparation latency)', {
    arrivals: [{ atS: 0, jobs: 150, partitions: 10, kind: 'proof' }],
    events: Array.from({ length: 29 }, (_, k) => 60 * (k + 1)).flatMap((atS) => [
      { type: 'workerLost' as const, atS, device: 0, worker: 1 },
      { type: 'workerReturned' as const, atS: atS + 30, device: 0, worker: 1 },
    ]),
  }),
  seedLike('bimodal-service', 'seed stages, 100 jobs; the device takes 0.5 s for 80 % of items and 3 s for 20 % (mean 1 s)', {
    arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
    devices: [{ workers: 2, service: { type: 'empirical', values: [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 3, 3] }, contention: [1, 1.2] }],
  }),
  seedLike('heavy-tail-service', 'seed stages, 100 jobs; lognormal device time, median 0.6 s, σ 1 (mean 0.99 s)', {
    arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
    devices: [{ workers: 2, service: { type: 'lognormal', median: 0.6, sigma: 1 }, contention: [1, 1.2] }],
  }),
  seedLike('budget-binding', 'seed stages, 100 jobs, a 60 GiB budget: 60 partitions in flight where the devices want ~80', {
    budgetBytes: 60 * GiB,
    arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
  }),
  seedLike('lock-busy', 'seed stages, 100 jobs; 2 workers declared on a device that serves one at a time (each takes 2× when both run) and reports only its own 1 s per item (a kernel timed behind a lock)', {
    arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
    devices: [{ workers: 2, service: { type: 'fixed', value: 1 }, contention: [1, 2], busyTime: 'own' }],
  }),
  seedLike('mixed-kinds', 'seed stages, two kinds on one device in blocks of 3 jobs × 10, 60 jobs: heavy items take 3.5–4.5 s of device time (×1.2 when both workers run), light ones 0.8–1.2 s', {
    arrivals: Array.from({ length: 20 }, (_, b) => ({ atS: b * 0.001, jobs: 3, partitions: 10, kind: b % 2 === 0 ? 'heavy' : 'light' })),
    devices: [{ workers: 2, service: { type: 'uniform', min: 0.8, max: 1.2 }, contention: [1, 1.2] }],
    kinds: {
      heavy: { prepare: { type: 'uniform', min: 30, max: 50 }, service: { type: 'uniform', min: 3.5, max: 4.5 }, memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } },
      light: { prepare: { type: 'uniform', min: 30, max: 50 }, memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } },
    },
  }),
  seedLike('mixed-latency', 'three kinds on one device that differ in preparation too, in blocks (a job of each, 10 partitions) every 35 s for 20 blocks, more than the device takes: heavy 40–60 s to prepare and 3.5–4.5 s of device time, medium 16–24 s and 1.6–2.4 s, light 4–6 s and 0.4–0.6 s (×1.2 when both workers run)', {
    arrivals: Array.from({ length: 20 }, (_, b) => (['heavy', 'medium', 'light'] as const).map((kind, i) => ({ atS: b * 35 + i * 0.001, jobs: 1, partitions: 10, kind }))).flat(),
    devices: [{ workers: 2, service: { type: 'uniform', min: 0.8, max: 1.2 }, contention: [1, 1.2] }],
    kinds: {
      heavy: { prepare: { type: 'uniform', min: 40, max: 60 }, service: { type: 'uniform', min: 3.5, max: 4.5 }, memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } },
      medium: { prepare: { type: 'uniform', min: 16, max: 24 }, service: { type: 'uniform', min: 1.6, max: 2.4 }, memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } },
      light: { prepare: { type: 'uniform', min: 4, max: 6 }, service: { type: 'uniform', min: 0.4, max: 0.6 }, memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } },
    },
  }),
  seedLike('prep-knee', 'seed stages, 250 jobs, a 200 GiB budget; preparations share the machine: past 24 at once each slows as (n / 24)^1.3 (memory thrash), so preparation throughput peaks at 24 in flight (0.6/s, below the devices’ 1.67/s) and falls beyond', {
    budgetBytes: 200 * GiB,
    arrivals: [{ atS: 0, jobs: 250, partitions: 10, kind: 'proof' }],
    kinds: { proof: { prepare: { type: 'uniform', min: 30, max: 50 }, contention: kneeContention(24, 1.3), memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } } },
  }),
  seedLike('prep-plateau', 'seed stages, 250 jobs, a 200 GiB budget; past 24 preparations at once each slows as n / 24 (24 cores): more in flight only adds latency and memory (0.6/s whatever the number)', {
    budgetBytes: 200 * GiB,
    arrivals: [{ atS: 0, jobs: 250, partitions: 10, kind: 'proof' }],
    kinds: { proof: { prepare: { type: 'uniform', min: 30, max: 50 }, contention: kneeContention(24, 1), memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } } },
  }),
  seedLike('prep-soft-knee', 'seed stages, 600 jobs, a 200 GiB budget; with n preparing each preparation slows as (1 + (n / 24)^4)^¼, a soft knee with no plateau: throughput still rises past 24, ever more slowly (0.84 of its 0.6/s limit at 24 in flight, 0.97 at 40, 0.99 at 60)', {
    budgetBytes: 200 * GiB,
    arrivals: [{ atS: 0, jobs: 600, partitions: 10, kind: 'proof' }],
    kinds: { proof: { prepare: { type: 'uniform', min: 30, max: 50 }, contention: softKneeContention(24, 4), memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } } },
  }),
  seedLike('prep-knee-arrivals', 'prep-knee’s stages with no memory budget, jobs of 10 partitions arriving one every 12 s for 50 minutes (0.83/s, more than preparation finishes at its knee of 24: 0.6/s): each job is dispatched as it comes, and the queue is empty between arrivals', {
    arrivals: [{ atS: 0, jobs: 250, partitions: 10, kind: 'proof', everyS: 12 }],
    kinds: { proof: { prepare: { type: 'uniform', min: 30, max: 50 }, contention: kneeContention(24, 1.3), memory: { prepareBytes: 1 * GiB, deviceBytes: 128 * 1024 ** 2 } } },
  }),
  seedLike('device-thrash', 'seed stages, 100 jobs; a device with 4 workers whose memory thrashes past 2 busy (×1.05 with 2, ×1.9 with 3, ×3.2 with 4): 2 at once finish 1.9/s, all 4 only 1.25/s', {
    arrivals: [{ atS: 0, jobs: 100, partitions: 10, kind: 'proof' }],
    devices: [{ workers: 4, service: { type: 'fixed', value: 1 }, contention: [1, 1.05, 1.9, 3.2] }],
  }),
  inference('batch-infer', 'inference-like batching device (0.2 s + 10 ms per item, batches of up to 16, 2 workers: 88.9 items/s): 40 jobs × 500 requests every 5 s, more than it takes', 16, [{ atS: 0, jobs: 40, partitions: 500, kind: 'req', everyS: 5 }]),
  inference('batch-infer-single', 'batch-infer’s device one item at a time (0.21 s each: 9.5 items/s), the same work', 1, [{ atS: 0, jobs: 40, partitions: 500, kind: 'req', everyS: 5 }]),
  inference('batch-infer-60', 'batch-infer’s device under Poisson arrivals at 60 % of its batched capacity (jobs of 10 requests) for 10 minutes', 16, [{ poisson: { ratePerS: (0.6 * 88.9) / 10, untilS: 600 }, partitions: 10, kind: 'req' }]),
  porep('prep-batch', 'the field engine’s batch collector: sectors arrive (Poisson, 0.18/s for 30 min); batches of up to 4 are synthesised together (6 s + 8 s per sector, 2 at once, flushed after 30 s) and proved together (4 s + 1 s per sector)', 4),
  porep('prep-batch-single', 'prep-batch one sector per step (14 s to synthesise, 5 s to prove each): the same arrivals', 1),
  seedLike('priority', 'seed stages: 12 normal jobs × 10 at t=0; a critical 1-partition job arrives at t=60 s behind the queued ones', {
    arrivals: [
      { atS: 0, jobs: 12, partitions: 10, kind: 'proof' },
      { atS: 60, jobs: 1, partitions: 1, kind: 'proof', priority: 'critical' },
    ],
  }),
  seedLike('cancel', 'seed stages, 10 jobs; job-1 (10 partitions) is cancelled at t=45 s while part of it is in flight', {
    arrivals: [{ atS: 0, jobs: 10, partitions: 10, kind: 'proof' }],
    events: [{ type: 'cancel', atS: 45, job: 'job-1' }],
  }),
  seedLike('seed-day', 'seed stages under Poisson arrivals at 90 % of capacity for a simulated day (speed benchmark)', {
    arrivals: [{ poisson: { ratePerS: (0.9 * (2 / 1.2)) / 10, untilS: 86_400 }, partitions: 10, kind: 'proof' }],
  }),
];

/** The built-in scenarios, validated like user files. */
export const SCENARIOS: ReadonlyMap<string, Scenario> = new Map(inputs.map((i) => [i.name, parseScenario(i, `built-in scenario ${i.name}`)]));

/** The scenarios `stoker bench` runs by default (all but the day-long speed scenario). */
export const BENCH_SCENARIOS = [...SCENARIOS.keys()].filter((n) => n !== 'seed-day');

import { z } from 'zod';
import { suggest } from '../core/suggest.js';
import { MAX_PARTITIONS, PRIORITIES } from '../core/index.js';
import type { Rng } from './random.js';

/** Times in scenario files are in seconds; bytes are bytes. */

const positive = (what: string) => z.number({ error: `${what} must be a number` }).positive({ error: `${what} must be > 0` });
const nonNegative = (what: string) => z.number({ error: `${what} must be a number` }).min(0, { error: `${what} must be ≥ 0` });
/** A number of bytes ≥ 0 (a unit string such as "400GiB" is refused with an example of the number). */
const bytes = (what: string) => z.number({ error: `${what} must be a number of bytes, e.g. 429496729600 for 400 GiB` }).min(0, { error: `${what} must be ≥ 0` });
/** (1.5 or 1e18 read "must be a number of bytes": a number, refused without saying why.) */
const wholeBytes = (what: string) => bytes(what).int({ error: `${what} must be a whole number of bytes, at most 2^53 − 1 (9007199254740991), e.g. 429496729600 for 400 GiB` });
const probability = z.number({ error: 'a probability must be a number' }).min(0, { error: 'a probability must be in [0, 1]' }).max(1, { error: 'a probability must be in [0, 1]' });
const count = (what: string) => z.number({ error: `${what} must be a number` }).int({ error: `${what} must be a whole number` }).min(1, { error: `${what} must be ≥ 1` });

/** A distribution of durations in seconds. */
export const DistSchema = z.discriminatedUnion(
  'type',
  [
    z.strictObject({ type: z.literal('fixed'), value: nonNegative('value (seconds)') }),
    z
      .strictObject({ type: z.literal('uniform'), min: nonNegative('min (seconds)'), max: nonNegative('max (seconds)') })
      .refine((d) => d.max >= d.min, { error: 'max must be ≥ min', path: ['max'] }),
    z.strictObject({ type: z.literal('lognormal'), median: positive('median (seconds)'), sigma: nonNegative('sigma') }),
    z.strictObject({ type: z.literal('empirical'), values: z.array(nonNegative('each value (seconds)')).min(1, { error: 'values must list at least one duration' }) }),
  ],
  { error: 'type must be one of fixed, uniform, lognormal, empirical, e.g. { "type": "uniform", "min": 30, "max": 50 }' },
);
export type Dist = z.infer<typeof DistSchema>;

/** Multipliers by number of concurrent users (index 0: one user); the last value holds beyond the list. */
const Contention = z.array(positive('a contention factor')).min(1, { error: 'list at least one factor, e.g. [1, 1.2]' });

/** A batch of one step, on a device (`batch`) or in preparation (`prepareBatch`): the most items, the longest wait for more, the fixed part of its time. */
const batchSchema = (field: string) =>
  z
    .strictObject({
      maxItems: count(`${field}.maxItems`),
      maxWaitS: nonNegative(`${field}.maxWaitS (seconds)`).default(0),
      fixed: DistSchema.default({ type: 'fixed', value: 0 }),
    })
    .optional();

const KindSchema = z.strictObject({
  /** Preparation latency (seconds) when it runs alone. */
  prepare: DistSchema,
  /**
   * Latency multiplier by number of concurrent preparations, applied continuously (a fluid model:
   * a preparation in flight slows down when more start, speeds up when they end). @default [1]
   */
  contention: Contention.default([1]),
  /**
   * Device time (seconds, one busy worker at speed 1) of this kind's items, overriding the
   * device's own `service` for them (a kind several times heavier on the same device). @default the device's
   */
  service: DistSchema.optional(),
  memory: z.strictObject({ prepareBytes: wholeBytes('prepareBytes').default(0), deviceBytes: wholeBytes('deviceBytes').default(0) }).default({ prepareBytes: 0, deviceBytes: 0 }),
  /**
   * Preparation batches (the field engine's batch collector): up to `maxItems` queued items of the
   * kind are prepared together as one step, waiting up to `maxWaitS` for more to arrive while
   * fewer are queued. A batch's latency is `fixed` (once per batch: a setup, a parameter load)
   * plus each item's own `prepare`, and it counts as one preparation for `contention` and
   * `maxPreparing`. Absent: one item per step.
   */
  prepareBatch: batchSchema('prepareBatch'),
  /** Probability that a partition fails in preparation / on the device. @default 0 */
  prepareFailure: probability.default(0),
  deviceFailure: probability.default(0),
});
export type Kind = z.infer<typeof KindSchema>;

const DeviceSchema = z.strictObject({
  /** Devices of this description. @default 1 */
  count: count('count').default(1),
  workers: count('workers'),
  /** Speed factor: service time is divided by it. @default 1 */
  speed: positive('speed').default(1),
  /** Service time (seconds) of one item with one busy worker at speed 1. */
  service: DistSchema,
  /** Service slowdown by number of busy workers on the device (index 0: one busy). @default [1] */
  contention: Contention.default([1]),
  /**
   * What the device reports as an item's busy time: `held`, the time the item held its worker;
   * or `own`, only its own service time, without the time lost to sharing the device (a workload
   * that times only its kernel while its workers queue for one GPU). @default "held"
   */
  busyTime: z.enum(['held', 'own'], { error: 'busyTime must be "held" or "own"' }).default('held'),
  /**
   * Batches: a free worker takes up to `maxItems` waiting items of one kind at once, waiting up to
   * `maxWaitS` for more while fewer wait and more are in preparation. A batch's device time is
   * `fixed` (once per batch: a launch, a transfer) plus each item's own `service`: an affine cost,
   * fixed + n × service. Absent: one item per step, no fixed part.
   */
  batch: batchSchema('batch'),
  /**
   * The device's name in `stoker serve`'s config (`default` for `[device]`, else `[devices.NAME]`):
   * what `stoker plan`'s config lines name (a plan fitted from a server's trace keeps it).
   */
  name: z.string().regex(/^[A-Za-z0-9._-]+$/, { error: 'name must be a device name of letters, digits, ., _ and - (as [devices.NAME])' }).optional(),
  /** The kinds these devices run (items of other kinds never go to them). @default every kind */
  kinds: z.array(z.string({ error: 'kinds must list kind names' }), { error: 'kinds must be an array of kind names' }).min(1, { error: 'kinds must name at least one kind (leave it out for every kind)' }).optional(),
});
export type DeviceGroup = z.infer<typeof DeviceSchema>;

const Priority = z.enum(PRIORITIES, { error: `priority must be one of ${PRIORITIES.join(', ')}` });

/** A job's partitions: as many as the engine takes in one job. */
const partitionCount = count('partitions').max(MAX_PARTITIONS, { error: `partitions must be ≤ ${MAX_PARTITIONS} (the most one job may have)` });

const BatchSchema = z.strictObject({
  atS: nonNegative('atS'),
  jobs: count('jobs').default(1),
  partitions: partitionCount,
  kind: z.string().min(1),
  priority: Priority.default('normal'),
  /** Spacing between the jobs of the batch, seconds. @default 0 */
  everyS: nonNegative('everyS').default(0),
  /** Each job's deadline, seconds after it arrives: one not done by then fails (E_DEADLINE). @default none */
  deadlineS: positive('deadlineS').optional(),
});
const PoissonSchema = z.strictObject({
  poisson: z.strictObject({ ratePerS: positive('ratePerS'), fromS: nonNegative('fromS').default(0), untilS: positive('untilS') }).refine((p) => p.untilS > p.fromS, { error: 'untilS must be > fromS (no job would arrive)' }),
  partitions: partitionCount,
  kind: z.string().min(1),
  priority: Priority.default('normal'),
  deadlineS: positive('deadlineS').optional(),
});
const ArrivalSchema = z.union([BatchSchema, PoissonSchema], { error: 'an arrival is a batch { atS, jobs, partitions, kind } or { poisson: { ratePerS, untilS }, partitions, kind }' });

const EventSchema = z.discriminatedUnion(
  'type',
  [
    z.strictObject({ type: z.literal('speed'), atS: nonNegative('atS'), device: z.number().int().min(0).optional(), speed: positive('speed') }),
    z.strictObject({ type: z.literal('workerLost'), atS: nonNegative('atS'), device: z.number().int().min(0).default(0), worker: z.number().int().min(0) }),
    z.strictObject({ type: z.literal('workerReturned'), atS: nonNegative('atS'), device: z.number().int().min(0).default(0), worker: z.number().int().min(0) }),
    z.strictObject({ type: z.literal('cancel'), atS: nonNegative('atS'), job: z.string().min(1) }),
  ],
  { error: 'type must be one of speed, workerLost, workerReturned, cancel' },
);
export type ScenarioEvent = z.infer<typeof EventSchema>;

const FaultSchema = z.strictObject({
  job: z.string().min(1, { error: 'job must name a job id such as "job-3"' }),
  partition: z.number().int().min(0),
  stage: z.enum(['prepare', 'device'], { error: 'stage must be prepare or device' }),
});

export const ScenarioSchema = z.strictObject({
  name: z.string({ error: 'name must be a string, e.g. "my-prover"' }).min(1, { error: 'name must not be empty, e.g. "my-prover"' }),
  description: z.string({ error: 'description must be a string (one line)' }).default(''),
  /** PRNG seed. @default 1 */
  seed: z.number({ error: 'seed must be a whole number, e.g. 1' }).int({ error: 'seed must be a whole number, e.g. 1' }).default(1),
  /** Items the pacer should keep waiting for a device. @default 4 */
  targetWaiting: nonNegative('targetWaiting').default(4),
  /** Memory budget in bytes; absent means unbounded. */
  budgetBytes: bytes('budgetBytes').optional(),
  /** Cap on concurrent preparations; absent means none. */
  maxPreparing: count('maxPreparing').optional(),
  kinds: z.record(z.string(), KindSchema).refine((k) => Object.keys(k).length > 0, { error: 'define at least one kind, e.g. { "proof": { "prepare": { "type": "fixed", "value": 40 } } }' }),
  devices: z.array(DeviceSchema).min(1, { error: 'list at least one device group, e.g. [{ "workers": 2, "service": { "type": "fixed", "value": 1 } }]' }),
  arrivals: z.array(ArrivalSchema).min(1, { error: 'list at least one arrival batch' }),
  events: z.array(EventSchema).default([]),
  faults: z.array(FaultSchema).default([]),
  /** The steady window over which steady-state measures are taken; default: see steadyWindow(). */
  steady: z.strictObject({ fromS: nonNegative('fromS'), toS: positive('toS') }).refine((w) => w.toS > w.fromS, { error: 'toS must be > fromS' }).optional(),
  /** Reference time for rampMs; default: the last speed change, else the last batch arrival. */
  rampFromS: nonNegative('rampFromS').optional(),
  /** Options passed to the pacer (targetWaiting is added from the scenario). */
  pacerOptions: z.record(z.string(), z.unknown(), { error: 'pacerOptions must be an object of option names and values, e.g. { "window": 32 }' }).default({}),
  /** Stop the simulation at this time even if jobs remain. @default 30 days */
  horizonS: positive('horizonS').default(30 * 24 * 3600),
});
export type Scenario = z.infer<typeof ScenarioSchema>;
export type ScenarioInput = z.input<typeof ScenarioSchema>;

export class ScenarioError extends Error {
  override readonly name = 'ScenarioError';
}

function pathOf(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || '(root)';
}

/** The input's value at a path (undefined: absent). */
function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v = input;
  for (const p of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[p];
  }
  return v;
}

type JsonSchemaNode = { properties?: Record<string, JsonSchemaNode>; additionalProperties?: JsonSchemaNode | boolean; items?: JsonSchemaNode; anyOf?: JsonSchemaNode[]; oneOf?: JsonSchemaNode[]; allOf?: JsonSchemaNode[] };
let schemaJson: JsonSchemaNode | undefined;

/**
 * The fields an object at `path` may have (from the schema, every form of a union: an arrival's
 * batch and Poisson forms, each event type's): what a misspelt one is held against. Held against
 * every name at any depth, a top-level "foo" read "did you mean job?", a cancel event's "device"
 * "did you mean devices?".
 */
function fieldsAt(path: readonly PropertyKey[]): Set<string> {
  schemaJson ??= z.toJSONSchema(ScenarioSchema, { unrepresentable: 'any', io: 'input' }) as JsonSchemaNode;
  const forms = (n: JsonSchemaNode): JsonSchemaNode[] => [n, ...[...(n.anyOf ?? []), ...(n.oneOf ?? []), ...(n.allOf ?? [])].flatMap(forms)];
  let nodes = [schemaJson];
  for (const p of path) {
    nodes = nodes.flatMap(forms).flatMap((n) => {
      if (typeof p === 'number') return n.items ? [n.items] : [];
      const named = n.properties?.[String(p)];
      if (named) return [named];
      return typeof n.additionalProperties === 'object' ? [n.additionalProperties] : [];
    });
  }
  return new Set(nodes.flatMap(forms).flatMap((n) => Object.keys(n.properties ?? {})));
}

/** A field the object at `path` does not take, and what it may have meant: one of its own fields near it, or — one of another form's (union) — that the forms are mixed. */
function unknownField(key: string, path: readonly PropertyKey[], input: unknown): string {
  const fields = fieldsAt(path);
  const own = valueAt(input, path);
  // (A field of another form of this object: an arrival with both atS and poisson, a speed event with a worker.)
  if (fields.has(key)) return `${JSON.stringify(key)} (a field of another form of this object: ${path[0] === 'events' ? `a ${String((own as { type?: unknown } | undefined)?.type)} event does not take it` : 'do not mix the forms'})`;
  const near = suggest(key, [...fields]);
  return `${JSON.stringify(key)}${near ? ` (did you mean ${JSON.stringify(near)}?)` : ''}`;
}

/**
 * One schema issue as lines naming the field. An arrival that fits neither form is judged by the
 * form it is closest to (`poisson` present: a Poisson stream, else a batch), naming its own wrong
 * fields rather than both forms'.
 */
function issueLines(i: z.core.$ZodIssue, input: unknown, prefix: readonly PropertyKey[] = []): string[] {
  const path = [...prefix, ...i.path];
  if (i.code === 'invalid_union' && path.length === 2 && path[0] === 'arrivals') {
    const raw = (input as { arrivals?: unknown[] }).arrivals?.[path[1] as number];
    const branch = i.errors[raw !== null && typeof raw === 'object' && 'poisson' in raw ? 1 : 0] ?? [];
    if (branch.length > 0) return branch.flatMap((j) => issueLines(j, input, path));
  }
  const msg =
    i.code === 'unrecognized_keys'
      ? `unknown field(s) ${i.keys.map((k) => unknownField(k, path, input)).join(', ')}: remove them or check the spelling`
      : i.code === 'invalid_type' && / received undefined$/.test(i.message)
        ? `missing: this field is required (${i.expected})`
        : valueAt(input, path) === undefined
          ? `missing: this field is required — ${i.message}`
          : i.message;
  return [`  ${pathOf(path)}: ${msg}`];
}

/** Arrivals naming a kind the scenario does not define (read from the raw input too, so that they are listed beside the schema's problems). */
function unknownKinds(arrivals: unknown, kinds: unknown): string[] {
  if (!Array.isArray(arrivals) || kinds === null || typeof kinds !== 'object' || Array.isArray(kinds)) return [];
  const names = Object.keys(kinds);
  return arrivals.flatMap((a: unknown, i) => {
    const kind = a !== null && typeof a === 'object' ? (a as { kind?: unknown }).kind : undefined;
    return typeof kind === 'string' && kind !== '' && !Object.hasOwn(kinds, kind) ? [`  arrivals[${i}].kind: unknown kind ${JSON.stringify(kind)}; define it under "kinds"${names.length ? ` or use one of ${names.join(', ')}` : ' (none is defined)'}`] : [];
  });
}

/** The most devices (counts summed) and workers a device a scenario may have: the engine looks over every device at each dispatch. */
const MAX_DEVICES = 1024;
export const MAX_WORKERS = 4096;
/** The most partitions a scenario's arrivals may bring (each is planned and held in memory). */
const MAX_SCENARIO_PARTITIONS = 2e6;
/** The most workers in all (devices × their workers): each is simulated. */
const MAX_ALL_WORKERS = 65_536;

/** Validates a scenario; errors list every problem with the field path and what to write instead. */
export function parseScenario(input: unknown, source = 'scenario'): Scenario {
  const r = ScenarioSchema.safeParse(input);
  if (!r.success) {
    const raw = (input ?? {}) as { arrivals?: unknown; kinds?: unknown };
    const lines = [...r.error.issues.flatMap((i) => issueLines(i, input ?? {})), ...unknownKinds(raw.arrivals, raw.kinds)];
    throw new ScenarioError(`${source} is invalid:\n${lines.join('\n')}`);
  }
  const s = r.data;
  const problems: string[] = unknownKinds(s.arrivals, s.kinds);
  s.devices.forEach((d, i) => {
    for (const k of d.kinds ?? []) if (!(k in s.kinds)) problems.push(`  devices[${i}].kinds: unknown kind ${JSON.stringify(k)}; use one of ${Object.keys(s.kinds).join(', ')}`);
  });
  if (s.devices.some((d) => d.kinds)) {
    for (const k of Object.keys(s.kinds)) if (!s.devices.some((d) => !d.kinds || d.kinds.includes(k))) problems.push(`  kinds.${k}: no device runs it; add it to a device's kinds`);
  }
  const deviceCount = s.devices.reduce((n, d) => n + d.count, 0);
  if (deviceCount > MAX_DEVICES) problems.push(`  devices: ${deviceCount} devices in all (the counts summed); the simulator runs at most ${MAX_DEVICES}`);
  s.devices.forEach((d, i) => {
    if (d.workers > MAX_WORKERS) problems.push(`  devices[${i}].workers: ${d.workers} workers; at most ${MAX_WORKERS} a device`);
  });
  const allWorkers = s.devices.reduce((n, d) => n + d.count * d.workers, 0);
  if (deviceCount <= MAX_DEVICES && allWorkers > MAX_ALL_WORKERS) problems.push(`  devices: ${allWorkers} workers in all (count × workers summed); the simulator runs at most ${MAX_ALL_WORKERS}`);
  // Jobs that would arrive after the horizon are never submitted (they vanished without a word).
  let partitions = 0;
  s.arrivals.forEach((a, i) => {
    if ('poisson' in a) {
      partitions += a.poisson.ratePerS * (a.poisson.untilS - a.poisson.fromS) * a.partitions;
      if (a.poisson.untilS > s.horizonS) problems.push(`  arrivals[${i}].poisson.untilS: ${a.poisson.untilS} s is past horizonS (${s.horizonS} s): jobs after it would never arrive; raise horizonS or end the arrivals sooner`);
    } else {
      partitions += a.jobs * a.partitions;
      const last = a.atS + (a.jobs - 1) * a.everyS;
      // (One at the horizon itself was submitted and never ran: the run ends there.)
      if (last >= s.horizonS) problems.push(`  arrivals[${i}]: ${a.jobs > 1 ? `its last job arrives at ${last} s` : `atS ${a.atS} s is`} ${last > s.horizonS ? 'past' : 'at'} horizonS (${s.horizonS} s): ${a.jobs > 1 ? 'those after it' : 'it'} would never ${last > s.horizonS ? 'arrive' : 'run'}; raise horizonS or move the arrival`);
    }
  });
  // (Every job is planned, and every partition held, up front: 10^9 jobs grew a run to 3.7 GB and no output, 10^7 to 3.7 GB in 3 minutes.)
  if (partitions > MAX_SCENARIO_PARTITIONS) problems.push(`  arrivals: about ${Math.round(partitions).toExponential(2)} partitions in all; the simulator holds at most ${MAX_SCENARIO_PARTITIONS.toExponential(0)} (fewer jobs, or a shorter span)`);
  s.events.forEach((e, i) => {
    if (e.type !== 'cancel' && e.device !== undefined && e.device >= deviceCount) problems.push(`  events[${i}].device: ${deviceCount === 1 ? 'there is 1 device (0)' : `there are ${deviceCount} devices (0 … ${deviceCount - 1})`}`);
    if ((e.type === 'workerLost' || e.type === 'workerReturned') && e.device < deviceCount) {
      const workers = deviceWorkers(s)[e.device] ?? 0;
      if (e.worker >= workers) problems.push(`  events[${i}].worker: device ${e.device} has ${workers} worker${workers === 1 ? '' : 's'} (${workers === 1 ? 'worker 0' : `0 … ${workers - 1}`})`);
    }
  });
  // In time order (as they run): a worker returns only once lost, and is lost only while it works.
  const lostAt = new Map<string, number>();
  for (const { e, i } of s.events.map((e, i) => ({ e, i })).sort((x, y) => x.e.atS - y.e.atS || x.i - y.i)) {
    if (e.type !== 'workerLost' && e.type !== 'workerReturned') continue;
    const key = `${e.device}/${e.worker}`;
    const since = lostAt.get(key);
    if (e.type === 'workerReturned' && since === undefined) problems.push(`  events[${i}]: worker ${e.worker} of device ${e.device} returns at ${e.atS} s but was not lost before (a workerLost of it comes first)`);
    if (e.type === 'workerLost' && since !== undefined) problems.push(`  events[${i}]: worker ${e.worker} of device ${e.device} is lost at ${e.atS} s while lost already (events[${since}]): a workerReturned of it comes between`);
    if (e.type === 'workerLost') lostAt.set(key, i);
    else lostAt.delete(key);
  }
  if (problems.length) throw new ScenarioError(`${source} is invalid:\n${problems.join('\n')}`);
  return s;
}

/** The arriving kinds one partition of which reserves more than the scenario's budget (every job of them fails E_OVERSIZE), with the bytes it reserves. */
export function oversizeKinds(s: Scenario): { kind: string; needBytes: number }[] {
  const budget = s.budgetBytes;
  if (budget === undefined) return [];
  return [...new Set(s.arrivals.map((a) => a.kind))].flatMap((kind) => {
    const m = s.kinds[kind]?.memory;
    const needBytes = m ? Math.max(m.prepareBytes, m.deviceBytes) : 0;
    return needBytes > budget ? [{ kind, needBytes }] : [];
  });
}

/** Workers per device, devices expanded from their groups. */
export function deviceWorkers(s: Scenario): number[] {
  return s.devices.flatMap((g) => Array.from({ length: g.count }, () => g.workers));
}

/** Draws one duration in ms. */
export function sampleMs(d: Dist, rng: Rng): number {
  switch (d.type) {
    case 'fixed':
      return d.value * 1000;
    case 'uniform':
      return (d.min + (d.max - d.min) * rng.uniform()) * 1000;
    case 'lognormal':
      return d.median * Math.exp(d.sigma * rng.normal()) * 1000;
    case 'empirical':
      return (d.values[Math.floor(rng.uniform() * d.values.length)] as number) * 1000;
  }
}

/** The mean of a distribution, ms. */
export function meanMs(d: Dist): number {
  switch (d.type) {
    case 'fixed':
      return d.value * 1000;
    case 'uniform':
      return ((d.min + d.max) / 2) * 1000;
    case 'lognormal':
      return d.median * Math.exp((d.sigma * d.sigma) / 2) * 1000;
    case 'empirical':
      return (d.values.reduce((a, b) => a + b, 0) / d.values.length) * 1000;
  }
}

/** A high quantile (p99) of a distribution, ms. */
export function highMs(d: Dist): number {
  switch (d.type) {
    case 'fixed':
      return d.value * 1000;
    case 'uniform':
      return d.max * 1000;
    case 'lognormal':
      return d.median * Math.exp(2.326 * d.sigma) * 1000;
    case 'empirical':
      return Math.max(...d.values) * 1000;
  }
}

/** Mean preparation latency of a kind's step, ms, and the items it prepares: a preparation batch's at full size. */
export function prepareStep(k: Kind): { ms: number; items: number } {
  const b = k.prepareBatch;
  return b ? { ms: meanMs(b.fixed) + b.maxItems * meanMs(k.prepare), items: b.maxItems } : { ms: meanMs(k.prepare), items: 1 };
}

/** A high quantile (p99) of a kind's preparation latency, ms: a full preparation batch's, after its longest wait. */
export function prepareHighMs(k: Kind): number {
  const b = k.prepareBatch;
  return b ? highMs(b.fixed) + b.maxItems * highMs(k.prepare) + b.maxWaitS * 1000 : highMs(k.prepare);
}

/** Factor for k concurrent users (k ≥ 1) from a contention list. */
export function factor(list: readonly number[], k: number): number {
  return list[Math.min(Math.max(k, 1), list.length) - 1] as number;
}

// The stoker serve dashboard: plain browser JavaScript as native ES modules, no build step
// (format, api, charts, waterfall, jobs, feed; this one draws the history, the status tiles and
// the pacer, and starts the polls). Charts are uPlot (loaded as a global by index.html). Data:
// the server's event stream (GET v1/events) for job and pacer events, and polls of v1/history
// and v1/status (1 s), v1/timeline (2 s) and v1/jobs (2 s). Every figure is the server's: the
// page only smooths rates over a few history samples and formats.
//
// Every chart element carries data-points (points it holds) and data-last (its latest values);
// the waterfall canvas carries data-bars (bars drawn). The browser test reads them.

import { authKnown, every, getJson, onTokenChange, setConnection } from './api.js';
import { Chart, readout, WINDOW_S } from './charts.js';
import { connectEvents } from './feed.js';
import { $, ago, el, fmtBytes, fmtDuration, fmtMs, fmtNum, fmtPct } from './format.js';
import { refreshJobs } from './jobs.js';
import { drawWaterfall, WATERFALL_S, waterfallHover, wf } from './waterfall.js';

/**
 * GET v1/status, as far as the page reads it (the OpenAPI document's Status schema is the whole):
 * @typedef {{ mode: 'bootstrap' | 'steady' | 'idle' | 'blocked' | 'hold', ratePerSec: number | null, intervalMs: number | null, terms: Record<string, number>, name?: string }} PacerState
 * @typedef {{ state: 'lost' | 'busy' | 'idle', job: string | null, partition: number | null, busyS: number }} WorkerState
 * @typedef {{ device: number, name: string, kind: string, completions: number, busyS: number, batch?: { maxItems: number, batches: number, items: number }, unreachable?: string, workers: WorkerState[] }} DeviceState
 * @typedef {{ queued: number, preparing: number, waiting: number, onDevice: number, inFlight: number, preparingSteps: number, pending: number, dispatched: number, completed: number, prepareBatches?: Record<string, { maxItems: number, batches: number, items: number }>, byKind: Record<string, Record<string, number>> }} Partitions
 * @typedef {{ time: string, uptimeS: number, closing: boolean, jobs: Record<string, number>, partitions: Partitions, targetWaiting: number, devices: DeviceState[], pacer: PacerState, budget: { usedBytes: number, idlePoolBytes: number, totalBytes: number | null, peakBytes: number, blocked: boolean }, pool: Record<string, number>, cluster?: object }} Status
 */

/** Seconds over which the dispatch and completion rates are smoothed (history samples are 1 s apart). */
const RATE_WINDOW_S = 5;

let pollFailures = 0;

// ─── History and status: charts, tiles, pacer ─────────────────────────────────────────────────

/** The server's history samples (GET v1/history), oldest first: what the charts draw. */
const samples = [];
/** The devices of the history's per-device arrays: [{ name, workers }]. */
let historyDevices = null;
let charts = null;
/** The latest status (GET v1/status) and when it arrived (Date.now() ms). */
let latest = null;
let latestAt = 0;

function makeCharts(devices) {
  const occSeries = [
    ...devices.map((d) => ({ label: d.name, width: 2.5 })),
    ...devices.flatMap((d) => Array.from({ length: d.workers }, (_, w) => ({ label: `${d.name} / worker ${w}`, width: 1, dash: [4, 3] }))),
  ];
  return {
    occupancy: new Chart('chart-occupancy', occSeries, { yMax: 1, fmt: fmtPct }),
    rates: new Chart('chart-rates', [
      { label: "pacer's capacity estimate", width: 2.5 },
      { label: "pacer's target dispatch", dash: [6, 3] },
      { label: 'dispatched / s' },
      { label: 'completed / s' },
    ]),
    waiting: new Chart('chart-waiting', [{ label: 'waiting', width: 2, fill: 'rgba(31,95,191,0.08)' }, { label: 'target', stroke: '#d23c3c', dash: [6, 4] }, { label: 'waiting (pacer avg)', stroke: '#7c4dbf', width: 1 }], { fmt: (v) => fmtNum(v, 1) }),
    inventory: new Chart('chart-inventory', [{ label: 'inventory', width: 2, fill: 'rgba(31,95,191,0.08)' }, { label: "need (the pacer's target)", stroke: '#d23c3c', dash: [6, 4] }, { label: 'preparing', stroke: '#e07b1a', width: 1 }], { fmt: (v) => fmtNum(v, 1) }),
    memory: new Chart('chart-memory', [{ label: 'reserved', width: 2, fill: 'rgba(31,95,191,0.08)' }, { label: 'idle pooled', stroke: '#e07b1a' }, { label: 'budget', stroke: '#d23c3c', dash: [6, 4] }], { fmt: fmtBytes }),
    jobs: new Chart('chart-jobs', [{ label: 'done', stroke: '#2e9b5a', width: 2 }, { label: 'failed', stroke: '#d23c3c' }, { label: 'cancelled', stroke: '#8a929c' }], { fmt: (v) => fmtNum(v, 0) }),
  };
}

/** Samples in the `seconds` before sample i (i included): a real window, never extrapolated. */
function windowBefore(i, seconds) {
  const end = samples[i].t;
  let j = i;
  while (j > 0 && samples[j - 1].t > end - seconds * 1000) j--;
  return samples.slice(j, i + 1);
}

/** A rate over up to RATE_WINDOW_S of samples: Σ (rate × window) ÷ Σ window. */
function smoothed(win, key) {
  const span = win.reduce((a, x) => a + x.windowS, 0);
  return span > 0 ? win.reduce((a, x) => a + x[key] * x.windowS, 0) / span : null;
}

/** Jobs ended in the trailing minute (a count over the samples there are: fewer after a start). */
function endedInMinute(i) {
  const win = windowBefore(i, 60);
  const sum = (k) => win.reduce((a, x) => a + x.jobsEnded[k], 0);
  return { done: sum('done'), failed: sum('failed'), cancelled: sum('cancelled'), spanS: win.reduce((a, x) => a + x.windowS, 0) };
}

/** Whether there is work for the pacer: partitions queued, or any in flight. */
const hasWork = (x) => x.partitions.queued + x.partitions.preparing + x.partitions.waiting + x.partitions.onDevice > 0;

function pushSample(i) {
  const x = samples[i];
  const t = x.t / 1000;
  charts.occupancy.push(t, [...x.occupancy, ...x.workerOccupancy.flat()]);
  const win = windowBefore(i, RATE_WINDOW_S);
  // The pacer's target means something only while partitions are queued.
  charts.rates.push(t, [x.capacityPerS, x.partitions.queued > 0 ? x.pacerTargetPerS : null, smoothed(win, 'dispatchedPerS'), smoothed(win, 'completedPerS')]);
  charts.waiting.push(t, [x.partitions.waiting, x.waitingTarget, x.waitingAvg]);
  const inventory = x.partitions.preparing + x.partitions.waiting + x.partitions.onDevice;
  charts.inventory.push(t, [inventory, hasWork(x) ? x.need : null, x.partitions.preparing]);
  charts.memory.push(t, [x.memory.reservedBytes, x.memory.idlePoolBytes, x.memory.budgetBytes]);
  const e = endedInMinute(i);
  charts.jobs.push(t, [e.done, e.failed, e.cancelled]);
}

/** Adds the history samples newer than those held, and redraws the readouts from the newest. */
function onHistory(h) {
  historyDevices ??= h.devices;
  charts ??= makeCharts(historyDevices);
  const lastT = samples.length ? samples[samples.length - 1].t : -Infinity;
  for (const x of h.samples) {
    if (x.t <= lastT && samples.length) continue;
    samples.push(x);
    pushSample(samples.length - 1);
  }
  while (samples.length > 0 && samples[0].t < h.now - (WINDOW_S + 60) * 1000) samples.shift();
  for (const c of Object.values(charts)) c.showUntil(h.now / 1000);
  if (samples.length === 0) return;
  const i = samples.length - 1;
  const x = samples[i];
  // Each device's measured capacity over the rate window: live workers × completions ÷ device time.
  const rateWin = windowBefore(i, RATE_WINDOW_S);
  readout('r-occupancy', historyDevices.map((d, k) => {
    const busyS = rateWin.reduce((a, y) => a + (y.devices[k]?.busyS ?? 0), 0);
    const done = rateWin.reduce((a, y) => a + (y.devices[k]?.completions ?? 0), 0);
    const cap = busyS > 0 ? ((x.devices[k]?.workers ?? 0) * done) / busyS : null;
    return [d.name, `${fmtPct(x.occupancy[k])}${cap === null ? '' : ` · capacity ${fmtNum(cap)}/s`}`];
  }));
  showKinds(i);
  const completed = smoothed(rateWin, 'completedPerS');
  readout('r-rates', [
    ['capacity', x.capacityPerS === null ? '–' : `${fmtNum(x.capacityPerS)}/s`],
    ['target dispatch', x.partitions.queued > 0 && x.pacerTargetPerS !== null ? `${fmtNum(x.pacerTargetPerS)}/s` : '–'],
    ['completed', completed === null ? '–' : `${fmtNum(completed)}/s`],
  ]);
  const e = endedInMinute(i);
  const span = e.spanS >= 59 ? 'last 60 s' : `last ${fmtDuration(e.spanS)} (since start)`;
  readout('r-jobs', [['done', String(e.done)], ['failed', String(e.failed)], ['cancelled', String(e.cancelled)], ['over', span]]);
  $('t-jpm').textContent = String(e.done + e.failed + e.cancelled);
  $('t-jpm-sub').textContent = `done ${e.done} · failed ${e.failed} · cancelled ${e.cancelled} · ${span}`;
}

/** The kinds table: each kind's partitions now and its jobs over the trailing minute. */
function showKinds(i) {
  const win = windowBefore(i, 60);
  const x = samples[i];
  const body = $('kinds').tBodies[0];
  body.replaceChildren(
    ...Object.entries(x.kinds).map(([name, k]) => {
      const sum = (key) => win.reduce((a, y) => a + (y.kinds[name]?.jobsEnded[key] ?? 0), 0);
      const ended = sum('done') + sum('failed') + sum('cancelled');
      const latency = ended > 0 ? win.reduce((a, y) => a + (y.kinds[name]?.jobSeconds ?? 0), 0) / ended : null;
      const num = (v) => el('td', { class: 'num', text: String(v) });
      return el('tr', { 'data-kind': name }, el('td', { class: 'kind', text: name }), num(k.partitions.queued), num(k.partitions.preparing), num(k.partitions.waiting), num(k.partitions.onDevice), num(sum('done')), num(sum('failed')), num(sum('cancelled')), el('td', { class: 'num', text: latency === null ? '–' : fmtDuration(latency) }));
    }),
  );
}

/** The cluster table (cluster mode only: the status has a `cluster` part; a single server has no v1/cluster). */
async function refreshCluster() {
  const c = await getJson('v1/cluster');
  $('cluster-panel').hidden = false;
  const t = c.totals;
  $('cluster-caption').textContent = `${t.nodes} live node${t.nodes === 1 ? '' : 's'} · ${t.workers} workers · occupancy ${fmtPct(t.occupancy)} · capacity ${fmtNum(t.capacity)}/s · ${t.inFlight} in flight · ${t.jobsHeld} jobs held · queued ${c.queue.waiting + c.queue.prioritized + c.queue.delayed}${c.unserved.length ? ` · no node runs: ${c.unserved.join(', ')}` : ''}`;
  const num = (v) => el('td', { class: 'num', text: v });
  $('cluster').tBodies[0].replaceChildren(
    ...c.nodes.map((n) => {
      const link = el('a', { href: n.url, text: n.nodeId });
      const [word] = modeWords(n.pacerMode, null);
      return el('tr', { 'data-node': n.nodeId, class: n.nodeId === c.node ? 'self' : '' }, el('td', {}, link), el('td', { text: n.kinds.join(', ') }), num(fmtPct(n.occupancy)), num(n.capacity === null ? '–' : `${fmtNum(n.capacity)}/s`), num(String(n.inFlight)), num(String(n.jobsHeld)), el('td', { text: word }), num(n.updatedAt ? ago(n.updatedAt) : '–'));
    }),
  );
}

/** @param {Status} s */
function workerList(s) {
  return s.devices.flatMap((d) => d.workers.map((w, i) => ({ ...w, device: d.device, worker: i })));
}

/** @param {Status} s */
function onStatus(s) {
  if (document.body.dataset.stale === 'true') setConnection('live', 'live');
  latest = s;
  latestAt = Date.now();
  const workers = workerList(s);
  const p = s.partitions;
  const inventory = p.preparing + p.waiting + p.onDevice;
  const terms = s.pacer.terms ?? {};
  const work = p.queued + inventory > 0;
  const need = work && Number.isFinite(terms.inventoryTarget) ? terms.inventoryTarget : null;
  readout('r-waiting', [['waiting', String(p.waiting)], ['target', String(s.targetWaiting)], ['on device', String(p.onDevice)]]);
  readout('r-inventory', [['inventory', String(inventory)], ['need', need === null ? '–' : fmtNum(need, 1)], ['queued', String(p.queued)]]);
  const b = s.budget;
  readout('r-memory', [['reserved', fmtBytes(b.usedBytes)], ['idle pooled', fmtBytes(b.idlePoolBytes ?? 0)], ['budget', b.totalBytes === null ? 'unlimited' : fmtBytes(b.totalBytes)], ['peak', fmtBytes(b.peakBytes)]]);

  $('t-pending').textContent = String(s.jobs.pending);
  $('t-jobs-sub').textContent = `queued ${s.jobs.queued} · running ${s.jobs.running} · done ${s.jobs.done} · failed ${s.jobs.failed} · cancelled ${s.jobs.cancelled}`;
  $('t-waiting').textContent = String(p.waiting);
  $('t-waiting-sub').textContent = `target ${s.targetWaiting} · queued ${p.queued}`;
  $('t-inflight').textContent = String(inventory);
  // Kinds prepared in batches: their batches' mean size so far, of at most maxItems.
  const prepBatches = Object.entries(p.prepareBatches ?? {}).map(([kind, b]) => ` (${kind}: batches ${b.batches > 0 ? fmtNum(b.items / b.batches, 1) : '–'} of ≤ ${b.maxItems})`).join('');
  $('t-inflight-sub').textContent = `preparing ${p.preparing}${prepBatches} · on device ${p.onDevice}`;
  const busy = workers.filter((w) => w.state === 'busy').length;
  const lost = workers.filter((w) => w.state === 'lost').length;
  $('t-workers').textContent = `${busy} / ${workers.length}`;
  // A batching device: its batches' mean size so far, of at most maxItems.
  const batches = (d) => (d.batch ? `, batches ${d.batch.batches > 0 ? fmtNum(d.batch.items / d.batch.batches, 1) : '–'} of ≤ ${d.batch.maxItems}` : '');
  // An HTTP device whose endpoint refuses connections: said, and since when (its busy workers wait for it).
  const unreachable = (d) => {
    if (!d.unreachable) return '';
    // ("<url> is unreachable (<code>) since <ISO time>", as /v1/status says it.)
    const m = /\(([^)]*)\) since (\S+)$/.exec(d.unreachable);
    return m ? `, unreachable (${m[1]}) since ${new Date(m[2]).toLocaleTimeString()}` : ', unreachable';
  };
  $('t-workers-sub').textContent = `${s.devices.map((d) => `${d.name} (${d.kind}${batches(d)}${unreachable(d)})`).join(' · ')}${lost > 0 ? ` · ${lost} lost` : ''}`;
  $('t-workers-sub').classList.toggle('warn', s.devices.some((d) => d.unreachable));
  $('t-workers-sub').title = s.devices.flatMap((d) => (d.unreachable ? [`device ${d.name}: ${d.unreachable}`] : [])).join('\n');
  $('t-memory').textContent = fmtBytes(b.usedBytes);
  $('t-memory-sub').textContent = `of ${b.totalBytes === null ? 'unlimited' : fmtBytes(b.totalBytes)}${b.blocked ? ' · blocked' : ''} · pool ${fmtBytes(s.pool.totalBytes)}`;
  $('server-info').textContent = `${s.closing ? 'shutting down · ' : ''}pacer ${s.pacer.name} · ${workers.length} worker${workers.length === 1 ? '' : 's'} · up ${fmtDuration(s.uptimeS)}`;
  showPacer({ name: s.pacer.name, ...s.pacer }, workers.filter((w) => w.state !== 'lost').length, p);
  showStale();
}

/** Greys the figures (and says how old they are) when the last status is more than 3 s old. */
function showStale() {
  const age = latest ? (Date.now() - latestAt) / 1000 : Infinity;
  const stale = age > 3;
  document.body.dataset.stale = String(stale);
  if (stale && latest) setConnection('down', `server unreachable · figures from ${fmtDuration(age)} ago`);
}

const TERM_NAMES = {
  latencyMs: ['preparation latency L', fmtMs],
  inventoryTarget: ['inventory need J*', (v) => fmtNum(v, 1)],
  integral: ['integral (waiting)', (v) => fmtNum(v, 3)],
  waitingAvg: ["waiting, the pacer's smoothed", (v) => fmtNum(v, 2)],
  credit: ['token credit', (v) => fmtNum(v, 2)],
  planRatePerSec: ['rate of the kind dispatched next', (v) => `${fmtNum(v)} /s`],
};

/** The pacer's mode as words that say what it means (the raw mode stays in data-mode). */
function modeWords(mode, partitions) {
  const inFlight = partitions ? partitions.preparing + partitions.waiting + partitions.onDevice : 0;
  switch (mode) {
    case 'idle':
      return inFlight > 0 ? ['all dispatched', 'nothing queued to dispatch; partitions in flight finish'] : ['idle', 'no work in the system'];
    case 'bootstrap':
      return ['measuring', 'no device time measured yet: dispatching a few partitions to measure it'];
    case 'steady':
      return ['pacing', 'dispatching at the measured device rate, corrected towards the waiting target'];
    case 'hold':
      return ['holding', 'enough is prepared or preparing: dispatch waits'];
    case 'blocked':
      return ['blocked', 'the memory budget or the preparation cap is full: dispatch waits for room'];
    default:
      return [mode ?? '–', ''];
  }
}

let liveWorkers = 1;
let lastPartitions = null;
/** @param {PacerState} p @param {number} [workers] @param {Partitions | null} [partitions] */
function showPacer(p, workers = liveWorkers, partitions = lastPartitions) {
  liveWorkers = workers;
  lastPartitions = partitions;
  if (p.name) $('pacer-name').textContent = p.name;
  const mode = $('pacer-mode');
  const [word, title] = modeWords(p.mode, partitions);
  mode.textContent = word;
  mode.title = title;
  mode.dataset.mode = p.mode;
  const queued = partitions ? partitions.queued > 0 : true;
  $('p-capacity').textContent = p.ratePerSec === null ? '–' : `${fmtNum(p.ratePerSec)} /s`;
  // Each worker takes one item at a time: busy time per item = workers ÷ capacity.
  $('p-busy').textContent = p.ratePerSec ? fmtMs((workers / p.ratePerSec) * 1000) : '–';
  $('p-interval').textContent = !queued ? '– (nothing queued)' : p.intervalMs === null ? 'on events' : fmtMs(p.intervalMs);
  $('p-rate').textContent = queued && p.intervalMs ? `${fmtNum(1000 / p.intervalMs)} /s` : '–';
  const terms = $('p-terms');
  terms.replaceChildren(
    ...Object.entries(p.terms ?? {}).map(([k, v]) => {
      const [label, fmt] = TERM_NAMES[k] ?? [k, (x) => fmtNum(x, 3)];
      return el('div', {}, el('dt', { text: label }), el('dd', { text: fmt(v), 'data-term': k }));
    }),
  );
}

// ─── Start ────────────────────────────────────────────────────────────────────────────────────

function start() {
  const connect = () => connectEvents(showPacer);
  // The charts open with the server's last WINDOW_S seconds, then take each new sample.
  let historyLoaded = false;
  every(1000, async () => {
    onHistory(await getJson(`v1/history?since=${historyLoaded ? 10 : WINDOW_S}s`));
    historyLoaded = true;
  });
  every(1000, async () => {
    try {
      onStatus(await getJson('v1/status'));
      pollFailures = 0;
    } catch (e) {
      if (++pollFailures >= 2) setConnection('down', 'server unreachable');
      showStale();
      throw e;
    }
  });
  every(2000, async () => {
    wf.timeline = await getJson(`v1/timeline?since=${WATERFALL_S}s`);
    drawWaterfall();
  });
  every(2000, refreshJobs);
  // Cluster mode: the whole cluster from any node.
  every(2000, async () => {
    if (latest?.cluster) await refreshCluster();
  });
  // The event stream once the first request has said whether a token is needed (the polls above
  // made it), and again with each token entered later.
  void authKnown().then(() => {
    connect();
    onTokenChange(connect);
  });
  const canvas = $('waterfall');
  canvas.addEventListener('mousemove', waterfallHover);
  canvas.addEventListener('mouseleave', () => ($('wf-tip').hidden = true));
  new ResizeObserver(() => drawWaterfall()).observe(canvas.parentElement);
  // For tests and the curious: the charts' data.
  window.stoker = { get charts() { return charts; }, samples, get status() { return latest; }, wf };
}

start();

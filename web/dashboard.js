// The stoker serve dashboard: plain browser JavaScript, no build step. Charts are uPlot (loaded
// as a global by index.html). Data: the server's event stream (GET v1/events) for job and pacer
// events, and polls of v1/status (1 s), v1/timeline (2 s) and v1/jobs (2 s).
//
// Every chart element carries data-points (points it holds) and data-last (its latest values);
// the waterfall canvas carries data-bars (bars drawn). The browser test reads them.

const { uPlot } = window;

/** Seconds of history the charts show (the server keeps an hour). */
const WINDOW_S = 600;
/** Seconds the waterfall shows. */
const WATERFALL_S = 180;
/** Seconds over which the dispatch and completion rates are smoothed (history samples are 1 s apart). */
const RATE_WINDOW_S = 5;

const $ = (id) => document.getElementById(id);

// ─── Formatting ───────────────────────────────────────────────────────────────────────────────

function fmtNum(v, digits = 2) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString('en-US');
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(Math.min(digits, 1));
  return v.toFixed(digits);
}

function fmtBytes(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let x = v;
  while (Math.abs(x) >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${x >= 100 || i === 0 ? x.toFixed(0) : x.toFixed(1)} ${units[i]}`;
}

function fmtMs(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 2 : ms < 100 ? 1 : 0)} ms`;
  return fmtDuration(ms / 1000);
}

function fmtDuration(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return '–';
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${Math.floor(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} m`;
}

function fmtPct(v) {
  return v === null || v === undefined || !Number.isFinite(v) ? '–' : `${(v * 100).toFixed(0)} %`;
}

/** Epoch seconds as a local wall-clock time, 14:05:30. */
function clock(t) {
  return new Date(t * 1000).toLocaleTimeString('en-GB', { hour12: false });
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c);
  return e;
}

/** A stable colour per job id (an FNV-1a hash onto the hue circle). */
function jobColour(id, alpha = 1) {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    h ^= id.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  const hue = (h >>> 0) % 360;
  const light = 42 + ((h >>> 9) % 3) * 8;
  return `hsla(${hue}, 62%, ${light}%, ${alpha})`;
}

// ─── Fetching ─────────────────────────────────────────────────────────────────────────────────

// A server started with server.token answers 401: the page asks for the token once per tab
// (kept in sessionStorage) and sends it as a bearer token; the event stream takes it as ?access_token=.
let token = sessionStorage.getItem('stoker-token');
let tokenRefused = false;
let asking = null;

function askToken() {
  asking ??= Promise.resolve().then(() => {
    const t = tokenRefused ? null : window.prompt('This stoker server needs its token (server.token):');
    if (!t) {
      tokenRefused = true;
      setConnection('down', 'token needed: reload the page to enter it');
      return false;
    }
    token = t.trim();
    sessionStorage.setItem('stoker-token', token);
    connectEvents();
    return true;
  }).finally(() => (asking = null));
  return asking;
}

async function api(path, opts = {}) {
  const used = token;
  const headers = { ...(opts.headers ?? {}), ...(used ? { authorization: `Bearer ${used}` } : {}) };
  const res = await fetch(path, { cache: 'no-store', ...opts, headers });
  if (res.status !== 401) return res;
  // Sent before the token was given (polls run side by side): retry with it, do not ask again.
  if (token && token !== used) return api(path, opts);
  if (await askToken()) return api(path, opts);
  return res;
}

async function getJson(path) {
  const res = await api(path);
  if (!res.ok) throw new Error(`${path}: ${res.status}`);
  return res.json();
}

/** Runs `fn` now and then `ms` after each run ends (never two at once). */
function every(ms, fn) {
  const tick = async () => {
    try {
      await fn();
    } catch (e) {
      console.warn(e);
    }
    setTimeout(tick, ms);
  };
  void tick();
}

let pollFailures = 0;
function setConnection(state, text) {
  const c = $('conn');
  c.dataset.state = state;
  c.textContent = text;
}

// ─── Charts ───────────────────────────────────────────────────────────────────────────────────

const PALETTE = ['#1f5fbf', '#e07b1a', '#2e9b5a', '#7c4dbf', '#d23c3c', '#0f8f8f', '#b0457d', '#6b7a1f'];

/** A rolling uPlot line chart: x in epoch seconds, one array per series. */
class Chart {
  constructor(id, series, { yMin = 0, yMax = null, fmt = (v) => fmtNum(v) } = {}) {
    this.el = $(id);
    this.series = series;
    this.data = [[], ...series.map(() => [])];
    this.fmt = fmt;
    /** The x axis ends at the server's now and spans what there is (at least a minute, at most the window): distinct tick labels from the first poll. */
    this.until = Date.now() / 1000;
    const opts = {
      width: Math.max(300, this.el.clientWidth),
      height: 200,
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: true, range: () => [Math.max(this.until - WINDOW_S, Math.min(this.data[0][0] ?? this.until, this.until - 60)), this.until] },
        y: {
          range: (_u, min, max) => {
            const hi = yMax ?? Math.max(max ?? 0, yMin + 1e-9);
            const top = yMax ?? (hi <= 0 ? 1 : hi * 1.1);
            return [Math.min(yMin, min ?? yMin), top];
          },
        },
      },
      axes: [
        { stroke: '#5f6b78', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#d9dde3' }, space: 80, values: (_u, vals) => vals.map((v) => clock(v)) },
        { stroke: '#5f6b78', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#d9dde3' }, size: 76, values: (_u, vals) => vals.map((v) => fmt(v)) },
      ],
      series: [
        {},
        ...series.map((s, i) => ({
          label: s.label,
          stroke: s.stroke ?? PALETTE[i % PALETTE.length],
          width: s.width ?? 1.5,
          dash: s.dash,
          fill: s.fill,
          spanGaps: false,
          points: { show: false },
          value: (_u, v) => fmt(v),
        })),
      ],
    };
    this.plot = new uPlot(opts, this.data, this.el);
    new ResizeObserver(() => {
      const w = Math.max(300, this.el.clientWidth);
      if (Math.abs(w - this.plot.width) > 2) this.plot.setSize({ width: w, height: 200 });
    }).observe(this.el);
  }

  /** Appends one point (values in series order; null for none) and drops points older than the window; showUntil() draws. */
  push(t, values) {
    const xs = this.data[0];
    if (xs.length > 0 && t <= xs[xs.length - 1]) return;
    xs.push(t);
    values.forEach((v, i) => this.data[i + 1].push(v === undefined || (typeof v === 'number' && !Number.isFinite(v)) ? null : v));
    let drop = 0;
    while (drop < xs.length && xs[drop] < t - WINDOW_S) drop++;
    if (drop > 0) for (const arr of this.data) arr.splice(0, drop);
    this.el.dataset.points = String(xs.length);
    this.el.dataset.t = String(t);
    this.el.dataset.last = JSON.stringify(values.map((v) => (typeof v === 'number' ? Math.round(v * 1000) / 1000 : v)));
  }

  /** Draws the points held, the x axis ending at `nowS` (epoch s). */
  showUntil(nowS) {
    this.until = nowS;
    this.plot.setData(this.data);
  }
}

/** A readout line: "label value · label value". */
function readout(id, parts) {
  const r = $(id);
  r.replaceChildren();
  parts.forEach(([label, value], i) => {
    if (i > 0) r.append(' · ');
    r.append(`${label} `, el('b', { text: value }));
  });
}

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
    inventory: new Chart('chart-inventory', [{ label: 'inventory', width: 2, fill: 'rgba(31,95,191,0.08)' }, { label: "need (Little's law)", stroke: '#d23c3c', dash: [6, 4] }, { label: 'preparing', stroke: '#e07b1a', width: 1 }], { fmt: (v) => fmtNum(v, 1) }),
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

function workerList(s) {
  return s.devices.flatMap((d) => d.workers.map((w, i) => ({ ...w, device: d.device, worker: i })));
}

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
  $('t-workers-sub').textContent = `${s.devices.map((d) => `${d.name} (${d.kind}${batches(d)})`).join(' · ')}${lost > 0 ? ` · ${lost} lost` : ''}`;
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
  waitingAvg: ['waiting, smoothed', (v) => fmtNum(v, 2)],
  credit: ['token credit', (v) => fmtNum(v, 2)],
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

// ─── Waterfall ────────────────────────────────────────────────────────────────────────────────

const wf = { timeline: null, boxes: [] };
const LABEL_W = 150;
const AXIS_H = 20;

function drawWaterfall() {
  const tl = wf.timeline;
  const canvas = $('waterfall');
  if (!tl) return;
  const end = tl.now;
  // Up to the last WATERFALL_S seconds: a server that started recently shows what it has, at least 30 s.
  const first = tl.spans.reduce((m, s) => Math.min(m, s.start), end);
  const start = Math.max(end - WATERFALL_S * 1000, Math.min(first, end - 30_000) - 1000);
  const spanS = (end - start) / 1000;
  const used = new Set(tl.spans.map((s) => s.lane));
  // Device workers first, then the preparation slots that ran something in the window.
  const lanes = tl.lanes
    .filter((l) => l.kind === 'device' || used.has(l.id))
    .sort((a, b) => (a.kind === b.kind ? a.id - b.id : a.kind === 'device' ? -1 : 1));
  const laneH = lanes.length > 40 ? 8 : lanes.length > 20 ? 12 : 18;
  const width = Math.max(400, canvas.parentElement.clientWidth);
  const height = AXIS_H + Math.max(1, lanes.length) * laneH + 4;
  const dpr = window.devicePixelRatio || 1;
  canvas.style.height = `${height}px`;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, width, height);
  g.font = '11px system-ui, "DejaVu Sans", sans-serif';
  g.textBaseline = 'middle';
  const plotW = width - LABEL_W - 8;
  const x = (ms) => LABEL_W + ((ms - start) / (end - start)) * plotW;

  // Time axis: ticks labelled as time before now.
  g.strokeStyle = '#eef0f3';
  g.fillStyle = '#5f6b78';
  g.textAlign = 'center';
  const step = [5, 10, 15, 30, 60].find((st) => spanS / st <= 8) ?? 60;
  for (let s = 0; s <= spanS; s += step) {
    const px = x(end - s * 1000);
    g.beginPath();
    g.moveTo(px, AXIS_H - 4);
    g.lineTo(px, height);
    g.stroke();
    g.fillText(s === 0 ? 'now' : `−${s >= 60 ? `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}` : `${s} s`}`, Math.min(px, width - 16), 8);
  }

  // Lanes.
  const row = new Map(lanes.map((l, i) => [l.id, i]));
  g.textAlign = 'right';
  lanes.forEach((l, i) => {
    const y = AXIS_H + i * laneH;
    if (i % 2 === 1) {
      g.fillStyle = '#f7f8fa';
      g.fillRect(LABEL_W, y, plotW, laneH);
    }
    if (laneH >= 12 || i % 2 === 0) {
      g.fillStyle = l.kind === 'device' ? '#1d2329' : '#5f6b78';
      g.fillText(l.name, LABEL_W - 8, y + laneH / 2);
    }
  });
  const devices = lanes.filter((l) => l.kind === 'device').length;
  if (devices > 0 && devices < lanes.length) {
    g.strokeStyle = '#9aa4af';
    g.beginPath();
    g.moveTo(LABEL_W, AXIS_H + devices * laneH + 0.5);
    g.lineTo(width, AXIS_H + devices * laneH + 0.5);
    g.stroke();
  }

  // Bars.
  const boxes = [];
  for (const sp of tl.spans) {
    const r = row.get(sp.lane);
    if (r === undefined) continue;
    const spEnd = sp.end ?? end;
    if (spEnd < start) continue;
    const x0 = x(Math.max(start, sp.start));
    const x1 = Math.max(x0 + 1, x(spEnd));
    const y = AXIS_H + r * laneH + 2;
    const h = laneH - 4;
    if (sp.outcome === 'aborted') {
      g.fillStyle = '#c3c8cf';
      g.fillRect(x0, y, x1 - x0, h);
      g.strokeStyle = '#8a929c';
      g.strokeRect(x0 + 0.5, y + 0.5, Math.max(0, x1 - x0 - 1), Math.max(0, h - 1));
    } else {
      g.fillStyle = jobColour(sp.jobId, sp.end === null ? 0.5 : 1);
      g.fillRect(x0, y, x1 - x0, h);
      if (sp.outcome === 'failed') {
        g.strokeStyle = '#d23c3c';
        g.lineWidth = 2;
        g.strokeRect(x0 + 1, y + 1, Math.max(0, x1 - x0 - 2), Math.max(0, h - 2));
        g.lineWidth = 1;
      }
    }
    boxes.push({ x0, x1, y, h, sp, lane: lanes[r] });
  }
  wf.boxes = boxes;
  canvas.dataset.bars = String(boxes.length);
  canvas.dataset.lanes = String(lanes.length);
  const jobs = new Set(tl.spans.map((s) => s.jobId)).size;
  $('wf-info').textContent = `· ${boxes.length} bars, ${jobs} jobs, ${lanes.length} lanes`;
}

function waterfallHover(ev) {
  const canvas = $('waterfall');
  const tip = $('wf-tip');
  const rect = canvas.getBoundingClientRect();
  const mx = ev.clientX - rect.left;
  const my = ev.clientY - rect.top;
  const hit = wf.boxes.findLast((b) => mx >= b.x0 - 1 && mx <= b.x1 + 1 && my >= b.y && my <= b.y + b.h);
  if (!hit) {
    tip.hidden = true;
    return;
  }
  const sp = hit.sp;
  const dur = (sp.end ?? wf.timeline.now) - sp.start;
  tip.textContent = `${sp.jobId} #${sp.partition} · ${hit.lane.name} · ${fmtMs(dur)} · ${sp.outcome ?? 'running'}`;
  tip.hidden = false;
  tip.style.left = `${Math.min(mx + 12, rect.width - tip.offsetWidth - 4)}px`;
  tip.style.top = `${my + 14}px`;
}

// ─── Jobs table ───────────────────────────────────────────────────────────────────────────────

const rows = new Map();
const cancelling = new Set();

function partitionView(job) {
  const n = job.partitions;
  if (job.partitionStates) return job.partitionStates;
  // A big job in a list: its counts by stage (drawn as one bar).
  if (job.partitionCounts) return Object.entries(job.partitionCounts).flatMap(([st, c]) => Array.from({ length: c }, () => st));
  const rest = job.state === 'done' ? 'done' : job.state === 'queued' || job.state === 'running' ? 'queued' : job.state;
  const done = job.state === 'done' ? n : Math.min(n, job.partitionsDone);
  return Array.from({ length: n }, (_, i) => (i < done ? 'done' : rest));
}

function partitionCells(job) {
  const states = partitionView(job);
  if (states.length <= 96) return el('div', { class: 'cells' }, ...states.map((st, i) => el('span', { class: 'cell', 'data-s': st, title: `#${i} ${st}` })));
  // Many partitions: one bar, a segment per state.
  const counts = {};
  for (const st of states) counts[st] = (counts[st] ?? 0) + 1;
  const colours = { queued: 'var(--queued)', preparing: 'var(--preparing)', waiting: 'var(--waiting)', 'on-device': 'var(--on-device)', done: 'var(--done)', failed: 'var(--failed)', cancelled: 'var(--cancelled)' };
  const bar = el('div', { class: 'stack', title: Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', ') });
  for (const [st, c] of Object.entries(counts)) {
    const seg = el('span');
    seg.style.width = `${(c / states.length) * 100}%`;
    seg.style.background = colours[st] ?? '#ccc';
    bar.append(seg);
  }
  return bar;
}

function isLive(job) {
  return job.state === 'queued' || job.state === 'running';
}

function ago(iso) {
  return `${fmtDuration(Math.max(0, (Date.now() - Date.parse(iso)) / 1000))} ago`;
}

function showMessage(text) {
  const m = $('jobs-message');
  m.textContent = text;
  m.hidden = !text;
}

/** The first click arms the button ("confirm cancel?") for 4 s; the second cancels. */
function cancelClicked(id, button) {
  if (button.dataset.armed !== 'true') {
    button.dataset.armed = 'true';
    button.textContent = 'Confirm cancel?';
    button.classList.add('armed');
    setTimeout(() => {
      if (button.dataset.armed !== 'true' || cancelling.has(id)) return;
      button.dataset.armed = 'false';
      button.textContent = 'Cancel';
      button.classList.remove('armed');
    }, 4000);
    return;
  }
  button.dataset.armed = 'false';
  button.classList.remove('armed');
  void cancelJob(id, button);
}

async function cancelJob(id, button) {
  cancelling.add(id);
  button.disabled = true;
  button.textContent = 'cancelling…';
  try {
    const res = await api(`v1/jobs/${encodeURIComponent(id)}`, { method: 'DELETE' });
    const body = await res.json();
    if (!res.ok) throw new Error(body.detail ?? `${res.status}`);
    showMessage('');
    cancelling.delete(id);
    updateRow(body);
  } catch (e) {
    showMessage(`cancel ${id}: ${e.message}`);
    cancelling.delete(id);
    const r = rows.get(id);
    if (r) updateRow(r.job);
  }
}

function makeRow(job) {
  const button = el('button', { class: 'cancel', type: 'button', text: 'Cancel', title: `cancel job ${job.id}` });
  button.addEventListener('click', () => cancelClicked(job.id, button));
  const tr = el(
    'tr',
    { 'data-job-id': job.id },
    el('td', { class: 'id', title: job.id, text: job.id }),
    el('td', { class: 'kind', text: job.kind }),
    el('td', {}, el('span', { class: 'state' })),
    el('td', { class: 'parts' }),
    el('td', { class: 'num progress' }),
    el('td', { class: 'num submitted' }),
    el('td', { class: 'num duration' }),
    el('td', { class: 'reason' }),
    el('td', { class: 'action' }, button),
  );
  return { tr, button, key: '' };
}

function updateRow(job) {
  let r = rows.get(job.id);
  if (!r) {
    r = makeRow(job);
    rows.set(job.id, r);
  }
  r.job = job;
  r.tr.dataset.state = job.state;
  const stateEl = r.tr.querySelector('.state');
  stateEl.textContent = job.state;
  stateEl.dataset.state = job.state;
  const reason = job.error ? `${job.error.code}: ${job.error.reason}` : '';
  stateEl.title = reason;
  const reasonEl = r.tr.querySelector('.reason');
  reasonEl.textContent = reason;
  reasonEl.title = reason;
  const key = `${job.state}|${(job.partitionStates ?? []).join(',')}|${JSON.stringify(job.partitionCounts)}|${job.partitionsDone}`;
  if (key !== r.key) {
    r.key = key;
    r.tr.querySelector('.parts').replaceChildren(partitionCells(job));
  }
  const done = job.state === 'done' ? job.partitions : job.partitionCounts ? job.partitionCounts.done : job.partitionsDone;
  r.tr.querySelector('.progress').textContent = `${done} / ${job.partitions}`;
  r.tr.querySelector('.submitted').textContent = ago(job.submittedAt);
  r.tr.querySelector('.duration').textContent = job.durationS !== null ? fmtDuration(job.durationS) : `${fmtDuration((Date.now() - Date.parse(job.submittedAt)) / 1000)} …`;
  if (!cancelling.has(job.id)) {
    r.button.hidden = !isLive(job);
    r.button.disabled = !isLive(job);
    if (r.button.dataset.armed !== 'true') r.button.textContent = 'Cancel';
  }
}

async function refreshJobs() {
  const [live, recent] = await Promise.all([getJson('v1/jobs?state=queued,running&limit=200'), getJson('v1/jobs?limit=50')]);
  const byId = new Map();
  for (const j of [...live, ...recent]) byId.set(j.id, j);
  // Unfinished jobs first (the ones to act on), then the finished ones; newest first in each.
  const list = [...byId.values()].sort((a, b) => Number(isLive(b)) - Number(isLive(a)) || Date.parse(b.submittedAt) - Date.parse(a.submittedAt));
  for (const j of list) updateRow(j);
  for (const id of [...rows.keys()]) if (!byId.has(id)) {
    rows.get(id).tr.remove();
    rows.delete(id);
  }
  const tbody = $('jobs').tBodies[0];
  const order = list.map((j) => rows.get(j.id).tr);
  if (order.some((tr, i) => tbody.children[i] !== tr)) tbody.append(...order);
  $('jobs-caption').textContent = `${live.length} unfinished · ${list.length - live.length} most recent finished`;
}

let jobsTimer = null;
/** A refresh soon (events arrive in bursts: at most one refresh a second). */
function refreshJobsSoon() {
  if (jobsTimer !== null) return;
  jobsTimer = setTimeout(() => {
    jobsTimer = null;
    void refreshJobs().catch((e) => console.warn(e));
  }, 1000);
}

// ─── Event stream ─────────────────────────────────────────────────────────────────────────────

const EVENT_TYPES = ['job.submitted', 'job.started', 'job.partition', 'job.done', 'job.failed', 'job.cancelled', 'device.measurement', 'pacer', 'gap'];
const FEED_MAX = 40;

function feed(e) {
  const list = $('events');
  const time = clock(Date.parse(e.time) / 1000);
  // device.measurement: the pacer found a device's busy time misleading (its reason names the device and the cause).
  const detail = e.type === 'job.submitted' ? `${e.kind}, ${e.partitions} partitions` : e.type === 'gap' ? `events missed while disconnected: ${e.reason}` : e.type === 'device.measurement' ? e.reason : e.reason ? `${e.code}: ${e.reason}` : '';
  const li = el('li', { class: `ev-${e.type.split('.')[1] ?? e.type}` }, el('span', { class: 't', text: time }), `${e.type} ${e.id ?? ''} ${detail}`);
  list.prepend(li);
  while (list.children.length > FEED_MAX) list.lastElementChild.remove();
}

let events = null;
function connectEvents() {
  events?.close();
  const es = new EventSource(`v1/events${token ? `?access_token=${encodeURIComponent(token)}` : ''}`);
  events = es;
  es.onopen = () => setConnection('live', 'live');
  es.onerror = () => setConnection('down', 'reconnecting…');
  for (const type of EVENT_TYPES) {
    es.addEventListener(type, (msg) => {
      const e = JSON.parse(msg.data);
      if (type === 'pacer') {
        showPacer(e);
        return;
      }
      if (type !== 'job.partition') feed(e);
      if (type !== 'device.measurement') refreshJobsSoon();
    });
  }
}

// ─── Start ────────────────────────────────────────────────────────────────────────────────────

function start() {
  connectEvents();
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
  const canvas = $('waterfall');
  canvas.addEventListener('mousemove', waterfallHover);
  canvas.addEventListener('mouseleave', () => ($('wf-tip').hidden = true));
  new ResizeObserver(() => drawWaterfall()).observe(canvas.parentElement);
  // For tests and the curious: the charts' data.
  window.stoker = { get charts() { return charts; }, samples, get status() { return latest; }, wf };
}

start();

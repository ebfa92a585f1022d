// The jobs table: recent jobs (GET v1/jobs), their partitions, and the Cancel button.
import { api, getJson } from './api.js';
import { $, ago, el, fmtDuration } from './format.js';

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
  // A live job with neither states nor counts has ended on the engine, its end being recorded: the
  // journal's done count lags it, so the row stays as it was until the end lands (it went back a step).
  // (Only after a view that had them: a job on another cluster node has none all along.)
  const detail = Boolean(job.partitionStates || job.partitionCounts);
  const ending = isLive(job) && !detail && r.detail === true;
  if (!ending) r.detail = detail;
  const key = `${job.state}|${(job.partitionStates ?? []).join(',')}|${JSON.stringify(job.partitionCounts)}|${job.partitionsDone}`;
  if (key !== r.key && !ending) {
    r.key = key;
    r.tr.querySelector('.parts').replaceChildren(partitionCells(job));
  }
  const done = job.state === 'done' ? job.partitions : job.partitionCounts ? job.partitionCounts.done : job.partitionsDone;
  if (!ending) r.tr.querySelector('.progress').textContent = `${done} / ${job.partitions}`;
  r.tr.querySelector('.submitted').textContent = ago(job.submittedAt);
  r.tr.querySelector('.duration').textContent = job.durationS !== null ? fmtDuration(job.durationS) : `${fmtDuration((Date.now() - Date.parse(job.submittedAt)) / 1000)} …`;
  if (!cancelling.has(job.id)) {
    r.button.hidden = !isLive(job);
    r.button.disabled = !isLive(job);
    if (r.button.dataset.armed !== 'true') r.button.textContent = 'Cancel';
  }
}

export async function refreshJobs() {
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
export function refreshJobsSoon() {
  if (jobsTimer !== null) return;
  jobsTimer = setTimeout(() => {
    jobsTimer = null;
    void refreshJobs().catch((e) => console.warn(e));
  }, 1000);
}

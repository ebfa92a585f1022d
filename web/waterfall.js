// The waterfall: what ran where over the last WATERFALL_S seconds (GET v1/timeline), drawn on a canvas.
import { $, fmtMs, jobColour } from './format.js';

/** Seconds the waterfall shows. */
export const WATERFALL_S = 180;

export const wf = { timeline: null, boxes: [] };
const LABEL_W = 150;
const AXIS_H = 20;

export function drawWaterfall() {
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

export function waterfallHover(ev) {
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

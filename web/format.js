// Formatting and DOM helpers of the dashboard (no state).

export const $ = (id) => document.getElementById(id);

export function fmtNum(v, digits = 2) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString('en-US');
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(Math.min(digits, 1));
  return v.toFixed(digits);
}

export function fmtBytes(v) {
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

export function fmtMs(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 2 : ms < 100 ? 1 : 0)} ms`;
  return fmtDuration(ms / 1000);
}

export function fmtDuration(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return '–';
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${Math.floor(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} m`;
}

export function fmtPct(v) {
  return v === null || v === undefined || !Number.isFinite(v) ? '–' : `${(v * 100).toFixed(0)} %`;
}

/** Epoch seconds as a local wall-clock time, 14:05:30. */
export function clock(t) {
  return new Date(t * 1000).toLocaleTimeString('en-GB', { hour12: false });
}

export function el(tag, attrs = {}, ...children) {
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
export function jobColour(id, alpha = 1) {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    h ^= id.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  const hue = (h >>> 0) % 360;
  const light = 42 + ((h >>> 9) % 3) * 8;
  return `hsla(${hue}, 62%, ${light}%, ${alpha})`;
}

export function ago(iso) {
  return `${fmtDuration(Math.max(0, (Date.now() - Date.parse(iso)) / 1000))} ago`;
}

// Talking to the server: the token (a server started with server.token answers 401), requests, polling.
import { $ } from './format.js';


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
    tokenChanged?.();
    return true;
  }).finally(() => (asking = null));
  return asking;
}

// The first request without a token goes alone; the others, and the event stream (authKnown),
// wait for its answer: on a server with a token each of the page's first requests was refused
// before the prompt — six 401s in the browser's console.
let first = null;

/** Resolves once the first request has said whether the server needs a token (and it was asked for). */
export function authKnown() {
  return first ?? Promise.resolve();
}

export async function api(path, opts = {}) {
  if (token) return send(path, opts);
  if (first) {
    await first;
    return send(path, opts);
  }
  let done;
  first = new Promise((resolve) => (done = resolve));
  try {
    return await send(path, opts);
  } finally {
    done();
  }
}

async function send(path, opts) {
  const used = token;
  const headers = { ...(opts.headers ?? {}), ...(used ? { authorization: `Bearer ${used}` } : {}) };
  const res = await fetch(path, { cache: 'no-store', ...opts, headers });
  if (res.status !== 401) return res;
  // Sent before the token was given (polls run side by side): retry with it, do not ask again.
  if (token && token !== used) return send(path, opts);
  if (await askToken()) return send(path, opts);
  return res;
}

export async function getJson(path) {
  const res = await api(path);
  if (!res.ok) throw new Error(`${path}: ${res.status}`);
  return res.json();
}

/** Runs `fn` now and then `ms` after each run ends (never two at once). */
export function every(ms, fn) {
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

export function setConnection(state, text) {
  const c = $('conn');
  c.dataset.state = state;
  c.textContent = text;
}

let tokenChanged = null;

/** The token the page holds (null: none asked for yet). */
export function currentToken() {
  return token;
}

/** Calls `fn` when a token is entered (the event stream reconnects with it). */
export function onTokenChange(fn) {
  tokenChanged = fn;
}

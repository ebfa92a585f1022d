/**
 * The dashboard in a real browser: Debian's chromium, headless through playwright-core, against a
 * real `stoker serve` process under load. It checks that the charts render with live, changing
 * data, that the waterfall has bars, and that the Cancel button cancels a job; it saves a
 * screenshot (to STOKER_SCREENSHOT_DIR/dashboard.png too when that is set: the README's picture).
 *
 * Without /usr/bin/chromium the test is skipped with a warning, or fails when
 * STOKER_REQUIRE_BROWSER=1 (CI sets it once it has installed chromium).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, removeDir, startServer, tempDataDir, waitUntil, type ServerProcess } from '../server/helpers.js';

const CHROMIUM = '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const CHARTS = ['occupancy', 'rates', 'waiting', 'inventory', 'memory', 'jobs'];
const SLEEP_ID = 'dashboard-long-sleep';

const haveBrowser = fs.existsSync(CHROMIUM);
const required = process.env['STOKER_REQUIRE_BROWSER'] === '1';
if (!haveBrowser && !required) {
  console.warn(`SKIPPED: test/web/dashboard.browser.test.ts: ${CHROMIUM} is not installed (install it: apt-get install chromium; with STOKER_REQUIRE_BROWSER=1 this fails instead)`);
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resolves with `p`, or rejects after `ms` (for clean-up steps that must not hang the run). */
function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let t: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<undefined>((resolve) => (t = setTimeout(() => resolve(undefined), ms)))]).finally(() => clearTimeout(t));
}

/** Closes the browser, stops the server (kill -9 if it does not stop in 30 s), removes both folders. */
async function tearDown(context: BrowserContext | undefined, server: ServerProcess | undefined, profileDir: string | undefined, dataDir: string | undefined): Promise<void> {
  if (context) await within(context.close(), 20_000);
  if (server) {
    const code = await within(server.stop(), 30_000);
    if (code === undefined) await server.crash();
  }
  if (profileDir) removeDir(profileDir);
  if (dataDir) removeDir(dataDir);
}

/** Each chart's data-points and data-last. */
async function chartState(page: Page): Promise<Record<string, { points: number; last: string | null; canvases: number }>> {
  return page.evaluate((names) => {
    // Runs in the page (the test's own types have no DOM).
    type El = { dataset: Record<string, string | undefined>; querySelectorAll(sel: string): { length: number } };
    const doc = (globalThis as unknown as { document: { getElementById(id: string): El | null } }).document;
    const out: Record<string, { points: number; last: string | null; canvases: number }> = {};
    for (const n of names) {
      const el = doc.getElementById(`chart-${n}`);
      out[n] = { points: Number(el?.dataset['points'] ?? 0), last: el?.dataset['last'] ?? null, canvases: el?.querySelectorAll('canvas').length ?? 0 };
    }
    return out;
  }, CHARTS);
}

describe.skipIf(!haveBrowser && !required)('the dashboard in headless chromium', () => {
  let server: ServerProcess | undefined;
  let dataDir: string | undefined;
  let profileDir: string | undefined;
  let context: BrowserContext | undefined;
  let page: Page;
  let loadStop = false;
  let load: Promise<void> | undefined;
  const loadErrors: string[] = [];
  const pageErrors: string[] = [];
  let submitted = 0;

  beforeAll(async () => {
    if (!haveBrowser) throw new Error(`${CHROMIUM} is not installed and STOKER_REQUIRE_BROWSER=1: install it: apt-get install chromium`);
    dataDir = tempDataDir();
    server = await startServer(dataDir, [], { STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '5' });
    const base = server.url;
    // The job to cancel from the page: one long preparation per partition.
    const sleep = await http(base, 'POST', '/v1/jobs', { id: SLEEP_ID, kind: 'sleep', partitions: 2, input: { prepareMs: 60_000 } });
    expect(sleep.status, JSON.stringify(sleep.body)).toBe(202);
    // Background load: a small ntt-proof job every ~300 ms while the test runs (bounded); for the
    // README's picture, jobs of 2^19 coefficients (~0.1 s of device time a partition) keep the workers busy.
    const logN = process.env['STOKER_SCREENSHOT_DIR'] ? 19 : 12;
    load = (async () => {
      for (let i = 0; !loadStop && i < 1000; i++) {
        try {
          const r = await http(base, 'POST', '/v1/jobs', { id: `load-${i}`, kind: 'ntt-proof', partitions: 4, input: { logN, synthesisMs: 200, seed: i } });
          if (r.status === 202) submitted++;
          else loadErrors.push(`${r.status} ${JSON.stringify(r.body)}`);
        } catch (e) {
          if (!loadStop) loadErrors.push(String(e));
        }
        await pause(300);
      }
    })();
    profileDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-chromium-'));
    context = await chromium.launchPersistentContext(profileDir, { executablePath: CHROMIUM, headless: true, args: FLAGS, viewport: { width: 1400, height: 1000 }, timeout: 60_000 });
    page = context.pages()[0] ?? (await context.newPage());
    page.on('pageerror', (e) => pageErrors.push(`page error: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') pageErrors.push(`console error: ${m.text()}`);
    });
    const res = await page.goto(`${base}/`, { timeout: 30_000 });
    expect(res?.status()).toBe(200);
  }, 120_000);

  afterAll(async () => {
    loadStop = true;
    await within(load ?? Promise.resolve(), 10_000);
    await tearDown(context, server, profileDir, dataDir);
  }, 90_000);

  it('renders every chart with live, changing data', async () => {
    // Every chart has drawn (a uPlot canvas) and holds a few points.
    const first = await waitUntil(
      async () => {
        const s = await chartState(page);
        return CHARTS.every((n) => (s[n]?.points ?? 0) >= 3 && (s[n]?.canvases ?? 0) > 0) ? s : undefined;
      },
      45_000,
      'every chart to hold 3 points',
      250,
    );
    // Live: every chart gains points, and some series' latest values change.
    await waitUntil(
      async () => {
        const s = await chartState(page);
        return CHARTS.every((n) => (s[n]?.points ?? 0) >= (first[n]?.points ?? 0) + 3) ? true : undefined;
      },
      45_000,
      'every chart to gain 3 points',
      250,
    );
    // (The wait is the check: it fails unless some chart's latest value changes.)
    await waitUntil(
      async () => {
        const s = await chartState(page);
        return CHARTS.some((n) => s[n]?.last !== first[n]?.last) ? true : undefined;
      },
      30_000,
      'a chart value to change',
      250,
    );
    // Real data behind it: jobs finish, so the jobs-per-minute chart's "done" series rises above 0.
    await waitUntil(
      async () => {
        const last = JSON.parse((await chartState(page))['jobs']?.last ?? '[]') as (number | null)[];
        return (last[0] ?? 0) > 0 ? true : undefined;
      },
      45_000,
      'jobs finished per minute > 0',
      500,
    );
    // The pacer panel shows a mode and a measured capacity.
    // The mode in words that say what it means; the raw mode stays in data-mode.
    expect(['bootstrap', 'steady', 'idle', 'blocked', 'hold']).toContain(await page.getAttribute('#pacer-mode', 'data-mode'));
    expect(['measuring', 'pacing', 'all dispatched', 'idle', 'blocked', 'holding']).toContain(await page.textContent('#pacer-mode'));
    await waitUntil(async () => ((await page.textContent('#p-capacity')) ?? '–').includes('/s') || undefined, 30_000, 'a measured capacity', 250);
  }, 180_000);

  it('draws the waterfall with bars', async () => {
    // (The wait is the check that bars are drawn.)
    await waitUntil(async () => (Number(await page.getAttribute('#waterfall', 'data-bars')) > 0 ? true : undefined), 30_000, 'waterfall bars', 250);
    expect(Number(await page.getAttribute('#waterfall', 'data-lanes'))).toBeGreaterThanOrEqual(2);
  }, 60_000);

  it('lists the sleep job and cancels it with its Cancel button', async () => {
    const s = server as ServerProcess;
    const row = page.locator(`tr[data-job-id="${SLEEP_ID}"]`);
    await row.waitFor({ state: 'attached', timeout: 30_000 });
    expect(['queued', 'running']).toContain(await row.getAttribute('data-state'));
    // Cancel asks once more before it acts: the first click only arms the button.
    await row.locator('button.cancel').click({ timeout: 30_000 });
    expect(await row.locator('button.cancel').textContent()).toBe('Confirm cancel?');
    await pause(300);
    expect((await http(s.url, 'GET', `/v1/jobs/${SLEEP_ID}`)).body?.state).not.toBe('cancelled');
    await row.locator('button.cancel').click({ timeout: 30_000 });
    const job = await waitUntil(
      async () => {
        const r = await http(s.url, 'GET', `/v1/jobs/${SLEEP_ID}`);
        return r.body?.state === 'cancelled' ? r.body : undefined;
      },
      10_000,
      'the job to be cancelled',
      100,
    );
    expect(job.error?.code).toBe('E_CANCELLED');
    await waitUntil(async () => ((await row.getAttribute('data-state')) === 'cancelled' ? true : undefined), 10_000, 'the table to show cancelled', 100);
    expect(await row.locator('.state').textContent()).toBe('cancelled');
    // The reason is in the table, not only in a tooltip.
    expect(await row.locator('.reason').textContent()).toBe('E_CANCELLED: cancelled on request');
    await waitUntil(async () => ((await row.locator('button.cancel').isHidden()) ? true : undefined), 10_000, 'the Cancel button to go', 100);
  }, 90_000);

  it('shows the same occupancy as the API, and a reloaded page shows the history at once', async () => {
    const s = server as ServerProcess;
    // The chart's latest point is the history sample of the same time, to the 3 decimals it keeps.
    const shown = await waitUntil(
      async () => {
        const t = Number(await page.getAttribute('#chart-occupancy', 'data-t'));
        const last = JSON.parse((await page.getAttribute('#chart-occupancy', 'data-last')) ?? 'null') as number[] | null;
        return t > 0 && last ? { t, last } : undefined;
      },
      30_000,
      'an occupancy point',
      250,
    );
    const h = (await http(s.url, 'GET', '/v1/history?since=15m')).body as { samples: { t: number; occupancy: number[]; workerOccupancy: number[][] }[] };
    const sample = h.samples.find((x) => x.t === shown.t * 1000);
    expect(sample, `a history sample at ${shown.t * 1000}`).toBeDefined();
    const api = [...(sample?.occupancy ?? []), ...(sample?.workerOccupancy.flat() ?? [])];
    expect(shown.last.length).toBe(api.length);
    shown.last.forEach((v, i) => expect(Math.abs(v - (api[i] as number))).toBeLessThanOrEqual(0.0005));
    for (const v of api) expect(v).toBeLessThanOrEqual(1);

    // Per kind: a row for each kind the server runs; the cluster panel only in cluster mode.
    await page.locator('#kinds tr[data-kind="ntt-proof"]').waitFor({ state: 'attached', timeout: 10_000 });
    expect(await page.locator('#kinds tr[data-kind="sleep"]').count()).toBe(1);
    expect(await page.locator('#cluster-panel').isHidden()).toBe(true);

    // Reload: the charts fill from the server's history, not from what the new tab polls.
    const held = await waitUntil(
      async () => {
        const n = ((await http(s.url, 'GET', '/v1/history?since=15m')).body as { samples: unknown[] }).samples.length;
        return n >= 15 ? n : undefined;
      },
      30_000,
      '15 s of history',
      500,
    );
    const t0 = Date.now();
    await page.reload({ timeout: 30_000 });
    const points = await waitUntil(
      async () => {
        const n = (await chartState(page))['occupancy']?.points ?? 0;
        return n >= held - 2 ? n : undefined;
      },
      10_000,
      'the reloaded page to show the history',
      100,
    );
    // Far more points than the seconds since the reload: they came from the history.
    expect(points).toBeGreaterThan((Date.now() - t0) / 1000 + 5);
  }, 90_000);

  it('saves a screenshot, with no errors on the page and the load accepted', async () => {
    const dir = process.env['STOKER_SCREENSHOT_DIR'];
    if (dir) {
      // The README's picture: let about 45 s of data gather first.
      await waitUntil(async () => ((await chartState(page))['rates']?.points ?? 0) >= 45 || undefined, 120_000, '45 s of chart data', 500);
    }
    // Kept for a look after the run (one file, overwritten by the next run).
    const file = path.join(os.tmpdir(), 'stoker-dashboard.png');
    await page.screenshot({ path: file, fullPage: true, timeout: 30_000 });
    const png = fs.readFileSync(file);
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    expect(png.length).toBeGreaterThan(20_000);
    if (dir) {
      fs.mkdirSync(dir, { recursive: true });
      fs.copyFileSync(file, path.join(dir, 'dashboard.png'));
    }
    console.log(`dashboard screenshot: ${file}${dir ? ` and ${path.join(dir, 'dashboard.png')}` : ''} (${submitted} load jobs submitted)`);
    expect(pageErrors).toEqual([]);
    expect(loadErrors).toEqual([]);
    expect(submitted).toBeGreaterThan(10);
  }, 180_000);
});

describe.skipIf(!haveBrowser && !required)('the dashboard of a server with a token', () => {
  const TOKEN = 'browser-token-0123456789abcdef';
  let server: ServerProcess | undefined;
  let dataDir: string | undefined;
  let profileDir: string | undefined;
  let context: BrowserContext | undefined;

  beforeAll(async () => {
    if (!haveBrowser) throw new Error(`${CHROMIUM} is not installed and STOKER_REQUIRE_BROWSER=1: install it: apt-get install chromium`);
    dataDir = tempDataDir();
    server = await startServer(dataDir, [], { STOKER_SERVER_TOKEN: TOKEN, STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '2' });
    profileDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-chromium-'));
    context = await chromium.launchPersistentContext(profileDir, { executablePath: CHROMIUM, headless: true, args: FLAGS, viewport: { width: 1200, height: 900 }, timeout: 60_000 });
  }, 120_000);

  afterAll(async () => {
    await tearDown(context, server, profileDir, dataDir);
  }, 90_000);

  it('asks for the token once, then shows the data and follows the event stream', async () => {
    const page = (context as BrowserContext).pages()[0] ?? (await (context as BrowserContext).newPage());
    const prompts: string[] = [];
    page.on('dialog', (d) => {
      prompts.push(d.message());
      void d.accept(TOKEN);
    });
    // Requests answered 401: only the first, which asks for the token (each of the page's first
    // requests was refused before the prompt, six 401s in the console).
    const refused: string[] = [];
    page.on('response', (r) => {
      if (r.status() === 401) refused.push(new URL(r.url()).pathname);
    });
    const res = await page.goto(`${(server as ServerProcess).url}/`, { timeout: 30_000 });
    expect(res?.status()).toBe(200);
    // The charts fill (the API answered with the token) and the event stream is live.
    await waitUntil(async () => (((await chartState(page))['occupancy']?.points ?? 0) >= 2 ? true : undefined), 30_000, 'charts with data', 250);
    await waitUntil(async () => ((await page.getAttribute('#conn', 'data-state')) === 'live' ? true : undefined), 15_000, 'the event stream live', 250);
    // A job submitted now shows up through the stream (its events carry ?access_token=).
    expect((await http((server as ServerProcess).url, 'POST', '/v1/jobs', { id: 'tok-1', kind: 'sleep', partitions: 1 }, { authorization: `Bearer ${TOKEN}` })).status).toBe(202);
    await page.locator('tr[data-job-id="tok-1"]').waitFor({ state: 'attached', timeout: 15_000 });
    expect(prompts).toHaveLength(1);
    expect(prompts[0]).toContain('server.token');
    expect(refused).toHaveLength(1);
  }, 90_000);
});

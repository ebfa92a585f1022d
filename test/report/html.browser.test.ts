/**
 * The HTML pages of `stoker simulate --html` and `stoker plan --html` in a real browser (Debian's
 * chromium, headless through playwright-core), opened from file:// with the network off: the
 * charts draw without a script error, and hovering a plan point names its setting.
 *
 * Without /usr/bin/chromium the test is skipped with a warning, or fails when
 * STOKER_REQUIRE_BROWSER=1 (CI sets it once it has installed chromium).
 */
import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run, tempDir } from '../cli/helpers.js';

const CHROMIUM = '/usr/bin/chromium';
const haveBrowser = fs.existsSync(CHROMIUM);
const required = process.env['STOKER_REQUIRE_BROWSER'] === '1';
if (!haveBrowser && !required) {
  console.warn(`SKIPPED: test/report/html.browser.test.ts: ${CHROMIUM} is not installed (install it: apt-get install chromium; with STOKER_REQUIRE_BROWSER=1 this fails instead)`);
}

const tmp = tempDir();
let browser: Browser | undefined;

describe.runIf(haveBrowser || required)('HTML reports in a browser', () => {
  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    tmp.cleanup();
  });

  /** Opens a page offline; returns it with the script errors it raised. */
  async function open(file: string) {
    const context = await (browser as Browser).newContext({ offline: true, viewport: { width: 1280, height: 1000 } });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    await page.goto(`file://${file}`);
    await page.waitForFunction(() => (globalThis as unknown as { document: { querySelectorAll(s: string): { length: number } } }).document.querySelectorAll('.uplot canvas').length > 0);
    return { page, errors, context };
  }

  it('plan --html: two charts, and a hovered point names its setting', async () => {
    const file = path.join(tmp.dir, 'plan.html');
    const r = await run('plan', 'seed', '--seeds', '1', '--targets', '2,4', '--threads', '1', '--html', file);
    expect(r.code, r.err).toBe(0);
    const { page, errors, context } = await open(file);
    try {
      expect(await page.locator('#chart-throughput canvas').count()).toBe(1);
      expect(await page.locator('#chart-latency canvas').count()).toBe(1);
      const box = await page.locator('#chart-throughput .u-over').boundingBox();
      expect(box).not.toBeNull();
      const b = box as { x: number; y: number; width: number; height: number };
      // Across the plot until the cursor is by a point (where the points lie depends on the sweep).
      let text = '';
      for (let i = 1; i < 40 && !/\S/.test(text); i++) {
        for (const fy of [0.5, 0.25, 0.75, 0.1, 0.9]) {
          await page.mouse.move(b.x + (b.width * i) / 40, b.y + b.height * fy);
          text = (await page.locator('#hover').textContent()) ?? '';
          if (/\S/.test(text)) break;
        }
      }
      expect(text).toMatch(/^stoker, target \d+, budget .+, prep cap .+, workers \d+/);
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  }, 60_000);

  it('simulate --html: four charts per scenario', async () => {
    const file = path.join(tmp.dir, 'seed.html');
    expect((await run('simulate', 'seed', '--pacer', 'stoker,classic', '--html', file)).code).toBe(0);
    const { page, errors, context } = await open(file);
    try {
      expect(await page.locator('.chart canvas').count()).toBe(4);
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  }, 60_000);
});

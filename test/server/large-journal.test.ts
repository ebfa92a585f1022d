/**
 * Status and scrapes cost the same with 200,000 journaled jobs as with none: the journal keeps
 * its counts in memory (counted once at open, kept as jobs change) instead of querying per
 * request. The test prints both timings side by side (a benchmark's numbers, not a timed
 * assertion) and checks that the counts are right.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
// Thread entry points exist only as compiled JavaScript: the server is imported from dist/.
import { loadConfig } from '../../dist/server/config.js';
import { startServer, type RunningServer } from '../../dist/server/serve.js';
import { Journal } from '../../src/server/journal.js';
import { metricValue, removeDir, tempDataDir } from './helpers.js';

const JOBS = 200_000;

/** A journal of `n` done sleep jobs, written straight into the file (Journal.insert fsyncs each). */
function seed(dir: string, n: number): void {
  Journal.open(dir).close();
  const db = new Database(path.join(dir, 'stoker.db'));
  const now = Date.now();
  const insert = db.prepare(`INSERT INTO jobs (id, kind, priority, partitions, input, body_hash, state, submitted_at, started_at, finished_at, result, partitions_done)
    VALUES (?, 'sleep', 'normal', 1, '{}', 'x', 'done', ?, ?, ?, '{"partitions":1,"total":0}', 1)`);
  db.transaction(() => {
    for (let i = 0; i < n; i++) insert.run(`old-${i}`, now, now, now);
  })();
  db.close();
}

async function timed(base: string, p: string, n: number): Promise<{ medianMs: number; body: string }> {
  const ms: number[] = [];
  let body = '';
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    body = await (await fetch(`${base}${p}`)).text();
    ms.push(performance.now() - t0);
  }
  ms.sort((a, b) => a - b);
  return { medianMs: ms[Math.floor(n / 2)] as number, body };
}

describe('a large journal', () => {
  const dirs: string[] = [];
  const servers: RunningServer[] = [];
  afterAll(async () => {
    for (const s of servers) await s.close();
    for (const d of dirs) removeDir(d);
  });

  it(`scrape and status cost the same with ${JOBS.toLocaleString('en-US')} journaled jobs as with none`, async () => {
    const small = tempDataDir();
    const large = tempDataDir();
    dirs.push(small, large);
    seed(large, JOBS);
    expect(fs.statSync(path.join(large, 'stoker.db')).size).toBeGreaterThan(10_000_000);
    const start = async (dataDir: string) => {
      const s = await startServer(loadConfig({ env: {}, values: { dataDir, server: { port: 0, host: '127.0.0.1' }, prepare: { threads: 1 } } }));
      servers.push(s);
      return s;
    };
    const a = await start(small);
    const b = await start(large);
    const rows: string[] = [];
    for (const [what, p] of [['GET /metrics', '/metrics'], ['GET /v1/status', '/v1/status']] as const) {
      await timed(a.url, p, 3);
      await timed(b.url, p, 3);
      const sa = await timed(a.url, p, 30);
      const sb = await timed(b.url, p, 30);
      rows.push(`${what}: ${sa.medianMs.toFixed(2)} ms with 0 jobs, ${sb.medianMs.toFixed(2)} ms with ${JOBS} (×${(sb.medianMs / sa.medianMs).toFixed(2)})`);
      if (p === '/metrics') {
        expect(metricValue(sb.body, 'stoker_jobs', { kind: 'sleep', state: 'done' })).toBe(JOBS);
        expect(metricValue(sa.body, 'stoker_jobs', { kind: 'sleep', state: 'done' })).toBe(0);
      } else {
        expect((JSON.parse(sb.body) as { jobs: { done: number } }).jobs.done).toBe(JOBS);
      }
    }
    console.log(`median of 30 requests each, one run side by side:\n  ${rows.join('\n  ')}`);
  }, 120_000);
});
